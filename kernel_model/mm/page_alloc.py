"""Physical memory and the page allocator (mm/page_alloc.c, include/linux/mm.h).

The guest's RAM is a few large host anonymous mappings (``MAP_NORESERVE``: a page
costs the host nothing until it is touched), each a *zone* at a fixed guest-physical
address.  The engine maps every zone into every CPU instance once (one Unicorn region
per zone, never one per VMA); address spaces differ only in their page tables.

``alloc_page`` hands out one 4 KiB frame with a reference count of one; ``get_page`` /
``put_page`` count the page tables (and the fork that shares them copy-on-write) that
map it.  A frame whose count drops to zero is returned to the host (``MADV_DONTNEED``:
it reads as zeros the next time, as the kernel's ``__GFP_ZERO`` user pages do).

A frame that held guest code may still have translations in some CPU instance's
translation cache, which is indexed by physical address: such frames are not reused
until every instance's cache was flushed (``on_recycle``), so freed code can never run
again as the bytes of the frame's next owner.
"""

from __future__ import annotations

import ctypes
import mmap as _mmap
import weakref
from collections.abc import Callable

from kernel_model.mm.mm_types import PAGE_SIZE, MemoryLimitExceeded

ZONE_SIZE = 64 << 20  # bytes of guest RAM per host mapping
ZONE_BASE = 1 << 32  # guest-physical address of the first zone
MAX_ZONES = 1024  # 64 GiB of guest RAM at most

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_MAP_FAILED = ctypes.c_void_p(-1).value
_HOST_FLAGS = _mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS | getattr(_mmap, "MAP_NORESERVE", 0x4000)
_MADV_DONTNEED = 4


class Zone:
    """One host mapping of guest RAM: guest-physical [phys, phys + size) is host
    [host, host + size)."""

    __slots__ = ("phys", "size", "host", "view")

    def __init__(self, phys: int, size: int):
        host = _libc.mmap(None, size, _mmap.PROT_READ | _mmap.PROT_WRITE, _HOST_FLAGS, -1, 0)
        if host in (None, _MAP_FAILED):
            raise MemoryLimitExceeded(f"the host refused {size:#x} bytes of guest RAM")
        self.phys, self.size, self.host = phys, size, host
        self.view = memoryview((ctypes.c_char * size).from_address(host)).cast("B")

    def release(self) -> None:
        _libc.munmap(self.host, self.size)


def _free_zones(zones: list) -> None:
    for z in zones:
        z.release()
    zones.clear()


