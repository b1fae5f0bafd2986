"""The process address space: named mappings over Unicorn memory, and text patching.

A mapping (VMA) records what the kernel's ``vm_area_struct`` would: start, end,
permissions, a name as /proc/PID/maps shows it, and for file-backed mappings the file and
the file offset of ``start`` (``vm_pgoff``).  uprobes are keyed by (file, offset), so the
mapping is what turns a probe into an address: ``vaddr = start + offset - pgoff``.

All kernel-side writes to guest text go through :meth:`Memory.text_poke`, which also
drops Unicorn's translated blocks for the range (Unicorn does not notice ``mem_write``
to code it already translated) - the model's ``text_poke`` + ``sync_core``.
"""

from __future__ import annotations

import bisect
import ctypes
from dataclasses import dataclass, field

from unicorn import UC_PROT_EXEC, UC_PROT_READ, UC_PROT_WRITE, UcError
from unicorn.unicorn_py3.unicorn import uclib

PAGE_SIZE = 0x1000
PAGE_MASK = ~(PAGE_SIZE - 1)
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
TASK_SIZE = 0x7FFFFFFFF000          # 4-level paging user address space limit
MMAP_BASE = 0x7FFFF7FFF000          # top-down mmap area starts below the stack gap
MMAP_MIN_ADDR = 0x10000


def page_down(x: int) -> int:
    return x & PAGE_MASK


def page_up(x: int) -> int:
    return (x + PAGE_SIZE - 1) & PAGE_MASK


class GuestFault(Exception):
    """A guest memory access the kernel could not satisfy (-EFAULT / SIGSEGV)."""

    def __init__(self, addr: int, access: str = "read"):
        self.addr = addr
        self.access = access
        super().__init__(f"{access} fault at {addr:#x}")


@dataclass(eq=False)
class MappedFile:
    """A file the process maps: its path, bytes and (for ELF) the parsed image.

    The object itself is the file identity (the kernel's inode) that uprobes key on.
    """

    path: str
    data: bytes
    elf: object = None

    @property
    def size(self) -> int:
        return len(self.data)

    def read(self, offset: int, n: int) -> bytes:
        """Bytes from the file (page cache), zero-padded past EOF as copy_insn does."""
        chunk = self.data[offset:offset + n] if offset < len(self.data) else b""
        return chunk + b"\0" * (n - len(chunk))

    def __repr__(self):
        return f"MappedFile({self.path!r})"


