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
import threading

import pytest
from cli_helpers import cli
from test_hostdiff import needs_tracefs

from emu.machine import Machine

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
    return {int(ln.split()[1].rstrip(":")): ln.split(": ", 1)[1] for ln in text.splitlines()}


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
    from kernel_model.errors import InputError

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
        p = subprocess.run(
            [shutil.which("uprobe-emu"), "run", build_c("fdinfo.c", "-static")],
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.PIPE,
            timeout=120,
        )
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
        except OSError:  # EIO: the slave side is closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return proc.wait(timeout=120), bytes(out), rdev


def test_cli_on_a_terminal_reports_the_tty(build_c):
    status, out, rdev = _run_on_a_pty([shutil.which("uprobe-emu"), "run", build_c("fdinfo.c", "-static")], 33, 101)
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


# ------------------------------------------------------------------ the host kernel agrees


@needs_tracefs
def test_diff_busybox_seq_with_a_probe_on_write_agrees():
    spec = f"p:wr {BUSYBOX}:{busybox_write_offset():#x} fd=%di:s32 n=%dx:u64"
    p = cli("diff", "-e", spec, BUSYBOX, "seq", "1", "3")
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
    line = p.stdout.decode().splitlines()[0]
    assert line.startswith("agree:") and line.endswith("exit 0, 6 bytes of stdout, 1 events"), line


# ------------------------------------------------------------------ stdin, read lazily


def test_stdin_descriptor_is_read_as_the_guest_reads_and_bounded():
    """/dev/zero as stdin: the guest takes what it asks for, nothing is slurped."""
    fd = os.open("/dev/zero", os.O_RDONLY)
    try:
        m = Machine.from_elf(BUSYBOX, argv=["head", "-c", "300000"], stdin=fd)
    finally:
        os.close(fd)  # the machine holds its own duplicate
    r = m.run(timeout=60)
    assert r.exit_code == 0 and r.stdout == bytes(300000), (r.describe(), len(r.stdout))


def test_stdin_pipe_without_data_gives_way_to_the_timeout():
    import time

    rd, wr = os.pipe()
    try:
        m = Machine.from_elf(BUSYBOX, argv=["cat"], stdin=rd)
        t0 = time.monotonic()
        r = m.run(timeout=1.0)
        took = time.monotonic() - t0
    finally:
        os.close(rd)
        os.close(wr)
    assert r.reason == "timeout" and took < 5, f"{r.describe()} after {took:.1f} s"


def _fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return str(path)


def test_cli_stdin_fifo_without_a_writer_times_out(tmp_path):
    p = cli("run", "--stdin", _fifo(tmp_path), "--timeout", "1", BUSYBOX, "cat", timeout=30)
    assert p.returncode == 124, p.stderr
    assert b"timeout" in p.stderr


def test_cli_stdin_fifo_is_read_once_a_writer_comes(tmp_path):
    fifo = _fifo(tmp_path)

    def writer():
        with open(fifo, "wb") as f:  # blocks until the guest side is open
            f.write(b"through the fifo\n")

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    p = cli("run", "--stdin", fifo, "--timeout", "30", BUSYBOX, "cat", timeout=60)
    t.join(5)
    assert p.returncode == 0 and p.stdout == b"through the fifo\n", (p.returncode, p.stdout, p.stderr)


def test_cli_ctrl_c_interrupts_a_waiting_read():
    """The guest waits on the command's stdin, a pipe kept open with nothing in it."""
    import signal
    import time

    proc = subprocess.Popen(
        [shutil.which("uprobe-emu"), "run", "--timeout", "60", BUSYBOX, "cat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(2.0)
    assert proc.poll() is None, "the guest did not wait for its stdin"
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and time.monotonic() - t0 < 5, (proc.returncode, err)


def test_cli_stdin_dev_zero_stays_small():
    """The old eager read grew without bound: a 3 GiB address-space limit would stop it."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    p = subprocess.run(
        [shutil.which("uprobe-emu"), "run", "--stdin", "/dev/zero", BUSYBOX, "head", "-c", "2000000"],
        capture_output=True,
        preexec_fn=limit,
        timeout=120,
    )
    assert p.returncode == 0 and p.stdout == bytes(2000000), (p.returncode, len(p.stdout), p.stderr[-300:])


def test_cli_default_stdin_is_the_commands_own():
    p = cli("run", BUSYBOX, "cat", input=b"piped into the command\n")
    assert p.returncode == 0 and p.stdout == b"piped into the command\n", p.stderr
