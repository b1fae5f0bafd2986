"""Hash maps as ``kernel/bpf/hashtab.c`` implements them (``BPF_MAP_TYPE_HASH``, its
per-CPU and LRU variants), with their elements in kernel memory:

- hash maps preallocate every element at creation (``prealloc_init``): one area of
  ``struct htab_elem`` (48 bytes of list node, LRU node and hash, then the key rounded up
  to 8, then the value rounded up to 8, or a per-CPU pointer); free elements sit on
  per-CPU free lists (``pcpu_freelist``) filled as ``pcpu_freelist_populate`` fills them
  and popped from the current CPU's list first, so addresses are reproducible.  An update
  of an existing key swaps in the CPU's spare element (``extra_elems``) and the old one
  becomes the spare, as the kernel does, so a value's address is stable while its element
  is in the table and is reused after a delete.  ``BPF_F_NO_PREALLOC`` maps allocate an
  element per insert and keep freed ones for reuse (``bpf_mem_alloc``'s caches).
- buckets are ``roundup_pow_of_two(max_entries)`` lists in which new elements go to the
  head, selected by :func:`jhash` of the key (``htab_map_hash``).  The model's hash seed is
  always 0, which is what the kernel uses for a map created with ``BPF_F_ZERO_SEED``; a
  map created without it gets a random seed on Linux, so only zero-seed maps iterate in
  the same order there and here.
- LRU maps take elements from :mod:`kernel_model.bpf.bpf_lru_list`'s lists.
- per-CPU maps keep one copy of each value per CPU (``nr_cpus`` at creation), the program
  side sees the running CPU's, the syscall side all of them back to back, each rounded up
  to 8 bytes.
"""

from __future__ import annotations

import bisect
import errno as _errno
import struct
from typing import TYPE_CHECKING

from kernel_model.bpf.bpf_lru_list import BpfLru, LruNode
from kernel_model.bpf.bpf_map import (
    BPF_F_ACCESS_MASK,
    BPF_F_NO_COMMON_LRU,
    BPF_F_NO_PREALLOC,
    BPF_F_NUMA_NODE,
    BPF_F_ZERO_SEED,
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
    BPF_MAP_TYPE_HASH,
    BPF_MAP_TYPE_LRU_HASH,
    BPF_MAP_TYPE_LRU_PERCPU_HASH,
    BPF_MAP_TYPE_PERCPU_HASH,
    BPF_NOEXIST,
)

if TYPE_CHECKING:
    from kernel_model.bpf.memory import KernelMemory, Region

HTAB_CREATE_FLAG_MASK = BPF_F_NO_PREALLOC | BPF_F_NO_COMMON_LRU | BPF_F_NUMA_NODE | BPF_F_ACCESS_MASK | BPF_F_ZERO_SEED
KMALLOC_MAX_SIZE = 1 << 22  # x86_64 SLUB: 1 << (PAGE_SHIFT + MAX_PAGE_ORDER)
HTAB_ELEM_SIZE = 48  # sizeof(struct htab_elem) on x86_64: the key follows at offset 48
HTAB_HASH_OFF = 40  # offset of htab_elem.hash

_MASK32 = 0xFFFFFFFF


