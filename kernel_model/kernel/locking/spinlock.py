"""``spinlock_t`` (include/linux/spinlock.h, kernel/locking/qspinlock.c).

A queued spinlock's fast path is one ``cmpxchg`` on the lock word; whoever holds it
excludes every other CPU until ``spin_unlock`` (a release store).  The model keeps the
holder and records the acquire as a ``lock`` (an atomic that serializes) and the
release as an ``unlock``.  Taking a held lock is a modeling error: the emulator runs
one kernel path at a time, so a path that would spin here has a bug.
"""

from __future__ import annotations

from kernel_model.kernel.locking.access_log import LOCK, UNLOCK


class SpinLock:
    def __init__(self, name: str, inst=None):
        self.name, self.inst = name, inst
        self.owner: int | None = None  # CPU holding it
        self.acquisitions = 0

    def lock(self, log, cpu: int) -> None:
        if self.owner is not None:
            raise RuntimeError(f"{self.name}: spin_lock on CPU {cpu} while CPU {self.owner} holds it")
        self.owner = cpu
        self.acquisitions += 1
        if log is not None:
            log.add(cpu, self.name, self.inst, LOCK)

    def unlock(self, log, cpu: int) -> None:
        if self.owner != cpu:
            raise RuntimeError(f"{self.name}: spin_unlock on CPU {cpu}, held by {self.owner}")
        self.owner = None
        if log is not None:
            log.add(cpu, self.name, self.inst, UNLOCK)
