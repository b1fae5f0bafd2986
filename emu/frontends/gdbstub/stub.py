"""The GDB remote serial protocol over TCP, so a real gdb can
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
``D`` lets the guest run on to its end.  ``vFile:`` host I/O serves the guest's files as
it sees them (:mod:`.hostio`), so gdb's ``target:`` sysroot reads the program and its
libraries through the model's file system; an exec is the ``T05exec:PATH`` stop when gdb
asked for exec events.  A signal of the guest stops it first, as a tracer sees it
(``T<sig>`` in gdb's numbering, its siginfo as ``qXfer:siginfo:read``; see
:mod:`emu.debug.signals`), unless gdb passes it (``QPassSignals``).  With gdb's
multiprocess extensions threads are ``pPID.TID``, so gdb knows the guest's pid.
Registers follow our own target description (amd64 core, SSE, Linux ``orig_rax``,
``fs_base``/``gs_base``).

The client is untrusted input: framing is a linear, bounded state machine
(:class:`FrameParser`, packets capped at :data:`PACKET_SIZE`), and every packet gets a
protocol answer (gdbserver's conventions: ``E01`` malformed, ``E14`` memory fault, empty
for unknown); a client that goes away while the guest runs stops it.
"""

from __future__ import annotations

import collections
import os
import socket
import threading

from emu.debug import reverse
from emu.debug.stepper import Stepper, StepperError
from emu.frontends.gdbstub.hostio import HostIO
from emu.frontends.gdbstub.packets import (
    INTERRUPT,
    MASK64,
    PACKET_SIZE,
    Disconnected,
    GdbConnection,
    Malformed,
    address_length,
    hex_bytes,
    hex_int,
    hex_pair,
    thread_id,
    unescape_binary,
    xfer_reply,
)
from emu.frontends.gdbstub.registers import CPU_REGISTERS, GENERAL_REGISTERS, REGISTERS, USER_SEGMENTS, target_xml
from emu.frontends.gdbstub.signals import gdb_signal, linux_signal
from emu.frontends.gdbstub.svr4 import Svr4Libraries, svr4_annex
from emu.inspect import GuestFault, is_runnable, process_auxv, process_exe_link, registered_uprobes
from kernel_model.errors import EmuError, InputError

SIGTRAP, SIGINT = 5, 2
_WATCH_KINDS = {"2": "write", "3": "read", "4": "access"}  # Z2 / Z3 / Z4


