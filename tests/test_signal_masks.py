"""Per-task blocked masks (kernel/signal.c): a signal blocked with rt_sigprocmask pends
(on the task for raise/tgkill, on the process for kill) until unblocked, and is then
delivered once for a standard signal, every time for a real-time one; rt_sigpending
shows it; an action that ignores it discards it.  The guest is compared with a native
run of the same binary, and each rule with its own line."""

from __future__ import annotations

import subprocess

import pytest

from emu import Machine


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("sigmask.c", "-static", name="sigmask")


@pytest.fixture(scope="module")
def emulated(guest):
    r = Machine.from_elf(guest).run(timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return r.stdout.decode().splitlines()


def test_output_matches_native_byte_for_byte(guest):
    native = subprocess.run([guest], capture_output=True, timeout=60)
    r = Machine.from_elf(guest).run(timeout=60)
    assert (r.exit_code, r.stdout) == (native.returncode, native.stdout), (
        f"native:\n{native.stdout.decode()}\nemulated:\n{r.stdout.decode()}"
    )


@pytest.mark.parametrize(
    "line, expected",
    [
        (0, "raised twice while blocked: handled=[]"),  # raise() of a blocked signal pends
        (1, "blocked: pending usr1=1 usr2=0 rt=0"),  # rt_sigpending reports it
        (2, "unblocked: handled=[k]"),  # delivered once (standard signal)
        (3, "after: pending usr1=0 usr2=0 rt=0"),
        (4, "rt blocked: pending usr1=0 usr2=0 rt=1"),
        (5, "rt unblocked: handled=[RRR]"),  # real-time signals queue each
        (6, "two blocked: pending usr1=1 usr2=1 rt=0"),  # kill(getpid()) pends on the process
        (7, "both unblocked: handled=[mk]"),  # SIGUSR1 framed first: USR2 runs first
        (8, "ignored while pending: pending usr1=0 usr2=0 rt=0"),  # SIG_IGN discards it
        (9, "unblocked after ignore: handled=[]"),
    ],
)
def test_mask_rule(emulated, line, expected):
    assert emulated[line] == expected, f"expected {expected!r}, got {emulated[line]!r}"


def test_blocked_signal_is_not_counted_until_delivered(guest):
    """Machine-level view: after raise() with the signal blocked, it is queued on the
    task but signal_pending() (TIF_SIGPENDING) is false."""
    m = Machine.from_elf(guest)
    m.task.sigmask = 1 << 9  # SIGUSR1 blocked
    m.send_sig(m.task, 10, detail="sent by the test", force=False)
    assert [p.signo for p in m.task.pending_signals] == [10]
    assert not m.signal_pending(m.task), "a blocked, unforced signal must not be pending for delivery"
    assert m.pending_set(m.task) == 1 << 9


def test_standard_signal_queues_once_real_time_each_time(guest):
    m = Machine.from_elf(guest)
    m.task.sigmask = (1 << 9) | (1 << 33)
    for sig in (10, 10, 34, 34):
        m.send_sig(m.task, sig, force=False)
    assert [p.signo for p in m.task.pending_signals] == [10, 34, 34]


def test_rt_sigpending_rejects_a_set_larger_than_sigset_t(guest):
    m = Machine.from_elf(guest)
    regs = m.read_regs()
    ret = m.syscalls.sys_rt_sigpending(m.task, regs, regs.rsp - 64, 16)
    assert ret == -22, f"expected -EINVAL, got {ret}"
