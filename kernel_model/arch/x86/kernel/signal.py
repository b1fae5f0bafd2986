"""Guest signal handlers: the x86_64 rt_sigframe the kernel builds, and rt_sigreturn.

Models arch/x86/kernel/signal.c / signal_64.c at the level a user program can see:
``setup_rt_frame`` pushes ``struct rt_sigframe {pretcode; ucontext; siginfo}`` below the
red zone, points rip at the handler with (sig, &info, &uc) in rdi/rsi/rdx and returns
through the ``sa_restorer`` glibc installs (``__restore_rt``, i.e. ``rt_sigreturn``),
which restores every register from ``uc.uc_mcontext`` and the signal mask.  A signal the
kernel raises at a fault is delivered with the faulting rip; for a fault inside an
out-of-line step that rip is the probe address (the uprobes abort path), so returning
from the handler re-executes the int3 and the probe's handlers run again, as on Linux.

The frame's ``uc_stack`` is the sigaltstack state; SA_ONSTACK handlers run on it.

FP state (arch/x86/kernel/fpu/signal.c): get_sigframe first reserves the XSAVE area
(fpu__alloc_mathframe: ``user_size`` + FP_XSTATE_MAGIC2, 64-byte aligned) and puts the
rt_sigframe below it; ``uc_mcontext.fpstate`` points at it.  copy_fpstate_to_sigframe
stores the XSAVE image (see :mod:`kernel_model.arch.x86.kernel.fpu`), FP|SSE always set in its XSTATE_BV, the
``_fpx_sw_bytes`` in the FXSAVE region's software-reserved bytes and FP_XSTATE_MAGIC2
after the image.  rt_sigreturn restores it as __fpu_restore_sig does: with both magics
and a sane xstate_size an XRSTOR of the features the sw bytes name (the others to
their initial state), otherwise an FXRSTOR of the legacy region; a NULL fpstate resets
the FPU.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kernel_model.arch.x86.kernel.fpu import FXSAVE_SIZE, USER_XFEATURES, USER_XSTATE_SIZE, XFEATURE_MASK_FPSSE
from kernel_model.arch.x86.ptrace import TF
from kernel_model.kernel.events.uprobes_types import UTASK_SSTEP_TRAPPED
from kernel_model.kernel.kernel_base import KernelBase
from kernel_model.kernel.signals import RunResult
from kernel_model.mm.mm_types import GuestFault
from kernel_model.trace import events as ev

SIG_DFL, SIG_IGN = 0, 1
SA_SIGINFO, SA_ONSTACK, SA_RESTART, SA_NODEFER, SA_RESETHAND, SA_RESTORER = (
    0x4,
    0x08000000,
    0x10000000,
    0x40000000,
    0x80000000,
    0x04000000,
)
SIGKILL, SIGSTOP = 9, 19
# default action "ignore"; stop/continue are not modeled and also ignored
IGNORED_BY_DEFAULT = frozenset((17, 18, 19, 20, 21, 22, 23, 28))

# struct sigcontext (x86_64 uapi) register order
SIGCONTEXT_REGS = (
    "r8",
    "r9",
    "r10",
    "r11",
    "r12",
    "r13",
    "r14",
    "r15",
    "rdi",
    "rsi",
    "rbp",
    "rbx",
    "rdx",
    "rax",
    "rcx",
    "rsp",
    "rip",
    "eflags",
)
UCONTEXT_SIZE = 8 + 8 + 24 + 256 + 8  # flags, link, stack_t, sigcontext, sigmask
SIGINFO_SIZE = 128
FRAME_SIZE = 8 + UCONTEXT_SIZE + SIGINFO_SIZE
# user-changeable flags restored by sigreturn (FIX_EFLAGS): AC OF DF TF SF ZF AF PF CF RF
FIX_EFLAGS = 0x40DD5 | 0x10000
SI_KERNEL, SI_TKILL = 0x80, -6
SEGV_MAPERR = 1
# uc_flags (frame_uc_flags): the CPU has XSAVE; ss saved; a 64-bit frame restores it strictly
UC_FP_XSTATE, UC_SIGCONTEXT_SS, UC_STRICT_RESTORE_SS = 0x1, 0x2, 0x4
FP_XSTATE_MAGIC1, FP_XSTATE_MAGIC2, FP_XSTATE_MAGIC2_SIZE = 0x46505853, 0x46505845, 4
SW_BYTES_OFFSET = 464  # fxregs_state.sw_reserved
SIGCONTEXT_OFFSET = 40  # uc_mcontext in struct ucontext
FPSTATE_PTR_OFFSET = SIGCONTEXT_OFFSET + 184  # sigcontext.fpstate
XSTATE_SIGFRAME_SIZE = USER_XSTATE_SIZE + FP_XSTATE_MAGIC2_SIZE  # xstate_sigframe_size
# init_sigframe_size (AT_MINSIGSTKSZ): the largest frame - a sigframe_ia32 (732 bytes,
# larger than the 64-bit rt_sigframe) with its alignment padding, the fpstate with
# room for an ia32 fsave header (struct fregs_state, 112) and 63 bytes of XSAVE
# alignment - rounded up to 16
SIGFRAME_IA32_SIZE, FREGS_STATE_SIZE = 732, 112
MAX_FRAME_SIZE = (SIGFRAME_IA32_SIZE + 15 + XSTATE_SIGFRAME_SIZE + FREGS_STATE_SIZE + 63 + 15) & ~15


def parse_sigaction(raw: bytes | None) -> tuple[int, int, int, int]:
    """(handler, flags, restorer, mask) of the raw ``struct kernel_sigaction``."""
    if not raw:
        return SIG_DFL, 0, 0, 0
    return struct.unpack("<QQQQ", raw[:32])


def siginfo(signo: int, code: int, addr: int | None, pid: int = 0) -> bytes:
    info = struct.pack("<iii", signo, 0, code) + b"\0" * 4
    if addr is not None:
        info += struct.pack("<Q", addr & 0xFFFFFFFFFFFFFFFF)
    elif pid:
        info += struct.pack("<iI", pid, 1000)
    return info.ljust(SIGINFO_SIZE, b"\0")


SS_ONSTACK, SS_DISABLE, SS_AUTODISARM = 1, 2, 1 << 31
MINSIGSTKSZ = 2048


def on_sig_stack(altstack, sp: int) -> bool:
    """on_sig_stack: ``sp`` lies in the task's alternate stack (ss_sp, ss_size, flags)."""
    if altstack is None:
        return False
    ss_sp, ss_size, flags = altstack
    if flags & SS_AUTODISARM:
        return False
    return (sp - ss_sp) & 0xFFFFFFFFFFFFFFFF < ss_size


