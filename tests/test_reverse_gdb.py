"""Reverse execution through the gdb remote protocol: ``bs``/``bc`` packets and
``ReverseStep+;ReverseContinue+`` in qSupported, driven by a real gdb (``gdb -batch``)
against the stub on a gcc-built, probed, threaded and forking guest."""

from __future__ import annotations

import re

import pytest
from test_gdbstub import gdb_session as _gdb_session

from emu import Machine
from emu.frontends.gdbstub import GdbStub

EXPECTED_STDOUT = b"start 10\nthreads 77\nchild 15\nparent saw 7, 6\n"
WORK_CALLS = 39  # work() entries of one run of the guest


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("replay.c", "-static", "-pthread", name="replay")


def probed(path: str) -> tuple[Machine, list]:
    m = Machine.from_elf(path, seed=1)
    hits: list = []
    m.uprobes.register("work", handler=lambda c: hits.append(c.regs.rdi))
    return m, hits


def gdb_session(machine, exe, commands, timeout=120):
    """Serve ``machine`` on a free port in a thread; run gdb -batch with ``commands``."""
    return _gdb_session(machine, exe, commands, timeout=timeout, join=30)


def printed(out: str) -> list[str]:
    """The values of gdb's ``p`` commands, in order."""
    return re.findall(r"^\$\d+ = (.*)$", out, re.M)


def test_qsupported_offers_reverse_execution_and_bs_bc_answer_with_stops(guest):
    m, _ = probed(guest)
    stub = GdbStub(m)
    assert "ReverseStep+;ReverseContinue+" in stub.handle(b"qSupported:multiprocess+")
    assert stub.handle(b"bs") == f"T05replaylog:begin;thread:p{m.process.pid:x}.{m.task.tid:x};"  # multiprocess
    assert stub.handle(b"bx") == "E01"
    off = GdbStub(Machine.from_elf(guest), checkpoint_interval=0)
    assert "Reverse" not in off.handle(b"qSupported") and off.handle(b"bs") == ""


def test_gdb_reverse_continue_goes_back_to_each_earlier_breakpoint_hit(guest):
    m, hits = probed(guest)
    out = gdb_session(
        m,
        guest,
        [
            "break *work+5",
            "continue",
            "continue",
            "continue",
            "p $rdi",
            "reverse-continue",
            "p $rdi",
            "reverse-continue",
            "p $rdi",
            "reverse-continue",
            "p $pc",
        ],
    )
    assert printed(out)[:3] == ["2", "3", "4"], out
    assert "No more reverse-execution history." in out, out
    assert printed(out)[3].endswith("<_start>"), out


def test_gdb_reverse_stepi_then_stepi_returns_to_the_same_registers(guest):
    m, _ = probed(guest)
    out = gdb_session(
        m,
        guest,
        [
            "break *work+5",
            "continue",
            "continue",
            "delete",
            "stepi 4",
            "info registers",
            "reverse-stepi",
            "reverse-stepi",
            "reverse-stepi",
            "stepi",
            "stepi",
            "stepi",
            "info registers",
        ],
    )
    dumps = re.findall(r"^rax .*?^gs +0x.*?$", out, re.M | re.S)
    assert len(dumps) == 2 and dumps[0] == dumps[1], out


def test_gdb_reverse_stepi_over_a_probed_instruction_lands_on_it(guest):
    m, _ = probed(guest)
    work = m.resolve("work")
    out = gdb_session(m, guest, ["break *work+5", "continue", "reverse-stepi", "p $pc", "reverse-stepi", "p $pc"])
    pcs = printed(out)
    assert pcs[0].startswith(f"(void (*)()) {work:#x} <work>"), out
    assert "<main" in pcs[1], out  # the call of work(4) in main


def test_after_a_reverse_session_the_run_ends_as_it_would_have(guest):
    m, hits = probed(guest)
    m.capture_output = True
    out = gdb_session(
        m, guest, ["break *work+5", "continue", "continue", "reverse-continue", "reverse-stepi", "delete", "continue"]
    )
    assert "exited normally" in out, out
    assert bytes(m.stdout) == EXPECTED_STDOUT
    # the counters are the model's: a replay restores them before it repeats the hits
    assert m.counters.uprobe_hits == WORK_CALLS, m.counters.uprobe_hits


def test_gdb_reverse_next_steps_back_over_a_fork_at_source_level(guest):
    m, _ = probed(guest)
    out = gdb_session(m, guest, ["break replay.c:38", "continue", "next", "next", "reverse-next", "info line *$pc"])
    lines = out.splitlines()
    assert lines.count("39\t    pid_t pid = fork();") == 2, out  # by next, then by reverse-next
    assert re.search(r'^Line 39 of ".*replay\.c" starts at address', out, re.M), out
