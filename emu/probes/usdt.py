"""USDT probes: ``.note.stapsdt`` sites attached the way libbpf does.

libbpf (``usdt.c``, ``has_nop_combo``) attaches at the note address, except when the
kernel supports the uprobe syscall and the site is the ``nop; nop5`` (6.18-7.1) or
``nop; nop10`` (7.3+) combo: then it attaches one byte further, on the optimizable nop,
so the site becomes a ``call`` into the uprobe trampoline after the first hit.  The
feature probe is ``syscall(336)`` from ordinary code returning the errno of a kernel that
has the syscall (ENXIO for nop5-era kernels, EPROTO for nop10-era ones).  Semaphores
(``ref_ctr_offset``) are file offsets of the note's semaphore address.
"""

from __future__ import annotations

from kernel_model.arch.x86.lib.insn import NOP5, NOP10
from kernel_model.errors import ProbeSpecError, SymbolError

COMBO_NOP5 = b"\x90" + NOP5
COMBO_NOP10 = b"\x90" + NOP10


def parse_usdt_spec(text: str) -> tuple[str, str | None, str]:
    """``usdt:PATH:[PROVIDER:]NAME`` (bpftrace; alias ``U:``) -> (path, provider, name)."""
    head, _, rest = text.partition(":")
    if head not in ("usdt", "U") or not rest:
        raise ProbeSpecError("expected usdt:PATH:[PROVIDER:]NAME", text, 0)
    parts = rest.rsplit(":", 2)
    if len(parts) == 3:
        path, provider, name = parts
    elif len(parts) == 2:
        path, provider, name = parts[0], None, parts[1]
    else:
        raise ProbeSpecError("expected usdt:PATH:[PROVIDER:]NAME", text, len(head) + 1)
    if not name:
        raise ProbeSpecError("empty USDT probe name", text, len(text))
    return path, provider, name


def find_usdt_notes(file, provider: str | None, name: str) -> list:
    elf = file.elf
    notes = [n for n in (elf.usdt if elf else []) if n.name == name and (provider is None or n.provider == provider)]
    if not notes:
        known = sorted({f"{n.provider}:{n.name}" for n in (elf.usdt if elf else [])})
        raise SymbolError(
            f"no USDT probe {provider + ':' if provider else ''}{name} in "
            f"{file.path} (has: {', '.join(known) or 'none'})"
        )
    return notes


def usdt_attach_offsets(file, note, profile) -> tuple[int, int]:
    """(file offset to probe, ref_ctr_offset or 0) for one note, libbpf's way."""
    elf = file.elf
    offset = elf.vaddr_to_offset(note.pc)
    combo = {"nop5": COMBO_NOP5, "nop10": COMBO_NOP10}.get(profile.optimize or "")
    if combo is not None and profile.has_uprobe_syscall and file.read(offset, len(combo)) == combo:
        offset += 1
    ref = elf.vaddr_to_offset(note.semaphore) if note.semaphore else 0
    return offset, ref
