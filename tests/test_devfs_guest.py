"""/dev through a guest's syscalls where a terminal is involved: a pseudo-terminal as
the guest's stdin is its controlling terminal, found by ttyname() under /dev/pts and
reachable as /dev/tty, as natively."""

from __future__ import annotations

import os
import subprocess

import pytest

from emu import Machine

BUSYBOX = "/bin/busybox"


@pytest.fixture
def pty():
    master, slave = os.openpty()
    yield master, slave
    os.close(master)
    os.close(slave)


def test_tty_applet_names_the_terminal_stdin(pty):
    _, slave = pty
    want = os.ttyname(slave).encode() + b"\n"
    nat = subprocess.run([BUSYBOX, "tty"], stdin=slave, capture_output=True, timeout=60)
    r = Machine.from_elf(BUSYBOX, argv=[BUSYBOX, "tty"], stdin=slave).run(timeout=60)
    assert (nat.returncode, nat.stdout) == (0, want)
    assert (r.exit_code, r.stdout) == (0, want), r.describe()


def test_dev_tty_reaches_the_terminal_of_stdin(pty):
    master, slave = pty
    script = "echo to-the-terminal >/dev/tty; echo rc=$?"
    r = Machine.from_elf(BUSYBOX, argv=[BUSYBOX, "sh", "-c", script], stdin=slave).run(timeout=60)
    assert (r.exit_code, r.stdout) == (0, b"rc=0\n"), r.describe()
    assert os.read(master, 100) == b"to-the-terminal\r\n", "the terminal got the line (ONLCR)"
