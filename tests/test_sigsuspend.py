"""rt_sigsuspend and pause (kernel/signal.c): the temporary mask applies while the task
sleeps, a signal it lets through runs its handler and the call returns -1/EINTR, the
mask from before the call is restored (set_restore_sigmask); a signal sent by another
process wakes the sleeper and runs its handler; a sleeper nothing can wake ends the
run as a deadlock instead of hanging."""

from __future__ import annotations

import subprocess

import pytest

from emu import Machine


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("sigsuspend.c", "-static", name="sigsuspend")


def run(exe, *args):
    return Machine.from_elf(exe, argv=[exe, *args]).run(timeout=60)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("self", b"r=-1 errno=4 got=1 mask_in_handler=11 usr1_blocked_after=1\n"),
        ("kill", b"child: r=-1 errno=4 got=1\nparent: reaped=1 exit=7\n"),
    ],
)
def test_matches_native(guest, mode, expected):
    native = subprocess.run([guest, mode], capture_output=True, timeout=60)
    assert native.stdout == expected, f"the host disagrees with the spec: {native.stdout!r}"
    r = run(guest, mode)
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, expected), (
        f"expected {expected!r}, got {r.stdout!r} ({r.describe()})"
    )


def test_sigsuspend_with_nothing_to_wake_it_is_a_deadlock_not_a_hang(guest):
    r = run(guest, "hang")
    assert (r.reason, r.detail) == ("stopped", "deadlock: every task is blocked"), r.describe()
    assert r.rip_symbol.startswith("__sigsuspend") or "sigsuspend" in r.rip_symbol, r.rip_symbol


def test_sigsuspend_counts_no_unknown_syscall(guest):
    m = Machine.from_elf(guest, argv=[guest, "self"])
    m.run(timeout=60)
    assert not m.counters.unknown_syscalls, dict(m.counters.unknown_syscalls)
    assert m.counters.syscalls[130] == 1, "one rt_sigsuspend"


def test_rt_sigsuspend_rejects_a_wrong_sigsetsize(guest):
    m = Machine.from_elf(guest)
    regs = m.read_regs()
    ret = m.syscalls.sys_rt_sigsuspend(m.task, regs, regs.rsp, 16)
    assert ret == -22, f"expected -EINVAL, got {ret}"
    assert m.task.state == "running"


def test_pause_returns_erestartnohand_after_a_pending_signal(guest):
    """pause() with an unblocked signal already queued does not sleep; it answers
    -ERESTARTNOHAND (514), which the handler's delivery turns into EINTR."""
    m = Machine.from_elf(guest)
    m.send_sig(m.task, 10, force=False)
    ret = m.syscalls.sys_pause(m.task, m.read_regs())
    assert ret == -514 and m.task.state == "running", (ret, m.task.state)