class PhysicalMemory:
    """The machine's RAM and its page allocator (see the module docstring)."""

    checkpoint_by_reference = True  # the frames are restored page by page (Memory.restore_image)

    def __init__(self, zone_size: int = ZONE_SIZE):
        self.zone_size = zone_size
        self.zones: list[Zone] = []
        self._free: list[int] = []  # frames ready for reuse (zeroed)
        self._dirty_code: list[int] = []  # freed frames that held code: reused after on_recycle
        self._next = ZONE_BASE  # first frame never handed out
        self._end = ZONE_BASE  # end of the zones so far
        self.refcount: dict[int, int] = {}  # frame -> page_count (frames in use only)
        self.exec_frames: set[int] = set()  # frames some page table maps executable
        self.file_frames: set[int] = set()  # frames holding a file's page (the page cache's)
        self.zone_listeners: list = []  # callables (Zone) -> None: a CPU instance maps it
        self.users = 0  # live page tables (address spaces) over this RAM
        self.on_recycle: Callable[[], None] | None = None  # every CPU instance drops its translations
        self._finalizer = weakref.finalize(self, _free_zones, self.zones)

    # -- frames -----------------------------------------------------------------------
    def _add_zone(self) -> None:
        if len(self.zones) >= MAX_ZONES:
            raise MemoryLimitExceeded("the machine's RAM is exhausted")
        zone = Zone(self._end, self.zone_size)
        self.zones.append(zone)
        self._end += self.zone_size
        for fn in self.zone_listeners:
            fn(zone)

    def alloc_page(self) -> int:
        """A zeroed frame with a reference count of one (alloc_page(GFP_HIGHUSER | __GFP_ZERO))."""
        if self._free:
            frame = self._free.pop()
        elif self._next < self._end:
            frame = self._next
            self._next += PAGE_SIZE
        elif self._dirty_code and self.on_recycle is not None:
            self.on_recycle()
            self._free, self._dirty_code = self._dirty_code, []
            frame = self._free.pop()
        else:
            self._add_zone()
            frame = self._next
            self._next += PAGE_SIZE
        self.refcount[frame] = 1
        return frame

    def alloc_run(self, n: int) -> list[int]:
        """``n`` zeroed frames, consecutive when the never-used part of the zones has
        them (a file's pages then read in with one call)."""
        if n > 0 and self._next + n * PAGE_SIZE <= self._end:
            first = self._next
            self._next += n * PAGE_SIZE
            frames = list(range(first, first + n * PAGE_SIZE, PAGE_SIZE))
            for f in frames:
                self.refcount[f] = 1
            return frames
        return [self.alloc_page() for _ in range(n)]

    def alloc_contiguous(self, n: int) -> list[int]:
        """``n`` zeroed frames at consecutive addresses of one zone, for a kernel buffer
        the model reads and writes as one host buffer that the guest also maps (a BPF
        ring buffer): from the never-used part of the last zone, or of a new one when
        the last has no room (its unused rest goes to the free list)."""
        if n > self.zone_size // PAGE_SIZE:
            raise MemoryLimitExceeded(f"{n} contiguous pages are more than a zone holds")
        if self._next + n * PAGE_SIZE > self._end:
            self._free.extend(range(self._next, self._end, PAGE_SIZE))
            self._next = self._end
            self._add_zone()
        return self.alloc_run(n)

    def get_page(self, frame: int) -> None:
        self.refcount[frame] += 1

    def put_page(self, frame: int) -> None:
        """Drop a reference; the last one frees the frame (its bytes go back to the host)."""
        self.put_pages((frame,))

    def put_pages(self, frames) -> None:
        """put_page for many frames: the freed ones go back to the host in runs of
        consecutive frames (one madvise per run, not per page)."""
        refcount, freed = self.refcount, []
        for frame in frames:
            n = refcount[frame] - 1
            if n:
                refcount[frame] = n
            else:
                del refcount[frame]
                freed.append(frame)
        if not freed:
            return
        freed.sort()
        start = prev = freed[0]
        for frame in [*freed[1:], None]:
            if (
                frame is not None
                and frame == prev + PAGE_SIZE
                and (frame - ZONE_BASE) // self.zone_size == (start - ZONE_BASE) // self.zone_size
            ):
                prev = frame
                continue
            _libc.madvise(self.host(start), prev + PAGE_SIZE - start, _MADV_DONTNEED)
            if frame is not None:
                start = prev = frame
        self.file_frames.difference_update(freed)
        for frame in freed:
            if frame in self.exec_frames:
                self.exec_frames.discard(frame)
                self._dirty_code.append(frame)
            else:
                self._free.append(frame)

    def page_count(self, frame: int) -> int:
        return self.refcount.get(frame, 0)

    @property
    def frames_in_use(self) -> int:
        return len(self.refcount)

    # -- access -------------------------------------------------------------------------
    def zone_of(self, frame: int) -> Zone:
        return self.zones[(frame - ZONE_BASE) // self.zone_size]

    def host(self, frame: int) -> int:
        """The host address of guest-physical ``frame``."""
        z = self.zones[(frame - ZONE_BASE) // self.zone_size]
        return z.host + frame - z.phys

    def page_view(self, frame: int) -> tuple[memoryview, int]:
        """(view of the frame's zone, offset of the frame in it)."""
        z = self.zones[(frame - ZONE_BASE) // self.zone_size]
        return z.view, frame - z.phys

    def read(self, frame: int, offset: int, n: int) -> bytes:
        return ctypes.string_at(self.host(frame) + offset, n)

    def write(self, frame: int, offset: int, data: bytes) -> None:
        ctypes.memmove(self.host(frame) + offset, data, len(data))

    def copy_page(self, dst: int, src: int) -> None:
        """copy_user_highpage."""
        ctypes.memmove(self.host(dst), self.host(src), PAGE_SIZE)

    def release_zones(self) -> None:
        """The last address space is gone and no frame is in use: the zones go back to
        the host now, not when the machine is collected (a process that builds many
        machines keeps only the RAM of the live ones).  The next allocation adds a zone
        again."""
        if self.users or self.refcount or not self.zones:
            return
        _free_zones(self.zones)
        self._free, self._dirty_code = [], []
        self.exec_frames.clear()
        self.file_frames.clear()
        self._next = self._end = ZONE_BASE
