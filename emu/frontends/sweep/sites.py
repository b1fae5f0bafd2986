"""Where a sweep probes: every instruction boundary of a file's ``.text``, every
function's entry, every function's return, or a list read from a file.

A site is what the kernel keys a uprobe on - a file and an offset in it
(``uprobe_register(inode, offset)``) - plus, for the report, the bytes there, their
disassembly and ``symbol+offset``.  Boundaries come from a capstone linear sweep over the
section (an undecodable byte is skipped: it is no boundary anyone could name); the
modeled kernel refuses what ``arch_uprobe_analyze_insn()`` refuses, and the sweep
reports those as refused, not as divergences.
"""

from __future__ import annotations

import io
import os
from dataclasses import asdict, dataclass

import capstone
from elftools.common.exceptions import ELFError
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

from kernel_model.errors import InputError

SITE_MODES = ("insn", "func", "ret")


@dataclass(frozen=True)
class Site:
    path: str  # the file, as the guest names it (guest:NAME for a built-in guest)
    offset: int  # file offset: what uprobe_register() takes
    kind: str  # "p" (entry) | "r" (return probe)
    vaddr: int  # link-time address
    raw: bytes  # the instruction's bytes
    text: str  # its disassembly
    symbol: str  # "func+0x4" ("" when no symbol covers it)

    @property
    def key(self) -> str:
        """``PATH:0xOFF`` (``%return`` for a return probe): also the --site syntax."""
        return f"{self.path}:{self.offset:#x}" + ("%return" if self.kind == "r" else "")

    @property
    def probe(self) -> tuple[str, int, str]:
        return (self.path, self.offset, self.kind)

    def describe(self) -> str:
        where = f"<{self.symbol}>" if self.symbol else ""
        ret = " (return probe)" if self.kind == "r" else ""
        return f"{self.key} {self.vaddr:#x} {where} {self.raw.hex(' ')}  {self.text}{ret}"

    def to_json(self) -> dict:
        d = asdict(self)
        d["raw"] = self.raw.hex()
        return d

    @staticmethod
    def from_json(d: dict) -> "Site":
        return Site(d["path"], d["offset"], d["kind"], d["vaddr"], bytes.fromhex(d["raw"]), d["text"], d["symbol"])


_MD = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)


def disassemble(code: bytes, vaddr: int) -> tuple[bytes, str]:
    """The first instruction of ``code`` (its bytes, its text); ``(b"", "(bad)")``."""
    i = next(_MD.disasm(code[:15], vaddr, 1), None)
    if i is None:
        return code[:1], "(bad)"
    return bytes(i.bytes), f"{i.mnemonic} {i.op_str}".strip()


def _symbol(elf, vaddr: int) -> str:
    hit = elf.symbolize(vaddr)
    if hit is None:
        return ""
    name, off = hit
    return f"{name}+{off:#x}" if off else name


def code_sections(elf) -> list[tuple[int, int, int]]:
    """(file offset, size, link vaddr) of ``.text``; an image without section headers
    (or without ``.text``) is swept over its executable segments' file bytes."""
    try:
        f = ELFFile(io.BytesIO(elf.data))
        out = [
            (s["sh_offset"], s["sh_size"], s["sh_addr"])
            for s in f.iter_sections()
            if s.name == ".text" and s["sh_type"] == "SHT_PROGBITS" and s["sh_flags"] & SH_FLAGS.SHF_EXECINSTR
        ]
    except (ELFError, ValueError):
        out = []
    if out:
        return out
    return [(seg.offset, seg.filesz, seg.vaddr) for seg in elf.segments if seg.flags & 1]


def insn_sites(path: str, elf) -> list[Site]:
    """Every instruction boundary of the file's code (linear sweep)."""
    out = []
    for foff, size, vaddr in code_sections(elf):
        code = elf.data[foff : foff + size]
        off = 0
        while off < len(code):
            for i in _MD.disasm(code[off:], vaddr + off):
                out.append(
                    Site(
                        path,
                        foff + off,
                        "p",
                        i.address,
                        bytes(i.bytes),
                        f"{i.mnemonic} {i.op_str}".strip(),
                        _symbol(elf, i.address),
                    )
                )
                off += i.size
            if off < len(code):
                off += 1
    return out


