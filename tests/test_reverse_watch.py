"""reverse-continue stops at watchpoints too (issue: reverse execution "to breakpoints
and watchpoints"): going back, a watchpoint stops where the forward run reported it -
right after the accessing instruction - so the state equals the forward stop's, and
gdb's ``bc`` answers ``T05watch:ADDR``."""

from __future__ import annotations

import pytest
from gdb_client import RawClient, Stub
from test_gdb_watchpoints import WATCH_GUEST

from emu import Machine
from emu.debug.reverse import HISTORY_START, ReverseStepper
from emu.frontends.stepper import Stepper


def state(m) -> tuple:
    return (m.pc, m.reg_read("rcx"), int.from_bytes(m.mem.read(m.resolve("buf"), 8), "little"))


@pytest.mark.parametrize("interval", [1, 4, 1000])
def test_reverse_continue_returns_to_each_earlier_write_watch_stop(interval):
    m = Machine.from_asm(WATCH_GUEST)
    s = Stepper(m)
    rs = ReverseStepper.of(s, interval=interval)
    s.watch("buf", 8, "write")
    forward = []
    for _ in range(3):
        ev = s.cont()
        assert ev.reason == "watchpoint", ev.reason
        forward.append(state(m))
    assert [f[2] for f in forward] == [5, 10, 15], forward
    backward = []
    for _ in range(2):
        ev = rs.reverse_continue()
        assert (ev.reason, ev.watchpoint.address, ev.data_addr) == ("watchpoint", m.resolve("buf"), m.resolve("buf")), (
            ev.reason,
            ev.data_addr,
        )
        backward.append(state(m))
    assert backward == forward[1::-1], f"expected {forward[1::-1]}, got {backward}"
    assert rs.reverse_continue().reason == HISTORY_START


def test_a_read_watchpoint_in_reverse_ignores_the_writes():
    m = Machine.from_asm(WATCH_GUEST)
    s = Stepper(m)
    rs = ReverseStepper.of(s, interval=2)
    s.run_until("loop")
    s.step(5)  # one round: add, mov (the read), dec, jnz, add
    s.watch("other", 8, "read")
    ev = rs.reverse_continue()
    read_at = m.resolve("loop") + 4  # the mov that reads other
    assert (ev.reason, m.pc) == ("watchpoint", read_at + 4), (ev.reason, hex(m.pc))
    assert state(m)[2] == 5, f"after the first round's read buf is 5, got {state(m)[2]}"


def test_continue_after_a_reverse_watch_stop_goes_on_to_the_next_write():
    m = Machine.from_asm(WATCH_GUEST)
    s = Stepper(m)
    rs = ReverseStepper.of(s, interval=3)
    s.watch("buf", 8, "write")
    for _ in range(3):
        s.cont()
    rs.reverse_continue()
    rs.reverse_continue()
    assert state(m)[2] == 5
    ev = s.cont()
    assert (ev.reason, state(m)[2]) == ("watchpoint", 10), (ev.reason, state(m))


def test_gdb_bc_reports_the_watchpoint():
    m = Machine.from_asm(WATCH_GUEST)
    stub = Stub(m)
    c = RawClient(stub.port)
    buf = m.resolve("buf")
    try:
        assert c.ask(b"Z2,%x,8" % buf) == b"OK"
        assert c.ask(b"c").startswith(b"T05watch:%x;" % buf)
        assert c.ask(b"c").startswith(b"T05watch:%x;" % buf)
        reply = c.ask(b"bc")
        assert reply == b"T05watch:%x;thread:%x;" % (buf, m.task.tid), reply
        assert int.from_bytes(m.mem.read(buf, 8), "little") == 5
        assert c.ask(b"bc").startswith(b"T05replaylog:begin;")
    finally:
        c.close()
        stub.finished(10)
    assert stub.errors == [], "\n".join(stub.errors)
