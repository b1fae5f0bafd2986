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
instruction (:mod:`emu.debug.unwind`); a file without CFI falls back to the
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

The class is assembled from its parts: the program's view of memory
(:mod:`emu.debug.program`), frames (:mod:`emu.debug.frames`), exec following
(:mod:`emu.debug.exec_follow`), expressions (:mod:`emu.debug.expressions`); what it hands
out is in :mod:`emu.debug.stops`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from emu.debug.disasm import Disassembler, symbol_of
from emu.debug.exec_follow import ExecFollower
from emu.debug.expressions import evaluate
from emu.debug.format import ALIASES, INFO_REGISTERS, SEGMENTS, format_register, gdb_label, register_value, subreg
from emu.debug.frames import FrameWalker
from emu.debug.plt import PltNames
from emu.debug.program import ProgramDisassembler, ProgramView
from emu.debug.signals import SignalStopper
from emu.debug.stops import WATCH_KINDS, Breakpoint, Catchpoint, Frame, StepperError, StopEvent, Watchpoint
from emu.inspect import in_single_step
from kernel_model.arch.x86.ptrace import PtRegs
from kernel_model.errors import EmuError, SymbolError
from kernel_model.kernel.signals import RunResult
from kernel_model.mm.mm_types import PROT_EXEC, GuestFault

if TYPE_CHECKING:
    from emu.debug.reverse import ReverseStepper
    from emu.engine.cpu import HookHandle

_MASK = 0xFFFFFFFFFFFFFFFF
_TRANSITIONAL_VMAS = ("[uprobes]", "[uprobes-trampoline]")
_STUCK = 100_000  # hidden instructions before we call a step stuck
DEFAULT_TIMEOUT = 120.0  # seconds of each free run
_ACCESS_REACH = 15  # an access of up to 16 bytes may start this far before


