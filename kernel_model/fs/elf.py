"""Reading static x86_64 Linux ELF executables.

The emulator runs what the kernel's ``binfmt_elf`` runs: ``ET_EXEC`` and ``ET_DYN``
executables, static or with a ``PT_INTERP`` (recorded in ``ElfImage.interp``; the
loader maps that interpreter, which does the dynamic linking).  Everything else is
refused here, up front, with one readable line (an :class:`ElfError`) instead of a
confusing fault later inside the emulator.  The checks mirror the ones the kernel makes
(magic, class, machine, program header size, ``p_filesz <= p_memsz``, mmap-able
offsets, a NUL-terminated ``PT_INTERP``), plus one the emulator needs: a file with
``DT_NEEDED`` but no interpreter (a shared library) would crash on its first call.

Program headers are decoded by hand with :mod:`struct` because they decide whether the
file runs at all and must be bounds-checked exactly.  Sections (symbols, USDT notes) are
read with pyelftools; every exception it or :mod:`struct` can raise on a malformed file
is turned into an :class:`ElfError`, so bad input never surfaces as a traceback.

Writing tiny ELF files (for hand-assembled guests) is :mod:`emu.elf_writer`'s job.

All addresses in an :class:`ElfImage` are link-time addresses.  For static-pie files
(``etype == "DYN"``) the loader adds its chosen load base; this module never does.
"""

from __future__ import annotations

import bisect
import contextlib
import io
import os
import stat
import struct
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterator, NamedTuple

from kernel_model.errors import ElfError, InputError, SymbolError

PF_X, PF_W, PF_R = 1, 2, 4

PAGE_SIZE = 0x1000

# The lowest 47-bit canonical user address space, as on x86_64 Linux without LA57.
_USER_ADDRESS_LIMIT = 1 << 47

ELF_MAGIC = b"\x7fELF"
_ELFCLASS32, ELFCLASS64 = 1, 2
ELFDATA2LSB, _ELFDATA2MSB = 1, 2
EM_X86_64 = 62
EV_CURRENT = 1
_ET_NAMES = MappingProxyType({0: "ET_NONE", 1: "ET_REL", 2: "ET_EXEC", 3: "ET_DYN", 4: "ET_CORE"})
PT_LOAD, _PT_DYNAMIC, _PT_INTERP, _PT_TLS = 1, 2, 3, 7
_DT_NULL, _DT_NEEDED, _DT_STRTAB = 0, 1, 5
SHN_ABS = 0xFFF1
_NT_STAPSDT = 3

# Elf64_Ehdr, Elf64_Phdr, Elf64_Shdr, Elf64_Sym, Elf64_Dyn -- little-endian only,
# since x86_64 is little-endian and a big-endian x86_64 file cannot exist.
ELF64_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
ELF64_PHDR = struct.Struct("<IIQQQQQQ")
ELF64_SHDR = struct.Struct("<IIQQQQIIQQ")
ELF64_SYM = struct.Struct("<IBBHQQ")
_DYN = struct.Struct("<qQ")
_NOTE_HEADER = struct.Struct("<III")
_SHT_SYMTAB, _SHT_NOTE, _SHT_NOBITS, _SHT_DYNSYM = 2, 7, 8, 11
_SHN_XINDEX = 0xFFFF

# Types that name code or data at an address; FILE/SECTION/TLS symbols do not.
_ADDRESS_SYMBOL_TYPES = frozenset({"FUNC", "OBJECT", "NOTYPE", "GNU_IFUNC"})
# Types symbolize() may report as "the function containing this pc".
_CODE_SYMBOL_TYPES = frozenset({"FUNC", "GNU_IFUNC"})
_BIND_PREFERENCE = MappingProxyType({"GLOBAL": 0, "WEAK": 1, "GNU_UNIQUE": 2, "LOCAL": 3})

# Everything struct, or pyelftools underneath the symbol-version reader, raises for a
# malformed file (pyelftools' own exceptions are recognised by their module: importing
# pyelftools to name them would load it at every start).
_PARSE_ERRORS = (
    struct.error,
    ValueError,
    IndexError,
    KeyError,
    TypeError,
    ZeroDivisionError,
    OverflowError,
    UnicodeDecodeError,
    AssertionError,
    EOFError,
)


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class Segment:
    """One ``PT_LOAD`` (or the ``PT_TLS`` template): what the loader maps, and where."""

    vaddr: int
    memsz: int
    filesz: int
    offset: int
    flags: int
    align: int
    data: bytes = field(repr=False)  # the filesz bytes from the file

    @property
    def end(self) -> int:
        """One past the last mapped byte (``vaddr + memsz``)."""
        return self.vaddr + self.memsz

    @property
    def perms(self) -> str:
        """``"r-x"``-style permissions, for messages and tests."""
        return "".join(ch if self.flags & bit else "-" for ch, bit in (("r", PF_R), ("w", PF_W), ("x", PF_X)))


