"""Signals that interrupt sleeping syscalls (kernel/signal.c; arch/x86/kernel/signal.c
handle_signal and arch_do_signal_or_restart).  A signal wakes a task sleeping in a
syscall; the syscall answers -ERESTARTSYS (pipes, wait4/waitid, futex), -ERESTARTNOHAND
(pause, rt_sigsuspend, ppoll, select, pselect6, absolute clock_nanosleep),
-ERESTART_RESTARTBLOCK (nanosleep, poll) or -EINTR (rt_sigtimedwait); at delivery a
handler makes them EINTR, except ERESTARTSYS under SA_RESTART, which re-executes the
syscall; with no handler to run every one of them restarts (ERESTART_RESTARTBLOCK
through restart_syscall).  Each case is pinned by a native run of the same guest."""

from __future__ import annotations

import os
import struct
import subprocess
import threading
import time

import pytest
from native_helpers import assert_native_then_model

from emu import Machine
from kernel_model.trace import events as ev

NR_CLOCK_NANOSLEEP, NR_RESTART_SYSCALL, NR_KILL = 230, 219, 62  # glibc sleeps with clock_nanosleep
SIGUSR1 = 10


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("eintr.c", "-static", name="eintr")


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("read", b"read r=-1 errno=4 hits=1 c=-\n"),
        ("read_restart", b"read r=1 errno=0 hits=1 c=x\n"),
        ("write", b"write r=-1 errno=4 hits=1\n"),
        ("write_restart", b"write r=4 errno=0 hits=1\n"),
        ("write_partial", b"write_partial r=65536 hits=1\n"),
    ],
)
def test_pipe_read_and_write(guest, mode, expected):
    """ERESTARTSYS: EINTR, or restarted under SA_RESTART; a write that got some bytes
    in returns their count."""
    assert_native_then_model(guest, mode, expected)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("wait4", b"wait4 r=-1 errno=4 hits=1 then=pid status=3\n"),
        ("wait4_restart", b"wait4 r=pid errno=0 hits=1 then=pid status=3\n"),
        ("sigchld", b"sigchld r=pid hits=1 status=5\n"),
        ("waitid", b"waitid r=-1 errno=4 hits=1 status=0\n"),
        ("waitid_restart", b"waitid r=0 errno=0 hits=1 status=4\n"),
    ],
)
def test_wait4_and_waitid(guest, mode, expected):
    """A child's SIGUSR1 or the timer interrupts the wait (ERESTARTSYS); the SIGCHLD of
    the child being reaped does not: wait4 returns its pid and the handler ran."""
    assert_native_then_model(guest, mode, expected)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("futex", b"futex r=-1 errno=4 hits=1\n"),
        ("futex_restart", b"futex r=-1 errno=11 hits=1\n"),
        ("futex_timed", b"futex_timed r=-1 errno=4 hits=1\n"),
        ("futex_timed_restart", b"futex_timed r=-1 errno=4 hits=1\n"),
    ],
)
def test_futex_wait(guest, mode, expected):
    """FUTEX_WAIT without a timeout: ERESTARTSYS, and the restarted wait sees the word
    the handler changed (EAGAIN); with a timeout: ERESTART_RESTARTBLOCK, EINTR even
    under SA_RESTART."""
    assert_native_then_model(guest, mode, expected)


