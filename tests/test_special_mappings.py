"""[uprobes] and [uprobes-trampoline] under mmap/munmap/mprotect/madvise: the kernel's answers.

Every expected value was measured on Linux 6.18 (x86_64, unprivileged where it matters)
with a tracefs uprobe on a ``ret`` (stepped out of line: the [uprobes] XOL page, mapped
VM_EXEC|VM_MAYEXEC) and on a nop5 (optimized: the [uprobes-trampoline] page, VM_READ|
VM_EXEC|VM_MAYREAD|VM_MAYEXEC).  mprotect may not grant what VM_MAY* lacks (EACCES);
the pages are not sealed, so munmap and MAP_FIXED replace them like any mapping.
"""

from __future__ import annotations

import errno

import pytest

from emu import Machine
from kernel_model.kernel.signals import SIGNALS

PROT_NONE, PROT_R, PROT_W, PROT_X = 0, 1, 2, 4
MAP_PRIVATE_ANON, MAP_FIXED, MAP_FIXED_NOREPLACE = 0x22, 0x10, 0x100000
SYS_MMAP, SYS_MPROTECT, SYS_MUNMAP, SYS_MADVISE, SYS_GETPID = 9, 10, 11, 28, 39
MADV_DONTNEED = 4
PAGES = {"[uprobes]": "f_ret", "[uprobes-trampoline]": "f_nop5"}


def guest(nr: int, arg2: int, arg3: int, then: str = "") -> str:
    """Hit both probes (twice: the second nop5 hit runs optimized), learn the special
    page's address from getpid (the test answers it), make one syscall on that page,
    keep its result in r15, then run ``then``."""
    return f"""
_start:
    call f_ret
    call f_nop5
    call f_ret
    call f_nop5
    mov eax, {SYS_GETPID}
    syscall
    mov rdi, rax
    mov rsi, 4096
    mov rdx, {arg2}
    mov r10, {arg3}
    mov r8, -1
    xor r9, r9
    mov eax, {nr}
    syscall
    mov r15, rax
{then}
    mov eax, 231
    xor edi, edi
    syscall
f_ret:
    ret
f_nop5:
    .byte 0x0f, 0x1f, 0x44, 0x00, 0x00
    ret
"""


def run(page: str, nr: int, arg2: int, arg3: int = 0, then: str = ""):
    m = Machine.from_asm(guest(nr, arg2, arg3, then), kernel="6.18")
    for sym in PAGES.values():
        m.uprobes.register(sym, handler=lambda ctx: None)

    def getpid_answers_the_page(task, regs, *_):
        vma = next(v for v in task.process.mem.vmas if v.name == page)
        return vma.start

    m.syscalls.register(SYS_GETPID, getpid_answers_the_page)
    r = m.run(max_insns=100_000)
    return m, r


def result(m) -> int:
    v = m.regs.r15
    return v - (1 << 64) if v >> 63 else v


CASES = [
    # page, syscall, rsi-after-len (prot / advice / mmap prot), r10 (mmap flags), expected
    ("[uprobes]", SYS_MPROTECT, PROT_R | PROT_W, 0, -errno.EACCES),
    ("[uprobes]", SYS_MPROTECT, PROT_R | PROT_X, 0, -errno.EACCES),
    ("[uprobes]", SYS_MPROTECT, PROT_R, 0, -errno.EACCES),
    ("[uprobes]", SYS_MPROTECT, PROT_NONE, 0, 0),
    ("[uprobes]", SYS_MPROTECT, PROT_X, 0, 0),
    ("[uprobes-trampoline]", SYS_MPROTECT, PROT_R | PROT_W, 0, -errno.EACCES),
    ("[uprobes-trampoline]", SYS_MPROTECT, PROT_W | PROT_X, 0, -errno.EACCES),
    ("[uprobes-trampoline]", SYS_MPROTECT, PROT_R | PROT_X, 0, 0),
    ("[uprobes-trampoline]", SYS_MPROTECT, PROT_R, 0, 0),
    ("[uprobes-trampoline]", SYS_MPROTECT, PROT_NONE, 0, 0),
    ("[uprobes]", SYS_MUNMAP, 0, 0, 0),
    ("[uprobes-trampoline]", SYS_MUNMAP, 0, 0, 0),
    ("[uprobes]", SYS_MADVISE, MADV_DONTNEED, 0, 0),
    ("[uprobes-trampoline]", SYS_MADVISE, MADV_DONTNEED, 0, 0),
    ("[uprobes]", SYS_MMAP, PROT_R | PROT_W, MAP_PRIVATE_ANON | MAP_FIXED_NOREPLACE, -errno.EEXIST),
    ("[uprobes-trampoline]", SYS_MMAP, PROT_R | PROT_W, MAP_PRIVATE_ANON | MAP_FIXED_NOREPLACE, -errno.EEXIST),
]