def sas_ss_flags(altstack, sp: int) -> int:
    """sas_ss_flags: what sigaltstack() and uc_stack report for a task at ``sp``."""
    if altstack is None or not altstack[1]:
        return SS_DISABLE
    return SS_ONSTACK if on_sig_stack(altstack, sp) else 0


def pack_stack_t(altstack, sp: int) -> bytes:
    """__save_altstack: struct stack_t {ss_sp; ss_flags; ss_size} as seen at ``sp``."""
    if altstack is None:
        return struct.pack("<QiiQ", 0, SS_DISABLE, 0, 0)
    ss_sp, ss_size, flags = altstack
    return struct.pack("<QIiQ", ss_sp, (sas_ss_flags(altstack, sp) | (flags & SS_AUTODISARM)) & 0xFFFFFFFF, 0, ss_size)


class SigFrame(NamedTuple):
    """Where setup_rt_frame puts things: the rt_sigframe (``frame`` bytes at ``at``),
    its siginfo and ucontext, and the XSAVE area above it (``fpstate`` bytes)."""

    at: int
    frame: bytes
    info_at: int
    uc_at: int
    fpstate_at: int
    fpstate: bytes


def sigframe_fpstate(image: bytes) -> bytes:
    """copy_fpstate_to_sigframe + save_xstate_epilog: the XSAVE ``image`` with the sw
    bytes (magic1, extended_size, xfeatures, xstate_size), FP|SSE forced into
    XSTATE_BV (legacy compatibility) and FP_XSTATE_MAGIC2 after it."""
    buf = bytearray(image[:USER_XSTATE_SIZE])
    struct.pack_into(
        "<IIQI28x", buf, SW_BYTES_OFFSET, FP_XSTATE_MAGIC1, XSTATE_SIGFRAME_SIZE, USER_XFEATURES, USER_XSTATE_SIZE
    )
    (bv,) = struct.unpack_from("<Q", buf, FXSAVE_SIZE)
    struct.pack_into("<Q", buf, FXSAVE_SIZE, bv | XFEATURE_MASK_FPSSE)
    return bytes(buf) + struct.pack("<I", FP_XSTATE_MAGIC2)


class FrameOverflow(Exception):
    """get_sigframe's "overflowed sigaltstack": the frame would leave the alternate
    stack the task is on or enters."""


