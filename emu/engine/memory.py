"""The process address space: named mappings over Unicorn memory, and text patching.

A mapping (VMA) records what the kernel's ``vm_area_struct`` would: start, end,
permissions, a name as /proc/PID/maps shows it, and for file-backed mappings the file and
the file offset of ``start`` (``vm_pgoff``).  uprobes are keyed by (file, offset), so the
mapping is what turns a probe into an address: ``vaddr = start + offset - pgoff``.

All kernel-side writes to guest text go through :meth:`Memory.text_poke`, which also
drops Unicorn's translated blocks for the range (Unicorn does not notice ``mem_write``
to code it already translated) - the model's ``text_poke`` + ``sync_core``.

Guest memory lives in host anonymous mappings made with ``MAP_NORESERVE`` and handed to
Unicorn with ``mem_map_ptr``: an untouched page costs the host nothing (a 3 GB guest
mapping is free until written), Unicorn splits such regions on mprotect/munmap without
copying them (it copies only memory it allocated itself), and unmapping returns the
pages to the host at once.  Every mapping is charged to a :class:`MemoryLimit` shared
by the machine's address spaces (the model's ``may_expand_vm`` with ``RLIMIT_AS``), so
a guest gets ENOMEM instead of pushing the host into its OOM killer.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import mmap as _mmap
import struct
import weakref
from dataclasses import dataclass

from unicorn import UC_CTL_IO_WRITE, UC_CTL_TB_REMOVE_CACHE, UC_PROT_EXEC, UC_PROT_READ, UC_PROT_WRITE, UcError
from unicorn.unicorn_py3.unicorn import uclib

from kernel_model.mm.mm_types import (
    MAX_MAP_COUNT,
    MMAP_BASE,
    MMAP_MIN_ADDR,
    PAGE_SIZE,
    PROT_ALL,
    PROT_EXEC,
    PROT_READ,
    PROT_WRITE,
    TASK_SIZE,
    GuestFault,
    MappedFile,
    MemoryLimit,
    MemoryLimitExceeded,
    Vma,
    page_down,
    page_up,
)

_libc = ctypes.CDLL(None, use_errno=True)


@functools.cache
def _uc_mem_calls() -> tuple:
    """uc_mem_read / uc_mem_write as unprototyped functions (arguments converted by
    the caller, once): a small guest access at half the binding's cost."""
    lib = ctypes.CDLL(uclib._name)
    out = []
    for fn in (lib.uc_mem_read, lib.uc_mem_write):
        fn.argtypes = None
        fn.restype = ctypes.c_int
        out.append(fn)
    return tuple(out)


# uc_ctl(UC_CTL_TB_REMOVE_CACHE) as the binding's ctl_remove_cache encodes it (write, two
# arguments), called directly: the binding's layers cost more than the call itself
_CTL_TB_REMOVE_CACHE = (UC_CTL_IO_WRITE << 30) | (2 << 26) | UC_CTL_TB_REMOVE_CACHE
_SMALL_READ = 64       # reads up to this size go through one reused buffer
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_libc.pread.restype = ctypes.c_ssize_t
_libc.pread.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long)
_libc.mremap.restype = ctypes.c_void_p
_libc.mremap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int)
_MREMAP_MAYMOVE = 1
_GROW_REGION_MAX = 16 << 20         # a growing mapping is one Unicorn region per 16 MiB
_MAP_FAILED = ctypes.c_void_p(-1).value
_HOST_FLAGS = _mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS | getattr(_mmap, "MAP_NORESERVE", 0x4000)
_MADV_DONTNEED = 4


def _host_alloc(size: int) -> int:
    """A lazily backed host anonymous mapping (pages cost nothing until touched)."""
    addr = _libc.mmap(None, size, _mmap.PROT_READ | _mmap.PROT_WRITE, _HOST_FLAGS, -1, 0)
    if addr in (None, _MAP_FAILED):
        raise MemoryLimitExceeded(f"the host refused a mapping of {size:#x} bytes")
    return addr


