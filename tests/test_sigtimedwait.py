"""rt_sigtimedwait (do_sigtimedwait): a pending signal of the set is taken with its
siginfo and its handler does not run; with none pending a zero timeout answers EAGAIN,
a timeout passes on the virtual clock; a signal a child sends later, or the child's
SIGCHLD (blocked, at its default action), ends the wait.  Compared with native runs."""

from __future__ import annotations

import pytest
from native_helpers import assert_native_then_model

from emu import Machine


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("sigwait.c", "-static", name="sigwait")


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("pending", b"r=10 signo=10 code=0 pid_ok=1 handled=0\nagain: r=-1 errno=11\n"),
        ("timeout", b"timeout: r=-1 errno=11\nbad: r=-1 errno=22\n"),
        ("child", b"r=12 code=0 pid_ok=1 handled=0\n"),
        ("sigchld", b"r=17 code=1 status=5 pid_ok=1\nreaped=1\n"),
    ],
)
def test_matches_native(guest, mode, expected):
    assert_native_then_model(guest, mode, expected)


def test_timeout_advances_the_virtual_clock(guest):
    m = Machine.from_elf(guest, argv=[guest, "timeout"])
    start = m.syscalls.clock_ns
    m.run(timeout=60)
    elapsed = m.syscalls.clock_ns - start
    assert 200_000_000 <= elapsed < 210_000_000, f"virtual time went {elapsed} ns"


def test_the_mask_is_restored_after_the_wait(guest):
    m = Machine.from_elf(guest, argv=[guest, "child"])
    r = m.run(timeout=60)
    assert r.reason == "exit"
    assert m.task.sigmask & (1 << 11), f"SIGUSR2 blocked again, mask {m.task.sigmask:#x}"