@dataclass(frozen=True)
class Symbol:
    """One named address from ``.symtab`` or ``.dynsym``.

    ``type`` and ``bind`` are the ELF names without the ``STT_``/``STB_`` prefix
    ("FUNC", "OBJECT", "NOTYPE", "GNU_IFUNC"; "GLOBAL", "LOCAL", "WEAK").
    """

    name: str
    value: int
    size: int
    type: str
    bind: str


@dataclass(frozen=True)
class UsdtNote:
    """One ``.note.stapsdt`` entry: a USDT probe site compiled into the guest.

    ``pc`` and ``semaphore`` are already adjusted by the ``.stapsdt.base`` difference
    (non-zero only in prelinked files), so they are link-time addresses like every
    other address here; ``base`` is the raw value recorded in the note.
    """

    provider: str
    name: str
    pc: int
    base: int
    semaphore: int
    args: str


@dataclass
class ElfImage:
    """A parsed, validated executable: everything the loader and probes need.

    Addresses are link-time ones (add the load bias for ``DYN``).  ``symbolize`` uses
    an index of ``all_symbols`` built at its first call (most images are never asked:
    a run without probes or traces maps dozens of files), so treat the symbol lists as
    read-only.
    """

    checkpoint_by_reference = True  # immutable once parsed

    path: str
    data: bytes = field(repr=False)
    etype: str  # "EXEC" | "DYN" (DYN means static-pie)
    entry: int
    phoff: int
    phentsize: int
    phnum: int
    segments: list[Segment]
    symbols: dict[str, Symbol] = field(repr=False)
    all_symbols: list[Symbol] = field(repr=False)
    usdt: list[UsdtNote]
    tls: Segment | None
    interp: str | None = None  # PT_INTERP: the program interpreter the loader maps

    def vaddr_to_offset(self, vaddr: int) -> int:
        """File offset of the byte at link-time ``vaddr``.

        Uprobes are keyed by (file, offset), so every probe given as an address goes
        through here.  Only the file-backed part of a ``PT_LOAD`` has an offset; an
        address in the zero-filled tail (``.bss``) has none and is an error.
        """
        for seg in self.segments:
            if seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
                return seg.offset + (vaddr - seg.vaddr)
        for seg in self.segments:
            if seg.vaddr <= vaddr < seg.end:
                raise SymbolError(
                    f"address {vaddr:#x} in {self.path} is in the zero-filled part of a"
                    f" segment ({seg.vaddr + seg.filesz:#x}-{seg.end:#x}), which has no"
                    " file offset"
                )
        raise SymbolError(f"address {vaddr:#x} is not inside any loadable segment of {self.path}")

    def offset_to_vaddr(self, offset: int) -> int:
        """Link-time address at which file ``offset`` is mapped (inverse of the above)."""
        for seg in self.segments:
            if seg.offset <= offset < seg.offset + seg.filesz:
                return seg.vaddr + (offset - seg.offset)
        raise SymbolError(f"file offset {offset:#x} of {self.path} is not mapped by any loadable segment")

    def symbolize(self, vaddr: int) -> tuple[str, int] | None:
        """``(function, offset)`` for a link-time code address, or ``None``.

        Candidates are FUNC/GNU_IFUNC symbols and NOTYPE labels inside executable
        segments.  A sized one wins when it contains ``vaddr``; otherwise, if the
        nearest candidate before ``vaddr`` has size 0 (hand-written assembly), it is
        used, as long as it lies in the same segment.
        """
        index = self.__dict__.get("_code_index")
        if index is None:
            index = self.__dict__["_code_index"] = _CodeSymbolIndex.build(self.all_symbols, self.segments)
        return index.lookup(vaddr)

    def resolve(self, name: str) -> Symbol:
        """The symbol called ``name``; a miss suggests close spellings.

        ``NAME@@VERSION`` is the default (exported) version of a .dynsym symbol,
        ``NAME@VERSION`` any symbol of that version (a hidden, older one included), as
        readelf prints them; a plain ``NAME`` found only in .dynsym is its default
        version (what the dynamic linker binds a new program to)."""
        if "@" in name:
            return self._resolve_versioned(name)
        default = self._versions().get((name, None))
        if default is not None and name not in self._symtab_names():
            return default
        sym = self.symbols.get(name)
        if sym is not None:
            return sym
        message = f"unknown symbol {name!r} in {self.path}"
        if not self.symbols:
            raise SymbolError(f"{message} (it has no symbol table; was it stripped?)")
        import difflib  # a lookup that failed: worth no import at start-up

        close = difflib.get_close_matches(name, list(self.symbols), n=3, cutoff=0.6)
        if close:
            message += "; did you mean " + ", ".join(repr(c) for c in close) + "?"
        raise SymbolError(message)

    def _resolve_versioned(self, name: str) -> Symbol:
        base, _, version = name.partition("@")
        default = version.startswith("@")
        version = version.lstrip("@")
        table = self._versions()
        sym = (
            table.get((base, version))
            if default
            else (table.get((base, version)) or table.get((base, "hidden:" + version)))
        )
        if sym is not None:
            return sym
        have = sorted({v.removeprefix("hidden:") for (n, v) in table if n == base and v})
        if have:
            raise SymbolError(f"{self.path} has no {name!r}: {base} has version(s) " + ", ".join(have))
        raise SymbolError(
            f"unknown versioned symbol {name!r} in {self.path}" + ("" if table else " (it has no symbol versions)")
        )

    def _versions(self) -> dict:
        """(name, version) -> Symbol for .dynsym, parsed on first use: the default
        version keyed by its name (and by None), a hidden one by ``hidden:NAME``."""
        cached = self.__dict__.get("_version_table")
        if cached is None:
            with _converted_errors(self.path, "symbol versions"):
                cached = _read_versions(self.data)
            self.__dict__["_version_table"] = cached
        return cached

    def _symtab_names(self) -> frozenset:
        cached = self.__dict__.get("_symtab_name_set")
        if cached is None:
            cached = frozenset()
            if self._versions():
                from elftools.elf.elffile import ELFFile  # only versioned lookups read with it
                from elftools.elf.sections import SymbolTableSection

                with _converted_errors(self.path, "symbol table"):
                    elf = ELFFile(io.BytesIO(self.data))
                    tab = elf.get_section_by_name(".symtab")
                    if isinstance(tab, SymbolTableSection):  # (a .symtab of another type has none)
                        cached = frozenset(s.name for s in tab.iter_symbols() if s.name)
            self.__dict__["_symtab_name_set"] = cached
        return cached


