"""epoll (kernel_model/fs/eventpoll.py) as Linux answers it: tests/c/epoll_calls.c runs
natively first (its output is the spec) and in the model; each case's line must match.
The cases: the create and ctl errors in do_epoll_ctl's order, level- and edge-triggered
pipes, EPOLLONESHOT, maxevents, a wait woken by a forked writer, a timeout, a hang-up, a
wait ended by a signal (EINTR, never restarted), epoll_pwait's sigsetsize check, an
epoll instance watched by another, a loop and nesting too deep (ELOOP); then a BPF ring
buffer's descriptor in an epoll instance."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from emu import Machine

CASES = [
    "create size 0",
    "create size -1",
    "create1 bad flags",
    "create1 cloexec",
    "readlink",
    "fstat",
    "ctl bad epfd",
    "ctl bad fd",
    "ctl epfd not epoll",
    "ctl self",
    "ctl directory",
    "ctl bad op",
    "ctl bad event pointer",
    "ctl del missing",
    "ctl mod missing",
    "ctl exclusive with oneshot",
    "ctl add",
    "ctl add again",
    "ctl mod exclusive",
    "wait maxevents 0",
    "wait bad epfd",
    "level empty",
    "level ready",
    "level ready again",
    "wait bad buffer",
    "level drained",
    "ctl mod edge",
    "edge first",
    "edge second",
    "edge after new data",
    "ctl mod oneshot",
    "oneshot first",
    "oneshot disabled",
    "ctl mod rearm",
    "oneshot rearmed",
    "ctl add write end",
    "two items, max 1",
    "ctl del write end",
    "timeout",
    "woken by child",
    "writer closed",
    "interrupted",
    "pwait bad sigsetsize",
    "pwait",
    "ctl add epoll in epoll",
    "outer empty",
    "outer ready",
    "ctl exclusive epoll",
    "ctl loop",
    *(f"ctl nest {i}" for i in range(1, 8)),
]


@pytest.fixture(scope="module")
def outputs(build_c):
    exe = build_c("epoll_calls.c")
    native = subprocess.run([exe], capture_output=True, timeout=60)
    assert native.returncode == 0, native.stderr
    r = Machine.from_elf(exe, argv=[exe]).run(timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return native.stdout.decode().splitlines(), r.stdout.decode().splitlines()


@pytest.mark.parametrize("case", CASES)
def test_epoll_case_answers_as_the_kernel(outputs, case):
    native, model = outputs
    want = [ln for ln in native if ln.split(":")[0] == case]
    got = [ln for ln in model if ln.split(":")[0] == case]
    assert want and got == want, f"expected {want}, got {got}"


def test_the_whole_output_matches(outputs):
    """The reads and writes between the cases too, in order."""
    native, model = outputs
    assert model == native


class RingGuest:
    """A root guest with a BPF ring buffer map and an epoll instance watching it."""

    def __init__(self):
        self.m = Machine.from_elf("/bin/true", uid=0, gid=0)
        self.task = self.m.task
        sc = self.m.syscalls
        self.base = sc.sys_mmap(self.task, None, 0, 0x4000, 3, 0x22, 0xFFFFFFFF, 0)
        attr = struct.pack("<7I16s5I", 27, 0, 0, 4096, 0, 0, 0, b"rb", 0, 0, 0, 0, 0).ljust(72, b"\0")
        self.m.mem.write(self.base, attr)
        self.fd = sc.sys_bpf(self.task, None, 0, self.base, 72)
        self.ring = self.task.process.files.get(self.fd).map
        self.ep = sc.sys_epoll_create1(self.task, None, 0)
        self.m.mem.write(self.base + 0x100, struct.pack("<IQ", 1, 42))
        assert sc.sys_epoll_ctl(self.task, None, self.ep, 1, self.fd, self.base + 0x100) == 0

    def wait(self, timeout_ms: int):
        return self.m.syscalls.sys_epoll_wait(self.task, None, self.ep, self.base + 0x200, 4, timeout_ms)

    def events(self, n: int) -> list[tuple[int, int]]:
        raw = self.m.mem.read(self.base + 0x200, 12 * n)
        return [struct.unpack_from("<IQ", raw, 12 * i) for i in range(n)]


def test_an_empty_ring_is_not_ready():
    assert RingGuest().wait(0) == 0


def test_a_committed_record_makes_the_ring_readable():
    g = RingGuest()
    g.ring.output(b"12345678")
    assert (g.wait(0), g.events(1)) == (1, [(0x1, 42)])


def test_a_commit_wakes_a_sleeping_epoll_wait():
    """The ring's wake-up (the commit of the record the consumer waits for) runs the
    epoll instance's queue: the sleeper completes with one event."""
    g = RingGuest()
    assert g.wait(-1) is None and g.task.state == "blocked"
    g.ring.output(b"12345678")
    assert (g.task.state, g.task.pending_rax, g.events(1)) == ("running", 1, [(0x1, 42)])


@pytest.fixture(scope="module")
def go_program(tmp_path_factory):
    """tests/go/pipe_deadline.go built static (no cgo), as the corpus builds Go."""
    go = shutil.which("go")
    if go is None:
        pytest.fail("go is required to build the Go guest (install golang)")
    work = tmp_path_factory.mktemp("go")
    exe = work / "pipe_deadline"
    env = {**os.environ, "CGO_ENABLED": "0", "GOCACHE": str(work / "cache"), "GOPATH": str(work)}
    src = Path(__file__).parent / "go" / "pipe_deadline.go"
    res = subprocess.run([go, "build", "-o", str(exe), str(src)], capture_output=True, text=True, env=env, cwd=work)
    if res.returncode != 0:
        pytest.fail(f"go build failed:\n{res.stderr}")
    return str(exe)


def test_a_go_program_polls_its_pipes_through_epoll(go_program):
    """Go's runtime waits for its pipes in epoll_pwait (EPOLLET | EPOLLRDHUP items, its
    own wake-up pipe, timer deadlines as timeouts): the model prints what the host does."""
    native = subprocess.run([go_program], capture_output=True, timeout=60)
    r = Machine.from_elf(go_program, argv=[go_program]).run(timeout=60)
    assert (r.exit_code, r.stdout) == (0, native.stdout), r.stderr.decode()[-2000:]
