"""The x86 part of uprobes: analysis results turned into per-class operations, emulation,
out-of-line single-step fixups, return-address hijack and the uretprobe trampoline bytes.

Mirrors arch/x86/kernel/uprobes.c.  ``arch_uprobe_analyze_insn`` attaches to the
instruction one ``struct uprobe_xol_ops`` (:class:`UprobeXolOps`): ``branch_xol_ops``
(nop / jmp / call / jcc: ``branch_emulate_op``, ``branch_post_xol_op``),
``push_xol_ops`` (``push_emulate_op``) or ``default_xol_ops`` (the rip-relative
``default_pre_xol_op`` / ``default_post_xol_op`` / ``default_abort_op``).  The generic
``arch_uprobe_skip_sstep``, ``arch_uprobe_pre_xol``, ``arch_uprobe_post_xol`` and
``arch_uprobe_abort_xol`` call through ``auprobe.ops`` as the kernel does; nothing at
hit time looks at the class name.  ``arch_uprobe_xol_was_trapped`` tells
``uprobe_deny_signal`` whether a pending signal came from the slot instruction.  Also
``arch_uretprobe_hijack_return_addr`` and ``arch_uretprobe_is_alive``.  The decoding itself lives in ``insn_x86``.

Functions take the task's pt_regs (``kernel_model.arch.x86.ptrace.PtRegs``), the process memory and the
``UprobeTask`` (the kernel's ``current->utask``); none touches Unicorn.  The optimized
nop5/nop10 sites (6.18+) are emulated nops of ``branch_xol_ops`` until
``arch_uprobe_optimize`` rewrites them (``optimize``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

from kernel_model.arch.x86.lib.insn import FIX_CALL, FIX_IP, FIX_SETF, ArchUprobe, analysis_key, analyze_insn, jcc_taken
from kernel_model.arch.x86.ptrace import TF
from kernel_model.mm.mm_types import GuestFault

UPROBE_SWBP_INSN = b"\xcc"
UPROBE_SWBP_OPCODE = UPROBE_SWBP_INSN[0]
UPROBE_XOL_SLOT_BYTES = 128
MAX_UINSN_BYTES = 16
NR_URETPROBE, NR_UPROBE = 335, 336
ERESTART = 512  # include/linux/errno.h: restart the probed instruction
_MASK64 = 0xFFFFFFFFFFFFFFFF

# The 6.11+ uretprobe trampoline (uretprobe_trampoline in arch/x86/kernel/uprobes.c): push rax; push rcx; push r11;
# mov $335,%rax; syscall; pop r11; pop rcx; ret; (6.18+: int3 as SLS barrier)
URETPROBE_TRAMPOLINE = bytes.fromhex("50 51 4153 48c7c04f010000 0f05 415b 59 c3".replace(" ", ""))
URETPROBE_SYSCALL_CHECK = 13  # offset of `pop %r11`, the only valid sys_uretprobe caller


def uretprobe_trampoline(profile) -> bytes:
    """``arch_uretprobe_trampoline()``: bytes for XOL slot 0 of a 64-bit task."""
    if profile.uretprobe_trampoline == "int3":
        return UPROBE_SWBP_INSN
    return URETPROBE_TRAMPOLINE + (b"\xcc" if profile.trampoline_sls_int3 else b"")


# ------------------------------------------------------------------ struct uprobe_xol_ops


@dataclass(frozen=True)
class UprobeXolOps:
    """``struct uprobe_xol_ops``: a member left None is a NULL callback.

    ``emulate(au, regs, mem) -> bool``; ``pre_xol(au, regs, utask) -> int``;
    ``post_xol(au, regs, mem, utask) -> int`` (0 or ``-ERESTART``);
    ``abort(au, regs, utask)``."""

    name: str
    emulate: Callable[..., bool] | None = None
    pre_xol: Callable[..., int] | None = None
    post_xol: Callable[..., int] | None = None
    abort: Callable[..., object] | None = None

    def __repr__(self) -> str:
        return self.name


def emulate_push_stack(regs, mem, value: int) -> bool:
    """Push 8 bytes as the task would; False (nothing changed) if the write faults.
    (The kernel's returns -EFAULT; here True means success.)"""
    new_sp = (regs.rsp - 8) & _MASK64
    try:
        mem.write_u64(new_sp, value)
    except GuestFault:
        return False
    regs.rsp = new_sp
    return True


# -- default_xol_ops: single-step in the slot, rip-relative rewrite ------------------------


def riprel_pre_xol(au: ArchUprobe, regs, utask) -> None:
    """Load the scratch register with the address the rip-relative operand meant."""
    if au.scratch:
        utask.autask.saved_scratch_register = getattr(regs, au.scratch)
        setattr(regs, au.scratch, utask.vaddr + au.ilen)


def riprel_post_xol(au: ArchUprobe, regs, utask) -> None:
    if au.scratch:
        setattr(regs, au.scratch, utask.autask.saved_scratch_register)


def default_pre_xol_op(au: ArchUprobe, regs, utask) -> int:
    if au.scratch:  # riprel_pre_xol's own test, made before the call
        riprel_pre_xol(au, regs, utask)
    return 0


def default_post_xol_op(au: ArchUprobe, regs, mem, utask) -> int:
    """UPROBE_FIX_IP: move rip back from the slot; UPROBE_FIX_CALL: replace the pushed
    slot return address by the real one (-ERESTART if that push faults);
    UPROBE_FIX_SETF (popf): tell the caller not to touch TF."""
    if au.scratch:
        riprel_post_xol(au, regs, utask)
    if au.fixups & FIX_IP:
        regs.rip = (regs.rip + utask.vaddr - utask.xol_vaddr) & _MASK64
    elif au.fixups & FIX_CALL:
        regs.rsp = (regs.rsp + 8) & _MASK64  # pop the slot's return address
        if not emulate_push_stack(regs, mem, utask.vaddr + au.ilen):
            return -ERESTART
    if au.fixups & FIX_SETF:
        utask.autask.saved_tf = True
    return 0


def default_abort_op(au: ArchUprobe, regs, utask) -> None:
    riprel_post_xol(au, regs, utask)


default_xol_ops = UprobeXolOps(
    "default_xol_ops", pre_xol=default_pre_xol_op, post_xol=default_post_xol_op, abort=default_abort_op
)


# -- branch_xol_ops: nop / jmp / call / jcc, emulated ------------------------------------


def branch_emulate_op(au: ArchUprobe, regs, mem) -> bool:
    """nop / jmp / call / jcc without single-stepping (flags are never modified).
    ``check_jmp_cond`` (:func:`jcc_taken`) counts anything but a jcc as taken."""
    new_ip = (regs.rip + au.ilen) & _MASK64
    offs = au.offs
    opc1 = au.opc1
    if opc1 == 0xE8:  # a call
        if not emulate_push_stack(regs, mem, new_ip):
            return False  # falls back to XOL of the mangled `call +0`
    elif 0x70 <= opc1 <= 0x7F and not jcc_taken(opc1, regs.eflags):
        offs = 0  # (check_jmp_cond is "taken" for anything but a jcc)
    regs.rip = (new_ip + offs) & _MASK64
    return True


def branch_post_xol_op(au: ArchUprobe, regs, mem, utask) -> int:
    """Only a call gets here: its emulated push faulted, the mangled ``call +0`` ran in
    the slot (another thread grew the stack meanwhile).  Undo the push and restart."""
    regs.rsp = (regs.rsp + 8) & _MASK64
    return -ERESTART


branch_xol_ops = UprobeXolOps("branch_xol_ops", emulate=branch_emulate_op, post_xol=branch_post_xol_op)


def branch_emulated_target(au: ArchUprobe, vaddr: int) -> int | None:
    """Where :func:`branch_emulate_op` sends a probed nop or jmp at ``vaddr``: a
    constant, since neither reads the flags nor touches the stack (a call pushes, a
    jcc reads the flags: None for them, and for any instruction not emulated so)."""
    if au.ops is not branch_xol_ops or au.kind not in ("nop", "jmp") or au.opc1 == 0xE8 or 0x70 <= au.opc1 <= 0x7F:
        return None
    return (vaddr + au.ilen + au.offs) & _MASK64


# -- push_xol_ops: push %reg, emulated -------------------------------------------------------


def push_emulate_op(au: ArchUprobe, regs, mem) -> bool:
    """push %reg: the value as saved at the trap (push %rsp pushes the old rsp)."""
    if not emulate_push_stack(regs, mem, getattr(regs, au.push_reg)):  # type: ignore[arg-type]  # a push's
        return False
    regs.rip = (regs.rip + au.ilen) & _MASK64
    return True


push_xol_ops = UprobeXolOps("push_xol_ops", emulate=push_emulate_op)

_SETUP_OPS = {
    "nop": branch_xol_ops,
    "jmp": branch_xol_ops,
    "call": branch_xol_ops,
    "jcc": branch_xol_ops,
    "push": push_xol_ops,
    "xol": default_xol_ops,
}


def arch_uprobe_analyze_insn(
    insn: bytes, *, nop_policy: str = "insn_is_nop", optimize: str | None = None, vaddr: int | None = None
) -> ArchUprobe:
    """``arch_uprobe_analyze_insn``: decode and classify (``insn_x86.analyze_insn``), then
    set ``auprobe->ops`` as ``branch_setup_xol_ops`` / ``push_setup_xol_ops`` or the
    default path does.  Raises ``RegistrationError`` as the analysis does."""
    au = _analyzed_with_ops(*analysis_key(insn, nop_policy, optimize, vaddr))
    ops = _SETUP_OPS[au.kind]
    return au if au.ops is ops else replace(au, ops=ops)  # the class's ops as they are now


@functools.lru_cache(maxsize=4096)
def _analyzed_with_ops(raw: bytes, nop_policy: str, optimize: str | None, page_offset: int | None) -> ArchUprobe:
    """The analysis with its ops attached, memoized like the analysis itself (a pure
    function of the key); the ops - how a hit is handled - are decided here, once."""
    au = analyze_insn(
        raw, nop_policy=nop_policy, optimize=optimize, vaddr=None if page_offset is None else 0x1000 + page_offset
    )
    return replace(au, ops=_SETUP_OPS[au.kind])


# ------------------------------------------------------------------ the generic hit-time paths


def arch_uprobe_skip_sstep(au: ArchUprobe, regs, mem) -> bool:
    """``arch_uprobe_skip_sstep`` (``__skip_sstep``): run ``ops->emulate`` if the class
    has one.  The kernel then sends SIGTRAP to a task with TF set; that needs the task,
    so the caller (``Uprobes.handle_swbp``) queues it."""
    emulate = au.ops.emulate
    return emulate is not None and emulate(au, regs, mem)


def arch_uprobe_pre_xol(au: ArchUprobe, regs, utask, trap_nr: tuple[int, int, int] | None = None) -> int:
    """``ops->pre_xol``, then point rip at the slot and set TF (saving the task's own TF).

    The slot holds all 16 ``ixol`` bytes.  For a probed ``syscall`` that matters: SYSCALL
    masks TF, the kernel returns by IRET (TF set in pt_regs), and the #DB comes after
    the NEXT instruction - the file's bytes after the syscall, run in the slot; post_xol's
    FIX_IP then applies to wherever that instruction left rip (the machine models the
    trap's timing: ``Machine._syscall``)."""
    pre = au.ops.pre_xol
    if pre is not None:
        err = pre(au, regs, utask)
        if err:
            return err
    regs.rip = utask.xol_vaddr
    # the kernel saves thread.trap_nr and sets UPROBE_TRAP_NR (-1), so that a trap during
    # the step shows (arch_uprobe_xol_was_trapped); the model keeps the task's last trap
    # (``trap_nr``: Task.thread_fault, which every trap that records one replaces)
    utask.autask.saved_trap_nr = trap_nr
    utask.autask.saved_tf = bool(regs.tf)
    regs.tf = TF
    return 0


def arch_uprobe_xol_was_trapped(task) -> bool:
    """``arch_uprobe_xol_was_trapped``: did a trap (a #PF, #GP... that recorded its
    ``thread.trap_nr``) come since ``arch_uprobe_pre_xol``?  Then the pending signal is
    the slot instruction's own and uprobe_deny_signal aborts the step
    (UTASK_SSTEP_TRAPPED) instead of holding the signal back: the signal is reported at
    the probed address and, after a handler, the same instruction runs again."""
    return task.thread_fault is not task.utask.autask.saved_trap_nr


def arch_uprobe_post_xol(au: ArchUprobe, regs, mem, utask) -> tuple[int, bool]:
    """``ops->post_xol`` after the #DB.  Returns (err, send_sigtrap); a ``-ERESTART``
    from the class becomes a restart at the probed address (err 0, no SIGTRAP)."""
    autask = utask.autask
    send_sigtrap = autask.saved_tf
    err = 0
    post = au.ops.post_xol
    if post is not None:
        err = post(au, regs, mem, utask)
        if err:
            regs.rip = utask.vaddr  # restart (or post-mortem): the probe hits again
            if err == -ERESTART:
                err = 0
            send_sigtrap = False
    if not autask.saved_tf:
        regs.tf = 0
    return err, send_sigtrap


def arch_uprobe_abort_xol(au: ArchUprobe, regs, utask) -> None:
    """The slot instruction faulted: ``ops->abort``, then report at the probed address."""
    abort = au.ops.abort
    if abort is not None:
        abort(au, regs, utask)
    regs.rip = utask.vaddr
    if not utask.autask.saved_tf:
        regs.tf = 0


# ------------------------------------------------------------------ uretprobes


def arch_uretprobe_hijack_return_addr(trampoline: int, regs, mem) -> int | None:
    """Replace [sp] with the trampoline; return the original, or None on failure."""
    sp = regs.rsp
    try:
        orig = mem.read_u64(sp)
    except GuestFault:
        return None
    if orig == trampoline:
        return orig
    try:
        mem.write_u64(sp, trampoline)
    except GuestFault:
        return None
    return orig


RP_CHECK_CALL, RP_CHECK_CHAIN_CALL, RP_CHECK_RET = "call", "chain_call", "ret"


def arch_uretprobe_is_alive(ri, ctx: str, regs) -> bool:
    """A return instance is alive while its frame is still on the stack."""
    if ctx == RP_CHECK_CALL:  # sp was just decremented by a call
        return regs.rsp < ri.stack
    return regs.rsp <= ri.stack
