"""alarm, getitimer and setitimer (kernel/time/itimer.c): each process's ITIMER_REAL on
the virtual clock, and it_real_fn's SIGALRM when it expires.
"""

from __future__ import annotations

import errno as E
import struct

from kernel_model.arch.x86.kernel.signal import IGNORED_BY_DEFAULT, SIG_DFL, SIG_IGN, parse_sigaction, siginfo
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall
from kernel_model.kernel.signal import blocked_in
from kernel_model.kernel.time.timekeeping import NSEC, USEC

SIGALRM, SI_KERNEL = 14, 0x80
ITIMER_REAL = 0


class ItimerSyscalls:
    """The real-time interval timer."""

    def __init__(self, sc):
        self.m = sc.m
        self.clock = sc.clock

    def run_timers(self) -> bool:
        """it_real_fn: every process whose ITIMER_REAL expired at the current virtual
        time gets SIGALRM (SI_KERNEL); a periodic timer re-arms.  True if one fired."""
        fired = False
        for proc in self.m.processes:
            timer = proc.signal.real_timer
            if proc.exit_result is not None or timer is None or timer[0] > self.clock.ns:
                continue
            expires, interval = timer
            proc.signal.real_timer = (expires + interval, interval) if interval else None
            if interval and proc.signal.real_timer[0] <= self.clock.ns:  # catch up, one signal
                skipped = (self.clock.ns - expires) // interval
                proc.signal.real_timer = (expires + (skipped + 1) * interval, interval)
            self._send_kernel(proc, SIGALRM)
            fired = True
        return fired

    def _send_kernel(self, proc, sig) -> None:
        """A kernel-originated process signal (SEND_SIG_PRIV): prepare_signal drops it
        when ignored; SIG_DFL SIGALRM terminates."""
        handler = parse_sigaction(proc.sighand.action.get(sig))[0]
        blocked = blocked_in([t for t in proc.tasks if t.state != "dead"], sig)
        if not blocked and (handler == SIG_IGN or (handler == SIG_DFL and sig in IGNORED_BY_DEFAULT)):
            return
        self.m.send_process_sig(
            proc, sig, detail="timer expired", code=SI_KERNEL, info=siginfo(sig, SI_KERNEL, None, 0)
        )

    def _itimer_value(self, proc) -> tuple[int, int]:
        """(remaining ns, interval ns) of the process's ITIMER_REAL."""
        if proc.signal.real_timer is None:
            return 0, 0
        expires, interval = proc.signal.real_timer
        return max(expires - self.clock.ns, 1), interval

    @syscall(37, "alarm")
    def sys_alarm(self, task, regs, seconds, *_):
        """alarm_setitimer: returns the old timer's seconds, rounded to nearest (a
        timer under a second left counts as one)."""
        left, _ = self._itimer_value(task.process)
        seconds &= 0xFFFFFFFF
        task.process.signal.real_timer = (self.clock.ns + seconds * NSEC, 0) if seconds else None
        secs, rest = divmod(left, NSEC)
        return secs + (1 if (not secs and rest) or rest >= NSEC // 2 else 0)

    @syscall(36, "getitimer", partial="ITIMER_REAL only")
    def sys_getitimer(self, task, regs, which, value, *_):
        if which != ITIMER_REAL:
            return neg(E.EINVAL)
        self._write_itimerval(value, *self._itimer_value(task.process))
        return 0

    @syscall(38, "setitimer", partial="ITIMER_REAL only; ITIMER_VIRTUAL and ITIMER_PROF are EINVAL")
    def sys_setitimer(self, task, regs, which, new, old, *_):
        """ITIMER_REAL on the virtual clock; ITIMER_VIRTUAL/PROF (CPU time) are not
        modeled and answer EINVAL."""
        if which != ITIMER_REAL:
            return neg(E.EINVAL)
        if new:
            isec, iusec, vsec, vusec = struct.unpack("<qqqq", self.m.mem.read_user(new, 32))
            if not (0 <= iusec < 1_000_000 and 0 <= vusec < 1_000_000 and isec >= 0 and vsec >= 0):
                return neg(E.EINVAL)
        if old:
            self._write_itimerval(old, *self._itimer_value(task.process))
        if new:
            value, interval = vsec * NSEC + vusec * USEC, isec * NSEC + iusec * USEC
            task.process.signal.real_timer = (self.clock.ns + value, interval) if value else None
        return 0

    def _write_itimerval(self, ptr, value_ns, interval_ns) -> None:
        usec = lambda ns: divmod(-(-ns // USEC), 1_000_000)  # noqa: E731 - rounded up
        self.m.mem.write_user(ptr, struct.pack("<qqqq", *usec(interval_ns), *usec(value_ns)))
