"""Signal syscalls: sending (kill, tgkill, tkill), actions and masks (rt_sigaction,
rt_sigprocmask, rt_sigpending), waiting (rt_sigsuspend, pause), rt_sigreturn,
sigaltstack, restart_syscall, and the SIGCHLD a parent gets when a child exits
(do_notify_parent). The timers that send signals live in
:mod:`kernel_model.kernel.time`.

This models kernel/signal.c. Sending only queues (``Machine.send_sig`` for one task,
``Machine.send_process_sig`` for a process); the machine delivers at the task's next
exit to user mode, skipping what the task's mask blocks (``dequeue_signal``), so a
blocked signal pends until rt_sigprocmask, rt_sigsuspend or rt_sigreturn unblocks it.
"""

from __future__ import annotations

import errno as E
import functools
import struct

from kernel_model.arch.x86.kernel.fpu import USER_XFEATURES
from kernel_model.arch.x86.kernel.signal import (
    IGNORED_BY_DEFAULT,
    MINSIGSTKSZ,
    SI_TKILL,
    SIG_DFL,
    SIG_IGN,
    SIGKILL,
    SS_AUTODISARM,
    SS_DISABLE,
    SS_ONSTACK,
    on_sig_stack,
    pack_stack_t,
    parse_sigaction,
    read_sigframe_fpstate,
    restore_frame,
    saved_altstack,
    siginfo,
)
from kernel_model.include.linux.errno import ERESTARTNOHAND, neg
from kernel_model.include.linux.syscalls import pid_t, syscall
from kernel_model.kernel.kernel_base import KernelBase
from kernel_model.kernel.signals import RunResult, signal_name
from kernel_model.kernel.task import PendingSignal
from kernel_model.kernel.time.timekeeping import NSEC
from kernel_model.mm.mm_types import GuestFault

SI_USER = 0
CLD_EXITED, CLD_KILLED = 1, 2
UNBLOCKABLE = (1 << 8) | (1 << 18)  # SIGKILL, SIGSTOP
SIG_BLOCK, SIG_UNBLOCK, SIG_SETMASK = 0, 1, 2
SIGALRM, SI_KERNEL = 14, 0x80


def _bit(sig: int) -> int:
    return 1 << (sig - 1)


def blocked_in(tasks, sig: int) -> bool:
    """Every one of ``tasks`` blocks ``sig`` - in its mask, or in the mask it had
    before rt_sigtimedwait opened it (``real_blocked``, which sig_ignored also
    honours)."""
    if sig in (9, 19) or not tasks:
        return False
    return all((t.sigmask | (t.sigwait[3] if t.sigwait else 0)) & _bit(sig) for t in tasks)


