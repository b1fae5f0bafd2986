"""Instruction stepping: an engine (:class:`Stepper`) and a gdb-like shell on top of it
(:class:`StepperShell`, the ``uprobe-emu step`` command).

Engine and UI are split as in CPython's bdb/pdb: the engine owns the stop decisions, the
breakpoint table and the frames; the shell turns commands into engine verbs and text.

**The kernel model's transitional states are never a stop.**  A probed instruction is
stepped as the unprobed one would be: its uprobe handlers run exactly once, and the step
ends where the original instruction would have put rip.  What the kernel does in between
(the ``int3`` trap, an out-of-line step in the ``[uprobes]`` XOL page, the uretprobe
trampoline, the ``call`` into an optimized probe's ``[uprobes-trampoline]``) is executed
through with further single instructions, counted in :attr:`Stepper.hidden_insns`, not in
:attr:`Stepper.insns`.

**Breakpoints are not uprobes.**  They never write guest memory and never show up in the
uprobes counters: each enabled breakpoint address gets a machine code hook bounded to that
one address (``Machine.add_code_hook``: the rest of the guest runs at full speed, and the
machine drops the translations of the address when the hook is added or removed).
Resuming from a breakpoint address first single-steps off it, as gdb does.

Single steps are ``Machine.step()``: one instruction, its traps and faults handled by the
machine exactly as in ``Machine.run``.  No Python per-instruction hook is installed.
A ``rep``-prefixed string instruction steps
once per iteration, as the hardware's trap flag does.

The shell follows gdb 13's output for the same commands (checked against a real gdb in
tests/test_stepper.py) with these differences: each stop is followed by the next
instruction (``=> 0x401005 <f+5>:\tmov ...``, as gdb's ``display/i $pc`` shows it), in
capstone's Intel syntax; ``b SYMBOL`` breaks at the symbol's first instruction (gdb skips a
``push rbp; mov rbp, rsp`` prologue); ``info registers`` lists no k0-k7 (the emulated CPU
has no AVX-512); errors never abort a command file.

Frames (``bt``, ``finish``) follow the frame-pointer chain (``push rbp; mov rbp, rsp``
prologues), with a prologue check for the innermost frame; frameless functions are
assumed not to have pushed anything.  A saved return address that is the uretprobe
trampoline is replaced by the return instance's original return address.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from emu.frontends.cli import make_machine
from emu.disasm import Disassembler, Insn, annotation, symbol_of
from emu.errors import EmuError, SymbolError
from emu.memory import PROT_EXEC, GuestFault
from emu.regs import GPR_NAMES, PtRegs, format_eflags
from emu.signals import SIGNALS, RunResult, signal_name

_MASK = 0xFFFFFFFFFFFFFFFF
_TRANSITIONAL_VMAS = ("[uprobes]", "[uprobes-trampoline]")
_STUCK = 100_000                         # hidden instructions before we call a step stuck
DEFAULT_TIMEOUT = 120.0


class StepperError(EmuError):
    """A stepper command that cannot be done (one line for the user)."""


# =============================================================================== data

@dataclass(eq=False)
class Breakpoint:
    """A stepper breakpoint (never a uprobe; guest memory is not changed)."""

    number: int
    address: int
    location: str
    enabled: bool = True
    hits: int = 0


@dataclass
class StopEvent:
    """Why and where execution stopped.

    ``reason``: ``"step"`` (a stepping verb reached its goal: step, step_over, finish,
    run_until), ``"breakpoint"``, ``"exit"``, ``"signal"`` (the guest died of it) or
    ``"stopped"`` (instruction budget, timeout, Ctrl-C).  ``verb`` names the verb that ran.
    ``insns`` is the exact number of guest instructions this verb executed when it
    single-stepped (None after a free run).  ``result`` is the machine's RunResult for
    exit/signal/stopped.
    """

    reason: str
    rip: int | None
    symbol: str | None
    verb: str = "step"
    breakpoint: Breakpoint | None = None
    insns: int | None = None
    result: RunResult | None = None
    detail: str = ""

    @property
    def exit_code(self) -> int | None:
        return self.result.exit_code if self.result is not None else None

    @property
    def signal(self) -> int | None:
        return self.result.signal if self.result is not None else None


@dataclass
class Frame:
    """One ``bt`` line.  ``pc`` is the real return address for outer frames (never the
    uretprobe trampoline; ``uretprobe`` tells that it came from a return instance)."""

    level: int
    pc: int
    function: str | None
    uretprobe: bool = False
    slot: int | None = None             # where the return address into this frame is saved


# =============================================================================== engine

class Stepper:
    """The stepping core over one :class:`emu.machine.Machine`.

    Args:
        machine: the machine to drive (not yet run, or stopped by a previous verb).
        max_insns: instruction budget of each free run (``cont``/``finish``/...); None
            for none (Unicorn's counter slows free runs down about tenfold).
        timeout: wall-clock seconds of each free run; None for none.
    """

    def __init__(self, machine, *, max_insns: int | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT):
        self.machine = machine
        self.max_insns = max_insns
        self.timeout = timeout
        self.disasm = Disassembler(machine)
        self.breakpoints: dict[int, Breakpoint] = {}
        self.insns = 0                   # guest instructions single-stepped, exact
        self.hidden_insns = 0            # kernel-model (transitional) instructions stepped
        self.last_event: StopEvent | None = None
        self.exited = bool(machine.exited)
        self._next_number = 1
        self._hooks: dict[int, tuple] = {}   # address -> (Uc, hook handle)
        self._goal: tuple[int, int | None] | None = None
        self._armed = False
        self._hit: tuple[str, Breakpoint | None] | None = None
        self._sites: tuple[int, dict] | None = None  # (uprobes in the tree, {vaddr: Uprobe})
        machine.mem.text_write_listeners.append(self._text_written)

    # ------------------------------------------------------------------ template methods
    def on_stop(self, event: StopEvent) -> None:
        """Called with every stop event, before the verb returns it.  Override it."""

    # ------------------------------------------------------------------ state
    @property
    def alive(self) -> bool:
        return not self.exited

    @property
    def rip(self) -> int:
        return self.machine.pc

    def regs(self) -> PtRegs:
        """The task's registers now (a snapshot; see :meth:`set_register`)."""
        self._require_alive("The program has no registers now.")
        return self.machine.read_regs()

    def set_register(self, name: str, value: int) -> None:
        """Write one register (gdb's ``set $reg = value``); sub-registers (``eax``,
        ``ax``, ``al``, ``ah``, ``r8d``...) change only their bits."""
        self._require_alive("The program has no registers now.")
        name = _ALIASES.get(name, name)
        if name in _SEGMENTS:
            raise StepperError(f"Register ${name} is fixed for a 64-bit Linux task.")
        full, shift, bits = _subreg(name)
        if full is None:
            raise StepperError(f"Invalid register `{name}'")
        regs = self.machine.read_regs()
        mask = ((1 << bits) - 1) << shift
        old = getattr(regs, full)
        setattr(regs, full, (old & ~mask) | ((value << shift) & mask))
        self.machine.write_regs(regs)

    def symbolize(self, addr: int) -> str | None:
        """``func+0xoff`` for a guest code address (ELF symbols), else None."""
        return self.disasm.symbolize(addr)

    # ------------------------------------------------------------------ locations
    def resolve(self, target) -> int:
        """An address from an int, ``"SYMBOL"``, ``"SYMBOL+OFF"`` or ``"*EXPR"``."""
        if isinstance(target, int):
            return target & _MASK
        text = str(target).strip()
        if text.startswith("*"):
            return self.evaluate(text[1:]) & _MASK
        name, plus, off = text.partition("+")
        try:
            base = self.machine.resolve(name.strip())
        except SymbolError:
            raise StepperError(f'Function "{name.strip()}" not defined.') from None
        if plus:
            try:
                base += int(off.strip(), 0)
            except ValueError:
                raise StepperError(f"bad offset in {text!r}") from None
        return base

    def evaluate(self, expr: str) -> int:
        """A small gdb-like expression: terms ``$reg``, numbers, symbols (``&sym`` or
        ``sym``: its address), joined by ``+`` and ``-``."""
        return _evaluate(self, expr)[0]

    # ------------------------------------------------------------------ breakpoints
    def break_at(self, target) -> Breakpoint:
        """Add a breakpoint at a symbol, ``symbol+off``, ``*expr`` or an address."""
        addr = self.resolve(target)
        vma = self.machine.mem.find_vma(addr)
        if vma is None or not vma.prot & PROT_EXEC:
            raise StepperError(f"Cannot insert breakpoint at {addr:#x}: not in executable memory.")
        if vma.name in _TRANSITIONAL_VMAS:
            raise StepperError(f"Cannot insert breakpoint at {addr:#x}: it is in {vma.name}, "
                               "which stepping executes through.")
        loc = target if isinstance(target, str) else f"*{addr:#x}"
        bp = Breakpoint(self._next_number, addr, loc)
        self._next_number += 1
        self.breakpoints[bp.number] = bp
        self._sync_hooks()
        return bp

    def delete(self, number: int | None = None) -> None:
        """Delete breakpoint ``number``, or all of them."""
        if number is None:
            self.breakpoints.clear()
        elif self.breakpoints.pop(number, None) is None:
            raise StepperError(f"No breakpoint number {number}.")
        self._sync_hooks()

    def enable(self, number: int, enabled: bool = True) -> None:
        bp = self.breakpoints.get(number)
        if bp is None:
            raise StepperError(f"No breakpoint number {number}.")
        bp.enabled = enabled
        self._sync_hooks()

    def _sync_hooks(self) -> None:
        # hooks live on the main process's CPU (like gdb's default: the parent is
        # followed across fork); each remembers the Uc it was added to
        m = self.machine
        proc = getattr(m, "main_process", m.process)
        want = {bp.address for bp in self.breakpoints.values() if bp.enabled}
        if self._goal is not None:
            want.add(self._goal[0])
        for addr in [a for a in self._hooks if a not in want]:
            m.remove_hook(self._hooks.pop(addr))
        for addr in want:
            if addr not in self._hooks:
                self._hooks[addr] = m.add_code_hook(self._on_code, addr, addr, process=proc)

    def _on_code(self, addr, _size):
        if not self._armed:
            return
        for bp in self.breakpoints.values():
            if bp.address == addr and bp.enabled:
                bp.hits += 1
                self._hit = ("breakpoint", bp)
                self.machine.stop("breakpoint")
                return
        goal = self._goal
        if goal is not None and addr == goal[0] and \
                (goal[1] is None or self.machine.reg_read("rsp") >= goal[1]):
            self._hit = ("goal", None)
            self.machine.stop("goal")

    # ------------------------------------------------------------------ verbs
    def step(self, count: int = 1) -> StopEvent:
        """Execute ``count`` guest instructions (gdb ``stepi``).  A probed instruction
        counts as one: its handlers run once and the step lands where the unprobed
        instruction would."""
        self._require_alive()
        done = 0
        for i in range(count):
            before = self.insns
            res = self._step_insn()
            done += self.insns - before
            if res is not None:
                return self._terminal(res, "step", insns=done)
            if i + 1 < count:
                bp = self._enabled_bp_at(self.rip)
                if bp is not None:
                    bp.hits += 1
                    return self._event("breakpoint", "step", bp=bp, insns=done)
        return self._event("step", "step", insns=done)

    def step_over(self, count: int = 1) -> StopEvent:
        """Like :meth:`step`, but a ``call`` runs until it returns (gdb ``nexti``),
        through a pending uretprobe trampoline too."""
        self._require_alive()
        ev = None
        for _ in range(count):
            insn = self.original_insn(self.rip)
            if insn.mnemonic == "call":
                ev = self._resume("step_over", goal=(insn.next, self.machine.read_regs().rsp))
            else:
                ev = self.step()
                ev.verb = "step_over"
            if ev.reason != "step":
                return ev
        return ev

    def run_until(self, target) -> StopEvent:
        """Run until execution reaches ``target`` (a symbol or an address) or a
        breakpoint; from ``target`` itself, until it is reached again."""
        self._require_alive()
        return self._resume("run_until", goal=(self.resolve(target), None))

    def finish(self) -> StopEvent:
        """Run until the current function returns to its caller (the frame's return
        address with the stack popped past it; uretprobe-aware)."""
        self._require_alive()
        return self._resume("finish", goal=self.finish_target())

    def finish_target(self) -> tuple[int, int]:
        """``(return address, stack pointer after the return)`` of the current frame."""
        frames = self.backtrace(max_frames=2)
        if len(frames) < 2:
            raise StepperError('"finish" not meaningful in the outermost frame.')
        return frames[1].pc, frames[0].slot + 8

    def cont(self) -> StopEvent:
        """Run until a breakpoint, the end of the guest, the budget or the timeout."""
        self._require_alive()
        return self._resume("cont")

    # ------------------------------------------------------------------ machinery
    def _require_alive(self, message: str = "The program is not being run.") -> None:
        if self.exited:
            raise StepperError(message)

    def _enabled_bp_at(self, addr: int) -> Breakpoint | None:
        return next((bp for bp in self.breakpoints.values()
                     if bp.address == addr and bp.enabled), None)

    def _event(self, reason: str, verb: str, *, bp=None, insns=None, result=None,
               detail: str = "") -> StopEvent:
        rip = None if self.exited else self.rip
        sym = self.symbolize(rip) if rip is not None else None
        ev = StopEvent(reason, rip, sym, verb, bp, insns, result, detail)
        self.last_event = ev
        self.on_stop(ev)
        return ev

    def _terminal(self, result: RunResult, verb: str, insns=None) -> StopEvent:
        if result.reason in ("exit", "signal"):
            self.exited = True
            ev = StopEvent(result.reason, result.rip, result.rip_symbol, verb, None, insns, result,
                           result.describe())
            self.last_event = ev
            self.on_stop(ev)
            return ev
        self._settle()
        return self._event("stopped", verb, insns=insns, result=result, detail=result.describe())

    def _goal_met(self, goal) -> bool:
        addr, min_rsp = goal
        return self.rip == addr and (min_rsp is None or self.machine.read_regs().rsp >= min_rsp)

    def _resume(self, verb: str, goal=None) -> StopEvent:
        """Free-run with breakpoints (and the verb's goal) armed."""
        m = self.machine
        insns = None
        rip = self.rip
        if self._enabled_bp_at(rip) is not None or (goal is not None and goal[0] == rip):
            before = self.insns
            res = self._step_insn()          # step off without triggering it
            insns = self.insns - before
            if res is not None:
                return self._terminal(res, verb, insns=insns)
            if goal is not None and self._goal_met(goal):
                return self._event("step", verb, insns=insns)
        self._goal = goal
        self._hit = None
        self._sync_hooks()
        self._armed = True
        try:
            result = m.run(max_insns=self.max_insns, timeout=self.timeout)
        finally:
            self._armed = False
            self._goal = None
            self._sync_hooks()
        if result.reason == "stopped" and self._hit is not None:
            kind, bp = self._hit
            self._hit = None
            if kind == "breakpoint":
                return self._event("breakpoint", verb, bp=bp)
            return self._event("step", verb)
        return self._terminal(result, verb)

    def _transitional(self, rip: int) -> bool:
        """rip is somewhere the kernel model, not the guest program, put it."""
        utask = self.machine.task.utask
        if utask is not None and utask.state == "sstep":    # kernel_model.uprobes.UTASK_SSTEP
            return True
        vma = self.machine.mem.find_vma(rip)
        return vma is not None and vma.special and vma.name in _TRANSITIONAL_VMAS

    def _settle(self) -> None:
        """After a free run stopped at an arbitrary point: leave any transitional state."""
        n = 0
        while not self.exited and self._transitional(self.rip):
            res = self._exec1()
            self.hidden_insns += 1
            n += 1
            if res is not None:
                self._terminal(res, "settle")
                return
            if n > _STUCK:
                raise StepperError(f"stuck in a kernel-model state at {self.rip:#x}")

    def _step_insn(self) -> RunResult | None:
        """One guest instruction, executing any transitional state it leads into.
        Returns the run result when the guest ended, else None."""
        m = self.machine
        c = m.counters
        start = self.rip
        try:
            orig = self.original_insn(start)
            patched = m.mem.read(start, orig.size) != orig.bytes
        except GuestFault:
            orig, patched = None, False
        hits = c.uprobe_hits
        traps = c.bp_traps
        res = self._exec1()
        if res is not None:
            if res.reason == "exit":
                self.insns += 1             # exit/exit_group retired; a faulting insn did not
            return res
        retries = n = 0
        while True:
            rip = self.rip
            if self._transitional(rip):
                pass
            elif patched and start < rip < start + orig.size:
                pass                        # between the lea and the call of an nop10 site
            elif rip == start and patched and c.bp_traps > traps and c.uprobe_hits == hits \
                    and retries < 3:
                retries += 1                # the kernel restarted the probed insn
            elif rip == start and orig is not None and orig.mnemonic.startswith("rep") \
                    and m.read_regs().rcx == 0 and n == 0:
                pass                        # Unicorn's extra exit step of a finished rep
            else:
                break
            n += 1
            if n > _STUCK:
                raise StepperError(f"stuck in a kernel-model state at {rip:#x}")
            res = self._exec1()
            self.hidden_insns += 1
            if res is not None:
                return res
        self.insns += 1
        return None

    def _exec1(self) -> RunResult | None:
        """Exactly one instruction of the current task (:meth:`Machine.step`: the
        machine's own trap and fault handling).  Returns the run result when the guest
        ended, else None."""
        return self.machine.step()

    # ------------------------------------------------------------------ code
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
        hit = symbol_of(self.machine, addr)
        vma = self.machine.mem.find_vma(addr)
        if hit is None or vma is None or vma.file is None:
            raise StepperError(f"No function contains specified address {addr:#x}.")
        name, off = hit
        start = addr - off
        bias = getattr(vma.file, "load_bias", 0)
        sym = vma.file.elf.symbols.get(name)
        end = start + sym.size if sym is not None and sym.size else 0
        if not end:
            # an unsized label: up to the next code symbol, or the end of the mapping
            end = vma.end
            for s in vma.file.elf.all_symbols:
                v = s.value + bias
                if start < v < end and symbol_of(self.machine, v) == (s.name, 0):
                    end = v
        return name, start, end

    # ------------------------------------------------------------------ frames
    def backtrace(self, max_frames: int = 64) -> list[Frame]:
        """Frames, innermost first, from the frame-pointer chain; a saved return address
        that is the uretprobe trampoline shows the return instance's original one."""
        self._require_alive("No stack.")
        m = self.machine
        mem = m.mem
        regs = m.read_regs()
        rip = regs.rip
        hit = symbol_of(m, rip)
        frames = [Frame(0, rip, hit[0] if hit else None)]
        slot, rbp = self._frame0_slot(regs)
        tramp, pending = self._pending_returns()
        used: set = set()
        while len(frames) < max_frames and slot is not None and frames[-1].function != "main":
            # like gdb (backtrace past-main off): the C runtime's frames are not shown
            try:
                ret = mem.read_u64(slot)
            except GuestFault:
                break
            via = False
            if tramp is not None and ret == tramp:
                ri = next((r for r in pending if r.stack == slot and id(r) not in used), None)
                if ri is None:
                    ri = next((r for r in pending if id(r) not in used), None)
                if ri is None:
                    break
                used.add(id(ri))
                ret, via = ri.orig_ret_vaddr, True
            vma = mem.find_vma(ret)
            if vma is None or not vma.prot & PROT_EXEC:
                break
            frames[-1].slot = slot
            # the call is before the return address: name the caller by ret - 1
            name = symbol_of(m, ret - 1)
            frames.append(Frame(len(frames), ret, name[0] if name else None, via))
            if not rbp or rbp <= slot:
                break
            try:
                slot, rbp = rbp + 8, mem.read_u64(rbp)
            except GuestFault:
                break
        return frames

    def _pending_returns(self):
        mm = self.machine.process.mm_uprobes
        utask = self.machine.task.utask
        if mm is None or mm.xol_area is None or utask is None:
            return None, []
        return mm.xol_area.vaddr, list(reversed(utask.return_instances))   # newest first

    def _frame0_slot(self, regs) -> tuple[int | None, int]:
        """Where frame 0's return address is saved, and the caller's rbp."""
        rip, rsp, rbp = regs.rip, regs.rsp, regs.rbp
        try:
            insn = self.original_insn(rip)
        except GuestFault:
            return None, 0
        if insn.mnemonic in ("ret", "retq"):
            return rsp, rbp
        hit = symbol_of(self.machine, rip)
        pro = None
        if hit is not None:
            try:
                pro = self._prologue(rip - hit[1])
            except GuestFault:
                pro = None
        if pro is not None:
            push_at, mov_at, _ = pro
            if rip <= push_at:
                return rsp, rbp
            if rip <= mov_at:                # rbp pushed, not yet the frame pointer
                return rsp + 8, rbp
            return self._rbp_slot(rbp)
        # No prologue at the symbol: a frameless function, or a label inside a function
        # (every label of an assembly guest is a symbol).  Trust [rsp] if it looks like
        # a return address, else the frame pointer.
        try:
            if self._is_return_address(self.machine.mem.read_u64(rsp)):
                return rsp, rbp
        except GuestFault:
            pass
        return self._rbp_slot(rbp)

    def _is_return_address(self, addr: int) -> bool:
        """``addr`` follows a call instruction (or is the uretprobe trampoline)."""
        tramp, _ = self._pending_returns()
        if tramp is not None and addr == tramp:
            return True
        vma = self.machine.mem.find_vma(addr)
        if vma is None or not vma.prot & PROT_EXEC:
            return False
        for k in (5, 2, 3, 6, 7, 4):
            try:
                insn = self.original_insn(addr - k)
            except GuestFault:
                continue
            if insn.mnemonic == "call" and insn.size == k:
                return True
        return False

    def _rbp_slot(self, rbp: int) -> tuple[int | None, int]:
        try:
            return rbp + 8, self.machine.mem.read_u64(rbp)
        except GuestFault:
            return None, 0

    def _prologue(self, start: int):
        """``(push_at, mov_at, body)`` for ``[endbr64;] push rbp; mov rbp, rsp``."""
        insn = self.original_insn(start)
        if insn.mnemonic == "endbr64":
            insn = self.original_insn(insn.next)
        if (insn.mnemonic, insn.op_str) != ("push", "rbp"):
            return None
        mov = self.original_insn(insn.next)
        if (mov.mnemonic, mov.op_str) != ("mov", "rbp, rsp"):
            return None
        return insn.address, mov.address, mov.next

    # ------------------------------------------------------------------ text views
    def format_registers(self, names=None) -> str:
        """``info registers`` exactly as gdb 13 lays it out (see :func:`format_register`)."""
        regs = self.regs()
        names = list(names) if names else list(INFO_REGISTERS)
        return "\n".join(self._register_line(n, regs) for n in names)

    def _register_line(self, name: str, regs) -> str:
        key = name[1:] if name.startswith("$") else name
        value, kind = _register_value(key, regs)
        if kind is None:
            raise StepperError(f"Invalid register `{key}'")
        return format_register(key, value, kind, self._code_label)

    def _code_label(self, addr: int) -> str | None:
        return _gdb_label(self.machine, addr)


# =============================================================================== registers

# gdb's amd64 `info registers` set (general group) in order; fs_base/gs_base print when
# named (gdb 13.1 on Linux keeps them out of the default list), k0-k7 exist only on
# AVX-512 targets and the emulated CPU has none.
INFO_REGISTERS = GPR_NAMES[:16] + ("rip", "eflags", "cs", "ss", "ds", "es", "fs", "gs")
_SEGMENTS = {"cs": 0x33, "ss": 0x2B, "ds": 0, "es": 0, "fs": 0, "gs": 0}
_ALIASES = {"pc": "rip", "sp": "rsp", "fp": "rbp", "ps": "eflags"}
_KINDS = {"rbp": "data_ptr", "rsp": "data_ptr", "rip": "code_ptr", "eflags": "flags"}
_SUB32 = {"eax": "rax", "ebx": "rbx", "ecx": "rcx", "edx": "rdx", "esi": "rsi", "edi": "rdi",
          "ebp": "rbp", "esp": "rsp", **{f"r{i}d": f"r{i}" for i in range(8, 16)}}
_SUB16 = {"ax": "rax", "bx": "rbx", "cx": "rcx", "dx": "rdx", "si": "rsi", "di": "rdi",
          "bp": "rbp", **{f"r{i}w": f"r{i}" for i in range(8, 16)}}
_SUB8 = {"al": "rax", "bl": "rbx", "cl": "rcx", "dl": "rdx", "sil": "rsi", "dil": "rdi",
         "bpl": "rbp", "spl": "rsp", **{f"r{i}l": f"r{i}" for i in range(8, 16)}}
_SUB8H = {"ah": "rax", "bh": "rbx", "ch": "rcx", "dh": "rdx"}


def _subreg(name: str) -> tuple[str | None, int, int]:
    """(full register, shift, bits) for a register or sub-register name."""
    if name in GPR_NAMES:
        return name, 0, 64
    for table, shift, bits in ((_SUB32, 0, 32), (_SUB16, 0, 16), (_SUB8, 0, 8), (_SUB8H, 8, 8)):
        if name in table:
            return table[name], shift, bits
    return None, 0, 0


def _register_value(name: str, regs) -> tuple[int, str | None]:
    """(value, gdb type kind) of a register name as gdb spells it."""
    full_name = _ALIASES.get(name, name)
    if full_name in _SEGMENTS:
        return _SEGMENTS[full_name], "int32"
    full, shift, bits = _subreg(full_name)
    if full is None:
        return 0, None
    value = (getattr(regs, full) >> shift) & ((1 << bits) - 1)
    if bits == 64:
        return value, _KINDS.get(full, "int64")
    return value, f"int{bits}"


def _signed(value: int, bits: int) -> int:
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
    return str(_signed(value, int(kind[3:])))


def register_line(name: str, value: int, label=None) -> str:
    """``info registers`` line of a full register (no sub-register names): the kind
    follows gdb's amd64 description."""
    kind = "int32" if name in _SEGMENTS else _KINDS.get(name, "int64")
    return format_register(name, value, kind, label)


def format_register(name: str, value: int, kind: str, label=None) -> str:
    """One ``info registers`` line: the name padded to column 15, the raw hex value
    from column 15, the natural value from column 35 (at least one space before each)."""
    line = name.ljust(15) if len(name) < 15 else name + " "
    line += f"{value:#x}"
    line += " " * max(1, 34 - len(line) + 1)
    return line + natural(value, kind, label)


def _gdb_label(machine, addr: int) -> str | None:
    """gdb's ``sym`` / ``sym+N`` (decimal offset) for code and data symbols."""
    vma = machine.mem.find_vma(addr)
    if vma is None or vma.file is None or vma.file.elf is None:
        return None
    elf = vma.file.elf
    link = addr - getattr(vma.file, "load_bias", 0)
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


# =============================================================================== expressions

def _evaluate(stepper: Stepper, expr: str) -> tuple[int, str]:
    """(value, gdb type kind) of ``term (+|- term)*``."""
    text = expr.strip()
    if not text:
        raise StepperError("Argument required (expression to compute).")
    terms, ops, cur = [], ["+"], ""
    depth = 0
    for ch in text:
        if ch in "+-" and cur.strip() and depth == 0:
            terms.append(cur.strip())
            ops.append(ch)
            cur = ""
        else:
            cur += ch
    terms.append(cur.strip())
    total, kinds = 0, []
    for op, term in zip(ops, terms):
        neg = False
        while term.startswith("-"):
            neg, term = not neg, term[1:].strip()
        value, k = _term(stepper, term)
        if neg:
            value = -value
        kinds.append(k)
        total = total + value if op == "+" else total - value
    # gdb's arithmetic: a pointer keeps its type, else the widest integer wins
    kind = next((k for k in kinds if k.endswith("_ptr")), None)
    if kind is None:
        kind = kinds[0] if len(kinds) == 1 else f"int{max(int(k[3:]) for k in kinds if k.startswith('int'))}" \
            if all(k.startswith("int") for k in kinds) else "int64"
    return total & _MASK, kind


def _term(stepper: Stepper, term: str) -> tuple[int, str]:
    if not term:
        raise StepperError("A syntax error in expression.")
    if term.startswith("(") and term.endswith(")"):
        return _evaluate(stepper, term[1:-1])
    if term.startswith("$"):
        regs = stepper.regs()
        value, kind = _register_value(term[1:], regs)
        if kind is None:
            raise StepperError(f"Invalid register `{term[1:]}'")
        return value, kind
    try:
        value = int(term, 0)
    except ValueError:
        pass
    else:                           # gdb types a literal as int when it fits, else long
        return value, "int32" if value < 1 << 31 else "int64"

    name = term[1:] if term.startswith("&") else term
    try:
        return stepper.machine.resolve(name), "code_ptr"
    except SymbolError:
        raise StepperError(f'No symbol "{name}" in current context.') from None


# =============================================================================== the shell

_SIGNAL_TEXT = {"SIGSEGV": "Segmentation fault", "SIGILL": "Illegal instruction",
                "SIGTRAP": "Trace/breakpoint trap", "SIGFPE": "Arithmetic exception",
                "SIGBUS": "Bus error", "SIGABRT": "Aborted", "SIGKILL": "Killed",
                "SIGSYS": "Bad system call", "SIGTERM": "Terminated", "SIGINT": "Interrupt",
                "SIGPIPE": "Broken pipe", "SIGALRM": "Alarm clock"}
_X_SIZES = {"b": 1, "h": 2, "w": 4, "g": 8}
_X_PER_LINE = {1: 8, 2: 8, 4: 4, 8: 2}

HELP = """\
Commands (gdb-like):
  si [N], stepi [N]         one guest instruction (a probed one counts as one)
  ni [N], nexti [N]         same, but a call runs until it returns
  c, continue               run until a breakpoint or the end
  run, starti               gdb compatibility: the guest waits at its entry already
  finish                    run until the current function returns
  until LOCATION            run until LOCATION (also: advance)
  b, break SYMBOL|*ADDR     breakpoint (never a uprobe; memory is not changed)
  delete [N...]             delete breakpoints (all without N)
  info registers [REG...]   registers in gdb's layout (i r)
  info breakpoints          breakpoints (i b)
  x/NFU ADDR                memory: F = x d u i, U = b h w g (x/8bx, x/4gx, x/5i $pc)
  disas [LOCATION]          the function, objdump-like, => marks rip
  bt, backtrace             frames (a pending uretprobe shows the real return address)
  p[/x] EXPR                print ($reg, numbers, symbols, + and -)
  set $REG = EXPR           write a register
  probe list|enable N|disable N    the uprobe consumers (-e events)
  q, quit                   leave"""


class StepperShell:
    """The ``uprobe-emu step`` command language over a :class:`Stepper`.

    ``execute(line)`` runs one command; output goes to ``out``, error lines to ``err``.
    Errors never stop the shell.
    """

    def __init__(self, stepper: Stepper, out=None, err=None):
        self.s = stepper
        self.m = stepper.machine
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.history = 0                     # gdb's $N value history counter
        self.quit = False
        self._x_last = ("x", 4)
        self.errors = 0
        self.interactive = False
        self._commands = {
            "si": self.cmd_stepi, "stepi": self.cmd_stepi,
            "ni": self.cmd_nexti, "nexti": self.cmd_nexti,
            "r": self.cmd_run, "run": self.cmd_run, "starti": self.cmd_starti,
            "c": self.cmd_continue, "cont": self.cmd_continue, "continue": self.cmd_continue,
            "finish": self.cmd_finish, "fin": self.cmd_finish,
            "until": self.cmd_until, "u": self.cmd_until, "advance": self.cmd_until,
            "b": self.cmd_break, "br": self.cmd_break, "break": self.cmd_break,
            "d": self.cmd_delete, "delete": self.cmd_delete,
            "i": self.cmd_info, "info": self.cmd_info,
            "disas": self.cmd_disas, "disassemble": self.cmd_disas,
            "bt": self.cmd_bt, "backtrace": self.cmd_bt, "where": self.cmd_bt,
            "p": self.cmd_print, "print": self.cmd_print,
            "set": self.cmd_set,
            "probe": self.cmd_probe,
            "q": self.cmd_quit, "quit": self.cmd_quit,
            "help": self.cmd_help, "h": self.cmd_help,
        }

    # ------------------------------------------------------------------ driver
    def execute(self, line: str) -> None:
        """Run one command line; an error prints one line on ``err``."""
        line = line.strip()
        if not line or line.startswith("#"):
            return
        head, _, rest = line.partition(" ")
        fmt = ""
        if "/" in head:
            head, fmt = head.split("/", 1)
        if head == "x":
            fn = self.cmd_x
        else:
            fn = self._commands.get(head)
        try:
            if fn is None:
                raise StepperError(f'Undefined command: "{head}".  Try "help".')
            if fmt and fn not in (self.cmd_x, self.cmd_print):
                raise StepperError(f'Undefined command: "{head}/{fmt}".  Try "help".')
            if fn in (self.cmd_x, self.cmd_print):
                fn(rest.strip(), fmt)
            else:
                fn(rest.strip())
        except (EmuError, GuestFault) as e:
            self.errors += 1
            msg = str(e) if isinstance(e, EmuError) else f"Cannot access memory at address {e.addr:#x}"
            self._flush()
            print(msg.splitlines()[0] if msg else type(e).__name__, file=self.err)
            self.err.flush()
        self._flush()

    def run_lines(self, lines) -> None:
        for line in lines:
            if self.quit:
                return
            self.execute(line)

    def interact(self, stream=None, prompt: str = "(uprobe-emu) ") -> None:
        """Read commands until EOF or ``q``; prompt only on a terminal."""
        stream = stream if stream is not None else sys.stdin
        tty = stream.isatty()
        self.interactive = tty
        if tty:
            try:
                import readline  # noqa: F401 - line editing and history for input()
            except ImportError:
                pass
        last = ""
        while not self.quit:
            try:
                if tty:
                    line = input(prompt)
                else:
                    line = stream.readline()
                    if not line:
                        break
            except EOFError:
                if tty:
                    print("quit", file=self.out)
                break
            except KeyboardInterrupt:
                print("Quit", file=self.out)
                continue
            if tty and not line.strip():
                line = last                      # gdb repeats the last command on Enter
            last = line
            self.execute(line)

    def _p(self, text: str = "") -> None:
        print(text, file=self.out)

    def _flush(self) -> None:
        try:
            self.out.flush()
        except (AttributeError, ValueError):
            pass

    # ------------------------------------------------------------------ stops
    def _where(self, rip: int) -> str:
        hit = symbol_of(self.m, rip)
        return f"{rip:#018x} in {hit[0] if hit else '??'} ()"

    def _xi_line(self, addr: int, current: bool) -> str:
        insn = self.s.disasm.decode(addr)
        label = _gdb_label(self.m, addr)
        mark = "=> " if current else "   "
        text = insn.text + annotation(insn, lambda a: _gdb_label(self.m, a))
        orig = self.s.original_insn(addr)
        if orig.bytes != insn.bytes[:orig.size]:
            text += f"        # uprobe site: {orig.text}"
        return f"{mark}{addr:#x}{f' <{label}>' if label else ''}:\t{text}"

    def report(self, ev: StopEvent) -> None:
        """Print a stop the way gdb does, followed by the next instruction."""
        if ev.reason == "exit":
            code = ev.exit_code or 0
            pid = getattr(self.m, "main_process", self.m.process).pid
            if code:
                self._p(f"[Inferior 1 (process {pid}) exited with code {code:02o}]")
            else:
                self._p(f"[Inferior 1 (process {pid}) exited normally]")
            return
        if ev.reason == "signal":
            name = signal_name(ev.signal)
            self._p()
            self._p(f"Program terminated with signal {name}, {_SIGNAL_TEXT.get(name, name)}.")
            self._p(f"[{ev.detail}]")
            return
        if ev.reason == "breakpoint":
            self._p()
            self._p(f"Breakpoint {ev.breakpoint.number}, {self._where(ev.rip)}")
        elif ev.reason == "stopped":
            self._p()
            self._p(f"Program stopped: {ev.detail}.")
            self._p(self._where(ev.rip))
        else:
            self._p(self._where(ev.rip))
        self._p(self._xi_line(ev.rip, True))

    def _guest_run(self, fn, *args) -> None:
        with self.m.interruptible():
            ev = fn(*args)
        self.report(ev)

    # ------------------------------------------------------------------ commands
    def _count(self, arg: str) -> int:
        if not arg:
            return 1
        n = self.s.evaluate(arg)
        if n <= 0 or n > 1 << 40:
            raise StepperError(f"bad count {arg!r}")
        return n

    def cmd_stepi(self, arg: str) -> None:
        self._guest_run(self.s.step, self._count(arg))

    def cmd_nexti(self, arg: str) -> None:
        self._guest_run(self.s.step_over, self._count(arg))

    def cmd_continue(self, arg: str) -> None:
        self.s._require_alive()
        self._p("Continuing.")
        self._guest_run(self.s.cont)

    def _not_started(self) -> None:
        if self.s.insns or self.s.hidden_insns or self.s.last_event is not None:
            raise StepperError("The program being debugged has been started already.")

    def cmd_run(self, arg: str) -> None:
        """gdb's ``run``: the guest is loaded and waits at its entry; run it."""
        self._not_started()
        self._guest_run(self.s.cont)

    def cmd_starti(self, arg: str) -> None:
        """gdb's ``starti``: the guest already waits at its first instruction."""
        self._not_started()
        self._p()
        self._p("Program stopped.")
        self._p(self._where(self.s.rip))
        self._p(self._xi_line(self.s.rip, True))

    def cmd_finish(self, arg: str) -> None:
        self.s._require_alive()
        self.s.finish_target()                   # the error, if any, comes first
        if self.interactive:                     # gdb prints this only from a terminal
            self._p(f"Run till exit from #0  {self._where(self.s.rip)}")
        self._guest_run(self.s.finish)

    def cmd_until(self, arg: str) -> None:
        if not arg:
            raise StepperError("Argument required (a location).")
        self._guest_run(self.s.run_until, arg)

    def cmd_break(self, arg: str) -> None:
        if not arg:
            self.s._require_alive()
            arg = f"*{self.s.rip:#x}"
        bp = self.s.break_at(arg)
        self._p(f"Breakpoint {bp.number} at {bp.address:#x}")

    def cmd_delete(self, arg: str) -> None:
        if not arg:
            self.s.delete()
            return
        for word in arg.split():
            try:
                n = int(word)
            except ValueError:
                raise StepperError(f"Convenience variable must have integer value.\n"
                                   f"bad breakpoint number: '{word}'") from None
            self.s.delete(n)

    def cmd_info(self, arg: str) -> None:
        what, _, rest = arg.partition(" ")
        if what in ("r", "reg", "registers"):
            names = [w.lstrip("$") for w in rest.split()]
            self._p(self.s.format_registers(names or None))
        elif what in ("b", "br", "break", "breakpoints"):
            self._info_breakpoints()
        elif what in ("probes", "probe"):
            self._probe_list()
        else:
            raise StepperError(f'Undefined info command: "{arg}".  Try "help info".')

    def _info_breakpoints(self) -> None:
        bps = list(self.s.breakpoints.values())
        if not bps:
            self._p("No breakpoints or watchpoints.")
            return
        self._p("Num     Type           Disp Enb Address            What")
        for bp in bps:
            label = _gdb_label(self.m, bp.address)
            what = f"<{label}>" if label else ""
            self._p(f"{bp.number:<7} {'breakpoint':<14} keep {'y' if bp.enabled else 'n'}   "
                    f"{bp.address:#018x} {what}".rstrip())
            if bp.hits:
                self._p(f"\tbreakpoint already hit {bp.hits} time{'s' if bp.hits != 1 else ''}")

    def cmd_x(self, arg: str, fmt: str) -> None:
        count, letter, size = _parse_x_format(fmt, self._x_last)
        if not arg:
            raise StepperError("Argument required (starting display address).")
        addr = self.s.evaluate(arg)
        self._x_last = (letter, size) if letter != "i" else (self._x_last[0], self._x_last[1])
        if letter == "i":
            rip = self.s.rip if self.s.alive else None
            for _ in range(count):
                self._p(self._xi_line(addr, addr == rip))
                addr += self.s.disasm.decode(addr).size
            return
        data = self.m.mem.read(addr, count * size)      # raises GuestFault as gdb's error
        per = _X_PER_LINE[size]
        for i in range(0, count, per):
            a = addr + i * size
            label = _gdb_label(self.m, a)
            cells = []
            for j in range(i, min(count, i + per)):
                v = int.from_bytes(data[j * size:(j + 1) * size], "little")
                if letter == "x":
                    cells.append(f"0x{v:0{size * 2}x}")
                elif letter == "d":
                    cells.append(str(_signed(v, size * 8)))
                else:
                    cells.append(str(v))
            self._p(f"{a:#x}{f' <{label}>' if label else ''}:\t" + "\t".join(cells))

    def cmd_disas(self, arg: str) -> None:
        rip = self.s.rip if self.s.alive else None
        if arg:
            where = self.s.resolve(arg)
        elif rip is None:
            raise StepperError("No frame selected.")
        else:
            where = rip
        name, start, end = self.s.function_range(where)
        sites = self.s.probe_sites()
        d = self.s.disasm
        self._p(f"{start:016x} <{name}>:")
        for insn in d.range(start, end):
            line = d.format(insn)
            if insn.address in sites:
                up = sites[insn.address]
                orig = d.decode_bytes(insn.address, up.file.read(up.offset, 15))
                first, nl, more = line.partition("\n")
                line = f"{first}        # uprobe site: {orig.text}" + nl + more
            mark = "=> " if insn.address == rip else "   "
            self._p("\n".join(mark + part if k == 0 else "   " + part
                              for k, part in enumerate(line.split("\n"))))

    def cmd_bt(self, arg: str) -> None:
        limit = self._count(arg) if arg else 64
        for f in self.s.backtrace(max_frames=limit):
            note = "  [uretprobe pending: saved return address is the trampoline]" if f.uretprobe else ""
            self._p(f"#{f.level:<2} {f.pc:#018x} in {f.function or '??'} (){note}")

    def cmd_print(self, arg: str, fmt: str) -> None:
        value, kind = _evaluate(self.s, arg)
        self.history += 1
        if fmt in ("x", "d", "u"):
            bits = int(kind[3:]) if kind.startswith("int") else 64
            v = value & ((1 << bits) - 1)
            text = f"{v:#x}" if fmt == "x" else str(_signed(v, bits) if fmt == "d" else v)
        elif fmt:
            raise StepperError(f"Undefined output format \"{fmt}\".")
        elif kind == "code_ptr":
            text = "(void (*)()) " + natural(value, kind, lambda a: _gdb_label(self.m, a))
        elif kind == "data_ptr":
            text = "(void *) " + natural(value, kind)
        else:
            text = natural(value, kind)
        self._p(f"${self.history} = {text}")

    def cmd_set(self, arg: str) -> None:
        if arg.startswith("var "):
            arg = arg[4:].strip()
        lhs, eq, rhs = arg.partition("=")
        lhs = lhs.strip()
        if not eq or not lhs.startswith("$"):
            raise StepperError("usage: set $REG = EXPR")
        self.s.set_register(lhs[1:], self.s.evaluate(rhs))

    def cmd_probe(self, arg: str) -> None:
        words = arg.split()
        if not words or words[0] == "list":
            self._probe_list()
            return
        if words[0] in ("enable", "disable") and len(words) == 2:
            cons = self._consumers()
            try:
                uc = cons[int(words[1])]
            except (ValueError, KeyError):
                raise StepperError(f"No probe number {words[1]}.") from None
            uc.enabled = words[0] == "enable"
            return
        raise StepperError("usage: probe list | probe enable N | probe disable N")

    def _consumers(self) -> dict:
        out = {}
        for uprobe in list(self.m.uprobes.tree.values()):
            for uc in uprobe.consumers:
                out[uc.id] = uc
        return dict(sorted(out.items()))

    def _probe_list(self) -> None:
        cons = self._consumers()
        if not cons:
            self._p("No uprobes.")
            return
        events = {id(ev.consumer): ev for ev in self.m.kernel.trace.events}
        self._p("Num     Enb Hits       Address            What")
        for n, uc in cons.items():
            up = uc.uprobe
            addrs = self.m.uprobes.vaddr_of(self.m.process, up.file, up.offset)
            addr = f"{addrs[0]:#018x}" if addrs else f"{'<not mapped>':<18}"
            label = _gdb_label(self.m, addrs[0]) if addrs else None
            ev = events.get(id(uc))
            kind = "uretprobe" if uc.ret_handler is not None and uc.handler is None else "uprobe"
            name = ev.name if ev is not None else (uc.name or kind)
            hits = ev.hits if ev is not None else uc.hits
            where = f" <{label}>" if label else ""
            self._p(f"{n:<7} {'y' if uc.enabled else 'n'}   {hits:<10} {addr}{where} {name} ({kind})")

    def cmd_quit(self, arg: str) -> None:
        self.quit = True

    def cmd_help(self, arg: str) -> None:
        self._p(HELP)


def _parse_x_format(fmt: str, last: tuple[str, int]) -> tuple[int, str, int]:
    """``x/NFU``: count, format letter (x d u i), unit size in bytes."""
    digits = ""
    i = 0
    while i < len(fmt) and fmt[i].isdigit():
        digits += fmt[i]
        i += 1
    count = int(digits) if digits else 1
    letter, size = last
    for ch in fmt[i:]:
        if ch in _X_SIZES:
            size = _X_SIZES[ch]
        elif ch in "xdui":
            letter = ch
        else:
            raise StepperError(f"Invalid number \"{fmt}\"." if ch.isdigit() else
                               f"Undefined output format \"{ch}\".")
    if count <= 0 or count > 1 << 16:
        raise StepperError(f"bad count in x/{fmt}")
    return count, letter, size


# =============================================================================== CLI

def add_cli(sub, add_machine_options) -> None:
    p = sub.add_parser(
        "step", help="step through a guest with gdb-like commands",
        description="Interactive instruction stepper (PROGRAM: a static ELF path or guest:NAME). "
                    "Commands come from -x FILE, then from stdin (prompt only on a terminal); "
                    "'help' lists them.  Stepping executes through the uprobes kernel model's "
                    "own states (int3 trap, out-of-line step, trampolines): a probed "
                    "instruction is one step.  --max-insns and --timeout bound each free run "
                    "(c, finish, until, ni over a call).  Exit code 0 (2 for a usage or input "
                    "error).")
    p.add_argument("program", metavar="PROGRAM")
    p.add_argument("args", nargs="*", metavar="ARGS")
    add_machine_options(p)
    p.add_argument("-x", "--command", dest="scripts", action="append", default=[], metavar="FILE",
                   help="run the commands in FILE first (repeatable)")
    p.set_defaults(func=cmd_step)


def cmd_step(args) -> int:
    scripts = []
    for path in args.scripts:
        try:
            with open(path) as f:
                scripts.append(f.read().splitlines())
        except OSError as e:
            raise EmuError(f"cannot read command file {path!r}: {e.strerror}") from None
    m = make_machine(args, own_stdin=False)     # the stepper reads its commands from stdin
    if args.event:
        m.uprobes.add_events(args.event, output=sys.stdout)
    stepper = Stepper(m, max_insns=args.max_insns or None, timeout=args.timeout or None)
    shell = StepperShell(stepper)
    for lines in scripts:
        shell.run_lines(lines)
    if not shell.quit:
        shell.interact(sys.stdin)
    sys.stdout.flush()
    return 0


__all__ = ["Stepper", "StepperShell", "StopEvent", "Breakpoint", "Frame", "StepperError",
           "format_register", "natural", "INFO_REGISTERS", "add_cli", "cmd_step"]
