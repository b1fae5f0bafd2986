"""futex and set_robust_list (kernel/futex/): FUTEX_WAIT and FUTEX_WAKE on a word of
the caller's address space, with a deadline on the virtual clock.
"""

from __future__ import annotations

import errno as E
import struct

from kernel_model.include.linux.errno import ERESTART_RESTARTBLOCK, ERESTARTSYS, neg
from kernel_model.include.linux.syscalls import syscall
from kernel_model.kernel.time.timekeeping import NSEC
from kernel_model.kernel.wait import sleep_on, still_asleep

FUTEX_WAIT, FUTEX_WAKE, FUTEX_WAIT_BITSET, FUTEX_WAKE_BITSET = 0, 1, 9, 10
FUTEX_CMD_MASK = ~(128 | 256)  # FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME
FUTEX_CLOCK_REALTIME = 256


class FutexSyscalls:
    """Fast user-space locking."""

    def __init__(self, sc):
        self.m = sc.m
        self.clock = sc.clock
        self.timeouts = sc.timeouts

    @syscall(202, "futex", partial="FUTEX_WAIT, FUTEX_WAKE and their BITSET forms; other operations are ENOSYS")
    def sys_futex(self, task, regs, uaddr, op, val, timeout, uaddr2, val3):
        cmd = op & FUTEX_CMD_MASK
        proc = task.process
        if cmd in (FUTEX_WAIT, FUTEX_WAIT_BITSET):
            deadline = None
            if timeout:
                sec, nsec = struct.unpack("<qq", proc.mem.read_user(timeout, 16))
                if sec < 0 or not 0 <= nsec < NSEC:
                    return neg(E.EINVAL)
                if cmd == FUTEX_WAIT:  # relative, on CLOCK_MONOTONIC
                    deadline = self.clock.ns + sec * NSEC + nsec
                else:  # absolute; MONOTONIC unless CLOCK_REALTIME
                    base = 0 if op & FUTEX_CLOCK_REALTIME else self.clock.boot_ns
                    deadline = base + sec * NSEC + nsec
            return self.futex_wait(task, uaddr, val, deadline)
        if cmd in (FUTEX_WAKE, FUTEX_WAKE_BITSET):
            return self.futex_wake(proc, uaddr, val)
        return neg(E.ENOSYS)

    def futex_wait(self, task, uaddr, val, deadline: int | None) -> int | None:
        """futex_wait: -EAGAIN unless the word still holds ``val``; then sleep until a
        FUTEX_WAKE (0), the deadline on the virtual clock (-ETIMEDOUT) or a signal:
        -ERESTARTSYS without a timeout, else -ERESTART_RESTARTBLOCK whose
        restart_syscall (futex_wait_restart) waits again until the same deadline."""
        proc = task.process
        cur = struct.unpack("<I", proc.mem.read_user(uaddr, 4))[0]
        if cur != val & 0xFFFFFFFF:
            return neg(E.EAGAIN)
        if deadline is not None and deadline <= self.clock.ns:
            self.m.yield_cpu()
            return neg(E.ETIMEDOUT)
        task.futex_key = (id(proc.mem), uaddr)
        task.futex_timeout = None
        if deadline is None:
            self.m.block(task, "futex", interrupt=neg(ERESTARTSYS))
            return None
        state = {"done": False}
        token = sleep_on(task)
        task.futex_timeout = state

        def expire() -> None:
            if not state["done"] and still_asleep(task, token):
                state["done"] = True
                self.m.wake(task, neg(E.ETIMEDOUT))

        def interrupted() -> int:
            state["done"] = True
            task.restart_block = lambda t: self.futex_wait(t, uaddr, val, deadline)
            return neg(ERESTART_RESTARTBLOCK)

        self.timeouts.add(deadline, task.tid, expire, state)
        self.m.block(task, "futex", interrupt=interrupted)
        return None

    def futex_wake(self, proc, uaddr, n) -> int:
        key = (id(proc.mem), uaddr)
        woken = 0
        for t in sorted(self.m.tasks, key=lambda t: t.tid):
            if woken >= n:
                break
            if t.state == "blocked" and t.blocked_on == "futex" and getattr(t, "futex_key", None) == key:
                timed = getattr(t, "futex_timeout", None)
                if timed is not None:
                    timed["done"] = True  # its deadline is no deadline any more
                    t.futex_timeout = None
                self.m.wake(t, 0)
                woken += 1
        return woken

    @syscall(273, "set_robust_list", partial="the list is remembered; it is not walked at exit")
    def sys_set_robust_list(self, task, regs, head, length, *_):
        if length != 24:
            return neg(E.EINVAL)
        task.robust_list = head
        return 0