@pytest.mark.parametrize("mode", ["futex_timeout", "futex_abs"])
def test_a_futex_timeout_passes_on_the_virtual_clock(guest, mode):
    """A relative FUTEX_WAIT / an absolute FUTEX_WAIT_BITSET (CLOCK_MONOTONIC) timeout
    of 100 ms: the task sleeps until the clock gets there, then ETIMEDOUT."""
    assert_native_then_model(guest, mode, f"{mode} r=-1 errno=110 bad=-1/22\n".encode())
    m = Machine.from_elf(guest, argv=[guest, mode])
    start = m.syscalls.clock_ns
    m.run(timeout=60)
    elapsed = m.syscalls.clock_ns - start
    assert 100_000_000 <= elapsed < 101_000_000, f"the wait took {elapsed} ns of virtual time"


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("nanosleep", b"nanosleep r=-1 errno=4 hits=1 rem_cs=95\n"),
        ("nanosleep_restart", b"nanosleep r=-1 errno=4 hits=1 rem_cs=95\n"),
        ("nanosleep_child", b"nanosleep_child r=-1 errno=4 hits=1 rem_cs=90\n"),
        ("clock_abs", b"clock_abs r=4 hits=1 rem=7.7\n"),
    ],
)
def test_nanosleep(guest, mode, expected):
    """ERESTART_RESTARTBLOCK: EINTR even under SA_RESTART, the time left in rem; an
    absolute clock_nanosleep (ERESTARTNOHAND) leaves rem alone."""
    assert_native_then_model(guest, mode, expected, slack_cs=3)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("poll", b"poll r=-1 errno=4 hits=1\n"),
        ("poll_restart", b"poll r=-1 errno=4 hits=1\n"),
        ("ppoll", b"ppoll r=-1 errno=4 hits=1 left_cs=100\n"),
        ("ppoll_restart", b"ppoll r=-1 errno=4 hits=1 left_cs=100\n"),
        ("select", b"select r=-1 errno=4 hits=1 left_cs=95\n"),
        ("select_restart", b"select r=-1 errno=4 hits=1 left_cs=95\n"),
        ("pselect", b"pselect r=-1 errno=4 hits=1\n"),
    ],
)
def test_poll_and_select(guest, mode, expected):
    """EINTR with or without SA_RESTART; select writes back the time left."""
    assert_native_then_model(guest, mode, expected, slack_cs=3)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("pause", b"pause r=-1 errno=4 hits=1\n"),
        ("pause_restart", b"pause r=-1 errno=4 hits=1\n"),
        ("sigsuspend", b"sigsuspend r=-1 errno=4 hits=1\n"),
        ("sigsuspend_restart", b"sigsuspend r=-1 errno=4 hits=1\n"),
        ("sigtimedwait", b"sigtimedwait r=-1 errno=4 hits=1\n"),
        ("sigtimedwait_restart", b"sigtimedwait r=-1 errno=4 hits=1\n"),
    ],
)
def test_signal_waits(guest, mode, expected):
    assert_native_then_model(guest, mode, expected)


@pytest.mark.parametrize("mode", ["sigsuspend_ignored", "ppoll_ignored"])
def test_an_ignored_signal_the_temporary_mask_lets_through_restarts_the_call(guest, mode):
    """A blocked SIGCHLD (default action: ignore) pends; the call's temporary mask
    unblocks it, it is discarded at delivery, and with no handler to run the call is
    restarted - only the timer's SIGALRM ends it."""
    assert_native_then_model(guest, mode, f"{mode} r=-1 errno=4 hits=1 chld_pending=1 then=0\n".encode())


def _ignore_sigusr1_once_sent(m, calls):
    """Record every syscall; once the child's kill has queued SIGUSR1 (and woken the
    sleeping parent), the parent's action becomes SIG_IGN, as another thread's
    sigaction could make it: at delivery there is no handler to run."""
    parent = m.main_process

    def on_event(e):
        if isinstance(e, ev.Syscall) and e.task.process is parent:
            calls.append((e.nr, e.rip))
        elif isinstance(e, ev.SyscallReturn) and e.nr == NR_KILL and e.task.process is not parent:
            parent.sighand.action[SIGUSR1] = struct.pack("<QQQQ", 1, 0, 0, 0)

    m.events.subscribe(on_event, ev.Syscall, ev.SyscallReturn)


