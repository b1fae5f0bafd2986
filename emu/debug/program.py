"""The program's own view of memory, as a debugger shows it.

Where the uprobes model changed the process's bytes - a probe site's int3 or optimized
``call``, a return address the uretprobe hijacked - a debugger shows the program's own
bytes, as gdb shadows its own breakpoints (:meth:`ProgramView.read_program`), and a
debugger write may not change what is shadowed (:meth:`ProgramView.write_program`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from emu.debug.disasm import MAX_INSN_BYTES, Disassembler, Insn, symbol_of
from emu.debug.stops import StepperError
from emu.inspect import optimized_call_size, pending_returns, trampoline_vaddr
from kernel_model.mm.mm_types import GuestFault

if TYPE_CHECKING:
    from emu.debug.plt import PltNames
    from emu.machine import Machine

_MASK = 0xFFFFFFFFFFFFFFFF


class ProgramView:
    """The :class:`~emu.debug.stepper.Stepper`'s code views: probe sites, shadowed
    bytes, the original instruction at an address, a function's range."""

    if TYPE_CHECKING:
        # what it uses of the Stepper (emu/debug/stepper.py): declared for the type
        # checker only, so every lookup still finds the one definition
        machine: Machine
        disasm: ProgramDisassembler
        plt: PltNames
        _sites: tuple[int, dict] | None  # (uprobes in the tree, {vaddr: Uprobe})

        def symbol(self, addr: int) -> tuple[str, int] | None: ...

    def probe_sites(self) -> dict:
        """``{vaddr: Uprobe}`` for every registered uprobe mapped in the process
        (cached until the text or the uprobes tree changes)."""
        up = self.machine.uprobes
        if self._sites is not None and self._sites[0] == len(up.tree):
            return self._sites[1]
        proc = self.machine.process
        out = {}
        for uprobe in list(up.tree.values()):
            for vaddr in up.vaddr_of(proc, uprobe.file, uprobe.offset):
                out[vaddr] = uprobe
        self._sites = (len(up.tree), out)
        return out

    def shadows(self, addr: int = 0, n: int = 1 << 64) -> list[tuple[int, bytes, str]]:
        """``[(address, program bytes, what)]`` where the kernel model changed the
        process's memory, for the ones reaching into ``[addr, addr + n)``: each probe
        site holding its int3 (the probed instruction from the file, as the uprobe
        copied it) or its optimized call (the whole nop), each return address the
        uretprobe hijacked on a stack (the original return address)."""
        m = self.machine
        out = []
        for vaddr, uprobe in self.probe_sites().items():
            if not addr - 16 < vaddr < addr + n:
                continue
            orig = uprobe.file.read(uprobe.offset, MAX_INSN_BYTES)
            call_size = optimized_call_size(m, uprobe, vaddr)
            optimized = call_size is not None
            size = call_size if call_size is not None else self.disasm.decode_bytes(vaddr, orig).size
            try:
                now = m.mem.read(vaddr, size)
            except GuestFault:
                continue
            if now != orig[:size] and (optimized or now[:1] == b"\xcc"):
                out.append((vaddr, orig[:size], "a probed instruction"))
        return out + [
            (slot, ret, "a hijacked return address")
            for slot, ret in self._hijacked_slots()
            if addr - 8 < slot < addr + n
        ]

    def _hijacked_slots(self) -> list[tuple[int, bytes]]:
        """Stack slots holding the uretprobe trampoline in place of a return address."""
        m = self.machine
        tramp_vaddr = trampoline_vaddr(m.process)
        if tramp_vaddr is None:
            return []
        tramp = tramp_vaddr.to_bytes(8, "little")
        out = []
        for task in m.process.tasks:
            for ri in reversed(pending_returns(task) or ()):  # oldest first
                try:
                    if m.mem.read(ri.stack, 8) == tramp:
                        out.append((ri.stack, (ri.orig_ret_vaddr & _MASK).to_bytes(8, "little")))
                except GuestFault:
                    continue
        return out

    def read_program(self, addr: int, n: int) -> bytes:
        """``n`` bytes at ``addr`` as the program has them (see :meth:`shadows`); the
        raw bytes are ``machine.mem.read``.  Raises GuestFault where nothing is mapped."""
        data = bytearray(self.machine.mem.read(addr, n))
        for where, prog, _ in self.shadows(addr, n):
            lo, hi = max(addr, where), min(addr + n, where + len(prog))
            if lo < hi:
                data[lo - addr : hi - addr] = prog[lo - where : hi - where]
        return bytes(data)

    def write_program(self, addr: int, data: bytes) -> None:
        """A debugger write (ptrace POKEDATA: FOLL_FORCE, into the process's copy).
        Where the kernel model changed memory (:meth:`shadows`) the write may only
        repeat the program's bytes, which stay shadowed: changing a probed instruction
        would leave the probe executing the file's copy out of line (or, over the int3,
        silently disarm it), and changing a hijacked return address would lose the
        return instance.  Raises StepperError then, GuestFault where nothing is mapped."""
        data = bytes(data)
        end = addr + len(data)
        keep = []
        for where, prog, what in self.shadows(addr, len(data)):
            lo, hi = max(addr, where), min(end, where + len(prog))
            if lo >= hi:
                continue
            if data[lo - addr : hi - addr] != prog[lo - where : hi - where]:
                raise StepperError(f"Cannot write {where:#x}: it would change {what} the uprobes model keeps there.")
            keep.append((lo, hi))
        pos = addr
        for lo, hi in sorted(keep) + [(end, end)]:
            if pos < lo:
                self.machine.mem.text_poke(pos, data[pos - addr : lo - addr], count=False)
            pos = max(pos, hi)

    def _text_written(self, start: int, end: int) -> None:
        self._sites = None

    def original_insn(self, addr: int) -> Insn:
        """The instruction the unprobed program has at ``addr``: a uprobe site is
        decoded from the file bytes instead of its int3 / optimized call."""
        uprobe = self.probe_sites().get(addr)
        if uprobe is not None:
            return self.disasm.decode_bytes(addr, uprobe.file.read(uprobe.offset, 15))
        return self.disasm.decode(addr)

    def function_range(self, addr: int) -> tuple[str, int, int]:
        """``(name, start, end)`` of the function symbol containing ``addr``."""
        hit = self.symbol(addr)
        vma = self.machine.mem.find_vma(addr)
        if hit is None or vma is None or vma.file is None:
            raise StepperError(f"No function contains specified address {addr:#x}.")
        name, off = hit
        start = addr - off
        size = self.plt.size(addr)
        if size is not None:
            return name, start, start + size  # a PLT stub: its entry
        elf = vma.file.elf
        if elf is None:  # a symbol names it, so the file is an ELF image
            raise StepperError(f"No function contains specified address {addr:#x}.")
        bias = getattr(vma.file, "load_bias", 0)
        sym = elf.symbols.get(name)
        end = start + sym.size if sym is not None and sym.size else 0
        if not end:
            # an unsized label: up to the next code symbol, or the end of the mapping
            end = vma.end
            for s in elf.all_symbols:
                v = s.value + bias
                if start < v < end and symbol_of(self.machine, v) == (s.name, 0):
                    end = v
        return name, start, end


