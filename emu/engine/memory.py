"""The process address space: named mappings (VMAs) over page tables the kernel model
owns, and text patching.

A mapping (VMA) records what the kernel's ``vm_area_struct`` would: start, end,
permissions, a name as /proc/PID/maps shows it, and for file-backed mappings the file and
the file offset of ``start`` (``vm_pgoff``).  uprobes are keyed by (file, offset), so the
mapping is what turns a probe into an address: ``vaddr = start + offset - pgoff``.

Memory is paged as on x86-64: each address space has its own 4-level page tables
(:class:`kernel_model.arch.x86.mm.pgtable.PageTable`) over frames of the machine's RAM
(:class:`kernel_model.mm.page_alloc.PhysicalMemory`); the CPU walks them
(:mod:`emu.engine.mmu`).  Anonymous memory is allocated on the first fault
(``do_anonymous_page``); a file mapping's pages are read in when it is mapped (the file
as it is then); fork shares every page copy-on-write (``copy_pte_range``, ``do_wp_page``);
``uprobe_write_opcode`` writes into a private copy of a page the file or another process
shares.  Every mapping is charged to a :class:`MemoryLimit` shared by the machine's
address spaces (``may_expand_vm`` with ``RLIMIT_AS``), so a guest gets ENOMEM instead of
pushing the host into its OOM killer.

All kernel-side writes to guest text go through :meth:`Memory.text_poke`, which also
drops the CPU's translated blocks of the range - the model's ``text_poke`` + ``sync_core``.
"""

from __future__ import annotations

import bisect
import ctypes
import struct

from emu.engine import mmu
from kernel_model.arch.x86.mm.pgtable import (
    PAGE_NX,
    PAGE_PRESENT,
    PAGE_RW,
    PTE_PFN_MASK,
    PageTable,
    vm_get_page_prot,
)
from kernel_model.mm.mm_types import (
    MAX_MAP_COUNT,
    MMAP_BASE,
    MMAP_MIN_ADDR,
    PAGE_SIZE,
    PROT_ALL,
    PROT_EXEC,
    PROT_READ,
    PROT_WRITE,
    STACK_GUARD_GAP,
    STACK_LIMIT,
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
_libc.pread.restype = ctypes.c_ssize_t
_libc.pread.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long)

_U64 = struct.Struct("<Q")
_NO_VMAS: tuple = ()
# (lo, hi, view, base): [lo, hi) of the guest reads or writes straight through ``view``
# of the frame, at ``addr - base``
_Window = tuple[int, int, memoryview, int]
_NO_PAGE: _Window = (1, 0, memoryview(b""), 0)  # an empty window (lo > hi: never looked into)
_PROT_RW, _PROT_RWX = PROT_READ | PROT_WRITE, PROT_READ | PROT_WRITE | PROT_EXEC
FAULT_AROUND_PAGES = 16  # do_fault_around's window (fault_around_bytes = 64 KiB)


