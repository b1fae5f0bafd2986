"""``struct percpu_rw_semaphore`` (kernel/locking/percpu-rwsem.c): readers increment
their own CPU's ``read_count`` after checking ``rcu_sync_is_idle()`` (a load of a line
writers alone store to); writers pay an RCU grace period.  Proposed in 2024 for
``uprobes_treelock`` and not merged (the lockless tree won): a design to compare."""

from __future__ import annotations

from kernel_model.kernel.locking.access_log import READ, WRITE


class PercpuRwSemaphore:
    def __init__(self, name: str):
        self.name = name
        self.read_count: dict[int, int] = {}

    def down_read(self, log, cpu: int) -> None:
        self.read_count[cpu] = self.read_count.get(cpu, 0) + 1
        if log is not None:
            log.add(cpu, self.name + ".rss", None, READ)  # rcu_sync_is_idle(&sem->rss)
            log.add(cpu, self.name + ".read_count", cpu, WRITE)  # this_cpu_inc(*sem->read_count)

    def up_read(self, log, cpu: int) -> None:
        self.read_count[cpu] = self.read_count.get(cpu, 0) - 1
        if log is not None:
            log.add(cpu, self.name + ".read_count", cpu, WRITE)  # this_cpu_dec(*sem->read_count)

    def readers(self) -> int:
        return sum(self.read_count.values())
