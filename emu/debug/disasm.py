"""Disassembly shared by the stepper and the tracer: capstone decodes cached by address,
and objdump-style listing lines.

Syntax: capstone's **Intel** syntax by default (``mov rax, 0x3c``, ``nop dword ptr [rax
+ rax]``), laid out in the columns of ``objdump -d`` (binutils 2.40)::

    0000000000401000 <_start>:
      401000:	48 c7 c0 3c 00 00 00 	mov    rax, 0x3c
      40100c:	48 bb 88 77 66 55 44 	movabs rbx, 0x1122334455667788
      401013:	33 22 11
      401016:	e8 16 00 00 00       	call   0x401031 <func>

i.e. two spaces, the address right-aligned in 6 hex digits, ``:``, TAB, up to 7 bytes as
``xx `` padded to 21 columns, TAB, the mnemonic left-aligned in 6 columns plus a space,
then the operands; longer encodings continue on a line holding the address and the
remaining bytes.  The operand text is capstone's, not objdump's (``rax, 0x3c`` where
``objdump -M intel`` prints ``rax,0x3c``); pass ``syntax="att"`` for capstone's AT&T
form.  Like objdump, a direct branch target and a rip-relative operand get a ``<sym+off>``
annotation when a symbolizer is given.  Bytes that do not decode print as ``(bad)``
(one byte), as objdump does.

The listing shows guest memory as it is: a uprobe site reads ``int3`` (or the optimized
``call`` into ``[uprobes-trampoline]``), as a debugger on the real kernel would see it.

The cache is keyed by address and dropped for any range the kernel model writes
(``Memory.text_write_listeners``: probe install/remove, XOL slot fills, optimization,
unmaps).  Guest stores into its own code (self-modifying code in a writable+executable
mapping) are not reported by the machine; call :meth:`Disassembler.invalidate` if you
run such guests.
"""

from __future__ import annotations

import os
from typing import Callable, NamedTuple

from capstone import CS_ARCH_X86, CS_MODE_64, CS_OPT_SYNTAX_ATT, Cs

from emu.probes.symbols import image_of, link_vaddr
from kernel_model.mm.mm_types import GuestFault

MAX_INSN_BYTES = 15
_BRANCHES = frozenset(
    {
        "call",
        "jmp",
        "jo",
        "jno",
        "jb",
        "jae",
        "je",
        "jne",
        "jbe",
        "ja",
        "js",
        "jns",
        "jp",
        "jnp",
        "jl",
        "jge",
        "jle",
        "jg",
        "jrcxz",
        "jecxz",
        "loop",
        "loope",
        "loopne",
        "xbegin",
    }
)


class Insn(NamedTuple):
    """One decoded instruction (``bytes`` as they are in memory)."""

    address: int
    size: int
    bytes: bytes
    mnemonic: str
    op_str: str

    @property
    def text(self) -> str:
        """``mnemonic operands`` with objdump's 6-column mnemonic."""
        return f"{self.mnemonic:<6} {self.op_str}" if self.op_str else self.mnemonic

    @property
    def next(self) -> int:
        return self.address + self.size


def _bad(addr: int, code: bytes) -> Insn:
    return Insn(addr, 1, code[:1], "(bad)", "")


class Disassembler:
    """Decodes guest instructions of one machine, cached until the text changes.

    Args:
        machine: the :class:`emu.machine.Machine` whose memory is read: the address
            space current at construction (cache, reads and symbols stay with it).
        syntax: ``"intel"`` (default) or ``"att"`` (capstone's dialects).
    """

    def __init__(self, machine, syntax: str = "intel"):
        if syntax not in ("intel", "att"):
            raise ValueError(f"syntax must be 'intel' or 'att', not {syntax!r}")
        self.machine = machine
        self.mem = machine.mem
        self.syntax = syntax
        self._cs = Cs(CS_ARCH_X86, CS_MODE_64)
        if syntax == "att":
            self._cs.syntax = CS_OPT_SYNTAX_ATT
        self._cache: dict[int, Insn] = {}
        self.mem.text_write_listeners.append(self.invalidate)

    # ------------------------------------------------------------------ decoding
    def decode(self, addr: int) -> Insn:
        """The instruction at ``addr`` as it is in guest memory.

        Raises:
            emu.engine.memory.GuestFault: ``addr`` is not mapped.
        """
        insn = self._cache.get(addr)
        if insn is None:
            insn = self.decode_bytes(addr, self._fetch(addr))
            self._cache[addr] = insn
        return insn

    def decode_bytes(self, addr: int, code: bytes) -> Insn:
        """Decode ``code`` as if it sat at ``addr`` (not cached)."""
        for i in self._cs.disasm_lite(code, addr, 1):
            _, size, mnemonic, op_str = i
            return Insn(addr, size, bytes(code[:size]), mnemonic, op_str)
        return _bad(addr, code)

    def range(self, start: int, end: int):
        """Decode every instruction from ``start`` up to ``end`` (exclusive)."""
        addr = start
        while addr < end:
            insn = self.decode(addr)
            yield insn
            addr += insn.size

    def invalidate(self, start: int, end: int) -> None:
        """Forget decodes that overlap ``[start, end)``."""
        cache = self._cache
        if not cache:
            return
        lo = start - MAX_INSN_BYTES + 1
        if end - lo <= 64:
            for a in range(lo, end):
                insn = cache.get(a)
                if insn is not None and a + insn.size > start:
                    del cache[a]
        else:
            for a in [a for a, i in cache.items() if a < end and a + i.size > start]:
                del cache[a]

    def _fetch(self, addr: int) -> bytes:
        mem = self.mem
        try:
            return mem.read(addr, MAX_INSN_BYTES)
        except GuestFault:
            pass
        vma = mem.find_vma(addr)
        if vma is None:
            raise GuestFault(addr, "read")
        return mem.read(addr, min(MAX_INSN_BYTES, vma.end - addr))

    # ------------------------------------------------------------------ symbols
    def symbol(self, addr: int) -> tuple[str, int] | None:
        """``(name, offset)`` from the ELF symbols of the file mapped at ``addr``, or
        ``(vma name, offset)`` inside a special mapping such as ``[uprobes]``."""
        return _symbol_in(self.mem, addr)

    def symbolize(self, addr: int) -> str | None:
        """``name+0xoff`` / ``name`` for :meth:`symbol`, else None."""
        hit = _symbol_in(self.mem, addr)
        if hit is None:
            return None
        name, off = hit
        return (f"{name}+{off:#x}" if off else name) + _library_suffix(self.mem, addr)

    def symbol_header(self, addr: int) -> str | None:
        """objdump's ``0000000000401000 <_start>:`` line when a symbol starts at
        ``addr``, else None."""
        hit = _symbol_in(self.mem, addr)
        if hit is None or hit[1] != 0:
            return None
        return f"{addr:016x} <{hit[0]}>:"

    def format(self, insn: Insn) -> str:
        """:func:`format_objdump_line` with this machine's symbols."""
        return format_objdump_line(insn, self.symbolize)


