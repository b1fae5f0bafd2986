"""Writing tiny static x86_64 ELF executables: the inverse of :mod:`kernel_model.fs.elf`.

pyelftools cannot write ELF, and tests and hand-assembled guests (:mod:`emu.asm`) need
small files that ``objdump``, ``readelf``, ``nm`` and ``gdb`` accept, so
:func:`build_elf` lays the file out byte by byte the way ``ld`` would.  The kernel model
only ever reads ELF; this writer is tooling, so it lives on the emulator's side.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from kernel_model.errors import InputError
from kernel_model.fs.elf import (
    ELF64_EHDR,
    ELF64_PHDR,
    ELF64_SHDR,
    ELF64_SYM,
    ELF_MAGIC,
    ELFCLASS64,
    ELFDATA2LSB,
    EM_X86_64,
    EV_CURRENT,
    PAGE_SIZE,
    PF_R,
    PF_W,
    PF_X,
    PT_LOAD,
    SHN_ABS,
)

DEFAULT_TEXT_VADDR = 0x401000
"""Where callers of :func:`build_elf` put ``.text`` unless they have a reason not to
(the same address ``ld`` uses for a small static executable)."""


@dataclass(frozen=True)
class _Section:
    """A section header to emit, with its contents (``b""`` for NOBITS)."""

    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int = 0
    info: int = 0
    align: int = 1
    entsize: int = 0


_SHT_PROGBITS, _SHT_SYMTAB, _SHT_STRTAB, _SHT_NOBITS = 1, 2, 3, 8
_SHF_WRITE, _SHF_ALLOC, _SHF_EXECINSTR = 1, 2, 4
_STT_CODES = MappingProxyType({"NOTYPE": 0, "OBJECT": 1, "FUNC": 2})
_STB_CODES = MappingProxyType({"LOCAL": 0, "GLOBAL": 1, "WEAK": 2})


class _StringTable:
    """An ELF string table under construction (offset 0 is the empty string)."""

    def __init__(self) -> None:
        self.blob = bytearray(b"\0")
        self.offsets: dict[str, int] = {"": 0}

    def add(self, name: str) -> int:
        if name not in self.offsets:
            self.offsets[name] = len(self.blob)
            self.blob += name.encode() + b"\0"
        return self.offsets[name]


def _page_down(x: int) -> int:
    return x & ~(PAGE_SIZE - 1)


def _page_up(x: int) -> int:
    return _page_down(x + PAGE_SIZE - 1)


def _align_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _natural_alignment(addr: int, cap: int) -> int:
    """Largest power of two <= cap dividing addr, so sh_addr % sh_addralign == 0."""
    align = cap
    while align > 1 and addr % align:
        align //= 2
    return align


def build_elf(
    *,
    text: bytes,
    text_vaddr: int,
    entry: int,
    symbols: list[tuple],
    data: bytes = b"",
    data_vaddr: int | None = None,
    bss_size: int = 0,
) -> bytes:
    """A minimal static ``ET_EXEC`` x86_64 file, laid out the way ``ld`` does it.

    The text ``PT_LOAD`` starts at file offset 0 so the ELF and program headers are
    mapped (AT_PHDR must point at mapped memory); ``.text`` sits at ``text_vaddr``
    inside it.  A second, read-write ``PT_LOAD`` holds ``data`` then ``bss_size`` zero
    bytes, at ``data_vaddr`` (default: the page after the text).

    ``symbols`` are ``(name, vaddr, size, type)`` tuples, optionally with a fifth
    element ``bind`` ("GLOBAL" by default, "LOCAL" or "WEAK").  A symbol is attached
    to the section containing its address (or ending at it, for size-0 end labels)
    and is ``SHN_ABS`` otherwise.
    """
    has_data = bool(data or bss_size)
    headers_size = ELF64_EHDR.size + (2 if has_data else 1) * ELF64_PHDR.size
    parts = [_text_part(text, text_vaddr, headers_size)]
    if has_data:
        parts.append(_data_part(data, data_vaddr, bss_size, parts[0], text_vaddr + len(text)))
    body = bytearray(parts[-1].offset + len(parts[-1].content))  # headers are written last
    for part in parts:
        body[part.offset : part.offset + len(part.content)] = part.content
    sections = [sec for part in parts for sec in part.sections]
    return _finish_file(body, [part.phdr for part in parts], sections, symbols, entry)


@dataclass(frozen=True)
class _LoadPart:
    """One PT_LOAD being built: its header, its sections, and the bytes at ``offset``."""

    phdr: bytes
    sections: tuple[_Section, ...]
    offset: int
    content: bytes


def _text_part(text: bytes, text_vaddr: int, headers_size: int) -> _LoadPart:
    """R-X segment from file offset 0: headers, padding, then .text at text_vaddr."""
    if text_vaddr < headers_size:
        raise InputError(f"text_vaddr {text_vaddr:#x} leaves no room for the ELF headers below it")
    seg_vaddr = _page_down(text_vaddr - headers_size)
    text_off = text_vaddr - seg_vaddr
    size = text_off + len(text)
    text_section = _Section(
        ".text",
        _SHT_PROGBITS,
        _SHF_ALLOC | _SHF_EXECINSTR,
        text_vaddr,
        text_off,
        len(text),
        align=_natural_alignment(text_vaddr, 16),
    )
    phdr = ELF64_PHDR.pack(PT_LOAD, PF_R | PF_X, 0, seg_vaddr, seg_vaddr, size, size, PAGE_SIZE)
    return _LoadPart(phdr, (text_section,), text_off, text)


def _data_part(data: bytes, data_vaddr: int | None, bss_size: int, text: _LoadPart, text_end: int) -> _LoadPart:
    """RW- segment on its own pages, with p_offset congruent to p_vaddr mod the page size."""
    data_vaddr = _page_up(text_end) if data_vaddr is None else data_vaddr
    if _page_down(data_vaddr) < _page_up(text_end):
        raise InputError(f"data_vaddr {data_vaddr:#x} shares a page with the text segment")
    data_off = _page_up(text.offset + len(text.content)) + data_vaddr % PAGE_SIZE
    phdr = ELF64_PHDR.pack(
        PT_LOAD, PF_R | PF_W, data_off, data_vaddr, data_vaddr, len(data), len(data) + bss_size, PAGE_SIZE
    )
    sections = []
    if data:
        sections.append(
            _Section(
                ".data",
                _SHT_PROGBITS,
                _SHF_ALLOC | _SHF_WRITE,
                data_vaddr,
                data_off,
                len(data),
                align=_natural_alignment(data_vaddr, 8),
            )
        )
    if bss_size:
        bss_vaddr = data_vaddr + len(data)
        sections.append(
            _Section(
                ".bss",
                _SHT_NOBITS,
                _SHF_ALLOC | _SHF_WRITE,
                bss_vaddr,
                data_off + len(data),
                bss_size,
                align=_natural_alignment(bss_vaddr, 8),
            )
        )
    return _LoadPart(phdr, tuple(sections), data_off, data)


def _finish_file(
    body: bytearray, phdrs: list[bytes], sections: list[_Section], symbols: list[tuple], entry: int
) -> bytes:
    """Append .symtab/.strtab/.shstrtab and the section header table, then write the
    ELF and program headers at the front."""
    symtab, strtab, first_global = _symbol_table(symbols, sections)
    symtab_index = len(sections) + 1  # +1 for the null section
    symtab_off = _align_up(len(body), 8)
    body += b"\0" * (symtab_off - len(body)) + symtab
    strtab_off = len(body)
    body += strtab
    sections = sections + [
        _Section(
            ".symtab",
            _SHT_SYMTAB,
            0,
            0,
            symtab_off,
            len(symtab),
            link=symtab_index + 1,
            info=first_global,
            align=8,
            entsize=ELF64_SYM.size,
        ),
        _Section(".strtab", _SHT_STRTAB, 0, 0, strtab_off, len(strtab)),
    ]
    shstrtab = _StringTable()
    for sec in sections:
        shstrtab.add(sec.name)
    shstrtab.add(".shstrtab")
    sections.append(_Section(".shstrtab", _SHT_STRTAB, 0, 0, len(body), len(shstrtab.blob)))
    body += shstrtab.blob
    shoff = _align_up(len(body), 8)
    body += b"\0" * (shoff - len(body))
    body += bytes(ELF64_SHDR.size)  # the null section
    for sec in sections:
        body += ELF64_SHDR.pack(
            shstrtab.offsets[sec.name],
            sec.type,
            sec.flags,
            sec.addr,
            sec.offset,
            sec.size,
            sec.link,
            sec.info,
            sec.align,
            sec.entsize,
        )
    ident = ELF_MAGIC + bytes([ELFCLASS64, ELFDATA2LSB, EV_CURRENT, 0]) + bytes(8)
    ehdr = ELF64_EHDR.pack(
        ident,
        2,
        EM_X86_64,
        EV_CURRENT,
        entry,
        ELF64_EHDR.size,
        shoff,
        0,
        ELF64_EHDR.size,
        ELF64_PHDR.size,
        len(phdrs),
        ELF64_SHDR.size,
        len(sections) + 1,
        len(sections),
    )
    headers = ehdr + b"".join(phdrs)
    body[: len(headers)] = headers
    return bytes(body)


def _symbol_table(symbols: list[tuple], sections: list[_Section]) -> tuple[bytes, bytes, int]:
    """(.symtab bytes, .strtab bytes, index of the first non-LOCAL symbol).

    ELF requires every LOCAL symbol before every other one, and sh_info to point at
    the first non-local; tools (readelf, gdb) complain or misbehave otherwise.
    """
    normalized = [_normalize_symbol(entry) for entry in symbols]
    ordered = [s for s in normalized if s[4] == "LOCAL"] + [s for s in normalized if s[4] != "LOCAL"]
    strtab = _StringTable()
    table = bytearray(ELF64_SYM.size)  # the null symbol
    for name, value, size, typ, bind in ordered:
        info = (_STB_CODES[bind] << 4) | _STT_CODES[typ]
        table += ELF64_SYM.pack(strtab.add(name), info, 0, _section_index(value, size, sections), value, size)
    first_global = 1 + sum(1 for s in ordered if s[4] == "LOCAL")
    return bytes(table), bytes(strtab.blob), first_global


def _normalize_symbol(entry: tuple) -> tuple[str, int, int, str, str]:
    """Validate one caller tuple; a typo in a type name should fail loudly here."""
    if len(entry) not in (4, 5):
        raise InputError(f"symbol {entry!r}: expected (name, vaddr, size, type[, bind])")
    name, value, size, typ = entry[:4]
    bind = entry[4] if len(entry) == 5 else "GLOBAL"
    if typ not in _STT_CODES:
        raise InputError(f"symbol {name!r}: type must be one of {sorted(_STT_CODES)}, not {typ!r}")
    if bind not in _STB_CODES:
        raise InputError(f"symbol {name!r}: bind must be one of {sorted(_STB_CODES)}, not {bind!r}")
    if not name or "\0" in name:
        raise InputError(f"symbol name {name!r} is empty or contains NUL")
    return name, value, size, typ, bind


def _section_index(value: int, size: int, sections: list[_Section]) -> int:
    """1-based index of the section holding the symbol, else SHN_ABS."""
    for i, sec in enumerate(sections, start=1):
        if sec.addr <= value < sec.addr + sec.size or (size == 0 and value == sec.addr + sec.size):
            return i
    return SHN_ABS
