"""Array maps as ``kernel/bpf/arraymap.c`` implements them: arrays hold ``max_entries``
values of ``round_up(value_size, 8)`` bytes contiguously in kernel memory, per-CPU arrays
one copy per CPU (``nr_cpus`` at creation; the program side sees the running CPU's, the
syscall side all of them back to back); program arrays (``bpf_tail_call``) and perf event
arrays (``bpf_perf_event_output``) hold kernel objects the syscall side stores by fd.
"""

from __future__ import annotations

import errno as _errno
from typing import TYPE_CHECKING, Any

from kernel_model.bpf.bpf_map import (
    BPF_F_ACCESS_MASK,
    BPF_F_INNER_MAP,
    BPF_F_MMAPABLE,
    BPF_F_NUMA_NODE,
    BPF_F_PRESERVE_ELEMS,
    BPF_F_RDONLY_PROG,
    BPF_F_WRONLY_PROG,
    ENOTSUPP,
    PCPU_MIN_UNIT_SIZE,
    MapBase,
    MapError,
    round_up8,
)
from kernel_model.bpf.bpf_types import (
    BPF_ANY,
    BPF_EXIST,
    BPF_F_LOCK,
    BPF_MAP_TYPE_ARRAY,
    BPF_MAP_TYPE_PERCPU_ARRAY,
    BPF_MAP_TYPE_PERF_EVENT_ARRAY,
    BPF_MAP_TYPE_PROG_ARRAY,
    BPF_NOEXIST,
)

if TYPE_CHECKING:
    from kernel_model.bpf.memory import KernelMemory

ARRAY_CREATE_FLAG_MASK = BPF_F_NUMA_NODE | BPF_F_MMAPABLE | BPF_F_ACCESS_MASK | BPF_F_PRESERVE_ELEMS | BPF_F_INNER_MAP
# bpf_perf_event_output's flags: the low 32 bits index the array, all ones the current CPU
BPF_F_INDEX_MASK = 0xFFFFFFFF
BPF_F_CURRENT_CPU = BPF_F_INDEX_MASK


class ArrayMap(MapBase):
    """``BPF_MAP_TYPE_ARRAY``: element ``i`` at ``value + i * round_up(value_size, 8)``;
    a per-CPU array keeps ``max_entries`` values for each CPU."""

    map_type = BPF_MAP_TYPE_ARRAY
    percpu = False

    def __init__(self, key_size: int, value_size: int, max_entries: int, map_flags: int, name: str, nr_cpus: int):
        super().__init__(key_size, value_size, max_entries, map_flags, name, nr_cpus)
        self.elem_size = round_up8(value_size)

    def memory_bytes(self) -> int:
        return self.max_entries * self.elem_size * (self.nr_cpus if self.percpu else 1)

    def _area(self, memory: KernelMemory) -> None:
        self.values = memory.alloc(self.memory_bytes(), "map_value", owner=self)

    def _index_of(self, key: bytes) -> int:
        self._check_key(key)
        return int.from_bytes(key[:4], "little")

    def _off(self, index: int, cpu: int) -> int:
        return ((cpu * self.max_entries if self.percpu else 0) + index) * self.elem_size

    def lookup_elem(self, key: bytes, cpu: int = 0) -> int:
        index = self._index_of(key)
        if index >= self.max_entries:
            return 0
        return self.values.base + self._off(index, cpu)

    def lookup_percpu_elem(self, key: bytes, cpu: int) -> int:
        if not self.percpu or cpu >= self.nr_cpus:
            return 0
        return self.lookup_elem(key, cpu)

    def value_addr(self, off: int = 0) -> int:
        """``array_map_direct_value_addr``: the address a ``BPF_PSEUDO_MAP_VALUE`` lddw
        at offset ``off`` loads (global data); only single-entry arrays have one."""
        if self.percpu or self.max_entries != 1:
            raise MapError(ENOTSUPP, f"map {self.name!r} has no direct value address")
        if off >= self.value_size:
            raise MapError(_errno.EINVAL, f"offset {off} past the {self.value_size}-byte value of map {self.name!r}")
        return self.values.base + off

    def _update(self, key: bytes, value: bytes, flags: int, cpu: int, onallcpus: bool) -> int:
        index = self._index_of(key)
        if (flags & ~BPF_F_LOCK) > BPF_EXIST:
            return -_errno.EINVAL
        if index >= self.max_entries:
            return -_errno.E2BIG
        if flags & BPF_NOEXIST:
            return -_errno.EEXIST
        if flags & BPF_F_LOCK:
            return -_errno.EINVAL
        data = self.values.data
        if onallcpus:
            need = self.elem_size * self.nr_cpus
            if len(value) < need:
                raise ValueError(f"map {self.name!r}: value of {len(value)} bytes, {need} expected")
            for c in range(self.nr_cpus):
                off = self._off(index, c)
                data[off : off + self.elem_size] = value[c * self.elem_size : (c + 1) * self.elem_size]
            return 0
        if len(value) < self.value_size:
            raise ValueError(f"map {self.name!r}: value of {len(value)} bytes, {self.value_size} expected")
        off = self._off(index, cpu)
        data[off : off + self.value_size] = value[: self.value_size]
        return 0

    def update_elem(self, key: bytes, value: bytes, flags: int, cpu: int = 0) -> int:
        """``array_map_update_elem``: -E2BIG past the end, -EEXIST for BPF_NOEXIST (every
        element exists), -EINVAL for unknown flags."""
        return self._update(bytes(key), bytes(value), flags, cpu, False)

    def update_value(self, key: bytes, value: bytes, flags: int = BPF_ANY, cpu: int = 0) -> int:
        if self.frozen:
            return -_errno.EPERM
        return self._update(bytes(key), bytes(value), flags, cpu, self.percpu)

    def delete_elem(self, key: bytes) -> int:
        """Array elements cannot be deleted: -EINVAL."""
        return -_errno.EINVAL

    def get_next_key(self, key: bytes | None) -> bytes | None:
        """``array_map_get_next_key``: 0 for a missing or out-of-range key, then in order."""
        index = 0xFFFFFFFF if key is None else self._index_of(key)
        if index >= self.max_entries:
            return (0).to_bytes(4, "little")
        if index == self.max_entries - 1:
            return None
        return (index + 1).to_bytes(4, "little")

    def lookup_value(self, key: bytes) -> bytes | None:
        index = self._index_of(key)
        if index >= self.max_entries:
            return None
        data = self.values.data
        if self.percpu:
            return b"".join(
                bytes(data[self._off(index, c) : self._off(index, c) + self.elem_size]) for c in range(self.nr_cpus)
            )
        off = self._off(index, 0)
        return bytes(data[off : off + self.value_size])

    def syscall_value_size(self) -> int:
        return self.elem_size * self.nr_cpus if self.percpu else self.value_size


