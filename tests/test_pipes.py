"""Pipes (fs/pipe.c) across processes: blocking reads and writes that put the task to
sleep and switch to the other end, the 64 KiB buffer, end of file without writers,
EPIPE and SIGPIPE without readers, O_NONBLOCK, FIONREAD.  The expected output is a
native run of the same static guest; busybox's sh pipelines and command substitutions
are compared with a native run of the same binary."""

from __future__ import annotations

import subprocess

import pytest

from emu.machine import Machine
from kernel_model.fs.pipe import FIONREAD, PIPE_BUF, PIPE_DEF_SIZE, Pipe, PipeEnd

BUSYBOX = "/bin/busybox"
SECTIONS = ["child_writes_late", "big_write", "epipe", "killed_by_sigpipe", "nonblock_read"]


def native(argv: list[str]) -> tuple[int, bytes]:
    p = subprocess.run(argv, capture_output=True, timeout=60)
    return p.returncode, p.stdout


def emulated(argv: list[str], seed: int = 0) -> tuple[int, bytes]:
    r = Machine.from_elf(argv[0], argv=argv, seed=seed).run(timeout=60)
    assert r.reason == "exit", r.describe()
    return r.exit_code, r.stdout


@pytest.fixture(scope="module")
def pipes_exe(build_c):
    return build_c("pipes.c", "-static")


@pytest.mark.parametrize("section", SECTIONS)
def test_pipe_behaviour_matches_native(pipes_exe, section):
    want = native([pipes_exe, section])
    got = emulated([pipes_exe, section])
    assert got == want, f"{section}: native {want!r}\nemulated {got!r}"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_blocking_read_gives_the_same_result_under_every_interleaving(pipes_exe, seed):
    want = native([pipes_exe, "child_writes_late"])
    got = emulated([pipes_exe, "child_writes_late"], seed=seed)
    assert got == want, f"seed {seed}: native {want!r}\nemulated {got!r}"


# ------------------------------------------------------------------ the pipe model


def ends(size: int = PIPE_DEF_SIZE):
    p = Pipe(ino=1, size=size)
    return p, PipeEnd(p, False).get(), PipeEnd(p, True).get()


def test_small_write_is_atomic():
    """A write of at most PIPE_BUF bytes goes in whole or not at all."""
    p, r, w = ends()
    assert w.write(b"x" * (PIPE_DEF_SIZE - 10)) == PIPE_DEF_SIZE - 10
    assert w.write(b"y" * 11) == -11, "11 bytes do not fit in 10: EAGAIN, nothing written"
    assert len(p.buf) == PIPE_DEF_SIZE - 10


def test_large_write_takes_what_fits():
    p, r, w = ends()
    assert w.write(b"x" * (PIPE_DEF_SIZE + PIPE_BUF + 1)) == PIPE_DEF_SIZE


def test_read_without_writers_is_end_of_file_and_with_one_would_block():
    p, r, w = ends()
    assert r.read(10) == -11
    w.put()
    assert (p.writers, r.read(10)) == (0, b"")


def test_write_without_readers_is_epipe():
    p, r, w = ends()
    r.put()
    assert w.write(b"x") == -32


def test_closing_an_end_wakes_the_waiters():
    p, r, w = ends()
    seen = []
    p.wait(lambda: seen.append(r.read(1)) or True)
    w.put()
    assert seen == [b""], f"the waiter saw {seen}"
    assert p.waiters == []


def test_poll_mask_follows_page_slots():
    """pipe_poll: writable while at most 15 pages are buffered."""
    p, r, w = ends()
    w.write(b"x" * PIPE_DEF_SIZE)
    assert w.poll() == 0
    r.read(1)
    assert w.poll() == 0, "one byte read frees no page slot"
    r.read(PIPE_BUF - 1)
    assert w.poll() == 0x104


class _Mem:
    def __init__(self):
        self.writes = []

    def write_user(self, addr, data):
        self.writes.append((addr, data))


def test_fionread_counts_buffered_bytes():
    p, r, w = ends()
    w.write(b"abcde")
    mem = _Mem()
    assert r.ioctl(FIONREAD, 0x1000, mem) == 0
    assert mem.writes == [(0x1000, (5).to_bytes(4, "little"))]
    assert r.ioctl(0x5401, 0x1000, mem) == -25, "TCGETS on a pipe: ENOTTY"


