"""alarm/setitimer(ITIMER_REAL) and nanosleep on the virtual clock: a timer's SIGALRM
cuts a longer sleep short (-EINTR, the rest in rem), wakes pause/sigsuspend, re-arms
when periodic, and kills at its default action; nanosleep validates its timespec.  The
guest is compared with a native run (which waits in real time: ~3 s in all)."""

from __future__ import annotations

import subprocess

import pytest
from native_helpers import assert_native_then_model

from emu import Machine


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("alarm.c", "-static", name="alarm")


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("sleep", b"r=-1 errno=4 alarms=1 rem=2s\nbad nsec: r=-1 errno=22\nshort: r=0 alarms=1\n"),
        ("pause", b"pause r=-1 errno=4 alarms=1\n"),
        ("interval", b"interval=0.200000 armed=1\nalarms=3 disarmed=1\nbad which: r=-1 errno=22\n"),
        ("alarmret", b"alarm: 0 5 2\n"),
    ],
)
def test_matches_native(guest, mode, expected):
    assert_native_then_model(guest, mode, expected)


def test_default_sigalrm_terminates(guest):
    native = subprocess.run([guest, "dfl"], capture_output=True, timeout=60)
    assert native.returncode == -14
    r = Machine.from_elf(guest, argv=[guest, "dfl"]).run(timeout=60)
    assert (r.reason, r.signal, r.stdout) == ("signal", 14, b""), r.describe()


def test_sleep_advances_the_virtual_clock_by_the_request(guest):
    """The 3 s nanosleep interrupted after 1 s leaves the clock 1 s on, not 3."""
    m = Machine.from_elf(guest, argv=[guest, "sleep"])
    start = m.syscalls.clock_ns
    m.run(timeout=60)
    elapsed = m.syscalls.clock_ns - start
    assert 1_000_000_000 <= elapsed < 1_100_000_000, f"virtual time went {elapsed} ns"