def test_nanosleep_without_a_handler_restarts_through_restart_syscall(guest):
    """The interrupted clock_nanosleep is re-entered at its syscall instruction as
    restart_syscall (rax 219), which sleeps on to the original expiry: nanosleep
    returns 0 and the sleep lasts the full second of virtual time.  rem holds what was
    left at the interruption (nanosleep_copyout writes it before the restart)."""
    m = Machine.from_elf(guest, argv=[guest, "nanosleep_child"])
    calls = []
    _ignore_sigusr1_once_sent(m, calls)
    start = m.syscalls.clock_ns
    r = m.run(timeout=60)
    assert (r.reason, r.stdout) == ("exit", b"nanosleep_child r=0 errno=0 hits=0 rem_cs=90\n"), (
        f"{r.stdout!r} ({r.describe()})"
    )
    sleeps = [c for c in calls if c[0] in (NR_CLOCK_NANOSLEEP, NR_RESTART_SYSCALL)]
    assert [nr for nr, _ in sleeps] == [NR_CLOCK_NANOSLEEP, NR_RESTART_SYSCALL], f"syscalls {sleeps}"
    assert sleeps[0][1] == sleeps[1][1], f"restart at {sleeps[1][1]:#x}, nanosleep at {sleeps[0][1]:#x}"
    elapsed = m.syscalls.clock_ns - start
    assert 1_000_000_000 <= elapsed < 1_010_000_000, f"the sleep took {elapsed} ns of virtual time"


def test_restart_syscall_after_sigreturn_is_eintr(guest):
    """restore_sigcontext resets the restart block (do_no_restart_syscall): a
    restart_syscall after a handler returned answers -EINTR."""
    m = Machine.from_elf(guest, argv=[guest, "nanosleep"])
    m.run(timeout=60)
    task = m.all_tasks[0]
    assert task.restart_block is None, "rt_sigreturn left a restart block"
    assert m.syscalls.sys_restart_syscall(task, None) == -4


def _saved_rax_rip(m, e) -> tuple[int, int]:
    """rax and rip of the uc_mcontext in the frame a SignalHandler event announces
    (struct sigcontext: rax is slot 13, rip slot 16; the ucontext is 8 bytes in)."""
    mc = e.frame + 8 + 40
    return struct.unpack("<Q", m.mem.read(mc + 13 * 8, 8))[0], struct.unpack("<Q", m.mem.read(mc + 16 * 8, 8))[0]


def test_the_interrupting_signal_s_frame_saves_eintr_and_the_resume_point(guest):
    """handle_signal fixes rax before setup_rt_frame: the handler's uc_mcontext holds
    rax = -EINTR and rip after the syscall for a read without SA_RESTART."""
    m = Machine.from_elf(guest, argv=[guest, "read"])
    seen = []

    m.events.subscribe(lambda e: seen.append(_saved_rax_rip(m, e)), ev.SignalHandler)
    calls = []
    m.events.subscribe(lambda e: calls.append(e.rip) if e.nr == 0 else None, ev.Syscall)
    r = m.run(timeout=60)
    assert r.reason == "exit", r.describe()
    assert len(seen) == 1 and len(calls) == 1, (seen, calls)
    assert seen[0] == ((-4) & (2**64 - 1), calls[0] + 2), (
        f"saved rax/rip {seen[0][0]:#x}/{seen[0][1]:#x}, want -EINTR/{calls[0] + 2:#x}"
    )


def test_sa_restart_saves_the_syscall_to_re_execute(guest):
    """Under SA_RESTART the frame saves rax = orig_rax (read, 0) and rip at the
    syscall instruction itself: sigreturn re-executes it."""
    m = Machine.from_elf(guest, argv=[guest, "read_restart"])
    seen, calls = [], []

    m.events.subscribe(lambda e: seen.append(_saved_rax_rip(m, e)), ev.SignalHandler)
    m.events.subscribe(lambda e: calls.append(e.rip) if e.nr == 0 else None, ev.Syscall)
    r = m.run(timeout=60)
    assert (r.reason, r.stdout) == ("exit", b"read r=1 errno=0 hits=1 c=x\n"), r.describe()
    assert len(calls) == 2 and calls[0] == calls[1], f"read entered at {calls}"
    assert seen == [(0, calls[0])], f"saved rax/rip {seen}, want (0, {calls[0]:#x})"


