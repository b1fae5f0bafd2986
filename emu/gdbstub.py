"""``uprobe-emu gdbserver``: the GDB remote serial protocol over TCP, so a real gdb can
attach to a guest running under the uprobes model.

The stub is another client of the stepping core (:class:`emu.stepper.Stepper`): gdb's
``Z0`` breakpoints are the stepper's breakpoints (code hooks, never bytes in guest
memory, never uprobe hits); ``s`` is a stepper step, so stepping over a probed
instruction runs its handlers once and lands where the unprobed instruction would;
memory reads return what a ptrace reader sees on Linux (the 0xCC of a probe, the
``call`` of an optimized site).  Registers follow our own target description (amd64 core,
SSE, Linux ``orig_rax``, ``fs_base``/``gs_base``).
"""

from __future__ import annotations

import select
import socket
import threading

from unicorn import x86_const as X

from .errors import InputError

SIGTRAP, SIGINT = 5, 2

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
REGNUM = {name: i for i, (name, _, _) in enumerate(REGISTERS)}

_UC = {n: getattr(X, "UC_X86_REG_" + n.upper()) for n in
       ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12",
        "r13", "r14", "r15", "rip", "eflags", "fs_base", "gs_base", "mxcsr")}
_UC.update({f"xmm{i}": getattr(X, f"UC_X86_REG_XMM{i}") for i in range(16)})
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


def checksum(data: bytes) -> bytes:
    return b"%02x" % (sum(data) & 0xFF)


def escape_binary(data: bytes) -> bytes:
    out = bytearray()
    for b in data:
        if b in (0x23, 0x24, 0x7D, 0x2A):
            out += bytes([0x7D, b ^ 0x20])
        else:
            out.append(b)
    return bytes(out)


def unescape_binary(data: bytes) -> bytes:
    out = bytearray()
    it = iter(data)
    for b in it:
        out.append(next(it) ^ 0x20 if b == 0x7D else b)
    return bytes(out)


