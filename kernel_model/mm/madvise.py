"""madvise (mm/madvise.c)."""

from __future__ import annotations

import errno as E

from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall
from kernel_model.mm.mm_types import PAGE_SIZE, page_up

MADV_DONTNEED = 4
# madvise_behavior_valid(): the advice values the kernel accepts
MADV_VALID = frozenset(
    (0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 100, 101, 102, 103)
)


class MadviseSyscalls:
    """Advice on memory use."""

    def __init__(self, sc):
        self.m = sc.m

    @syscall(28, "madvise", partial="MADV_DONTNEED zeroes private anonymous pages; other advice changes nothing")
    def sys_madvise(self, task, regs, addr, length, advice, *_):
        """madvise(): MADV_DONTNEED zeroes private anonymous pages (glibc's free relies
        on it); the other advice changes nothing the guest can see."""
        if advice not in MADV_VALID or addr & (PAGE_SIZE - 1):
            return neg(E.EINVAL)
        end = page_up(addr + length)
        if length and end <= addr:
            return neg(E.EINVAL)
        if end == addr:
            return 0
        if self.m.mem.mapped_bytes(addr, end) != end - addr:
            return neg(E.ENOMEM)
        if advice == MADV_DONTNEED:
            self.m.mem.discard(addr, end - addr)
        return 0