class Memory:
    """One address space (an mm) on one CPU instance (a Unicorn engine)."""

    checkpoint_keep = ("uc", "ram", "pt", "_rpage", "_wpage", "_kpage", "text_write_listeners")

    # The page tables.  None only in an address space made without RAM (a bare one some
    # unit tests build), whose page-table paths are never reached: typed as present so the
    # fault and access paths need no check.
    pt: PageTable

    def __init__(self, uc, counters, limit: MemoryLimit | None = None, ram=None):
        self.uc = uc
        self.counters = counters
        self.limit = limit if limit is not None else MemoryLimit(None)
        self.ram = ram
        self.pt = PageTable(ram) if ram is not None else None  # type: ignore[assignment]
        self.vmas: list[Vma] = []
        self._starts: list[int] = []
        self.vma_gen = 0  # bumped by every change of the VMA list
        self._by_file: tuple = (-1, {})  # (vma_gen, {file: [Vma]}): see file_vmas
        self._last: Vma | None = None  # last mapping a user access checked
        self._rpage: _Window = _NO_PAGE  # a page user reads may read straight from
        self._wpage: _Window = _NO_PAGE  # a page user writes may write straight into
        self._kpage: _Window = _NO_PAGE  # the page the last raw read read from
        self.text_write_listeners: list = []  # callables (start, end) -> None
        self.release_listeners: list = []  # callables () -> None, run as the engine closes
        if uc is not None and self.pt is not None:
            mmu.enable_paging(uc, self.pt.pgd)

    # -- lookup -------------------------------------------------------------
    def _reindex(self) -> None:
        self.vma_gen += 1  # what was looked up by address may have moved
        self._last = None
        self._rpage = self._wpage = self._kpage = _NO_PAGE
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

    @property
    def resident_pages(self) -> int:
        """Pages that have a frame (what /proc/PID/statm calls resident)."""
        return len(self.pt.ptes) if self.pt is not None else 0

    def get_unmapped_area(
        self, length: int, hint: int | None = None, low: int = MMAP_MIN_ADDR, high: int = MMAP_BASE
    ) -> int | None:
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

    # -- page tables ----------------------------------------------------------
    def _tables_changed(self) -> None:
        """A leaf entry changed: the CPU's TLB and the kernel's own page windows go
        (flush_tlb_mm_range)."""
        self._rpage = self._wpage = self._kpage = _NO_PAGE
        mmu.flush_tlb(self.uc)

    def flush_tlb_mm(self) -> None:
        """flush_tlb_mm: every translation of this address space the CPU holds goes."""
        self._tables_changed()

    def _new_frame(self, vma: Vma) -> int:
        frame = self.ram.alloc_page()
        if vma.prot & PROT_EXEC:
            self.ram.exec_frames.add(frame)
        return frame

    def _pte_flags(self, vma: Vma, exclusive: bool) -> int:
        """The leaf flags for a page of ``vma``: writable only while the frame is this
        mm's alone (a private page shared by fork or the page cache is mapped
        read-only: copy-on-write)."""
        return vm_get_page_prot(vma.prot, exclusive)

    def _populate(self, vma: Vma, vpn: int) -> int:
        """do_anonymous_page (and a file mapping past its end of file): a zeroed frame
        for page ``vpn``, plus its not yet populated neighbours within the mapping's
        part of the aligned FAULT_AROUND_PAGES window (do_fault_around; anonymous
        memory too here: one fault per 64 KiB instead of per page).  Returns the
        entry of ``vpn``."""
        pt = self.pt
        ptes = pt.ptes
        flags = self._pte_flags(vma, True)
        lo = max(vpn & ~(FAULT_AROUND_PAGES - 1), vma.start >> 12)
        hi = min((vpn | (FAULT_AROUND_PAGES - 1)) + 1, vma.end >> 12)
        out = 0
        for v in range(lo, hi):
            if v in ptes:
                continue
            pte = self._new_frame(vma) | flags
            pt.set_pte(v, pte)
            if v == vpn:
                out = pte
        return out

    def _wp_page(self, vma: Vma | None, vpn: int, pte: int) -> int:
        """do_wp_page: a write to a present read-only page of a writable mapping, or a
        FOLL_FORCE write to one of a read-only mapping (which stays read-only).  A frame
        this mm holds alone is reused; a shared one (fork, the file's page) is copied
        (wp_page_copy).  Returns the new entry."""
        ram = self.ram
        frame = pte & PTE_PFN_MASK
        if vma is not None and vma.shared and vma.prot & PROT_WRITE and frame not in ram.file_frames:
            self.pt.set_pte(vpn, pte | PAGE_RW)  # wp_page_shared: a shared mapping's page is never copied
            self._tables_changed()
            return pte | PAGE_RW
        writable = vma is not None and vma.prot & PROT_WRITE and not vma.shared
        if ram.page_count(frame) == 1 and frame not in ram.file_frames:
            new = pte | PAGE_RW if writable else pte
        else:
            copy = ram.alloc_page()
            ram.copy_page(copy, frame)
            if frame in ram.exec_frames or (vma is not None and vma.prot & PROT_EXEC):
                ram.exec_frames.add(copy)
            ram.put_page(frame)
            new = (pte & ~PTE_PFN_MASK) | copy
            if writable:
                new |= PAGE_RW
        if new != pte:
            self.pt.set_pte(vpn, new)
            self._tables_changed()
        return new

    def handle_mm_fault(self, addr: int, write: bool) -> bool:
        """The page of ``addr`` made present (and, for ``write``, writable), inside a
        mapping that allows the access: True if anything changed."""
        vma = self.find_vma(addr)
        if vma is None:
            return False
        vpn = addr >> 12
        pte = self.pt.ptes.get(vpn)
        if pte is None:
            self._populate(vma, vpn)
            self._tables_changed()
            return True
        if write and not pte & PAGE_RW and pte & PAGE_PRESENT and vma.prot & PROT_WRITE:
            return self._wp_page(vma, vpn, pte) != pte
        return False

    def _page(self, addr: int) -> int:
        """The entry of the page of ``addr`` for a kernel read (FOLL_FORCE): populated
        if absent."""
        vpn = addr >> 12
        pte = self.pt.ptes.get(vpn) if self.pt is not None else None
        if pte is None:
            vma = self.find_vma(addr) if self.uc is not None else None
            if vma is None:
                raise GuestFault(addr, "read")
            pte = self._populate(vma, vpn)
            self._tables_changed()
        return pte

    def _page_for_write(self, addr: int) -> int:
        """The entry of the page of ``addr`` for a kernel write: populated, and a frame
        shared with another mm or the file copied first (FOLL_WRITE | FOLL_FORCE)."""
        vpn = addr >> 12
        pte = self.pt.ptes.get(vpn) if self.pt is not None else None
        vma = self.find_vma(addr) if self.uc is not None else None
        if vma is None:
            raise GuestFault(addr, "write")
        if pte is None:
            pte = self._populate(vma, vpn)
            self._tables_changed()
        frame = pte & PTE_PFN_MASK
        if not pte & PAGE_RW and (self.ram.page_count(frame) > 1 or frame in self.ram.file_frames):
            pte = self._wp_page(vma, vpn, pte)
        return pte

    def _zap(self, start: int, end: int) -> None:
        """zap_pte_range: the pages of [start, end) lose their frames."""
        pt, ram = self.pt, self.ram
        if pt is None:
            return
        vpns = pt.vpns_in(start, end)
        frames = [pt.ptes[vpn] & PTE_PFN_MASK for vpn in vpns]
        for vpn in vpns:
            pt.set_pte(vpn, 0)
        ram.put_pages(frames)
        if vpns:
            self._tables_changed()

    def _fill(self, start: int, end: int, file: MappedFile, offset: int, host_fd: int | None = None) -> None:
        """Read the file's pages into fresh frames for [start, end) (filemap_fault;
        the whole range at once, the file as it is now).  Pages wholly past the end of
        the file stay unpopulated: they fault in as zeros."""
        vma: Vma = self.find_vma(start)  # type: ignore[assignment]  # [start, end) is mapped
        pt, ram = self.pt, self.ram
        n = max(0, min((end - start) >> 12, (file.size - offset + PAGE_SIZE - 1) >> 12))
        frames = ram.alloc_run(n)
        ram.file_frames.update(frames)
        if vma.prot & PROT_EXEC:
            ram.exec_frames.update(frames)
        consecutive = (
            n and frames[-1] - frames[0] == (n - 1) * PAGE_SIZE and ram.zone_of(frames[0]) is ram.zone_of(frames[-1])
        )
        if host_fd is not None and consecutive:
            host, want, off = ram.host(frames[0]), n * PAGE_SIZE, offset
            while want > 0:
                got = _libc.pread(host_fd, host, want, off)
                if got <= 0:
                    break  # EOF (or a read error): the rest stays zero
                host, want, off = host + got, want - got, off + got
        else:
            for i, frame in enumerate(frames):
                chunk = file.read(offset + i * PAGE_SIZE, PAGE_SIZE)
                ctypes.memmove(ram.host(frame), chunk, PAGE_SIZE)
        flags = self._pte_flags(vma, False)
        old = []
        ptes = pt.ptes
        for i, frame in enumerate(frames):
            vpn = (start >> 12) + i
            was = ptes.get(vpn)
            if was is not None:
                old.append(was & PTE_PFN_MASK)
            pt.set_pte(vpn, frame | flags)
        ram.put_pages(old)
        self._tables_changed()

    # -- mapping --------------------------------------------------------------
    def map(
        self,
        start: int,
        size: int,
        prot: int,
        name: str = "",
        *,
        file: MappedFile | None = None,
        pgoff: int = 0,
        data: bytes = b"",
        special: bool = False,
        mayprot: int | None = None,
    ) -> Vma:
        """Map [start, start+size) (replacing what was there, as MAP_FIXED does).

        Raises :class:`MemoryLimitExceeded` past the memory limit or vm.max_map_count;
        nothing has changed then."""
        start, end = page_down(start), page_up(start + size)
        if self.uc is None:
            raise MemoryLimitExceeded("the address space was released")
        if len(self.vmas) >= MAX_MAP_COUNT:
            raise MemoryLimitExceeded(f"more than {MAX_MAP_COUNT} mappings (vm.max_map_count)")
        overlap = self.mapped_bytes(start, end)
        self.limit.charge(end - start - overlap)  # raises before anything changes
        if overlap:
            self.unmap(start, end - start)  # uncharges the replaced bytes,
            self.limit.used += overlap  # which the new mapping now holds
        vma = Vma(
            start,
            end,
            prot,
            name,
            file,
            pgoff,
            special,
            mayprot=prot if special and mayprot is None else PROT_ALL if mayprot is None else mayprot,
        )
        self.vmas.append(vma)
        self._reindex()
        if data:
            self._raw_write(start, bytes(data[: end - start]))
            if file is not None:
                self._as_file_pages(start, end)
        return self._merge_anon(vma)

    def _as_file_pages(self, start: int, end: int) -> None:
        """The frames of [start, end), just filled with a file's bytes, are that file's
        pages (the page cache's): mapped read-only, copied on the first write."""
        pt, ram = self.pt, self.ram
        for vpn in pt.vpns_in(start, end):
            pte = pt.ptes[vpn]
            ram.file_frames.add(pte & PTE_PFN_MASK)
            if pte & PAGE_RW:
                pt.set_pte(vpn, pte & ~PAGE_RW)
        self._tables_changed()

    def map_file(
        self,
        start: int,
        size: int,
        prot: int,
        file: MappedFile,
        pgoff: int,
        host_fd: int,
        *,
        shared: bool = False,
        name: str = "",
    ) -> Vma:
        """A file mapping (mmap_region with a file): [start, start+size) shows the file
        from offset ``pgoff``.  The file's pages are read from ``host_fd`` straight into
        fresh frames (no Python copy); the part of the last page past EOF, and whole
        pages past it, read as zeros.  Private and shared read-only mappings look alike
        to the guest: a write to either is the guest's own copy (MAP_SHARED writable
        mappings are refused by the caller)."""
        vma = self.map(start, size, prot, name, file=file, pgoff=pgoff)
        vma.shared = shared
        self._fill(vma.start, vma.end, file, pgoff, host_fd)
        return vma

    def map_frames(self, start: int, prot: int, frames: list[int], name: str, *, mayprot: int) -> Vma:
        """A shared mapping of frames an owner keeps (``remap_vmalloc_range`` of a BPF ring
        buffer): page i maps ``frames[i]``, which gains a reference; writes never copy it."""
        vma = self.map(start, len(frames) * PAGE_SIZE, prot, name, mayprot=mayprot)
        vma.shared, flags = True, self._pte_flags(vma, True)
        for i, frame in enumerate(frames):
            self.ram.get_page(frame)
            self.pt.set_pte((start >> 12) + i, frame | flags)
        self._tables_changed()
        return vma

    def fill_from_file(self, start: int, end: int, file: MappedFile, offset: int) -> None:
        """Read file bytes from ``offset`` into [start, end) (a file mapping that grew or
        faults in afresh); past EOF the pages read as zeros."""
        self._zap(start, end)
        self._fill(start, end, file, offset)

    def join(self, lo: Vma, hi: Vma) -> Vma:
        """Two adjacent VMAs become ``lo`` (vma_expand after an in-place mremap)."""
        lo.end = hi.end
        self.vmas.remove(hi)
        self._reindex()
        return lo

    def copy_within(self, src: int, dst: int, n: int) -> None:
        """move_page_tables: the pages of [src, src+n) move to [dst, dst+n) with their
        frames (nothing is copied); the source range is left without pages."""
        pt = self.pt
        delta = (dst - src) >> 12
        self._zap(dst, dst + n)
        for vpn in pt.vpns_in(src, src + n):
            pte = pt.ptes[vpn]
            pt.set_pte(vpn, 0)
            pt.set_pte(vpn + delta, pte)
        self._tables_changed()

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
        return (
            lo.end == hi.start
            and lo.file is None
            and hi.file is None
            and not lo.special
            and not hi.special
            and lo.prot == hi.prot
            and lo.name == hi.name
            and lo.mayprot == hi.mayprot
            and lo.flags == hi.flags
        )

    def unmap(self, start: int, size: int) -> None:
        start, end = page_down(start), page_up(start + size)
        keep = []
        for v in self.vmas:
            if v.end <= start or v.start >= end:
                keep.append(v)
                continue
            lo, hi = max(v.start, start), min(v.end, end)
            self.limit.uncharge(hi - lo)
            if v.start < lo:
                keep.append(self._piece(v, v.start, lo, v.prot))
            if hi < v.end:
                keep.append(self._piece(v, hi, v.end, v.prot))
        self.vmas = keep
        self._reindex()
        self._zap(start, end)
        self._notify(start, end)

    @staticmethod
    def _piece(v: Vma, lo: int, hi: int, prot: int) -> Vma:
        """The part [lo, hi) of ``v`` as its own VMA (split_vma)."""
        return Vma(
            lo,
            hi,
            prot,
            v.name,
            v.file,
            v.pgoff + (lo - v.start) if v.file else 0,
            v.special,
            set(v.flags),
            v.mayprot,
            v.shared,
        )

    def protect(self, start: int, size: int, prot: int) -> bool:
        """mprotect_fixup + change_pte_range: the VMAs split and the present pages of
        the range get the new protection (a frame still shared stays read-only)."""
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
        self.vmas = new
        self._reindex()
        pt, ram = self.pt, self.ram
        vpns = pt.vpns_in(start, end)
        for vpn in vpns:
            frame = pt.ptes[vpn] & PTE_PFN_MASK
            vma: Vma = self.find_vma(vpn << 12)  # type: ignore[assignment]  # a page with a frame is mapped
            exclusive = ram.page_count(frame) == 1 and frame not in ram.file_frames and not vma.shared
            pt.set_pte(vpn, frame | self._pte_flags(vma, exclusive))
            if prot & PROT_EXEC:
                ram.exec_frames.add(frame)
        if vpns:
            self._tables_changed()
            if prot & PROT_EXEC:
                # user writes to non-executable pages go straight to the frames, which
                # the CPU's translations do not see: pages that become executable again
                # start without any
                self._drop_code(start, end)
        return True

    def may_protect(self, start: int, size: int, prot: int) -> bool:
        """mprotect_fixup's VM_MAY* check: no mapping in the range may gain a permission
        it was not created able to have ([uprobes] is exec-only, the trampoline r-x)."""
        start, end = page_down(start), page_up(start + size)
        return all(not prot & ~v.mayprot for v in self._overlapping(start, end))

    def discard(self, start: int, size: int) -> None:
        """MADV_DONTNEED on private anonymous memory: the pages read as zeros again and
        their frames are freed."""
        start, end = page_down(start), page_up(start + size)
        for v in self._overlapping(start, end):
            if v.file is None:
                self._zap(max(v.start, start), min(v.end, end))

    def copy_pages_from(self, other: "Memory", start: int, end: int) -> None:
        """dup_mmap -> copy_page_range for [start, end): the child maps the parent's
        frames, and a private writable page becomes read-only in both
        (copy-on-write: the first write of either copies it, do_wp_page); a shared
        mapping's pages stay writable in both."""
        opt, pt, ram = other.pt, self.pt, self.ram
        changed = False
        shared = [(v.start >> 12, v.end >> 12) for v in other._overlapping(start, end) if v.shared]
        for vpn in opt.vpns_in(start, end):
            pte = opt.ptes[vpn]
            ram.get_page(pte & PTE_PFN_MASK)
            if pte & PAGE_RW and not any(lo <= vpn < hi for lo, hi in shared):
                pte &= ~PAGE_RW
                opt.set_pte(vpn, pte)
                changed = True
            pt.set_pte(vpn, pte)
        if changed:
            other._tables_changed()
        self._tables_changed()

    # -- checkpoints (emu.replay.checkpoint) ---------------------------------------------
    def page_image(self) -> tuple[dict[int, int], dict[int, bytes]]:
        """``(ptes, pages)``: the leaf flags of every page with a frame
        (``{page address: flags}``) and its bytes (``{page address: bytes}``)."""
        pt = self.pt
        ptes: dict[int, int] = {}
        pages: dict[int, bytes] = {}
        if pt is None:
            return ptes, pages
        for vpn, pte in pt.ptes.items():
            va = vpn << 12
            ptes[va] = pte & ~PTE_PFN_MASK
            pages[va] = self.ram.read(pte & PTE_PFN_MASK, 0, PAGE_SIZE)
        return ptes, pages

    def restore_image(self, ptes: dict, pages: dict) -> None:
        """Put a :meth:`page_image` back: pages absent from it lose their frames, the
        others get their bytes (written only where they differ; a frame shared with
        another mm is replaced by a private one, unless a shared mapping holds it) and
        their flags.  The caller drops the CPU's translations (the checkpoint's restore
        flushes every instance)."""
        pt, ram = self.pt, self.ram
        for vpn in [v for v in pt.ptes if (v << 12) not in pages]:
            ram.put_page(pt.ptes[vpn] & PTE_PFN_MASK)
            pt.set_pte(vpn, 0)
        for va, data in pages.items():
            vpn = va >> 12
            old = pt.ptes.get(vpn)
            flags = ptes[va]
            if (
                old is not None
                and (ram.page_count(old & PTE_PFN_MASK) == 1 or getattr(self.find_vma(va), "shared", False))
                and old & PTE_PFN_MASK not in ram.file_frames
            ):
                frame = old & PTE_PFN_MASK
                if ram.read(frame, 0, PAGE_SIZE) != data:
                    ram.write(frame, 0, data)
            else:
                frame = ram.alloc_page()
                ram.write(frame, 0, data)
                if old is not None:
                    ram.put_page(old & PTE_PFN_MASK)
            if not flags & PAGE_NX:
                ram.exec_frames.add(frame)
            pt.set_pte(vpn, frame | flags)
        self._tables_changed()

    def adopt(self, uc) -> None:
        """A released address space comes back on a new, empty CPU instance (a
        checkpoint from before the exit is restored): new page tables, filled by the
        restore that follows."""
        self.uc = uc
        self.pt = PageTable(self.ram)
        self._rpage = self._wpage = self._kpage = _NO_PAGE
        mmu.enable_paging(uc, self.pt.pgd)

    @property
    def released(self) -> bool:
        """Is the address space gone (:meth:`release`)?"""
        return self.uc is None

    def release(self) -> None:
        """exit_mmap: the address space is gone (its process exited).  The CPU instance
        is closed and every frame returned; the Memory stays as an empty address space
        so late lookups find nothing."""
        uc, self.uc = self.uc, None
        for fn in self.release_listeners:
            fn()
        self.release_listeners = []
        if uc is not None:
            finalizer = getattr(uc, "_Uc__finalizer", None)
            if finalizer is not None:
                finalizer()  # uc_close now, not at garbage collection
            uc._callbacks.clear()
            uc._uch = None
        self._rpage = self._wpage = self._kpage = _NO_PAGE
        pt = self.pt
        if pt is not None:
            self.ram.put_pages([pte & PTE_PFN_MASK for pte in pt.ptes.values()])
            pt.release()
        self.limit.uncharge(self.total)
        self.vmas = []
        self._reindex()

    # -- access ---------------------------------------------------------------
    def read_byte(self, addr: int) -> int:
        """One byte, raw as :meth:`read`."""
        lo, hi, view, base = self._kpage
        if lo <= addr < hi:
            return view[addr - base]
        return self.read(addr, 1)[0]

    def read(self, addr: int, n: int) -> bytes:
        """Raw read (the kernel's FOLL_FORCE view): ignores permissions; a page not
        yet populated is, as access_remote_vm would fault it in.  The page of a read
        within one page is remembered (``_kpage``, dropped with the other windows)."""
        lo, hi, view, base = self._kpage
        if lo <= addr and addr + n <= hi and n >= 0:
            return bytes(view[addr - base : addr - base + n])
        if self.uc is None or n < 0 or addr < 0:
            raise GuestFault(addr, "read")
        ram = self.ram
        off = addr & 0xFFF
        if off + n <= PAGE_SIZE:
            view, base = ram.page_view(self._page(addr) & PTE_PFN_MASK)
            page = addr - off
            self._kpage = (page, page + PAGE_SIZE, view, page - base)
            return bytes(view[base + off : base + off + n])
        out = []
        while n > 0:
            off = addr & 0xFFF
            k = min(n, PAGE_SIZE - off)
            view, base = ram.page_view(self._page(addr) & PTE_PFN_MASK)
            out.append(bytes(view[base + off : base + off + k]))
            addr += k
            n -= k
        return out[0] if len(out) == 1 else b"".join(out)

    def write(self, addr: int, data: bytes) -> None:
        """Raw write (the kernel's FOLL_FORCE view, as exec fills a new image):
        ignores permissions; faults only where nothing is mapped."""
        self._raw_write(addr, bytes(data))

    def _raw_write(self, addr: int, data: bytes) -> None:
        if self.uc is None or addr < 0:
            raise GuestFault(addr, "write")
        self._write_pages(addr, data, self._page_for_write)

    def _write_pages(self, addr: int, data: bytes, entry_of) -> None:
        """``data`` into the frames ``entry_of(address)`` names, page by page; the CPU's
        translations of what was written into an executable page are dropped."""
        ram, pos, n = self.ram, 0, len(data)
        while pos < n:
            off = addr & 0xFFF
            k = min(n - pos, PAGE_SIZE - off)
            pte = entry_of(addr)
            view, base = ram.page_view(pte & PTE_PFN_MASK)
            view[base + off : base + off + k] = data[pos : pos + k]
            if pte & PAGE_PRESENT and not pte & PAGE_NX:
                mmu.drop_code(self.uc, addr, k)
            addr += k
            pos += k

    def expand_stack(self, addr: int, limit: int = STACK_LIMIT) -> Vma | None:
        """expand_downwards: the ``VM_GROWSDOWN`` mapping just above ``addr`` grows down
        to its page, if it stays within ``limit`` bytes (RLIMIT_STACK) and
        STACK_GUARD_GAP clear of the mapping below; None if it may not."""
        i = bisect.bisect_right(self._starts, addr)
        if i >= len(self.vmas) or addr < 0:
            return None
        v = self.vmas[i]
        if "growsdown" not in v.flags or addr >= v.start:
            return None
        new_start = page_down(addr)
        if v.end - new_start > limit:
            return None
        prev = self.vmas[i - 1] if i else None
        if prev is not None and prev.end > new_start - STACK_GUARD_GAP and prev.prot:
            return None
        try:
            self.limit.charge(v.start - new_start)
        except MemoryLimitExceeded:
            return None
        v.start = new_start
        self._reindex()
        return v

    def _check(self, addr: int, n: int, need: int, access: str) -> None:
        v = self._last
        if v is not None and v.start <= addr and addr + n <= v.end and v.prot & need:
            return  # the common case: same mapping again
        a, end = addr, addr + n
        while a < end:
            v = self.find_vma(a)
            if v is None and self.uc is not None:
                v = self.expand_stack(a)  # a signal frame below the stack
            if v is None or not (v.prot & need):
                raise GuestFault(a, access)
            a = v.end
        self._last = v if v is not None and v.start <= addr and addr + n <= v.end else None

    def read_user(self, addr: int, n: int) -> bytes:
        """copy_from_user: needs readable mappings."""
        self._check(addr, n, PROT_READ, "read")
        return self.read(addr, n)

    def write_user(self, addr: int, data: bytes) -> None:
        """copy_to_user: needs writable mappings."""
        data = bytes(data)
        self._check(addr, len(data), PROT_WRITE, "write")
        self._raw_write(addr, data)

    def _window(self, addr: int, write: bool) -> None:
        """After a checked access at ``addr``: remember its page as one where user reads
        (or writes) may go straight to the frame - a readable (writable, not
        executable, exclusive) page of the mapping last checked.  Dropped by every
        change of the VMAs or the page tables."""
        v = self._last
        if v is None or self.pt is None:
            return
        pte = self.pt.ptes.get(addr >> 12)
        if pte is None or not pte & PAGE_PRESENT:
            return
        lo = addr & ~0xFFF
        view, base = self.ram.page_view(pte & PTE_PFN_MASK)
        win = (max(lo, v.start), min(lo + PAGE_SIZE, v.end), view, lo - base)
        if v.prot & PROT_READ:
            self._rpage = win
        if write and v.prot & _PROT_RWX == _PROT_RW and pte & PAGE_RW:
            self._wpage = win

    def read_user_struct(self, st: struct.Struct, addr: int) -> tuple:
        """copy_from_user of ``st.size`` bytes unpacked with ``st``: one unpack from the
        frame when the read page window holds them, else through :meth:`read_user`."""
        n = st.size
        lo, hi, view, base = self._rpage
        if lo <= addr and addr + n <= hi:
            return st.unpack_from(view, addr - base)
        out = st.unpack(self.read_user(addr, n))
        self._window(addr, False)
        return out

    def write_user_struct(self, st: struct.Struct, addr: int, *values) -> None:
        """copy_to_user of ``st.pack(*values)``, as :meth:`write_u64`."""
        n = st.size
        lo, hi, view, base = self._wpage
        if lo <= addr and addr + n <= hi:
            st.pack_into(view, addr - base, *values)
            return
        self.write_user(addr, st.pack(*values))
        self._window(addr, True)

    def read_u64(self, addr: int) -> int:
        """get_user of 8 bytes (a stack word, a return address)."""
        lo, hi, view, base = self._rpage
        if lo <= addr and addr + 8 <= hi:
            return _U64.unpack_from(view, addr - base)[0]
        out = int.from_bytes(self.read_user(addr, 8), "little")
        self._window(addr, False)
        return out

    def write_u64(self, addr: int, value: int) -> None:
        """put_user of 8 bytes."""
        lo, hi, view, base = self._wpage
        if lo <= addr and addr + 8 <= hi:
            _U64.pack_into(view, addr - base, value & 0xFFFFFFFFFFFFFFFF)
            return
        self.write_user(addr, (value & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little"))
        self._window(addr, True)

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

    def drop_translations(self, start: int, end: int) -> None:
        """Drop the CPU's translated blocks of [start, end), page by page (only pages
        it can fetch from can have any)."""
        if self.uc is not None and self.pt is not None:
            self._drop_code(start, end)

    def _drop_code(self, start: int, end: int) -> None:
        ptes = self.pt.ptes
        for vpn in self.pt.vpns_in(start, end):
            pte = ptes[vpn]
            if pte & PAGE_PRESENT and not pte & PAGE_NX:
                lo = max(start, vpn << 12)
                mmu.drop_code(self.uc, lo, min(end, (vpn + 1) << 12) - lo)

    def text_poke(self, addr: int, data: bytes, *, count: bool = True) -> None:
        """Kernel write to text (uprobe_write_opcode / text_poke): ignores protections,
        is seen by the CPU at once (translations dropped), counted in ``text_writes``
        unless ``count`` is False (XOL slot and trampoline page fills, written in place
        as copy_to_page does).  A counted write goes into a private copy of a page that
        is the file's or shared with another process (__replace_page; an exclusive
        anonymous page is written in place, as __uprobe_write does since 6.16)."""
        data = bytes(data)
        if self.uc is None:
            raise GuestFault(addr, "write")
        if count:
            self._raw_write(addr, data)
            self.counters.text_writes += 1
        else:
            self._write_pages(addr, data, self._page)  # in place
        self._notify(addr, addr + len(data))

    def _notify(self, start: int, end: int) -> None:
        for fn in self.text_write_listeners:
            fn(start, end)

    def maps(self) -> str:
        """/proc/self/maps."""
        return "".join(v.maps_line() + "\n" for v in self.vmas)
