"""The scheduler's syscalls (kernel/sched/syscalls.c): sched_yield and
sched_getaffinity on a machine with one CPU.
"""

from __future__ import annotations

import errno as E

from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import int_arg, syscall

CPUMASK_SIZE = 8                   # cpumask_size(): one unsigned long for the one CPU


class SchedSyscalls:
    """Yielding the CPU and the CPU affinity."""

    def __init__(self, sc):
        self.m = sc.m

    @syscall(24, "sched_yield")
    def sys_sched_yield(self, task, regs, *_):
        self.m.yield_cpu()
        return 0

    @syscall(204, "sched_getaffinity")
    def sys_sched_getaffinity(self, task, regs, pid, length, mask, *_):
        """sched_getaffinity: the buffer must hold nr_cpu_ids bits and be a whole
        number of longs; min(len, cpumask_size()) bytes of the one-CPU mask are copied
        and their count returned."""
        length &= 0xFFFFFFFF
        if length * 8 < 1 or length % 8:
            return neg(E.EINVAL)
        if self._find_task(task, pid) is None:
            return neg(E.ESRCH)
        n = min(length, CPUMASK_SIZE)
        self.m.mem.write_user(mask, (1).to_bytes(CPUMASK_SIZE, "little")[:n])
        return n

    def _find_task(self, task, pid):
        pid = int_arg(pid)
        if pid == 0:
            return task
        return next((t for t in self.m.tasks if t.tid == pid), None)
