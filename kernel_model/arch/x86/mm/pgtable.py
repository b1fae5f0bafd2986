"""x86-64 4-level page tables (arch/x86/include/asm/pgtable_types.h, mm/pgtable.c).

Each address space (mm) has its own tables in guest RAM, written here and walked by
the CPU: PGD -> PUD -> PMD -> PTE, 512 eight-byte entries per 4 KiB table.  The upper
levels are always present, writable and user-accessible (``PAGE_TABLE``): what a page
allows is in its leaf entry only, as Linux sets them.

``ptes`` mirrors every leaf entry by virtual page number, so the kernel's own lookups
(``follow_page``, ``get_user_pages``) and range walks (``zap_pte_range``,
``change_pte_range``, ``copy_pte_range``) need no walk through guest RAM.

A ``PROT_NONE`` page keeps its frame: its entry is ``PAGE_PROTNONE`` without
``PAGE_PRESENT`` (the CPU faults on it; the kernel knows the frame), as x86 does.
"""

from __future__ import annotations

import struct

from kernel_model.mm.mm_types import PROT_EXEC, PROT_READ, PROT_WRITE

PAGE_PRESENT = 0x001
PAGE_RW = 0x002
PAGE_USER = 0x004
PAGE_ACCESSED = 0x020
PAGE_DIRTY = 0x040
PAGE_PROTNONE = 0x100  # _PAGE_GLOBAL's bit: only meaningful without PAGE_PRESENT
PAGE_NX = 1 << 63
PTE_PFN_MASK = 0x000F_FFFF_FFFF_F000
PAGE_TABLE = PAGE_PRESENT | PAGE_RW | PAGE_USER | PAGE_ACCESSED | PAGE_DIRTY

# x86 page fault error code bits (arch/x86/include/asm/trap_pf.h)
X86_PF_PROT, X86_PF_WRITE, X86_PF_USER, X86_PF_INSTR = 0x1, 0x2, 0x4, 0x10

_U64 = struct.Struct("<Q")


def vm_get_page_prot(prot: int, writable: bool = True) -> int:
    """The leaf flags of a user page with ``prot`` (x86's protection_map): readable
    pages are present and user-accessible, writable ones RW (``writable`` False maps a
    private writable page read-only: copy-on-write), non-executable ones NX (x86 cannot
    express write-only or exec-only: both read too).  PROT_NONE: ``PAGE_PROTNONE``."""
    if not prot & (PROT_READ | PROT_WRITE | PROT_EXEC):
        return PAGE_PROTNONE | PAGE_ACCESSED
    flags = PAGE_PRESENT | PAGE_USER | PAGE_ACCESSED
    if prot & PROT_WRITE and writable:
        flags |= PAGE_RW | PAGE_DIRTY
    if not prot & PROT_EXEC:
        flags |= PAGE_NX
    return flags


class PageTable:
    """One mm's page tables (``mm->pgd``) in guest RAM, with the leaf mirror."""

    checkpoint_by_reference = True  # put back page by page by Memory.restore_image

    def __init__(self, ram):
        self.ram = ram
        ram.users += 1
        self.pgd = ram.alloc_page()
        self.ptes: dict[int, int] = {}  # virtual page number -> leaf entry
        self._tables: list[int] = [self.pgd]  # every table frame (freed with the mm)
        self._leaf: dict[int, tuple] = {}  # va >> 21 -> (zone view, offset of its PTE table)
        self.rmap: dict[int, int] = {}  # frame -> the virtual page that maps it (rmap)
        self.watchers: dict[int, list] = {}  # virtual page -> callables (vpn) run when its entry changes

    def _pte_table(self, va: int) -> tuple:
        """The PTE table that maps ``va`` (pte_alloc: missing levels are allocated)."""
        key = va >> 21
        found = self._leaf.get(key)
        if found is not None:
            return found
        ram = self.ram
        table = self.pgd
        for shift in (39, 30, 21):
            view, off = ram.page_view(table)
            at = off + ((va >> shift) & 511) * 8
            entry = _U64.unpack_from(view, at)[0]
            if not entry & PAGE_PRESENT:
                new = ram.alloc_page()
                self._tables.append(new)
                entry = new | PAGE_TABLE
                _U64.pack_into(view, at, entry)
            table = entry & PTE_PFN_MASK
        found = self._leaf[key] = ram.page_view(table)
        return found

    def set_pte(self, vpn: int, pte: int) -> None:
        """set_pte_at: the leaf entry of virtual page ``vpn`` (0 clears it)."""
        view, off = self._pte_table(vpn << 12)
        _U64.pack_into(view, off + (vpn & 511) * 8, pte)
        old = self.ptes.pop(vpn, 0)
        if old and self.rmap.get(old & PTE_PFN_MASK) == vpn:
            del self.rmap[old & PTE_PFN_MASK]
        if pte:
            self.ptes[vpn] = pte
            self.rmap[pte & PTE_PFN_MASK] = vpn
        if self.watchers and vpn in self.watchers and old != pte:
            for fn in list(self.watchers[vpn]):
                fn(vpn)

    def watch(self, vpn: int, fn) -> None:
        """Call ``fn(vpn)`` whenever the entry of ``vpn`` changes (a front end's memory
        hook follows the frame behind a virtual page)."""
        self.watchers.setdefault(vpn, []).append(fn)

    def unwatch(self, vpn: int, fn) -> None:
        fns = self.watchers.get(vpn)
        if fns and fn in fns:
            fns.remove(fn)
            if not fns:
                del self.watchers[vpn]

    def vpns_in(self, start: int, end: int) -> list[int]:
        """The virtual pages of [start, end) that have an entry, in address order."""
        lo, hi = start >> 12, (end + 0xFFF) >> 12
        ptes = self.ptes
        if hi - lo <= len(ptes):
            return [v for v in range(lo, hi) if v in ptes]
        return sorted(v for v in ptes if lo <= v < hi)

    def release(self) -> None:
        """free_pgtables at exit_mmap: the table frames go back (the caller frees the pages)."""
        self.ram.put_pages(self._tables)
        if self._tables:
            self.ram.users -= 1
            self.ram.release_zones()
        self._tables = []
        self._leaf = {}
        self.ptes = {}
        self.rmap = {}
