"""``BPF_MAP_CREATE`` (``map_create()`` of ``kernel/bpf/syscall.c``) for the map types
uprobe programs use: :func:`create_map` checks the attributes as ``*_map_alloc_check``
does, with the kernel's errnos (a :class:`MapError`), then allocates the map in kernel
memory.  The map types live where the kernel has them: hash maps in
:mod:`kernel_model.bpf.hashtab` (with the LRU lists of :mod:`kernel_model.bpf.bpf_lru_list`),
arrays in :mod:`kernel_model.bpf.arraymap`, ring buffers in :mod:`kernel_model.bpf.ringbuf`;
what they share is in :mod:`kernel_model.bpf.bpf_map`.
"""

from __future__ import annotations

import errno as _errno
from typing import TYPE_CHECKING

from kernel_model.bpf.arraymap import (
    ArrayMap,
    PercpuArrayMap,
    PerfEventArrayMap,
    ProgArrayMap,
    array_map_alloc_check,
)
from kernel_model.bpf.bpf_map import (
    BPF_F_NO_COMMON_LRU,
    BPF_F_NUMA_NODE,
    BPF_F_RDONLY,
    BPF_F_RDONLY_PROG,
    BPF_F_WRONLY,
    BPF_F_WRONLY_PROG,
    BPF_MAP_STRUCT_SIZE,
    MapBase,
    MapError,
)
from kernel_model.bpf.bpf_types import (
    BPF_MAP_TYPE_ARRAY,
    BPF_MAP_TYPE_HASH,
    BPF_MAP_TYPE_LRU_HASH,
    BPF_MAP_TYPE_LRU_PERCPU_HASH,
    BPF_MAP_TYPE_PERCPU_ARRAY,
    BPF_MAP_TYPE_PERCPU_HASH,
    BPF_MAP_TYPE_PERF_EVENT_ARRAY,
    BPF_MAP_TYPE_PROG_ARRAY,
    BPF_MAP_TYPE_RINGBUF,
    BpfMap,
)
from kernel_model.bpf.hashtab import HashMap, LruHashMap, LruPercpuHashMap, PercpuHashMap, htab_map_alloc_check
from kernel_model.bpf.ringbuf import PAGE_SIZE, RINGBUF_MAX_DATA_SZ, RingBuf

if TYPE_CHECKING:
    from kernel_model.bpf.memory import KernelMemory

# MapError is this module's too: the error create_map raises
__all__ = ["MODEL_MAP_MEMORY_LIMIT", "MapError", "create_map"]

BPF_OBJ_NAME_LEN = 16
# A model limit, not a kernel one: the bytes one map may hold before creation fails with
# ENOMEM, as bpf_map_area_alloc() fails when vmalloc or the memory cgroup refuse.
MODEL_MAP_MEMORY_LIMIT = 1 << 28


class RingBufMap(RingBuf):
    """A ring buffer with the common map behaviour (freeze, ``as_dict``)."""

    def __init__(self, max_entries: int, map_flags: int, name: str, nr_cpus: int):
        super().__init__(max_entries, map_flags, name)
        self.nr_cpus = nr_cpus

    def freeze(self) -> int:
        if self.frozen:
            return -_errno.EBUSY
        self.frozen = True
        return 0

    def as_dict(self) -> dict[bytes, bytes]:
        return {}


_TYPES: dict[int, type[MapBase]] = {
    BPF_MAP_TYPE_HASH: HashMap,
    BPF_MAP_TYPE_PERCPU_HASH: PercpuHashMap,
    BPF_MAP_TYPE_LRU_HASH: LruHashMap,
    BPF_MAP_TYPE_LRU_PERCPU_HASH: LruPercpuHashMap,
    BPF_MAP_TYPE_ARRAY: ArrayMap,
    BPF_MAP_TYPE_PERCPU_ARRAY: PercpuArrayMap,
    BPF_MAP_TYPE_PROG_ARRAY: ProgArrayMap,
    BPF_MAP_TYPE_PERF_EVENT_ARRAY: PerfEventArrayMap,
}


def _valid_name(name: str) -> bool:
    """``bpf_obj_name_cpy``: at most 15 characters of [A-Za-z0-9_.]."""
    return len(name) < BPF_OBJ_NAME_LEN and all(c.isascii() and (c.isalnum() or c in "_.") for c in name)


def create_map(
    memory: KernelMemory,
    map_type: int,
    key_size: int,
    value_size: int,
    max_entries: int,
    map_flags: int = 0,
    name: str = "",
    nr_cpus: int = 1,
) -> BpfMap:
    """``BPF_MAP_CREATE``: check the attributes as the kernel does, then allocate the map
    and its memory in ``memory``.  Raises :class:`MapError` with the kernel's errno."""
    if nr_cpus < 1:
        raise ValueError("nr_cpus must be at least 1")
    if not _valid_name(name):
        raise MapError(_errno.EINVAL, f"map name {name!r}: at most 15 characters of letters, digits, '_' and '.'")
    if map_flags & BPF_F_RDONLY and map_flags & BPF_F_WRONLY:
        raise MapError(_errno.EINVAL, "BPF_F_RDONLY and BPF_F_WRONLY together")
    if map_flags & BPF_F_RDONLY_PROG and map_flags & BPF_F_WRONLY_PROG:
        raise MapError(_errno.EINVAL, "BPF_F_RDONLY_PROG and BPF_F_WRONLY_PROG together")
    if map_type == BPF_MAP_TYPE_RINGBUF:
        if map_flags & ~BPF_F_NUMA_NODE:
            raise MapError(_errno.EINVAL, f"map_flags {map_flags:#x}: a ring buffer takes none")
        if key_size or value_size or max_entries & (max_entries - 1) or not max_entries or max_entries % PAGE_SIZE:
            raise MapError(
                _errno.EINVAL,
                f"ring buffer: key_size and value_size must be 0 and max_entries ({max_entries}) "
                "a power of 2 multiple of the page size",
            )
        if max_entries > RINGBUF_MAX_DATA_SZ:
            raise MapError(_errno.E2BIG, f"ring buffer of {max_entries} bytes is over the limit")
        if max_entries * 2 > MODEL_MAP_MEMORY_LIMIT:
            raise MapError(_errno.ENOMEM, f"ring buffer of {max_entries} bytes: out of memory")
        rb = RingBufMap(max_entries, map_flags, name, nr_cpus)
        rb.region = memory.alloc(BPF_MAP_STRUCT_SIZE, "map", writable=False, owner=rb)
        rb.create(memory)
        return rb
    cls = _TYPES.get(map_type)
    if cls is None:
        raise MapError(_errno.EINVAL, f"map type {map_type} is not supported")
    if cls in (HashMap, PercpuHashMap, LruHashMap, LruPercpuHashMap):
        htab_map_alloc_check(map_type, key_size, value_size, max_entries, map_flags)
        if map_flags & BPF_F_NO_COMMON_LRU:
            # each CPU's LRU list gets the same number of elements
            rounded = -(-max_entries // nr_cpus) * nr_cpus
            max_entries = rounded if rounded <= 0xFFFFFFFF else max_entries // nr_cpus * nr_cpus
    else:
        array_map_alloc_check(map_type, key_size, value_size, max_entries, map_flags)
    m = cls(key_size, value_size, max_entries, map_flags, name, nr_cpus)
    size = m.memory_bytes()
    if size > MODEL_MAP_MEMORY_LIMIT:
        raise MapError(_errno.ENOMEM, f"map {name!r} needs {size} bytes: out of memory")
    m.create(memory)
    return m