class GdbStub:
    """Serves one gdb connection for one machine.

    Every packet gets an answer: malformed arguments ``E01``, memory faults ``E14``,
    unknown packets the empty reply; run control after the guest ended repeats its end
    (``W``/``X``).  A client that goes away while the guest runs stops it.
    """

    def __init__(
        self,
        machine,
        *,
        max_insns=None,
        timeout=None,
        checkpoint_interval: int | None = reverse.DEFAULT_STEPPER_INTERVAL,
    ):
        self.m = machine
        self.stepper = Stepper(machine, max_insns=max_insns, timeout=timeout)
        self.stepper.stop_at_signals = True  # a tracer sees each signal before delivery
        # recorded from the start for bs/bc (None or 0: no reverse execution)
        self.reverse = (
            reverse.ReverseStepper.of(self.stepper, interval=checkpoint_interval) if checkpoint_interval else None
        )
        self.conn: GdbConnection | None = None
        self.g_tid = None  # thread selected with Hg (registers)
        self.c_tid = None  # thread selected with Hc (s and c packets)
        self.done = False
        self.detached = False
        self.last_stop = "S05"
        self.xfer_cache: dict = {}  # (object, annex) -> bytes while the guest stays stopped
        self.hostio = HostIO(machine)  # vFile: the guest's files, read-only
        self.multiprocess = False  # thread ids as pPID.TID (gdb offered multiprocess+)

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
        stopped = self.stepper.stopped_regs(task)
        if stopped is not None and name in GENERAL_REGISTERS:
            return (getattr(stopped, name) & ((1 << bits) - 1)).to_bytes(bits // 8, "little")
        if name in USER_SEGMENTS:
            val = USER_SEGMENTS[name]
        elif name == "orig_rax":
            val = task.orig_rax & 0xFFFFFFFFFFFFFFFF
        elif name in CPU_REGISTERS:
            val = self.m.task_reg_read(task, name)
            if isinstance(val, tuple):
                val = val[0]
        return (val & ((1 << bits) - 1)).to_bytes(bits // 8, "little")

    def write_register(self, name: str, data: bytes) -> None:
        if name not in CPU_REGISTERS:
            return  # segment selectors and x87 state are fixed here
        value = int.from_bytes(data, "little")
        if name in GENERAL_REGISTERS:
            self.stepper.set_register(name, value)
        else:
            self.m.reg_write(name, value)  # xmm, mxcsr

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
            return f"X{gdb_signal(ev.signal):02x}"
        tid = self._ptid(self.m.task)
        self.g_tid = self.c_tid = None  # gdb now takes the reporting thread as selected
        stop = self.stepper.signal_stop
        if ev.reason == "signal_received" and stop is not None:
            tid = self._ptid(stop.task)
            return f"T{gdb_signal(ev.stop_signal):02x}thread:{tid};"
        if ev.reason == "exec":
            path = (ev.exec_path or "").encode("utf-8", "surrogateescape")
            return f"T05exec:{path.hex()};thread:{tid};"
        if ev.reason == "breakpoint":
            return f"T05swbreak:;thread:{tid};"
        if ev.reason == "watchpoint":
            key = {"write": "watch", "read": "rwatch", "access": "awatch"}[ev.watchpoint.kind]
            return f"T05{key}:{ev.watchpoint.address:x};thread:{tid};"
        if ev.reason == "stopped" and "SIGINT" in (ev.detail or "") + str(getattr(ev.result, "detail", "")):
            return f"T02thread:{tid};"
        return f"T05thread:{tid};"

    # -- run control -------------------------------------------------------------
    def _resume(self, action: str, addr: int | None = None, tid: int | None = None) -> str:
        """Step thread ``tid`` (default: the current one) or let every thread run.
        A thread that sleeps cannot be stepped alone: then everything runs."""
        if self.done:
            return self.last_stop  # the guest is gone: its end, again
        self.xfer_cache.clear()
        if addr is not None:
            self.stepper.set_register("rip", addr)
        task = None
        if action == "s" and tid not in (None, 0, -1):
            task = next((t for t in self.m.tasks if t.tid == tid), None)
            if task is not None and not is_runnable(task):
                action = "c"
        conn = self.conn
        if action == "s":
            ev = self.stepper.step(task=task)
        elif conn is None:  # answering packets without serve(): no client can interrupt
            ev = self.stepper.cont()
        else:
            stop = threading.Event()
            watcher = threading.Thread(target=self._watch_client, args=(conn, stop), daemon=True)
            watcher.start()
            try:
                ev = self.stepper.cont()
            finally:
                stop.set()
                watcher.join()
            if conn.closed:
                raise Disconnected()
        self.last_stop = self.stop_reply(ev)
        return self.last_stop

    def _watch_client(self, conn: GdbConnection, stop: threading.Event) -> None:
        """While the guest runs, the only reader of the socket: Ctrl-C stops it with
        SIGINT, a disconnect stops it for good.  The stop is repeated until the run is
        over (a request that lands just before the run starts would be forgotten)."""
        why = None
        while not stop.is_set() and why is None:
            if any(ev[0] == INTERRUPT for ev in conn.events):
                conn.events = collections.deque(ev for ev in conn.events if ev[0] != INTERRUPT)
                why = "interrupted by gdb (SIGINT)"
                break
            try:
                conn.pump(0.05)
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
            return "E01"  # Malformed arguments, or a write the stepper refuses

    def _dispatch(self, pkt: bytes, text: str) -> str | None:
        head = text[:1]
        if text.startswith("qSupported"):
            return self._qsupported(text)
        if text == "QStartNoAckMode":
            if self.conn is None:
                return "OK"  # answered without serve(): no acknowledgements to stop
            self.conn.send("OK")  # acknowledged before acks stop
            self.conn.ack = False
            return ""  # serve() sends nothing more for this packet
        if text.startswith("qXfer:"):
            return self._qxfer(text[len("qXfer:") :])
        if text.startswith("vFile:"):
            return self.hostio.handle(pkt[len("vFile:") :])
        if text.startswith("QPassSignals:"):
            return self._pass_signals(text[len("QPassSignals:") :])
        if text == "?":
            return self.last_stop
        if text == "qfThreadInfo":
            return "m" + ",".join(self._ptid(t) for t in sorted(self.m.tasks, key=lambda t: t.tid))
        if text == "qsThreadInfo":
            return "l"
        if text == "qC":
            return f"QC{self._ptid(self.m.task)}"
        if text == "qAttached":
            return "1"
        if text.startswith("qRcmd,"):
            return self._monitor(hex_bytes(text[6:]).decode("utf-8", "replace"))
        if text.startswith("vCont"):
            return self._vcont(text[5:])
        if text == "D" or text.startswith("D;"):
            if text.startswith("D;"):
                hex_int(text[2:])  # D;pid: a malformed pid is E01
            self._send("OK")
            self.detached = True
            return None
        if text == "k":
            return None
        if text.startswith("vKill"):
            self._send("OK")
            return None
        handler = {
            "H": self._h,
            "T": self._t,
            "g": self._g,
            "G": self._G,
            "p": self._p,
            "P": self._P,
            "m": self._m,
            "M": self._M,
            "X": self._X,
            "Z": self._z,
            "z": self._z,
            "c": self._cs,
            "s": self._cs,
            "b": self._b,
        }.get(head)
        if handler is None:
            return ""
        return handler(pkt, text)

    def _pass_signals(self, arg: str) -> str:
        """``QPassSignals:SIG;SIG...`` (gdb's numbers, hex): signals delivered without a
        stop (gdb's ``handle SIG nostop``); the list replaces the previous one."""
        sigs = [hex_int(x) for x in arg.split(";")] if arg else []
        self.stepper.pass_signals = frozenset(linux_signal(s) for s in sigs)
        return "OK"

    def _ptid(self, task) -> str:
        """A thread as the stop replies and thread lists name it: ``pPID.TID`` with the
        multiprocess extensions (gdb then knows the real pid: its /proc reads through
        vFile, such as the vDSO's range in /proc/PID/task/PID/maps), else ``TID``."""
        return f"p{task.process.pid:x}.{task.tid:x}" if self.multiprocess else f"{task.tid:x}"

    def _qsupported(self, text: str) -> str:
        """Our features; ``exec-events+`` only when gdb offers it (gdbserver's
        handle_query: an exec is then reported as the ``T05exec:PATH`` stop, and the
        stepper stops at each exec of the followed process instead of following it
        silently)."""
        offered = text.partition(":")[2].split(";")
        self.stepper.stop_at_exec = "exec-events+" in offered
        self.multiprocess = "multiprocess+" in offered
        return (
            f"PacketSize={PACKET_SIZE:x};qXfer:features:read+;qXfer:auxv:read+;"
            "qXfer:exec-file:read+;qXfer:libraries-svr4:read+;qXfer:siginfo:read+;QPassSignals+;"
            "augmented-libraries-svr4-read+;swbreak+;QStartNoAckMode+;vContSupported+"
            + (";exec-events+" if self.stepper.stop_at_exec else "")
            + (";multiprocess+" if self.multiprocess else "")
            + (";ReverseStep+;ReverseContinue+" if self.reverse is not None else "")
        )

    def _qxfer(self, rest: str) -> str:
        """``qXfer:OBJECT:read:ANNEX:OFFSET,LENGTH`` (gdbserver's handle_qxfer): the
        object's bytes from OFFSET, ``m`` while more follow, ``l`` for the last part
        (an object is built once per stop and annex, so a long one read in parts is
        one consistent snapshot built once, where gdbserver rebuilds it per part);
        ``E00`` for an unknown annex, ``E01`` when the object cannot be produced,
        the empty reply for an object we do not serve."""
        obj, _, rest = rest.partition(":")
        readers = {
            "features": self._xfer_features,
            "auxv": self._xfer_auxv,
            "exec-file": self._xfer_exec_file,
            "libraries-svr4": self._xfer_libraries_svr4,
            "siginfo": self._xfer_siginfo,
        }
        if obj not in readers:
            return ""
        op, _, rest = rest.partition(":")
        if op != "read":
            return ""  # nothing here is writable
        annex, colon, span = rest.partition(":")
        if not colon:
            raise Malformed(rest)
        off, length = hex_pair(span)
        data = self.xfer_cache.get((obj, annex))
        if data is None:
            data = readers[obj](annex)
            if isinstance(data, bytes):
                self.xfer_cache[(obj, annex)] = data
        if isinstance(data, str):
            return data  # an error reply
        return xfer_reply(data, off, length)

    @staticmethod
    def _xfer_features(annex: str) -> bytes | str:
        return target_xml().encode() if annex == "target.xml" else "E00"  # no such annex

    def _xfer_auxv(self, annex: str) -> bytes | str:
        """/proc/PID/auxv, as gdbserver's linux_read_auxv reads it."""
        if annex:
            return "E00"
        return process_auxv(self.m, self.m.process, self.m.task)

    def _xfer_exec_file(self, annex: str) -> bytes | str:
        """The executable's path (readlink /proc/PID/exe, gdbserver's pid_to_exec_file):
        of the current process, or of the process whose pid the annex gives in hex."""
        task = self.m.task
        if annex:
            pid = hex_int(annex)
            task = next((t for t in self.m.tasks if t.process.pid == pid and t.tid == pid), None)
            if task is None:
                return "E01"
        if not os.path.isfile(task.process.exe_path):
            return "E01"  # an image that never was a file (from_asm, guest:)
        path = process_exe_link(self.m, task.process, task)
        return "E01" if isinstance(path, int) else path.encode("utf-8", "surrogateescape")

    def _xfer_siginfo(self, annex: str) -> bytes | str:
        """The x86_64 siginfo_t (128 bytes) of the signal the thread stopped with
        (gdbserver's linux_xfer_siginfo: PTRACE_GETSIGINFO); E01 at a stop that was no
        signal's (a breakpoint here is no int3 trap)."""
        if annex:
            return "E00"
        info = self.stepper.siginfo_of(self._task())
        return "E01" if info is None else info

    def _xfer_libraries_svr4(self, annex: str) -> bytes | str:
        lmid, start, prev = svr4_annex(annex)
        lists = Svr4Libraries(self._peek, process_auxv(self.m, self.m.process, self.m.task))
        doc = lists.document(lmid, start, prev)
        return "E01" if doc is None else doc

    def _h(self, _pkt, text):
        if len(text) < 2 or text[1] not in "gc":
            raise Malformed(text)
        tid = thread_id(text[2:])
        if tid not in (0, -1) and not any(t.tid == tid for t in self.m.tasks):
            return "E01"
        if text[1] == "g":
            self.g_tid = None if tid in (0, -1) else tid
        else:
            self.c_tid = None if tid in (0, -1) else tid
        return "OK"

    def _t(self, _pkt, text):
        tid = thread_id(text[1:])
        return "OK" if any(t.tid == tid for t in self.m.tasks) else "E01"

    def _g(self, _pkt, text):
        return self.g_packet() if text == "g" else ""

    def _G(self, _pkt, text):
        data = hex_bytes(text[1:])
        if self.done:
            return "E01"
        pos = 0
        for name, bits, _ in REGISTERS:
            n = bits // 8
            if pos + n > len(data):
                break
            self.write_register(name, data[pos : pos + n])
            pos += n
        return "OK"

    def _p(self, _pkt, text):
        return self.read_register(self._register(text[1:])[0], self._task()).hex()

    def _P(self, _pkt, text):
        num, eq, val = text[1:].partition("=")
        if not eq:
            raise Malformed(text)
        name, bits = self._register(num)
        data = hex_bytes(val)
        if len(data) != bits // 8:
            raise Malformed(text)
        if self.done:
            return "E01"
        self.write_register(name, data)
        return "OK"

    @staticmethod
    def _register(num: str) -> tuple[str, int]:
        n = hex_int(num)
        if n >= len(REGISTERS):
            raise Malformed(num)
        return REGISTERS[n][0], REGISTERS[n][1]

    def _m(self, _pkt, text):
        addr, length = address_length(text[1:])
        length = min(length, (PACKET_SIZE - 1) // 2)  # no more than a reply holds
        out = self._peek(addr, length)
        return out.hex() if out or not length else "E14"

    def _peek(self, addr: int, length: int) -> bytes:
        """Up to ``length`` of the program's bytes from ``addr``, page by page: a read
        that runs off the mapping is short, as a ptrace (/proc/PID/mem) read is."""
        out = bytearray()
        while len(out) < length:
            a = (addr + len(out)) & MASK64
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
        addr, length = address_length(where)
        data = hex_bytes(data)
        if len(data) != length:
            raise Malformed(text)
        return self._poke(addr, data)

    def _X(self, pkt, _text):
        head, colon, data = pkt[1:].partition(b":")
        if not colon:
            raise Malformed("X without data")
        addr, length = address_length(head.decode("latin-1"))
        data = unescape_binary(data)
        if len(data) != length:
            raise Malformed("X length")
        return self._poke(addr, data)

    def _z(self, _pkt, text):
        kind, _, rest = text[1:].partition(",")
        if kind not in ("0", "1", "2", "3", "4"):
            return "E01"
        if kind == "1":
            return ""  # no hardware breakpoints: gdb uses Z0
        fields = rest.split(";", 1)[0].split(",")
        if len(fields) != 2:
            raise Malformed(text)
        addr, size = hex_int(fields[0]), hex_int(fields[1])
        if addr > MASK64:
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
                return "E14"  # not executable memory
        return "OK"

    def _watchpoint(self, insert: bool, kind: str, addr: int, size: int) -> str:
        """Z2/Z3/Z4 (write/read/access) as the x86 debug registers take them: 1, 2, 4
        or 8 bytes; z removes the one of that kind, address and size."""
        if size not in (1, 2, 4, 8) or addr + size > MASK64 + 1:
            return "E01"
        same = [n for n, w in self.stepper.watchpoints.items() if (w.address, w.size, w.kind) == (addr, size, kind)]
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
                return "E14"  # not mapped
        return "OK"

    def _cs(self, _pkt, text):
        addr = hex_int(text[1:]) if len(text) > 1 else None  # c ADDR / s ADDR
        if addr is not None and addr > MASK64:
            raise Malformed(text)
        return self._resume(text[0], addr, self.c_tid)

    def _vcont(self, rest: str) -> str:
        if rest == "?":
            return "vCont;c;C;s;S"
        if not rest.startswith(";") or rest == ";":
            raise Malformed(rest)
        step_tid = None
        for action in rest[1:].split(";"):
            verb, colon, tid_text = action.partition(":")
            tid = thread_id(tid_text) if colon else None
            if verb[:1] in ("C", "S") and len(verb) == 3:
                hex_int(verb[1:])  # the signal is not delivered
                verb = verb[0].lower()
            elif verb not in ("c", "s"):
                raise Malformed(action)
            if verb == "s" and step_tid is None:
                step_tid = tid if tid is not None else 0  # vCont;s:TID;c steps TID
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
        tid = self._ptid(self.m.task)
        if ev.reason == reverse.HISTORY_START:
            self.last_stop = f"T05replaylog:begin;thread:{tid};"
        else:
            self.last_stop = self.stop_reply(ev)
        return self.last_stop

    def _poke(self, addr: int, data: bytes) -> str:
        """A debugger write (ptrace POKETEXT): goes into the process copy, like the kernel's
        FOLL_FORCE write; the CPU sees it at once.  It may not change a probed
        instruction or a hijacked return address (:meth:`Stepper.write_program`)."""
        if not data:
            return "OK"  # gdb's probe for X support
        self.xfer_cache.clear()
        try:
            self.stepper.write_program(addr, data)
        except (GuestFault, StepperError):
            return "E14"  # unmapped, or it would change what a probe keeps
        return "OK"

    def _monitor(self, cmd: str) -> str:
        """``monitor probes`` / ``monitor counters`` / ``monitor raw ADDR [LEN]``: text
        through O packets."""
        cmd = cmd.strip()
        if cmd == "probes":
            lines = []
            for up in sorted(registered_uprobes(self.m), key=lambda u: u.offset):
                file, offset = up.file, up.offset
                for vaddr in self.m.uprobes.vaddr_of(self.m.process, file, offset):
                    lines.append(
                        f"{vaddr:#x} {file.path}:{offset:#x} hits={up.hits} "
                        f"consumers={len(up.consumers)} {up.arch.kind if up.arch else '?'}"
                    )
            text = "\n".join(lines) + "\n" if lines else "no probes\n"
        elif cmd == "counters":
            text = "".join(f"{k}: {v}\n" for k, v in self.m.counters.snapshot().items() if v)
        elif cmd.split()[:1] == ["raw"]:
            text = self._monitor_raw(cmd.split()[1:])
        else:
            text = f"unknown monitor command {cmd!r}; try: probes, counters, raw ADDR [LEN]\n"
        self._send("O" + text.encode().hex())
        return "OK"

    def _monitor_raw(self, words: list[str]) -> str:
        """``monitor raw ADDR [LEN]``: the bytes in memory as the CPU fetches them (a
        probe's int3, an optimized site's call), 16 a line; LEN defaults to 16."""
        try:
            addr = self.stepper.evaluate(words[0])
            length = int(words[1], 0) if len(words) > 1 else 16
        except (IndexError, ValueError, StepperError):
            return "usage: monitor raw ADDR [LEN] (ADDR: a number, symbol or $reg expression)\n"
        if len(words) > 2 or not 0 < length <= 4096 or not 0 <= addr <= MASK64 - length + 1:
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

    def _send(self, packet: str) -> None:
        """Send a packet ahead of the reply (an ``O`` console packet, the ``OK`` before a
        session ends); answering without :meth:`serve` there is nobody to send it to."""
        if self.conn is not None:
            self.conn.send(packet)

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
        finally:
            self.hostio.close_all()


def serve_once(
    machine,
    host: str,
    port: int,
    *,
    ready=None,
    max_insns=None,
    timeout=None,
    checkpoint_interval: int | None = reverse.DEFAULT_STEPPER_INTERVAL,
):
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
    stub = GdbStub(machine, max_insns=max_insns, timeout=timeout, checkpoint_interval=checkpoint_interval)
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stub.serve(conn)
    if not stub.detached or stub.done or machine.exited:
        return None
    return stub.stepper.detach()