# ------------------------------------------------------------------ never a hang


def test_reader_of_a_pipe_nobody_writes_ends_as_a_deadlock(build_c):
    exe = build_c("block_read.c", "-static")
    r = Machine.from_elf(exe).run(timeout=30)
    assert (r.reason, r.detail) == ("stopped", "deadlock: every task is blocked"), r.describe()


SPIN_WRITER = r"""
#include <unistd.h>
int main(void)
{
	int p[2];
	char c;
	pipe(p);
	if (fork() == 0)
		for (;;) ;           /* holds the write end and never writes */
	return (int)read(p[0], &c, 1);
}
"""


def test_reader_blocked_while_the_writer_spins_is_ended_by_the_timeout(tmp_path):
    src = tmp_path / "spin.c"
    src.write_text(SPIN_WRITER)
    exe = tmp_path / "spin"
    subprocess.run(["gcc", "-static", "-O1", "-o", str(exe), str(src)], check=True)
    r = Machine.from_elf(str(exe)).run(timeout=2)
    assert r.reason == "timeout", r.describe()


# ------------------------------------------------------------------ busybox sh

SH_COMMANDS = [
    "x=$(echo hi); echo $x",
    'echo a | read x; echo "[$x]"',
    'echo a | { read x; echo "got $x"; }',
    'printf "%s-%d\\n" a 5 | while read l; do echo "<$l>"; done',
    'y=$(printf "%s\\n" 1 2 3 | while read n; do echo $((n*2)); done); echo $y',
    "echo $(echo $(echo nested))",
    "true | false; echo $?",
    "x=$(exit 5); echo $?",
    "i=0; while [ $i -lt 300 ]; do echo line$i; i=$((i+1)); done | "
    "{ c=0; while read l; do c=$((c+1)); done; echo $c; }",
]


@pytest.mark.parametrize("command", SH_COMMANDS)
def test_busybox_sh_pipelines_of_builtins_match_native(command):
    argv = [BUSYBOX, "sh", "-c", command]
    want = native(argv)
    got = emulated(argv)
    assert got == want, f"{command!r}: native {want!r}\nemulated {got!r}"


def test_busybox_pipeline_into_an_applet_runs_it_through_execve():
    """``echo a | cat`` forks and execs cat (this busybox build runs no applet without
    execve): the applet runs and reads the pipe, as natively."""
    r = Machine.from_elf(BUSYBOX, argv=[BUSYBOX, "sh", "-c", "echo a | cat"]).run(timeout=60)
    assert (r.reason, r.exit_code, r.stdout, r.stderr) == ("exit", 0, b"a\n", b""), r.describe()


class _FakeMachine:
    """block/wake as Machine does them, recording the results."""

    def __init__(self):
        self.woken = []

    def block(self, task, reason, interrupt=None):
        task.state, task.blocked_on = "blocked", reason

    def wake(self, task, rax):
        task.state, task.blocked_on = "running", None
        self.woken.append(rax)


def test_a_waiter_left_from_an_earlier_sleep_does_not_complete_a_later_one():
    """A reader of pipe A woken some other way, then asleep on pipe B: bytes written to
    A stay in A and B's read keeps waiting."""
    from types import SimpleNamespace

    from kernel_model.fs.pipe import PipeSyscalls as FdSyscalls

    sc = FdSyscalls()
    sc.m = _FakeMachine()
    task = SimpleNamespace(state="running", blocked_on=None, process=SimpleNamespace(mem=_Mem()))
    a, ra, wa = ends()
    b, rb, wb = ends()
    assert sc.pipe_read(task, ra, 0x1000, 8) is None
    sc.m.wake(task, -4)  # woken otherwise (as a signal would: EINTR)
    assert sc.pipe_read(task, rb, 0x2000, 8) is None
    wa.write(b"for-a")
    assert (bytes(a.buf), task.state, sc.m.woken) == (b"for-a", "blocked", [-4])
    wb.write(b"for-b")
    assert (task.state, sc.m.woken, task.process.mem.writes) == ("running", [-4, 5], [(0x2000, b"for-b")])
