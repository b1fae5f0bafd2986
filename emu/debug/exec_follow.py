"""Following an exec of the debugged process, as gdb's ``follow-exec-mode same`` does.

The stepper goes on in the new image: breakpoints are re-set from their locations, and
gdb's ``process N is executing new program: PATH`` is queued for the front end
(:meth:`ExecFollower.take_exec_notes`).  With gdb's ``catch exec`` (a
:class:`~emu.debug.stops.Catchpoint`, :meth:`ExecFollower.catch_exec`) or
:attr:`ExecFollower.stop_at_exec` (a gdb stub reporting exec events) the run stops in the
new image, at its first instruction, with an ``"exec"`` stop event.

A breakpoint on a symbol no mapped file has yet is pending (gdb's ``Breakpoint N (foo)
pending.``): it is re-set, as gdb's breakpoint_re_set at a shared library event, whenever
the followed process maps code (``mmap``/``mprotect``: ld.so loading a library at start-up
or at a dlopen) and takes effect once its symbol is in executable memory.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from emu.debug.disasm import Disassembler
from emu.debug.program import ProgramDisassembler
from emu.debug.stops import Breakpoint, Catchpoint, StepperError
from emu.debug.unwind import Unwinder
from kernel_model.kernel.signals import RunResult
from kernel_model.mm.mm_types import PROT_EXEC, GuestFault
from kernel_model.trace import events as ev

if TYPE_CHECKING:
    from emu.debug.plt import PltNames
    from emu.debug.stops import StopEvent
    from emu.engine.cpu import HookHandle
    from emu.machine import Machine
    from kernel_model.kernel.task import Process

_EXECVE, _EXECVEAT = 59, 322
_MMAP, _MPROTECT = 9, 10
EXEC_STOP = "exec of the followed process"
MAP_STOP = "a mapping of the followed process changed"
_MAX_EXEC_NOTES = 256  # exec messages kept until a front end takes them


class ExecFollower:
    """The :class:`~emu.debug.stepper.Stepper`'s exec following (and the frames'
    state, set up with it)."""

    if TYPE_CHECKING:
        # what it uses of the Stepper (emu/debug/stepper.py) and its other parts: declared
        # for the type checker only, so every lookup still finds the one definition
        machine: Machine
        max_insns: int | None
        timeout: float | None
        exited: bool
        disasm: ProgramDisassembler
        raw_disasm: Disassembler
        plt: PltNames
        breakpoints: dict[int, Breakpoint]
        _next_number: int
        _hooks: dict[int, HookHandle]
        _goal: tuple[int, int | None] | None
        _hit: tuple[str, Breakpoint | None] | None
        _sites: tuple[int, dict] | None

        def resolve(self, target: int | str) -> int: ...
        def symbol(self, addr: int) -> tuple[str, int] | None: ...
        def read_program(self, addr: int, n: int) -> bytes: ...
        def _text_written(self, start: int, end: int) -> None: ...
        def _sync_hooks(self) -> None: ...
        def _signal_subscriptions(self) -> list: ...
        def _event(
            self, reason: str, verb: str, *, bp=None, insns=None, result=None, detail: str = ""
        ) -> StopEvent: ...

    def _init_frames_and_exec(self) -> None:
        """Frames (:class:`Unwinder`; gdb's ``backtrace past-main``, off by default) and
        exec following (the image last seen, the messages of execs since)."""
        self.unwinder = Unwinder(self)
        self.past_main = False
        self.exec_notes: list[tuple[str, str]] = []  # (stream "out" | "err", line)
        self._pending_bps: dict[int, Breakpoint] = {}  # not resolved (yet): a library not loaded
        self.exec_followed = False  # set at each exec followed
        self.exec_count = 0  # execs followed so far
        self.last_exec_path: str | None = None  # the program of the last one
        self.catchpoints: dict[int, Catchpoint] = {}
        self.stop_at_exec = False  # stop at every exec (a gdb stub's exec events)
        self._exec_caught = False
        proc = self._followed()
        self._image = (proc, proc.mem)

    def _followed(self) -> Process:
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
            m.remove_hook(hook)  # the old address space is gone
        self._hooks.clear()
        self._goal = None  # a step's or finish's goal was in the old image
        self.disasm = ProgramDisassembler(m, self.read_program, self.symbol)
        self.raw_disasm = Disassembler(m)
        self._sites = None
        proc.mem.text_write_listeners.append(self._text_written)
        exe = proc.exe
        path = (exe.d_path or exe.path) if exe is not None else "?"
        self.exec_notes.append(("out", f"process {proc.pid} is executing new program: {path}"))
        self.exec_count += 1
        self.last_exec_path = path
        self._reset_breakpoints()
        del self.exec_notes[:-_MAX_EXEC_NOTES]  # nobody reads them (a gdb stub)
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
                bp.trampoline = False
            except (StepperError, GuestFault) as e:
                plt = self.plt.address(f"{bp.location}@plt") if bp.location.isidentifier() else None
                if plt is not None:  # gdb's linespec takes the PLT stub
                    bp.address, bp.trampoline = plt, True
                    self.breakpoints[number] = bp
                    continue
                self._pending_bps[number] = bp
                self.exec_notes.append(("err", f"Error in re-setting breakpoint {number}: {e}"))
                continue
            self.breakpoints[number] = bp

    def pending_breakpoints(self) -> dict[int, Breakpoint]:
        """The breakpoints whose location no mapped file resolves yet (gdb's ``<PENDING>``)."""
        return dict(self._pending_bps)

    def break_pending(self, location: str) -> Breakpoint:
        """A breakpoint on ``location`` (a symbol, ``LIB:SYM``, ``SYM+OFF``) that takes
        effect when a library that has it is loaded."""
        bp = Breakpoint(self._next_number, 0, location)
        self._next_number += 1
        self._pending_bps[bp.number] = bp
        return bp

    def resolve_pending(self) -> bool:
        """Re-set the breakpoints waiting for a library (gdb's breakpoint_re_set after a
        shared library event): a pending one whose location now resolves to executable
        memory takes effect, one on ``NAME@plt`` moves to the function.  True when one
        did."""
        done = False
        for bp in [bp for bp in self.breakpoints.values() if bp.trampoline]:
            try:
                addr = self.resolve(bp.location)
            except (StepperError, GuestFault):
                continue
            vma = self.machine.mem.find_vma(addr)
            if vma is not None and vma.prot & PROT_EXEC:
                bp.address, bp.trampoline, done = addr, False, True
        for number in sorted(self._pending_bps):
            bp = self._pending_bps[number]
            try:
                addr = self.resolve(bp.location)
            except (StepperError, GuestFault):
                continue
            vma = self.machine.mem.find_vma(addr)
            if vma is None or not vma.prot & PROT_EXEC:
                continue  # ld.so mapped the file, not yet its text
            bp.address = addr
            del self._pending_bps[number]
            self.breakpoints[number] = bp
            done = True
        if done:
            self._sync_hooks()
        return done

    def re_set_wanted(self) -> bool:
        """Is a breakpoint waiting for a library (pending, or on a PLT stub)?"""
        return bool(self._pending_bps) or any(bp.trampoline for bp in self.breakpoints.values())

    def _on_map_syscall(self, event) -> None:
        # a successful mmap/mprotect of the followed process while breakpoints wait for
        # a library: stop the free run to re-set them
        if (
            event.nr in (_MMAP, _MPROTECT)
            and event.ret < 1 << 63
            and self.re_set_wanted()
            and event.task.process is self._image[0]
        ):
            self.machine.stop(MAP_STOP)

    def catch_exec(self) -> Catchpoint:
        """gdb's ``catch exec``: a catchpoint numbered with the breakpoints."""
        cp = Catchpoint(self._next_number)
        self._next_number += 1
        self.catchpoints[cp.number] = cp
        return cp

    def exec_catchpoint(self) -> Catchpoint | None:
        return next((cp for cp in self.catchpoints.values() if cp.enabled and cp.kind == "exec"), None)

    def stops_at_exec(self) -> bool:
        """Does an exec of the followed process end the verb (catch exec, exec events)?"""
        return self.stop_at_exec or self.exec_catchpoint() is not None

    def exec_event(self, verb: str, insns=None):
        """The ``"exec"`` stop after an exec was followed: the catchpoint counts a hit and
        remembers the program, as gdb's does."""
        cp = self.exec_catchpoint()
        if cp is not None:
            cp.hits += 1
            cp.exec_path = self.last_exec_path
        ev = self._event("exec", verb, insns=insns)
        ev.catchpoint, ev.exec_path = cp, self.last_exec_path
        return ev

    def take_exec_notes(self) -> list[tuple[str, str]]:
        """The exec messages queued since the last call (the shell prints them)."""
        notes, self.exec_notes = self.exec_notes, []
        return notes

    def _on_exec_syscall(self, event) -> None:
        # an execve of the followed process: stop the free run to follow it (a failed
        # exec just resumes)
        if event.nr in (_EXECVE, _EXECVEAT) and event.task.process is self._image[0]:
            self.machine.stop(EXEC_STOP)

    def _run_following_exec(self) -> RunResult:
        """``Machine.run`` that goes on in the new image after each exec of the followed
        process (gdb does not stop at an exec, unless :meth:`stops_at_exec`: then the
        result is the exec's stop and :attr:`_exec_caught` is set).  The timeout bounds the whole run; the
        instruction budget applies to each image."""
        m = self.machine
        deadline = time.monotonic() + self.timeout if self.timeout else None
        handle = m.events.subscribe(self._on_exec_syscall, ev.Syscall)
        maps = m.events.subscribe(self._on_map_syscall, ev.SyscallReturn)
        signals = self._signal_subscriptions()
        try:
            while True:
                left = max(deadline - time.monotonic(), 1e-3) if deadline else None
                result = m.run(max_insns=self.max_insns, timeout=left)
                if result.reason != "stopped" or result.detail not in (EXEC_STOP, MAP_STOP) or self._hit is not None:
                    return result
                if result.detail == MAP_STOP:
                    self.resolve_pending()
                elif self.follow_exec() and self.stops_at_exec():
                    self._exec_caught = True
                    return result
        finally:
            for h in signals:
                m.events.unsubscribe(h)
            m.events.unsubscribe(maps)
            m.events.unsubscribe(handle)
