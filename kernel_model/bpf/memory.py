"""The kernel memory a BPF program can address: the context, its stack frames, map
values, the ``struct bpf_map`` a ``lddw`` loads, ring buffer records.

The kernel's verifier proves before a program runs that each of its accesses falls in one
of these objects; the interpreter (``kernel/bpf/core.c``) then dereferences raw pointers.
Here each object is a :class:`Region` at an address of its own in a kernel-like range
(``0xffff888000000000``, the direct map), so programs see and compute with 64-bit kernel
pointers as on Linux, and an access outside every region - which a verified program never
makes - is a :class:`BpfFault` the caller turns into an error, never a crash.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from kernel_model.errors import EmuError

DIRECT_MAP_BASE = 0xFFFF888000000000
_ALIGN = 64  # objects start on a cache line; a guard gap follows each
_GAP = 64


class BpfFault(EmuError):
    """An access no region covers (a bug in the model or an unverified program)."""

    def __init__(self, addr: int, size: int, write: bool):
        self.addr, self.size, self.write = addr, size, write
        super().__init__(f"BPF {'write' if write else 'read'} of {size} bytes at {addr:#x} outside every object")


@dataclass(eq=False)
class Region:
    """One kernel object: ``data`` at ``base``; ``kind`` names what it is (``ctx``,
    ``stack``, ``map_value``, ``map``, ``ringbuf``...); ``owner`` the map or program.
    Its size never changes (``end`` is kept, not computed: every access reads it)."""

    base: int
    data: bytearray
    kind: str
    writable: bool = True
    owner: object = field(default=None, repr=False)
    end: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.end = self.base + len(self.data)


class KernelMemory:
    """Regions by address; allocation never reuses an address while a region holds it."""

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._regions: list[Region] = []
        self._next = DIRECT_MAP_BASE
        # bumped whenever a region goes away or changes its buffer: an accessor that
        # caches regions (the interpreter's) must search again after a change
        self.generation = 0

    def alloc(self, size: int, kind: str, *, writable: bool = True, owner: object = None) -> Region:
        """A new zeroed object of ``size`` bytes (``kzalloc``/``bpf_map_area_alloc``)."""
        base = self._next
        self._next = (base + max(size, 1) + _GAP + _ALIGN - 1) // _ALIGN * _ALIGN
        region = Region(base, bytearray(size), kind, writable, owner)
        i = bisect.bisect(self._bases, base)
        self._bases.insert(i, base)
        self._regions.insert(i, region)
        return region

    def free(self, region: Region) -> None:
        i = bisect.bisect_left(self._bases, region.base)
        if i < len(self._bases) and self._regions[i] is region:
            del self._bases[i]
            del self._regions[i]
            self.generation += 1

    def replace_data(self, region: Region, data) -> None:
        """Give ``region`` another buffer of the same size (holding its bytes); accessors
        that cached the old one search again (``generation``)."""
        if len(data) != len(region.data):
            raise ValueError(f"a {len(region.data)}-byte region cannot take {len(data)} bytes")
        region.data = data
        self.generation += 1

    def find(self, addr: int, size: int = 1) -> Region | None:
        """The region holding ``[addr, addr + size)``, or None."""
        i = bisect.bisect_right(self._bases, addr) - 1
        if i < 0:
            return None
        region = self._regions[i]
        if addr + size > region.end:
            return None
        return region

    def load(self, addr: int, size: int) -> int:
        region = self.find(addr, size)
        if region is None:
            raise BpfFault(addr, size, False)
        off = addr - region.base
        return int.from_bytes(region.data[off : off + size], "little")

    def store(self, addr: int, size: int, value: int) -> None:
        region = self.find(addr, size)
        if region is None or not region.writable:
            raise BpfFault(addr, size, True)
        off = addr - region.base
        region.data[off : off + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")

    def read(self, addr: int, size: int) -> bytes:
        region = self.find(addr, size)
        if region is None:
            raise BpfFault(addr, size, False)
        off = addr - region.base
        return bytes(region.data[off : off + size])

    def write(self, addr: int, data: bytes) -> None:
        region = self.find(addr, len(data))
        if region is None or not region.writable:
            raise BpfFault(addr, len(data), True)
        off = addr - region.base
        region.data[off : off + len(data)] = data
