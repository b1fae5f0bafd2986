"""The scheduler's syscalls (kernel/sched/syscalls.c): sched_yield and the CPU
affinity, sched_setaffinity and sched_getaffinity, on a machine of ``nr_cpu_ids``
CPUs, every one online (:mod:`kernel_model.include.linux.cpumask`).
"""

from __future__ import annotations

import errno as E

from kernel_model.include.linux.cpumask import cpumask_first, cpumask_size
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import int_arg, syscall


class SchedSyscalls:
    """Yielding the CPU and the CPU affinity."""

    def __init__(self, sc):
        self.m = sc.m

    @syscall(24, "sched_yield")
    def sys_sched_yield(self, task, regs, *_):
        self.m.yield_cpu()
        return 0

    @syscall(203, "sched_setaffinity")
    def sys_sched_setaffinity(self, task, regs, pid, length, mask, *_):
        """sched_setaffinity: ``get_user_cpu_mask`` copies min(len, cpumask_size())
        bytes (EFAULT on a bad pointer; a shorter buffer leaves the other CPUs out),
        then ``sched_setaffinity``: ESRCH for an unknown pid, EPERM unless the caller
        owns the task (``check_same_owner``) or is root (CAP_SYS_NICE), and
        ``__set_cpus_allowed_ptr``'s EINVAL when no online CPU is left."""
        scheduler = self.m.scheduler
        length &= 0xFFFFFFFF
        n = min(length, cpumask_size(scheduler.nr_cpu_ids))
        new = int.from_bytes(self.m.mem.read_user(mask, n), "little") if n else 0
        target = self._find_task(task, pid)
        if target is None:
            return neg(E.ESRCH)
        if not self._may_set(task.cred, target.cred):
            return neg(E.EPERM)
        new &= scheduler.online_mask
        if not new:
            return neg(E.EINVAL)
        self.set_cpus_allowed(target, new)
        return 0

    def set_cpus_allowed(self, task, mask: int) -> None:
        """``__set_cpus_allowed_ptr``: the task's affinity becomes ``mask``; a task
        whose CPU left it migrates to the first CPU of the mask (``move_queued_task``),
        the calling task before it returns to user mode (the scheduler places it on an
        allowed CPU at once)."""
        task.cpus_mask = mask
        if mask >> task.cpu & 1:
            return
        task.cpu = cpumask_first(mask)
        if task is self.m.task:
            self.m.yield_cpu()

    @staticmethod
    def _may_set(cred, pcred) -> bool:
        """``check_same_owner`` or ``capable(CAP_SYS_NICE)`` (root's)."""
        if cred is None or pcred is None or cred.euid == 0:
            return True
        return cred.euid in (pcred.euid, pcred.uid)

    @syscall(204, "sched_getaffinity")
    def sys_sched_getaffinity(self, task, regs, pid, length, mask, *_):
        """sched_getaffinity: the buffer must hold nr_cpu_ids bits and be a whole
        number of longs; min(len, cpumask_size()) bytes of the task's mask (within the
        active CPUs) are copied and their count returned."""
        scheduler = self.m.scheduler
        length &= 0xFFFFFFFF
        if length * 8 < scheduler.nr_cpu_ids or length % 8:
            return neg(E.EINVAL)
        target = self._find_task(task, pid)
        if target is None:
            return neg(E.ESRCH)
        size = cpumask_size(scheduler.nr_cpu_ids)
        n = min(length, size)
        bits = target.cpus_mask & scheduler.online_mask
        self.m.mem.write_user(mask, bits.to_bytes(size, "little")[:n])
        return n

    def _find_task(self, task, pid):
        pid = int_arg(pid)
        if pid == 0:
            return task
        return next((t for t in self.m.tasks if t.tid == pid), None)
