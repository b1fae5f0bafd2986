"""getrandom (drivers/char/random.c): bytes of the machine's seeded generator, so a run
is reproducible.
"""

from __future__ import annotations

from kernel_model.include.linux.syscalls import syscall


class RandomSyscalls:
    """Random bytes."""

    def __init__(self, sc):
        self.m = sc.m
        self.rng = sc.rng

    @syscall(318, "getrandom")
    def sys_getrandom(self, task, regs, buf, count, flags, *_):
        count = min(count, 1 << 25)
        self.m.mem.write_user(buf, self.rng.randbytes(count))
        return count