_VERSYM_HIDDEN = 0x8000


def _read_versions(data: bytes) -> dict:
    """.dynsym symbols with their .gnu.version / .gnu.version_d names (read with
    pyelftools, imported here: only a versioned symbol's lookup needs it)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerDefSection, GNUVerSymSection
    from elftools.elf.sections import SymbolTableSection

    elf = ELFFile(io.BytesIO(data))
    versym = elf.get_section_by_name(".gnu.version")
    verdef = elf.get_section_by_name(".gnu.version_d")
    dynsym = elf.get_section_by_name(".dynsym")
    if not (
        isinstance(versym, GNUVerSymSection)
        and isinstance(verdef, GNUVerDefSection)
        and isinstance(dynsym, SymbolTableSection)
    ):
        return {}  # (missing, or of another section type: no versions)
    names = {}
    for vd, auxes in verdef.iter_versions():
        aux = next(iter(auxes), None)
        if aux is not None:
            names[vd.entry["vd_ndx"]] = aux.name
    table: dict = {}
    for i, raw in enumerate(dynsym.iter_symbols()):
        if not raw.name or not raw["st_value"] or raw["st_shndx"] == "SHN_UNDEF":
            continue
        ndx = versym.get_symbol(i).entry["ndx"]
        if not isinstance(ndx, int):
            continue
        version = names.get(ndx & ~_VERSYM_HIDDEN)
        if version is None or ndx & ~_VERSYM_HIDDEN == 1:  # 1: the file's own name
            continue
        sym = Symbol(
            name=raw.name,
            value=raw["st_value"],
            size=raw["st_size"],
            type=_symbol_type(raw["st_info"]["type"]),
            bind=_symbol_bind(raw["st_info"]["bind"]),
        )
        if ndx & _VERSYM_HIDDEN:
            table.setdefault((raw.name, "hidden:" + version), sym)
        else:
            table[(raw.name, version)] = sym
            table[(raw.name, None)] = sym
    return table


@dataclass(frozen=True)
class _CodeSymbolIndex:
    """Function symbols sorted by address, so symbolize() is a binary search.

    ``max_end[i]`` is the largest ``value + size`` among entries ``0..i``: when it is
    not past ``vaddr`` no earlier sized symbol can contain ``vaddr``, which keeps the
    backwards scan for overlapping symbols short.
    """

    starts: tuple[int, ...]
    entries: tuple[Symbol, ...]
    max_end: tuple[int, ...]
    segments: tuple[Segment, ...]

    @classmethod
    def build(cls, symbols: list[Symbol], segments: list[Segment]) -> _CodeSymbolIndex:
        """Keep FUNC-like symbols, plus NOTYPE labels in executable segments."""
        code_segments = [s for s in segments if s.flags & PF_X]

        def is_code(sym: Symbol) -> bool:
            if sym.type in _CODE_SYMBOL_TYPES:
                return True
            return sym.type == "NOTYPE" and any(s.vaddr <= sym.value < s.end for s in code_segments)

        chosen = sorted((s for s in symbols if is_code(s)), key=lambda s: (s.value, _name_preference(s)))
        max_end, running = [], 0
        for sym in chosen:
            running = max(running, sym.value + sym.size)
            max_end.append(running)
        return cls(
            starts=tuple(s.value for s in chosen),
            entries=tuple(chosen),
            max_end=tuple(max_end),
            segments=tuple(segments),
        )

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        """See :meth:`ElfImage.symbolize`."""
        last = bisect.bisect_right(self.starts, vaddr) - 1
        if last < 0:
            return None
        containing = self._sized_container(vaddr, last)
        if containing is not None:
            return containing.name, vaddr - containing.value
        aliases = self._aliases_at(self.starts[last], last)
        if all(s.size == 0 for s in aliases) and self._same_segment(aliases[0].value, vaddr):
            return aliases[0].name, vaddr - aliases[0].value
        return None

    def _sized_container(self, vaddr: int, last: int) -> Symbol | None:
        """The innermost (highest-address, then preferred-name) sized symbol holding vaddr."""
        i = last
        while i >= 0 and self.max_end[i] > vaddr:
            sym = self.entries[i]
            if sym.value <= vaddr < sym.value + sym.size:
                aliases = self._aliases_at(sym.value, i)
                return next(s for s in aliases if vaddr < s.value + s.size)
            i -= 1
        return None

    def _aliases_at(self, value: int, last: int) -> tuple[Symbol, ...]:
        """Entries at ``value`` up to index ``last``, best name first (the sort order)."""
        return self.entries[bisect.bisect_left(self.starts, value) : last + 1]

    def _same_segment(self, a: int, b: int) -> bool:
        return any(s.vaddr <= a < s.end and s.vaddr <= b < s.end for s in self.segments)


def _name_preference(sym: Symbol) -> tuple:
    """Sort key among aliases: GLOBAL before WEAK before LOCAL, FUNC before NOTYPE,
    public names before ``__internal`` ones -- what a person would call the code."""
    return (
        _BIND_PREFERENCE.get(sym.bind, 9),
        0 if sym.type in _CODE_SYMBOL_TYPES else 1,
        len(sym.name) - len(sym.name.lstrip("_")),
        sym.name,
    )


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class _Header:
    """The ``Elf64_Ehdr`` fields this module uses."""

    etype: int
    machine: int
    entry: int
    phoff: int
    shoff: int
    phentsize: int
    phnum: int
    shentsize: int
    shnum: int
    shstrndx: int


@dataclass(frozen=True)
class _ProgramHeader:
    """One raw ``Elf64_Phdr``."""

    index: int
    type: int
    flags: int
    offset: int
    vaddr: int
    paddr: int
    filesz: int
    memsz: int
    align: int


MAX_ELF_FILE_SIZE = 512 << 20
"""Largest program file read (a static executable is far smaller; the bytes are kept)."""


def image_of(file) -> ElfImage | None:
    """The parsed ELF of a mapped file (:class:`kernel_model.mm.mm_types.MappedFile`), read through
    its page-cache reader on first need and kept on it; None for a file that is no
    usable ELF (a locale archive, ld.so.cache), remembered so it is read once."""
    if file.elf is not None or getattr(file, "not_elf", False) or file.reader is None:
        return file.elf
    if file.size > MAX_ELF_FILE_SIZE or file.read(0, 4) != ELF_MAGIC:
        file.not_elf = True
        return None
    try:
        file.elf = parse_elf(file.read(0, file.size), file.path, shared_object=True)
    except InputError:
        file.not_elf = True
    return file.elf


def link_vaddr(file, vma, addr: int) -> int:
    """The link-time address of ``addr`` in ``vma`` (a mapping of ``file``): through the
    file offset, so a library mapped anywhere (and in several processes) symbolizes."""
    bias = getattr(file, "load_bias", None)
    if bias is not None or file.elf is None:
        return addr - (bias or 0)
    try:
        return file.elf.offset_to_vaddr(vma.offset_of(addr))
    except SymbolError:
        return addr - vma.start + vma.pgoff


def load_elf_file(path: str) -> ElfImage:
    """Read and parse ``path``; an unreadable path is an :class:`InputError`.

    Only a regular file is read (execve's -EACCES for anything else: /dev/zero would be
    read forever, a FIFO would block), and only up to :data:`MAX_ELF_FILE_SIZE`."""
    try:
        with open(path, "rb", buffering=0, opener=_open_nonblocking) as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"{path}: not a regular file ({_file_kind(st.st_mode)})")
            if st.st_size > MAX_ELF_FILE_SIZE:
                raise InputError(f"{path}: too large ({st.st_size} bytes; the limit is {MAX_ELF_FILE_SIZE})")
            data = f.read(MAX_ELF_FILE_SIZE + 1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InputError(f"{path}: cannot read: {reason.lower()}") from None
    if len(data) > MAX_ELF_FILE_SIZE:
        raise InputError(f"{path}: too large (more than {MAX_ELF_FILE_SIZE} bytes)")
    return parse_elf(data, path)


def _open_nonblocking(path: str, flags: int) -> int:
    """Open without blocking (a FIFO with no writer would block open() itself)."""
    fd = os.open(path, flags | os.O_NONBLOCK)
    os.set_blocking(fd, True)
    return fd


def _file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def parse_elf(data: bytes, path: str, *, shared_object: bool = False) -> ElfImage:
    """Validate ``data`` as a runnable x86_64 executable and describe it.

    ``shared_object``: the file is a library some process maps (probes name its
    symbols), not a program to start, so DT_NEEDED entries are its business."""
    data = bytes(data)
    header = _parse_header(data, path)
    phdrs = _parse_program_headers(data, header, path)
    interp = _interpreter(data, phdrs, path)
    segments = [_segment(data, ph, path) for ph in phdrs if ph.type == PT_LOAD]
    if not segments:
        raise ElfError(f"{path}: no loadable segments (no PT_LOAD program header)")
    if interp is None and not shared_object:
        _reject_needed_libraries(data, phdrs, segments, path)
    tls = next((_segment(data, ph, path) for ph in phdrs if ph.type == _PT_TLS), None)
    all_symbols, usdt = _parse_sections(data, header, path)
    return ElfImage(
        path=path,
        data=data,
        etype=_ET_NAMES[header.etype][3:],
        entry=header.entry,
        phoff=header.phoff,
        phentsize=header.phentsize,
        phnum=header.phnum,
        segments=segments,
        symbols=_symbol_dict(all_symbols),
        all_symbols=all_symbols,
        usdt=usdt,
        tls=tls,
        interp=interp,
    )


def _parse_header(data: bytes, path: str) -> _Header:
    """Check identification, class, byte order, machine and type, in the order a
    person would want to hear about them (a 32-bit ARM file is "32-bit" first)."""
    if not data:
        raise ElfError(f"{path}: not an ELF file (empty file)")
    if not data.startswith(ELF_MAGIC):
        raise ElfError(f"{path}: not an ELF file")
    if len(data) < 6:
        raise ElfError(f"{path}: truncated ELF (file is {len(data)} bytes, too short for the identification)")
    if data[4] == _ELFCLASS32:
        raise ElfError(f"{path}: 32-bit ELF is not supported")
    if data[4] != ELFCLASS64:
        raise ElfError(f"{path}: invalid ELF class {data[4]}")
    if data[5] == _ELFDATA2MSB:
        raise ElfError(f"{path}: big-endian ELF is not supported")
    if data[5] != ELFDATA2LSB:
        raise ElfError(f"{path}: invalid ELF data encoding {data[5]}")
    if len(data) < ELF64_EHDR.size:
        raise ElfError(f"{path}: truncated ELF (file is {len(data)} bytes, the ELF header needs {ELF64_EHDR.size})")
    fields = ELF64_EHDR.unpack_from(data)
    (_, etype, machine, _, entry, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, shstrndx) = fields
    if machine != EM_X86_64:
        raise ElfError(f"{path}: not an x86_64 ELF (machine {_machine_name(machine)})")
    _check_type(etype, path)
    return _Header(etype, machine, entry, phoff, shoff, phentsize, phnum, shentsize, shnum, shstrndx)


def _machine_name(machine: int) -> str:
    """``EM_AARCH64`` for 183, or the number for machines pyelftools does not know."""
    from elftools.elf.enums import ENUM_E_MACHINE  # an error message's name: not worth a start-up import

    for name, value in ENUM_E_MACHINE.items():
        if value == machine and name.startswith("EM_"):
            return name
    return f"{machine:#x}"


def _check_type(etype: int, path: str) -> None:
    if etype in (2, 3):
        return
    if etype == 1:
        raise ElfError(f"{path}: relocatable object files cannot be run (ET_REL)")
    if etype == 4:
        raise ElfError(f"{path}: core dumps cannot be run (ET_CORE)")
    raise ElfError(f"{path}: not an executable ELF (type {_ET_NAMES.get(etype, hex(etype))})")


def _parse_program_headers(data: bytes, header: _Header, path: str) -> list[_ProgramHeader]:
    """Decode the program header table with the kernel's sanity limits."""
    if header.phnum == 0:
        raise ElfError(f"{path}: no program headers, so there is nothing to load")
    if header.phentsize != ELF64_PHDR.size:
        raise ElfError(f"{path}: bad program header entry size {header.phentsize} (expected {ELF64_PHDR.size})")
    table_size = header.phnum * ELF64_PHDR.size
    if table_size > 65536:  # the kernel's limit in elf_read_phdrs()
        raise ElfError(f"{path}: too many program headers ({header.phnum})")
    if header.phoff + table_size > len(data):
        raise ElfError(f"{path}: truncated ELF (program header table past end of file)")
    return [
        _ProgramHeader(i, *ELF64_PHDR.unpack_from(data, header.phoff + i * ELF64_PHDR.size))
        for i in range(header.phnum)
    ]