class PercpuArrayMap(ArrayMap):
    map_type = BPF_MAP_TYPE_PERCPU_ARRAY
    percpu = True


class _FdArrayMap(MapBase):
    """An array of kernel objects (``fd_array_map_ops``): the syscall stores an fd's
    object, a program never reads the slots directly."""

    def _area(self, memory: KernelMemory) -> None:
        self.slots: list[Any] = [None] * self.max_entries

    def memory_bytes(self) -> int:
        return 8 * self.max_entries

    def _index_of(self, key: bytes) -> int:
        self._check_key(key)
        return int.from_bytes(key[:4], "little")

    def _set(self, index: int, obj: object) -> int:
        if index >= self.max_entries:
            return -_errno.E2BIG
        self.slots[index] = obj
        return 0

    def lookup_elem(self, key: bytes, cpu: int = 0) -> int:
        return 0

    def update_elem(self, key: bytes, value: bytes, flags: int, cpu: int = 0) -> int:
        """Slots hold objects the syscall side resolves from fds: see ``set_prog``/``set_sink``."""
        return -_errno.EOPNOTSUPP

    def delete_elem(self, key: bytes) -> int:
        """``fd_array_map_delete_elem``: -E2BIG past the end, -ENOENT for an empty slot."""
        index = self._index_of(key)
        if index >= self.max_entries:
            return -_errno.E2BIG
        if self.slots[index] is None:
            return -_errno.ENOENT
        self.slots[index] = None
        return 0

    def get_next_key(self, key: bytes | None) -> bytes | None:
        index = 0xFFFFFFFF if key is None else self._index_of(key)
        if index >= self.max_entries:
            return (0).to_bytes(4, "little")
        if index == self.max_entries - 1:
            return None
        return (index + 1).to_bytes(4, "little")

    def items(self) -> list[tuple[bytes, bytes]]:
        return [(i.to_bytes(4, "little"), v) for i in range(self.max_entries) if (v := self._slot_value(i)) is not None]

    def _slot_value(self, index: int) -> bytes | None:
        return None

    def lookup_value(self, key: bytes) -> bytes | None:
        index = self._index_of(key)
        return self._slot_value(index) if index < self.max_entries else None


