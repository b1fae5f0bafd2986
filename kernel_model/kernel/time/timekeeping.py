"""The machine's one virtual clock (kernel/time/timekeeping.c) and the deadlines of
sleeping syscalls on it (the timers schedule_hrtimeout arms for poll, select,
nanosleep and futex waits).

Time never follows the host: each clock read advances it a microsecond, guest
instructions advance it INSN_NS each, and when every task sleeps the machine moves it
to the earliest deadline (as an idle CPU waits for the next timer interrupt).
"""

from __future__ import annotations

NSEC, USEC = 1_000_000_000, 1_000
CLOCK_EPOCH_NS = 1_767_225_600 * NSEC  # CLOCK_REALTIME at boot: 2026-01-01T00:00:00Z
CLOCK_TICK_NS = 1_000  # each clock read advances 1 us
COARSE_RES_NS = 4_000_000  # CLOCK_*_COARSE resolution: one jiffy at HZ=250
INSN_NS = 1  # virtual time one guest instruction takes


class VirtualClock:
    """CLOCK_REALTIME in ns (``ns``); CLOCK_MONOTONIC and CLOCK_BOOTTIME are it minus
    ``boot_ns``, CLOCK_REALTIME at boot: CLOCK_EPOCH_NS unless the machine starts the
    clock elsewhere (at the host's time, so a guest dates files as the host does)."""

    def __init__(self, boot_ns: int = CLOCK_EPOCH_NS):
        self.boot_ns = boot_ns
        self.ns = boot_ns

    def boot_clock_ns(self, advance: int = 0) -> int:
        """Nanoseconds since boot on the modeled clock (ftrace's timestamps), after moving
        it ``advance`` ns on: the one clock of the machine, shared with clock_gettime."""
        self.ns += advance
        return self.ns - self.boot_ns


class Timeouts:
    """The sleeps with a deadline: entries ``(deadline, tid, fire, state)``; ``fire()``
    wakes the sleeper, ``state["done"]`` is set once the sleep ended some other way (a
    signal, its pipe), after which its deadline is no deadline any more."""

    def __init__(self, machine, clock: VirtualClock):
        self.m, self.clock = machine, clock
        self.pending: list = []

    def add(self, deadline: int, tid: int, fire, state: dict) -> None:
        """Arm a sleeper's deadline (dropping the entries of sleeps that ended)."""
        self.pending[:] = [e for e in self.pending if not e[3]["done"]]
        self.pending.append((deadline, tid, fire, state))

    def next_poll_deadline_ns(self) -> int | None:
        """The earliest deadline of a sleep still waiting for it (poll, select,
        nanosleep); one a signal or its pipe ended is no deadline any more."""
        return min((e[0] for e in self.pending if not e[3]["done"]), default=None)

    def expire_due(self) -> None:
        """Fire the sleeps (poll, select, nanosleep, futex) whose deadline the clock
        has reached while tasks ran."""
        pending, now = self.pending, self.clock.ns
        if not any(e[0] <= now for e in pending):
            return
        due = sorted((e for e in pending if e[0] <= now), key=lambda e: (e[0], e[1]))
        pending[:] = [e for e in pending if e[0] > now]
        for _, _, fire, state in due:
            if not state["done"]:
                fire()

    def expire_timeouts(self) -> bool:
        """Every task sleeps: move the virtual clock to the earliest poll/select
        deadline and time that sleeper out.  False when no deadline is pending."""
        pending = self.pending
        while pending:
            pending.sort(key=lambda e: (e[0], e[1]))
            deadline, _, fire, state = pending.pop(0)
            if state["done"]:
                continue  # ended otherwise: the clock does not go there
            self.clock.ns = max(self.clock.ns, deadline)
            before = sum(1 for t in self.m.tasks if t.state == "running")
            fire()
            if sum(1 for t in self.m.tasks if t.state == "running") > before:
                return True
        return False
