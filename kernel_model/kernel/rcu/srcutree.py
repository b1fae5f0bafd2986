"""Sleepable RCU read sides and grace periods (kernel/rcu/srcutree.c,
include/linux/srcu.h, include/linux/srcutree.h).

Three read-side flavors, as the kernel has them on x86:

``srcu``
    ``srcu_read_lock``: load ``ssp->srcu_idx``, ``this_cpu_inc`` the CPU's
    ``srcu_lock_count[idx]``, ``smp_mb()``; ``srcu_read_unlock``: ``smp_mb()``,
    ``this_cpu_inc(srcu_unlock_count[idx])``.  No shared store, but two full barriers
    per read section: what bounded uprobes under SRCU in 6.12.
``lite`` / ``fast``
    ``srcu_read_lock_lite`` (2024, proposed for uprobes, the "SRCU-lite" of the
    published comparison) and ``srcu_read_lock_fast`` / ``_fast_updown`` (the
    flavor ``uretprobes_srcu`` became in 7.3, 36c8b02c3fe9): the per-CPU increment
    and a compiler barrier only; the grace period pays instead (it waits for an RCU
    grace period to order the readers).

The counters are real: ``lock_count``/``unlock_count`` per (CPU, index), so the readers
still inside a section of index ``i`` are ``sum(lock[i]) - sum(unlock[i])`` as
``srcu_readers_active_idx`` computes it, and :meth:`synchronize` flips the index and
counts the grace period.
"""

from __future__ import annotations

from kernel_model.kernel.locking.access_log import MB, READ, WRITE

FLAVORS = ("srcu", "lite", "fast")


class SrcuStruct:
    def __init__(self, name: str, flavor: str = "srcu"):
        if flavor not in FLAVORS:
            raise ValueError(f"SRCU flavor is one of {', '.join(FLAVORS)}, not {flavor!r}")
        self.name, self.flavor = name, flavor
        self.idx = 0
        self.lock_count: dict[tuple[int, int], int] = {}  # (cpu, idx) -> n
        self.unlock_count: dict[tuple[int, int], int] = {}
        self.grace_periods = 0
        self._mb = flavor == "srcu"

    def read_lock(self, log, cpu: int) -> int:
        idx = self.idx
        key = (cpu, idx)
        self.lock_count[key] = self.lock_count.get(key, 0) + 1
        if log is not None:
            log.add(cpu, self.name, "srcu_idx", READ)  # READ_ONCE(ssp->srcu_idx)
            log.add(cpu, self.name + ".sda", cpu, WRITE)  # this_cpu_inc(...lock_count[idx])
            if self._mb:
                log.add(cpu, "smp_mb", None, MB)
        return idx

    def read_unlock(self, log, cpu: int, idx: int) -> None:
        key = (cpu, idx)
        self.unlock_count[key] = self.unlock_count.get(key, 0) + 1
        if log is not None:
            if self._mb:
                log.add(cpu, "smp_mb", None, MB)
            log.add(cpu, self.name + ".sda", cpu, WRITE)  # this_cpu_inc(...unlock_count[idx])

    def readers_active(self, idx: int) -> int:
        """``srcu_readers_active_idx``: sections of index ``idx`` not yet left."""
        locks = sum(n for (_, i), n in self.lock_count.items() if i == idx)
        unlocks = sum(n for (_, i), n in self.unlock_count.items() if i == idx)
        return locks - unlocks

    def synchronize(self) -> None:
        """``synchronize_srcu``: flip the index new readers use and wait for the old
        index's readers (counted; the wait's duration is the contention model's)."""
        self.idx ^= 1
        self.grace_periods += 1
