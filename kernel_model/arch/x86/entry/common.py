"""The syscall entry and the exit to user mode (kernel/entry/common.c and
arch/x86/entry/syscall_64.c): ``do_syscall_64`` as the ``syscall`` instruction and
entry_SYSCALL_64 enter it, and ``exit_to_user_mode_loop``, where queued signals are
delivered and interrupted syscalls restarted after a trap or syscall handler returned."""

from __future__ import annotations

from kernel_model.kernel.kernel_base import KernelBase
from kernel_model.trace import events as ev


class UserEntry(KernelBase):
    """Entering and leaving the kernel: part of :class:`kernel_model.kernel.kernel.Kernel`
    (the engine reports the ``syscall`` instruction to :meth:`do_syscall_64`)."""

    def do_syscall_64(self) -> None:
        """The ``syscall`` instruction as the hardware and entry_SYSCALL_64 do it."""
        task = self.task
        proc = task.process
        rf = proc.cpu_regs
        regs, args = rf.syscall_entry()  # hardware: rcx, r11 <- rip, rflags
        nr = regs.orig_rax
        self.counters.syscalls[nr] += 1
        bus = self.events
        if bus.active:
            bus.publish(ev.Syscall(task, nr, regs.rip - 2, args))
        cpu = proc.cpu
        syscalls = self.syscalls
        self._in_syscall = True
        try:
            syscalls.dispatch(task, regs, nr, args)
            if task.process is not proc or proc.cpu is not cpu:
                # execve replaced the address space: the new registers are set, the
                # old CPU state is gone; exit-to-user work happens before the next run
                task.orig_rax = -1
                self.engine.stop(cpu)
                return
            task.last_enosys = nr if nr not in syscalls.table else None
            state = task.state
            if self._result is not None or state == "dead":
                self.engine.stop(cpu)  # exited: the scheduler picks the next task
                return
            if state == "running":
                if task.pending_rax is not None:
                    regs.rax, task.pending_rax = task.pending_rax, None  # woken before it slept
                orig_rax = regs.orig_rax
                if (
                    task.pending_signals
                    or task.process.signal.shared_pending
                    or (orig_rax is not None and orig_rax >= 0 and self.restart_code(regs) is not None)
                ) and self.exit_to_user_mode_loop(task, regs):
                    return
        finally:
            self._in_syscall = False
        if bus.active:
            bus.publish(ev.SyscallReturn(task, nr, regs.rax, regs.rip))
        if self._result is not None or task.state == "dead":
            return
        # Return to user: SYSRET when rcx/r11 still match rip/flags, else the IRET path;
        # either way the task resumes with pt_regs as the kernel left them.
        # With TF in the flags it is always IRET (do_syscall_64: SYSRET cannot restore
        # RF, and would trap at once on TF).  The hardware SYSCALL masked TF on entry
        # (MSR_SYSCALL_MASK), so no #DB followed the syscall itself; IRET restores TF and
        # the single-step #DB comes after the NEXT user instruction.  The engine keeps TF
        # through the hook and raises #DB as soon as it returns: that trap is dropped.
        if regs.tf:
            self._db_after_syscall = (task, regs.rip)
        regs.orig_rax = -1
        rf.syscall_exit(regs)
        # a sleeper keeps orig_rax: its exit-to-user work (restart) waits for the wake-up
        state = task.state
        task.orig_rax = nr if state == "blocked" and task.sleep_interrupt is not None else -1
        if state != "running" or self._switch_requested or self._stop_requested:
            # blocked, or yielded: let the scheduler run.  A stop asked for from another
            # thread while this hook ran (Ctrl-C during a waiting read) is asked again
            # here, on the CPU's thread: the engine may drop a request made mid-hook.
            self.engine.emu_stop(cpu)

    def exit_to_user_mode_loop(self, task, regs) -> bool:
        """``exit_to_user_mode_loop``: with a signal to deliver or a syscall to
        restart, ``arch_do_signal_or_restart`` on ``regs`` (the registers the handler
        left), then end the current engine start so the task resumes where delivery
        put it.  False if there was nothing to do."""
        if self.next_signal(task) is None and self.restart_code(regs) is None:
            return False
        self.arch_do_signal_or_restart(task, regs)
        self.engine.stop(self.cpu)
        return True

    def write_back_in_trap(self, regs) -> None:
        """The registers a trap or syscall handler changed, into the CPU (inside a
        syscall rip is set 2 before the return address: the engine adds them)."""
        changes = regs.changed()
        if self._in_syscall:
            changes[16] = (regs.rip - 2) & 0xFFFFFFFFFFFFFFFF  # see do_syscall_64
        self.cpu_regs.write(changes, in_trap=self._in_syscall)
        self.task.orig_rax = regs.orig_rax

    def _resume_exit_work(self, task) -> bool:
        """Before the task runs on: the exit-to-user work of a syscall it slept in (a
        signal to deliver, a restart to make), or a signal sent to it from outside a
        trap.  True when delivery moved it."""
        in_syscall = task.orig_rax != -1
        done = (in_syscall or self.signal_pending(task)) and self.exit_to_user_mode_loop(task, self.read_regs())
        task.orig_rax = -1
        return done
