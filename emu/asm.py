"""Keystone guests: assembly source -> a real ELF image with a symbol table.

Labels become symbols (FUNC in text, OBJECT in data).  A line ``.data`` switches to a
writable data segment placed on the next page.  keystone 0.9.2 has encoding defects
(the 5-byte nop comes out as ``0f 18 24 00``; symbols resolved through its callback land
4 bytes off in rip-relative operands), so guests write exact encodings with ``.byte``
and keep all references inside one assembly unit, which keystone gets right.
Label addresses are recovered by assembling a trailing ``.quad label`` table.
"""

from __future__ import annotations

import re
import struct

from keystone import KS_ARCH_X86, KS_MODE_64, Ks, KsError

from emu.elf_writer import build_elf
from kernel_model.errors import InputError

TEXT_VADDR = 0x401000
_ASM_ATTEMPTS = 4  # keystone runs for one source (see assemble)
_LABEL = re.compile(r"^\s*([A-Za-z_.$][\w.$@]*)\s*:(?!:)")


def _strip_comment(line: str) -> str:
    out, quote = [], None
    for i, ch in enumerate(line):
        if quote:
            out.append(ch)
            if ch == quote and line[i - 1] != "\\":
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch == "#" or line.startswith("//", i):
            break
        out.append(ch)
    return "".join(out)


def assemble(source: str, base: int = TEXT_VADDR) -> tuple[bytes, int, dict[str, tuple[int, str]]]:
    """Assemble ``source``; return (image bytes from ``base``, text length, labels).

    ``labels`` maps name -> (address, "text" | "data").
    """
    text_lines: list[str] = []
    data_lines: list[str] = []
    labels_order: list[tuple[str, str]] = []
    section = "text"
    for raw in source.splitlines():
        line = _strip_comment(raw).rstrip()
        if line.strip() in (".data", ".section .data"):
            section = "data"
            continue
        if line.strip() in (".text", ".section .text", ".intel_syntax noprefix", ".globl _start"):
            continue
        m = _LABEL.match(line)
        if m:
            labels_order.append((m.group(1), section))
        (text_lines if section == "text" else data_lines).append(line)
    body = "\n".join(text_lines)
    if data_lines:
        body += "\n.align 4096\n__data_start:\n" + "\n".join(data_lines)
    table = "".join(f"\n.quad {name}" for name, _ in labels_order)
    if data_lines:
        table += "\n.quad __data_start"
    ntab = len(labels_order) + (1 if data_lines else 0)
    for _attempt in range(_ASM_ATTEMPTS):
        ks = Ks(KS_ARCH_X86, KS_MODE_64)
        try:
            enc, _ = ks.asm(body + "\n" + table + "\n", base)
        except KsError as e:
            raise InputError(f"assembly failed: {e}") from None
        if enc is None:
            raise InputError("assembly failed: empty program")
        blob = bytes(enc)
        addrs = struct.unpack(f"<{ntab}Q", blob[-8 * ntab :]) if ntab else ()
        if not data_lines or addrs[-1] % 4096 == 0:
            break
        # keystone now and then lays ``.align 4096`` out short (seen once in a few
        # thousand generated programs, not again on the same source): assemble again
    else:
        raise InputError(f"assembly failed: keystone put the data at {addrs[-1]:#x}, not on a page boundary")
    if ntab:
        blob = blob[: -8 * ntab]
    labels = {name: (addr, sec) for (name, sec), addr in zip(labels_order, addrs)}
    # with data, the text part runs up to the page-aligned __data_start
    text_len = (addrs[-1] - base) if data_lines else len(blob)
    return blob, text_len, labels


def asm_to_elf(source: str, entry: str = "_start") -> tuple[bytes, dict[str, int]]:
    """Assemble a guest into ELF file bytes; returns (elf bytes, symbol addresses)."""
    blob, text_len, labels = assemble(source)
    text = blob[:text_len]
    data = blob[text_len:] if text_len < len(blob) else b""
    if entry not in labels:
        raise InputError(f"guest has no '{entry}' label")
    # symbol sizes: distance to the next label of the same section
    syms = []
    ordered = sorted(((a, n, s) for n, (a, s) in labels.items() if not n.startswith(".")), key=lambda t: t[0])
    text_end = TEXT_VADDR + len(text)
    data_vaddr = TEXT_VADDR + text_len if data else None
    data_end = (data_vaddr or 0) + len(data)
    for i, (addr, name, sec) in enumerate(ordered):
        limit = text_end if sec == "text" else data_end
        nxt = next((a for a, _, s in ordered[i + 1 :] if s == sec and a > addr), limit)
        syms.append((name, addr, max(0, min(nxt, limit) - addr), "FUNC" if sec == "text" else "OBJECT"))
    elf = build_elf(
        text=text, text_vaddr=TEXT_VADDR, entry=labels[entry][0], symbols=syms, data=data, data_vaddr=data_vaddr
    )
    return elf, {n: a for n, (a, _) in labels.items()}
