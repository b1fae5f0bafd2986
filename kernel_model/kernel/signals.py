"""Linux signal numbers and the run result a guest ends with."""

from __future__ import annotations

from dataclasses import dataclass, field

SIGNALS = {
    "SIGHUP": 1,
    "SIGINT": 2,
    "SIGQUIT": 3,
    "SIGILL": 4,
    "SIGTRAP": 5,
    "SIGABRT": 6,
    "SIGBUS": 7,
    "SIGFPE": 8,
    "SIGKILL": 9,
    "SIGUSR1": 10,
    "SIGSEGV": 11,
    "SIGUSR2": 12,
    "SIGPIPE": 13,
    "SIGALRM": 14,
    "SIGTERM": 15,
    "SIGSTKFLT": 16,
    "SIGCHLD": 17,
    "SIGCONT": 18,
    "SIGSTOP": 19,
    "SIGTSTP": 20,
    "SIGTTIN": 21,
    "SIGTTOU": 22,
    "SIGURG": 23,
    "SIGXCPU": 24,
    "SIGXFSZ": 25,
    "SIGVTALRM": 26,
    "SIGPROF": 27,
    "SIGWINCH": 28,
    "SIGIO": 29,
    "SIGPWR": 30,
    "SIGSYS": 31,
}
SIGNAL_NAMES = {v: k for k, v in SIGNALS.items()}


def signal_name(signo: int) -> str:
    return SIGNAL_NAMES.get(signo, f"SIG{signo}")


@dataclass
class RunResult:
    """How a run ended.

    ``reason``: "exit" (the guest called exit/exit_group), "signal" (killed by a signal,
    with ``signal``, ``fault_addr`` and ``rip``), "budget" (instruction budget spent),
    "timeout" (wall clock), "stopped" (a breakpoint, ``Machine.stop()`` or Ctrl-C).
    ``insns`` is exact when it is known (budget spent, tracing, stepping), else None.
    """

    reason: str
    exit_code: int | None = None
    signal: int | None = None
    fault_addr: int | None = None
    rip: int | None = None
    rip_symbol: str | None = None
    detail: str = ""
    insns: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    extra: dict = field(default_factory=dict)

    @property
    def signal_name(self) -> str | None:
        return signal_name(self.signal) if self.signal else None

    @property
    def status(self) -> int:
        """The shell's view: exit code, 128+signal, 124 for budget/timeout."""
        if self.reason == "exit":
            return self.exit_code & 0xFF  # type: ignore[operator]  # an exit carries its code
        if self.reason == "signal":
            return 128 + self.signal  # type: ignore[operator]  # a death its signal
        return 124

    def describe(self) -> str:
        if self.reason == "exit":
            return f"exited with status {self.exit_code}"
        if self.reason == "signal":
            where = f" at rip {self.rip:#x}" if self.rip is not None else ""
            if self.rip_symbol:
                where += f" <{self.rip_symbol}>"
            addr = f", fault address {self.fault_addr:#x}" if self.fault_addr is not None else ""
            detail = f" ({self.detail})" if self.detail else ""
            return f"killed by {self.signal_name}{where}{addr}{detail}"
        detail = f" ({self.detail})" if self.detail else ""
        if self.reason == "budget":
            return f"stopped: instruction budget of {self.insns} spent at rip {self.rip:#x}{detail}"
        if self.reason == "timeout":
            return f"stopped: wall-clock timeout at rip {self.rip:#x}{detail}"
        return f"stopped at rip {self.rip:#x}" + (f" ({self.detail})" if self.detail else "")
