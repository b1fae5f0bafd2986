"""The symbol tables are decoded from the file's bytes (one ``struct.iter_unpack`` per
table, see ``kernel_model.fs.elf._symbols_of``): every symbol must be exactly what
pyelftools decodes - the same names, values, sizes, types and binds, the same entries
left out (undefined, unnamed, address-less, FILE/SECTION/TLS) - on real libraries and
programs and on symbol entries made to be odd."""

from __future__ import annotations

import io
import os
import struct
import sys

import pytest
from elftools.elf.elffile import ELFFile

from emu.elf_writer import build_elf
from kernel_model.fs.elf import ELF64_SHDR, ELF64_SYM, Symbol, parse_elf

ADDRESS_TYPES = {"FUNC", "OBJECT", "NOTYPE", "GNU_IFUNC"}


def pyelftools_symbols(data: bytes) -> list[Symbol]:
    """The reference: .symtab then .dynsym through pyelftools' own Symbol objects."""
    elf = ELFFile(io.BytesIO(data))
    sections = list(elf.iter_sections())
    tables = [s for s in sections if s["sh_type"] == "SHT_SYMTAB"]
    tables += [s for s in sections if s["sh_type"] == "SHT_DYNSYM"]
    out = []
    for table in tables:
        for raw in table.iter_symbols():
            kind = str(raw["st_info"]["type"])
            kind = "GNU_IFUNC" if kind == "STT_LOOS" else kind.removeprefix("STT_")
            bind = str(raw["st_info"]["bind"])
            bind = "GNU_UNIQUE" if bind == "STB_LOOS" else bind.removeprefix("STB_")
            if raw.name and raw["st_value"] and kind in ADDRESS_TYPES and raw["st_shndx"] != "SHN_UNDEF":
                out.append(Symbol(raw.name, raw["st_value"], raw["st_size"], kind, bind))
    return out


def host_files() -> list[str]:
    libc = [os.path.join(d, "libc.so.6") for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64")]
    return [next(p for p in libc if os.path.exists(p)), os.path.realpath(sys.executable), "/bin/ls"]


@pytest.mark.parametrize("path", host_files())
def test_host_file_symbols_equal_pyelftools(path):
    data = open(path, "rb").read()
    got = parse_elf(data, path, shared_object=True).all_symbols
    want = pyelftools_symbols(data)
    assert len(got) == len(want), f"{path}: {len(got)} symbols decoded, pyelftools has {len(want)}"
    assert got == want, f"{path}: first difference at {next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)}"


def _with_symbols(entries: list[tuple[bytes, int, int, int, int]]) -> bytes:
    """A small program whose .symtab entries are replaced by ``entries``:
    (name bytes, st_info, st_shndx, value, size); names go into its string table,
    which is grown in place at the file's end."""
    data = bytearray(
        build_elf(text=b"\x90\xc3", text_vaddr=0x401000, entry=0x401000, symbols=[("_start", 0x401000, 2, "FUNC")])
    )
    elf = ELFFile(io.BytesIO(bytes(data)))
    symtab = elf.get_section_by_name(".symtab")
    assert symtab is not None, "build_elf writes a .symtab"
    strtab_index = symtab["sh_link"]
    strtab_off = len(data)
    names = bytearray(b"\0")
    table = bytearray(ELF64_SYM.size)  # entry 0: the null symbol
    for name, info, shndx, value, size in entries:
        table += ELF64_SYM.pack(len(names), info, 0, shndx, value, size)
        names += name + b"\0"
    data += names
    table_off = len(data)
    data += table
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    for index, (off, size) in (
        (strtab_index, (strtab_off, len(names))),
        (elf.get_section_index(".symtab"), (table_off, len(table))),
    ):
        at = shoff + index * ELF64_SHDR.size
        fields = list(ELF64_SHDR.unpack_from(data, at))
        fields[4], fields[5] = off, size  # sh_offset, sh_size
        ELF64_SHDR.pack_into(data, at, *fields)
    return bytes(data)


ODD_ENTRIES = [
    (b"plain_func", 0x12, 1, 0x401000, 4),  # GLOBAL FUNC
    (b"an_ifunc", 0x1A, 1, 0x401004, 0),  # GLOBAL GNU_IFUNC
    (b"unique_obj", 0xA1, 1, 0x402000, 8),  # GNU_UNIQUE OBJECT
    (b"weak_label", 0x20, 1, 0x401008, 0),  # WEAK NOTYPE
    (b"undefined", 0x12, 0, 0x401010, 0),  # SHN_UNDEF: left out
    (b"no_address", 0x12, 1, 0, 0),  # value 0: left out
    (b"a_file.c", 0x04, 0xFFF1, 0x1, 0),  # FILE: left out
    (b"tls_var", 0x16, 1, 0x10, 8),  # TLS: left out
    (b"", 0x12, 1, 0x401020, 0),  # unnamed: left out
    (b"caf\xe9_latin1", 0x12, 1, 0x401030, 2),  # not UTF-8: replacement character
    (b"hi_bind", 0xD2, 1, 0x401040, 0),  # bind 13 (LOPROC)
    (b"abs_sym", 0x11, 0xFFF1, 0x1234, 0),  # SHN_ABS OBJECT: kept
]


def test_odd_symbol_entries_decode_as_pyelftools_does():
    data = _with_symbols(ODD_ENTRIES)
    got = parse_elf(data, "odd").all_symbols
    want = pyelftools_symbols(data)
    assert got == want
    names = {s.name for s in got}
    assert names == {"plain_func", "an_ifunc", "unique_obj", "weak_label", "caf\ufffd_latin1", "hi_bind", "abs_sym"}, (
        f"kept: {sorted(names)}"
    )
    assert {s.name: (s.type, s.bind) for s in got}["unique_obj"] == ("OBJECT", "GNU_UNIQUE")
    assert {s.name: s.bind for s in got}["hi_bind"] == "LOPROC"
