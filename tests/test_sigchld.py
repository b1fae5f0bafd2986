"""SIGCHLD (exit_notify -> do_notify_parent): a forked child's exit sends the parent
SIGCHLD with CLD_EXITED, the child's pid and status; at its default action it is
ignored; wait4 with WNOHANG and no child left answers ECHILD.  busybox's ``wait``
sleeps in rt_sigsuspend until that SIGCHLD arrives instead of spinning."""

from __future__ import annotations

import subprocess

import pytest
from native_helpers import assert_native_then_model

from emu import Machine

BUSYBOX = "/bin/busybox"


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("sigsuspend.c", "-static", name="sigsuspend")


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("chld", b"r=-1 got=1 pid_ok=1 status=3 code=1 reaped=1 exit=3 again=-1 errno=10\n"),
        ("dflchld", b"r=0 got=0 pid_ok=0 status=0 code=0 reaped=1 exit=3 again=-1 errno=10\n"),
    ],
)
def test_matches_native(guest, mode, expected):
    assert_native_then_model(guest, mode, expected)


def test_sigchld_is_counted_once_per_child(guest):
    m = Machine.from_elf(guest, argv=[guest, "chld"])
    m.run(timeout=60)
    assert m.counters.signals[17] == 1, dict(m.counters.signals)


def test_default_sigchld_is_dropped_at_send_time(guest):
    """SIG_DFL SIGCHLD, not blocked: prepare_signal drops it, nothing is delivered."""
    m = Machine.from_elf(guest, argv=[guest, "dflchld"])
    m.run(timeout=60)
    assert m.counters.signals[17] == 0, "default SIGCHLD is dropped at send time"


@pytest.mark.parametrize(
    "script, expected",
    [
        ('trap "echo got usr1" USR1; kill -USR1 $$; echo done', b"got usr1\ndone\n"),
        # whether `wait` is interrupted (status 145) races natively with the child's exit;
        # tests/test_eintr.py pins wait4's EINTR with C guests
        ('trap "echo chld" CHLD; true & wait; echo done', b"chld\ndone\n"),
    ],
)
def test_busybox_traps_match_native(script, expected):
    native = subprocess.run([BUSYBOX, "sh", "-c", script], capture_output=True, timeout=60)
    assert (native.returncode, native.stdout) == (0, expected), native
    r = Machine.from_elf(BUSYBOX, argv=[BUSYBOX, "sh", "-c", script]).run(timeout=60)
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, expected), (
        f"expected {expected!r}, got {r.stdout!r} ({r.describe()})"
    )


def test_busybox_background_job_and_wait_do_not_spin():
    """``echo a & wait`` sleeps once in rt_sigsuspend and finishes, printing what a
    native run prints (the job's stdin is /dev/null, which the view models).  Short
    time slices: the shell reaches ``wait`` while the job still runs (with long ones the
    job may be done first, and the shell never sleeps)."""
    native = subprocess.run([BUSYBOX, "sh", "-c", "echo a & wait; echo done"], capture_output=True, timeout=60)
    m = Machine.from_elf(BUSYBOX, argv=[BUSYBOX, "sh", "-c", "echo a & wait; echo done"], sched_slice=(20, 400))
    r = m.run(timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    assert (r.stdout, r.stderr) == (native.stdout, native.stderr) == (b"a\ndone\n", b""), (r.stdout, r.stderr, native)
    assert m.counters.syscalls[130] == 1, f"rt_sigsuspend calls: {m.counters.syscalls[130]}"
    assert m.counters.signals[17] == 1
