"""``uprobe-emu gdbserver``: the GDB remote serial protocol over TCP, so a real gdb can
attach to a guest running under the uprobes model.

The stub is another client of the stepping core (:class:`emu.stepper.Stepper`): gdb's
``Z0`` breakpoints are the stepper's breakpoints (code hooks, never bytes in guest
memory, never uprobe hits); ``s`` is a stepper step, so stepping over a probed
instruction runs its handlers once and lands where the unprobed instruction would.
Attaching gdb changes nothing the guest or the model sees: memory reads show the
program's own bytes (:meth:`Stepper.read_program`: a probe's int3, an optimized site's
``call`` and a hijacked return address are shadowed, as gdb shadows its own
breakpoints; ``monitor raw`` shows the raw bytes), so gdb neither takes a probe's int3
for a breakpoint compiled into the program nor unwinds into the trampoline.
``Z2``/``Z3``/``Z4`` watchpoints are the stepper's (memory hooks, trap after the access).
``D`` lets the guest run on to its end.  Registers follow our own target description
(amd64 core, SSE, Linux ``orig_rax``, ``fs_base``/``gs_base``).

The client is untrusted input: framing is a linear, bounded state machine
(:class:`FrameParser`, packets capped at :data:`PACKET_SIZE`), and every packet gets a
protocol answer (gdbserver's conventions: ``E01`` malformed, ``E14`` memory fault, empty
for unknown); a client that goes away while the guest runs stops it.
"""

from __future__ import annotations

import collections
import os
import re
import select
import socket
import struct
import sys
import threading

from emu.frontends.cli import (add_cli_events, add_events_option, events_output, make_machine,
                               port_number, report_result)
from kernel_model.errors import EmuError, InputError
from kernel_model.mm.mm_types import GuestFault
from kernel_model.fs.proc.procfs import auxv_bytes, exe_link
from emu.frontends.stepper import reverse
from emu.frontends.stepper.engine import Stepper, StepperError

SIGTRAP, SIGINT = 5, 2
_WATCH_KINDS = {"2": "write", "3": "read", "4": "access"}     # Z2 / Z3 / Z4

# (name, bits, type, group) in gdb's amd64 numbering order for our description.
_CORE = [(n, 64, "int64") for n in ("rax", "rbx", "rcx", "rdx", "rsi", "rdi")] + \
        [("rbp", 64, "data_ptr"), ("rsp", 64, "data_ptr")] + \
        [(f"r{i}", 64, "int64") for i in range(8, 16)] + \
        [("rip", 64, "code_ptr"), ("eflags", 32, "i386_eflags")] + \
        [(n, 32, "int32") for n in ("cs", "ss", "ds", "es", "fs", "gs")] + \
        [(f"st{i}", 80, "i387_ext") for i in range(8)] + \
        [(n, 32, "int") for n in ("fctrl", "fstat", "ftag", "fiseg", "fioff", "foseg", "fooff", "fop")]
_SSE = [(f"xmm{i}", 128, "vec128") for i in range(16)] + [("mxcsr", 32, "i386_mxcsr")]
_LINUX = [("orig_rax", 64, "int")]
_SEGMENTS = [("fs_base", 64, "int"), ("gs_base", 64, "int")]
REGISTERS = _CORE + _SSE + _LINUX + _SEGMENTS

# registers the CPU holds (read and written through the machine by name)
_UC = frozenset(("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
                 "r12", "r13", "r14", "r15", "rip", "eflags", "fs_base", "gs_base", "mxcsr")
                + tuple(f"xmm{i}" for i in range(16)))
_GPRS = frozenset(("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
                   "r12", "r13", "r14", "r15", "rip", "eflags", "fs_base", "gs_base"))
_USER_SEGMENTS = {"cs": 0x33, "ss": 0x2B, "ds": 0, "es": 0, "fs": 0, "gs": 0}