def _within(altstack, sp: int) -> bool:
    """__on_sig_stack: ``sp`` in (ss_sp, ss_sp + ss_size], SS_AUTODISARM or not."""
    return altstack is not None and 0 < sp - altstack[0] <= altstack[1]


def build_frame(
    regs,
    sp_top: int,
    signo: int,
    info: bytes,
    old_mask: int,
    restorer: int,
    fp_image: bytes,
    *,
    altstack=None,
    onstack: bool = False,
    fault: tuple | None = None,
) -> SigFrame:
    """The rt_sigframe below ``sp_top`` (or at the top of the alternate stack for an
    SA_ONSTACK handler when the task is not already on it - there the red zone is not
    skipped), under the 64-byte aligned XSAVE area holding ``fp_image`` (get_sigframe,
    fpu__alloc_mathframe).  FrameOverflow when the frame does not fit on the
    alternate stack the task runs on or switches to.  ``fault``: the task's last page
    fault (trap_nr, error_code, cr2), which the sigcontext reports (setup_sigcontext
    copies current->thread's)."""
    nested = on_sig_stack(altstack, sp_top)
    sp = sp_top - 128  # skip the red zone
    entering = onstack and sas_ss_flags(altstack, sp) == 0
    if entering:
        sp = altstack[0] + altstack[1]
    fp_at = (sp - XSTATE_SIGFRAME_SIZE) & ~63
    sp = ((fp_at - FRAME_SIZE) & ~0xF) - 8  # as after a call: (sp + 8) % 16 == 0
    if (nested or entering) and not _within(altstack, sp):
        raise FrameOverflow(f"signal frame at {sp:#x} overflows the alternate stack")
    gregs = [getattr(regs, n) & 0xFFFFFFFFFFFFFFFF for n in SIGCONTEXT_REGS]
    sigctx = struct.pack("<18Q", *gregs)
    sigctx += struct.pack("<HHHH", regs.cs, 0, 0, regs.ss)  # cs, gs, fs, ss
    trapno, err, cr2 = fault if fault is not None else (14 if signo == 11 else 0, 0, 0)
    sigctx += struct.pack("<QQQQ", err, trapno, old_mask, cr2)  # err trapno oldmask cr2
    sigctx += struct.pack("<Q", fp_at) + b"\0" * 64  # fpstate, reserved
    flags = UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS
    uc = struct.pack("<QQ", flags, 0) + pack_stack_t(altstack, regs.rsp)  # flags, link, uc_stack
    uc += sigctx + struct.pack("<Q", old_mask)
    frame = struct.pack("<Q", restorer) + uc + info
    assert len(frame) == FRAME_SIZE
    return SigFrame(sp, frame, sp + 8 + UCONTEXT_SIZE, sp + 8, fp_at, sigframe_fpstate(fp_image))


def restore_frame(mem, regs) -> tuple[int, int]:
    """rt_sigreturn: registers and the mask from the frame at ``regs.rsp - 8``
    (the handler's ``ret`` popped pretcode).  Returns the restored signal mask and
    ``sigcontext.fpstate``."""
    uc = regs.rsp
    sigctx = mem.read_user(uc + SIGCONTEXT_OFFSET, 256)
    gregs = struct.unpack("<18Q", sigctx[:144])
    flags = regs.eflags
    for name, value in zip(SIGCONTEXT_REGS, gregs):
        if name == "eflags":
            regs.eflags = (flags & ~FIX_EFLAGS) | (value & FIX_EFLAGS)
        else:
            setattr(regs, name, value)
    (mask,) = struct.unpack("<Q", mem.read_user(uc + SIGCONTEXT_OFFSET + 256, 8))
    (fpstate,) = struct.unpack_from("<Q", sigctx, 184)
    return mask, fpstate


class FpRestore(NamedTuple):
    """What __fpu_restore_sig restores: ``image`` with XRSTOR of ``xfeatures`` (the
    user features outside them initialised), or FXRSTOR of its legacy region when
    ``fx_only``."""

    image: bytes
    xfeatures: int
    fx_only: bool


def read_sigframe_fpstate(mem, fp_at: int) -> FpRestore:
    """check_xstate_in_sigframe: the sw bytes are believed when magic1 is there, the
    xstate_size lies between the legacy+header size and the user size (and within
    extended_size), and magic2 follows the image; otherwise the frame is taken as a
    legacy FXSAVE one.  A GuestFault propagates (a bad frame)."""
    image = mem.read_user(fp_at, USER_XSTATE_SIZE)
    magic1, extended, xfeatures, size = struct.unpack_from("<IIQI", image, SW_BYTES_OFFSET)
    if magic1 == FP_XSTATE_MAGIC1 and USER_XSTATE_SIZE <= size <= USER_XSTATE_SIZE and size <= extended:
        (magic2,) = struct.unpack("<I", mem.read_user(fp_at + size, 4))
        if magic2 == FP_XSTATE_MAGIC2:
            return FpRestore(image, xfeatures & USER_XFEATURES, False)
    return FpRestore(image, XFEATURE_MASK_FPSSE, True)


