"""Descriptor calls: dup/dup2/dup3, fcntl (F_DUPFD[_CLOEXEC], F_GETFD/SETFD,
F_GETFL/SETFL), the close-on-exec bit kept per descriptor, and poll/ppoll/select/
pselect6 on pipes (a zero timeout returns at once, an infinite one sleeps until a
descriptor is ready, a finite one moves the virtual clock).  The expected output is a
native run of the same static guest."""

from __future__ import annotations

import subprocess

import pytest

from emu.machine import Machine
from kernel_model.fs.file import FdTable, PipeInput

SECTIONS = ["dups", "polls"]


@pytest.fixture(scope="module")
def fd_exe(build_c):
    return build_c("fd_calls.c", "-static")


@pytest.mark.parametrize("section", SECTIONS)
def test_fd_calls_match_native(fd_exe, section):
    p = subprocess.run([fd_exe, section], capture_output=True, timeout=60)
    r = Machine.from_elf(fd_exe, argv=[fd_exe, section]).run(timeout=60)
    assert r.reason == "exit", r.describe()
    want, got = p.stdout.decode().splitlines(), r.stdout.decode().splitlines()
    diff = [(w, g) for w, g in zip(want, got) if w != g]
    assert (r.exit_code, got) == (p.returncode, want), f"first differences (native, emulated): {diff[:5]}"


def test_finite_poll_timeout_advances_the_virtual_clock_without_spinning(fd_exe):
    """poll(30 ms) on an empty pipe: the only task sleeps, the clock jumps to the
    deadline and poll returns 0 - a handful of slices, not a busy loop."""
    m = Machine.from_elf(fd_exe, argv=[fd_exe, "polls"])
    r = m.run(timeout=60)
    assert r.reason == "exit" and b"waited at least 30ms: 1\n" in r.stdout, r.stdout
    assert m.syscalls.clock_ns - 1_767_225_600 * 10**9 >= (30 + 20 + 10 + 200) * 10**6, (
        "poll 30 ms + ppoll 20 ms + select 10 ms + select 200 ms of virtual time"
    )


POLL_FOREVER = """
_start:
    sub rsp, 16
    lea rdi, [rsp]
    mov eax, 22          # pipe
    syscall
    mov eax, dword ptr [rsp]
    mov dword ptr [rsp + 8], eax
    mov word ptr [rsp + 12], 1     # POLLIN
    lea rdi, [rsp + 8]
    mov esi, 1
    mov edx, -1
    mov eax, 7           # poll, no timeout, nobody writes
    syscall
    mov edi, eax
    mov eax, 60
    syscall
"""


def test_infinite_poll_nobody_can_satisfy_ends_as_a_deadlock():
    r = Machine.from_asm(POLL_FOREVER).run(timeout=30)
    assert (r.reason, r.detail) == ("stopped", "deadlock: every task is blocked"), r.describe()


def test_fork_copies_close_on_exec_bits_and_close_clears_them():
    t = FdTable()
    f = PipeInput(b"")
    fd = t.install(f, 3, cloexec=True)
    child = t.fork()
    assert (fd, child.cloexec, f.refs) == (3, {3}, 2)
    child.close(3)
    assert (child.cloexec, t.cloexec, f.refs) == (set(), {3}, 1)


def test_replace_drops_the_old_description():
    t = FdTable()
    a, b = PipeInput(b"a"), PipeInput(b"b")
    t.install(a, 0)
    t.install(b, 1)
    assert t.replace(0, b, cloexec=True) == 0
    assert (a.refs, b.refs, t.get(0) is b, t.cloexec) == (0, 2, True, {0})


@pytest.mark.parametrize("argv", [["printf", "hi"], ["printf", "%s-%03d\\n", "x", "7"]])
def test_busybox_printf_matches_native(argv):
    """busybox's printf checks its stdout with fcntl(F_GETFL) before writing: without
    fcntl it printed nothing and exited 1."""
    cmd = ["/bin/busybox", *argv]
    p = subprocess.run(cmd, capture_output=True, timeout=60)
    r = Machine.from_elf(cmd[0], argv=cmd).run(timeout=60)
    assert (r.exit_code, r.stdout) == (p.returncode, p.stdout), r.describe()