def target_xml() -> str:
    """Our target description: registers in the order of :data:`REGISTERS`."""
    def regs(items, start):
        out = []
        for i, (name, bits, typ) in enumerate(items):
            group = ' group="vector"' if typ == "vec128" else ""
            out.append(f'<reg name="{name}" bitsize="{bits}" type="{typ}" regnum="{start + i}"{group}/>')
        return "".join(out)
    flags = ('<flags id="i386_eflags" size="4">' +
             "".join(f'<field name="{n}" start="{b}" end="{b}"/>' for b, n in
                     ((0, "CF"), (1, ""), (2, "PF"), (4, "AF"), (6, "ZF"), (7, "SF"), (8, "TF"),
                      (9, "IF"), (10, "DF"), (11, "OF"), (14, "NT"), (16, "RF"), (17, "VM"),
                      (18, "AC"), (19, "VIF"), (20, "VIP"), (21, "ID"))) + "</flags>")
    mxcsr = ('<flags id="i386_mxcsr" size="4">' +
             "".join(f'<field name="{n}" start="{b}" end="{b}"/>' for b, n in
                     ((0, "IE"), (1, "DE"), (2, "ZE"), (3, "OE"), (4, "UE"), (5, "PE"), (6, "DAZ"),
                      (7, "IM"), (8, "DM"), (9, "ZM"), (10, "OM"), (11, "UM"), (12, "PM"),
                      (15, "FZ"))) + "</flags>")
    vec = ('<vector id="v4f" type="ieee_single" count="4"/><vector id="v2d" type="ieee_double" count="2"/>'
           '<vector id="v16i8" type="int8" count="16"/><vector id="v8i16" type="int16" count="8"/>'
           '<vector id="v4i32" type="int32" count="4"/><vector id="v2i64" type="int64" count="2"/>'
           '<union id="vec128"><field name="v4_float" type="v4f"/><field name="v2_double" type="v2d"/>'
           '<field name="v16_int8" type="v16i8"/><field name="v8_int16" type="v8i16"/>'
           '<field name="v4_int32" type="v4i32"/><field name="v2_int64" type="v2i64"/>'
           '<field name="uint128" type="uint128"/></union>')
    n_core, n_sse, n_linux = len(_CORE), len(_SSE), len(_LINUX)
    return ('<?xml version="1.0"?><!DOCTYPE target SYSTEM "gdb-target.dtd">'
            '<target version="1.0"><architecture>i386:x86-64</architecture><osabi>GNU/Linux</osabi>'
            f'<feature name="org.gnu.gdb.i386.core">{flags}{regs(_CORE, 0)}</feature>'
            f'<feature name="org.gnu.gdb.i386.sse">{vec}{mxcsr}{regs(_SSE, n_core)}</feature>'
            f'<feature name="org.gnu.gdb.i386.linux">{regs(_LINUX, n_core + n_sse)}</feature>'
            f'<feature name="org.gnu.gdb.i386.segments">{regs(_SEGMENTS, n_core + n_sse + n_linux)}'
            '</feature></target>')


PACKET_SIZE = 0x4000      # advertised as PacketSize: the most payload bytes we accept
_DECODED_MAX = 4 * PACKET_SIZE   # a run-length encoded payload may expand this far
_ACK_RETRIES = 3          # retransmissions after a '-' before we give up on the peer
_MASK64 = (1 << 64) - 1


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
                    self.payload += data[i:min(j, i + room)]
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
                self.csum += data[i:i + take]
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
                continue                       # a stray ack
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


