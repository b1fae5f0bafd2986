"""Seeded fuzzing of the gdb stub: mutated packets and raw line noise.  The stub must
answer every packet (an ack and exactly one reply), never raise, never hang."""

from __future__ import annotations

import random
import time

import pytest
from gdb_client import RawClient, Stub, guest_machine

SEED = 20261201
SESSIONS, PER_SESSION = 8, 50  # 400 mutated packets
BUDGET = 200_000  # guest instructions per c/s: a random rip can loop

SEEDS = [
    b"?",
    b"g",
    b"G" + b"00" * 64,
    b"m401000,10",
    b"M401000,2:9090",
    b"X401000,1:\x90",
    b"p10",
    b"P0=0100000000000000",
    b"Hg1",
    b"Hc-1",
    b"T1",
    b"qC",
    b"qfThreadInfo",
    b"qsThreadInfo",
    b"qAttached",
    b"qSupported:swbreak+;xmlRegisters=i386",
    b"qXfer:features:read:target.xml:0,ffb",
    b"Z0,401005,1",
    b"z0,401005,1",
    b"s",
    b"c",
    b"vCont?",
    b"vCont;s:1",
    b"vCont;c",
    b"qRcmd,70726f626573",
    b"qRcmd,636f756e74657273",
    b"m*!",
    b"qOffsets",
]
ENDS_SESSION = (b"D", b"k", b"vKill", b"QStartNoAckMode")
ALPHABET = b"0123456789abcdefABCDEF,:;=-}*$#xyzZ\x00\x03\xff gmMpPXHTcsvq"


def mutate(rng: random.Random, pkt: bytes) -> bytes:
    b = bytearray(pkt)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        pos = rng.randint(0, len(b))
        if op == 0 and b:  # replace a byte
            b[min(pos, len(b) - 1)] = rng.choice(ALPHABET)
        elif op == 1:  # insert bytes
            b[pos:pos] = bytes(rng.choice(ALPHABET) for _ in range(rng.randint(1, 8)))
        elif op == 2:  # truncate
            del b[pos:]
        elif op == 3 and b:  # duplicate a slice
            b[pos:pos] = b[rng.randint(0, len(b) - 1) :][: rng.randint(1, 16)]
        else:  # a long hex run
            b[pos:pos] = b"f" * rng.randint(1, 40)
    # framing bytes inside a payload would split it: keep them out of the payload
    return bytes(b).replace(b"$", b"}").replace(b"#", b"*")


def one_packet(c: RawClient, payload: bytes) -> bytes:
    c.send_packet(payload)
    got = c.ack()
    assert got == b"+", f"{payload!r}: expected '+', got {got!r}"
    reply = c.reply()
    if payload.startswith(b"qRcmd,") and reply.startswith(b"O") and reply != b"OK":
        reply = c.reply()  # monitor output, then the answer
    return reply


@pytest.mark.parametrize("session", range(SESSIONS))
def test_mutated_packets_are_all_answered(tmp_path, session):
    rng = random.Random(SEED + session)
    stub = Stub(guest_machine(tmp_path), max_insns=BUDGET)
    c = RawClient(stub.port, timeout=20)
    start = time.monotonic()
    try:
        sent = 0
        while sent < PER_SESSION:
            payload = mutate(rng, rng.choice(SEEDS))
            if payload.startswith(ENDS_SESSION):
                continue
            one_packet(c, payload)
            sent += 1
        assert one_packet(c, b"qC").startswith(b"QC"), "the session is still usable"
    finally:
        c.close()
    assert stub.finished(10), "the stub did not end after the client left"
    assert stub.errors == [], "\n".join(stub.errors)
    assert time.monotonic() - start < 30, "the fuzz session took too long"


@pytest.mark.parametrize("session", range(4))
def test_line_noise_then_a_packet_is_answered(tmp_path, session):
    """Random bytes (framing characters included), then a resynchronising tail: the stub
    answers the final qC, whatever the noise did to its framing state."""
    rng = random.Random(SEED * 7 + session)
    stub = Stub(guest_machine(tmp_path), max_insns=BUDGET)
    c = RawClient(stub.port, timeout=20)
    try:
        for _ in range(25):
            noise = bytes(rng.choice(ALPHABET + b"++--") for _ in range(rng.randint(1, 200)))
            if any(s in noise for s in (b"$D", b"$k", b"$vKill", b"$Q")):
                continue
            c.send_raw(noise + b"$#00$qC#b4")
            while True:
                reply = c.reply(naks_ok=True)
                if reply.startswith(b"QC"):
                    break
    finally:
        c.close()
    assert stub.finished(10)
    assert stub.errors == [], "\n".join(stub.errors)
