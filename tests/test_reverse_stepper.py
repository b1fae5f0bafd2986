"""The stepper's reverse verbs (emu.debug.reverse): reverse-stepi,
reverse-step, reverse-continue - driven through ``uprobe-emu step``'s stdin and the
engine API - go back by restoring a checkpoint and replaying, and land exactly where
the forward run was."""

from __future__ import annotations

import re

import pytest
from cli_helpers import cli

from emu import Machine
from emu.debug.reverse import HISTORY_START, ReverseStepper
from emu.frontends.stepper import Stepper

EXPECTED_STDOUT = "start 10\nthreads 77\nchild 15\nparent saw 7, 6\n"

# main calls f twice; f is probed in the tests that want a probed instruction
CALLS = """
_start:
    mov rbx, 5
    call f
after_first:
    call f
after_second:
    mov eax, 60
    mov edi, ebx
    syscall
f:
    add rbx, 10
    mov rax, rbx
    ret
"""


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("replay.c", "-static", "-pthread", name="replay")


def probes(path: str) -> list[str]:
    return ["-e", f"p:g/w {path}:work n=%di", "-e", f"r:g/wr {path}:work ret=$retval"]


def step_session(path: str, commands: str, *extra: str) -> tuple[str, str]:
    proc = cli("step", *extra, path, input=commands.encode())
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode(), proc.stderr.decode()


def register_dumps(out: str) -> list[str]:
    """Each ``info registers`` block of a session's output (rax .. gs lines)."""
    blocks, cur = [], []
    for line in out.splitlines():
        if re.match(r"^(r[a-z0-9]+|e?flags|[cdefgs]s|fs_base|gs_base|k\d)\s+0x", line):
            cur.append(line)
        elif cur:
            blocks.append("\n".join(cur))
            cur = []
    if cur:
        blocks.append("\n".join(cur))
    return blocks


@pytest.mark.parametrize("n", [1, 3, 7, 25])
def test_reverse_stepi_n_then_stepi_n_is_the_same_state(guest, n):
    out, err = step_session(
        guest, f"b work\nc\nc\ndelete\nsi 5\ninfo registers\nrsi {n}\nsi {n}\ninfo registers\nq\n", *probes(guest)
    )
    before, after = register_dumps(out)
    assert after == before, f"after rsi {n}; si {n}:\n{after}\nexpected:\n{before}\n{err}"


def test_reverse_stepi_lands_on_the_probed_instruction_and_its_handler_runs_once_again(guest):
    out, err = step_session(guest, "b work\nc\nsi\nrsi\nsi\nsi\nq\n", *probes(guest))
    lines = out.splitlines()
    # back on work's first instruction: the probe's int3, shown with the original insn
    at = [i for i, line in enumerate(lines) if line.startswith("=> 0x") and "<work>" in line]
    assert len(at) == 2 and "mov    eax, 1        # uprobe site, in memory: int3" in lines[at[1]], out
    trace = [line for line in lines if re.search(r" w: \(0x[0-9a-f]+\) n=0x4$", line)]
    assert len(trace) == 1, f"the entry event of work(4) must be printed once, got {trace}\n{out}"


@pytest.mark.parametrize("hits, back, rdi", [(3, 1, "0x3"), (3, 2, "0x4"), (4, 3, "0x4")])
def test_reverse_continue_stops_at_the_previous_breakpoint_hit(guest, hits, back, rdi):
    cmds = "b work\n" + "c\n" * hits + "rc\n" * back + "p/x $rdi\nq\n"
    out, err = step_session(guest, cmds)
    assert out.count("Breakpoint 1, 0x") == hits + back, out
    assert out.strip().splitlines()[-1].endswith(f"= {rdi}"), out


def test_reverse_continue_without_an_earlier_hit_goes_to_the_start_of_history(guest):
    out, _ = step_session(guest, "b work\nc\nrc\ninfo registers rip\nq\n")
    assert "\nNo more reverse-execution history.\n" in out, out
    entry = re.search(r"^=> (0x[0-9a-f]+) <_start>:", out, re.M)
    assert entry is not None and out.strip().splitlines()[-1].startswith(f"rip            {entry.group(1)}"), out


def test_guest_output_and_trace_lines_are_not_repeated_by_a_replay(guest):
    out, err = step_session(guest, "c\nrc\nc\nq\n", *probes(guest))
    assert out.count("start 10\n") == 1 and out.count("parent saw 7, 6\n") == 1, out
    assert out.count("exited normally") == 2, out
    entries = [line for line in out.splitlines() if " w: (" in line]
    assert len(entries) == 39, f"{len(entries)} entry events (work is entered 39 times)\n{out}"


def test_reverse_step_undoes_a_whole_call():
    m = Machine.from_asm(CALLS)
    s = Stepper(m)
    rs = ReverseStepper.of(s, interval=3)
    s.run_until("after_second")
    assert m.reg_read("rbx") == 25
    ev = rs.reverse_step()
    assert (ev.reason, m.pc, m.reg_read("rbx")) == ("step", m.resolve("after_first"), 15), (
        ev.reason,
        hex(m.pc),
        m.reg_read("rbx"),
    )
    ev = rs.reverse_step()
    assert (m.pc, m.reg_read("rbx")) == (m.resolve("_start") + 7, 5), (hex(m.pc), m.reg_read("rbx"))
    assert rs.reverse_step().reason == "step" and m.pc == m.resolve("_start")
    assert rs.reverse_step().reason == HISTORY_START


def test_reverse_stepi_into_a_call_returns_to_its_ret():
    m = Machine.from_asm(CALLS)
    s = Stepper(m)
    rs = ReverseStepper.of(s, interval=4)
    s.run_until("after_first")
    rs.reverse_stepi()
    assert (m.pc, m.reg_read("rbx")) == (m.resolve("f") + 7, 15), hex(m.pc)  # at f's ret


@pytest.mark.parametrize(
    "command, message",
    [
        ("rsi 0", "bad count"),
        ("reverse-continue 3", "takes no argument"),
    ],
)
def test_bad_reverse_commands_are_one_line_errors(guest, command, message):
    out, err = step_session(guest, f"{command}\nq\n")
    assert err.strip().splitlines() == [err.strip()] and message in err, err


def test_a_negative_checkpoint_interval_is_a_usage_error(guest):
    proc = cli("step", "--checkpoint-interval", "-1", guest, input=b"q\n")
    assert proc.returncode == 2 and "checkpoint-interval" in proc.stderr.decode(), proc.stderr
