"""waitid (kernel/exit.c kernel_waitid): WNOHANG with no exited child zeroes the
siginfo and returns 0, WNOWAIT leaves the zombie, WEXITED reaps it with CLD_EXITED or
CLD_KILLED, its pid and status; then ECHILD; options without a wait type are EINVAL.
Compared with a native run of the same binary."""

from __future__ import annotations

import subprocess

import pytest

from emu import Machine

EXPECTED = (
    b"nohang: r=0 signo=0 pid=0\n"
    b"nowait: r=0 code=1 status=4 pid_ok=1\n"
    b"reaped: r=0 code=1 status=4 pid_ok=1\n"
    b"killed: r=0 code=2 status=15 pid_ok=1\n"
    b"none: r=-1 errno=10\n"
    b"noflags: r=-1 errno=22\n"
)


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("waitid.c", "-static", name="waitid")


def test_matches_native(guest):
    native = subprocess.run([guest], capture_output=True, timeout=60)
    assert native.stdout == EXPECTED, f"the host disagrees with the spec: {native.stdout!r}"
    r = Machine.from_elf(guest).run(timeout=60)
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, EXPECTED), (
        f"expected {EXPECTED!r}, got {r.stdout!r} ({r.describe()})"
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_any_schedule_gives_the_same_answers(guest, seed):
    r = Machine.from_elf(guest, seed=seed).run(timeout=60)
    assert r.stdout == EXPECTED, r.stdout
