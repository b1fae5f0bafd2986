"""A section with a symbol-version name but another section type (a malformed file) reads
as no symbol versions: a versioned lookup is one SymbolError line, never an
AttributeError from the section reader."""

from __future__ import annotations

import io
import struct

import pytest
from elftools.elf.elffile import ELFFile

from kernel_model.arch.x86.entry.vdso import vdso_image
from kernel_model.errors import SymbolError
from kernel_model.fs.elf import parse_elf

SHT_PROGBITS = 1


def retyped(data: bytes, name: str, sh_type: int) -> bytes:
    """``data`` with the section ``name``'s sh_type replaced."""
    out = bytearray(data)
    elf = ELFFile(io.BytesIO(data))
    index = next(i for i, sec in enumerate(elf.iter_sections()) if sec.name == name)
    struct.pack_into("<I", out, elf.header.e_shoff + index * elf.header.e_shentsize + 4, sh_type)
    return bytes(out)


def test_the_model_vdso_resolves_a_versioned_symbol():
    """The control: the unmodified image has the version the other tests break."""
    image = parse_elf(vdso_image(), "vdso", shared_object=True)
    sym = image.resolve("__vdso_time@LINUX_2.6")
    assert sym.name == "__vdso_time", f"expected __vdso_time, got {sym.name!r}"


@pytest.mark.parametrize("section", [".gnu.version_d", ".gnu.version"])
def test_a_version_section_of_another_type_means_no_versions(section):
    image = parse_elf(retyped(vdso_image(), section, SHT_PROGBITS), "vdso-bad", shared_object=True)
    expected = "unknown versioned symbol '__vdso_time@LINUX_2.6' in vdso-bad (it has no symbol versions)"
    with pytest.raises(SymbolError) as exc:
        image.resolve("__vdso_time@LINUX_2.6")
    assert str(exc.value) == expected, f"expected {expected!r}, got {str(exc.value)!r}"
