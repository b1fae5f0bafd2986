"""Stopping at a signal of the followed process, as a ptrace tracer does (gdb's
"Program received signal SIGSEGV"), with the signal's ``siginfo_t``.

A tracer sees a signal at its delivery stop, before the kernel acts on it.  The kernel
model delivers a signal in one go (``handle_signal``: a handler frame, or the default
action), so the stepper records the task's registers and the signal's siginfo at the
model's ``signal`` event - published at the start of delivery - stops the run, and
presents that recorded state as the stop (:class:`SignalStop`):

- a signal that kills (default action): the process is already gone in the model, but
  its memory and registers stay readable; the stop is reported first and the death at
  the next resume, as gdb sees them after ``continue``;
- a signal a handler takes: the task already stands at the handler's first instruction;
  the stop shows the registers from before the delivery, and the next resume goes on
  from the handler (a step from the stop ends at the handler's entry, as PTRACE_SINGLESTEP
  with the signal does).

What a tracer could do and this cannot: suppress the signal or change it at the stop
(the delivery has been made).  ``siginfo`` is the kernel's own bytes where the handler
frame holds them; for a killing signal it is rebuilt as the kernel builds it
(force_sig_fault: SEGV_MAPERR where no mapping is, SEGV_ACCERR where the mapping refuses
the access, SI_KERNEL for a general protection fault; kill SI_USER and tkill/tgkill
SI_TKILL with the sender's pid and uid).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emu.debug.stops import StepperError
from kernel_model.arch.x86.kernel.signal import SI_KERNEL, SI_TKILL, siginfo
from kernel_model.mm.mm_types import GuestFault
from kernel_model.trace import events as ev

if TYPE_CHECKING:
    from emu.debug.stops import StopEvent
    from emu.machine import Machine
    from kernel_model.arch.x86.ptrace import PtRegs
    from kernel_model.kernel.signals import RunResult
    from kernel_model.kernel.task import Process, Task

SIGNAL_STOP = "a signal of the followed process"
_SEGV_MAPERR, _SEGV_ACCERR = 1, 2
_SI_USER = 0
_SIGSEGV, _SIGKILL, _SIGSTOP = 11, 9, 19
_KILL_SYSCALLS = {62: _SI_USER, 200: SI_TKILL, 234: SI_TKILL}  # kill, tkill, tgkill


@dataclass(eq=False)
class SignalStop:
    """The signal a run stopped at: ``regs`` (a PtRegs) are the task's before delivery,
    ``info`` the 128-byte x86_64 siginfo_t, ``result`` the machine's end when the signal
    killed the process (reported at the next resume)."""

    signo: int
    task: Task
    regs: PtRegs
    info: bytes
    result: RunResult | None = None
    handler: int | None = None  # where a handler took it (the task stands there)


class SignalStopper:
    """The :class:`~emu.debug.stepper.Stepper`'s signal stops (off unless
    :attr:`stop_at_signals`; a gdb stub turns them on, ``pass_signals`` is gdb's
    ``QPassSignals`` list, delivered without a stop)."""

    if TYPE_CHECKING:
        # what it uses of the Stepper (emu/debug/stepper.py) and its other parts: declared
        # for the type checker only, so every lookup still finds the one definition
        machine: Machine
        _armed: bool

        def _followed(self) -> Process: ...
        def _event(
            self, reason: str, verb: str, *, bp=None, insns=None, result=None, detail: str = ""
        ) -> StopEvent: ...
        def _terminal(self, result: RunResult, verb: str, insns=None) -> StopEvent: ...

    def _init_signal_stops(self) -> None:
        self.stop_at_signals = False
        self.pass_signals: frozenset[int] = frozenset()
        self.signal_stop: SignalStop | None = None
        self._signal_caught: SignalStop | None = None
        self._last_kill: tuple | None = None  # (task, si_code, pid) of a kill-type syscall

    def _signal_subscriptions(self) -> list:
        if not self.stop_at_signals:
            return []
        bus = self.machine.events
        return [
            bus.subscribe(self._on_signal, ev.Signal),
            bus.subscribe(self._on_kill_syscall, ev.Syscall),
            bus.subscribe(self._on_signal_handler, ev.SignalHandler),
        ]

    def _on_kill_syscall(self, event) -> None:
        code = _KILL_SYSCALLS.get(event.nr)
        if code is not None:
            self._last_kill = (event.task, code, event.task.process.pid)

    def _on_signal(self, event) -> None:
        """The model starts delivering a signal: record it and stop the run (the first
        one of a run; SIGKILL and SIGSTOP are never seen by a tracer)."""
        if (
            self._signal_caught is not None
            or event.signo in (_SIGKILL, _SIGSTOP)
            or event.signo in self.pass_signals
            or event.task.process is not self._followed()
        ):
            return
        m = self.machine
        regs = m.read_regs()
        regs.rip = event.rip  # in a syscall: its return address, as ptrace shows it
        self._signal_caught = SignalStop(event.signo, event.task, regs, self._rebuilt_siginfo(event))
        if self._armed:
            m.stop(SIGNAL_STOP)  # a free run (a single step ends by itself)

    def _on_signal_handler(self, event) -> None:
        caught = self._signal_caught
        if caught is not None and caught.task is event.task and caught.handler is None:
            caught.handler = event.handler

    def _rebuilt_siginfo(self, event) -> bytes:
        """The siginfo the kernel gives a signal it raised or a kill sent (see the
        module docstring)."""
        signo, addr, detail = event.signo, event.addr, event.detail or ""
        if detail.startswith("sent by") and self._last_kill is not None:
            _task, code, pid = self._last_kill
            return siginfo(signo, code, None, pid)
        if addr is None:
            return siginfo(signo, SI_KERNEL, None)
        if signo == _SIGSEGV:
            if "general protection" in detail:
                code = SI_KERNEL
            else:
                code = _SEGV_MAPERR if self.machine.mem.find_vma(addr) is None else _SEGV_ACCERR
            return siginfo(signo, code, addr)
        return siginfo(signo, 1, addr)  # ILL_ILLOPC, FPE_INTDIV, BUS_ADRALN...

    def _signal_event(self, verb: str, result):
        """The stop at a caught signal (after the run): ``"signal_received"``."""
        caught, self._signal_caught = self._signal_caught, None
        if caught is None:  # the verbs call it only with a signal caught
            raise StepperError("no signal was caught to stop at")
        if result is not None and result.reason in ("exit", "signal"):
            caught.result = result
        elif caught.handler is not None:
            regs = self.machine.read_regs()
            if regs.rip == caught.handler:
                try:
                    caught.info = bytes(self.machine.mem.read(regs.rsi, 128))  # the frame's siginfo
                except GuestFault:
                    pass  # keep the rebuilt one
        self.signal_stop = caught
        ev_ = self._event("signal_received", verb)
        ev_.stop_signal = caught.signo
        ev_.rip = caught.regs.rip
        return ev_

    def leave_signal_stop(self, verb: str):
        """Resuming from a signal stop: the deferred end of a killed process (a
        StopEvent), or None (the task goes on from where the delivery put it)."""
        stop, self.signal_stop = self.signal_stop, None
        if stop is not None and stop.result is not None:
            return self._terminal(stop.result, verb)
        return None

    def siginfo_of(self, task) -> bytes | None:
        """The siginfo of the signal ``task`` stopped with, or None."""
        stop = self.signal_stop
        return stop.info if stop is not None and stop.task is task else None

    def stopped_regs(self, task):
        """The registers a signal stop shows for ``task`` (from before the delivery),
        or None when there is no signal stop of it."""
        stop = self.signal_stop
        return stop.regs if stop is not None and stop.task is task else None


def si_fields(info: bytes) -> tuple[int, int, int]:
    """(si_signo, si_errno, si_code) of a siginfo."""
    return struct.unpack_from("<iii", info)