def func_sites(path: str, elf, kind: str = "p") -> list[Site]:
    """Every sized FUNC symbol's entry (kind "r": its return probe), one per address."""
    seen, out = set(), []
    for s in sorted(elf.all_symbols, key=lambda s: (s.value, s.name)):
        if s.type != "FUNC" or not s.size or s.value in seen:
            continue
        seen.add(s.value)
        try:
            off = elf.vaddr_to_offset(s.value)
        except (InputError, ValueError, KeyError):
            continue
        raw, text = disassemble(elf.data[off : off + 15], s.value)
        out.append(Site(path, off, kind, s.value, raw, text, s.name))
    return out


def site_at(path: str, elf, offset: int, kind: str) -> Site:
    vaddr = elf.offset_to_vaddr(offset)
    raw, text = disassemble(elf.data[offset : offset + 15], vaddr)
    return Site(path, offset, kind, vaddr, raw, text, _symbol(elf, vaddr))


def probed_files(machine, libraries: bool) -> list:
    """The program's file and, with ``libraries``, every other ELF file the (finished)
    reference run mapped: ld.so and the libraries it opened."""
    exe = machine.process.exe
    files = [exe]
    if libraries:
        for f in machine.process.mapped_files:
            if f is exe or f in files:
                continue
            try:
                if machine.uprobes.file_elf(f) is not None:
                    files.append(f)
            except InputError:
                continue  # not an ELF (ld.so.cache, a data file)
    return files


def enumerate_sites(
    machine, mode: str, *, libraries: bool = False, program: str = "", site_specs: list[str] | None = None
) -> list[Site]:
    """The sites of ``mode`` (insn | func | ret | the path of a site list) in the files
    of :func:`probed_files`; ``site_specs`` (``--site``) instead give them one by one."""
    if site_specs:
        return [parse_site(machine, s, program) for s in site_specs]
    if mode not in SITE_MODES:
        return read_site_file(machine, mode, program)
    out = []
    for f in probed_files(machine, libraries):
        name = program if f is machine.process.exe and program else f.path
        elf = machine.uprobes.file_elf(f)
        out += insn_sites(name, elf) if mode == "insn" else func_sites(name, elf, "r" if mode == "ret" else "p")
    return out


def parse_site(machine, text: str, program: str = "") -> Site:
    """``[PATH:]0xOFF``, ``[PATH:]SYMBOL[+OFF]``, either with ``%return``; no PATH is
    the program.  PATH is resolved as ``-e`` resolves it (``ProbeTargets.find_file``)."""
    spec = text.strip()
    kind = "p"
    if spec.endswith("%return"):
        spec, kind = spec[: -len("%return")], "r"
    path, sep, where = spec.rpartition(":")
    if not sep:
        path, where = "", spec
    up = machine.uprobes
    exe = machine.process.exe
    file = exe if path in ("", program, exe.path) else up.find_file(path)
    name = program if file is exe and program else file.path
    elf = up.file_elf(file)
    if elf is None:
        raise InputError(f"sweep: site {text!r}: {file.path} is not an ELF file")
    try:
        offset = int(where, 0)
    except ValueError:
        sym, _, delta = where.partition("+")
        try:
            d = int(delta, 0) if delta else 0
        except ValueError:
            raise InputError(f"sweep: site {text!r}: bad offset {delta!r}") from None
        offset = up.symbol_offset(file, sym, d)[1]
    if not 0 <= offset < len(elf.data):
        raise InputError(f"sweep: site {text!r}: offset {offset:#x} is outside {file.path}")
    return site_at(name, elf, offset, kind)


def read_site_file(machine, path: str, program: str = "") -> list[Site]:
    """A site list: one site per line in :func:`parse_site`'s syntax, ``#`` comments."""
    if not os.path.isfile(path):
        raise InputError(f"sweep: --sites {path!r} is neither insn, func, ret nor a file")
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read(16 << 20).splitlines()
    except OSError as e:
        raise InputError(f"sweep: cannot read --sites file {path!r}: {e.strerror}") from None
    out = []
    for n, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if line:
            try:
                out.append(parse_site(machine, line, program))
            except InputError as e:
                raise InputError(f"{path}:{n}: {e}") from None
    return out
