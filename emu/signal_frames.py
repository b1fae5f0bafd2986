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
FP state is not saved (``uc_mcontext.fpstate`` is NULL), which handlers that do not
touch the FPU never notice.
"""

from __future__ import annotations

import struct

SIG_DFL, SIG_IGN = 0, 1
SA_SIGINFO, SA_ONSTACK, SA_RESTART, SA_NODEFER, SA_RESETHAND, SA_RESTORER = (
    0x4, 0x08000000, 0x10000000, 0x40000000, 0x80000000, 0x04000000)
SIGKILL, SIGSTOP = 9, 19
# default action "ignore"; stop/continue are not modeled and also ignored
IGNORED_BY_DEFAULT = frozenset((17, 18, 19, 20, 21, 22, 23, 28))

# struct sigcontext (x86_64 uapi) register order
SIGCONTEXT_REGS = ("r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rdi", "rsi", "rbp",
                   "rbx", "rdx", "rax", "rcx", "rsp", "rip", "eflags")
UCONTEXT_SIZE = 8 + 8 + 24 + 256 + 8          # flags, link, stack_t, sigcontext, sigmask
SIGINFO_SIZE = 128
FRAME_SIZE = 8 + UCONTEXT_SIZE + SIGINFO_SIZE
# user-changeable flags restored by sigreturn (FIX_EFLAGS): AC OF DF TF SF ZF AF PF CF RF
FIX_EFLAGS = 0x40DD5 | 0x10000
SI_KERNEL, SI_TKILL = 0x80, -6
SEGV_MAPERR = 1


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
    return struct.pack("<QIiQ", ss_sp, (sas_ss_flags(altstack, sp) | (flags & SS_AUTODISARM)) & 0xFFFFFFFF,
                       0, ss_size)


def build_frame(regs, sp_top: int, signo: int, info: bytes, old_mask: int,
                restorer: int, *, altstack=None, onstack: bool = False) -> tuple[int, bytes, int, int]:
    """(frame address, frame bytes, &info, &uc): the rt_sigframe below ``sp_top``, or
    at the top of the alternate stack for an SA_ONSTACK handler when the task is not
    already on it (get_sigframe: there the red zone is not skipped)."""
    sp = sp_top - 128                                   # skip the red zone
    if onstack and sas_ss_flags(altstack, sp) == 0:
        sp = altstack[0] + altstack[1]
    sp = ((sp - FRAME_SIZE) & ~0xF) - 8                 # as after a call: (sp + 8) % 16 == 0
    gregs = [getattr(regs, n) & 0xFFFFFFFFFFFFFFFF for n in SIGCONTEXT_REGS]
    sigctx = struct.pack("<18Q", *gregs)
    sigctx += struct.pack("<HHHH", regs.cs, 0, 0, regs.ss)   # cs, gs, fs, ss
    sigctx += struct.pack("<QQQQ", 0, 14 if signo == 11 else 0, old_mask, 0)  # err trapno oldmask cr2
    sigctx += struct.pack("<Q", 0) + b"\0" * 64                             # fpstate, reserved
    uc = struct.pack("<QQ", 0, 0) + pack_stack_t(altstack, regs.rsp)        # flags, link, uc_stack
    uc += sigctx + struct.pack("<Q", old_mask)
    frame = struct.pack("<Q", restorer) + uc + info
    assert len(frame) == FRAME_SIZE
    return sp, frame, sp + 8 + UCONTEXT_SIZE, sp + 8


def restore_frame(mem, regs) -> int:
    """rt_sigreturn: registers and the mask from the frame at ``regs.rsp - 8``
    (the handler's ``ret`` popped pretcode).  Returns the restored signal mask."""
    uc = regs.rsp
    sigctx = mem.read_user(uc + 40, 256)
    gregs = struct.unpack("<18Q", sigctx[:144])
    flags = regs.eflags
    for name, value in zip(SIGCONTEXT_REGS, gregs):
        if name == "eflags":
            regs.eflags = (flags & ~FIX_EFLAGS) | (value & FIX_EFLAGS)
        else:
            setattr(regs, name, value)
    (mask,) = struct.unpack("<Q", mem.read_user(uc + 40 + 256, 8))
    return mask


def saved_altstack(mem, uc: int) -> tuple[int, int, int]:
    """(ss_sp, ss_flags, ss_size) of the uc_stack of the ucontext at ``uc``."""
    return struct.unpack("<QIxxxxQ", mem.read_user(uc + 16, 24))