def _interpreter(data: bytes, phdrs: list[_ProgramHeader], path: str) -> str | None:
    """The PT_INTERP path, checked as load_elf_binary checks it: inside the file, at
    least two bytes, NUL-terminated (-ENOEXEC otherwise)."""
    for ph in phdrs:
        if ph.type != _PT_INTERP:
            continue
        if ph.filesz > 4096 or ph.filesz < 2 or ph.offset + ph.filesz > len(data):
            raise ElfError(f"{path}: bad PT_INTERP (size {ph.filesz:#x} at offset {ph.offset:#x})")
        raw = data[ph.offset : ph.offset + ph.filesz]
        if raw[-1] != 0:
            raise ElfError(f"{path}: bad PT_INTERP (the path is not NUL-terminated)")
        return raw.split(b"\0", 1)[0].decode("utf-8", errors="surrogateescape")
    return None


def _segment(data: bytes, ph: _ProgramHeader, path: str) -> Segment:
    """A checked PT_LOAD/PT_TLS: the loader may then map it without further doubt."""
    kind = "PT_LOAD" if ph.type == PT_LOAD else "PT_TLS"
    where = f"{kind} #{ph.index}"
    if ph.offset + ph.filesz > len(data):
        raise ElfError(f"{path}: truncated ELF ({where} data past end of file)")
    if ph.filesz > ph.memsz:
        raise ElfError(f"{path}: {where} has p_filesz {ph.filesz:#x} larger than p_memsz {ph.memsz:#x}")
    if ph.vaddr + ph.memsz > _USER_ADDRESS_LIMIT:
        raise ElfError(f"{path}: {where} ({ph.vaddr:#x}-{ph.vaddr + ph.memsz:#x}) lies outside the user address space")
    if ph.type == PT_LOAD and (ph.vaddr - ph.offset) % PAGE_SIZE:
        raise ElfError(
            f"{path}: {where} cannot be mapped: p_offset {ph.offset:#x} and p_vaddr"
            f" {ph.vaddr:#x} differ modulo the page size"
        )
    return Segment(
        vaddr=ph.vaddr,
        memsz=ph.memsz,
        filesz=ph.filesz,
        offset=ph.offset,
        flags=ph.flags,
        align=ph.align,
        data=data[ph.offset : ph.offset + ph.filesz],
    )