class GdbStub:
    """Serves one gdb connection for one machine.

    Every packet gets an answer: malformed arguments ``E01``, memory faults ``E14``,
    unknown packets the empty reply; run control after the guest ended repeats its end
    (``W``/``X``).  A client that goes away while the guest runs stops it.
    """

    def __init__(self, machine, *, max_insns=None, timeout=None,
                 checkpoint_interval: int | None = reverse.DEFAULT_STEPPER_INTERVAL):
        self.m = machine
        self.stepper = Stepper(machine, max_insns=max_insns, timeout=timeout)
        # recorded from the start for bs/bc (None or 0: no reverse execution)
        self.reverse = reverse.ReverseStepper.of(self.stepper, interval=checkpoint_interval) \
            if checkpoint_interval else None
        self.conn: GdbConnection | None = None
        self.g_tid = None                  # thread selected with Hg (registers)
        self.c_tid = None                  # thread selected with Hc (s and c packets)
        self.done = False
        self.detached = False
        self.last_stop = "S05"
        self.xfer_cache: dict = {}         # (object, annex) -> bytes while the guest stays stopped

    # -- registers --------------------------------------------------------------
    def _task(self, tid=None):
        tid = tid if tid not in (None, 0, -1) else self.g_tid
        for t in self.m.tasks:
            if t.tid == tid:
                return t
        return self.m.task

    def read_register(self, name: str, task=None) -> bytes:
        bits = next(b for n, b, _ in REGISTERS if n == name)
        task = task or self.m.task
        val = 0
        if name in _USER_SEGMENTS:
            val = _USER_SEGMENTS[name]
        elif name == "orig_rax":
            val = task.orig_rax & 0xFFFFFFFFFFFFFFFF
        elif name in _UC:
            val = self.m.task_reg_read(task, name)
            if isinstance(val, tuple):
                val = val[0]
        return (val & ((1 << bits) - 1)).to_bytes(bits // 8, "little")

    def write_register(self, name: str, data: bytes) -> None:
        if name not in _UC:
            return                       # segment selectors and x87 state are fixed here
        value = int.from_bytes(data, "little")
        if name in _GPRS:
            self.stepper.set_register(name, value)
        else:
            self.m.reg_write(name, value)       # xmm, mxcsr

    def g_packet(self) -> str:
        task = self._task()
        return b"".join(self.read_register(n, task) for n, _, _ in REGISTERS).hex()

    # -- stop replies ------------------------------------------------------------
    def stop_reply(self, ev) -> str:
        if ev.reason == "exit":
            self.done = True
            return f"W{(ev.exit_code or 0) & 0xFF:02x}"
        if ev.reason == "signal":
            self.done = True
            return f"X{ev.signal:02x}"
        tid = self.m.task.tid
        self.g_tid = self.c_tid = None     # gdb now takes the reporting thread as selected
        if ev.reason == "breakpoint":
            return f"T05swbreak:;thread:{tid:x};"
        if ev.reason == "watchpoint":
            key = {"write": "watch", "read": "rwatch", "access": "awatch"}[ev.watchpoint.kind]
            return f"T05{key}:{ev.watchpoint.address:x};thread:{tid:x};"
        if ev.reason == "stopped" and "SIGINT" in (ev.detail or "") + str(getattr(ev.result, "detail", "")):
            return f"T02thread:{tid:x};"
        return f"T05thread:{tid:x};"

    # -- run control -------------------------------------------------------------
    def _resume(self, action: str, addr: int | None = None, tid: int | None = None) -> str:
        """Step thread ``tid`` (default: the current one) or let every thread run.
        A thread that sleeps cannot be stepped alone: then everything runs."""
        if self.done:
            return self.last_stop           # the guest is gone: its end, again
        self.xfer_cache.clear()
        if addr is not None:
            self.stepper.set_register("rip", addr)
        task = None
        if action == "s" and tid not in (None, 0, -1):
            task = next((t for t in self.m.tasks if t.tid == tid), None)
            if task is not None and task.state != "running":
                action = "c"
        if action == "s":
            ev = self.stepper.step(task=task)
        else:
            stop = threading.Event()
            watcher = threading.Thread(target=self._watch_client, args=(stop,), daemon=True)
            watcher.start()
            try:
                ev = self.stepper.cont()
            finally:
                stop.set()
                watcher.join()
            if self.conn.closed:
                raise Disconnected()
        self.last_stop = self.stop_reply(ev)
        return self.last_stop

    def _watch_client(self, stop: threading.Event) -> None:
        """While the guest runs, the only reader of the socket: Ctrl-C stops it with
        SIGINT, a disconnect stops it for good.  The stop is repeated until the run is
        over (a request that lands just before the run starts would be forgotten)."""
        why = None
        while not stop.is_set() and why is None:
            if any(ev[0] == INTERRUPT for ev in self.conn.events):
                self.conn.events = collections.deque(
                    ev for ev in self.conn.events if ev[0] != INTERRUPT)
                why = "interrupted by gdb (SIGINT)"
                break
            try:
                self.conn.pump(0.05)
            except Disconnected:
                why = "gdb disconnected"
        while why is not None and not stop.is_set():
            self.m.stop(why)
            stop.wait(0.01)

    # -- packets ------------------------------------------------------------------
    def handle(self, pkt: bytes) -> str | None:
        """The reply to one packet ('' = unsupported); None to end the session."""
        if pkt == b"\x03":
            return self.last_stop
        text = pkt.decode("latin-1")
        try:
            return self._dispatch(pkt, text)
        except (ValueError, OverflowError, EmuError):
            return "E01"      # Malformed arguments, or a write the stepper refuses

    def _dispatch(self, pkt: bytes, text: str) -> str | None:
        head = text[:1]
        if text.startswith("qSupported"):
            return (f"PacketSize={PACKET_SIZE:x};qXfer:features:read+;qXfer:auxv:read+;"
                    "qXfer:exec-file:read+;qXfer:libraries-svr4:read+;"
                    "augmented-libraries-svr4-read+;swbreak+;QStartNoAckMode+;vContSupported+"
                    + (";ReverseStep+;ReverseContinue+" if self.reverse is not None else ""))
        if text == "QStartNoAckMode":
            self.conn.send("OK")          # acknowledged before acks stop
            self.conn.ack = False
            return ""                     # serve() sends nothing more for this packet
        if text.startswith("qXfer:"):
            return self._qxfer(text[len("qXfer:"):])
        if text == "?":
            return self.last_stop
        if text == "qfThreadInfo":
            return "m" + ",".join(f"{t.tid:x}" for t in sorted(self.m.tasks, key=lambda t: t.tid))
        if text == "qsThreadInfo":
            return "l"
        if text == "qC":
            return f"QC{self.m.task.tid:x}"
        if text == "qAttached":
            return "1"
        if text.startswith("qRcmd,"):
            return self._monitor(_hex_bytes(text[6:]).decode("utf-8", "replace"))
        if text.startswith("vCont"):
            return self._vcont(text[5:])
        if text == "D" or text.startswith("D;"):
            if text.startswith("D;"):
                _hex_int(text[2:])                  # D;pid: a malformed pid is E01
            self.conn.send("OK")
            self.detached = True
            return None
        if text == "k":
            return None
        if text.startswith("vKill"):
            self.conn.send("OK")
            return None
        handler = {"H": self._h, "T": self._t, "g": self._g, "G": self._G, "p": self._p,
                   "P": self._P, "m": self._m, "M": self._M, "X": self._X, "Z": self._z,
                   "z": self._z, "c": self._cs, "s": self._cs, "b": self._b}.get(head)
        if handler is None:
            return ""
        return handler(pkt, text)

    def _qxfer(self, rest: str) -> str:
        """``qXfer:OBJECT:read:ANNEX:OFFSET,LENGTH`` (gdbserver's handle_qxfer): the
        object's bytes from OFFSET, ``m`` while more follow, ``l`` for the last part
        (an object is built once per stop and annex, so a long one read in parts is
        one consistent snapshot built once, where gdbserver rebuilds it per part);
        ``E00`` for an unknown annex, ``E01`` when the object cannot be produced,
        the empty reply for an object we do not serve."""
        obj, _, rest = rest.partition(":")
        readers = {"features": self._xfer_features, "auxv": self._xfer_auxv,
                   "exec-file": self._xfer_exec_file, "libraries-svr4": self._xfer_libraries_svr4}
        if obj not in readers:
            return ""
        op, _, rest = rest.partition(":")
        if op != "read":
            return ""                     # nothing here is writable
        annex, colon, span = rest.partition(":")
        if not colon:
            raise Malformed(rest)
        off, length = _hex_pair(span)
        data = self.xfer_cache.get((obj, annex))
        if data is None:
            data = readers[obj](annex)
            if isinstance(data, bytes):
                self.xfer_cache[(obj, annex)] = data
        if isinstance(data, str):
            return data                   # an error reply
        return _xfer_reply(data, off, length)

    @staticmethod
    def _xfer_features(annex: str) -> bytes | str:
        return target_xml().encode() if annex == "target.xml" else "E00"   # no such annex

    def _xfer_auxv(self, annex: str) -> bytes | str:
        """/proc/PID/auxv, as gdbserver's linux_read_auxv reads it."""
        if annex:
            return "E00"
        return auxv_bytes(self.m, self.m.process, self.m.task)

    def _xfer_exec_file(self, annex: str) -> bytes | str:
        """The executable's path (readlink /proc/PID/exe, gdbserver's pid_to_exec_file):
        of the current process, or of the process whose pid the annex gives in hex."""
        task = self.m.task
        if annex:
            pid = _hex_int(annex)
            task = next((t for t in self.m.tasks if t.process.pid == pid and t.tid == pid), None)
            if task is None:
                return "E01"
        if not os.path.isfile(task.process.exe_path):
            return "E01"                  # an image that never was a file (from_asm, guest:)
        path = exe_link(self.m, task.process, task)
        return "E01" if isinstance(path, int) else path.encode("utf-8", "surrogateescape")

    def _xfer_libraries_svr4(self, annex: str) -> bytes | str:
        lmid, start, prev = _svr4_annex(annex)
        lists = Svr4Libraries(self._peek, auxv_bytes(self.m, self.m.process, self.m.task))
        doc = lists.document(lmid, start, prev)
        return "E01" if doc is None else doc

    def _h(self, _pkt, text):
        if len(text) < 2 or text[1] not in "gc":
            raise Malformed(text)
        tid = _thread_id(text[2:])
        if tid not in (0, -1) and not any(t.tid == tid for t in self.m.tasks):
            return "E01"
        if text[1] == "g":
            self.g_tid = None if tid in (0, -1) else tid
        else:
            self.c_tid = None if tid in (0, -1) else tid
        return "OK"

    def _t(self, _pkt, text):
        tid = _thread_id(text[1:])
        return "OK" if any(t.tid == tid for t in self.m.tasks) else "E01"

    def _g(self, _pkt, text):
        return self.g_packet() if text == "g" else ""

    def _G(self, _pkt, text):
        data = _hex_bytes(text[1:])
        if self.done:
            return "E01"
        pos = 0
        for name, bits, _ in REGISTERS:
            n = bits // 8
            if pos + n > len(data):
                break
            self.write_register(name, data[pos:pos + n])
            pos += n
        return "OK"

    def _p(self, _pkt, text):
        return self.read_register(self._register(text[1:])[0], self._task()).hex()

    def _P(self, _pkt, text):
        num, eq, val = text[1:].partition("=")
        if not eq:
            raise Malformed(text)
        name, bits = self._register(num)
        data = _hex_bytes(val)
        if len(data) != bits // 8:
            raise Malformed(text)
        if self.done:
            return "E01"
        self.write_register(name, data)
        return "OK"

    @staticmethod
    def _register(num: str) -> tuple[str, int]:
        n = _hex_int(num)
        if n >= len(REGISTERS):
            raise Malformed(num)
        return REGISTERS[n][0], REGISTERS[n][1]

    def _m(self, _pkt, text):
        addr, length = _address_length(text[1:])
        length = min(length, (PACKET_SIZE - 1) // 2)     # no more than a reply holds
        out = self._peek(addr, length)
        return out.hex() if out or not length else "E14"

    def _peek(self, addr: int, length: int) -> bytes:
        """Up to ``length`` of the program's bytes from ``addr``, page by page: a read
        that runs off the mapping is short, as a ptrace (/proc/PID/mem) read is."""
        out = bytearray()
        while len(out) < length:
            a = (addr + len(out)) & _MASK64
            n = min(length - len(out), 0x1000 - (a & 0xFFF))
            try:
                out += self.stepper.read_program(a, n)
            except GuestFault:
                break
        return bytes(out)

    def _M(self, _pkt, text):
        where, colon, data = text[1:].partition(":")
        if not colon:
            raise Malformed(text)
        addr, length = _address_length(where)
        data = _hex_bytes(data)
        if len(data) != length:
            raise Malformed(text)
        return self._poke(addr, data)

    def _X(self, pkt, _text):
        head, colon, data = pkt[1:].partition(b":")
        if not colon:
            raise Malformed("X without data")
        addr, length = _address_length(head.decode("latin-1"))
        data = unescape_binary(data)
        if len(data) != length:
            raise Malformed("X length")
        return self._poke(addr, data)

    def _z(self, _pkt, text):
        kind, _, rest = text[1:].partition(",")
        if kind not in ("0", "1", "2", "3", "4"):
            return "E01"
        if kind == "1":
            return ""                          # no hardware breakpoints: gdb uses Z0
        fields = rest.split(";", 1)[0].split(",")
        if len(fields) != 2:
            raise Malformed(text)
        addr, size = _hex_int(fields[0]), _hex_int(fields[1])
        if addr > _MASK64:
            raise Malformed(text)
        if kind != "0":
            return self._watchpoint(text[0] == "Z", _WATCH_KINDS[kind], addr, size)
        if text[0] == "z":
            for num, bp in list(self.stepper.breakpoints.items()):
                if bp.address == addr:
                    self.stepper.delete(num)
            return "OK"
        if self.done:
            return "E01"
        if not any(bp.address == addr for bp in self.stepper.breakpoints.values()):
            try:
                self.stepper.break_at(addr)
            except StepperError:
                return "E14"                # not executable memory
        return "OK"

    def _watchpoint(self, insert: bool, kind: str, addr: int, size: int) -> str:
        """Z2/Z3/Z4 (write/read/access) as the x86 debug registers take them: 1, 2, 4
        or 8 bytes; z removes the one of that kind, address and size."""
        if size not in (1, 2, 4, 8) or addr + size > _MASK64 + 1:
            return "E01"
        same = [n for n, w in self.stepper.watchpoints.items()
                if (w.address, w.size, w.kind) == (addr, size, kind)]
        if not insert:
            for n in same:
                self.stepper.unwatch(n)
            return "OK"
        if self.done:
            return "E01"
        if not same:
            try:
                self.stepper.watch(addr, size, kind)
            except StepperError:
                return "E14"                    # not mapped
        return "OK"

    def _cs(self, _pkt, text):
        addr = _hex_int(text[1:]) if len(text) > 1 else None   # c ADDR / s ADDR
        if addr is not None and addr > _MASK64:
            raise Malformed(text)
        return self._resume(text[0], addr, self.c_tid)

    def _vcont(self, rest: str) -> str:
        if rest == "?":
            return "vCont;c;C;s;S"
        if not rest.startswith(";") or rest == ";":
            raise Malformed(rest)
        step_tid = None
        for action in rest[1:].split(";"):
            verb, colon, tid = action.partition(":")
            tid = _thread_id(tid) if colon else None
            if verb[:1] in ("C", "S") and len(verb) == 3:
                _hex_int(verb[1:])                # the signal is not delivered
                verb = verb[0].lower()
            elif verb not in ("c", "s"):
                raise Malformed(action)
            if verb == "s" and step_tid is None:
                step_tid = tid if tid is not None else 0   # vCont;s:TID;c steps TID
        if step_tid is None:
            return self._resume("c")
        return self._resume("s", tid=step_tid)

    def _b(self, _pkt, text):
        """``bs`` / ``bc``: reverse step / continue (see stepper.reverse); the start of
        the recorded history is the stop reply's ``replaylog:begin``."""
        if text not in ("bs", "bc"):
            raise Malformed(text)
        if self.reverse is None:
            return ""
        if self.done:
            return self.last_stop
        self.xfer_cache.clear()
        ev = self.reverse.reverse_stepi() if text == "bs" else self.reverse.reverse_continue()
        tid = self.m.task.tid
        if ev.reason == reverse.HISTORY_START:
            self.last_stop = f"T05replaylog:begin;thread:{tid:x};"
        else:
            self.last_stop = self.stop_reply(ev)
        return self.last_stop

    def _poke(self, addr: int, data: bytes) -> str:
        """A debugger write (ptrace POKETEXT): goes into the process copy, like the kernel's
        FOLL_FORCE write; the CPU sees it at once.  It may not change a probed
        instruction or a hijacked return address (:meth:`Stepper.write_program`)."""
        if not data:
            return "OK"                   # gdb's probe for X support
        self.xfer_cache.clear()
        try:
            self.stepper.write_program(addr, data)
        except (GuestFault, StepperError):
            return "E14"                  # unmapped, or it would change what a probe keeps
        return "OK"

    def _monitor(self, cmd: str) -> str:
        """``monitor probes`` / ``monitor counters`` / ``monitor raw ADDR [LEN]``: text
        through O packets."""
        cmd = cmd.strip()
        if cmd == "probes":
            lines = []
            for (file, offset), up in sorted(self.m.uprobes.tree.items(), key=lambda kv: kv[0][1]):
                for vaddr in self.m.uprobes.vaddr_of(self.m.process, file, offset):
                    lines.append(f"{vaddr:#x} {file.path}:{offset:#x} hits={up.hits} "
                                 f"consumers={len(up.consumers)} {up.arch.kind if up.arch else '?'}")
            text = "\n".join(lines) + "\n" if lines else "no probes\n"
        elif cmd == "counters":
            text = "".join(f"{k}: {v}\n" for k, v in self.m.counters.snapshot().items() if v)
        elif cmd.split()[:1] == ["raw"]:
            text = self._monitor_raw(cmd.split()[1:])
        else:
            text = f"unknown monitor command {cmd!r}; try: probes, counters, raw ADDR [LEN]\n"
        self.conn.send("O" + text.encode().hex())
        return "OK"

    def _monitor_raw(self, words: list[str]) -> str:
        """``monitor raw ADDR [LEN]``: the bytes in memory as the CPU fetches them (a
        probe's int3, an optimized site's call), 16 a line; LEN defaults to 16."""
        try:
            addr = self.stepper.evaluate(words[0])
            length = int(words[1], 0) if len(words) > 1 else 16
        except (IndexError, ValueError, StepperError):
            return "usage: monitor raw ADDR [LEN] (ADDR: a number, symbol or $reg expression)\n"
        if len(words) > 2 or not 0 < length <= 4096 or not 0 <= addr <= _MASK64 - length + 1:
            return "usage: monitor raw ADDR [LEN] (LEN 1..4096)\n"
        lines = []
        for off in range(0, length, 16):
            try:
                chunk = self.m.mem.read(addr + off, min(16, length - off))
            except GuestFault:
                lines.append(f"{addr + off:#x}: Cannot access memory")
                break
            lines.append(f"{addr + off:#x}: " + " ".join(f"{b:02x}" for b in chunk))
        return "\n".join(lines) + "\n"

    def serve(self, sock: socket.socket) -> None:
        """Answer packets until detach, kill or the client goes away."""
        self.conn = GdbConnection(sock)
        try:
            while True:
                pkt = self.conn.read_packet()
                reply = self.handle(pkt)
                if reply is None:
                    return
                if pkt == b"QStartNoAckMode":
                    continue
                self.conn.send(reply)
        except Disconnected:
            return


def _xfer_reply(data: bytes, off: int, length: int) -> str:
    """The part of an object from ``off``: as many bytes as ``length`` asks and an
    escaped reply holds; ``l`` when it reaches the end (or ``off`` is past it)."""
    chunk = bytearray()
    room = min(length, PACKET_SIZE - 1)
    for byte in data[off:off + length]:
        need = 2 if byte in b"$#}*" else 1
        if room < need:
            break
        room -= need
        chunk.append(byte)
    last = off + len(chunk) >= len(data)
    return (b"l" if last else b"m").decode() + escape_binary(bytes(chunk)).decode("latin-1")


# x86_64 layouts gdbserver reads (its link_map_offsets for 64-bit): struct r_debug's
# r_map; struct link_map's l_addr, l_name, l_ld, l_next, l_prev.
_R_MAP, _R_NEXT = 8, 40        # r_next: struct r_debug_extended (r_version 2)
_L_ADDR, _L_NAME, _L_LD, _L_NEXT, _L_PREV = 0, 8, 16, 24, 32
_AT_PHDR, _AT_PHNUM = 3, 5
_PT_DYNAMIC, _PT_PHDR = 2, 6
_DT_NULL, _DT_DEBUG = 0, 21
_PHDR_SIZE, _DYN_SIZE = 56, 16
_PATH_MAX = 4096
_MAX_LIBRARIES = 4096          # link_map entries read per document: more is a loop
_MAX_NAMESPACES = 256          # dlmopen namespaces along r_next
_MAX_DYNAMIC = 4096            # dynamic entries looked at before giving up on DT_NULL


def _svr4_annex(annex: str) -> tuple[int, int, int]:
    """``lmid=ADDR;start=ADDR;prev=ADDR`` (hex) of an incremental read, as gdbserver's
    annex loop reads it: other names are skipped, a malformed address is E01."""
    found = {"lmid": 0, "start": 0, "prev": 0}
    for item in annex.split(";"):
        name, eq, value = item.partition("=")
        if not eq:
            break
        if name in found:
            found[name] = _hex_int(value) if value else 0
            if found[name] > _MASK64:
                raise Malformed(annex)
    return found["lmid"], found["start"], found["prev"]


def _xml_escape(text: bytes) -> bytes:
    """xml_escape_text_append: the five characters XML reserves."""
    for ch, ent in ((b"&", b"&amp;"), (b"<", b"&lt;"), (b">", b"&gt;"), (b'"', b"&quot;"),
                    (b"'", b"&apos;")):
        text = text.replace(ch, ent)
    return text


class Svr4Libraries:
    """The svr4 library list gdbserver serves for a Linux process
    (``linux_process_target::qxfer_libraries_svr4``), read from the guest's own memory:
    the main program's ``PT_DYNAMIC`` (found through ``AT_PHDR``/``AT_PHNUM`` and
    ``PT_PHDR``, get_dynamic), its ``DT_DEBUG`` entry that ld.so points at ``_r_debug``
    (get_r_debug), then ``r_map`` and the ``link_map`` chain.  ``peek(addr, n)``
    returns what is readable, short at a fault."""

    def __init__(self, peek, auxv: bytes):
        self.peek = peek
        self.entries_left = _MAX_LIBRARIES     # over all namespaces: a looping chain ends
        self.auxv = {}
        for i in range(0, len(auxv) - 15, 16):
            key, val = struct.unpack_from("<QQ", auxv, i)
            self.auxv.setdefault(key, val)

    def word(self, addr: int) -> int | None:
        data = self.peek(addr & _MASK64, 8)
        return int.from_bytes(data, "little") if len(data) == 8 else None

    def get_dynamic(self) -> int:
        """The address of the main program's dynamic section, 0 when it has none."""
        phdr, phnum = self.auxv.get(_AT_PHDR), self.auxv.get(_AT_PHNUM)
        if not phdr or not phnum:
            return 0
        headers = []
        for i in range(min(phnum, 0xFFFF)):
            data = self.peek(phdr + i * _PHDR_SIZE, _PHDR_SIZE)
            if len(data) < _PHDR_SIZE:
                return 0
            p_type, _flags, _off, p_vaddr = struct.unpack_from("<IIQQ", data)
            headers.append((p_type, p_vaddr))
        relocation = next(((phdr - v) & _MASK64 for t, v in headers if t == _PT_PHDR), None)
        if relocation is None:
            return 0                      # no PT_PHDR: gdbserver does not guess either
        return next(((v + relocation) & _MASK64 for t, v in headers if t == _PT_DYNAMIC), 0)

    def get_r_debug(self) -> int:
        """DT_DEBUG's value (0 until ld.so fills it in), or -1 without a DT_DEBUG."""
        dyn = self.get_dynamic()
        if not dyn:
            return -1
        for i in range(_MAX_DYNAMIC):
            data = self.peek(dyn + i * _DYN_SIZE, _DYN_SIZE)
            if len(data) < _DYN_SIZE:
                break
            tag, val = struct.unpack("<qQ", data)
            if tag == _DT_DEBUG:
                return val
            if tag == _DT_NULL:
                break
        return -1

    def document(self, lmid: int = 0, start: int = 0, prev: int = 0) -> bytes | None:
        """The ``<library-list-svr4>`` document, or None (gdbserver's E01) when the
        program has no DT_DEBUG.  With ``start`` (an incremental read): that namespace's
        chain from ``start`` on.  Otherwise every namespace from the main ``r_debug``
        along ``r_next`` (r_version 2); the main namespace's first entry is the program
        itself, reported as ``main-lm`` and not as a library."""
        head = b'<library-list-svr4 version="1.0"'
        if start:
            return head + b">" + self.read_link_map(lmid, start, prev) + b"</library-list-svr4>"
        main = self.get_r_debug()
        if main == -1:
            return None
        parts, r_debug = [], main
        for n in range(_MAX_NAMESPACES):
            if not r_debug:
                break
            version = self.peek(r_debug, 4)
            lm = self.word(r_debug + _R_MAP)
            if len(version) < 4 or struct.unpack("<i", version)[0] < 1 or lm is None:
                break
            lm_prev = 0
            if n == 0:                    # once, even if r_next leads back to it
                head += b' main-lm="0x%x"' % lm if lm else b""
                lm_prev, lm = lm, self.word(lm + _L_NEXT)
                if lm is None:
                    break
            parts.append(self.read_link_map(r_debug, lm, lm_prev))
            if struct.unpack("<i", version)[0] < 2:
                break
            r_debug = self.word(r_debug + _R_NEXT)
        # (the header is closed even when the first r_debug is unreadable, where
        # gdbserver sends it unterminated)
        return head + b">" + b"".join(parts) + b"</library-list-svr4>"

    def read_link_map(self, lmid: int, lm: int, prev: int) -> bytes:
        """gdbserver's read_link_map: one ``<library>`` per named entry from ``lm`` along
        ``l_next``; an entry whose ``l_prev`` is not the one before ends the walk (a
        corrupted list), so does an unreadable one."""
        out = []
        while lm and self.entries_left > 0:
            self.entries_left -= 1
            fields = [self.word(lm + off) for off in (_L_NAME, _L_ADDR, _L_LD, _L_PREV, _L_NEXT)]
            if None in fields or fields[3] != prev:
                break
            l_name, l_addr, l_ld, _l_prev, l_next = fields
            name = self.read_name(l_name)
            if name:
                out.append(b'<library name="%s" lm="0x%x" l_addr="0x%x" l_ld="0x%x" lmid="0x%x"/>'
                           % (_xml_escape(name), lm, l_addr, l_ld, lmid))
            prev, lm = lm, l_next
        return b"".join(out)

    def read_name(self, addr: int) -> bytes:
        """l_name: the string up to its NUL, at most PATH_MAX - 1 bytes, short at a fault."""
        return self.peek(addr, _PATH_MAX - 1).split(b"\0", 1)[0]


_HEX = re.compile(r"[0-9a-fA-F]+")
_ADDR_LEN = re.compile(r"([0-9a-fA-F]+),([0-9a-fA-F]+)")


def _hex_int(text: str) -> int:
    if not _HEX.fullmatch(text):
        raise Malformed(text)
    return int(text, 16)


def _hex_pair(text: str) -> tuple[int, int]:
    m = _ADDR_LEN.fullmatch(text)
    if not m:
        raise Malformed(text)
    return int(m.group(1), 16), int(m.group(2), 16)


def _address_length(text: str) -> tuple[int, int]:
    """``ADDR,LENGTH`` of m/M/X; the range must lie in the 64-bit address space."""
    addr, length = _hex_pair(text)
    if addr + length > _MASK64 + 1:
        raise Malformed(text)
    return addr, length


def _hex_bytes(text: str) -> bytes:
    if len(text) % 2 or (text and not _HEX.fullmatch(text)):
        raise Malformed(text)
    return bytes.fromhex(text)


def _thread_id(text: str) -> int:
    """A thread-id: hex, ``0`` (any) or ``-1`` (all)."""
    return -1 if text == "-1" else _hex_int(text)


def serve_once(machine, host: str, port: int, *, ready=None, max_insns=None, timeout=None,
               checkpoint_interval: int | None = reverse.DEFAULT_STEPPER_INTERVAL):
    """Listen on host:port, serve one gdb, return when it detaches, kills or goes away.

    After a detach (``D``) the guest runs on to its natural end, without breakpoints or
    watchpoints, under the same budget and timeout (gdbserver's ptrace detach lets the
    process go on); the machine's RunResult is returned then, else None."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind((host, port))
    except OSError as e:
        raise InputError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    srv.listen(1)
    if ready is not None:
        ready(srv.getsockname()[1])
    try:
        conn, _ = srv.accept()
    finally:
        srv.close()
    stub = GdbStub(machine, max_insns=max_insns, timeout=timeout,
                   checkpoint_interval=checkpoint_interval)
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stub.serve(conn)
    if not stub.detached or stub.done or machine.exited:
        return None
    return stub.stepper.detach()


def add_cli(sub, add_machine_options) -> None:
    p = sub.add_parser("gdbserver", help="serve a guest to gdb (target remote :PORT)",
                       description="Load PROGRAM under the uprobes model and wait for gdb on "
                                   "127.0.0.1:PORT; gdb's breakpoints are kept apart from uprobes. "
                                   "After gdb detaches the guest runs to its end and the exit "
                                   "code is its own, as with run.")
    p.add_argument("program", metavar="PROGRAM")
    p.add_argument("args", nargs="*", metavar="ARGS")
    add_machine_options(p)
    add_events_option(p)
    p.add_argument("--port", type=port_number, default=1234, metavar="N")
    p.add_argument("--host", default="127.0.0.1", help="listen address (loopback by default)")
    p.add_argument("--checkpoint-interval", type=int, default=reverse.DEFAULT_STEPPER_INTERVAL, metavar="N",
                   help="record for gdb's reverse-stepi/reverse-continue with a checkpoint every N "
                        "instructions (0: no recording)")
    p.set_defaults(func=cmd_gdbserver)


def cmd_gdbserver(args) -> int:
    m = make_machine(args)
    if args.checkpoint_interval < 0:
        raise InputError(f"--checkpoint-interval must be >= 0, not {args.checkpoint_interval}")
    with events_output(args) as out:
        if args.event:
            add_cli_events(m, args, out)
        result = serve_once(m, args.host, args.port,
                            ready=lambda port: print(f"uprobe-emu: listening for gdb on {args.host}:{port}",
                                                     file=sys.stderr, flush=True),
                            max_insns=args.max_insns or None, timeout=args.timeout or None,
                            checkpoint_interval=args.checkpoint_interval)
    return 0 if result is None else report_result(result, m)


__all__ = ["GdbStub", "Svr4Libraries", "escape_binary", "serve_once", "target_xml"]