def symbol_of(machine, addr: int) -> tuple[str, int] | None:
    """``(symbol, offset)`` for a guest address, from the ELF of its mapping (load
    bias applied); ``(name, offset from the mapping start)`` for special mappings."""
    return _symbol_in(machine.mem, addr)


def _symbol_in(mem, addr: int) -> tuple[str, int] | None:
    vma = mem.find_vma(addr)
    if vma is None:
        return None
    file = vma.file
    if file is not None and image_of(file) is not None:
        return file.elf.symbolize(link_vaddr(file, vma, addr))
    if vma.special:
        return vma.name, addr - vma.start
    return None


def _library_suffix(mem, addr: int) -> str:
    """`` in libc.so.6`` for a shared library's address (gdb's "malloc+20 in libc.so.6");
    nothing for the program and its interpreter (mapped by the loader)."""
    vma = mem.find_vma(addr)
    file = vma.file if vma is not None else None
    if file is None or getattr(file, "load_bias", None) is not None:
        return ""
    return f" in {os.path.basename(file.d_path or file.path)}"


def format_objdump_line(insn: Insn, symbolize: Callable[[int], str | None] | None = None) -> str:
    """One ``objdump -d`` listing entry (with continuation lines for long encodings).

    ``symbolize(addr) -> "sym+0xoff" | None`` adds objdump's ``<sym+off>`` after a
    direct branch target and ``# addr <sym+off>`` after a rip-relative operand.
    """
    raw = insn.bytes
    head = f"  {insn.address:6x}:\t"
    first = " ".join(f"{b:02x}" for b in raw[:7]) + " "
    text = insn.text
    if symbolize is not None:
        text += annotation(insn, symbolize)
    lines = [f"{head}{first:<21}\t{text}"]
    for i in range(7, len(raw), 7):
        chunk = raw[i : i + 7]
        lines.append(f"  {insn.address + i:6x}:\t" + " ".join(f"{b:02x}" for b in chunk) + " ")
    return "\n".join(lines)


def annotation(insn: Insn, symbolize) -> str:
    """objdump's ``<sym>`` after a direct branch target / ``# addr <sym>`` after a
    rip-relative operand (empty when there is nothing to name)."""
    ops = insn.op_str
    mn = insn.mnemonic
    if (mn in _BRANCHES or mn[:-1] in _BRANCHES) and ops.startswith("0x"):
        try:
            target = int(ops, 16)
        except ValueError:
            return ""
        name = symbolize(target)
        return f" <{name}>" if name else ""
    if "rip" in ops:
        rel = _riprel_target(insn)
        if rel is not None:
            name = symbolize(rel)
            return f"        # {rel:x}" + (f" <{name}>" if name else "")
    return ""


def _riprel_target(insn: Insn) -> int | None:
    """The address a ``[rip + disp]`` operand names (capstone prints the displacement)."""
    ops = insn.op_str
    i = ops.find("(%rip)")
    if i >= 0:  # AT&T: disp(%rip)
        num = ops[:i].rsplit(" ", 1)[-1].lstrip("*") or "0"
        try:
            return (insn.next + int(num, 0)) & 0xFFFFFFFFFFFFFFFF
        except ValueError:
            return None
    i = ops.find("rip")
    rest = ops[i + 3 :].lstrip()
    sign = 1
    if rest.startswith("+"):
        rest = rest[1:].lstrip()
    elif rest.startswith("-"):
        sign, rest = -1, rest[1:].lstrip()
    elif rest.startswith("]"):
        return insn.next
    else:
        return None
    num = rest.split("]", 1)[0].strip()
    try:
        disp = int(num, 0)
    except ValueError:
        return None
    return (insn.next + sign * disp) & 0xFFFFFFFFFFFFFFFF