class SignalSyscalls:
    """kernel/signal.c on the machine's tasks."""

    def __init__(self, sc):
        self.m = sc.m
        self.clock = sc.clock

    @syscall(62, "kill")
    def sys_kill(self, task, regs, pid, sig, *_):
        """kill_something_info: pid > 0 one process; 0 the caller's group; -1 every
        process but the caller; < -1 the group -pid."""
        pid = pid_t(pid)
        live = [p for p in self.m.processes if p.exit_result is None]
        if pid > 0:
            targets = [p for p in live if p.pid == pid]
        elif pid == 0:
            targets = [p for p in live if p.pgid == task.process.pgid]
        elif pid == -1:
            targets = [p for p in live if p is not task.process]
        else:
            targets = [p for p in live if p.pgid == -pid]
        if not 0 <= sig <= 64:
            return neg(E.EINVAL)
        if not targets:
            return neg(E.ESRCH)
        for proc in targets:
            self._send(task, regs, proc, None, sig, SI_USER)
        return 0

    @syscall(234, "tgkill")
    def sys_tgkill(self, task, regs, tgid, tid, sig, *_):
        if pid_t(tgid) <= 0 or pid_t(tid) <= 0:
            return neg(E.EINVAL)
        return self._send_to_tid(task, regs, tid, sig, tgid=pid_t(tgid))

    @syscall(200, "tkill")
    def sys_tkill(self, task, regs, tid, sig, *_):
        if pid_t(tid) <= 0:
            return neg(E.EINVAL)
        return self._send_to_tid(task, regs, tid, sig)

    def _send_to_tid(self, task, regs, tid, sig, tgid=None):
        target = next((t for t in self.m.tasks if t.tid == tid & 0xFFFFFFFF), None)
        if target is None or (tgid is not None and target.process.pid != tgid):
            return neg(E.ESRCH)
        if not 0 <= sig <= 64:
            return neg(E.EINVAL)
        self._send(task, regs, target.process, target, sig, SI_TKILL)
        return 0

    def _send(self, task, regs, proc, target, sig, code) -> None:
        """send_signal_locked: ``target`` a task (tkill) or None (to the process).
        prepare_signal drops an ignored, unblocked signal; complete_signal kills a
        process at once on a fatal one (default action, not blocked); otherwise it is
        queued, with the sender's pid in its siginfo."""
        if sig == 0:
            return
        handler = parse_sigaction(proc.sighand.action.get(sig))[0]
        tasks = [target] if target is not None else [t for t in proc.tasks if t.state != "dead"]
        blocked = blocked_in(tasks, sig)
        if not blocked and (handler == SIG_IGN or (handler == SIG_DFL and sig in IGNORED_BY_DEFAULT)):
            return
        regs.rax = 0  # the syscall's own result, saved in a frame
        if not blocked and (handler == SIG_DFL or sig == 9) and proc is not task.process:
            self.m.counters.signals[sig] += 1
            self.m.process_exit(proc, RunResult("signal", signal=sig, detail=f"sent by pid {task.process.pid}"))
            return
        info = siginfo(sig, code, None, task.process.pid)
        detail = "sent by the guest itself" if proc is task.process else f"sent by pid {task.process.pid}"
        if target is None:
            self.m.send_process_sig(proc, sig, detail=detail, code=code, info=info)
        else:
            self.m.send_sig(target, sig, detail=detail, code=code, force=False, info=info)
            if not target.sigmask & _bit(sig):
                self.m.signal_wake_up(target)

    def do_notify_parent(self, proc) -> None:
        """exit_notify -> do_notify_parent: after the wait bookkeeping, the parent gets
        the child's exit signal (SIGCHLD for fork) with CLD_EXITED/CLD_KILLED, the
        child's pid and status; ignored by default, so only a handler (or a blocked
        mask) sees it."""
        parent = proc.parent
        if not proc.exit_signal or parent is None or parent.exit_result is not None:
            return
        sig, res = proc.exit_signal, proc.exit_result
        handler = parse_sigaction(parent.sighand.action.get(sig))[0]
        blocked = blocked_in([t for t in parent.tasks if t.state != "dead"], sig)
        if not blocked and (handler == SIG_IGN or (handler == SIG_DFL and sig in IGNORED_BY_DEFAULT)):
            return
        code, status = (CLD_EXITED, res.exit_code) if res.reason == "exit" else (CLD_KILLED, res.signal)
        info = struct.pack("<iiiiiIiiqq", sig, 0, code, 0, proc.pid, 1000, status or 0, 0, 0, 0)
        self.m.send_process_sig(parent, sig, detail=f"child {proc.pid} exited", code=code, info=info.ljust(128, b"\0"))

    def expire_sigwaits(self) -> bool:
        """rt_sigtimedwait sleepers whose timeout passed answer -EAGAIN."""
        woke = False
        for t in [t for t in self.m.tasks if t.state == "blocked" and t.sigwait and t.sigwait[1] is not None]:
            if t.sigwait[1] <= self.clock.ns:
                self.m.wake(t, neg(E.EAGAIN))  # the wait timed out
                woke = True
        return woke

    @syscall(219, "restart_syscall")
    def sys_restart_syscall(self, task, regs, *_):
        """restart_syscall: continue the interrupted sleep the task's restart_block
        describes; with none (do_no_restart_syscall) -EINTR."""
        fn, task.restart_block = task.restart_block, None
        return neg(E.EINTR) if fn is None else fn(task)

    @syscall(13, "rt_sigaction")
    def sys_rt_sigaction(self, task, regs, sig, act, oldact, sigsetsize, *_):
        if sigsetsize != 8 or not 1 <= sig <= 64 or sig in (9, 19):
            return neg(E.EINVAL)
        actions = task.process.sighand.action
        if oldact:
            self.m.mem.write_user(oldact, actions.get(sig, b"\0" * 32))
        if act:
            actions[sig] = self.m.mem.read_user(act, 32)
            handler = parse_sigaction(actions[sig])[0]
            if handler == SIG_IGN or (handler == SIG_DFL and sig in IGNORED_BY_DEFAULT):
                self._flush_pending(task.process, sig)
        return 0

    @staticmethod
    def _flush_pending(proc, sig) -> None:
        """do_sigaction: an action that ignores ``sig`` discards it where it pends
        (POSIX 3.3.1.3), on the process and on each of its tasks."""
        proc.signal.shared_pending[:] = [p for p in proc.signal.shared_pending if p.signo != sig]
        for t in proc.tasks:
            t.pending_signals[:] = [p for p in t.pending_signals if p.signo != sig]

    @syscall(14, "rt_sigprocmask")
    def sys_rt_sigprocmask(self, task, regs, how, nset, oset, sigsetsize, *_):
        """The new mask applies at once: a signal it unblocks is delivered as this
        syscall returns (the machine's exit-to-user path)."""
        if sigsetsize != 8:
            return neg(E.EINVAL)
        new = self.m.mem.read_u64(nset) if nset else None
        if new is not None and how not in (SIG_BLOCK, SIG_UNBLOCK, SIG_SETMASK):
            return neg(E.EINVAL)
        if oset:
            self.m.mem.write_u64(oset, task.sigmask)
        if new is not None:
            if how == SIG_BLOCK:
                task.sigmask |= new
            elif how == SIG_UNBLOCK:
                task.sigmask &= ~new
            else:
                task.sigmask = new
            task.sigmask &= ~UNBLOCKABLE
        return 0

    @syscall(127, "rt_sigpending")
    def sys_rt_sigpending(self, task, regs, uset, sigsetsize, *_):
        """do_sigpending: the blocked signals pending on the task or its process."""
        if sigsetsize > 8:
            return neg(E.EINVAL)
        bits = self.m.pending_set(task) & task.sigmask
        self.m.mem.write_user(uset, struct.pack("<Q", bits)[:sigsetsize])
        return 0

    @syscall(130, "rt_sigsuspend")
    def sys_rt_sigsuspend(self, task, regs, uset, sigsetsize, *_):
        """Install the mask and sleep until a signal is delivered; -EINTR, and the
        handler's frame saves the mask from before the call (set_restore_sigmask)."""
        if sigsetsize != 8:
            return neg(E.EINVAL)
        new = self.m.mem.read_u64(uset) & ~UNBLOCKABLE
        task.saved_sigmask, task.sigmask = task.sigmask, new
        if self.m.signal_pending(task):
            return neg(ERESTARTNOHAND)
        self.m.block(task, "sigsuspend", interrupt=neg(ERESTARTNOHAND))
        return None

    @syscall(128, "rt_sigtimedwait")
    def sys_rt_sigtimedwait(self, task, regs, uthese, uinfo, uts, sigsetsize, *_):
        """do_sigtimedwait: take a pending signal of the set (blocked or not) without
        running its handler and return its number, its siginfo in ``uinfo``.  With none
        pending: -EAGAIN for a zero timeout, else sleep with the set opened in the mask
        (real_blocked kept) until one arrives or the timeout passes on the virtual
        clock (-EAGAIN); another unblocked signal interrupts it (-EINTR)."""
        if sigsetsize != 8:
            return neg(E.EINVAL)
        wanted = self.m.mem.read_u64(uthese) & ~UNBLOCKABLE
        deadline = None
        if uts:
            sec, nsec = struct.unpack("<qq", self.m.mem.read_user(uts, 16))
            if sec < 0 or not 0 <= nsec < NSEC:
                return neg(E.EINVAL)
            deadline = self.clock.ns + sec * NSEC + nsec
        got = self.m.dequeue_signal(task, wanted)
        if got is not None:
            return self._sigwait_result(task, got, uinfo)
        if deadline == self.clock.ns:
            return neg(E.EAGAIN)
        if self.m.signal_pending(task):
            return neg(E.EINTR)  # another unblocked signal is already there
        task.sigwait = (wanted, deadline, uinfo, task.sigmask)
        task.sigmask &= ~wanted
        task.on_resume = lambda: self._sigwait_resume(task)
        self.m.block(task, "sigtimedwait", interrupt=neg(E.EINTR))
        return None

    def _sigwait_resume(self, task) -> None:
        """The sleeper runs again: restore its mask and, if a wanted signal came,
        return it instead of -EINTR/-EAGAIN (the rax the wake-up wrote)."""
        wanted, _, uinfo, real_blocked = task.sigwait
        task.sigwait, task.sigmask = None, real_blocked
        got = self.m.dequeue_signal(task, wanted)
        if got is not None:
            regs = self.m.read_regs()
            regs.rax = self._sigwait_result(task, got, uinfo) & 0xFFFFFFFFFFFFFFFF
            self.m.write_regs(regs)

    def _sigwait_result(self, task, sig, uinfo) -> int:
        if uinfo:
            code = sig.code if sig.code is not None else SI_KERNEL
            info = sig.info or siginfo(sig.signo, code, sig.addr, task.process.pid)
            task.process.mem.write_user(uinfo, info)
        return sig.signo

    @syscall(34, "pause")
    def sys_pause(self, task, regs, *_):
        """Sleep until a signal is delivered: -ERESTARTNOHAND, which a handler turns
        into EINTR and an ignored signal into another pause."""
        if self.m.signal_pending(task):
            return neg(ERESTARTNOHAND)
        self.m.block(task, "pause", interrupt=neg(ERESTARTNOHAND))
        return None

    @syscall(15, "rt_sigreturn")
    def sys_rt_sigreturn(self, task, regs, *_):
        """Restore the registers, mask and alternate stack saved in the rt_sigframe;
        the task resumes where the signal interrupted it (the full pt_regs path)."""
        uc = regs.rsp
        try:
            saved_ss = saved_altstack(self.m.mem, uc)
            mask, fp_at = restore_frame(self.m.mem, regs)
            task.sigmask = mask & ~UNBLOCKABLE
            fpu_ok = self._fpu_restore_sig(fp_at)
        except GuestFault:
            fpu_ok = False
        if not fpu_ok:
            self.m.send_sig(task, 11, detail="bad signal frame")
            return None
        self._do_sigaltstack(task, regs.rsp, *saved_ss)  # restore_altstack; errors ignored
        task.restart_block = None  # restore_sigcontext: do_no_restart_syscall
        regs.orig_rax = -1
        return regs.rax

    def _fpu_restore_sig(self, fp_at: int) -> bool:
        """fpu__restore_sig: no fpstate resets the FPU (fpu__clear_user_states);
        otherwise XRSTOR (or FXRSTOR) from the frame, the user features it does not
        restore initialised.  False when the restoring instruction would fault."""
        m = self.m
        if not fp_at:
            m.fpu_init()
            return True
        saved = read_sigframe_fpstate(self.m.mem, fp_at)
        if not m.fpu_restore(saved.image, saved.xfeatures, fx_only=saved.fx_only):
            m.fpu_init()
            return False
        if USER_XFEATURES & ~saved.xfeatures:
            m.fpu_init(USER_XFEATURES & ~saved.xfeatures)
        return True

    @syscall(131, "sigaltstack")
    def sys_sigaltstack(self, task, regs, ss, old, *_):
        """do_sigaltstack: report the alternate stack (SS_ONSTACK while on it), then
        install the new one: EPERM while running on it, EINVAL for an unknown mode,
        ENOMEM under MINSIGSTKSZ."""
        new = struct.unpack("<QIxxxxQ", self.m.mem.read_user(ss, 24)) if ss else None
        if old:
            self.m.mem.write_user(old, pack_stack_t(task.sigaltstack, regs.rsp))
        if new is None:
            return 0
        return self._do_sigaltstack(task, regs.rsp, *new)

    @staticmethod
    def _do_sigaltstack(task, sp, ss_sp, ss_flags, ss_size) -> int:
        if on_sig_stack(task.sigaltstack, sp):
            return neg(E.EPERM)
        mode = ss_flags & ~SS_AUTODISARM
        if mode not in (SS_DISABLE, SS_ONSTACK, 0):
            return neg(E.EINVAL)
        if mode == SS_DISABLE:
            task.sigaltstack = None
            return 0
        if ss_size < MINSIGSTKSZ:
            return neg(E.ENOMEM)
        task.sigaltstack = (ss_sp, ss_size, ss_flags & SS_AUTODISARM)
        return 0


