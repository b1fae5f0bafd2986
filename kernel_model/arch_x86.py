"""The x86 part of uprobes at hit time: emulation, out-of-line single-step fixups,
return-address hijack and the uretprobe trampoline bytes.

Mirrors arch/x86/kernel/uprobes.c: ``branch_emulate_op`` / ``push_emulate_op`` (the
emulated classes), ``arch_uprobe_pre_xol`` / ``arch_uprobe_post_xol`` /
``arch_uprobe_abort_xol`` (the XOL single-step), ``arch_uretprobe_hijack_return_addr``
and ``arch_uretprobe_is_alive``.  Instruction *analysis* lives in ``insn_x86``.
All functions take the task's pt_regs (``emu.regs.PtRegs``) and the process memory; none
touches Unicorn.
"""

from __future__ import annotations

from emu.mm_types import GuestFault
from emu.regs import TF

from .insn_x86 import FIX_CALL, FIX_IP, FIX_SETF, ArchUprobe, jcc_taken

UPROBE_SWBP_INSN = b"\xcc"
UPROBE_XOL_SLOT_BYTES = 128
MAX_UINSN_BYTES = 16
NR_URETPROBE, NR_UPROBE = 335, 336

# The 6.11+ uretprobe trampoline (section 5.1): push rax; push rcx; push r11;
# mov $335,%rax; syscall; pop r11; pop rcx; ret; (6.18+: int3 as SLS barrier)
URETPROBE_TRAMPOLINE = bytes.fromhex("50 51 4153 48c7c04f010000 0f05 415b 59 c3".replace(" ", ""))
URETPROBE_SYSCALL_CHECK = 13      # offset of `pop %r11`, the only valid sys_uretprobe caller


def uretprobe_trampoline(profile) -> bytes:
    """``arch_uretprobe_trampoline()``: bytes for XOL slot 0 of a 64-bit task."""
    if profile.uretprobe_trampoline == "int3":
        return UPROBE_SWBP_INSN
    return URETPROBE_TRAMPOLINE + (b"\xcc" if profile.trampoline_sls_int3 else b"")


# ------------------------------------------------------------------ emulation

def emulate_push_stack(regs, mem, value: int) -> bool:
    """Push 8 bytes as the task would; False (nothing changed) if the write faults."""
    new_sp = (regs.rsp - 8) & 0xFFFFFFFFFFFFFFFF
    try:
        mem.write_u64(new_sp, value)
    except GuestFault:
        return False
    regs.rsp = new_sp
    return True


def branch_emulate_op(au: ArchUprobe, regs, mem) -> bool:
    """nop / jmp / call / jcc without single-stepping (flags are never modified)."""
    new_ip = (regs.rip + au.ilen) & 0xFFFFFFFFFFFFFFFF
    offs = au.offs
    if au.kind == "call":
        if not emulate_push_stack(regs, mem, new_ip):
            return False            # falls back to XOL of the mangled `call +0`
    elif au.kind == "jcc" and not jcc_taken(au.opc1, regs.eflags):
        offs = 0
    regs.rip = (new_ip + offs) & 0xFFFFFFFFFFFFFFFF
    return True


def push_emulate_op(au: ArchUprobe, regs, mem) -> bool:
    """push %reg: the value as saved at the trap (push %rsp pushes the old rsp)."""
    if not emulate_push_stack(regs, mem, getattr(regs, au.push_reg)):
        return False
    regs.rip = (regs.rip + au.ilen) & 0xFFFFFFFFFFFFFFFF
    return True


def arch_uprobe_emulate(au: ArchUprobe, regs, mem) -> bool:
    """``__skip_sstep``: emulate if the instruction class supports it."""
    if au.kind in ("nop", "jmp", "call", "jcc"):
        return branch_emulate_op(au, regs, mem)
    if au.kind == "push":
        return push_emulate_op(au, regs, mem)
    return False


# ------------------------------------------------------------------ out-of-line step

def arch_uprobe_pre_xol(au: ArchUprobe, regs, autask, xol_vaddr: int, vaddr: int) -> None:
    """Point rip at the slot, load the rip-relative scratch register, set TF.

    The slot holds all 16 ``ixol`` bytes.  For a probed ``syscall`` that matters: SYSCALL
    masks TF, the kernel returns by IRET (TF set in pt_regs), and the #DB comes after
    the NEXT instruction - the file's bytes after the syscall, run in the slot; post_xol's
    FIX_IP then applies to wherever that instruction left rip (the machine models the
    trap's timing: ``Machine._syscall``)."""
    if au.scratch:
        autask.saved_scratch_register = getattr(regs, au.scratch)
        setattr(regs, au.scratch, vaddr + au.ilen)
    regs.rip = xol_vaddr
    autask.saved_tf = bool(regs.eflags & TF)
    regs.eflags |= TF


def _riprel_post_xol(au: ArchUprobe, regs, autask) -> None:
    if au.scratch:
        setattr(regs, au.scratch, autask.saved_scratch_register)


def arch_uprobe_post_xol(au: ArchUprobe, regs, mem, autask, xol_vaddr: int, vaddr: int) -> tuple[int, bool]:
    """Fix up after the #DB.  Returns (err, send_sigtrap); err is 0 or -ERESTART
    (already turned into a restart at ``vaddr``, as the kernel does)."""
    send_sigtrap = autask.saved_tf
    err = 0
    if au.kind == "call":
        # branch_post_xol_op: the mangled `call +0` ran after the emulated push faulted
        regs.rsp = (regs.rsp + 8) & 0xFFFFFFFFFFFFFFFF
        err = -1
    else:
        _riprel_post_xol(au, regs, autask)
        if au.fixups & FIX_IP:
            regs.rip = (regs.rip + vaddr - xol_vaddr) & 0xFFFFFFFFFFFFFFFF
        elif au.fixups & FIX_CALL:
            regs.rsp = (regs.rsp + 8) & 0xFFFFFFFFFFFFFFFF
            if not emulate_push_stack(regs, mem, vaddr + au.ilen):
                err = -1
        if au.fixups & FIX_SETF:
            autask.saved_tf = True
    if err:
        regs.rip = vaddr            # restart: the probe hits again
        send_sigtrap = False
    if not autask.saved_tf:
        regs.eflags &= ~TF
    return err, send_sigtrap


def arch_uprobe_abort_xol(au: ArchUprobe, regs, autask, vaddr: int) -> None:
    """The slot instruction faulted: undo, and report at the probed address."""
    if au.kind == "xol":
        _riprel_post_xol(au, regs, autask)
    regs.rip = vaddr
    if not autask.saved_tf:
        regs.eflags &= ~TF


# ------------------------------------------------------------------ uretprobes

def arch_uretprobe_hijack_return_addr(trampoline: int, regs, mem) -> int | None:
    """Replace [sp] with the trampoline; return the original, or None on failure."""
    try:
        orig = mem.read_u64(regs.rsp)
    except GuestFault:
        return None
    if orig == trampoline:
        return orig
    try:
        mem.write_u64(regs.rsp, trampoline)
    except GuestFault:
        return None
    return orig


RP_CHECK_CALL, RP_CHECK_CHAIN_CALL, RP_CHECK_RET = "call", "chain_call", "ret"


def arch_uretprobe_is_alive(ri, ctx: str, regs) -> bool:
    """A return instance is alive while its frame is still on the stack."""
    if ctx == RP_CHECK_CALL:          # sp was just decremented by a call
        return regs.rsp < ri.stack
    return regs.rsp <= ri.stack
