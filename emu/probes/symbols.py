"""ELF files as the probe tools and debuggers read them: symbols, link-time addresses,
USDT notes.

The kernel model reads ELF to load programs (:mod:`kernel_model.fs.elf`,
``binfmt_elf``); tools read the same parsed image for what the kernel never looks at -
the symbol table (``resolve``, ``symbolize``), versions, ``.note.stapsdt`` - and this
module is their way in, so front ends need not reach into the kernel model.
"""

from __future__ import annotations

from kernel_model.fs.elf import ElfImage, Symbol, UsdtNote, image_of, link_vaddr, load_elf_file, parse_elf
from kernel_model.mm.mm_types import MappedFile

__all__ = ["ElfImage", "Symbol", "UsdtNote", "image_of", "link_vaddr", "load_elf_file", "parse_elf", "probe_file"]


def probe_file(path: str, data: bytes) -> MappedFile:
    """A file object for ``data`` (an ELF image) named ``path``, to compute probe file
    offsets (symbols, USDT sites) without a machine."""
    return MappedFile(path, data, parse_elf(data, path))
