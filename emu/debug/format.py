"""gdb's view of the amd64 registers, shared by the stepper's engine and shell, the gdb stub
and the pytest plugin (:meth:`emu.frontends.testing.Regs.gdb_line`): register names as gdb
spells them (aliases, sub-registers, the fixed segment selectors), their gdb types, and
their ``info registers`` rendering (raw hex, then the natural value: ``[ ZF PF ]`` for
eflags, ``0x401000 <main+4>`` for a code pointer), with gdb's ``sym+N`` labels.
"""

from __future__ import annotations

from emu.probes.symbols import image_of, link_vaddr
from kernel_model.arch.x86.ptrace import GPR_NAMES, format_eflags

# gdb's amd64 `info registers` set (general group) in order; fs_base/gs_base print when
# named (gdb 13.1 on Linux keeps them out of the default list), k0-k7 exist only on
# AVX-512 targets and the emulated CPU has none.
INFO_REGISTERS = GPR_NAMES[:16] + ("rip", "eflags", "cs", "ss", "ds", "es", "fs", "gs")
SEGMENTS = {"cs": 0x33, "ss": 0x2B, "ds": 0, "es": 0, "fs": 0, "gs": 0}
ALIASES = {"pc": "rip", "sp": "rsp", "fp": "rbp", "ps": "eflags"}
_KINDS = {"rbp": "data_ptr", "rsp": "data_ptr", "rip": "code_ptr", "eflags": "flags"}
_SUB32 = {
    "eax": "rax",
    "ebx": "rbx",
    "ecx": "rcx",
    "edx": "rdx",
    "esi": "rsi",
    "edi": "rdi",
    "ebp": "rbp",
    "esp": "rsp",
    **{f"r{i}d": f"r{i}" for i in range(8, 16)},
}
_SUB16 = {
    "ax": "rax",
    "bx": "rbx",
    "cx": "rcx",
    "dx": "rdx",
    "si": "rsi",
    "di": "rdi",
    "bp": "rbp",
    **{f"r{i}w": f"r{i}" for i in range(8, 16)},
}
_SUB8 = {
    "al": "rax",
    "bl": "rbx",
    "cl": "rcx",
    "dl": "rdx",
    "sil": "rsi",
    "dil": "rdi",
    "bpl": "rbp",
    "spl": "rsp",
    **{f"r{i}l": f"r{i}" for i in range(8, 16)},
}
_SUB8H = {"ah": "rax", "bh": "rbx", "ch": "rcx", "dh": "rdx"}


def subreg(name: str) -> tuple[str | None, int, int]:
    """(full register, shift, bits) for a register or sub-register name."""
    if name in GPR_NAMES:
        return name, 0, 64
    for table, shift, bits in ((_SUB32, 0, 32), (_SUB16, 0, 16), (_SUB8, 0, 8), (_SUB8H, 8, 8)):
        if name in table:
            return table[name], shift, bits
    return None, 0, 0


def register_value(name: str, regs) -> tuple[int, str | None]:
    """(value, gdb type kind) of a register name as gdb spells it."""
    full_name = ALIASES.get(name, name)
    if full_name in SEGMENTS:
        return SEGMENTS[full_name], "int32"
    full, shift, bits = subreg(full_name)
    if full is None:
        return 0, None
    value = (getattr(regs, full) >> shift) & ((1 << bits) - 1)
    if bits == 64:
        return value, _KINDS.get(full, "int64")
    return value, f"int{bits}"


def signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def natural(value: int, kind: str, label=None) -> str:
    """gdb's natural rendering of a register value of type ``kind``."""
    if kind == "flags":
        return format_eflags(value)
    if kind == "data_ptr":
        return f"{value:#x}"
    if kind == "code_ptr":
        sym = label(value) if label else None
        return f"{value:#x}" + (f" <{sym}>" if sym else "")
    return str(signed(value, int(kind[3:])))


def register_line(name: str, value: int, label=None) -> str:
    """``info registers`` line of a full register (no sub-register names): the kind
    follows gdb's amd64 description."""
    kind = "int32" if name in SEGMENTS else _KINDS.get(name, "int64")
    return format_register(name, value, kind, label)


def format_register(name: str, value: int, kind: str, label=None) -> str:
    """One ``info registers`` line: the name padded to column 15, the raw hex value
    from column 15, the natural value from column 35 (at least one space before each)."""
    line = name.ljust(15) if len(name) < 15 else name + " "
    line += f"{value:#x}"
    line += " " * max(1, 34 - len(line) + 1)
    return line + natural(value, kind, label)


def gdb_label(machine, addr: int) -> str | None:
    """gdb's ``sym`` / ``sym+N`` (decimal offset) for code and data symbols."""
    vma = machine.mem.find_vma(addr)
    if vma is None or vma.file is None or image_of(vma.file) is None:
        return None
    elf = vma.file.elf
    link = link_vaddr(vma.file, vma, addr)  # a library: through the file offset
    hit = elf.symbolize(link)
    if hit is None:
        best = None
        for s in elf.all_symbols:
            if s.name and s.type in ("OBJECT", "FUNC", "NOTYPE") and s.value <= link < s.value + s.size:
                if best is None or s.value > best.value:
                    best = s
        if best is None:
            return None
        hit = (best.name, link - best.value)
    name, off = hit
    return f"{name}+{off}" if off else name


__all__ = [
    "INFO_REGISTERS",
    "ALIASES",
    "SEGMENTS",
    "subreg",
    "register_value",
    "signed",
    "natural",
    "register_line",
    "format_register",
    "gdb_label",
]