def _reject_needed_libraries(data: bytes, phdrs: list[_ProgramHeader], segments: list[Segment], path: str) -> None:
    """A static-pie has a PT_DYNAMIC too (for its self-relocation) but no DT_NEEDED;
    a shared library or an interpreter-less dynamic program has DT_NEEDED entries and
    would crash on its first library call."""
    dyn = next((ph for ph in phdrs if ph.type == _PT_DYNAMIC), None)
    if dyn is None:
        return
    if dyn.offset + dyn.filesz > len(data):
        raise ElfError(f"{path}: truncated ELF (PT_DYNAMIC past end of file)")
    needed, strtab = [], None
    for tag, value in _DYN.iter_unpack(data[dyn.offset : dyn.offset + dyn.filesz - dyn.filesz % _DYN.size]):
        if tag == _DT_NULL:
            break
        if tag == _DT_NEEDED:
            needed.append(value)
        elif tag == _DT_STRTAB:
            strtab = value
    if needed:
        names = ", ".join(_dynamic_string(data, segments, strtab, off) for off in needed)
        raise ElfError(
            f"{path}: needs shared libraries (DT_NEEDED {names}) but has no PT_INTERP "
            "to load them (a shared library, not a program)"
        )


def _dynamic_string(data: bytes, segments: list[Segment], strtab: int | None, offset: int) -> str:
    """A ``.dynstr`` string, found through DT_STRTAB's address; "?" when unreadable."""
    for seg in segments:
        if strtab is not None and seg.vaddr <= strtab + offset < seg.vaddr + seg.filesz:
            start = seg.offset + strtab + offset - seg.vaddr
            end = data.find(b"\0", start)
            return data[start:end].decode("utf-8", errors="replace") if end > start else "?"
    return "?"


