"""What the guest learns about its stdio, and what follows from it (glibc's buffering).

The API machine's fds 0-2 are pipes (deterministic, and what ``uprobe-emu diff``'s native
run has); the CLI describes its own fds 0-2: a pipe, a file, or a terminal (only then
S_IFCHR with the tty's st_rdev, and TCGETS/TIOCGWINSZ answered).
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import shutil
import struct
import subprocess
import termios

import pytest

from cli_helpers import cli
from emu.machine import Machine
from test_hostdiff import needs_tracefs

BUSYBOX = "/bin/busybox"
# glibc's __libc_write in the Debian busybox-static build: cmpb $0,single_threaded(%rip);
# je; mov $1,%eax; syscall
_WRITE = re.compile(rb"\x80\x3d....\x00\x74.\xb8\x01\x00\x00\x00\x0f\x05", re.S)


def busybox_write_offset() -> int:
    hits = [m.start() for m in _WRITE.finditer(open(BUSYBOX, "rb").read())]
    assert len(hits) == 1, f"expected one write() wrapper in {BUSYBOX}, found {len(hits)}"
    return hits[0]


def count_writes(m: Machine) -> list[tuple[int, bytes]]:
    """Record every write(2) the guest makes: (fd, bytes)."""
    calls = []
    inner = m.syscalls.table[1]

    def write(task, regs, fd, buf, count, *rest):
        calls.append((fd, m.mem.read(buf, count)))
        return inner(task, regs, fd, buf, count, *rest)

    m.syscalls.register(1, write)
    return calls


def fdinfo(text: str) -> dict[int, str]:
    return {int(l.split()[1].rstrip(":")): l.split(": ", 1)[1] for l in text.splitlines()}


# ------------------------------------------------------------------ the API default

def test_seq_to_a_pipe_is_one_write_as_glibc_buffers_a_pipe_fully():
    m = Machine.from_elf(BUSYBOX, argv=["seq", "1", "3"])
    calls = count_writes(m)
    r = m.run()
    assert r.exit_code == 0 and r.stdout == b"1\n2\n3\n"
    assert calls == [(1, b"1\n2\n3\n")], f"expected one 6-byte write (full buffering), got {calls}"


def test_api_stdio_is_three_pipes(build_c):
    r = Machine.from_elf(build_c("fdinfo.c", "-static")).run()
    assert fdinfo(r.stdout.decode()) == {fd: "fifo rdev=0 tty=0 winsize=none:0x0" for fd in range(3)}


def test_api_stdio_fstat_is_deterministic(build_c):
    """Two machines, same bytes: the pipe inodes are the model's, not the host's."""
    exe = build_c("fstat_raw.c", "-static")
    a, b = (Machine.from_elf(exe).run().stdout for _ in range(2))
    assert a == b and a.startswith(b"fd 0: mode=010600 dev=0xc ino=3 blksize=4096"), a


def test_stdio_argument_is_checked():
    from emu.errors import InputError
    with pytest.raises(InputError, match="stdio must be"):
        Machine.from_guest("hello", stdio="tty")


# ------------------------------------------------------------------ the CLI: its own fds

def test_cli_through_pipes_reports_pipes(build_c):
    p = cli("run", build_c("fdinfo.c", "-static"), input=b"")
    assert p.returncode == 0, p.stderr
    assert fdinfo(p.stdout.decode()) == {fd: "fifo rdev=0 tty=0 winsize=none:0x0" for fd in range(3)}


def test_cli_stdout_to_a_file_reports_a_regular_file(build_c, tmp_path):
    out = tmp_path / "out.txt"
    with open(out, "wb") as f:
        p = subprocess.run([shutil.which("uprobe-emu"), "run", build_c("fdinfo.c", "-static")],
                           stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 0, p.stderr
    info = fdinfo(out.read_text())
    null = os.stat("/dev/null").st_rdev
    assert info[0] == f"chr rdev={null:#x} tty=0 winsize=none:0x0", info
    assert info[1] == "reg rdev=0 tty=0 winsize=none:0x0", info


def _run_on_a_pty(argv: list[str], rows: int, cols: int) -> tuple[int, bytes, int]:
    """Run ``argv`` with fds 0-2 on a fresh pty of the given size; (status, output, rdev)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    rdev = os.fstat(slave).st_rdev
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    out = bytearray()
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:                 # EIO: the slave side is closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return proc.wait(timeout=120), bytes(out), rdev


def test_cli_on_a_terminal_reports_the_tty(build_c):
    status, out, rdev = _run_on_a_pty([shutil.which("uprobe-emu"), "run", build_c("fdinfo.c", "-static")],
                                      33, 101)
    assert status == 0, out
    want = f"chr rdev={rdev:#x} tty=1 winsize=33x101"
    assert fdinfo(out.decode().replace("\r", "")) == {fd: want for fd in range(3)}


def test_cli_on_a_terminal_agrees_with_the_native_run(build_c):
    exe = build_c("fdinfo.c", "-static")
    native = _run_on_a_pty([exe], 24, 80)
    model = _run_on_a_pty([shutil.which("uprobe-emu"), "run", exe], 24, 80)
    assert model[0] == native[0] == 0
    strip = lambda out, rdev: out.replace(f"{rdev:#x}".encode(), b"RDEV")  # noqa: E731 - two ptys
    assert strip(model[1], model[2]) == strip(native[1], native[2])


def test_seq_on_a_terminal_is_line_buffered():
    """On a tty glibc line-buffers stdout: one write per line, as natively."""
    status, out, _ = _run_on_a_pty([shutil.which("uprobe-emu"), "run", BUSYBOX, "seq", "1", "3"], 24, 80)
    assert status == 0 and out.replace(b"\r", b"") == b"1\n2\n3\n", out


# ------------------------------------------------------------------ the host kernel agrees

@needs_tracefs
def test_diff_busybox_seq_with_a_probe_on_write_agrees():
    spec = f"p:wr {BUSYBOX}:{busybox_write_offset():#x} fd=%di:s32 n=%dx:u64"
    p = cli("diff", BUSYBOX, "seq", "1", "3", "-e", spec)
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
    line = p.stdout.decode().splitlines()[0]
    assert line.startswith("agree:") and line.endswith("exit 0, 6 bytes of stdout, 1 events"), line
