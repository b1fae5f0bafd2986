"""The shared-memory accesses of the kernel's hot paths, CPU by CPU.

A kernel path that scales badly does so because CPUs touch the same cache lines: an
atomic on a refcount, a reader count in a lock, a shared counter.  Which lines a path
touches, and how (a load, a store, a locked read-modify-write, a full barrier), is a
property of each version's code, and it is exact: the synchronization primitives of
:mod:`kernel_model.kernel.locking`, :mod:`kernel_model.kernel.rcu` and
:mod:`kernel_model.include.linux` append one :class:`Access` per access while a log is
attached.  Nothing here has a cost or a time; a contention model prices the streams.

A *line* is ``(object, instance)``: ``("uprobe.ref", 3)`` is the cache line holding
uprobe 3's refcount, ``("srcu.sda", 5)`` CPU 5's SRCU counters.  Two fields of one
structure that share a cache line in the kernel's layout share a line name here.
``begin`` marks where one probe trigger starts, so a stream splits into triggers.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

READ, WRITE, ATOMIC, MB, LOCK, UNLOCK, BEGIN = "read", "write", "atomic", "mb", "lock", "unlock", "begin"
KINDS = (READ, WRITE, ATOMIC, MB, LOCK, UNLOCK, BEGIN)


class Access(NamedTuple):
    """One access: ``kind`` on cache line ``(obj, inst)`` by ``cpu``.  ``lock`` is an
    atomic that also acquires an exclusive lock held until the matching ``unlock`` (a
    store); ``mb`` is a full barrier (no line); ``begin`` a trigger boundary."""

    cpu: int
    obj: str
    inst: object
    kind: str

    @property
    def line(self) -> tuple:
        return (self.obj, self.inst)


class AccessLog:
    """Per-CPU streams of :class:`Access` records (``streams[cpu]``), in program order."""

    def __init__(self) -> None:
        self.streams: dict[int, list[Access]] = {}

    def add(self, cpu: int, obj: str, inst, kind: str) -> None:
        stream = self.streams.get(cpu)
        if stream is None:
            stream = self.streams[cpu] = []
        stream.append(Access(cpu, obj, inst, kind))

    def begin(self, cpu: int) -> None:
        self.add(cpu, "trigger", None, BEGIN)

    def clear(self) -> None:
        self.streams.clear()

    def counts(self, cpu: int | None = None) -> Counter:
        """``{(obj, kind): n}`` over one CPU or all."""
        streams = self.streams.values() if cpu is None else [self.streams.get(cpu, [])]
        return Counter((a.obj, a.kind) for s in streams for a in s if a.kind != BEGIN)

    def triggers(self, cpu: int) -> list[tuple[Access, ...]]:
        """CPU ``cpu``'s stream cut at each ``begin``: one tuple per trigger (what
        came before the first ``begin`` is dropped)."""
        out: list[list[Access]] = []
        for a in self.streams.get(cpu, []):
            if a.kind == BEGIN:
                out.append([])
            elif out:
                out[-1].append(a)
        return [tuple(t) for t in out]