# --------------------------------------------------------------------------- sections


@contextlib.contextmanager
def _converted_errors(path: str, what: str) -> Iterator[None]:
    """Turn anything pyelftools raises on a malformed file into one ElfError line."""
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, _PARSE_ERRORS) and not type(exc).__module__.startswith("elftools."):
            raise
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ElfError(f"{path}: malformed ELF ({what}: {detail})") from exc


def _parse_sections(data: bytes, header: _Header, path: str) -> tuple[list[Symbol], list[UsdtNote]]:
    """Symbols and USDT notes; a file without section headers simply has neither."""
    if header.shoff == 0:
        return [], []
    _check_section_table(data, header, path)
    with _converted_errors(path, "section headers"):
        sections = _section_headers(data, header, path)
    with _converted_errors(path, "symbol table"):
        symbols = _read_symbols(data, sections, path)
    with _converted_errors(path, ".note.stapsdt"):
        usdt = _read_usdt(data, sections, path)
    return symbols, usdt


class _Section(NamedTuple):
    """The ``Elf64_Shdr`` fields this module uses, with the section's name."""

    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int


def _section_headers(data: bytes, header: _Header, path: str) -> list[_Section]:
    """The section header table, named from the section-name string table.  Past
    0xff00 sections the count is section 0's ``sh_size``, and an ``e_shstrndx`` of
    SHN_XINDEX means the index is section 0's ``sh_link`` (the gABI's extended
    numbering, as readelf and pyelftools read it)."""
    first = ELF64_SHDR.unpack_from(data, header.shoff)
    shnum = header.shnum or first[5]
    shstrndx = first[6] if header.shstrndx == _SHN_XINDEX else header.shstrndx
    if header.shoff + shnum * ELF64_SHDR.size > len(data):
        raise ElfError(f"{path}: truncated ELF (section header table past end of file)")
    raw = [ELF64_SHDR.unpack_from(data, header.shoff + i * ELF64_SHDR.size) for i in range(shnum)]
    if shstrndx >= shnum:
        raise ElfError(
            f"{path}: malformed ELF (section headers: section name table index {shstrndx} of {shnum} sections)"
        )
    names_at = raw[shstrndx][4] if shstrndx else None
    sections = []
    for sh_name, sh_type, _flags, sh_addr, sh_offset, sh_size, sh_link, _info, _align, sh_entsize in raw:
        name = ""
        if names_at is not None:
            at = names_at + sh_name
            end = data.find(b"\0", at)
            if at > len(data) or end < 0:
                raise ElfError(f"{path}: malformed ELF (section headers: a section name past end of file)")
            name = data[at:end].decode("utf-8", errors="replace")
        sections.append(_Section(name, sh_type, sh_addr, sh_offset, sh_size, sh_link, sh_entsize))
    return sections