def saved_altstack(mem, uc: int) -> tuple[int, int, int]:
    """(ss_sp, ss_flags, ss_size) of the uc_stack of the ucontext at ``uc``."""
    return struct.unpack("<QIxxxxQ", mem.read_user(uc + 16, 24))


# ============================================================================ delivery

EINTR = 4
# include/linux/errno.h: syscall results that ask arch_do_signal_or_restart to restart
ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK = 512, 513, 514, 516
NR_RESTART_SYSCALL = 219
SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGSEGV = 4, 5, 7, 8, 11


def restart_code(regs) -> int | None:
    """The -ERESTART* code a syscall left in rax (syscall_get_nr >= 0 and
    syscall_get_error), or None: not in a syscall, or an ordinary result."""
    if regs.orig_rax is None or regs.orig_rax < 0 or regs.orig_rax >> 63:
        return None
    code = (-regs.rax) & 0xFFFFFFFFFFFFFFFF
    return code if code in (ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK) else None


def restart_for_handler(regs, sa_flags: int) -> None:
    """handle_signal: a handler is about to run on a syscall's way out -
    ERESTARTNOHAND and ERESTART_RESTARTBLOCK become EINTR, so does ERESTARTSYS
    unless the action has SA_RESTART; ERESTARTNOINTR (and SA_RESTART's
    ERESTARTSYS) re-executes the syscall after the handler (rip -= 2, rax =
    orig_rax, as the frame saves them)."""
    code = restart_code(regs)
    if code is None:
        return
    if code in (ERESTARTNOHAND, ERESTART_RESTARTBLOCK) or (code == ERESTARTSYS and not sa_flags & SA_RESTART):
        regs.rax = -EINTR & 0xFFFFFFFFFFFFFFFF
    else:
        regs.rax, regs.rip = regs.orig_rax, regs.rip - 2
    regs.orig_rax = -1


def restart_without_handler(regs) -> None:
    """arch_do_signal_or_restart with no handler to run (the signal was ignored, or
    another task took it): every restart code re-executes the syscall;
    ERESTART_RESTARTBLOCK through restart_syscall (the task's restart_block)."""
    code = restart_code(regs)
    regs.rax = NR_RESTART_SYSCALL if code == ERESTART_RESTARTBLOCK else regs.orig_rax
    regs.rip -= 2
    regs.orig_rax = -1


def sig_ignored(task, signo: int) -> bool:
    """sig_ignored at delivery: SIG_IGN, or SIG_DFL whose default is to ignore."""
    handler = parse_sigaction(task.process.sighand.action.get(signo))[0]
    return handler == SIG_IGN or (handler == SIG_DFL and signo in IGNORED_BY_DEFAULT)


def fatal_if_ignored(signo: int) -> bool:
    """Faults cannot be ignored: the kernel resets the action and kills."""
    return signo in (SIGSEGV, SIGILL, SIGFPE, SIGBUS, SIGTRAP)