@pytest.mark.parametrize(
    "page,nr,arg2,arg3,expected", CASES, ids=[f"{c[0]}-nr{c[1]}-{c[2]:#x}-{c[3]:#x}" for c in CASES]
)
def test_syscall_on_special_page_gets_the_kernels_answer(page, nr, arg2, arg3, expected):
    m, r = run(page, nr, arg2, arg3)
    assert r.reason == "exit", r.describe()
    assert result(m) == expected, f"{page} nr {nr}: expected {expected}, got {result(m)}"


@pytest.mark.parametrize("page", list(PAGES))
def test_map_fixed_replaces_the_special_page(page):
    m, r = run(page, SYS_MMAP, PROT_R | PROT_W, MAP_PRIVATE_ANON | MAP_FIXED)
    start = result(m)
    vma = m.mem.find_vma(start)
    assert r.reason == "exit", r.describe()
    assert (vma.name, vma.perms(), vma.special) == ("", "rw-p", False), (
        f"expected an anonymous rw-p mapping at {start:#x}, got {vma.name!r} {vma.perms()}"
    )


@pytest.mark.parametrize("page", list(PAGES))
def test_munmap_removes_the_special_page(page):
    m, _ = run(page, SYS_MUNMAP, 0)
    assert not any(v.name == page for v in m.mem.vmas), m.mem.maps()


def test_out_of_line_step_after_the_xol_page_is_replaced_and_unmapped_is_sigsegv():
    """The host kernel: the step jumps to the slot's address, now unmapped - SIGSEGV."""
    then = """
    mov rdi, r15
    mov rsi, 4096
    mov eax, 11
    syscall
    call f_ret
"""
    m, r = run("[uprobes]", SYS_MMAP, PROT_R | PROT_W | PROT_X, MAP_PRIVATE_ANON | MAP_FIXED, then)
    assert (r.reason, r.signal) == ("signal", SIGNALS["SIGSEGV"]), r.describe()
    assert 0x7FFFFFFFE000 <= r.fault_addr < 0x7FFFFFFFF000, (
        f"expected a fault in the old XOL page 0x7fffffffe000, got {r.fault_addr:#x}"
    )


def test_first_step_of_another_probe_after_the_xol_page_is_unmapped_is_sigsegv():
    """Was: a GuestFault traceback when the model filled a slot in the unmapped page.
    The host kernel fills its own page, the jump there faults: SIGSEGV at the slot, the
    task back at the probed instruction (arch_uprobe_abort_xol)."""
    src = """
_start:
    call f_ret
    mov rdi, 0x7fffffffe000
    mov rsi, 4096
    mov eax, 11
    syscall
    call f_ret2
    mov eax, 231
    xor edi, edi
    syscall
f_ret:
    ret
f_ret2:
    ret
"""
    m = Machine.from_asm(src, kernel="6.18")
    m.uprobes.register("f_ret", handler=lambda ctx: None)
    m.uprobes.register("f_ret2", handler=lambda ctx: None)
    r = m.run(max_insns=10_000)
    assert (r.reason, r.signal, r.rip) == ("signal", SIGNALS["SIGSEGV"], m.resolve("f_ret2")), r.describe()
    assert r.fault_addr == 0x7FFFFFFFE080, f"host: si_addr 0x7fffffffe080 (slot 1), got {r.fault_addr:#x}"
