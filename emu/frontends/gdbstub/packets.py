"""GDB remote serial protocol packets: framing, checksums, escapes, and the hex fields
of packet arguments.

The client is untrusted input: framing is a linear, bounded state machine
(:class:`FrameParser`, packets capped at :data:`PACKET_SIZE`) and a malformed argument
is a :class:`Malformed` (answered ``E01``).
"""

from __future__ import annotations

import collections
import re
import select
import socket

PACKET_SIZE = 0x4000  # advertised as PacketSize: the most payload bytes we accept
_DECODED_MAX = 4 * PACKET_SIZE  # a run-length encoded payload may expand this far
_ACK_RETRIES = 3  # retransmissions after a '-' before we give up on the peer
MASK64 = (1 << 64) - 1


class Malformed(ValueError):
    """A packet whose arguments cannot be parsed: answered with ``E01``."""


class Disconnected(Exception):
    """The client closed the connection or reset it."""


def checksum(data: bytes) -> bytes:
    return b"%02x" % (sum(data) & 0xFF)


def unescape_binary(data: bytes) -> bytes:
    """Undo the ``}`` escapes of binary data (X packets); a trailing ``}`` is malformed."""
    parts = data.split(b"}")
    out = bytearray(parts[0])
    for part in parts[1:]:
        if not part:
            raise Malformed("dangling escape")
        out.append(part[0] ^ 0x20)
        out += part[1:]
    return bytes(out)


def escape_binary(data: bytes) -> bytes:
    """Binary data in a reply (qXfer): ``$ # } *`` become ``}`` and the byte xor 0x20,
    as gdbserver's remote_escape_output does."""
    return re.sub(rb"[$#}*]", lambda m: b"}" + bytes([m.group()[0] ^ 0x20]), data)


def expand_runs(data: bytes) -> bytes:
    """Run-length decoding: ``X*N`` repeats X ``ord(N) - 29`` more times (gdb's
    read_frame).  Bounded by :data:`_DECODED_MAX`."""
    if b"*" not in data:
        return data
    out = bytearray()
    i = 0
    while True:
        j = data.find(b"*", i)
        if j < 0:
            out += data[i:]
            break
        out += data[i:j]
        if not out or j + 1 >= len(data) or not 32 <= data[j + 1] <= 126:
            raise Malformed("bad run-length encoding")
        out += out[-1:] * (data[j + 1] - 29)
        if len(out) > _DECODED_MAX:
            raise Malformed("run-length encoding expands too far")
        i = j + 2
    return bytes(out)


# frame events produced by FrameParser
ACK, NAK, INTERRUPT, PACKET = "ack", "nak", "interrupt", "packet"
_IDLE_SPECIAL = re.compile(rb"[$+\-\x03]")
_PAYLOAD_END = re.compile(rb"[$#]")


class FrameParser:
    """The remote protocol's framing as a byte-stream state machine: linear in its input
    (C-level searches, every byte looked at once) and bounded (a payload is kept up to
    ``limit`` bytes; the rest of an oversized packet is only counted).

    Events: ``(ACK,)``, ``(NAK,)``, ``(INTERRUPT,)`` and ``(PACKET, payload, problem)``
    where ``problem`` is None, ``"checksum"`` or ``"oversized"``; a bad packet's payload
    is None, so nobody can execute it.  Bytes outside packets other than ``+ - ^C`` are
    line noise and dropped; a ``$`` inside a payload restarts the packet (the sender
    gave up on the previous one).
    """

    def __init__(self, limit: int = PACKET_SIZE):
        self.limit = limit
        self.state = "idle"
        self.payload = bytearray()
        self.size = 0
        self.csum = bytearray()

    def _start(self) -> None:
        self.state, self.size = "payload", 0
        self.payload.clear()
        self.csum.clear()

    def feed(self, data: bytes) -> list:
        out = []
        i, n = 0, len(data)
        while i < n:
            if self.state == "idle":
                m = _IDLE_SPECIAL.search(data, i)
                if m is None:
                    break
                c = data[m.start()]
                i = m.end()
                if c == 0x24:
                    self._start()
                else:
                    out.append((ACK,) if c == 0x2B else (NAK,) if c == 0x2D else (INTERRUPT,))
            elif self.state == "payload":
                m = _PAYLOAD_END.search(data, i)
                j = m.start() if m else n
                room = self.limit - len(self.payload)
                if room > 0:
                    self.payload += data[i : min(j, i + room)]
                self.size += j - i
                i = j
                if m is not None:
                    i += 1
                    if data[j] == 0x24:
                        self._start()
                    else:
                        self.state = "csum"
            else:
                take = min(2 - len(self.csum), n - i)
                self.csum += data[i : i + take]
                i += take
                if len(self.csum) == 2:
                    out.append(self._finish())
        return out

    def _finish(self) -> tuple:
        self.state = "idle"
        if self.size > self.limit:
            return (PACKET, None, "oversized")
        payload = bytes(self.payload)
        if checksum(payload) != bytes(self.csum).lower():
            return (PACKET, None, "checksum")
        return (PACKET, payload, None)


