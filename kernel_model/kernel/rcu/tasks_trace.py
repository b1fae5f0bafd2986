"""RCU Tasks Trace (kernel/rcu/tasks.h, include/linux/rcupdate_trace.h).

The read side touches only the current task: ``rcu_read_lock_trace`` increments
``current->trc_reader_nesting`` (then a compiler barrier; the ``smp_mb()`` is only for
architectures with ``CONFIG_TASKS_TRACE_RCU_READ_MB``, not x86), and
``rcu_read_unlock_trace`` stores the decremented nesting and checks
``trc_reader_special``, all in the task's own cache line.  Uprobes switched to it from
SRCU in 6.13 (87195a1ee332) for exactly that: no barrier, nothing shared.  The price
moved to the writer: ``synchronize_rcu_tasks_trace`` waits for every task to pass
a quiescent state, tens of milliseconds (what made detaching uprobes slow).
"""

from __future__ import annotations

from kernel_model.kernel.locking.access_log import WRITE


class RcuTasksTrace:
    def __init__(self, name: str = "rcu_tasks_trace"):
        self.name = name
        self.nesting: dict[int, int] = {}  # tid -> trc_reader_nesting
        self.grace_periods = 0

    def read_lock(self, log, cpu: int, tid: int) -> None:
        self.nesting[tid] = self.nesting.get(tid, 0) + 1
        if log is not None:
            log.add(cpu, "task.trc_reader_nesting", tid, WRITE)

    def read_unlock(self, log, cpu: int, tid: int) -> None:
        n = self.nesting.get(tid, 0)
        if n <= 0:
            raise RuntimeError(f"rcu_read_unlock_trace on task {tid} outside a read section")
        self.nesting[tid] = n - 1
        if log is not None:
            log.add(cpu, "task.trc_reader_nesting", tid, WRITE)

    def readers(self) -> int:
        return sum(1 for n in self.nesting.values() if n)

    def synchronize(self) -> None:
        """``synchronize_rcu_tasks_trace``: counted; its duration is the model's."""
        self.grace_periods += 1
