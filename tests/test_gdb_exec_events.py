"""Exec events over the remote protocol: ``exec-events+`` is announced only when gdb
offers it, an exec of the followed process is the ``T05exec:<hex path>;`` stop reply
(gdb's "Stop Reply Packets"), and a real gdb stops there with ``catch exec``, reloads
the new program's symbols and hits a breakpoint in the new image."""

from __future__ import annotations

import re

import pytest
from gdb_client import RawClient, Stub
from test_gdbstub import gdb_session
from test_stepper_exec import first_instruction
from test_stepper_unwind import unwind_guest  # noqa: F401 (fixture)

from emu import Machine
from emu.debug.stepper import Stepper

NO_DEBUG = ["set debuginfod enabled off", "set debug-file-directory /nonexistent"]


def features(reply: bytes) -> list[bytes]:
    return reply.split(b";")


@pytest.mark.parametrize(
    "offered, announced",
    [
        (b"qSupported:multiprocess+;exec-events+;swbreak+", True),
        (b"qSupported:multiprocess+;swbreak+", False),
        (b"qSupported", False),
    ],
    ids=["offered", "not-offered", "bare"],
)
def test_exec_events_are_announced_only_when_gdb_offers_them(unwind_guest, offered, announced):
    prog = unwind_guest("static", "-O2")
    stub = Stub(Machine.from_elf(prog))
    c = RawClient(stub.port)
    got = b"exec-events+" in features(c.ask(offered))
    assert got == announced, f"{offered!r}: exec-events+ announced {got}, expected {announced}"
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == [], stub.errors


def test_an_exec_is_the_exec_stop_reply_with_the_hex_encoded_path(unwind_guest):
    """After the exec the reply names the new program and the thread; the guest waits
    at the new image's first instruction (ld.so's entry for a dynamic program)."""
    prog, new = unwind_guest("static", "-O2"), unwind_guest("dynamic", "-O2")
    m = Machine.from_elf(prog, argv=[prog, "exec", new])
    stub = Stub(m)
    c = RawClient(stub.port)
    c.ask(b"qSupported:exec-events+")
    reply = c.ask(b"c")
    tid = m.task.tid
    want = b"T05exec:%s;thread:%x;" % (new.encode().hex().encode(), tid)
    assert reply == want, f"expected {want!r}, got {reply!r}"
    entry = first_instruction(m)
    assert m.pc == entry, f"pc {m.pc:#x}, expected the interpreter's entry {entry:#x}"
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == [], stub.errors


def test_without_exec_events_the_exec_is_followed_silently(unwind_guest):
    """An older gdb (no exec-events+): the run goes on in the new image to its end."""
    prog, new = unwind_guest("static", "-O2"), unwind_guest("dynamic", "-O2")
    m = Machine.from_elf(prog, argv=[prog, "exec", new])
    stub = Stub(m)
    c = RawClient(stub.port)
    c.ask(b"qSupported:swbreak+")
    reply = c.ask(b"c")
    assert re.fullmatch(rb"W[0-9a-f]{2}", reply), f"expected the guest's exit, got {reply!r}"
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == [], stub.errors


def test_a_step_through_the_exec_syscall_is_the_exec_stop(unwind_guest):
    """vCont;s over the execve syscall: gdbserver reports the exec, not a plain step."""
    prog, new = unwind_guest("static", "-O2"), unwind_guest("static", "-O0")
    m = Machine.from_elf(prog, argv=[prog, "exec", new])
    stub = Stub(m)
    c = RawClient(stub.port)
    c.ask(b"qSupported:exec-events+")
    probe = Stepper(Machine.from_elf(prog, argv=[prog, "exec", new]))
    addr = probe.machine.resolve("execve")
    while probe.original_insn(addr).mnemonic != "syscall":
        addr = probe.original_insn(addr).next
    assert c.ask(b"Z0,%x,1" % addr) == b"OK"
    assert c.ask(b"c").startswith(b"T05swbreak:"), "the breakpoint on the syscall"
    assert c.ask(b"z0,%x,1" % addr) == b"OK"
    reply = c.ask(b"vCont;s")
    want = b"T05exec:%s;thread:%x;" % (new.encode().hex().encode(), m.task.tid)
    assert reply == want, f"expected {want!r}, got {reply!r}"
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == [], stub.errors


def test_gdb_catch_exec_stops_at_the_exec_and_breaks_in_the_new_image(unwind_guest):
    """gdb's own lines: the exec note, the catchpoint stop in ld.so of the new program,
    and a breakpoint set by name before the exec that hits in the new image (gdb
    re-set it from the new program's symbols, read through vFile)."""
    prog, new = unwind_guest("static", "-O2"), unwind_guest("dynamic", "-O2")
    m = Machine.from_elf(prog, argv=[prog, "exec", new])
    out = gdb_session(m, prog, NO_DEBUG + ["catch exec", "break leaf", "continue", "continue", "bt", "kill"])
    lines = out.splitlines()
    assert f"process {m.process.pid} is executing new program: {new}" in lines, out
    assert re.search(
        rf"^Catchpoint 1 \(exec'd {re.escape(new)}\), 0x[0-9a-f]+ in \?\? \(\) "
        r"from target:/lib64/ld-linux-x86-64\.so\.2$",
        out,
        re.M,
    ), out
    leaf = Machine.from_elf(new)
    stop = re.search(r"^Breakpoint 2, (0x[0-9a-f]+) in leaf \(\)$", out, re.M)
    assert stop, out
    assert re.search(r"^#1  0x[0-9a-f]+ in again \(\)$", out, re.M), out
    assert int(stop.group(1), 16) & 0xFFF == leaf.process.exe.elf.resolve("leaf").value & 0xFFF, out
