"""The stepping engine (the bdb half of the stepper): :class:`Stepper` owns the stop
decisions, the breakpoint table and the frames over one machine; it has no UI.  The gdb-like
shell on top of it is :mod:`emu.frontends.stepper.shell`, the gdb remote stub another client.

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

**Memory is shown as the program's own bytes** (:meth:`Stepper.read_program`): a probe
site's int3 or optimized ``call`` shows the probed instruction, and a return address the
uretprobe hijacked shows the original one, as gdb shadows its own breakpoints; the raw
bytes stay readable through ``machine.mem``.  A debugger write may not change what is
shadowed (:meth:`Stepper.write_program`).

Watchpoints (:meth:`Stepper.watch`) are memory hooks on the watched bytes
(``Machine.add_mem_hook``); like x86 debug registers they trap after the accessing
instruction completed.

Single steps are ``Machine.step()``: one instruction, its traps and faults handled by the
machine exactly as in ``Machine.run``.  No Python per-instruction hook is installed.
A ``rep``-prefixed string instruction steps once per iteration, as the hardware's trap
flag does.

Frames (``bt``, ``finish``) are unwound with each mapped file's ``.eh_frame`` CFI at any
instruction (:mod:`emu.frontends.stepper.unwind`); a file without CFI falls back to the
frame-pointer chain (``push rbp; mov rbp, rsp`` prologues, with a prologue check for the
innermost frame; frameless functions are assumed not to have pushed anything).  A saved
return address that is the uretprobe trampoline is replaced by the return instance's
original return address.  As in gdb, frames end at ``main`` unless :attr:`Stepper.past_main`
(``set backtrace past-main on``), so ``finish`` out of ``main`` needs it too.

An exec of the followed process is followed as gdb's ``follow-exec-mode same`` does
(:meth:`Stepper.follow_exec`): the stepper goes on in the new image, breakpoints re-set
from their locations, and gdb's ``process N is executing new program: PATH`` is queued
for the front end (:meth:`Stepper.take_exec_notes`).

Expressions (``*EXPR`` locations, ``p``, ``x``) are gdb's small subset: ``$reg``, numbers and
symbols joined by ``+`` and ``-``, typed the way gdb types them (:meth:`Stepper.evaluate_typed`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kernel_model.trace import events as ev
from emu.debug.disasm import MAX_INSN_BYTES, Disassembler, Insn, symbol_of
from kernel_model.errors import EmuError, SymbolError
from emu.frontends.stepper.format import (ALIASES, INFO_REGISTERS, SEGMENTS, format_register,
                                          gdb_label, register_value, subreg)
from emu.frontends.stepper.unwind import Unwinder
from kernel_model.mm.mm_types import PROT_EXEC, GuestFault
from kernel_model.arch.x86.ptrace import PtRegs
from kernel_model.kernel.signals import RunResult

_MASK = 0xFFFFFFFFFFFFFFFF
_TRANSITIONAL_VMAS = ("[uprobes]", "[uprobes-trampoline]")
_STUCK = 100_000                         # hidden instructions before we call a step stuck
_EXECVE, _EXECVEAT = 59, 322
_EXEC_STOP = "exec of the followed process"
_MAX_EXEC_NOTES = 256                    # exec messages kept until a front end takes them
DEFAULT_TIMEOUT = 120.0                  # seconds of each free run
_ACCESS_REACH = 15                       # an access of up to 16 bytes may start this far before


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


@dataclass(eq=False)
class Watchpoint:
    """A stepper watchpoint on ``size`` bytes at ``address``: ``kind`` is ``"write"``
    (gdb ``watch``), ``"read"`` (``rwatch``) or ``"access"`` (``awatch``)."""

    number: int
    address: int
    size: int
    kind: str
    enabled: bool = True
    hits: int = 0
    label: str = ""

    def covers(self, addr: int, size: int) -> bool:
        return addr < self.address + self.size and self.address < addr + size


WATCH_KINDS = ("write", "read", "access")


@dataclass
class StopEvent:
    """Why and where execution stopped.

    ``reason``: ``"step"`` (a stepping verb reached its goal: step, step_over, finish,
    run_until), ``"breakpoint"``, ``"exit"``, ``"signal"`` (the guest died of it) or
    ``"stopped"`` (instruction budget, timeout, Ctrl-C) or ``"watchpoint"`` (``watchpoint``
    was accessed at ``data_addr`` by the instruction just completed).  ``verb`` names the
    verb that ran.
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
    watchpoint: Watchpoint | None = None
    data_addr: int | None = None

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
    slot: int | None = None             # where this frame's return address is saved
    cfa: int | None = None              # the caller's rsp once this frame has returned
    signal: bool = False                # a signal delivery's frame (gdb: <signal handler called>)


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
        self.disasm = ProgramDisassembler(machine, self.read_program)
        self.raw_disasm = Disassembler(machine)
        self.breakpoints: dict[int, Breakpoint] = {}
        self.watchpoints: dict[int, Watchpoint] = {}
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
        self._watch_hooks: dict[tuple, list] = {}     # (address, size) -> [Hook, Hook]
        self._watch_hit: tuple[Watchpoint, int] | None = None
        self._watch_stop = False         # a watch hit stops a free run (not a step)
        self._watch_undo: list = []      # (address, old bytes) of the stopped instruction
        self._watch_armed_step = False
        machine.mem.text_write_listeners.append(self._text_written)
        self._init_frames_and_exec()

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
        self.require_alive("The program has no registers now.")
        return self.machine.read_regs()

    def set_register(self, name: str, value: int) -> None:
        """Write one register (gdb's ``set $reg = value``); sub-registers (``eax``,
        ``ax``, ``al``, ``ah``, ``r8d``...) change only their bits."""
        self.require_alive("The program has no registers now.")
        name = ALIASES.get(name, name)
        if name in SEGMENTS:
            raise StepperError(f"Register ${name} is fixed for a 64-bit Linux task.")
        full, shift, bits = subreg(name)
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
        base = self._symbol_address(name.strip())
        if plus:
            try:
                base += int(off.strip(), 0)
            except ValueError:
                raise StepperError(f"bad offset in {text!r}") from None
        return base

    def _symbol_address(self, name: str) -> int:
        """A symbol's address as gdb's linespec finds it: the main program first, then
        the files the process has mapped (shared libraries, in map order); ``LIB:SYM``
        names the file (``libc:malloc``, a full path) as probe specs do."""
        m = self.machine
        if ":" not in name:
            try:
                return m.resolve(name)
            except SymbolError:
                pass
        proc = m.process
        try:
            if ":" in name:
                targets = [m.uprobes.resolve_target(name)]
            else:
                targets = []
                for f in dict.fromkeys(v.file for v in proc.mem.vmas if v.file is not None):
                    try:
                        elf = m.uprobes.file_elf(f)
                        if elf is not None:
                            targets.append((f, elf.vaddr_to_offset(elf.resolve(name).value)))
                            break
                    except EmuError:
                        continue
            for file, offset in targets:
                vaddrs = m.uprobes.vaddr_of(proc, file, offset)
                if vaddrs:
                    return vaddrs[0]
        except EmuError:
            pass
        raise StepperError(f'Function "{name}" not defined.')

    def evaluate(self, expr: str) -> int:
        """A small gdb-like expression: terms ``$reg``, numbers, symbols (``&sym`` or
        ``sym``: its address), joined by ``+`` and ``-``."""
        return self.evaluate_typed(expr)[0]

    def evaluate_typed(self, expr: str) -> tuple[int, str]:
        """:meth:`evaluate` and gdb's type of the result: ``"int32"``/``"int64"`` (numbers,
        registers), ``"code_ptr"`` (symbols, ``$rip``) or ``"data_ptr"`` (``$rsp``, ``$rbp``)."""
        return _evaluate(self, expr)

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
        """Delete breakpoint or watchpoint ``number`` (one numbering, as gdb's), or all."""
        if number is None:
            self.breakpoints.clear()
            self.watchpoints.clear()
        elif number in self.watchpoints:
            del self.watchpoints[number]
        elif self.breakpoints.pop(number, None) is None:
            raise StepperError(f"No breakpoint number {number}.")
        self._sync_hooks()
        self._sync_watch_hooks()

    def enable(self, number: int, enabled: bool = True) -> None:
        bp = self.breakpoints.get(number)
        if bp is None:
            raise StepperError(f"No breakpoint number {number}.")
        bp.enabled = enabled
        self._sync_hooks()

    # ------------------------------------------------------------------ watchpoints
    def watch(self, target, size: int = 8, kind: str = "write") -> Watchpoint:
        """Watch ``size`` bytes (1, 2, 4 or 8) at an address or ``*EXPR``/symbol:
        ``kind`` ``"write"``, ``"read"`` or ``"access"``.  The stop comes after the
        accessing instruction (x86 debug registers trap after it)."""
        if kind not in WATCH_KINDS:
            raise StepperError(f"watchpoint kind must be one of {', '.join(WATCH_KINDS)}")
        if size not in (1, 2, 4, 8):
            raise StepperError(f"Cannot watch {size} bytes: 1, 2, 4 or 8.")
        addr = self.resolve(target)
        if self.machine.mem.find_vma(addr) is None or self.machine.mem.find_vma(addr + size - 1) is None:
            raise StepperError(f"Cannot watch {addr:#x}: not mapped.")
        wp = Watchpoint(self._next_number, addr, size, kind)
        self._next_number += 1
        self.watchpoints[wp.number] = wp
        self._sync_watch_hooks()
        return wp

    def unwatch(self, number: int) -> None:
        if self.watchpoints.pop(number, None) is None:
            raise StepperError(f"No watchpoint number {number}.")
        self._sync_watch_hooks()

    def _sync_watch_hooks(self) -> None:
        """A read and a write hook on each watched range (a read watchpoint needs the
        write hook too: a stopped instruction's writes are undone, see :meth:`_on_mem`)."""
        m = self.machine
        proc = getattr(m, "main_process", m.process)
        want = {(wp.address, wp.size) for wp in self.watchpoints.values() if wp.enabled}
        for key in [k for k in self._watch_hooks if k not in want]:
            for hook in self._watch_hooks.pop(key):
                m.remove_hook(hook)
        for addr, size in want:
            if (addr, size) not in self._watch_hooks:
                # Unicorn matches an access by its first byte: start early enough
                # for the widest access (16 bytes) that can reach the watched bytes
                lo = max(0, addr - _ACCESS_REACH)
                self._watch_hooks[(addr, size)] = [
                    m.add_mem_hook(self._on_mem, lo, addr + size - 1, access=a, process=proc)
                    for a in ("read", "write")]

    def _on_mem(self, access: str, addr: int, size: int, _value) -> None:
        """A guest access to a watched range.  In a free run the hit stops the machine;
        Unicorn then restarts the instruction on resume, so a write it already made is
        undone (its old bytes, read here before the store) and the instruction is
        single-stepped once by :meth:`_finish_watch`.  The kernel model's own accesses
        (trampolines) are not the program's."""
        if not self._armed and not self._watch_armed_step:
            return
        m = self.machine
        first = self._watch_hit is None
        if first:
            wp = self.watch_match(access, addr, size)
            if wp is None:
                return
            self._watch_hit = (wp, addr)
        if self._watch_stop:
            if access == "write":
                self._watch_undo.append((addr, m.mem.read(addr, size)))
            if first:
                m.stop("watchpoint")

    def watch_match(self, access: str, addr: int, size: int) -> Watchpoint | None:
        """The enabled watchpoint a program access of ``access`` ("read"/"write") to
        [addr, addr+size) triggers, if any.  The kernel model's own accesses (its
        trampolines) are not the program's; an instruction single-stepped out of line is."""
        m = self.machine
        vma = m.mem.find_vma(m.pc)
        utask = m.task.utask
        if vma is not None and vma.special and vma.name in _TRANSITIONAL_VMAS and \
                (utask is None or utask.state != "sstep"):
            return None
        return next((w for w in self.watchpoints.values() if w.enabled and w.covers(addr, size)
                     and w.kind in (access, "access")), None)

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
    def step(self, count: int = 1, task=None) -> StopEvent:
        """Execute ``count`` guest instructions (gdb ``stepi``) of ``task`` (default:
        the current one).  A probed instruction counts as one: its handlers run once
        and the step lands where the unprobed instruction would.  A watched access
        ends the step after its instruction."""
        self.require_alive()
        if task is not None and task is not self.machine.task:
            self.machine.select_task(task)
        done = 0
        for i in range(count):
            before = self.insns
            self._watch_hit = None
            self._watch_armed_step = True
            try:
                res = self._step_insn()
            finally:
                self._watch_armed_step = False
            done += self.insns - before
            if res is not None:
                return self._terminal(res, "step", insns=done)
            if self._watch_hit is not None:
                return self._watch_event("step", done)
            if i + 1 < count:
                bp = self._enabled_bp_at(self.rip)
                if bp is not None:
                    bp.hits += 1
                    return self._event("breakpoint", "step", bp=bp, insns=done)
        return self._event("step", "step", insns=done)

    def step_over(self, count: int = 1) -> StopEvent:
        """Like :meth:`step`, but a ``call`` runs until it returns (gdb ``nexti``),
        through a pending uretprobe trampoline too."""
        self.require_alive()
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
        self.require_alive()
        return self._resume("run_until", goal=(self.resolve(target), None))

    def finish(self) -> StopEvent:
        """Run until the current function returns to its caller (the frame's return
        address with the stack popped past it; uretprobe-aware)."""
        self.require_alive()
        return self._resume("finish", goal=self.finish_target())

    def finish_target(self) -> tuple[int, int]:
        """``(return address, stack pointer after the return)`` of the current frame:
        the caller's pc and the frame's CFA (uretprobe-aware: the original caller).
        From ``main``, the C runtime's caller only with :attr:`past_main`, as in gdb."""
        frames = self.backtrace(max_frames=2)
        if len(frames) < 2:
            raise StepperError('"finish" not meaningful in the outermost frame.')
        return frames[1].pc, frames[0].cfa

    def cont(self) -> StopEvent:
        """Run until a breakpoint, the end of the guest, the budget or the timeout."""
        self.require_alive()
        return self._resume("cont")

    def detach(self) -> RunResult:
        """Forget every breakpoint and watchpoint and let the guest run on to its end
        (a debugger's detach), under the free-run budget and timeout."""
        self.require_alive()
        self.breakpoints.clear()
        self.watchpoints.clear()
        self._sync_hooks()
        self._sync_watch_hooks()
        result = self.machine.run(max_insns=self.max_insns, timeout=self.timeout)
        self.exited = bool(self.machine.exited)
        return result

    # ------------------------------------------------------------------ machinery
    def require_alive(self, message: str = "The program is not being run.") -> None:
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
            self._watch_hit, self._watch_armed_step = None, True
            try:
                res = self._step_insn()      # step off without triggering it
            finally:
                self._watch_armed_step = False
            insns = self.insns - before
            if res is not None:
                return self._terminal(res, verb, insns=insns)
            if self._watch_hit is not None:
                return self._watch_event(verb, insns)
            if goal is not None and self._goal_met(goal):
                return self._event("step", verb, insns=insns)
        self._goal = goal
        self._hit = None
        self._watch_hit, self._watch_undo = None, []
        self._sync_hooks()
        self._armed = self._watch_stop = True
        try:
            result = self._run_following_exec()
        finally:
            self._armed = self._watch_stop = False
            self._goal = None
            self._sync_hooks()
        if result.reason == "stopped" and self._watch_hit is not None:
            return self._finish_watch(verb, insns)
        if result.reason == "stopped" and self._hit is not None:
            kind, bp = self._hit
            self._hit = None
            if kind == "breakpoint":
                return self._event("breakpoint", verb, bp=bp)
            return self._event("step", verb)
        return self._terminal(result, verb)

    def _finish_watch(self, verb: str, insns) -> StopEvent:
        """The free run stopped inside the accessing instruction: undo what it wrote,
        then execute it once (trap after, as the debug registers report)."""
        hit = self._watch_hit
        for addr, old in reversed(self._watch_undo):
            self.machine.mem.write(addr, old)
        self._watch_undo = []
        before = self.insns
        res = self._step_insn()
        self._watch_hit = hit
        if res is not None:
            return self._terminal(res, verb, insns=insns)
        return self._watch_event(verb, None if insns is None else insns + self.insns - before)

    def _watch_event(self, verb: str, insns) -> StopEvent:
        wp, addr = self._watch_hit
        self._watch_hit = None
        wp.hits += 1
        ev = self._event("watchpoint", verb, insns=insns)
        ev.watchpoint, ev.data_addr = wp, addr
        return ev

    def _transitional(self, rip: int) -> bool:
        """rip is somewhere the kernel model, not the guest program, put it."""
        utask = self.machine.task.utask
        if utask is not None and utask.state == "sstep":    # kernel_model.kernel.events.uprobes.UTASK_SSTEP
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
        res = self.machine.step()
        if res is None:
            self.follow_exec()
        return res

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

    def shadows(self, addr: int = 0, n: int = 1 << 64) -> list[tuple[int, bytes, str]]:
        """``[(address, program bytes, what)]`` where the kernel model changed the
        process's memory, for the ones reaching into ``[addr, addr + n)``: each probe
        site holding its int3 (the probed instruction from the file, as the uprobe
        copied it) or its optimized call (the whole nop), each return address the
        uretprobe hijacked on a stack (the original return address)."""
        m = self.machine
        optimizer = m.kernel.optimizer
        out = []
        for vaddr, uprobe in self.probe_sites().items():
            if not addr - 16 < vaddr < addr + n:
                continue
            orig = uprobe.file.read(uprobe.offset, MAX_INSN_BYTES)
            optimized = optimizer.is_optimized(m.process, uprobe, vaddr)
            size = optimizer.design.size if optimized else self.disasm.decode_bytes(vaddr, orig).size
            try:
                now = m.mem.read(vaddr, size)
            except GuestFault:
                continue
            if now != orig[:size] and (optimized or now[:1] == b"\xcc"):
                out.append((vaddr, orig[:size], "a probed instruction"))
        return out + [(slot, ret, "a hijacked return address") for slot, ret in self._hijacked_slots()
                      if addr - 8 < slot < addr + n]

    def _hijacked_slots(self) -> list[tuple[int, bytes]]:
        """Stack slots holding the uretprobe trampoline in place of a return address."""
        m = self.machine
        mm = m.process.mm_uprobes
        if mm is None or mm.xol_area is None:
            return []
        tramp = mm.xol_area.vaddr.to_bytes(8, "little")
        out = []
        for task in m.process.tasks:
            utask = task.utask
            for ri in (utask.return_instances if utask is not None else ()):
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
                data[lo - addr:hi - addr] = prog[lo - where:hi - where]
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
            if data[lo - addr:hi - addr] != prog[lo - where:hi - where]:
                raise StepperError(f"Cannot write {where:#x}: it would change {what} "
                                   "the uprobes model keeps there.")
            keep.append((lo, hi))
        pos = addr
        for lo, hi in sorted(keep) + [(end, end)]:
            if pos < lo:
                self.machine.mem.text_poke(pos, data[pos - addr:lo - addr], count=False)
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
        """Frames, innermost first, unwound with each file's ``.eh_frame`` CFI (the
        frame-pointer heuristics where a file has none); a saved return address that is
        the uretprobe trampoline shows the return instance's original one.  Like gdb's,
        the list ends at ``main`` unless :attr:`past_main`, and at the entry function
        (:mod:`emu.frontends.stepper.unwind`)."""
        self.require_alive("No stack.")
        return self.unwinder.frames(max_frames, self.past_main, Frame)

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

    # ------------------------------------------------------------------ exec
    def _init_frames_and_exec(self) -> None:
        """Frames (:class:`Unwinder`; gdb's ``backtrace past-main``, off by default) and
        exec following (the image last seen, the messages of execs since)."""
        self.unwinder = Unwinder(self)
        self.past_main = False
        self.exec_notes: list[tuple[str, str]] = []      # (stream "out" | "err", line)
        self._pending_bps: dict[int, Breakpoint] = {}     # not re-set in the new image
        self.exec_followed = False                        # set at each exec followed
        proc = self._followed()
        self._image = (proc, proc.mem)

    def _followed(self):
        return getattr(self.machine, "main_process", self.machine.process)

    def follow_exec(self) -> bool:
        """gdb's ``follow-exec-mode same``: when the followed process exec'd since the
        last check, the stepper goes on in its new image: decoding, probe sites and
        breakpoint hooks move to the new address space, and every breakpoint is re-set
        from its location (a symbol is looked up in the new program; one that is not
        there leaves the table, with gdb's ``Error in re-setting breakpoint N: ...``).
        Queues gdb's ``process N is executing new program: PATH`` and sets
        :attr:`exec_followed` (a front end clears it).  A single step that execs ends
        at the new image's first instruction; gdb's CLI then runs on (the shell does).
        True when it did."""
        proc, mem = self._image
        if self.exited or proc.mem is mem or proc.mem is None:
            return False
        m = self.machine
        self._image = (proc, proc.mem)
        self.exec_followed = True
        for hook in self._hooks.values():
            m.remove_hook(hook)              # the old address space is gone
        self._hooks.clear()
        self._goal = None                    # a step's or finish's goal was in the old image
        self.disasm = ProgramDisassembler(m, self.read_program)
        self.raw_disasm = Disassembler(m)
        self._sites = None
        proc.mem.text_write_listeners.append(self._text_written)
        exe = proc.exe
        path = (exe.d_path or exe.path) if exe is not None else "?"
        self.exec_notes.append(("out", f"process {proc.pid} is executing new program: {path}"))
        self._reset_breakpoints()
        del self.exec_notes[:-_MAX_EXEC_NOTES]          # nobody reads them (a gdb stub)
        self._sync_hooks()
        return True

    def _reset_breakpoints(self) -> None:
        """breakpoint_re_set after an exec: each location is resolved again."""
        table = {**self.breakpoints, **self._pending_bps}
        self.breakpoints.clear()
        self._pending_bps.clear()
        for number in sorted(table):
            bp = table[number]
            try:
                bp.address = self.resolve(bp.location)
            except (StepperError, GuestFault) as e:
                self._pending_bps[number] = bp
                self.exec_notes.append(("err", f"Error in re-setting breakpoint {number}: {e}"))
                continue
            self.breakpoints[number] = bp

    def take_exec_notes(self) -> list[tuple[str, str]]:
        """The exec messages queued since the last call (the shell prints them)."""
        notes, self.exec_notes = self.exec_notes, []
        return notes

    def _on_exec_syscall(self, event) -> None:
        # an execve of the followed process: stop the free run to follow it (a failed
        # exec just resumes)
        if event.nr in (_EXECVE, _EXECVEAT) and event.task.process is self._image[0]:
            self.machine.stop(_EXEC_STOP)

    def _run_following_exec(self) -> RunResult:
        """``Machine.run`` that goes on in the new image after each exec of the followed
        process (gdb does not stop at an exec).  The timeout bounds the whole run; the
        instruction budget applies to each image."""
        m = self.machine
        deadline = time.monotonic() + self.timeout if self.timeout else None
        handle = m.events.subscribe(self._on_exec_syscall, ev.Syscall)
        try:
            while True:
                left = max(deadline - time.monotonic(), 1e-3) if deadline else None
                result = m.run(max_insns=self.max_insns, timeout=left)
                if result.reason != "stopped" or result.detail != _EXEC_STOP or self._hit is not None:
                    return result
                self.follow_exec()
        finally:
            m.events.unsubscribe(handle)

    # ------------------------------------------------------------------ text views
    def format_registers(self, names=None) -> str:
        """``info registers`` exactly as gdb 13 lays it out (see :func:`format_register`)."""
        regs = self.regs()
        names = list(names) if names else list(INFO_REGISTERS)
        return "\n".join(self._register_line(n, regs) for n in names)

    def _register_line(self, name: str, regs) -> str:
        key = name[1:] if name.startswith("$") else name
        value, kind = register_value(key, regs)
        if kind is None:
            raise StepperError(f"Invalid register `{key}'")
        return format_register(key, value, kind, self._code_label)

    def _code_label(self, addr: int) -> str | None:
        return gdb_label(self.machine, addr)


class ProgramDisassembler(Disassembler):
    """A disassembler of the program's own bytes (``read(addr, n)``, e.g.
    :meth:`Stepper.read_program`): a probe site decodes as the probed instruction."""

    def __init__(self, machine, read):
        super().__init__(machine)
        self._read = read

    def _fetch(self, addr: int) -> bytes:
        try:
            return self._read(addr, MAX_INSN_BYTES)
        except GuestFault:
            pass
        vma = self.mem.find_vma(addr)
        if vma is None:
            raise GuestFault(addr, "read")
        return self._read(addr, min(MAX_INSN_BYTES, vma.end - addr))


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
        value, kind = register_value(term[1:], regs)
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

__all__ = ["Stepper", "StopEvent", "Breakpoint", "Watchpoint", "Frame", "StepperError",
           "ProgramDisassembler", "WATCH_KINDS", "DEFAULT_TIMEOUT"]
