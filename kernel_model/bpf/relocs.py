"""Relocations of a BPF object's code as libbpf records and applies them
(``tools/lib/bpf/libbpf.c``).  :func:`record_reloc` is ``bpf_program__record_reloc``:
what an ELF relocation against an instruction refers to - a map, global data, a kfunc,
a ``.kconfig`` extern, a call or address of a ``.text`` subprogram.  :func:`resolve_insns`
applies the recorded ones as ``bpf_object__relocate_data`` and the kfunc fixups do, giving
the instructions ``BPF_PROG_LOAD`` receives (map references as ``BPF_PSEUDO_MAP_FD`` /
``BPF_PSEUDO_MAP_VALUE`` with the map's fd, kfunc calls as ``BPF_PSEUDO_KFUNC_CALL``).
:class:`~kernel_model.bpf.object.BpfObject` calls both while opening and loading.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernel_model.bpf.insn import (
    BPF_CALL,
    BPF_DW,
    BPF_IMM,
    BPF_JMP,
    BPF_LD,
    BPF_PSEUDO_CALL,
    BPF_PSEUDO_KFUNC_CALL,
    BPF_PSEUDO_MAP_FD,
    BPF_PSEUDO_MAP_VALUE,
    Insn,
)

if TYPE_CHECKING:
    from kernel_model.bpf.object import MapDef

LDDW = BPF_LD | BPF_IMM | BPF_DW
CALL = BPF_JMP | BPF_CALL


@dataclass
class Reloc:
    """A recorded relocation of one instruction (``struct reloc_desc``)."""

    insn: int  # instruction index in the program (after subprograms are appended)
    kind: str  # "map", "data", "kfunc", "kconfig", "call", "subprog_addr"
    map_idx: int = -1
    sym_off: int = 0
    name: str = ""


@dataclass
class Sym:
    """An ELF symbol of the object, as the relocations name it."""

    name: str
    value: int
    size: int
    type: str
    bind: str
    shndx: int  # 0 for SHN_UNDEF, -1 for other special indices
    index: int


def record_reloc(
    prog_name: str,
    insn: Insn,
    idx: int,
    sec_insn: int,
    sym: Sym,
    *,
    externs: dict[int, tuple[str, str]],
    text_shndx: int,
    maps: Sequence[MapDef],
    sec_name: Callable[[int], str],
    err: Callable[[str], Exception],
) -> Reloc:
    """``bpf_program__record_reloc``: what the relocation of instruction ``idx`` (at
    ``sec_insn`` in its ELF section) against ``sym`` is.  ``externs`` maps a symbol index
    to its extern (kind, name), ``maps`` are the object's maps in libbpf's order; a
    relocation libbpf rejects is ``err(message)``, raised."""
    sym_name = sym.name or sec_name(sym.shndx)
    if insn.code != CALL and insn.code != LDDW:
        raise err(f"prog '{prog_name}': invalid relo against '{sym_name}' for insns[{sec_insn}].code {insn.code:#x}")
    if sym.index in externs:
        kind, name = externs[sym.index]
        if insn.code == CALL:
            return Reloc(idx, "kfunc", name=name)
        return Reloc(idx, kind, name=name)
    if insn.code == CALL:
        if insn.src != BPF_PSEUDO_CALL:
            raise err(f"prog '{prog_name}': incorrect bpf_call opcode")
        if not sym.shndx or sym.shndx != text_shndx:
            raise err(f"prog '{prog_name}': bad call relo against '{sym_name}' in section '{sec_name(sym.shndx)}'")
        if sym.value % 8:
            raise err(f"prog '{prog_name}': bad call relo against '{sym_name}' at offset {sym.value}")
        return Reloc(idx, "call", sym_off=sym.value)
    if sym.shndx <= 0:
        raise err(
            f"prog '{prog_name}': invalid relo against '{sym_name}' in special section; "
            "forgot to initialize global var?.."
        )
    if sym.shndx == text_shndx and sym.type in ("STT_FUNC", "STT_SECTION"):
        if sym.value % 8 or insn.imm % 8:
            raise err(f"prog '{prog_name}': bad subprog addr relo against '{sym_name}'")
        return Reloc(idx, "subprog_addr", sym_off=sym.value)
    section = sec_name(sym.shndx)
    for i, m in enumerate(maps):
        if m.internal and m.internal != "kconfig" and m.sec_idx == sym.shndx:
            return Reloc(idx, "data", map_idx=i, sym_off=sym.value)
    if section in (".maps", "maps"):
        for i, m in enumerate(maps):
            if not m.internal and m.sec_idx == sym.shndx and m.sec_offset == sym.value:
                return Reloc(idx, "map", map_idx=i)
        raise err(f"map relo failed to find map for section '{section}', off {sym.value}")
    raise err(f"prog '{prog_name}': bad data relo against section '{section}'")


def resolve_insns(
    prog_name: str,
    insns: Sequence[Insn],
    relocs: Sequence[Reloc],
    *,
    maps: Sequence[MapDef],
    kconfig: Sequence[tuple[str, int, int]],
    kfuncs: dict[str, int],
    err: Callable[[str], Exception],
) -> list[Insn]:
    """The instructions with the recorded relocations applied: a map's fd is its index in
    ``maps``, a ``.kconfig`` extern is its offset (``kconfig``: name, offset, size) in the
    ``.kconfig`` map, a kfunc call carries ``kfuncs[name]``; a relocation against a kernel
    symbol the model does not have is ``err(message)``, raised."""
    out = list(insns)
    for r in relocs:
        insn = out[r.insn]
        if r.kind == "map":
            out[r.insn] = insn._replace(src=BPF_PSEUDO_MAP_FD, imm=r.map_idx)
            out[r.insn + 1] = out[r.insn + 1]._replace(imm=0)
        elif r.kind == "data":
            out[r.insn] = insn._replace(src=BPF_PSEUDO_MAP_VALUE, imm=r.map_idx)
            out[r.insn + 1] = out[r.insn + 1]._replace(imm=insn.imm + r.sym_off)
        elif r.kind == "kconfig":
            idx = next(i for i, m in enumerate(maps) if m.internal == "kconfig")
            off = next(o for n, o, _ in kconfig if n == r.name)
            out[r.insn] = insn._replace(src=BPF_PSEUDO_MAP_VALUE, imm=idx)
            out[r.insn + 1] = out[r.insn + 1]._replace(imm=off)
        elif r.kind == "kfunc":
            out[r.insn] = insn._replace(src=BPF_PSEUDO_KFUNC_CALL, imm=kfuncs[r.name], off=0)
        elif r.kind == "ksym":
            raise err(f"prog '{prog_name}': kernel symbol '{r.name}' is not available")
    return out
