"""What every map type shares, as ``struct bpf_map`` (``include/linux/bpf.h``) and the
common code of ``kernel/bpf/syscall.c`` give it: the ``map_flags`` bits of the uapi, the
errors ``BPF_MAP_CREATE`` fails with (:class:`MapError`), and :class:`MapBase`, the base
of the map types of :mod:`kernel_model.bpf.hashtab` and :mod:`kernel_model.bpf.arraymap`
(its ``struct bpf_map`` object, CPU count, ``BPF_MAP_FREEZE`` and the syscall-side
writes).  :func:`kernel_model.bpf.maps.create_map` puts the map types together.
"""

from __future__ import annotations

import errno as _errno
from typing import TYPE_CHECKING

from kernel_model.bpf.bpf_types import BPF_ANY, BpfMap
from kernel_model.errors import EmuError

if TYPE_CHECKING:
    from kernel_model.bpf.memory import KernelMemory

# map_flags (include/uapi/linux/bpf.h)
BPF_F_NO_PREALLOC = 1 << 0
BPF_F_NO_COMMON_LRU = 1 << 1
BPF_F_NUMA_NODE = 1 << 2
BPF_F_RDONLY = 1 << 3
BPF_F_WRONLY = 1 << 4
BPF_F_ZERO_SEED = 1 << 6
BPF_F_RDONLY_PROG = 1 << 7
BPF_F_WRONLY_PROG = 1 << 8
BPF_F_MMAPABLE = 1 << 10
BPF_F_PRESERVE_ELEMS = 1 << 11
BPF_F_INNER_MAP = 1 << 12
BPF_F_ACCESS_MASK = BPF_F_RDONLY | BPF_F_RDONLY_PROG | BPF_F_WRONLY | BPF_F_WRONLY_PROG

ENOTSUPP = 524  # the kernel-internal errno LRU maps without preallocation fail with
PCPU_MIN_UNIT_SIZE = 32 << 10
BPF_MAP_STRUCT_SIZE = 256  # the struct bpf_map object a lddw of the map loads


class MapError(EmuError):
    """``BPF_MAP_CREATE`` failing as the kernel fails it: ``errno`` is the positive errno
    the syscall returns (``errno_name`` its name), the message says which attribute."""

    def __init__(self, errno_value: int, message: str):
        self.errno = errno_value
        self.errno_name = "ENOTSUPP" if errno_value == ENOTSUPP else _errno.errorcode.get(errno_value, str(errno_value))
        super().__init__(f"{self.errno_name}: {message}")


def round_up8(n: int) -> int:
    return (n + 7) & ~7


class MapBase(BpfMap):
    """What the hash and array map types share: the ``struct bpf_map`` object, the CPU
    count, ``BPF_MAP_FREEZE`` and the syscall-side writes; each type allocates its own
    memory in ``_area`` (its ``map_alloc``)."""

    def __init__(self, key_size: int, value_size: int, max_entries: int, map_flags: int, name: str, nr_cpus: int):
        super().__init__(key_size, value_size, max_entries, map_flags, name)
        self.nr_cpus = nr_cpus
        self.memory: KernelMemory | None = None

    def _area(self, memory: KernelMemory) -> None:
        """Allocate the map's memory (``map_alloc``)."""

    def memory_bytes(self) -> int:
        """The bytes the map's elements take (what ``bpf_map_area_alloc`` is asked for)."""
        return 0

    def create(self, memory: KernelMemory) -> None:
        self.memory = memory
        self.region = memory.alloc(BPF_MAP_STRUCT_SIZE, "map", writable=False, owner=self)
        self._area(memory)

    def freeze(self) -> int:
        """``BPF_MAP_FREEZE``: the syscall side may no longer write; -EBUSY the second time."""
        if self.frozen:
            return -_errno.EBUSY
        self.frozen = True
        return 0

    def _check_key(self, key: bytes) -> None:
        if len(key) != self.key_size:
            raise ValueError(f"map {self.name!r}: key of {len(key)} bytes, the map's keys have {self.key_size}")

    def syscall_value_size(self) -> int:
        """The size of a value ``BPF_MAP_LOOKUP_ELEM`` copies (``bpf_map_value_size``)."""
        return self.value_size

    def update_value(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> int:
        """``BPF_MAP_UPDATE_ELEM`` from the syscall: -EPERM once frozen."""
        if self.frozen:
            return -_errno.EPERM
        return self.update_elem(key, value, flags)

    def delete_value(self, key: bytes) -> int:
        """``BPF_MAP_DELETE_ELEM`` from the syscall: -EPERM once frozen."""
        if self.frozen:
            return -_errno.EPERM
        return self.delete_elem(key)

    def as_dict(self) -> dict[bytes, bytes]:
        """Every element as ``{key: value}`` (syscall-side bytes), in iteration order."""
        return dict(self.items())
