"""Reading the virtual clock: time and gettimeofday (kernel/time/time.c),
clock_gettime, clock_getres and clock_nanosleep (kernel/time/posix-timers.c).  Each
read advances the clock CLOCK_TICK_NS, and an ITIMER_REAL may expire as time passes.
"""

from __future__ import annotations

import errno as E
import struct

from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall
from kernel_model.kernel.time.timekeeping import CLOCK_TICK_NS, COARSE_RES_NS

TIMER_ABSTIME = 1


class TimeSyscalls:
    """The clocks."""

    def __init__(self, sc):
        self.m = sc.m
        self.clock = sc.clock
        self.itimers = sc.itimers
        self.hrtimer = sc.hrtimer

    def tick(self) -> int:
        """A clock read: the clock advances CLOCK_TICK_NS first (two reads never see the
        same time), firing an ITIMER_REAL due by then; the new CLOCK_REALTIME ns."""
        self.clock.ns += CLOCK_TICK_NS
        self.itimers.run_timers()  # an ITIMER_REAL may expire as time passes
        return self.clock.ns

    @syscall(228, "clock_gettime")
    def sys_clock_gettime(self, task, regs, clk, tp, *_):
        ns = self.tick()
        if clk not in (0, 1, 2, 3, 4, 5, 6, 7):
            return neg(E.EINVAL)
        if clk != 0:
            ns -= self.clock.boot_ns  # monotonic-like clocks start at boot
        self.m.mem.write_user(tp, struct.pack("<qq", ns // 1_000_000_000, ns % 1_000_000_000))
        return 0

    @syscall(229, "clock_getres")
    def sys_clock_getres(self, task, regs, clk, res, *_):
        """posix_get_hrtimer_res: 1 ns for the high-resolution clocks, a jiffy (HZ=250)
        for the coarse ones; the clocks clock_gettime knows (the vDSO's fallback)."""
        if clk not in (0, 1, 2, 3, 4, 5, 6, 7):
            return neg(E.EINVAL)
        if res:
            ns = COARSE_RES_NS if clk in (5, 6) else 1
            self.m.mem.write_user(res, struct.pack("<qq", 0, ns))
        return 0

    @syscall(96, "gettimeofday")
    def sys_gettimeofday(self, task, regs, tv, tz, *_):
        ns = self.tick()
        if tv:
            self.m.mem.write_user(tv, struct.pack("<qq", ns // 1_000_000_000, (ns // 1000) % 1_000_000))
        if tz:
            self.m.mem.write_user(tz, b"\0" * 8)
        return 0

    @syscall(201, "time")
    def sys_time(self, task, regs, tloc, *_):
        secs = self.tick() // 1_000_000_000
        if tloc:
            self.m.mem.write_u64(tloc, secs)
        return secs

    @syscall(230, "clock_nanosleep", partial="CLOCK_REALTIME, CLOCK_MONOTONIC and CLOCK_BOOTTIME")
    def sys_clock_nanosleep(self, task, regs, clk, flags, req, rem, *_):
        if clk not in (0, 1, 7):  # REALTIME, MONOTONIC, BOOTTIME
            return neg(E.EINVAL if clk not in (2, 3) else E.ENOTSUP)
        base = 0 if clk == 0 else self.clock.boot_ns
        if flags & TIMER_ABSTIME:
            return self.hrtimer.hrtimer_nanosleep(task, req, 0, absolute_ns=base)
        return self.hrtimer.hrtimer_nanosleep(task, req, rem, absolute_ns=None)