class ProgArrayMap(_FdArrayMap):
    """``BPF_MAP_TYPE_PROG_ARRAY``: the programs ``bpf_tail_call`` jumps to."""

    map_type = BPF_MAP_TYPE_PROG_ARRAY

    def set_prog(self, index: int, prog: object) -> int:
        """Store a program (what ``BPF_MAP_UPDATE_ELEM`` does with a program fd)."""
        return self._set(index, prog)

    def prog_at(self, index: int) -> Any:
        """The program ``bpf_tail_call`` would run, or None (it then falls through)."""
        if 0 <= index < self.max_entries:
            return self.slots[index]
        return None

    def _slot_value(self, index: int) -> bytes | None:
        """The syscall side reads a slot as the program's id (``map_fd_sys_lookup_elem``)."""
        prog = self.slots[index]
        return None if prog is None else int(getattr(prog, "id", 0)).to_bytes(4, "little")


class PerfEventArrayMap(_FdArrayMap):
    """``BPF_MAP_TYPE_PERF_EVENT_ARRAY``: per-CPU slots of ``PERF_COUNT_SW_BPF_OUTPUT``
    events, each an object with ``write(record, cpu)`` (and optionally ``cpu``, the CPU
    the event is bound to)."""

    map_type = BPF_MAP_TYPE_PERF_EVENT_ARRAY

    def set_sink(self, index: int, sink: object) -> int:
        return self._set(index, sink)

    def sink_at(self, index: int) -> Any:
        return self.slots[index] if 0 <= index < self.max_entries else None

    def _slot_value(self, index: int) -> bytes | None:
        return None  # perf event fds are not readable back (-EOPNOTSUPP from the syscall)

    def perf_event_output(self, flags: int, data: bytes, cpu: int = 0) -> int:
        """``bpf_perf_event_output`` run on ``cpu``: -EINVAL for flags above the index,
        -E2BIG past the array, -ENOENT for an empty slot, -EOPNOTSUPP for an event bound
        to another CPU.  The sink gets the sample's raw data as perf stores it: padded
        with zeros so that the u32 size and the data end on 8 bytes."""
        if flags & ~BPF_F_INDEX_MASK:
            return -_errno.EINVAL
        index = flags & BPF_F_INDEX_MASK
        if index == BPF_F_CURRENT_CPU:
            index = cpu
        if index >= self.max_entries:
            return -_errno.E2BIG
        sink = self.slots[index]
        if sink is None:
            return -_errno.ENOENT
        bound = getattr(sink, "cpu", None)
        if bound is not None and bound != cpu:
            return -_errno.EOPNOTSUPP
        raw = bytes(data)
        pad = (-(len(raw) + 4)) % 8
        sink.write(raw + bytes(pad), cpu)
        return 0


def array_map_alloc_check(map_type: int, key_size: int, value_size: int, max_entries: int, flags: int) -> None:
    """``array_map_alloc_check`` (and ``fd_array_map_alloc_check`` for fd arrays)."""
    if map_type in (BPF_MAP_TYPE_PROG_ARRAY, BPF_MAP_TYPE_PERF_EVENT_ARRAY):
        if value_size != 4:
            raise MapError(_errno.EINVAL, f"value_size {value_size}: this map stores 4-byte fds")
        if flags & (BPF_F_RDONLY_PROG | BPF_F_WRONLY_PROG):
            raise MapError(_errno.EINVAL, "program access flags are not supported for fd arrays")
    if max_entries == 0 or key_size != 4 or value_size == 0 or flags & ~ARRAY_CREATE_FLAG_MASK:
        raise MapError(_errno.EINVAL, "an array needs key_size 4, non-zero value_size and max_entries, known flags")
    if map_type == BPF_MAP_TYPE_PERCPU_ARRAY and flags & BPF_F_NUMA_NODE:
        raise MapError(_errno.EINVAL, "per-CPU maps take no NUMA node")
    if map_type != BPF_MAP_TYPE_ARRAY and flags & (BPF_F_MMAPABLE | BPF_F_INNER_MAP):
        raise MapError(_errno.EINVAL, "only plain arrays are mmap()able")
    if map_type != BPF_MAP_TYPE_PERF_EVENT_ARRAY and flags & BPF_F_PRESERVE_ELEMS:
        raise MapError(_errno.EINVAL, "BPF_F_PRESERVE_ELEMS is for perf event arrays")
    if value_size > 0x7FFFFFFF:
        raise MapError(_errno.E2BIG, f"value_size {value_size} is too big")
    if map_type == BPF_MAP_TYPE_PERCPU_ARRAY and round_up8(value_size) > PCPU_MIN_UNIT_SIZE:
        raise MapError(_errno.E2BIG, f"per-CPU value_size {value_size} is over {PCPU_MIN_UNIT_SIZE}")