@dataclass(eq=False)
class Vma:
    start: int
    end: int
    prot: int
    name: str = ""
    file: MappedFile | None = None
    pgoff: int = 0                # file offset of ``start`` (bytes, page aligned)
    special: bool = False         # [uprobes], [uprobes-trampoline], [vdso]-like
    flags: set = field(default_factory=set)

    @property
    def size(self) -> int:
        return self.end - self.start

    def perms(self) -> str:
        return ("r" if self.prot & PROT_READ else "-") + \
               ("w" if self.prot & PROT_WRITE else "-") + \
               ("x" if self.prot & PROT_EXEC else "-") + "p"

    def offset_of(self, vaddr: int) -> int:
        """File offset of ``vaddr`` (the kernel's vaddr_to_offset)."""
        return vaddr - self.start + self.pgoff

    def vaddr_of(self, offset: int) -> int:
        """Virtual address of file ``offset`` in this mapping (offset_to_vaddr)."""
        return self.start + offset - self.pgoff

    def maps_line(self) -> str:
        """One /proc/PID/maps line, padded as show_map_vma() does (name at column 73)."""
        path = self.file.path if self.file is not None else self.name
        prefix = f"{self.start:08x}-{self.end:08x} {self.perms()} {self.pgoff:08x} 00:00 0 "
        return prefix.ljust(72) + " " + path if path else prefix


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

    def __init__(self, uc, counters):
        self.uc = uc
        self.counters = counters
        self.vmas: list[Vma] = []
        self._starts: list[int] = []
        self._last: Vma | None = None               # last mapping a user access checked
        self.text_write_listeners: list = []   # callables (start, end) -> None

    # -- lookup -------------------------------------------------------------
    def _reindex(self) -> None:
        self._last = None
        self.vmas.sort(key=lambda v: v.start)
        self._starts = [v.start for v in self.vmas]

    def find_vma(self, addr: int) -> Vma | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0:
            v = self.vmas[i]
            if v.start <= addr < v.end:
                return v
        return None

    def vmas_for_file(self, file: MappedFile) -> list[Vma]:
        return [v for v in self.vmas if v.file is file]

    def is_free(self, start: int, end: int) -> bool:
        return not any(v.start < end and start < v.end for v in self.vmas)

    def get_unmapped_area(self, length: int, hint: int | None = None,
                          low: int = MMAP_MIN_ADDR, high: int = MMAP_BASE) -> int | None:
        """The kernel's top-down search: the hint if free, else the highest free gap
        below ``high`` (and above ``low``)."""
        length = page_up(length)
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
            special: bool = False) -> Vma:
        start, end = page_down(start), page_up(start + size)
        if not self.is_free(start, end):
            self.unmap(start, end - start)
        self.uc.mem_map(start, end - start, _uc_prot(prot))
        if data:
            self.uc.mem_write(start, bytes(data[:end - start]))
        vma = Vma(start, end, prot, name, file, pgoff, special)
        self.vmas.append(vma)
        self._reindex()
        return self._merge_anon(vma)

    def _merge_anon(self, vma: Vma) -> Vma:
        """Adjacent anonymous mappings with the same protection and name are one VMA,
        as vma_merge() makes them (a growing [heap] stays one line in maps)."""
        if vma.file is not None or vma.special:
            return vma
        i = self.vmas.index(vma)
        if i > 0:
            prev = self.vmas[i - 1]
            if prev.end == vma.start and prev.file is None and not prev.special and \
                    prev.prot == vma.prot and prev.name == vma.name:
                prev.end = vma.end
                del self.vmas[i]
                self._reindex()
                return prev
        return vma

    def unmap(self, start: int, size: int) -> None:
        start, end = page_down(start), page_up(start + size)
        keep = []
        for v in self.vmas:
            if v.end <= start or v.start >= end:
                keep.append(v)
                continue
            lo, hi = max(v.start, start), min(v.end, end)
            self.uc.mem_unmap(lo, hi - lo)
            if v.start < lo:
                keep.append(Vma(v.start, lo, v.prot, v.name, v.file, v.pgoff, v.special, set(v.flags)))
            if hi < v.end:
                keep.append(Vma(hi, v.end, v.prot, v.name, v.file, v.pgoff + (hi - v.start) if v.file else 0,
                                v.special, set(v.flags)))
        self.vmas = keep
        self._reindex()
        self._notify(start, end)

    def protect(self, start: int, size: int, prot: int) -> bool:
        start, end = page_down(start), page_up(start + size)
        covered = sum(min(v.end, end) - max(v.start, start)
                      for v in self.vmas if v.start < end and start < v.end)
        if covered != end - start:
            return False
        new = []
        for v in self.vmas:
            if v.end <= start or v.start >= end:
                new.append(v)
                continue
            lo, hi = max(v.start, start), min(v.end, end)
            if v.start < lo:
                new.append(Vma(v.start, lo, v.prot, v.name, v.file, v.pgoff, v.special, set(v.flags)))
            new.append(Vma(lo, hi, prot, v.name, v.file, v.pgoff + (lo - v.start) if v.file else 0,
                           v.special, set(v.flags)))
            if hi < v.end:
                new.append(Vma(hi, v.end, v.prot, v.name, v.file, v.pgoff + (hi - v.start) if v.file else 0,
                               v.special, set(v.flags)))
        self.uc.mem_protect(start, end - start, _uc_prot(prot))
        self.vmas = new
        self._reindex()
        return True

    # -- access ---------------------------------------------------------------
    def read(self, addr: int, n: int) -> bytes:
        """Raw read (the kernel's FOLL_FORCE view): ignores permissions."""
        buf = ctypes.create_string_buffer(n)
        if uclib.uc_mem_read(self.uc._uch, addr, buf, n):
            raise GuestFault(addr, "read")
        return buf.raw

    def _raw_write(self, addr: int, data: bytes) -> None:
        if uclib.uc_mem_write(self.uc._uch, addr, data, len(data)):
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
        """copy_to_user: needs writable mappings."""
        self._check(addr, len(data), PROT_WRITE, "write")
        self._raw_write(addr, bytes(data))

    def read_u64(self, addr: int) -> int:
        return int.from_bytes(self.read_user(addr, 8), "little")

    def write_u64(self, addr: int, value: int) -> None:
        self.write_user(addr, (value & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little"))

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
        try:
            self.uc.mem_write(addr, data)
        except UcError:
            raise GuestFault(addr, "write") from None
        self.uc.ctl_remove_cache(addr, addr + len(data))
        if count:
            self.counters.text_writes += 1
        self._notify(addr, addr + len(data))

    def _notify(self, start: int, end: int) -> None:
        for fn in self.text_write_listeners:
            fn(start, end)

    def maps(self) -> str:
        """/proc/self/maps."""
        return "".join(v.maps_line() + "\n" for v in self.vmas)
