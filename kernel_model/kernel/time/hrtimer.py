"""nanosleep (kernel/time/hrtimer.c): a sleep until a deadline on the virtual clock."""

from __future__ import annotations

import errno as E
import struct

from kernel_model.include.linux.errno import ERESTART_RESTARTBLOCK, ERESTARTNOHAND, neg
from kernel_model.include.linux.syscalls import syscall
from kernel_model.kernel.time.timekeeping import NSEC
from kernel_model.kernel.wait import sleep_on, still_asleep
from kernel_model.mm.mm_types import GuestFault


class HrtimerSyscalls:
    """Sleeping."""

    def __init__(self, sc):
        self.m = sc.m
        self.clock = sc.clock
        self.timeouts = sc.timeouts

    @syscall(35, "nanosleep")
    def sys_nanosleep(self, task, regs, req, rem, *_):
        return self.hrtimer_nanosleep(task, req, rem, absolute_ns=None)

    def hrtimer_nanosleep(self, task, req, rem, absolute_ns) -> int | None:
        """hrtimer_nanosleep on the virtual clock: validate the request, then sleep
        until its expiry (relative, or absolute on the clock whose zero is
        ``absolute_ns`` on the machine's clock)."""
        sec, nsec = struct.unpack("<qq", self.m.mem.read_user(req, 16))
        if sec < 0 or not 0 <= nsec < NSEC:
            return neg(E.EINVAL)
        end = sec * NSEC + nsec + (absolute_ns if absolute_ns is not None else self.clock.ns)
        return self.do_nanosleep(task, end, rem, relative=absolute_ns is None)

    def do_nanosleep(self, task, end: int, rem: int, relative: bool) -> int | None:
        """do_nanosleep: sleep until the virtual clock reaches ``end`` (it moves there
        when every task sleeps, see ``idle``); other tasks run meanwhile.  A signal
        wakes it early: an absolute sleep returns -ERESTARTNOHAND, a relative one
        writes the time left to ``rem`` (nanosleep_copyout) and returns
        -ERESTART_RESTARTBLOCK, whose restart_syscall sleeps on to the same expiry
        (hrtimer_nanosleep_restart)."""
        if end <= self.clock.ns:
            self.m.yield_cpu()
            return 0
        state = {"done": False}
        token = sleep_on(task)

        def expire() -> None:
            if not state["done"] and still_asleep(task, token):
                state["done"] = True
                self.m.wake(task, 0)

        def interrupted() -> int:
            state["done"] = True
            if not relative:
                return neg(ERESTARTNOHAND)
            left = end - self.clock.ns
            if left <= 0:
                return 0
            if rem:
                try:
                    task.process.mem.write_user(rem, struct.pack("<qq", *divmod(left, NSEC)))
                except GuestFault:
                    return neg(E.EFAULT)
            task.restart_block = lambda t: self.do_nanosleep(t, end, rem, relative=True)
            return neg(ERESTART_RESTARTBLOCK)

        self.timeouts.add(end, task.tid, expire, state)
        self.m.block(task, "nanosleep", interrupt=interrupted)
        return None