def _feed_later(fd: int, delay: float) -> threading.Thread:
    """Write b"hello" to ``fd`` after ``delay`` seconds (if the reader is still there),
    then close it."""

    def feed():
        time.sleep(delay)
        try:
            os.write(fd, b"hello")
        except BrokenPipeError:
            pass
        time.sleep(0.3)
        os.close(fd)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    return t


def _native_with_stdin(guest, mode, delay):
    r, w = os.pipe()
    proc = subprocess.Popen([guest, mode], stdin=r, stdout=subprocess.PIPE)
    os.close(r)
    feeder = _feed_later(w, delay)
    out = proc.communicate(timeout=60)[0]
    feeder.join()
    return out


def _model_with_stdin(guest, mode, delay):
    r, w = os.pipe()
    m = Machine.from_elf(guest, argv=[guest, mode], stdin=r)
    os.close(r)
    feeder = _feed_later(w, delay)
    res = m.run(timeout=60)
    feeder.join()
    return res


@pytest.mark.parametrize(
    "mode, delay, expected",
    [
        ("stdin", 0.3, b"stdin r=-1 errno=4 hits=1 got=-\n"),
        ("stdin_restart", 0.3, b"stdin r=5 errno=0 hits=1 got=hello\n"),
        ("stdin", 0.0, b"stdin r=5 errno=0 hits=0 got=hello\n"),
        ("stdin_nonblock", 0.3, b"stdin_nonblock r=-1 errno=11\n"),
    ],
)
def test_a_read_of_the_host_stdin(guest, mode, delay, expected):
    """fd 0 is a host pipe that gets bytes ``delay`` s later: the read sleeps, the
    50 ms timer interrupts it (ERESTARTSYS: EINTR, or restarted under SA_RESTART and
    then given the bytes); bytes already there are read before the timer fires; with
    O_NONBLOCK an empty stdin is EAGAIN."""
    native = _native_with_stdin(guest, mode, delay)
    assert native == expected, f"the host disagrees with the spec: {native!r}"
    res = _model_with_stdin(guest, mode, delay)
    assert (res.reason, res.stdout) == ("exit", expected), f"{res.stdout!r} ({res.describe()})"


SLEEP_THEN_EXIT = """_start:
    lea rdi, [rip + req]
    xor esi, esi
    mov eax, 35
    syscall
    mov rdi, rax
    mov eax, 60
    syscall
req:
    .quad 0
    .quad 100000000
"""


def test_single_steps_over_a_sleep_complete_it():
    """step() after the syscall that put the only task to sleep: the idle machine moves
    the clock to the wake-up and the syscall's result (0) is in rax before the next
    instruction runs; the guest exits 0."""
    m = Machine.from_asm(SLEEP_THEN_EXIT)
    start = m.syscalls.clock_ns
    for _ in range(4):  # lea, xor, mov, syscall
        assert m.step() is None
    assert m.task.state == "blocked", m.task.state
    assert m.step() is None  # mov rdi, rax
    assert (m.regs.rdi, m.syscalls.clock_ns - start) == (0, 100_000_000), (m.regs.rdi, m.syscalls.clock_ns - start)
    m.step()
    r = m.step()
    assert r is not None and (r.reason, r.exit_code) == ("exit", 0), r and r.describe()


def test_a_task_spinning_until_a_sleeper_wakes_lets_it_wake(build_c):
    """The virtual clock moves with the instructions other tasks run (1 ns each), so
    a 2 ms usleep ends while a thread spins waiting for it, instead of only when every
    task sleeps."""
    exe = build_c("spin_sleep.c", "-static", "-pthread", name="spin_sleep")
    assert_native_then_model(exe, "", b"done\n")