# ============================================================================ sending

SIGRTMIN = 32
SIGSEGV = 11
# SYNCHRONOUS_MASK: SIGILL SIGTRAP SIGBUS SIGFPE SIGSEGV SIGSYS, dequeued before others
SYNCHRONOUS_SIGNALS = frozenset((4, 5, 7, 8, 11, 31))
# SIG_KERNEL_COREDUMP_MASK: SIGQUIT SIGILL SIGTRAP SIGABRT SIGBUS SIGFPE SIGSEGV SIGXCPU
# SIGXFSZ SIGSYS - a fatal one dumps core instead of starting the group exit at once
COREDUMP_SIGNALS = frozenset((3, 4, 5, 6, 7, 8, 11, 24, 25, 31))


@functools.cache
def sigmask(signo: int) -> int:
    """sigmask(): the bit of ``signo`` in a sigset."""
    return 1 << (signo - 1)


def set_tif_sigpending(task) -> None:
    """signal_wake_up's set_tsk_thread_flag(TIF_SIGPENDING): a new signal for ``task``
    makes get_signal look again, also after uprobe_deny_signal cleared the flag."""
    utask = task.utask
    if utask is not None:
        utask.sigpending = True


def legacy_queue(queue: list, sig: PendingSignal) -> None:
    """legacy_queue: a standard signal (below SIGRTMIN) already pending is not
    queued twice; real-time signals queue every instance."""
    if sig.signo < SIGRTMIN and any(p.signo == sig.signo for p in queue):
        return
    queue.append(sig)