def _check_section_table(data: bytes, header: _Header, path: str) -> None:
    if header.shentsize != ELF64_SHDR.size:
        raise ElfError(f"{path}: bad section header entry size {header.shentsize} (expected {ELF64_SHDR.size})")
    if header.shoff + max(header.shnum, 1) * ELF64_SHDR.size > len(data):
        raise ElfError(f"{path}: truncated ELF (section header table past end of file)")


def _check_section_in_file(data: bytes, section: _Section, path: str) -> None:
    if section.type != _SHT_NOBITS and section.offset + section.size > len(data):
        name = section.name if section.name.isprintable() else ""
        raise ElfError(f"{path}: truncated ELF (section {name or '?'} past end of file)")


def _read_symbols(data: bytes, sections: list[_Section], path: str) -> list[Symbol]:
    """Named address symbols from .symtab first, then .dynsym (so the full table wins
    ties), in table order."""
    tables = [s for s in sections if s.type == _SHT_SYMTAB]
    tables += [s for s in sections if s.type == _SHT_DYNSYM]
    symbols: list[Symbol] = []
    for table in tables:
        if table.entsize != ELF64_SYM.size:
            raise ElfError(f"{path}: bad symbol table entry size {table.entsize} in {table.name}")
        _check_section_in_file(data, table, path)
        if not 0 < table.link < len(sections):
            raise ElfError(f"{path}: symbol table {table.name} has no string table")
        _check_section_in_file(data, sections[table.link], path)
        symbols.extend(_symbols_of(data, table, sections[table.link]))
    return symbols


def _symbols_of(data: bytes, table: _Section, strtab: _Section) -> Iterator[Symbol]:
    """The table's address symbols, decoded from the file's bytes with one
    ``struct.iter_unpack`` (Elf64_Sym) instead of a pyelftools object per entry (a
    large program's ``.symtab`` has tens of thousands, and every exec and library
    mapping reads them).  Names, types and binds as pyelftools gives them: the
    string at ``st_name`` read up to its NUL (empty when none), decoded as UTF-8 with
    replacement; unnamed enum values as their numbers."""
    start, count = table.offset, table.size // ELF64_SYM.size
    names = strtab.offset
    for st_name, st_info, _other, st_shndx, value, size in ELF64_SYM.iter_unpack(
        data[start : start + count * ELF64_SYM.size]
    ):
        if not value or not st_shndx:  # no address, or SHN_UNDEF
            continue
        kind = _SYMBOL_TYPES.get(st_info & 0xF)
        if kind is None:
            continue
        at = names + st_name
        end = data.find(b"\0", at)
        if end <= at:
            continue  # empty, or no NUL (pyelftools: None)
        yield Symbol(
            name=data[at:end].decode("utf-8", errors="replace"),
            value=value,
            size=size,
            type=kind,
            bind=_SYMBOL_BINDS.get(st_info >> 4) or str(st_info >> 4),
        )