def _host_touched_pages(host: int, size: int) -> list[bool]:
    """Which pages of a host range were ever touched: present or swapped out in
    /proc/self/pagemap (bits 63, 62).  A private anonymous page never touched reads as
    zeros, so it need not be copied.  If pagemap cannot be read, every page counts."""
    n = size // PAGE_SIZE
    try:
        with open("/proc/self/pagemap", "rb") as f:
            f.seek(host // PAGE_SIZE * 8)
            raw = f.read(n * 8)
    except OSError:
        return [True] * n
    if len(raw) != n * 8:
        return [True] * n
    return [bool(e >> 62) for e in struct.unpack(f"<{n}Q", raw)]


def _host_free_all(backing: list) -> None:
    """Return every host range of an address space (when its Unicorn instance goes)."""
    for b in backing:
        _libc.munmap(b.host, b.end - b.start)
    backing.clear()


@dataclass
class _Backing:
    """Host memory behind the guest range [start, end): guest ``a`` is host ``host + a - start``."""

    start: int
    end: int
    host: int

    @functools.cached_property
    def view(self) -> memoryview:
        """The block as bytes, for 8-byte loads and stores without a native call (a
        _Backing is replaced, never shrunk, when part of its range is unmapped)."""
        return memoryview((ctypes.c_char * (self.end - self.start)).from_address(self.host)).cast("B")


_U64 = struct.Struct("<Q")
_NO_VMAS: tuple = ()
# (mapping, start, end, host view, guest address of the view): no span
_NO_SPAN = (None, 1, 0, None, 0)
_PROT_RW, _PROT_RWX = PROT_READ | PROT_WRITE, PROT_READ | PROT_WRITE | PROT_EXEC


def _uc_prot(prot: int) -> int:
    p = 0
    if prot & PROT_READ:
        p |= UC_PROT_READ
    if prot & PROT_WRITE:
        p |= UC_PROT_WRITE
    if prot & PROT_EXEC:
        p |= UC_PROT_EXEC
    return p


class Memory:
    """One address space on one Unicorn instance."""

    checkpoint_keep = ("uc", "_backing", "_last_backing", "_span", "_free_host", "text_write_listeners")

    def __init__(self, uc, counters, limit: MemoryLimit | None = None):
        self.uc = uc
        self.counters = counters
        self.limit = limit if limit is not None else MemoryLimit(None)
        self.vmas: list[Vma] = []
        self._starts: list[int] = []
        self.vma_gen = 0                       # bumped by every change of the VMA list
        self._by_file: tuple = (-1, {})        # (vma_gen, {file: [Vma]}): see file_vmas
        self._last: Vma | None = None               # last mapping a user access checked
        self._rbuf = ctypes.create_string_buffer(_SMALL_READ)   # small reads (read())
        self._last_backing: _Backing | None = None    # the host block read() found last
        self._span = _NO_SPAN                   # see _rw_span
        self._backing: list[_Backing] = []     # changed in place: the finalizer holds it
        # The host pages live exactly as long as the Unicorn instance that maps them.
        self._free_host = weakref.finalize(uc, _host_free_all, self._backing) if uc is not None else None
        self.text_write_listeners: list = []   # callables (start, end) -> None
        self.release_listeners: list = []      # callables () -> None, run as the engine closes

    # -- lookup -------------------------------------------------------------
    def _reindex(self) -> None:
        self.vma_gen += 1                # what was looked up by address may have moved
        self._last = None
        self._last_backing = None
        self._span = _NO_SPAN
        self.vmas.sort(key=lambda v: v.start)
        self._starts = [v.start for v in self.vmas]

    def file_vmas(self, file) -> list[Vma] | tuple:
        """The mappings of ``file``, in address order: the inode's i_mmap as uprobes
        walks it (register_for_each_vma), built once per change of the VMA list rather
        than scanning every VMA for every probe."""
        gen, by = self._by_file
        if gen != self.vma_gen:
            by = {}
            for v in self.vmas:
                if v.file is not None:
                    by.setdefault(v.file, []).append(v)
            self._by_file = (self.vma_gen, by)
        return by.get(file, _NO_VMAS)

    def find_vma(self, addr: int) -> Vma | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0:
            v = self.vmas[i]
            if v.start <= addr < v.end:
                return v
        return None

    def _overlapping(self, start: int, end: int) -> list[Vma]:
        i = max(0, bisect.bisect_right(self._starts, start) - 1)
        out = []
        for v in self.vmas[i:]:
            if v.start >= end:
                break
            if v.end > start:
                out.append(v)
        return out

    def is_free(self, start: int, end: int) -> bool:
        return not self._overlapping(start, end)

    def mapped_bytes(self, start: int, end: int) -> int:
        return sum(min(v.end, end) - max(v.start, start) for v in self._overlapping(start, end))

    @property
    def total(self) -> int:
        """Bytes mapped in this address space (what it charges to the limit)."""
        return sum(v.size for v in self.vmas)

    def get_unmapped_area(self, length: int, hint: int | None = None,
                          low: int = MMAP_MIN_ADDR, high: int = MMAP_BASE) -> int | None:
        """The kernel's top-down search: the hint if free, else the highest free gap
        below ``high`` (and above ``low``)."""
        length = page_up(length)
        if length > TASK_SIZE:
            return None
        if hint is not None:
            hint = page_down(hint)
            if hint >= MMAP_MIN_ADDR and hint + length <= TASK_SIZE and self.is_free(hint, hint + length):
                return hint
        end = high
        for v in reversed(self.vmas):
            if v.start >= end:
                continue
            if v.end <= end and end - v.end >= length:
                break
            end = v.start
        return end - length if end - length >= low else None

    # -- mapping --------------------------------------------------------------
    def map(self, start: int, size: int, prot: int, name: str = "", *,
            file: MappedFile | None = None, pgoff: int = 0, data: bytes = b"",
            special: bool = False, mayprot: int | None = None) -> Vma:
        """Map [start, start+size) (replacing what was there, as MAP_FIXED does).

        Raises :class:`MemoryLimitExceeded` past the memory limit or vm.max_map_count;
        nothing has changed then."""
        start, end = page_down(start), page_up(start + size)
        if self.uc is None:
            raise MemoryLimitExceeded("the address space was released")
        if len(self.vmas) >= MAX_MAP_COUNT:
            raise MemoryLimitExceeded(f"more than {MAX_MAP_COUNT} mappings (vm.max_map_count)")
        overlap = self.mapped_bytes(start, end)
        self.limit.charge(end - start - overlap)     # raises before anything changes
        if overlap:
            self.unmap(start, end - start)           # uncharges the replaced bytes,
            self.limit.used += overlap               # which the new mapping now holds
        elif not data and file is None and not special:
            grown = self._grow_anon(start, end, prot, name, mayprot)
            if grown is not None:
                return grown
        host = _host_alloc(end - start)
        try:
            self.uc.mem_map_ptr(start, end - start, _uc_prot(prot), host)
        except UcError:
            _libc.munmap(host, end - start)
            self.limit.uncharge(end - start)
            raise MemoryLimitExceeded(f"cannot map {start:#x}-{end:#x}") from None
        self._backing.append(_Backing(start, end, host))
        self._backing.sort(key=lambda b: b.start)          # in place
        if data:
            self.uc.mem_write(start, bytes(data[:end - start]))
        vma = Vma(start, end, prot, name, file, pgoff, special,
                  mayprot=prot if special and mayprot is None else PROT_ALL if mayprot is None else mayprot)
        self.vmas.append(vma)
        self._reindex()
        return self._merge_anon(vma)

    def map_file(self, start: int, size: int, prot: int, file: MappedFile, pgoff: int, host_fd: int,
                 *, shared: bool = False, name: str = "") -> Vma:
        """A file mapping (mmap_region with a file): [start, start+size) shows the file
        from offset ``pgoff``.  The file's pages are read from ``host_fd`` straight into
        the mapping's host memory (no Python copy); the part of the last page past EOF,
        and whole pages past it, read as zeros.  Private and shared read-only mappings
        look alike to the guest: a write to either is the guest's own copy (MAP_SHARED
        writable mappings are refused by the caller)."""
        vma = self.map(start, size, prot, name, file=file, pgoff=pgoff)
        vma.shared = shared
        for lo, host, n in self._host_ranges(vma.start, vma.end):
            off = pgoff + lo - vma.start
            while n > 0:
                got = _libc.pread(host_fd, host, n, off)
                if got <= 0:
                    break                      # EOF (or a read error): the rest stays zero
                host, n, off = host + got, n - got, off + got
        self.uc.ctl_remove_cache(vma.start, vma.end)
        return vma

    def fill_from_file(self, start: int, end: int, file: MappedFile, offset: int) -> None:
        """Read file bytes from ``offset`` into [start, end) (a file mapping that grew or
        faults in afresh); past EOF the pages read as zeros."""
        chunk = 1 << 20
        for lo in range(start, end, chunk):
            n = min(chunk, end - lo)
            self._raw_write(lo, file.read(offset + lo - start, n))
        self.uc.ctl_remove_cache(start, end)

    def join(self, lo: Vma, hi: Vma) -> Vma:
        """Two adjacent VMAs become ``lo`` (vma_expand after an in-place mremap)."""
        lo.end = hi.end
        self.vmas.remove(hi)
        self._reindex()
        return lo

    def copy_within(self, src: int, dst: int, n: int) -> None:
        """Copy ``n`` bytes of host memory from guest ``src`` to guest ``dst`` (move_page_tables:
        the pages move with the mapping, nothing goes through Python)."""
        for lo, host, length in list(self._host_ranges(src, src + n)):
            for dlo, dhost, dn in list(self._host_ranges(dst + lo - src, dst + lo - src + length)):
                ctypes.memmove(dhost, host + dlo - (dst + lo - src), dn)
        self.uc.ctl_remove_cache(dst, dst + n)

    def _grow_anon(self, start: int, end: int, prot: int, name: str, mayprot: int | None) -> Vma | None:
        """Extend the anonymous mapping that ends at ``start`` (a growing [heap]) as one
        Unicorn region: its host pages are mremap()ed larger (moved, never copied) and
        the region re-registered.  Thousands of one-page brk() calls would otherwise
        leave thousands of Unicorn regions, each map slower than the last."""
        prev = self.find_vma(start - 1) if start else None
        if prev is None or prev.end != start or prev.file is not None or prev.special or \
                prev.prot != prot or prev.name != name or prev.mayprot != (PROT_ALL if mayprot is None else mayprot):
            return None
        b = next((b for b in self._backing if b.end == start and b.start >= prev.start), None)
        if b is None or b.end - b.start >= _GROW_REGION_MAX:
            return None          # Unicorn's unmap flushes per page: keep regions moderate
        old, new = b.end - b.start, end - b.start
        host = _libc.mremap(b.host, old, new, _MREMAP_MAYMOVE)
        if host in (None, _MAP_FAILED):
            return None
        self.uc.mem_unmap(b.start, old)
        self.uc.mem_map_ptr(b.start, new, _uc_prot(prot), host)
        b.end, b.host = end, host
        b.__dict__.pop("view", None)         # the old view: the old size, perhaps the old place
        prev.end = end
        self._reindex()
        return prev

    def _merge_anon(self, vma: Vma) -> Vma:
        """Adjacent anonymous mappings with the same protection and name are one VMA,
        as vma_merge() makes them (a growing [heap] stays one line in maps; an mmap
        just below another anonymous mapping extends it downwards)."""
        if vma.file is not None or vma.special:
            return vma
        i = self.vmas.index(vma)
        if i + 1 < len(self.vmas) and self._mergeable(vma, self.vmas[i + 1]):
            vma.end = self.vmas[i + 1].end
            del self.vmas[i + 1]
            self._reindex()
        if i > 0 and self._mergeable(self.vmas[i - 1], vma):
            prev = self.vmas[i - 1]
            prev.end = vma.end
            del self.vmas[i]
            self._reindex()
            return prev
        return vma

    @staticmethod
    def _mergeable(lo: Vma, hi: Vma) -> bool:
        return lo.end == hi.start and lo.file is None and hi.file is None and not lo.special and \
            not hi.special and lo.prot == hi.prot and lo.name == hi.name and lo.mayprot == hi.mayprot and \
            lo.flags == hi.flags

    def unmap(self, start: int, size: int) -> None:
        start, end = page_down(start), page_up(start + size)
        keep = []
        for v in self.vmas:
            if v.end <= start or v.start >= end:
                keep.append(v)
                continue
            lo, hi = max(v.start, start), min(v.end, end)
            self.uc.mem_unmap(lo, hi - lo)
            self.limit.uncharge(hi - lo)
            if v.start < lo:
                keep.append(self._piece(v, v.start, lo, v.prot))
            if hi < v.end:
                keep.append(self._piece(v, hi, v.end, v.prot))
        self.vmas = keep
        self._reindex()
        self._free_backing(start, end)
        self._notify(start, end)

    @staticmethod
    def _piece(v: Vma, lo: int, hi: int, prot: int) -> Vma:
        """The part [lo, hi) of ``v`` as its own VMA (split_vma)."""
        return Vma(lo, hi, prot, v.name, v.file, v.pgoff + (lo - v.start) if v.file else 0,
                   v.special, set(v.flags), v.mayprot, v.shared)

    def _free_backing(self, start: int, end: int) -> None:
        """Give the host pages of [start, end) back (munmap of the host range)."""
        keep = []
        for b in self._backing:
            lo, hi = max(b.start, start), min(b.end, end)
            if lo >= hi:
                keep.append(b)
                continue
            _libc.munmap(b.host + lo - b.start, hi - lo)
            if b.start < lo:
                keep.append(_Backing(b.start, lo, b.host))
            if hi < b.end:
                keep.append(_Backing(hi, b.end, b.host + hi - b.start))
        self._backing[:] = keep
        self._last_backing = None
        self._span = _NO_SPAN

    def _host_ranges(self, start: int, end: int):
        """(guest start, host address, length) pieces of the host memory of [start, end)."""
        for b in self._backing:
            lo, hi = max(b.start, start), min(b.end, end)
            if lo < hi:
                yield lo, b.host + lo - b.start, hi - lo

    def protect(self, start: int, size: int, prot: int) -> bool:
        start, end = page_down(start), page_up(start + size)
        covered = self.mapped_bytes(start, end)
        if covered != end - start:
            return False
        new = []
        for v in self.vmas:
            if v.end <= start or v.start >= end:
                new.append(v)
                continue
            lo, hi = max(v.start, start), min(v.end, end)
            if v.start < lo:
                new.append(self._piece(v, v.start, lo, v.prot))
            new.append(self._piece(v, lo, hi, prot))
            if hi < v.end:
                new.append(self._piece(v, hi, v.end, v.prot))
        self.uc.mem_protect(start, end - start, _uc_prot(prot))
        if prot & PROT_EXEC:
            # user writes to non-executable pages go straight to host memory (write_user),
            # which Unicorn's translations do not see: pages that become executable
            # again start without any
            self.uc.ctl_remove_cache(start, end)
        self.vmas = new
        self._reindex()
        return True

    def may_protect(self, start: int, size: int, prot: int) -> bool:
        """mprotect_fixup's VM_MAY* check: no mapping in the range may gain a permission
        it was not created able to have ([uprobes] is exec-only, the trampoline r-x)."""
        start, end = page_down(start), page_up(start + size)
        return all(not prot & ~v.mayprot for v in self._overlapping(start, end))

    def discard(self, start: int, size: int) -> None:
        """MADV_DONTNEED on private anonymous memory: the pages read as zeros again and
        their host memory is freed."""
        start, end = page_down(start), page_up(start + size)
        for lo, host, n in self._host_ranges(start, end):
            v = self.find_vma(lo)
            if v is not None and v.file is None:
                _libc.madvise(host, n, _MADV_DONTNEED)
        self.uc.ctl_remove_cache(start, end)

    def copy_pages_from(self, other: "Memory", start: int, end: int) -> None:
        """dup_mmap's copy of [start, end): only pages the parent ever touched are
        copied; the others read as zeros in both."""
        for lo, host, n in other._host_ranges(start, end):
            touched = _host_touched_pages(host, n)
            for dst_lo, dst_host, dn in self._host_ranges(lo, lo + n):
                base = (dst_lo - lo) // PAGE_SIZE
                for i in range(dn // PAGE_SIZE):
                    if touched[base + i]:
                        off = (base + i) * PAGE_SIZE
                        ctypes.memmove(dst_host + i * PAGE_SIZE, host + off, PAGE_SIZE)

    # -- checkpoints (emu.replay.checkpoint) ---------------------------------------------
    def page_image(self) -> tuple[tuple, tuple, dict]:
        """``(regions, backing, pages)``: the Unicorn regions ``(start, end, perms)``,
        the host backing ranges ``(start, end)`` and the bytes of every page the host
        ever touched (``{page address: bytes}``; the others read as zeros)."""
        pages = {}
        for b in self._backing:
            for i, touched in enumerate(_host_touched_pages(b.host, b.end - b.start)):
                if touched:
                    pages[b.start + i * PAGE_SIZE] = ctypes.string_at(b.host + i * PAGE_SIZE, PAGE_SIZE)
        regions = tuple((lo, hi + 1, perms) for lo, hi, perms in self.uc.mem_regions())
        return regions, tuple((b.start, b.end) for b in self._backing), pages

    def restore_image(self, regions: tuple, backing: tuple, pages: dict) -> None:
        """Put a :meth:`page_image` back: the same regions and host ranges (rebuilt
        when they differ), then only the pages whose bytes differ are written; a page
        absent from ``pages`` reads as zeros again."""
        self._span = _NO_SPAN                # the mappings are about to be those of then
        now_regions = tuple((lo, hi + 1, perms) for lo, hi, perms in self.uc.mem_regions())
        same = now_regions == regions and tuple((b.start, b.end) for b in self._backing) == backing
        current = self.page_image()[2] if same else {}
        if not same:
            self._rebuild(regions, backing)
        for b in self._backing:
            for addr in range(b.start, b.end, PAGE_SIZE):
                want = pages.get(addr)
                host = b.host + addr - b.start
                if want is not None:
                    if current.get(addr) != want:
                        ctypes.memmove(host, want, PAGE_SIZE)
                elif addr in current:
                    _libc.madvise(host, PAGE_SIZE, _MADV_DONTNEED)
        self.uc.ctl_flush_tb()

    def _rebuild(self, regions: tuple, backing: tuple) -> None:
        self._last_backing = None            # its host block is about to go
        self._span = _NO_SPAN
        for lo, hi, _ in list(self.uc.mem_regions()):
            self.uc.mem_unmap(lo, hi + 1 - lo)
        for b in self._backing:
            _libc.munmap(b.host, b.end - b.start)
        self._backing.clear()
        for start, end in backing:
            self._backing.append(_Backing(start, end, _host_alloc(end - start)))
        for lo, hi, perms in regions:
            b = next(b for b in self._backing if b.start <= lo and hi <= b.end)
            self.uc.mem_map_ptr(lo, hi - lo, perms, b.host + lo - b.start)

    def adopt(self, uc) -> None:
        """A released address space comes back on a new, empty Unicorn instance (a
        checkpoint from before the exit is restored); its host pages live as long as
        ``uc``."""
        for lo, hi, _ in list(uc.mem_regions()):
            uc.mem_unmap(lo, hi + 1 - lo)
        self.uc = uc
        self._backing = []
        self._last_backing = None
        self._span = _NO_SPAN
        self._free_host = weakref.finalize(uc, _host_free_all, self._backing)

    @property
    def released(self) -> bool:
        """Is the address space gone (:meth:`release`)?"""
        return self.uc is None

    def release(self) -> None:
        """exit_mmap: the address space is gone (its process exited).  The Unicorn
        instance is closed and every host page returned; the Memory stays as an empty
        address space so late lookups find nothing."""
        uc, self.uc = self.uc, None
        for fn in self.release_listeners:
            fn()
        self.release_listeners = []
        if uc is not None:
            finalizer = getattr(uc, "_Uc__finalizer", None)
            if finalizer is not None:
                finalizer()                       # uc_close now, not at garbage collection
            uc._callbacks.clear()
            uc._uch = None
        self._last_backing = None
        self._span = _NO_SPAN
        if self._free_host is not None:
            self._free_host()
        self.limit.uncharge(self.total)
        self.vmas = []
        self._reindex()

    # -- access ---------------------------------------------------------------
    def _host_of(self, addr: int, n: int) -> int | None:
        """The host address of guest [addr, addr+n) when one host block holds it all
        (the guest's pages are host memory mapped into Unicorn: ``mem_map_ptr``)."""
        b = self._last_backing
        if b is None or not (b.start <= addr and addr + n <= b.end):
            for b in self._backing:
                if b.start <= addr and addr + n <= b.end:
                    break
            else:
                return None
            self._last_backing = b
        return b.host + addr - b.start

    def read_byte(self, addr: int) -> int:
        """One byte, raw as :meth:`read`; from the host block behind it without a
        native call when there is one."""
        b = self._last_backing
        if b is not None and b.start <= addr < b.end:
            return b.view[addr - b.start]
        if self._host_of(addr, 1) is not None:
            b = self._last_backing
            return b.view[addr - b.start]
        return self.read(addr, 1)[0]

    def read(self, addr: int, n: int) -> bytes:
        """Raw read (the kernel's FOLL_FORCE view): ignores permissions.  Read from
        the host memory behind the pages when one block holds them (the CPU writes
        there too), else through Unicorn."""
        uc = self.uc
        if uc is None or n < 0:
            raise GuestFault(addr, "read")
        host = self._host_of(addr, n) if n else None
        if host is not None:
            return ctypes.string_at(host, n)
        small = n <= _SMALL_READ
        buf = self._rbuf if small else ctypes.create_string_buffer(n)
        if _uc_mem_calls()[0](uc._uch, ctypes.c_uint64(addr & 0xFFFFFFFFFFFFFFFF), buf, ctypes.c_size_t(n)):
            raise GuestFault(addr, "read")
        return buf.raw[:n] if small else buf.raw

    def write(self, addr: int, data: bytes) -> None:
        """Raw write (the kernel's FOLL_FORCE view, as exec fills a new image):
        ignores permissions; faults only where nothing is mapped."""
        self._raw_write(addr, bytes(data))

    def _raw_write(self, addr: int, data: bytes) -> None:
        uc = self.uc
        if uc is None or _uc_mem_calls()[1](uc._uch, ctypes.c_uint64(addr & 0xFFFFFFFFFFFFFFFF), data,
                                            ctypes.c_size_t(len(data))):
            raise GuestFault(addr, "write")

    def _check(self, addr: int, n: int, need: int, access: str) -> None:
        v = self._last
        if v is not None and v.start <= addr and addr + n <= v.end and v.prot & need:
            return                                   # the common case: same mapping again
        a, end = addr, addr + n
        while a < end:
            v = self.find_vma(a)
            if v is None or not (v.prot & need):
                raise GuestFault(a, access)
            a = v.end
        self._last = v if v is not None and v.start <= addr and addr + n <= v.end else None

    def read_user(self, addr: int, n: int) -> bytes:
        """copy_from_user: needs readable mappings."""
        self._check(addr, n, PROT_READ, "read")
        return self.read(addr, n)

    def write_user(self, addr: int, data: bytes) -> None:
        """copy_to_user: needs writable mappings.  Into a non-executable mapping the
        bytes go straight to the host memory behind it (no translation of the CPU can
        hold them: see :meth:`protect`), elsewhere through Unicorn."""
        data = bytes(data)
        self._check(addr, len(data), PROT_WRITE, "write")
        v = self._last
        if v is not None and not v.prot & PROT_EXEC and data:
            host = self._host_of(addr, len(data))
            if host is not None:
                ctypes.memmove(host, data, len(data))
                return
        self._raw_write(addr, data)

    def _rw_span(self, addr: int, n: int) -> None:
        """After a checked access of [addr, addr+n): remember where user reads and
        writes may go straight to host memory - the mapping checked (readable,
        writable, not executable: a stack, a heap) within its host block - as one
        tuple, valid while that mapping is the one last checked (``_last``: dropped by
        every change of the VMAs, and by a checkpoint's restore)."""
        v, b = self._last, self._last_backing
        if v is not None and b is not None and v.prot & _PROT_RWX == _PROT_RW and v.start <= addr \
                and addr + n <= v.end and b.start <= addr and addr + n <= b.end:
            self._span = (v, max(v.start, b.start), min(v.end, b.end), b.view, b.start)

    def read_user_struct(self, st: struct.Struct, addr: int) -> tuple:
        """copy_from_user of ``st.size`` bytes unpacked with ``st``: one unpack from
        host memory inside the span of :meth:`_rw_span` (the uretprobe trampoline's
        saved registers on the stack), else through :meth:`read_user`."""
        n = st.size
        v, lo, end, view, base = self._span
        if lo <= addr and addr + n <= end and v is self._last:
            return st.unpack_from(view, addr - base)
        out = st.unpack(self.read_user(addr, n))
        self._rw_span(addr, n)
        return out

    def write_user_struct(self, st: struct.Struct, addr: int, *values) -> None:
        """copy_to_user of ``st.pack(*values)``, as :meth:`write_u64`."""
        n = st.size
        v, lo, end, view, base = self._span
        if lo <= addr and addr + n <= end and v is self._last:
            st.pack_into(view, addr - base, *values)
            return
        self.write_user(addr, st.pack(*values))
        self._rw_span(addr, n)

    def read_u64(self, addr: int) -> int:
        """get_user of 8 bytes (a stack word, a return address): from host memory inside
        the span of :meth:`_rw_span`, else from the host block of the mapping last
        checked when it holds them, else through :meth:`read_user`."""
        v, lo, end, view, base = self._span
        if lo <= addr and addr + 8 <= end and v is self._last:
            return _U64.unpack_from(view, addr - base)[0]
        v, b = self._last, self._last_backing
        if v is not None and b is not None and v.start <= addr and addr + 8 <= v.end and v.prot & PROT_READ \
                and b.start <= addr and addr + 8 <= b.end:
            return _U64.unpack_from(b.view, addr - b.start)[0]
        out = int.from_bytes(self.read_user(addr, 8), "little")
        self._rw_span(addr, 8)
        return out

    def write_u64(self, addr: int, value: int) -> None:
        """put_user of 8 bytes: into host memory inside the span of :meth:`_rw_span`,
        else through :meth:`write_user` (which sets the span up)."""
        v, lo, end, view, base = self._span
        if lo <= addr and addr + 8 <= end and v is self._last:
            _U64.pack_into(view, addr - base, value & 0xFFFFFFFFFFFFFFFF)
            return
        self.write_user(addr, (value & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little"))
        self._rw_span(addr, 8)

    def read_cstring(self, addr: int, limit: int = 4096) -> bytes:
        out = bytearray()
        while len(out) < limit:
            chunk = self.read_user(addr + len(out), min(64, PAGE_SIZE - ((addr + len(out)) & 0xFFF)))
            nul = chunk.find(b"\0")
            if nul >= 0:
                out += chunk[:nul]
                return bytes(out)
            out += chunk
        return bytes(out[:limit])

    def text_poke(self, addr: int, data: bytes, *, count: bool = True) -> None:
        """Kernel write to text (uprobe_write / text_poke): ignores protections, is
        seen by the CPU at once (translation cache dropped), counted in ``text_writes``
        unless ``count`` is False (XOL slot and trampoline page fills)."""
        data = bytes(data)
        if self.uc is None:
            raise GuestFault(addr, "write")
        host = self._host_of(addr, len(data)) if data else None
        if host is not None:
            ctypes.memmove(host, data, len(data))   # the same bytes uc_mem_write would store
        else:
            self._raw_write(addr, data)
        status = uclib.uc_ctl(self.uc._uch, _CTL_TB_REMOVE_CACHE, ctypes.c_uint64(addr),
                              ctypes.c_uint64(addr + len(data)))
        if status:
            raise UcError(status)
        if count:
            self.counters.text_writes += 1
        self._notify(addr, addr + len(data))

    def _notify(self, start: int, end: int) -> None:
        for fn in self.text_write_listeners:
            fn(start, end)

    def maps(self) -> str:
        """/proc/self/maps."""
        return "".join(v.maps_line() + "\n" for v in self.vmas)
