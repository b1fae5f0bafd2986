"""A raw GDB remote-protocol client and an in-process stub, for packet-level tests."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import traceback

from emu import Machine
from emu.asm import asm_to_elf
from emu.frontends.gdbstub import checksum, serve_once

# exits 42 after three calls; `spin` loops for ever
GUEST = """
_start:
    mov rbx, 3
again:
    call func
    dec rbx
    jnz again
    mov edi, 42
    mov eax, 231
    syscall
func:
    push rbp
    mov rbp, rsp
    mov rax, 0x1234
    pop rbp
    ret
spin:
    jmp spin
"""


GDB = shutil.which("gdb")
UPROBE_EMU = shutil.which("uprobe-emu")


def gdbserver_session(exe: str, extra: list[str], commands: list[str]) -> tuple[int, str, str, str]:
    """``uprobe-emu gdbserver exe *extra`` on a free port with a real ``gdb -batch``
    running ``commands``: (the server's exit code, its stdout, its stderr, gdb's transcript)."""
    assert GDB and UPROBE_EMU, "gdb and the uprobe-emu command are required"
    srv = subprocess.Popen(
        [UPROBE_EMU, "gdbserver", *extra, "--port", "0", exe], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = srv.stderr.readline()
        assert line.startswith("uprobe-emu: listening for gdb on 127.0.0.1:"), line
        port = line.rsplit(":", 1)[1].strip()
        args = [
            GDB,
            "-batch",
            "-nx",
            "-ex",
            "set pagination off",
            "-ex",
            "set confirm off",
            "-ex",
            f"target remote 127.0.0.1:{port}",
        ]
        for c in commands:
            args += ["-ex", c]
        gdb = subprocess.run(args + [exe], capture_output=True, text=True, timeout=120)
        out, err = srv.communicate(timeout=60)
    finally:
        srv.kill()
    return srv.returncode, out, err, gdb.stdout + gdb.stderr


def guest_machine(tmp_path, **kw) -> Machine:
    elf, _ = asm_to_elf(GUEST)
    path = tmp_path / "g"
    path.write_bytes(elf)
    return Machine.from_elf(str(path), **kw)


class Stub:
    """serve_once in a thread; records any exception (a traceback) of it or its threads."""

    def __init__(self, machine, **kw):
        self.errors: list[str] = []
        ready = threading.Event()
        self._port = 0

        def on_ready(port):
            self._port = port
            ready.set()

        def run():
            try:
                serve_once(machine, "127.0.0.1", 0, ready=on_ready, **kw)
            except BaseException:  # noqa: BLE001 - recorded, the test fails on it
                self.errors.append(traceback.format_exc())
                ready.set()

        def record(args):  # an exception in a thread the stub started
            self.errors.append("".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)))

        self._old_hook, threading.excepthook = threading.excepthook, record
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert ready.wait(10), "the stub did not start listening"
        self.port = self._port

    def finished(self, timeout: float = 10) -> bool:
        self.thread.join(timeout)
        threading.excepthook = self._old_hook
        return not self.thread.is_alive()


class RawClient:
    """Frames by hand; every read has a deadline, so a stub that hangs fails the test."""

    def __init__(self, port: int, timeout: float = 10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def reset(self) -> None:
        """Close with a TCP RST (SO_LINGER 0)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.sock.close()

    def _more(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise EOFError("the stub closed the connection")
        self.buf += data

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_packet(self, payload: bytes, cs: bytes | None = None) -> None:
        self.send_raw(b"$" + payload + b"#" + (checksum(payload) if cs is None else cs))

    def ack(self) -> bytes:
        while not self.buf:
            self._more()
        c, self.buf = self.buf[:1], self.buf[1:]
        return c

    def reply(self, naks_ok: bool = False) -> bytes:
        """The next packet from the stub (checksum verified, acknowledged); acks before
        it are allowed, NAKs only with ``naks_ok`` (after line noise)."""
        while True:
            start = self.buf.find(b"$")
            end = self.buf.find(b"#", start + 1) if start >= 0 else -1
            if start >= 0 and end >= 0 and len(self.buf) >= end + 3:
                break
            self._more()
        before = self.buf[:start].strip(b"+-" if naks_ok else b"+")
        assert before == b"", f"unexpected bytes before a reply: {self.buf[:start]!r}"
        payload, cs = self.buf[start + 1 : end], self.buf[end + 1 : end + 3]
        self.buf = self.buf[end + 3 :]
        assert checksum(payload) == cs, f"reply {payload!r} has checksum {cs!r}"
        self.send_raw(b"+")
        return payload

    def ask(self, payload: bytes) -> bytes:
        self.send_packet(payload)
        got = self.ack()
        assert got == b"+", f"{payload!r}: expected ack '+', got {got!r}"
        return self.reply()
