"""The user page fault handler (arch/x86/mm/fault.c: ``do_user_addr_fault``).

The CPU reports a #PF with the faulting address (CR2) and, where the engine can read
it, the hardware error code.  Where it cannot, the code is rebuilt from what the
kernel knows: the page
tables it owns and the instruction at rip.  A page without an entry faulted as a read
(a write that follows faults again as a write to a present read-only page, which ends
the same way the kernel's single write fault does: the page is populated, then either
made writable or the access refused); a present page faulted on a write or an
instruction fetch - a fetch when the faulting address is inside the instruction
(``X86_PF_INSTR``) and the page is not executable.

The result is either nothing (the fault was handled: the instruction runs again) or a
SIGSEGV with ``SEGV_MAPERR`` (no mapping there, and none could grow down to it) or
``SEGV_ACCERR`` (the mapping does not allow the access), ``si_addr`` the address.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_model.arch.x86.lib.insn import insn_length
from kernel_model.arch.x86.mm.pgtable import (
    PAGE_NX,
    PAGE_PRESENT,
    PAGE_RW,
    X86_PF_INSTR,
    X86_PF_PROT,
    X86_PF_USER,
    X86_PF_WRITE,
)
from kernel_model.mm.mm_types import PROT_EXEC, PROT_READ, PROT_WRITE, GuestFault

SEGV_MAPERR, SEGV_ACCERR = 1, 2
_MAX_INSN = 15


@dataclass
class BadArea:
    """A fault that becomes a signal: ``bad_area`` (``SEGV_MAPERR``) or
    ``bad_area_access_error`` (``SEGV_ACCERR``)."""

    address: int
    si_code: int
    error_code: int


def _insn_covers(mem, rip: int, address: int) -> bool:
    """Is ``address`` one of the bytes of the instruction at ``rip``?"""
    if address == rip:
        return True
    if not rip < address < rip + _MAX_INSN:
        return False
    try:
        raw = mem.read(rip, _MAX_INSN)
    except GuestFault:
        return True  # the instruction itself is not readable: its fetch faulted
    return address < rip + insn_length(raw)


def fault_error_code(mem, address: int, rip: int) -> int:
    """The #PF error code, rebuilt (see the module docstring)."""
    pte = mem.pt.ptes.get(address >> 12) if mem.pt is not None else None
    if pte is None or not pte & PAGE_PRESENT:
        return X86_PF_USER | (X86_PF_INSTR if _insn_covers(mem, rip, address) else 0)
    code = X86_PF_PROT | X86_PF_USER
    if pte & PAGE_NX and _insn_covers(mem, rip, address):
        return code | X86_PF_INSTR
    if not pte & PAGE_RW:
        return code | X86_PF_WRITE
    return code | X86_PF_INSTR


def access_error(error_code: int, vma) -> bool:
    """access_error(): may this VMA take the access?  A fetch from a page without an
    entry is a read here, as in the kernel: the page comes in non-executable and the
    retried fetch faults on a present page."""
    if error_code & X86_PF_WRITE:
        return not vma.prot & PROT_WRITE
    if error_code & X86_PF_PROT:
        return True  # a read of a present page faults only if it is not readable
    return not vma.prot & (PROT_READ | PROT_WRITE | PROT_EXEC)


def do_user_addr_fault(
    mem, address: int, rip: int, stack_limit: int, error_code: int | None = None
) -> tuple[BadArea | None, int, bool]:
    """Handle a user page fault at ``address`` (see the module docstring) with the
    CPU's ``error_code`` (rebuilt when None): ``(bad area or None, error code,
    whether the tables changed)``.  The guest runs in user mode: X86_PF_USER is always
    set."""
    if error_code is None:
        error_code = fault_error_code(mem, address, rip)
    error_code |= X86_PF_USER
    vma = mem.find_vma(address)
    if vma is None:
        vma = mem.expand_stack(address, stack_limit)  # lock_mm_and_find_vma -> expand_stack
        if vma is None:
            return BadArea(address, SEGV_MAPERR, error_code), error_code, False
    if access_error(error_code, vma):
        return BadArea(address, SEGV_ACCERR, error_code), error_code, False
    if mem.handle_mm_fault(address, bool(error_code & X86_PF_WRITE)):
        return None, error_code, True
    mem.flush_tlb_mm()  # the tables already allow it: a stale translation
    return None, error_code, False
