"""The gdb stub at packet level: malformed packets, framing errors, huge input and a
client that goes away.  Every packet gets a protocol answer and the session survives."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time

import pytest
from gdb_client import RawClient, Stub, guest_machine

from emu.frontends.gdbstub import PACKET_SIZE, FrameParser, GdbStub, checksum

E = b"E01"


@pytest.fixture
def session(tmp_path):
    m = guest_machine(tmp_path)
    stub = Stub(m)
    c = RawClient(stub.port)
    yield m, stub, c
    c.close()
    stub.finished(10)
    assert stub.errors == [], "\n".join(stub.errors)


MALFORMED = [
    (b"mZZ,4", E),
    (b"m401000", E),
    (b"m,4", E),
    (b"m401000,ZZ", E),
    (b"m401000,", E),
    (b"m" + b"f" * 20 + b",4", E),
    (b"mffffffffffffffff,2", E),
    (b"H", E),
    (b"Hx0", E),
    (b"Hg", E),
    (b"HgZZ", E),
    (b"Hg777777", E),
    (b"p", E),
    (b"pZZ", E),
    (b"pffff", E),
    (b"P1", E),
    (b"P1=zz", E),
    (b"P1=00", E),
    (b"Pzz=0000000000000000", E),
    (b"P999=00", E),
    (b"G123", E),
    (b"Gzz", E),
    (b"vCont", E),
    (b"vCont;", E),
    (b"vCont;x", E),
    (b"vCont;c:zz", E),
    (b"vCont;C", E),
    (b"qRcmd,6", E),
    (b"qRcmd,zz", E),
    (b"M401000,4", E),
    (b"M401000,4:zz", E),
    (b"M401000,2:90", E),
    (b"Mzz,1:90", E),
    (b"X401000", E),
    (b"X401000,1:}", E),
    (b"X401000,2:\x90", E),
    (b"Xzz,1:\x90", E),
    (b"Z0", E),
    (b"Z0,", E),
    (b"Z0,zz,1", E),
    (b"Z0,401000", E),
    (b"z0,zz,1", E),
    (b"Z9,0,1", E),
    (b"T", E),
    (b"TZZ", E),
    (b"cZZ", E),
    (b"sZZ", E),
    (b"D;zz", E),
    (b"D;", E),
    (b"qXfer:features:read:target.xml:", E),
    (b"qXfer:features:read:target.xml:zz,10", E),
    (b"qXfer:features:read:nope.xml:0,10", b"E00"),
    (b"*a", E),
    (b"m*", E),
    (b"qUnknownThing", b""),
    (b"", b""),
]


@pytest.mark.parametrize("packet,expected", MALFORMED, ids=[repr(p)[2:-1] or "empty" for p, _ in MALFORMED])
def test_malformed_packet_gets_an_answer_and_the_session_goes_on(session, packet, expected):
    _, stub, c = session
    got = c.ask(packet)
    assert got == expected, f"{packet!r}: expected {expected!r}, got {got!r}"
    assert c.ask(b"?") == b"S05", "the session must survive a malformed packet"
    assert stub.errors == []


def test_monitor_command_that_is_not_utf8_is_answered(session):
    _, _, c = session
    c.send_packet(b"qRcmd," + b"\xff\xfe".hex().encode())
    assert c.ack() == b"+"
    out = bytes.fromhex(c.reply()[1:].decode()).decode()
    assert out == "unknown monitor command '\ufffd\ufffd'; try: probes, counters, raw ADDR [LEN]\n", out
    assert c.reply() == b"OK"


def test_breakpoint_at_an_unmapped_address_is_an_error_reply(session):
    _, _, c = session
    assert c.ask(b"Z0,10,1") == b"E14"
    assert c.ask(b"?") == b"S05"


def test_a_huge_read_length_is_a_short_read(session):
    """No more than a reply can hold, and no further than the mapping goes."""
    m, _, c = session
    stack = m.mem.find_vma(m.read_regs().rsp)
    got = c.ask(b"m%x,ffffffffff" % stack.start)
    assert len(got) == 2 * ((PACKET_SIZE - 1) // 2), f"expected a short read, got {len(got)} hex digits"
    assert bytes.fromhex(got.decode()) == m.mem.read(stack.start, (PACKET_SIZE - 1) // 2)
    got = c.ask(b"m%x,10" % (stack.end - 4))
    assert got == m.mem.read(stack.end - 4, 4).hex().encode(), "a read past the mapping stops at its end"


@pytest.mark.parametrize("verb", [b"c", b"s", b"vCont;c", b"vCont;s:1"])
def test_run_control_after_exit_repeats_the_exit_status(session, verb):
    _, _, c = session
    assert c.ask(b"c") == b"W2a"
    assert c.ask(verb) == b"W2a", "a finished guest answers with its exit status again"
    assert c.ask(b"Z0,401000,1") == E, "no breakpoints in a process that is gone"


@pytest.mark.parametrize(
    ("packet", "expected"),
    [
        (b"c", "W2a"),
        (b"vCont;c", "W2a"),
        (b"QStartNoAckMode", "OK"),
        (b"qRcmd," + b"counters".hex().encode(), "OK"),
        (b"D", None),
        (b"vKill;1", None),
    ],
)
def test_packets_are_answered_without_a_connection(tmp_path, packet, expected):
    """``GdbStub.handle`` called directly, with no gdb connected (no serve()): a continue
    runs with nobody to interrupt it and the packets sent ahead of a reply go nowhere."""
    stub = GdbStub(guest_machine(tmp_path), checkpoint_interval=0)
    got = stub.handle(packet)
    assert got == expected, f"{packet!r}: expected {expected!r}, got {got!r}"


def test_a_packet_with_a_bad_checksum_is_naked_and_not_executed(session):
    m, _, c = session
    addr = m.resolve("func")
    before = m.mem.read(addr, 1)
    payload = b"M%x,1:90" % addr
    bad = b"%02x" % ((int(checksum(payload), 16) + 1) & 0xFF)
    c.send_packet(payload, cs=bad)
    assert c.ack() == b"-"
    assert c.ask(b"m%x,1" % addr) == before.hex().encode(), "the NAKed M packet wrote memory"


def test_without_acks_a_bad_checksum_is_answered_e01_and_not_executed(session):
    m, _, c = session
    assert c.ask(b"QStartNoAckMode") == b"OK"
    addr = m.resolve("func")
    before = m.mem.read(addr, 1)
    c.send_packet(b"M%x,1:90" % addr, cs=b"00")
    assert c.reply() == E, "no NAK without acks: an error reply"
    c.send_packet(b"m%x,1" % addr)
    assert c.reply() == before.hex().encode(), "the bad packet wrote memory"


def test_an_oversized_packet_is_naked_and_not_executed(session):
    m, _, c = session
    addr = m.resolve("func")
    before = m.mem.read(addr, 1)
    payload = b"M%x,1:90" % addr
    payload += b"0" * (PACKET_SIZE + 1 - len(payload))
    c.send_packet(payload)
    assert c.ack() == b"-"
    assert c.ask(b"m%x,1" % addr) == before.hex().encode(), "the oversized M packet wrote memory"


def test_packet_size_is_advertised_and_a_packet_of_exactly_that_size_is_served(session):
    m, _, c = session
    assert b"PacketSize=%x;" % PACKET_SIZE in c.ask(b"qSupported:swbreak+")
    addr = m.mem.find_vma(m.read_regs().rsp).start
    n = PACKET_SIZE - len(b"X%x,%x:" % (addr, 0x1000))
    payload = b"X%x,%x:" % (addr, n) + b"\xab" * n
    assert len(payload) == PACKET_SIZE
    assert c.ask(payload) == b"OK"
    assert m.mem.read(addr, n) == b"\xab" * n


def test_run_length_encoded_packet_is_expanded(session):
    m, _, c = session
    addr = m.resolve("func")
    assert c.ask(b"M%x,2:9* " % addr) == b"OK", "'9* ' is four nines"
    assert m.mem.read(addr, 2) == b"\x99\x99"


def test_binary_write_unescapes(session):
    m, _, c = session
    addr = m.resolve("func")
    assert c.ask(b"X%x,2:}\x03}\x04" % addr) == b"OK"
    assert m.mem.read(addr, 2) == b"#$"


def test_noise_between_packets_is_ignored(session):
    _, _, c = session
    c.send_raw(b"garbage\x00\xff")
    assert c.ask(b"?") == b"S05"


def test_ctrl_c_during_continue_stops_with_sigint(session):
    m, _, c = session
    c.ask(b"P10=" + m.resolve("spin").to_bytes(8, "little").hex().encode())
    c.send_packet(b"c")
    assert c.ack() == b"+"
    time.sleep(0.2)
    c.send_raw(b"\x03")
    assert c.reply().startswith(b"T02"), "Ctrl-C reports SIGINT"


def _spin_and_continue(m, c):
    assert c.ask(b"P10=" + m.resolve("spin").to_bytes(8, "little").hex().encode()) == b"OK"
    c.send_packet(b"c")
    assert c.ack() == b"+"
    time.sleep(0.3)


@pytest.mark.parametrize("how", ["close", "reset"])
def test_client_gone_during_continue_stops_the_guest_and_ends_the_session(tmp_path, how):
    m = guest_machine(tmp_path)
    before = set(threading.enumerate())
    stub = Stub(m)
    c = RawClient(stub.port)
    _spin_and_continue(m, c)
    c.close() if how == "close" else c.reset()
    assert stub.finished(10), "the stub still serves a client that is gone"
    assert stub.errors == [], "\n".join(stub.errors)
    assert m.last_result.reason == "stopped" and m.last_result.rip == m.resolve("spin"), m.last_result
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert left == [], f"threads left running: {left}"


def test_a_reset_while_idle_ends_the_session_quietly(tmp_path):
    m = guest_machine(tmp_path)
    stub = Stub(m)
    c = RawClient(stub.port)
    assert c.ask(b"?") == b"S05"
    c.reset()
    assert stub.finished(10)
    assert stub.errors == [], "\n".join(stub.errors)


def test_framing_is_linear_and_bounded():
    """A payload far beyond the limit: kept up to the limit, searched once."""
    p = FrameParser()
    chunk = b"A" * (1 << 20)
    assert p.feed(b"$m") == []
    for _ in range(64):
        assert p.feed(chunk) == []
    assert len(p.payload) == PACKET_SIZE, "the parser keeps no more than the packet size"
    assert p.feed(b"#00$?#3f") == [("packet", None, "oversized"), ("packet", b"?", None)]


def _proc_cpu_and_hwm(pid: int) -> tuple[float, int]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return cpu, hwm * 1024


def test_128_mb_without_a_hash_costs_little_cpu_and_memory(tmp_path):
    from gdb_client import GUEST

    from emu.asm import asm_to_elf

    exe = tmp_path / "g"
    exe.write_bytes(asm_to_elf(GUEST)[0])
    srv = subprocess.Popen(
        [shutil.which("uprobe-emu"), "gdbserver", "--port", "0", str(exe)], stderr=subprocess.PIPE, text=True
    )
    try:
        port = int(srv.stderr.readline().rsplit(":", 1)[1])
        c = RawClient(port, timeout=60)
        assert c.ask(b"?") == b"S05"
        cpu0, hwm0 = _proc_cpu_and_hwm(srv.pid)
        chunk = b"A" * (1 << 20)
        c.send_raw(b"$m")
        for _ in range(128):
            c.send_raw(chunk)
        c.send_raw(b"#00")
        assert c.ack() == b"-", "an oversized packet is NAKed"
        assert c.ask(b"?") == b"S05"
        cpu1, hwm1 = _proc_cpu_and_hwm(srv.pid)
        assert cpu1 - cpu0 < 10, f"128 MB of payload cost {cpu1 - cpu0:.1f} s of CPU"
        assert hwm1 - hwm0 < 16 << 20, f"the stub's peak memory grew by {(hwm1 - hwm0) >> 20} MB"
        c.send_packet(b"k")
        assert srv.wait(20) == 0
        assert "Traceback" not in srv.stderr.read()
    finally:
        srv.kill()
        srv.wait()