def _symbol_type(name) -> str:
    """pyelftools calls STT_GNU_IFUNC (10) "STT_LOOS"; use the name readelf uses."""
    name = str(name)
    return "GNU_IFUNC" if name == "STT_LOOS" else name.removeprefix("STT_")


def _symbol_bind(name) -> str:
    """Likewise STB_GNU_UNIQUE (10) is "STB_LOOS" to pyelftools."""
    name = str(name)
    return "GNU_UNIQUE" if name == "STB_LOOS" else name.removeprefix("STB_")


# st_info's type (low nibble) and bind (high nibble) values, named as readelf names them
# (pyelftools calls type 10 and bind 10 "LOOS"); only the address types are kept.  Other
# binds are named by pyelftools' names, numbers it has none for by their number.
_SYMBOL_TYPES = MappingProxyType({0: "NOTYPE", 1: "OBJECT", 2: "FUNC", 10: "GNU_IFUNC"})
_SYMBOL_BINDS = MappingProxyType(
    {0: "LOCAL", 1: "GLOBAL", 2: "WEAK", 3: "NUM", 10: "GNU_UNIQUE", 12: "HIOS", 13: "LOPROC", 15: "HIPROC"}
)


def _symbol_dict(symbols: list[Symbol]) -> dict[str, Symbol]:
    """One symbol per name: GLOBAL over WEAK over LOCAL, else the first seen."""
    by_name: dict[str, Symbol] = {}
    for sym in symbols:
        old = by_name.get(sym.name)
        if old is None or _BIND_PREFERENCE.get(sym.bind, 9) < _BIND_PREFERENCE.get(old.bind, 9):
            by_name[sym.name] = sym
    return by_name


def _read_usdt(data: bytes, sections: list[_Section], path: str) -> list[UsdtNote]:
    """Every stapsdt note in every ``.note.stapsdt`` section."""
    base_section = next((s for s in sections if s.name == ".stapsdt.base"), None)
    actual_base = base_section.addr if base_section is not None else None
    notes: list[UsdtNote] = []
    for section in sections:
        if section.name == ".note.stapsdt" and section.type == _SHT_NOTE:
            _check_section_in_file(data, section, path)
            blob = data[section.offset : section.offset + section.size]
            notes.extend(_parse_stapsdt_notes(blob, actual_base, path))
    return notes


def _align4(n: int) -> int:
    return (n + 3) & ~3


def _parse_stapsdt_notes(blob: bytes, actual_base: int | None, path: str) -> Iterator[UsdtNote]:
    """Walk the note records (4-byte aligned name and desc, as GNU as emits them)."""
    pos = 0
    while pos + _NOTE_HEADER.size <= len(blob):
        namesz, descsz, ntype = _NOTE_HEADER.unpack_from(blob, pos)
        name_at = pos + _NOTE_HEADER.size
        desc_at = name_at + _align4(namesz)
        if desc_at + descsz > len(blob):
            raise ElfError(f"{path}: malformed .note.stapsdt (note at offset {pos:#x} runs past the section)")
        if ntype == _NT_STAPSDT and blob[name_at : name_at + namesz].rstrip(b"\0") == b"stapsdt":
            yield _stapsdt_note(blob[desc_at : desc_at + descsz], actual_base, path)
        pos = desc_at + _align4(descsz)


def _stapsdt_note(desc: bytes, actual_base: int | None, path: str) -> UsdtNote:
    """Decode pc, base, semaphore and the three NUL-terminated strings."""
    if len(desc) < 24:
        raise ElfError(f"{path}: malformed .note.stapsdt (descriptor of {len(desc)} bytes)")
    pc, base, semaphore = struct.unpack_from("<QQQ", desc)
    strings = desc[24:].split(b"\0")
    if len(strings) < 3:
        raise ElfError(f"{path}: malformed .note.stapsdt (missing provider or probe name)")
    provider, name, args = (s.decode("utf-8", errors="replace") for s in strings[:3])
    if actual_base is not None and base:
        # Prelinking moves .stapsdt.base but not the numbers inside the note.
        pc += actual_base - base
        if semaphore:
            semaphore += actual_base - base
    return UsdtNote(provider=provider, name=name, pc=pc, base=base, semaphore=semaphore, args=args)
