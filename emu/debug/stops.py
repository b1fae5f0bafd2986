"""What the stepping core hands its front ends: breakpoints, watchpoints, stop events,
frames, and the one-line errors of a command that cannot be done."""

from __future__ import annotations

from dataclasses import dataclass

from kernel_model.errors import EmuError
from kernel_model.kernel.signals import RunResult


class StepperError(EmuError):
    """A stepper command that cannot be done (one line for the user)."""


@dataclass(eq=False)
class Breakpoint:
    """A stepper breakpoint (never a uprobe; guest memory is not changed)."""

    number: int
    address: int
    location: str
    enabled: bool = True
    hits: int = 0
    trampoline: bool = False  # at NAME@plt until a library defines NAME (gdb's choice)


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


@dataclass(eq=False)
class Catchpoint:
    """gdb's ``catch exec``: stops when the followed process execs, in the new image at its
    first instruction.  ``exec_path`` is the program of the last exec it caught (gdb's
    ``info breakpoints`` shows it as ``exec, program "PATH"``)."""

    number: int
    kind: str = "exec"
    enabled: bool = True
    hits: int = 0
    exec_path: str | None = None


@dataclass
class StopEvent:
    """Why and where execution stopped.

    ``reason``: ``"step"`` (a stepping verb reached its goal: step, step_over, finish,
    run_until), ``"breakpoint"``, ``"exit"``, ``"signal"`` (the guest died of it) or
    ``"stopped"`` (instruction budget, timeout, Ctrl-C) or ``"watchpoint"`` (``watchpoint``
    was accessed at ``data_addr`` by the instruction just completed) or ``"exec"`` (the
    followed process exec'd ``exec_path``, caught by ``catchpoint``; rip is the new image's
    first instruction) or ``"signal_received"`` (the followed process got ``stop_signal``:
    a tracer's signal-delivery stop, see :mod:`emu.debug.signals`).  ``verb`` names the
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
    catchpoint: Catchpoint | None = None
    exec_path: str | None = None
    stop_signal: int | None = None  # "signal_received": the signal (Linux number)

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
    slot: int | None = None  # where this frame's return address is saved
    cfa: int | None = None  # the caller's rsp once this frame has returned
    signal: bool = False  # a signal delivery's frame (gdb: <signal handler called>)