class ProgramDisassembler(Disassembler):
    """A disassembler of the program's own bytes (``read(addr, n)``, e.g.
    :meth:`Stepper.read_program`): a probe site decodes as the probed instruction;
    ``symbol(addr)`` (optional) names addresses as the debugger does (PLT stubs)."""

    def __init__(self, machine, read, symbol=None):
        super().__init__(machine)
        self._read = read
        self._symbol = symbol

    def symbol(self, addr: int) -> tuple[str, int] | None:
        """``symbol(addr)`` when given (the stepper's: PLT stubs as ``malloc@plt``)."""
        return self._symbol(addr) if self._symbol is not None else super().symbol(addr)

    def symbolize(self, addr: int) -> str | None:
        if self._symbol is None:
            return super().symbolize(addr)
        hit = self._symbol(addr)
        if hit is None or not hit[0].endswith("@plt"):
            return super().symbolize(addr)
        return f"{hit[0]}+{hit[1]:#x}" if hit[1] else hit[0]

    def symbol_header(self, addr: int) -> str | None:
        hit = self.symbol(addr)
        if hit is None or hit[1] != 0:
            return None
        return f"{addr:016x} <{hit[0]}>:"

    def _fetch(self, addr: int) -> bytes:
        try:
            return self._read(addr, MAX_INSN_BYTES)
        except GuestFault:
            pass
        vma = self.mem.find_vma(addr)
        if vma is None:
            raise GuestFault(addr, "read")
        return self._read(addr, min(MAX_INSN_BYTES, vma.end - addr))