def _rol32(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _MASK32


def jhash(key: bytes, initval: int = 0) -> int:
    """Bob Jenkins' lookup3 hash as ``include/linux/jhash.h`` computes it (``jhash``;
    ``jhash2`` over u32 words gives the same value on a little-endian machine)."""
    length = len(key)
    a = b = c = (0xDEADBEEF + length + initval) & _MASK32
    k = 0
    while length > 12:
        a = (a + int.from_bytes(key[k : k + 4], "little")) & _MASK32
        b = (b + int.from_bytes(key[k + 4 : k + 8], "little")) & _MASK32
        c = (c + int.from_bytes(key[k + 8 : k + 12], "little")) & _MASK32
        # __jhash_mix
        a = (a - c) & _MASK32
        a ^= _rol32(c, 4)
        c = (c + b) & _MASK32
        b = (b - a) & _MASK32
        b ^= _rol32(a, 6)
        a = (a + c) & _MASK32
        c = (c - b) & _MASK32
        c ^= _rol32(b, 8)
        b = (b + a) & _MASK32
        a = (a - c) & _MASK32
        a ^= _rol32(c, 16)
        c = (c + b) & _MASK32
        b = (b - a) & _MASK32
        b ^= _rol32(a, 19)
        a = (a + c) & _MASK32
        c = (c - b) & _MASK32
        c ^= _rol32(b, 4)
        b = (b + a) & _MASK32
        length -= 12
        k += 12
    if length == 0:
        return c
    tail = key[k : k + length] + bytes(12 - length)
    a = (a + int.from_bytes(tail[0:4], "little")) & _MASK32
    b = (b + int.from_bytes(tail[4:8], "little")) & _MASK32
    c = (c + int.from_bytes(tail[8:12], "little")) & _MASK32
    # __jhash_final
    c ^= b
    c = (c - _rol32(b, 14)) & _MASK32
    a ^= c
    a = (a - _rol32(c, 11)) & _MASK32
    b ^= a
    b = (b - _rol32(a, 25)) & _MASK32
    c ^= b
    c = (c - _rol32(b, 16)) & _MASK32
    a ^= c
    a = (a - _rol32(c, 4)) & _MASK32
    b ^= a
    b = (b - _rol32(a, 14)) & _MASK32
    c ^= b
    c = (c - _rol32(b, 24)) & _MASK32
    return c


def _roundup_pow_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


def _check_update_flags(flags: int) -> int:
    """The flag checks at the top of ``htab_map_update_elem``: -EINVAL for an unknown
    flag, and for ``BPF_F_LOCK`` on a value without a ``bpf_spin_lock`` (none here)."""
    if (flags & ~BPF_F_LOCK) > BPF_EXIST or flags & BPF_F_LOCK:
        return -_errno.EINVAL
    return 0


def _check_flags(exists: bool, flags: int) -> int:
    """``check_flags``: BPF_NOEXIST on an existing key, BPF_EXIST on a missing one."""
    if exists and (flags & ~BPF_F_LOCK) == BPF_NOEXIST:
        return -_errno.EEXIST
    if not exists and (flags & ~BPF_F_LOCK) == BPF_EXIST:
        return -_errno.ENOENT
    return 0


class HashMap(MapBase):
    """``BPF_MAP_TYPE_HASH`` and its per-CPU and LRU variants (``htab_map_ops`` and
    friends); see the module docstring for the memory layout."""

    map_type = BPF_MAP_TYPE_HASH
    percpu = False
    lru = False

    def __init__(self, key_size: int, value_size: int, max_entries: int, map_flags: int, name: str, nr_cpus: int):
        super().__init__(key_size, value_size, max_entries, map_flags, name, nr_cpus)
        self.prealloc = not map_flags & BPF_F_NO_PREALLOC
        self.hashrnd = 0  # BPF_F_ZERO_SEED's seed; see the module docstring
        self.n_buckets = _roundup_pow_of_two(max_entries)
        self.key_room = round_up8(key_size)
        self.value_room = round_up8(value_size)
        self.elem_size = HTAB_ELEM_SIZE + self.key_room + (8 if self.percpu else self.value_room)
        self._buckets: dict[int, list[int]] = {}  # bucket -> element indices, head first
        self._nonempty: list[int] = []  # sorted buckets with elements
        self._index: dict[bytes, int] = {}  # key -> element
        self._elems: list[Region] = []  # one region per element without preallocation
        self._cache: list[int] = []  # freed elements for reuse without preallocation
        self._pcpu_regions: list[Region] = []
        self.count = 0

    # -- memory ---------------------------------------------------------------------
    def num_entries(self) -> int:
        """Elements preallocated: one spare per CPU for in-place replacement
        (``htab_has_extra_elems``) unless per-CPU or LRU."""
        extra = 0 if (self.percpu or self.lru) else self.nr_cpus
        return self.max_entries + extra

    def memory_bytes(self) -> int:
        n = self.num_entries() if self.prealloc else self.max_entries
        return n * (self.elem_size + (self.value_room * self.nr_cpus if self.percpu else 0))

    def _area(self, memory: KernelMemory) -> None:
        n = self.num_entries()
        if self.prealloc:
            self.elems = memory.alloc(self.elem_size * n, "map_value", owner=self)
            if self.percpu:
                self.pcpu = memory.alloc(self.value_room * n * self.nr_cpus, "map_value", owner=self)
            if self.lru:
                self.lru_nodes = [LruNode(i) for i in range(n)]
                self.lru_state = BpfLru(self.nr_cpus, bool(self.map_flags & BPF_F_NO_COMMON_LRU), self._del_node)
                self.lru_state.populate(self.lru_nodes)
            else:
                # pcpu_freelist_populate: elements spread over the CPUs, each pushed at the head
                self.freelists: list[list[int]] = []
                per, rem = divmod(n, self.nr_cpus)
                i = 0
                for cpu in range(self.nr_cpus):
                    take = per + (1 if cpu < rem else 0)
                    self.freelists.append(list(range(i, i + take)))  # top of the stack is the end
                    i += take
                # alloc_extra_elems: one spare per CPU, popped at creation (on CPU 0)
                self.extra_elems: list[int] = []
                if not (self.percpu or self.lru):
                    for _ in range(self.nr_cpus):
                        spare = self._freelist_pop(0)
                        assert spare is not None
                        self.extra_elems.append(spare)

    def _freelist_pop(self, cpu: int) -> int | None:
        for k in range(self.nr_cpus):
            lst = self.freelists[(cpu + k) % self.nr_cpus]
            if lst:
                return lst.pop()
        return None

    def _elem_base(self, e: int) -> tuple[bytearray, int, int]:
        """(the bytes holding element ``e``, its offset there, its kernel address)."""
        if self.prealloc:
            off = e * self.elem_size
            return self.elems.data, off, self.elems.base + off
        region = self._elems[e]
        return region.data, 0, region.base

    def _value_addr(self, e: int, cpu: int) -> int:
        if self.percpu:
            off = self._pcpu_off(e, cpu)
            return self._pcpu_region(e).base + off
        _, _, base = self._elem_base(e)
        return base + HTAB_ELEM_SIZE + self.key_room

    def _pcpu_region(self, e: int) -> Region:
        return self.pcpu if self.prealloc else self._pcpu_regions[e]

    def _pcpu_off(self, e: int, cpu: int) -> int:
        if self.prealloc:
            return (cpu * self.num_entries() + e) * self.value_room
        return cpu * self.value_room

    def _read_value(self, e: int, cpu: int) -> bytes:
        if self.percpu:
            region, off = self._pcpu_region(e), self._pcpu_off(e, cpu)
            return bytes(region.data[off : off + self.value_room])
        data, off, _ = self._elem_base(e)
        start = off + HTAB_ELEM_SIZE + self.key_room
        return bytes(data[start : start + self.value_size])

    def _write_value(self, e: int, cpu: int, value: bytes) -> None:
        if self.percpu:
            region, off = self._pcpu_region(e), self._pcpu_off(e, cpu)
            region.data[off : off + len(value)] = value
            return
        data, off, _ = self._elem_base(e)
        start = off + HTAB_ELEM_SIZE + self.key_room
        data[start : start + len(value)] = value

    def _elem_key(self, e: int) -> bytes:
        data, off, _ = self._elem_base(e)
        return bytes(data[off + HTAB_ELEM_SIZE : off + HTAB_ELEM_SIZE + self.key_size])

    def _init_elem(self, e: int, key: bytes, hash_: int) -> None:
        data, off, _ = self._elem_base(e)
        struct.pack_into("<I", data, off + HTAB_HASH_OFF, hash_)
        data[off + HTAB_ELEM_SIZE : off + HTAB_ELEM_SIZE + self.key_size] = key

    def _new_dynamic_elem(self) -> int:
        """An element for a map without preallocation (a cached one first)."""
        if self._cache:
            return self._cache.pop()
        assert self.memory is not None
        self._elems.append(self.memory.alloc(self.elem_size, "map_value", owner=self))
        if self.percpu:
            self._pcpu_regions.append(self.memory.alloc(self.value_room * self.nr_cpus, "map_value", owner=self))
        return len(self._elems) - 1

    # -- buckets ----------------------------------------------------------------------
    def hash(self, key: bytes) -> int:
        """``htab_map_hash``."""
        return jhash(key, self.hashrnd)

    def bucket_of(self, key: bytes) -> int:
        return self.hash(key) & (self.n_buckets - 1)

    def _link(self, e: int, key: bytes) -> None:
        """``hlist_nulls_add_head_rcu``: the new element first in its bucket."""
        b = self.bucket_of(key)
        lst = self._buckets.get(b)
        if lst is None:
            lst = self._buckets[b] = []
            bisect.insort(self._nonempty, b)
        lst.insert(0, e)
        self._index[key] = e

    def _unlink(self, e: int, key: bytes) -> None:
        b = self.bucket_of(key)
        lst = self._buckets[b]
        lst.remove(e)
        if self._index.get(key) == e:
            del self._index[key]
        if not lst:
            del self._buckets[b]
            del self._nonempty[bisect.bisect_left(self._nonempty, b)]

    def _free_elem(self, e: int, cpu: int) -> None:
        if self.lru:
            self.lru_state.push_free(self.lru_nodes[e])
        elif self.prealloc:
            self.freelists[cpu].append(e)  # __pcpu_freelist_push on this CPU
        else:
            self._cache.append(e)

    def _del_node(self, node: LruNode) -> bool:
        """``htab_lru_map_delete_node``: unlink the element an LRU list gives up, if it
        is still in the table."""
        key = self._elem_key(node.elem)
        if self._index.get(key) != node.elem:
            return False
        self._unlink(node.elem, key)
        self.count -= 1
        return True

    # -- program side -------------------------------------------------------------------
    def lookup_elem(self, key: bytes, cpu: int = 0) -> int:
        """The value's address (this CPU's copy for a per-CPU map) or 0; an LRU lookup
        sets the element's reference bit (``bpf_lru_node_set_ref``)."""
        self._check_key(key)
        e = self._index.get(bytes(key))
        if e is None:
            return 0
        if self.lru:
            self.lru_nodes[e].ref = 1
        return self._value_addr(e, cpu)

    def lookup_percpu_elem(self, key: bytes, cpu: int) -> int:
        """``bpf_map_lookup_percpu_elem``: 0 for a CPU that does not exist."""
        if not self.percpu or cpu >= self.nr_cpus:
            return 0
        return self.lookup_elem(key, cpu)

    def update_elem(self, key: bytes, value: bytes, flags: int, cpu: int = 0) -> int:
        """``map_update_elem`` from a program on ``cpu`` (a per-CPU map: that CPU's copy)."""
        return self._update(bytes(key), bytes(value), flags, cpu, onallcpus=False)

    def update_value(self, key: bytes, value: bytes, flags: int = BPF_ANY, cpu: int = 0) -> int:
        """``BPF_MAP_UPDATE_ELEM``: a per-CPU map takes every CPU's value, each rounded up to 8."""
        if self.frozen:
            return -_errno.EPERM
        return self._update(bytes(key), bytes(value), flags, cpu, onallcpus=self.percpu)

    def _update(self, key: bytes, value: bytes, flags: int, cpu: int, onallcpus: bool) -> int:
        self._check_key(key)
        want = self.value_room * self.nr_cpus if onallcpus else self.value_size
        if len(value) < want:
            raise ValueError(f"map {self.name!r}: value of {len(value)} bytes, {want} expected")
        value = value[:want]
        if self.percpu:
            if flags > BPF_EXIST:  # __htab_percpu_map_update_elem takes no BPF_F_LOCK
                return -_errno.EINVAL
        else:
            err = _check_update_flags(flags)
            if err:
                return err
        if self.lru:
            return self._update_lru(key, value, flags, cpu, onallcpus)
        old = self._index.get(key)
        err = _check_flags(old is not None, flags)
        if err:
            return err
        if self.percpu and old is not None:
            self._copy_pcpu(old, value, cpu, onallcpus)  # in place
            return 0
        hash_ = self.hash(key)
        if self.prealloc:
            if old is not None:
                new = self.extra_elems[cpu]
                self.extra_elems[cpu] = old
            else:
                popped = self._freelist_pop(cpu)
                if popped is None:
                    return -_errno.E2BIG
                new = popped
        else:
            if old is None and self.count >= self.max_entries:
                return -_errno.E2BIG
            new = self._new_dynamic_elem()
        if old is None:
            self.count += 1
        self._init_elem(new, key, hash_)
        if self.percpu:
            self._init_pcpu(new, value, cpu, onallcpus)
        else:
            self._write_value(new, cpu, value)
        self._link(new, key)
        if old is not None:
            self._unlink(old, key)
            if not self.prealloc:
                self._cache.append(old)
        return 0

    def _copy_pcpu(self, e: int, value: bytes, cpu: int, onallcpus: bool) -> None:
        """``pcpu_copy_value``: every CPU's slot from the syscall, this CPU's from a program."""
        if onallcpus:
            for c in range(self.nr_cpus):
                self._write_value(e, c, value[c * self.value_room : (c + 1) * self.value_room])
        else:
            self._write_value(e, cpu, value)

    def _init_pcpu(self, e: int, value: bytes, cpu: int, onallcpus: bool) -> None:
        """``pcpu_init_value``: a new element's other CPUs start zeroed."""
        if onallcpus:
            self._copy_pcpu(e, value, cpu, True)
            return
        for c in range(self.nr_cpus):
            self._write_value(e, c, value if c == cpu else bytes(self.value_room))

    def _update_lru(self, key: bytes, value: bytes, flags: int, cpu: int, onallcpus: bool) -> int:
        """``htab_lru_map_update_elem`` / ``__htab_lru_percpu_map_update_elem``: the new
        element is taken from the LRU (evicting if need be) before the flags are checked."""
        hash_ = self.hash(key)
        node: LruNode | None = None
        if not self.percpu or flags != BPF_EXIST:
            node = self.lru_state.pop_free(cpu)
            if node is None:
                return -_errno.ENOMEM
            self.count += 1
            self._init_elem(node.elem, key, hash_)
            if not self.percpu:
                self._write_value(node.elem, cpu, value)
        old = self._index.get(key)
        err = _check_flags(old is not None, flags)
        if not err:
            if self.percpu:
                if old is not None:
                    self.lru_nodes[old].ref = 1
                    self._copy_pcpu(old, value, cpu, onallcpus)
                else:
                    assert node is not None
                    self._init_pcpu(node.elem, value, cpu, onallcpus)
                    self._link(node.elem, key)
                    node = None
            else:
                assert node is not None
                self._link(node.elem, key)
                if old is not None:
                    self.lru_nodes[node.elem].ref = 1
                    self._unlink(old, key)
                    self.count -= 1
                    self.lru_state.push_free(self.lru_nodes[old])
                node = None
        if node is not None:
            self.count -= 1
            self.lru_state.push_free(node)
        return err

    def delete_elem(self, key: bytes, cpu: int = 0) -> int:
        """``map_delete_elem``: -ENOENT for a missing key; the element goes back to the
        free list of ``cpu`` (or its LRU list)."""
        self._check_key(key)
        key = bytes(key)
        e = self._index.get(key)
        if e is None:
            return -_errno.ENOENT
        self._unlink(e, key)
        self.count -= 1
        self._free_elem(e, cpu)
        return 0

    # -- syscall side -----------------------------------------------------------------------
    def get_next_key(self, key: bytes | None) -> bytes | None:
        """``htab_map_get_next_key``: the next element in the key's bucket, else the
        first of the next non-empty bucket; a missing key restarts from the first."""
        start = 0
        if key is not None:
            key = bytes(key)
            e = self._index.get(key)
            if e is not None:
                b = self.bucket_of(key)
                lst = self._buckets[b]
                i = lst.index(e)
                if i + 1 < len(lst):
                    return self._elem_key(lst[i + 1])
                start = b + 1
        i = bisect.bisect_left(self._nonempty, start)
        if i == len(self._nonempty):
            return None
        return self._elem_key(self._buckets[self._nonempty[i]][0])

    def lookup_value(self, key: bytes) -> bytes | None:
        """The value as ``BPF_MAP_LOOKUP_ELEM`` copies it (no LRU reference bit)."""
        e = self._index.get(bytes(key))
        if e is None:
            return None
        if self.percpu:
            return b"".join(self._read_value(e, c) for c in range(self.nr_cpus))
        return self._read_value(e, 0)

    def syscall_value_size(self) -> int:
        return self.value_room * self.nr_cpus if self.percpu else self.value_size


class PercpuHashMap(HashMap):
    map_type = BPF_MAP_TYPE_PERCPU_HASH
    percpu = True


class LruHashMap(HashMap):
    map_type = BPF_MAP_TYPE_LRU_HASH
    lru = True


class LruPercpuHashMap(HashMap):
    map_type = BPF_MAP_TYPE_LRU_PERCPU_HASH
    percpu = True
    lru = True


def htab_map_alloc_check(map_type: int, key_size: int, value_size: int, max_entries: int, flags: int) -> None:
    """``htab_map_alloc_check`` and the size checks of ``htab_map_alloc``."""
    percpu = map_type in (BPF_MAP_TYPE_PERCPU_HASH, BPF_MAP_TYPE_LRU_PERCPU_HASH)
    lru = map_type in (BPF_MAP_TYPE_LRU_HASH, BPF_MAP_TYPE_LRU_PERCPU_HASH)
    if flags & ~HTAB_CREATE_FLAG_MASK:
        raise MapError(_errno.EINVAL, f"map_flags {flags:#x} has flags a hash map does not take")
    if not lru and flags & BPF_F_NO_COMMON_LRU:
        raise MapError(_errno.EINVAL, "BPF_F_NO_COMMON_LRU is for LRU maps")
    if lru and flags & BPF_F_NO_PREALLOC:
        raise MapError(ENOTSUPP, "LRU maps are always preallocated (BPF_F_NO_PREALLOC)")
    if percpu and flags & BPF_F_NUMA_NODE:
        raise MapError(_errno.EINVAL, "per-CPU maps take no NUMA node")
    if max_entries == 0 or key_size == 0 or value_size == 0:
        raise MapError(_errno.EINVAL, "max_entries, key_size and value_size must be non-zero")
    if key_size + value_size >= KMALLOC_MAX_SIZE - HTAB_ELEM_SIZE:
        raise MapError(_errno.E2BIG, f"key_size {key_size} + value_size {value_size} is too big")
    if percpu and round_up8(value_size) > PCPU_MIN_UNIT_SIZE:
        raise MapError(_errno.E2BIG, f"per-CPU value_size {value_size} is over {PCPU_MIN_UNIT_SIZE}")
    if max_entries > 1 << 31:
        raise MapError(_errno.E2BIG, f"max_entries {max_entries} is over 2^31")
