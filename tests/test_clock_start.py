"""The guest's CLOCK_REALTIME starts where the machine is told (``realtime_ns``,
``--clock``): fixed at 2026-01-01T00:00:00Z by default, at the host's time with
``--clock host`` (so a guest dates files as the host does), or at given seconds; the
boot-relative clocks (CLOCK_MONOTONIC, CLOCK_BOOTTIME, uptime) start at 0 either way."""

from __future__ import annotations

import time

import pytest
from cli_helpers import cli

from emu.machine import Machine
from kernel_model.errors import InputError

# clock_gettime(CLOCK_REALTIME) then (CLOCK_MONOTONIC) into r12/r13 (seconds), exit 0
CLOCKS = """
_start:
    sub rsp, 32
    mov eax, 228
    xor edi, edi
    mov rsi, rsp
    syscall
    mov r12, [rsp]
    mov eax, 228
    mov edi, 1
    lea rsi, [rsp + 16]
    syscall
    mov r13, [rsp + 16]
    mov eax, 231
    xor edi, edi
    syscall
"""


def clocks(**kw) -> tuple[int, int]:
    m = Machine.from_asm(CLOCKS, **kw)
    assert m.run().exit_code == 0
    return m.regs.r12, m.regs.r13


@pytest.mark.parametrize("start", [0, 86_400, 1_767_225_600, 4_000_000_000])
def test_realtime_starts_at_the_given_time_and_monotonic_at_boot(start):
    assert clocks(realtime_ns=start * 1_000_000_000) == (start, 0)


def test_the_default_start_is_2026_01_01():
    assert clocks() == (1_767_225_600, 0)


@pytest.mark.parametrize("bad", [-1, 1 << 62, "now", 1.5, True])
def test_a_bad_start_is_an_input_error(bad):
    with pytest.raises(InputError, match="realtime_ns must be nanoseconds since the epoch"):
        Machine.from_asm(CLOCKS, realtime_ns=bad)


@pytest.mark.parametrize("clock, want", [("fixed", 1_767_225_600), ("86400", 86_400), ("0", 0)])
def test_cli_clock_sets_what_date_prints(clock, want):
    p = cli("run", "--clock", clock, "/bin/date", "-u", "+%s")
    assert p.returncode == 0, p.stderr.decode()
    assert int(p.stdout) == want, p.stdout


def test_cli_clock_host_is_the_hosts_time():
    before = int(time.time())
    p = cli("run", "--clock", "host", "/bin/date", "-u", "+%s")
    assert p.returncode == 0, p.stderr.decode()
    assert before <= int(p.stdout) <= int(time.time()) + 1, (before, p.stdout)


@pytest.mark.parametrize("bad", ["now", "-5", "1e99", "nan"])
def test_cli_a_bad_clock_is_one_line(bad):
    p = cli("run", "--clock", bad, "/bin/true")
    err = p.stderr.decode()
    assert p.returncode == 2 and len(err.splitlines()) == 1 and "--clock" in err, err