class SignalSending(KernelBase):
    """Queueing, waking and dequeueing signals (kernel/signal.c): part of
    :class:`kernel_model.kernel.kernel.Kernel`."""

    def send_sig(
        self,
        task,
        signo: int,
        *,
        addr: int | None = None,
        detail: str = "",
        code: int | None = None,
        force: bool = True,
        info: bytes | None = None,
    ) -> None:
        """Queue a signal on ``task`` and return, as the kernel's ``force_sig_fault`` /
        ``send_sig`` do: it is delivered at the task's next exit to user mode, after the
        trap or syscall handler has returned and its registers were written back (see
        ``exit_to_user_mode_loop``).  ``addr`` is the fault address (si_addr), ``code``
        the si_code (default: SI_KERNEL, or SEGV_MAPERR with an address).  ``force``
        (the kernel's own signals) delivers it through a blocked mask (a blocked fault
        kills); ``force=False`` is an ordinary sent signal, which a mask holds back."""
        legacy_queue(task.pending_signals, PendingSignal(signo, addr, detail, code, force, info))
        if force or not task.sigmask & sigmask(signo):
            set_tif_sigpending(task)  # complete_signal -> signal_wake_up

    def send_process_sig(
        self, proc, signo: int, *, detail: str = "", code: int | None = None, info: bytes | None = None
    ) -> None:
        """A process-directed signal (kill, SIGCHLD): queued on the process's shared
        pending set; any of its tasks that does not block it takes it (complete_signal),
        and one sleeping in rt_sigsuspend wakes up."""
        legacy_queue(proc.signal.shared_pending, PendingSignal(signo, None, detail, code, False, info))
        for t in proc.tasks:
            if not t.sigmask & sigmask(signo):
                set_tif_sigpending(t)
                self.signal_wake_up(t)
                break

    def signal_wake_up(self, task) -> None:
        """signal_wake_up: a task in an interruptible sleep (TASK_INTERRUPTIBLE) wakes;
        its syscall returns what its sleep said a signal makes of it (``block``'s
        ``interrupt``: -ERESTARTSYS for a pipe read, -ERESTARTNOHAND for pause...) and
        the signal is taken, and the syscall perhaps restarted, when it next runs."""
        if task.state != "blocked" or task.sleep_interrupt is None:
            return
        interrupt = task.sleep_interrupt
        self.wake(task, interrupt() if callable(interrupt) else interrupt)

    def signal_pending(self, task) -> bool:
        """``signal_pending()`` (TIF_SIGPENDING after recalc_sigpending): a signal the
        task's mask does not block, or a forced one, is queued - and uprobe_deny_signal
        has not cleared the flag (then an interruptible sleep sleeps on)."""
        if not task.pending_signals and not task.process.signal.shared_pending:
            return False
        return self.next_signal(task) is not None

    def fatal_signal_pending(self, task) -> bool:
        """``__fatal_signal_pending``: SIGKILL in the task's pending set, where
        complete_signal put it for a signal fatal to the whole group - SIGKILL, or a
        signal at its default action that kills without a core dump, not blocked (a
        forced one - force_sig - is unblocked and reset to the default first)."""
        actions = task.process.sighand.action
        for p in (*task.pending_signals, *task.process.signal.shared_pending):
            signo = p.signo
            if signo == SIGKILL:
                return True
            blocked = bool(task.sigmask & sigmask(signo))
            if (blocked and not p.force) or signo in COREDUMP_SIGNALS or signo in IGNORED_BY_DEFAULT:
                continue
            handler = parse_sigaction(actions.get(signo))[0]
            if blocked or handler == SIG_DFL or (p.force and handler == SIG_IGN):
                return True
        return False

    def pending_set(self, task) -> int:
        """The pending signals of ``task`` as a sigset: its own and its process's."""
        bits = 0
        for p in task.pending_signals + task.process.signal.shared_pending:
            bits |= sigmask(p.signo)
        return bits

    def next_signal(self, task, wanted: int | None = None) -> tuple[list, int] | None:
        """dequeue_signal/next_signal: (queue, index) of the signal to deliver - the
        task's own queue before the process's, synchronous (fault) signals first, then
        the lowest number; blocked ones stay queued unless forced.  ``wanted`` (a
        sigset, rt_sigtimedwait) takes any signal in it instead, blocked or not.
        Without ``wanted`` it answers the exit to user mode, which looks only while
        TIF_SIGPENDING is set: nothing while uprobe_deny_signal holds the signals of an
        out-of-line step back."""
        if wanted is None and task.utask is not None and not task.utask.sigpending:
            return None
        for queue in (task.pending_signals, task.process.signal.shared_pending):
            if wanted is not None:
                ok = [(i, p) for i, p in enumerate(queue) if wanted & sigmask(p.signo)]
            else:
                ok = [(i, p) for i, p in enumerate(queue) if p.force or not task.sigmask & sigmask(p.signo)]
            if ok:
                i, _ = min(ok, key=lambda e: (e[1].signo not in SYNCHRONOUS_SIGNALS, e[1].signo, e[0]))
                return queue, i
        return None

    def dequeue_signal(self, task, wanted: int) -> PendingSignal | None:
        """Take the first pending signal in the set ``wanted`` off its queue."""
        nxt = self.next_signal(task, wanted)
        return None if nxt is None else nxt[0].pop(nxt[1])

    def force_sigsegv(self, task, signo: int, why: str) -> None:
        """signal_setup_done(failed) -> force_sigsegv: no frame could be built for
        ``signo``'s handler; SIGSEGV comes next (at its default action if it was
        SIGSEGV's own handler that failed)."""
        if signo == SIGSEGV:
            task.process.sighand.action.pop(SIGSEGV, None)
        self.send_sig(task, SIGSEGV, detail=f"no room for the {signal_name(signo)} frame ({why})")