class GdbConnection:
    """Framing: ``$payload#cs`` with acks until QStartNoAckMode; 0x03 is Ctrl-C."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.ack = True
        self.buf = b""

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        if not data:
            return False
        self.buf += data
        return True

    def read_packet(self) -> bytes | None:
        """The next packet payload, b"\\x03" for an interrupt, None at EOF."""
        while True:
            while self.buf[:1] in (b"+", b"-"):
                self.buf = self.buf[1:]
            if self.buf[:1] == b"\x03":
                self.buf = self.buf[1:]
                return b"\x03"
            start = self.buf.find(b"$")
            if start >= 0:
                end = self.buf.find(b"#", start)
                if end >= 0 and len(self.buf) >= end + 3:
                    payload = self.buf[start + 1:end]
                    cs = self.buf[end + 1:end + 3]
                    self.buf = self.buf[end + 3:]
                    if self.ack:
                        self.sock.sendall(b"+" if checksum(payload) == cs.lower() else b"-")
                    return payload
            if not self._fill():
                return None

    def send(self, payload: bytes | str) -> None:
        if isinstance(payload, str):
            payload = payload.encode()
        self.sock.sendall(b"$" + payload + b"#" + checksum(payload))
        if self.ack:
            # wait for gdb's ack (anything else stays buffered for read_packet)
            while not self.buf[:1] in (b"+", b"-"):
                if not self._fill():
                    return
            self.buf = self.buf[1:]

    def interrupted(self) -> bool:
        """Non-blocking: did gdb send Ctrl-C?"""
        r, _, _ = select.select([self.sock], [], [], 0)
        if r:
            self._fill()
        if b"\x03" in self.buf:
            self.buf = self.buf.replace(b"\x03", b"", 1)
            return True
        return False


class GdbStub:
    """Serves one gdb connection for one machine."""

    def __init__(self, machine, *, max_insns=None, timeout=None):
        from .stepper import Stepper
        self.m = machine
        self.stepper = Stepper(machine, max_insns=max_insns, timeout=timeout)
        self.conn: GdbConnection | None = None
        self.g_tid = None                  # thread selected with Hg
        self.done = False
        self.last_stop = "S05"

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
            if task is self.m.task or task.context is None:
                val = task.process.uc.reg_read(_UC[name])
            else:
                val = task.context.reg_read(_UC[name])
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
            self.m.uc.reg_write(_UC[name], value)       # xmm, mxcsr

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
        if ev.reason == "breakpoint":
            return f"T05swbreak:;thread:{tid:x};"
        if ev.reason == "stopped" and "SIGINT" in (ev.detail or "") + str(getattr(ev.result, "detail", "")):
            return f"T02thread:{tid:x};"
        return f"T05thread:{tid:x};"

    # -- run control -------------------------------------------------------------
    def _resume(self, action: str) -> str:
        if self.done:
            return "E01"
        if action == "s":
            ev = self.stepper.step()
        else:
            stop = threading.Event()
            watcher = threading.Thread(target=self._watch_interrupt, args=(stop,), daemon=True)
            watcher.start()
            try:
                ev = self.stepper.cont()
            finally:
                stop.set()
                watcher.join(1)
        self.last_stop = self.stop_reply(ev)
        return self.last_stop

    def _watch_interrupt(self, stop: threading.Event) -> None:
        while not stop.is_set():
            r, _, _ = select.select([self.conn.sock], [], [], 0.05)
            if r and not stop.is_set():
                if self.conn.interrupted():
                    self.m.stop("interrupted by gdb (SIGINT)")
                    return

    # -- packets ------------------------------------------------------------------
    def handle(self, pkt: bytes) -> str | None:
        """The reply to one packet ('' = unsupported); None to end the session."""
        text = pkt.decode("latin-1")
        if pkt == b"\x03":
            return self.last_stop
        if text.startswith("qSupported"):
            return "PacketSize=4000;qXfer:features:read+;swbreak+;QStartNoAckMode+;vContSupported+"
        if text == "QStartNoAckMode":
            self.conn.send("OK")          # acknowledged before acks stop
            self.conn.ack = False
            return ""                     # serve() sends nothing more for this packet
        if text.startswith("qXfer:features:read:target.xml:"):
            off, length = (int(x, 16) for x in text.rsplit(":", 1)[1].split(","))
            xml = target_xml()
            chunk = xml[off:off + length]
            return ("l" if off + length >= len(xml) else "m") + chunk
        if text == "?":
            return self.last_stop
        if text.startswith("H"):
            tid = text[2:]
            if text[1] == "g":
                self.g_tid = int(tid, 16) if tid not in ("-1", "0", "") else None
            return "OK"
        if text == "qfThreadInfo":
            return "m" + ",".join(f"{t.tid:x}" for t in sorted(self.m.tasks, key=lambda t: t.tid))
        if text == "qsThreadInfo":
            return "l"
        if text == "qC":
            return f"QC{self.m.task.tid:x}"
        if text == "qAttached":
            return "1"
        if text.startswith("T"):
            return "OK" if any(t.tid == int(text[1:], 16) for t in self.m.tasks) else "E01"
        if text == "g":
            return self.g_packet()
        if text.startswith("G"):
            data = bytes.fromhex(text[1:])
            pos = 0
            for name, bits, _ in REGISTERS:
                n = bits // 8
                if pos + n > len(data):
                    break
                self.write_register(name, data[pos:pos + n])
                pos += n
            return "OK"
        if text.startswith("p"):
            num = int(text[1:], 16)
            if num >= len(REGISTERS):
                return "E01"
            return self.read_register(REGISTERS[num][0], self._task()).hex()
        if text.startswith("P"):
            num, val = text[1:].split("=")
            num = int(num, 16)
            if num >= len(REGISTERS):
                return "E01"
            self.write_register(REGISTERS[num][0], bytes.fromhex(val))
            return "OK"
        if text.startswith("m"):
            addr, length = (int(x, 16) for x in text[1:].split(","))
            try:
                return self.m.mem.read(addr, length).hex()
            except Exception:   # noqa: BLE001 - unmapped: gdb expects an error
                return "E14"
        if text.startswith("M"):
            where, data = text[1:].split(":")
            addr, _ = (int(x, 16) for x in where.split(","))
            return self._poke(addr, bytes.fromhex(data))
        if pkt.startswith(b"X"):
            head, _, data = pkt[1:].partition(b":")
            addr, _ = (int(x, 16) for x in head.decode().split(","))
            return self._poke(addr, unescape_binary(data))
        if text.startswith("Z0,") or text.startswith("z0,"):
            addr = int(text[3:].split(",")[0], 16)
            if text[0] == "Z":
                if not any(bp.address == addr for bp in self.stepper.breakpoints.values()):
                    self.stepper.break_at(addr)
            else:
                for num, bp in list(self.stepper.breakpoints.items()):
                    if bp.address == addr:
                        self.stepper.delete(num)
            return "OK"
        if text == "vCont?":
            return "vCont;c;C;s;S"
        if text.startswith("vCont;"):
            actions = text[6:].split(";")
            kinds = [a.split(":")[0][0] for a in actions]
            return self._resume("s" if "s" in kinds or "S" in kinds else "c")
        if text[:1] in ("c", "s") and all(ch in "0123456789abcdef" for ch in text[1:]):
            if len(text) > 1:                          # c ADDR / s ADDR: resume at ADDR
                self.stepper.set_register("rip", int(text[1:], 16))
            return self._resume(text[0])
        if text.startswith("qRcmd,"):
            return self._monitor(bytes.fromhex(text[6:]).decode())
        if text == "D" or text.startswith("D;"):
            self.conn.send("OK")
            return None
        if text == "k" or text.startswith("vKill"):
            if text.startswith("vKill"):
                self.conn.send("OK")
            return None
        return ""

    def _poke(self, addr: int, data: bytes) -> str:
        """A debugger write (ptrace POKETEXT): goes into the process copy, like the kernel's
        FOLL_FORCE write; the CPU sees it at once."""
        try:
            self.m.mem.text_poke(addr, data, count=False)
        except Exception:   # noqa: BLE001
            return "E14"
        return "OK"

    def _monitor(self, cmd: str) -> str:
        """``monitor probes`` / ``monitor counters``: text through O packets."""
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
        else:
            text = f"unknown monitor command {cmd!r}; try: probes, counters\n"
        self.conn.send("O" + text.encode().hex())
        return "OK"

    def serve(self, sock: socket.socket) -> None:
        self.conn = GdbConnection(sock)
        while True:
            pkt = self.conn.read_packet()
            if pkt is None:
                return
            reply = self.handle(pkt)
            if reply is None:
                return
            if pkt == b"QStartNoAckMode":
                continue
            self.conn.send(reply)


def serve_once(machine, host: str, port: int, *, ready=None, max_insns=None, timeout=None) -> None:
    """Listen on host:port, serve one gdb, return when it detaches or kills."""
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
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        GdbStub(machine, max_insns=max_insns, timeout=timeout).serve(conn)


def add_cli(sub, add_machine_options) -> None:
    p = sub.add_parser("gdbserver", help="serve a guest to gdb (target remote :PORT)",
                       description="Load PROGRAM under the uprobes model and wait for gdb on "
                                   "127.0.0.1:PORT; gdb's breakpoints are kept apart from uprobes.")
    p.add_argument("program", metavar="PROGRAM")
    p.add_argument("args", nargs="*", metavar="ARGS")
    add_machine_options(p)
    from .cli import port_number
    p.add_argument("--port", type=port_number, default=1234, metavar="N")
    p.add_argument("--host", default="127.0.0.1", help="listen address (loopback by default)")
    p.set_defaults(func=cmd_gdbserver)


def cmd_gdbserver(args) -> int:
    import sys
    from .cli import make_machine
    m = make_machine(args)
    if args.event:
        m.uprobes.add_events(args.event, output=sys.stderr)
    serve_once(m, args.host, args.port,
               ready=lambda port: print(f"uprobe-emu: listening for gdb on {args.host}:{port}",
                                        file=sys.stderr, flush=True),
               max_insns=args.max_insns or None, timeout=args.timeout or None)
    return 0


__all__ = ["GdbStub", "serve_once", "target_xml"]