class GdbConnection:
    """One client: framing with acks until QStartNoAckMode; 0x03 is Ctrl-C.

    A packet with a bad checksum or beyond :data:`PACKET_SIZE` is NAKed (``-``) and
    dropped, never executed; without acks (no NAK to send) it is answered ``E01``.
    A closed or reset connection raises :class:`Disconnected`.
    """

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.ack = True
        self.parser = FrameParser()
        self.events: collections.deque = collections.deque()
        self.closed = False

    def pump(self, timeout: float | None = None) -> bool:
        """Read what the socket has (waiting up to ``timeout``; None: block) into events;
        False when nothing arrived in time.  Raises Disconnected at EOF or reset."""
        if self.closed:
            raise Disconnected()
        if timeout is not None:
            r, _, _ = select.select([self.sock], [], [], timeout)
            if not r:
                return False
        try:
            data = self.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self.closed = True
            raise Disconnected()
        self.events.extend(self.parser.feed(data))
        return True

    def _raw_send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            self.closed = True
            raise Disconnected() from None

    def read_packet(self) -> bytes:
        """The next good packet's payload (run-length decoded), or b"\\x03" for an
        interrupt.  Bad packets are NAKed (or answered E01) here."""
        while True:
            while not self.events:
                self.pump()
            ev = self.events.popleft()
            if ev[0] == INTERRUPT:
                return b"\x03"
            if ev[0] != PACKET:
                continue  # a stray ack
            _, payload, problem = ev
            if problem is not None:
                if self.ack:
                    self._raw_send(b"-")
                else:
                    self.send("E01")
                continue
            if self.ack:
                self._raw_send(b"+")
            try:
                return expand_runs(payload)
            except Malformed:
                self.send("E01")

    def send(self, payload: bytes | str) -> None:
        """Send one packet; with acks, wait for ``+`` (a packet instead counts as one:
        gdb stopped waiting) and retransmit after ``-`` a few times."""
        if isinstance(payload, str):
            payload = payload.encode("latin-1")
        frame = b"$" + payload + b"#" + checksum(payload)
        for _ in range(1 + _ACK_RETRIES):
            self._raw_send(frame)
            if not self.ack or self._await_ack():
                return
        # the peer keeps NAKing: carry on, it will ask again

    def _await_ack(self) -> bool:
        while True:
            for k, ev in enumerate(self.events):
                if ev[0] in (ACK, NAK):
                    del self.events[k]
                    return ev[0] == ACK
                if ev[0] == PACKET:
                    return True
            self.pump()


def xfer_reply(data: bytes, off: int, length: int) -> str:
    """The part of an object from ``off``: as many bytes as ``length`` asks and an
    escaped reply holds; ``l`` when it reaches the end (or ``off`` is past it)."""
    chunk = bytearray()
    room = min(length, PACKET_SIZE - 1)
    for byte in data[off : off + length]:
        need = 2 if byte in b"$#}*" else 1
        if room < need:
            break
        room -= need
        chunk.append(byte)
    last = off + len(chunk) >= len(data)
    return (b"l" if last else b"m").decode() + escape_binary(bytes(chunk)).decode("latin-1")


_HEX = re.compile(r"[0-9a-fA-F]+")
_ADDR_LEN = re.compile(r"([0-9a-fA-F]+),([0-9a-fA-F]+)")


def hex_int(text: str) -> int:
    if not _HEX.fullmatch(text):
        raise Malformed(text)
    return int(text, 16)


def hex_pair(text: str) -> tuple[int, int]:
    m = _ADDR_LEN.fullmatch(text)
    if not m:
        raise Malformed(text)
    return int(m.group(1), 16), int(m.group(2), 16)


def address_length(text: str) -> tuple[int, int]:
    """``ADDR,LENGTH`` of m/M/X; the range must lie in the 64-bit address space."""
    addr, length = hex_pair(text)
    if addr + length > MASK64 + 1:
        raise Malformed(text)
    return addr, length


def hex_bytes(text: str) -> bytes:
    if len(text) % 2 or (text and not _HEX.fullmatch(text)):
        raise Malformed(text)
    return bytes.fromhex(text)


def thread_id(text: str) -> int:
    """A thread-id: hex, ``0`` (any) or ``-1`` (all); with the multiprocess extensions
    ``pPID.TID``, ``pPID.-1`` or ``pPID`` (every thread of PID: -1).  The thread's
    number is returned (a tid is unique over the machine's processes)."""
    if text.startswith("p"):
        pid_text, dot, tid_text = text[1:].partition(".")
        pid = -1 if pid_text == "-1" else hex_int(pid_text)
        if not dot or tid_text == "-1":
            return -1
        tid = hex_int(tid_text)
        return 0 if tid == 0 and pid in (0, -1) else tid
    return -1 if text == "-1" else hex_int(text)
