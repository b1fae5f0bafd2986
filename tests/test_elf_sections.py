"""The section header table is read from the file's bytes (``struct``), not through
pyelftools, so starting a program does not load pyelftools: every section must be what
pyelftools reads - name, type, address, offset, size, link, entry size - on real
programs and libraries, with the gABI's extended numbering, and a bad name-table index
is one ElfError line."""

from __future__ import annotations

import io
import struct
import sys

import pytest
from elftools.elf.elffile import ELFFile

from kernel_model.errors import ElfError
from kernel_model.fs import elf as elf_module
from kernel_model.fs.elf import ELF64_EHDR, ELF64_SHDR, parse_elf

HOST_FILES = ["/bin/ls", "/bin/true", sys.executable]


def libc_path() -> str:
    with open("/proc/self/maps") as f:
        return next(line.split()[-1] for line in f if "/libc.so" in line or "/libc-" in line)


def header_of(data: bytes):
    return elf_module._parse_header(data, "f")


def pyelftools_sections(data: bytes) -> list[tuple]:
    elf = ELFFile(io.BytesIO(data))
    return [
        (s.name, s.header["sh_type"], s["sh_addr"], s["sh_offset"], s["sh_size"], s["sh_link"], s["sh_entsize"])
        for s in elf.iter_sections()
    ]


def ours(data: bytes) -> list[tuple]:
    named = {2: "SHT_SYMTAB", 11: "SHT_DYNSYM", 7: "SHT_NOTE", 8: "SHT_NOBITS"}
    return [
        (s.name, named.get(s.type, s.type), s.addr, s.offset, s.size, s.link, s.entsize)
        for s in elf_module._section_headers(data, header_of(data), "f")
    ]


def comparable(rows: list[tuple]) -> list[tuple]:
    """pyelftools names every section type; compare the four this module uses by name."""
    keep = {"SHT_SYMTAB", "SHT_DYNSYM", "SHT_NOTE", "SHT_NOBITS"}
    return [(n, t if t in keep else "other", *rest) for n, t, *rest in rows]


@pytest.mark.parametrize("path", HOST_FILES + ["libc"])
def test_every_section_is_what_pyelftools_reads(path):
    data = open(libc_path() if path == "libc" else path, "rb").read()
    expected, got = comparable(pyelftools_sections(data)), comparable(ours(data))
    assert got == expected, f"{path}: first difference " + str(
        next(((e, g) for e, g in zip(expected, got) if e != g), (len(expected), len(got)))
    )


def extended_numbering(data: bytes) -> bytes:
    """The same file with e_shnum 0 and e_shstrndx SHN_XINDEX, the real values moved to
    section 0's sh_size and sh_link, as a file with 0xff00 or more sections has them."""
    hdr = list(ELF64_EHDR.unpack_from(data))
    shoff, shnum, shstrndx = hdr[6], hdr[12], hdr[13]
    out = bytearray(data)
    sec0 = list(ELF64_SHDR.unpack_from(out, shoff))
    sec0[5], sec0[6] = shnum, shstrndx
    ELF64_SHDR.pack_into(out, shoff, *sec0)
    hdr[12], hdr[13] = 0, 0xFFFF
    ELF64_EHDR.pack_into(out, 0, *hdr)
    return bytes(out)


def test_extended_section_numbering_reads_the_same_sections_and_symbols():
    data = open("/bin/ls", "rb").read()
    ext = extended_numbering(data)
    assert ours(ext)[1:] == ours(data)[1:], "the sections after section 0 differ"
    assert parse_elf(ext, "ls").all_symbols == parse_elf(data, "ls").all_symbols


def test_a_name_table_index_past_the_table_is_one_error_line():
    data = bytearray(open("/bin/true", "rb").read())
    hdr = list(ELF64_EHDR.unpack_from(data))
    hdr[13] = hdr[12] + 5
    ELF64_EHDR.pack_into(data, 0, *hdr)
    with pytest.raises(ElfError) as e:
        parse_elf(bytes(data), "true")
    assert (
        str(e.value) == f"true: malformed ELF (section headers: section name table index {hdr[12] + 5} "
        f"of {hdr[12]} sections)"
    )


def test_a_section_name_past_the_end_of_the_file_is_one_error_line():
    data = bytearray(open("/bin/true", "rb").read())
    hdr = ELF64_EHDR.unpack_from(data)
    shoff = hdr[6]
    sec = list(ELF64_SHDR.unpack_from(data, shoff + ELF64_SHDR.size))
    sec[0] = len(data) + 100
    ELF64_SHDR.pack_into(data, shoff + ELF64_SHDR.size, *sec)
    with pytest.raises(ElfError, match=r"^true: malformed ELF \(section headers: a section name past end of file\)$"):
        parse_elf(bytes(data), "true")


def test_starting_a_program_does_not_load_pyelftools():
    import subprocess

    code = (
        "from kernel_model.fs.elf import load_elf_file\nimport sys\nload_elf_file('/bin/ls')\n"
        "print(sorted(m for m in sys.modules if m.startswith('elftools')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"parsing /bin/ls loaded {out.stdout.strip()}"


def test_struct_layouts_are_elf64():
    assert (ELF64_EHDR.size, ELF64_SHDR.size) == (64, 64)
    assert struct.calcsize("<IIQQQQIIQQ") == 64
