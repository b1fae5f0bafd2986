"""Address-space types without an engine behind them: page and protection constants,
the guest fault, the mapped file (the inode uprobes key on) and the mapping (VMA),
and the memory limit.  The kernel model uses these; :mod:`emu.engine.memory` puts them on
Unicorn (the kernel's include/linux/mm_types.h next to mm/)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernel_model.fs.elf import ElfImage

PAGE_SIZE = 0x1000
PAGE_MASK = ~(PAGE_SIZE - 1)
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
TASK_SIZE = 0x7FFFFFFFF000  # 4-level paging user address space limit
MMAP_BASE = 0x7FFFF7FFF000  # top-down mmap area starts below the stack gap
MMAP_MIN_ADDR = 0x10000  # vm.mmap_min_addr (CONFIG_DEFAULT_MMAP_MIN_ADDR)
MAX_MAP_COUNT = 65530  # vm.max_map_count (DEFAULT_MAX_MAP_COUNT)
DEFAULT_MAX_MEMORY = 4 << 30  # bytes of guest mappings over all address spaces
PROT_ALL = 7
STACK_LIMIT = 8 << 20  # RLIMIT_STACK's default (_STK_LIM)
STACK_GUARD_GAP = 256 << 12  # stack_guard_gap: kept free below a growing stack


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


class MemoryLimitExceeded(Exception):
    """A mapping would take the guest past its memory limit (the kernel's ENOMEM)."""


class MemoryLimit:
    """Bytes of guest mappings, counted over every address space of one machine.

    The kernel's ``may_expand_vm`` against ``RLIMIT_AS``: every mapping counts, whether
    touched or not, so the limit bounds the host memory a guest can ever make resident.
    """

    def __init__(self, limit: int | None = DEFAULT_MAX_MEMORY):
        self.limit = limit
        self.used = 0

    def charge(self, nbytes: int) -> None:
        if self.limit is not None and nbytes > 0 and self.used + nbytes > self.limit:
            raise MemoryLimitExceeded(
                f"{nbytes:#x} more bytes would exceed the memory limit of {self.limit:#x} ({self.used:#x} in use)"
            )
        self.used += nbytes

    def uncharge(self, nbytes: int) -> None:
        self.used = max(0, self.used - nbytes)


@dataclass(eq=False)
class MappedFile:
    """A file the process maps: its path, bytes and (for ELF) the parsed image.

    The object itself is the file identity (the kernel's inode) that uprobes key on:
    the page cache hands out one object per (``dev``, ``ino``), so two paths to one file
    are one file.  ``dev``/``ino`` are the host's st_dev/st_ino (0 for an image that
    never was a file).  A file mapped with mmap() is not held in memory: ``reader``
    (offset, n) -> bytes reads it (``size`` bytes long) from the host.
    """

    checkpoint_by_reference = True  # immutable file contents: never rolled back

    path: str
    data: bytes = b""
    elf: ElfImage | None = None
    dev: int = 0
    ino: int = 0
    reader: Callable[[int, int], bytes] | None = field(default=None, repr=False)
    file_size: int | None = None
    d_path: str = ""  # the path /proc/PID/maps prints (d_path: symlinks resolved)

    @property
    def size(self) -> int:
        return len(self.data) if self.file_size is None else self.file_size

    def read(self, offset: int, n: int) -> bytes:
        """Bytes from the file (page cache), zero-padded past EOF as copy_insn does."""
        if self.reader is not None:
            chunk = self.reader(offset, n) if 0 <= offset < self.size else b""
        else:
            chunk = self.data[offset : offset + n] if offset < len(self.data) else b""
        return chunk + b"\0" * (n - len(chunk))

    def dev_string(self) -> str:
        """``MAJ:MIN`` in hex as show_map_vma prints the inode's device."""
        major = ((self.dev >> 8) & 0xFFF) | ((self.dev >> 32) & ~0xFFF)
        minor = (self.dev & 0xFF) | ((self.dev >> 12) & ~0xFF)
        return f"{major:02x}:{minor:02x}"

    def __repr__(self):
        return f"MappedFile({self.path!r})"


@dataclass(eq=False)
class Vma:
    start: int
    end: int
    prot: int
    name: str = ""  # a file mapping: the path it was mapped through (d_path)
    file: MappedFile | None = None
    pgoff: int = 0  # file offset of ``start`` (bytes, page aligned)
    special: bool = False  # [uprobes], [uprobes-trampoline], [vdso]-like
    flags: set = field(default_factory=set)
    mayprot: int = PROT_ALL  # VM_MAYREAD/MAYWRITE/MAYEXEC: what mprotect may grant
    shared: bool = False  # VM_SHARED (a MAP_SHARED file mapping): 's' in maps

    @property
    def size(self) -> int:
        return self.end - self.start

    def perms(self) -> str:
        return (
            ("r" if self.prot & PROT_READ else "-")
            + ("w" if self.prot & PROT_WRITE else "-")
            + ("x" if self.prot & PROT_EXEC else "-")
            + ("s" if self.shared else "p")
        )

    def offset_of(self, vaddr: int) -> int:
        """File offset of ``vaddr`` (the kernel's vaddr_to_offset)."""
        return vaddr - self.start + self.pgoff

    def vaddr_of(self, offset: int) -> int:
        """Virtual address of file ``offset`` in this mapping (offset_to_vaddr)."""
        return self.start + offset - self.pgoff

    def maps_line(self) -> str:
        """One /proc/PID/maps line, padded as show_map_vma() does (name at column 73)."""
        f = self.file
        path = self.name or (f.d_path or f.path) if f is not None else self.name
        dev, ino = (f.dev_string(), f.ino) if f is not None else ("00:00", 0)
        prefix = f"{self.start:08x}-{self.end:08x} {self.perms()} {self.pgoff:08x} {dev} {ino} "
        return prefix.ljust(72) + " " + path if path else prefix
