"""Following an exec of the debugged process, as gdb's ``follow-exec-mode same`` does.

The stepper goes on in the new image: breakpoints are re-set from their locations, and
gdb's ``process N is executing new program: PATH`` is queued for the front end
(:meth:`ExecFollower.take_exec_notes`).
"""

from __future__ import annotations

import time

from emu.debug.disasm import Disassembler
from emu.debug.program import ProgramDisassembler
from emu.debug.stops import Breakpoint, StepperError
from emu.debug.unwind import Unwinder
from kernel_model.kernel.signals import RunResult
from kernel_model.mm.mm_types import GuestFault
from kernel_model.trace import events as ev

_EXECVE, _EXECVEAT = 59, 322
EXEC_STOP = "exec of the followed process"
_MAX_EXEC_NOTES = 256                    # exec messages kept until a front end takes them


class ExecFollower:
    """The :class:`~emu.debug.stepper.Stepper`'s exec following (and the frames'
    state, set up with it)."""

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
            self.machine.stop(EXEC_STOP)

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
                if result.reason != "stopped" or result.detail != EXEC_STOP or self._hit is not None:
                    return result
                self.follow_exec()
        finally:
            m.events.unsubscribe(handle)
