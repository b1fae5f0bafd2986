"""PLT stubs named as gdb names them: ``malloc@plt``.

gdb takes these names from BFD's synthetic symbols (elf_x86_64_get_synthetic_symtab):
each entry of ``.plt``, ``.plt.sec`` (IBT) and ``.plt.got`` jumps through a GOT slot
(``jmp *disp(%rip)``, possibly after ``endbr64`` and with a ``bnd`` prefix); the slot's
relocation (``R_X86_64_JUMP_SLOT`` in ``.rela.plt``, ``R_X86_64_GLOB_DAT`` for
``.plt.got``) names the symbol.  The lazy-binding header (PLT0) and the ``push; jmp
PLT0`` tail of a ``.plt`` entry under IBT name nothing, as in gdb.

:class:`PltNames` keeps one table per ELF image; the stepper owns one (no module state).
"""

from __future__ import annotations

import io

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from emu.probes.symbols import image_of, link_vaddr

_PLT_SECTIONS = (".plt", ".plt.sec", ".plt.got")
_JMP_GOT = b"\xff\x25"  # jmp qword ptr [rip + disp32]
_MAX_PLT_ENTRIES = 1 << 16


def plt_entries(data: bytes) -> list[tuple[int, int, str]]:
    """``[(link-time address, size, "name@plt")]`` of an ELF file's PLT stubs."""
    return plt_tables(data)[0]


def plt_tables(data: bytes) -> tuple[list[tuple[int, int, str]], dict[int, str]]:
    """The PLT stubs (:func:`plt_entries`) and gdb's ``name@got.plt`` names of the GOT
    slots the ``.rela.plt`` relocations fill (elf_rel_plt_read_minimal_symbols)."""
    try:
        elf = ELFFile(io.BytesIO(data))
        slots: dict[int, str] = {}
        got_plt: dict[int, str] = {}
        for sec in elf.iter_sections():
            if not isinstance(sec, RelocationSection) or not sec.is_RELA():
                continue
            symtab = elf.get_section(sec["sh_link"]) if sec["sh_link"] else None
            if symtab is None or not hasattr(symtab, "get_symbol"):
                continue
            for rel in sec.iter_relocations():
                idx = rel["r_info_sym"]
                if idx:
                    name = symtab.get_symbol(idx).name
                    if name:
                        slots.setdefault(rel["r_offset"], name)
                        if sec.name == ".rela.plt":
                            got_plt[rel["r_offset"]] = f"{name}@got.plt"
        out = []
        for name in _PLT_SECTIONS:
            plt_sec = elf.get_section_by_name(name)
            if plt_sec is None or plt_sec["sh_type"] != "SHT_PROGBITS":
                continue
            base, body = plt_sec["sh_addr"], plt_sec.data()
            step = 8 if name == ".plt.got" else 16
            for off in range(0, min(len(body), step * _MAX_PLT_ENTRIES), step):
                entry = body[off : off + step]
                at = entry.find(_JMP_GOT)
                if at < 0 or at + 6 > len(entry):
                    continue
                disp = int.from_bytes(entry[at + 2 : at + 6], "little", signed=True)
                slot = base + off + at + 6 + disp
                if slot in slots:
                    out.append((base + off, step, f"{slots[slot]}@plt"))
        return out, got_plt
    except (ELFError, ValueError, KeyError, AttributeError):
        return [], {}


def alloc_sections(data: bytes) -> list[tuple[int, int, str]]:
    """``[(link-time address, size, name)]`` of an ELF file's allocated sections (what
    gdb's ``info symbol`` names: ``.text``, ``.plt``, ``.bss``...)."""
    try:
        elf = ELFFile(io.BytesIO(data))
        return [
            (sec["sh_addr"], sec["sh_size"], sec.name)
            for sec in elf.iter_sections()
            if sec["sh_flags"] & 2 and sec["sh_size"]
        ]  # SHF_ALLOC
    except (ELFError, ValueError, KeyError, AttributeError):
        return []


class PltNames:
    """The PLT stubs of the files a machine maps, looked up by guest address or name."""

    def __init__(self, machine):
        self.machine = machine
        self._tables: dict[int, tuple] = {}  # id(ElfImage) -> (image, stubs, GOT slot names)
        self._sections: dict[int, tuple[object, list]] = {}  # id(ElfImage) -> (image, sections)

    def _entries(self, elf) -> list:
        hit = self._tables.get(id(elf))
        if hit is None or hit[0] is not elf:
            hit = self._tables[id(elf)] = (elf, *plt_tables(elf.data))
        return hit[1]

    def got_slot(self, addr: int) -> str | None:
        """gdb's ``malloc@got.plt`` for the address of a GOT slot a PLT stub jumps through."""
        vma = self.machine.mem.find_vma(addr)
        if vma is None or vma.file is None or image_of(vma.file) is None:
            return None
        elf = vma.file.elf
        self._entries(elf)
        return self._tables[id(elf)][2].get(link_vaddr(vma.file, vma, addr))

    def _entry(self, addr: int) -> tuple[str, int, int] | None:
        vma = self.machine.mem.find_vma(addr)
        if vma is None or vma.file is None or image_of(vma.file) is None:
            return None
        link = link_vaddr(vma.file, vma, addr)
        for start, size, name in self._entries(vma.file.elf):
            if start <= link < start + size:
                return name, link - start, size
        return None

    def section(self, addr: int) -> str | None:
        """The name of the ELF section holding the guest address ``addr``."""
        vma = self.machine.mem.find_vma(addr)
        if vma is None or vma.file is None or image_of(vma.file) is None:
            return None
        elf = vma.file.elf
        hit = self._sections.get(id(elf))
        if hit is None or hit[0] is not elf:
            hit = self._sections[id(elf)] = (elf, alloc_sections(elf.data))
        link = link_vaddr(vma.file, vma, addr)
        return next((name for start, size, name in hit[1] if start <= link < start + size), None)

    def symbol(self, addr: int) -> tuple[str, int] | None:
        """``("malloc@plt", offset)`` for an address inside a PLT stub, else None."""
        hit = self._entry(addr)
        return None if hit is None else hit[:2]

    def size(self, addr: int) -> int | None:
        """The size of the PLT stub holding ``addr``, None outside one."""
        hit = self._entry(addr)
        return None if hit is None else hit[2]

    def address(self, name: str) -> int | None:
        """Where ``NAME@plt`` is in the process: the first mapped file that has it."""
        mem = self.machine.mem
        seen = set()
        for vma in mem.vmas:
            f = vma.file
            if f is None or id(f) in seen or image_of(f) is None:
                continue
            seen.add(id(f))
            for start, _size, entry in self._entries(f.elf):
                if entry == name:
                    bias = getattr(f, "load_bias", None)
                    if bias is None:
                        bias = min(v.start for v in mem.vmas if v.file is f)
                    return start + bias
        return None