class SignalDelivery(KernelBase):
    """Delivering a dequeued signal (arch/x86/kernel/signal.c): part of
    :class:`kernel_model.kernel.kernel.Kernel`."""

    restart_code = staticmethod(restart_code)

    def arch_do_signal_or_restart(self, task, regs) -> None:
        """Deliver the task's deliverable signals (get_signal -> handle_signal) - a
        handler frame (rt_sigframe) each, or the default action; each frame's mask
        update applies to the next pick - then restart an interrupted syscall no
        handler took, and restore rt_sigsuspend's mask.  A task single-stepping out of
        line takes none (get_signal's ``uprobe_deny_signal``) unless the step must be
        aborted first (a fatal signal, a trap of the slot instruction)."""
        uprobes = self.uprobes
        while (nxt := self.next_signal(task)) is not None:
            if task.utask is not None and uprobes.uprobe_deny_signal(task):  # get_signal
                if task.utask.state != UTASK_SSTEP_TRAPPED:
                    break  # held back until the out-of-line step ends
                uprobes.handle_singlestep(task, regs)  # TIF_UPROBE: the step is aborted first
                continue
            queue, i = nxt
            sig = queue.pop(i)
            self.handle_signal(task, sig, regs)
            if task.state == "dead" or self._result is not None:
                task.pending_signals.clear()
                break
        if task.state != "dead" and self._result is None:
            if restart_code(regs) is not None:
                restart_without_handler(regs)
            if task is self.task:
                regs.orig_rax = -1  # the syscall is over: back in user mode
                self.write_back_in_trap(regs)
                if self._in_syscall and regs.tf:
                    # a syscall stepped out of line whose signals wait (uprobe_deny_signal)
                    # returns by IRET with TF: the #DB comes after the NEXT instruction,
                    # as on do_syscall_64's own return (the engine's #DB at once is dropped)
                    self._db_after_syscall = (task, regs.rip)
        if task.saved_sigmask is not None and task.state != "dead":
            task.sigmask, task.saved_sigmask = task.saved_sigmask, None  # restore_saved_sigmask

    def handle_signal(self, task, sig, regs) -> None:
        """One signal: the guest's handler if it installed one (an rt_sigframe, as
        setup_rt_frame builds it), else the default action - terminate (or ignore, for
        SIGCHLD-like signals)."""
        signo, addr, detail = sig.signo, sig.addr, sig.detail
        if not sig.force and sig_ignored(task, signo):
            return  # ignored when it became deliverable
        self.counters.signals[signo] += 1
        if self.events:
            self.events.publish(ev.Signal(task, signo, addr, regs.rip, detail))
        if task is self.task and task.state != "dead" and self.setup_rt_frame(task, sig, regs):
            self.write_back_in_trap(regs)
            return
        if task is self.task and task.state != "dead":
            # the kernel's register changes up to the signal are the task's state
            self.write_back_in_trap(regs)
        self.do_group_exit(
            task.process,
            RunResult(
                "signal",
                signal=signo,
                fault_addr=addr,
                rip=regs.rip,
                rip_symbol=self.symbolize(regs.rip),
                detail=detail,
            ),
        )

    def setup_rt_frame(self, task, sig, regs) -> bool:
        """setup_rt_frame: True when the guest's handler takes the signal (regs now point
        at it); False for the default action."""
        signo, addr, code = sig.signo, sig.addr, sig.code
        handler, flags, restorer, mask = parse_sigaction(task.process.sighand.action.get(signo))
        if signo in (SIGKILL, SIGSTOP) or handler == SIG_DFL or not flags & SA_RESTORER:
            return False
        if handler == SIG_IGN:
            return not fatal_if_ignored(signo)
        if task.sigmask & (1 << (signo - 1)):
            return False  # a blocked forced signal kills (force_sig_fault)
        restart_for_handler(regs, flags)
        if code is None:
            code = SI_KERNEL if addr is None else SEGV_MAPERR
        info = sig.info or siginfo(signo, code, addr, task.process.pid)
        # the frame saves the mask to return to: rt_sigsuspend's, not the temporary one
        old_mask = task.sigmask if task.saved_sigmask is None else task.saved_sigmask
        fpu, cpu, mem = self.engine.fpu, self.cpu, self.mem
        try:
            frame = build_frame(
                regs,
                regs.rsp,
                signo,
                info,
                old_mask,
                restorer,
                fpu.xsave(cpu),
                altstack=task.sigaltstack,
                onstack=bool(flags & SA_ONSTACK),
                fault=task.thread_fault,
            )
            mem.write_user(frame.fpstate_at, frame.fpstate)
            mem.write_user(frame.at, frame.frame)
        except (GuestFault, FrameOverflow) as e:
            self.force_sigsegv(task, signo, str(e))
            return True
        fpu.init(cpu)  # fpu__clear_user_states: the handler starts clean
        frame_at = frame.at
        regs.rsp, regs.rip = frame_at, handler
        regs.rdi, regs.rsi, regs.rdx, regs.rax = signo, frame.info_at, frame.uc_at, 0
        regs.eflags &= ~(0x400 | 0x10000 | TF)  # DF RF TF cleared for the handler
        regs.orig_rax = -1
        if not flags & SA_NODEFER:
            task.sigmask |= 1 << (signo - 1)
        task.sigmask |= mask
        task.saved_sigmask = None
        if task.sigaltstack is not None and task.sigaltstack[2] & SS_AUTODISARM:
            task.sigaltstack = None  # sas_ss_reset: saved in uc_stack, restored by sigreturn
        if flags & SA_RESETHAND:
            task.process.sighand.action.pop(signo, None)
        if self.events:
            self.events.publish(ev.SignalHandler(task, signo, handler, frame_at))
        return True