class Stepper(ProgramView, FrameWalker, ExecFollower, SignalStopper):
    """The stepping core over one :class:`emu.machine.Machine`.

    Args:
        machine: the machine to drive (not yet run, or stopped by a previous verb).
        max_insns: instruction budget of each free run (``cont``/``finish``/...); None
            for none (Unicorn's counter slows free runs down about tenfold).
        timeout: wall-clock seconds of each free run; None for none.
    """

    if TYPE_CHECKING:
        reverse: ReverseStepper  # set by ReverseStepper.of at the first reverse verb

    def __init__(self, machine, *, max_insns: int | None = None, timeout: float | None = DEFAULT_TIMEOUT):
        self.machine = machine
        self.max_insns = max_insns
        self.timeout = timeout
        self.disasm = ProgramDisassembler(machine, self.read_program, self.symbol)
        self.raw_disasm = Disassembler(machine)
        self.plt = PltNames(machine)
        self.breakpoints: dict[int, Breakpoint] = {}
        self.watchpoints: dict[int, Watchpoint] = {}
        self.insns = 0  # guest instructions single-stepped, exact
        self.hidden_insns = 0  # kernel-model (transitional) instructions stepped
        self.last_event: StopEvent | None = None
        self.exited = bool(machine.exited)
        self._next_number = 1
        self._hooks: dict[int, HookHandle] = {}  # address -> its code hook
        self._goal: tuple[int, int | None] | None = None
        self._armed = False
        self._hit: tuple[str, Breakpoint | None] | None = None
        self._sites: tuple[int, dict] | None = None  # (uprobes in the tree, {vaddr: Uprobe})
        self._watch_hooks: dict[tuple, list] = {}  # (address, size) -> [Hook, Hook]
        self._watch_hit: tuple[Watchpoint, int] | None = None
        self._watch_stop = False  # a watch hit stops a free run (not a step)
        self._watch_undo: list = []  # (address, old bytes) of the stopped instruction
        self._watch_armed_step = False
        machine.mem.text_write_listeners.append(self._text_written)
        self._init_frames_and_exec()
        self._init_signal_stops()

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

    def symbol(self, addr: int) -> tuple[str, int] | None:
        """``(function, offset)`` as gdb names the code at ``addr``: a PLT stub is
        ``malloc@plt`` (:mod:`emu.debug.plt`), anything else its ELF symbol."""
        return self.plt.symbol(addr) or symbol_of(self.machine, addr)

    def label(self, addr: int) -> str | None:
        """gdb's ``<sym+N>`` label text (decimal offset), PLT stubs and their GOT slots
        (``malloc@got.plt``) included."""
        hit = self.plt.symbol(addr)
        if hit is None:
            return self.plt.got_slot(addr) or gdb_label(self.machine, addr)
        return f"{hit[0]}+{hit[1]}" if hit[1] else hit[0]

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
        if name.endswith("@plt"):
            addr = self.plt.address(name)
            if addr is not None:
                return addr
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
        return evaluate(self, expr)

    # ------------------------------------------------------------------ breakpoints
    def break_at(self, target) -> Breakpoint:
        """Add a breakpoint at a symbol, ``symbol+off``, ``*expr`` or an address.  A
        function no loaded file defines but the program calls through its PLT is set on
        ``NAME@plt``, and moves to the function when a library defining it is loaded,
        as gdb's linespec and breakpoint re-set do."""
        trampoline = False
        try:
            addr = self.resolve(target)
        except StepperError:
            stub = (
                self.plt.address(f"{target}@plt")
                if isinstance(target, str) and not target.startswith("*") and "+" not in target and ":" not in target
                else None
            )
            if stub is None:
                raise
            addr, trampoline = stub, True
        vma = self.machine.mem.find_vma(addr)
        if vma is None or not vma.prot & PROT_EXEC:
            raise StepperError(f"Cannot insert breakpoint at {addr:#x}: not in executable memory.")
        if vma.name in _TRANSITIONAL_VMAS:
            raise StepperError(
                f"Cannot insert breakpoint at {addr:#x}: it is in {vma.name}, which stepping executes through."
            )
        loc = target if isinstance(target, str) else f"*{addr:#x}"
        bp = Breakpoint(self._next_number, addr, loc, trampoline=trampoline)
        self._next_number += 1
        self.breakpoints[bp.number] = bp
        self._sync_hooks()
        return bp

    def delete(self, number: int | None = None) -> None:
        """Delete breakpoint or watchpoint ``number`` (one numbering, as gdb's), or all."""
        if number is None:
            self.breakpoints.clear()
            self.watchpoints.clear()
            self.catchpoints.clear()
            self._pending_bps.clear()
        elif number in self.watchpoints:
            del self.watchpoints[number]
        elif number in self.catchpoints:
            del self.catchpoints[number]
        elif number in self._pending_bps:
            del self._pending_bps[number]
        elif self.breakpoints.pop(number, None) is None:
            raise StepperError(f"No breakpoint number {number}.")
        self._sync_hooks()
        self._sync_watch_hooks()

    def enable(self, number: int, enabled: bool = True) -> None:
        bp = self.breakpoints.get(number) or self.catchpoints.get(number) or self._pending_bps.get(number)
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
                    m.add_mem_hook(self._on_mem, lo, addr + size - 1, access=a, process=proc) for a in ("read", "write")
                ]

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
        if vma is not None and vma.special and vma.name in _TRANSITIONAL_VMAS and not in_single_step(m.task):
            return None
        return next(
            (
                w
                for w in self.watchpoints.values()
                if w.enabled and w.covers(addr, size) and w.kind in (access, "access")
            ),
            None,
        )

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
        if goal is not None and addr == goal[0] and (goal[1] is None or self.machine.reg_read("rsp") >= goal[1]):
            self._hit = ("goal", None)
            self.machine.stop("goal")

    # ------------------------------------------------------------------ verbs
    def step(self, count: int = 1, task=None) -> StopEvent:
        """Execute ``count`` guest instructions (gdb ``stepi``) of ``task`` (default:
        the current one).  A probed instruction counts as one: its handlers run once
        and the step lands where the unprobed instruction would.  A watched access
        ends the step after its instruction."""
        self.require_alive()
        stop = self.signal_stop
        ended = self.leave_signal_stop("step")
        if ended is not None:
            return ended
        if stop is not None and stop.handler is not None:
            return self._event("step", "step", insns=0)  # the signal's step: to its handler
        if task is not None and task is not self.machine.task:
            self.machine.select_task(task)
        handles = self._signal_subscriptions()
        try:
            return self._step_count(count)
        finally:
            for h in handles:
                self.machine.events.unsubscribe(h)

    def _step_count(self, count: int) -> StopEvent:
        done = 0
        for i in range(count):
            before, execs = self.insns, self.exec_count
            self._watch_hit = None
            self._watch_armed_step = True
            try:
                res = self._step_insn()
            finally:
                self._watch_armed_step = False
            done += self.insns - before
            if self._signal_caught is not None:
                return self._signal_event("step", res)
            if res is not None:
                return self._terminal(res, "step", insns=done)
            if self._watch_hit is not None:
                return self._watch_event("step", done, self._watch_hit)
            if self.exec_count != execs and self.stops_at_exec():
                return self.exec_event("step", done)
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
        if ev is None:  # no instruction to step (count 0), as step(0)
            return self._event("step", "step_over", insns=0)
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

    def finish_target(self) -> tuple[int, int | None]:
        """``(return address, stack pointer after the return)`` of the current frame:
        the caller's pc and the frame's CFA (uretprobe-aware: the original caller; None
        where the unwinder found none, and then the return address alone is the goal).
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
        return next((bp for bp in self.breakpoints.values() if bp.address == addr and bp.enabled), None)

    def _event(self, reason: str, verb: str, *, bp=None, insns=None, result=None, detail: str = "") -> StopEvent:
        rip = None if self.exited else self.rip
        sym = self.symbolize(rip) if rip is not None else None
        ev = StopEvent(reason, rip, sym, verb, bp, insns, result, detail)
        self.last_event = ev
        self.on_stop(ev)
        return ev

    def _terminal(self, result: RunResult, verb: str, insns=None) -> StopEvent:
        if result.reason in ("exit", "signal"):
            self.exited = True
            ev = StopEvent(result.reason, result.rip, result.rip_symbol, verb, None, insns, result, result.describe())
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
        ended = self.leave_signal_stop(verb)
        if ended is not None:
            return ended
        insns = None
        rip = self.rip
        if self._enabled_bp_at(rip) is not None or (goal is not None and goal[0] == rip):
            before = self.insns
            self._watch_hit, self._watch_armed_step = None, True
            try:
                res = self._step_insn()  # step off without triggering it
            finally:
                self._watch_armed_step = False
            insns = self.insns - before
            if res is not None:
                return self._terminal(res, verb, insns=insns)
            if self._watch_hit is not None:
                return self._watch_event(verb, insns, self._watch_hit)
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
        if self._exec_caught:
            self._exec_caught = False
            return self.exec_event(verb)
        if self._signal_caught is not None:
            return self._signal_event(verb, result)
        if result.reason == "stopped" and self._watch_hit is not None:
            return self._finish_watch(verb, insns, self._watch_hit)
        if result.reason == "stopped" and self._hit is not None:
            kind, bp = self._hit
            self._hit = None
            if kind == "breakpoint":
                return self._event("breakpoint", verb, bp=bp)
            return self._event("step", verb)
        return self._terminal(result, verb)

    def _finish_watch(self, verb: str, insns, hit: tuple[Watchpoint, int]) -> StopEvent:
        """The free run stopped inside the accessing instruction (``hit``: the watchpoint
        and the accessed address): undo what it wrote, then execute it once (trap after,
        as the debug registers report)."""
        for addr, old in reversed(self._watch_undo):
            self.machine.mem.write(addr, old)
        self._watch_undo = []
        before = self.insns
        res = self._step_insn()
        self._watch_hit = hit
        if res is not None:
            return self._terminal(res, verb, insns=insns)
        return self._watch_event(verb, None if insns is None else insns + self.insns - before, hit)

    def _watch_event(self, verb: str, insns, hit: tuple[Watchpoint, int]) -> StopEvent:
        wp, addr = hit
        self._watch_hit = None
        wp.hits += 1
        ev = self._event("watchpoint", verb, insns=insns)
        ev.watchpoint, ev.data_addr = wp, addr
        return ev

    def _transitional(self, rip: int) -> bool:
        """rip is somewhere the kernel model, not the guest program, put it."""
        if in_single_step(self.machine.task):
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
            end = start + orig.size
            patched = m.mem.read(start, orig.size) != orig.bytes
        except GuestFault:
            orig, patched, end = None, False, start
        hits = c.uprobe_hits
        traps = c.bp_traps
        res = self._exec1()
        if res is not None:
            if res.reason == "exit":
                self.insns += 1  # exit/exit_group retired; a faulting insn did not
            return res
        retries = n = 0
        while True:
            rip = self.rip
            if self._transitional(rip):
                pass
            elif patched and start < rip < end:
                pass  # between the lea and the call of an nop10 site
            elif rip == start and patched and c.bp_traps > traps and c.uprobe_hits == hits and retries < 3:
                retries += 1  # the kernel restarted the probed insn
            elif (
                rip == start
                and orig is not None
                and orig.mnemonic.startswith("rep")
                and m.read_regs().rcx == 0
                and n == 0
            ):
                pass  # Unicorn's extra exit step of a finished rep
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
        m = self.machine
        maps = len(m.mem.vmas) if self.re_set_wanted() else None
        res = m.step()
        if res is None:
            self.follow_exec()
            if maps is not None and len(m.mem.vmas) != maps:
                self.resolve_pending()
        return res

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
        return self.label(addr)


__all__ = [
    "Stepper",
    "StopEvent",
    "Breakpoint",
    "Catchpoint",
    "Watchpoint",
    "Frame",
    "StepperError",
    "ProgramDisassembler",
    "WATCH_KINDS",
    "DEFAULT_TIMEOUT",
]
