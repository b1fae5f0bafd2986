"""``seqcount_t`` (include/linux/seqlock.h): readers load the sequence before and after
their lockless read (``read_seqcount_begin`` / ``read_seqcount_retry``) and retry if it
moved or was odd; writers make it odd, then even again (``write_seqcount_begin`` /
``write_seqcount_end``).  Readers only load: the line stays shared among all CPUs
until a writer comes, which is why the lockless uprobes tree (6.12) and the
``mm_lock_seq`` speculation (6.14) scale."""

from __future__ import annotations

from kernel_model.kernel.locking.access_log import READ, WRITE


class SeqCount:
    def __init__(self, name: str, inst=None):
        self.name, self.inst = name, inst
        self.sequence = 0

    def read_begin(self, log, cpu: int) -> int:
        if log is not None:
            log.add(cpu, self.name, self.inst, READ)
        return self.sequence & ~1

    def read_retry(self, log, cpu: int, start: int) -> bool:
        if log is not None:
            log.add(cpu, self.name, self.inst, READ)
        return self.sequence != start

    def write_begin(self, log=None, cpu: int = 0) -> None:
        self.sequence += 1
        if log is not None:
            log.add(cpu, self.name, self.inst, WRITE)

    def write_end(self, log=None, cpu: int = 0) -> None:
        self.sequence += 1
        if log is not None:
            log.add(cpu, self.name, self.inst, WRITE)
