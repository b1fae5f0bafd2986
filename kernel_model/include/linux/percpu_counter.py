"""Counters bumped on a hot path: one shared word (``tu->nhit++``, a plain load and
store of a line every CPU writes) or one word per CPU (``this_cpu_inc(*tu->nhits)``,
6.12: 10cdb82aa77f "tracing/uprobe: make trace_uprobe->nhit counter a per-CPU one"),
summed when read (``uprobe_profile``)."""

from __future__ import annotations

from kernel_model.kernel.locking.access_log import WRITE


class SharedCounter:
    """``unsigned long nhit``: ``nhit++`` from every CPU on one line."""

    def __init__(self, name: str, inst=None):
        self.name, self.inst = name, inst
        self.value = 0

    def inc(self, log, cpu: int) -> None:
        self.value += 1
        if log is not None:
            log.add(cpu, self.name, self.inst, WRITE)

    def sum(self) -> int:
        return self.value


class PerCpuCounter:
    """``unsigned long __percpu *nhits``: CPU c writes only its own line."""

    def __init__(self, name: str, inst=None):
        self.name, self.inst = name, inst
        self.values: dict[int, int] = {}

    def inc(self, log, cpu: int) -> None:
        self.values[cpu] = self.values.get(cpu, 0) + 1
        if log is not None:
            log.add(cpu, self.name, (self.inst, cpu), WRITE)

    def sum(self) -> int:
        return sum(self.values.values())
