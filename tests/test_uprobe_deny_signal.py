"""Signals while a uprobe single-steps an instruction out of line (``uprobe_deny_signal``).

get_signal() asks uprobe_deny_signal() first: a task with an active uprobe takes no
signal until the #DB that ends its step; TIF_SIGPENDING is cleared and set again by
handle_singlestep, so a signal sent during the step is delivered after it, where the
probed instruction left the task.  A fatal signal does not wait: the step is aborted
(UTASK_SSTEP_TRAPPED, arch_uprobe_abort_xol) and the task dies at the probed address.
A step that never ends - a uprobe on the ``syscall`` of glibc's ``__restore_rt``: the
rt_sigreturn restores EFLAGS without TF - holds every later signal back for good.

The guest is tests/c/deny_signal.c; the host kernel's tracefs uprobes pin what it
prints (test_hostdiff's skip rule).  Every behaviour here is the same in every modeled
release (6.15 only dropped the siglock around it: ``sstep_siglock``).
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from test_hostdiff import needs_tracefs

from emu import Machine
from emu.frontends.host_tracefs import HostProbes, Tracefs
from emu.frontends.hostdiff import ResolvedProbe, host_profile_name
from kernel_model.kernel.events.uprobes_types import UTASK_RUNNING, UTASK_SSTEP
from kernel_model.kernel.signals import SIGNALS
from kernel_model.trace import events as ev

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
# __restore_rt (no symbol in libc's tables): mov $15,%rax (or %eax); syscall - rt_sigreturn
RESTORE_RT = (bytes.fromhex("48c7c00f0000000f05"), bytes.fromhex("b80f0000000f05"))
SYSCALL_AT = 5  # kill_self: mov $62,%eax (5 bytes); syscall; nop; ret
KERNELS = ["6.9", "6.14", "6.15", "latest"]
SIGUSR2, SIGTERM, SIGQUIT = SIGNALS["SIGUSR2"], SIGNALS["SIGTERM"], SIGNALS["SIGQUIT"]


@pytest.fixture(scope="module")
def exe(build_c):
    return build_c("deny_signal.c", name="deny_signal")


@pytest.fixture(scope="module")
def restore_rt_syscall() -> int:
    """The file offset of __restore_rt's ``syscall`` in libc (its one mov $15 + syscall)."""
    with open(os.path.realpath(LIBC), "rb") as f:
        data = f.read()
    found = [m.start() + len(code) - 2 for code in RESTORE_RT for m in re.finditer(re.escape(code), data)]
    assert len(found) == 1, f"expected one __restore_rt in {LIBC}, found {len(found)}"
    return found[0]


def probe_of(mode: str, exe: str, restore_rt_syscall: int) -> tuple[str, str | int]:
    """(file, offset or exe symbol+offset) of the probe each mode is about."""
    if mode.startswith("restore"):
        return LIBC, restore_rt_syscall
    return exe, f"kill_self+{SYSCALL_AT}"


def run_model(exe: str, mode: str, restore_rt_syscall: int, kernel: str = "latest", *, handler=None, at=None):
    """The guest in ``mode`` with a uprobe on its mode's instruction (or on ``at``, a
    symbol+offset of the guest); returns (machine, result, the uprobe's hits, the
    events of signals and steps in order)."""
    m = Machine.from_elf(exe, argv=[exe, mode], kernel=kernel)
    seen: list = []
    m.events.subscribe(seen.append, ev.Signal, ev.XolStep, ev.XolDone)
    path, where = probe_of(mode, exe, restore_rt_syscall) if at is None else (exe, at)
    hits: list = []

    def on_hit(ctx):
        hits.append(ctx.vaddr)
        if handler is not None:
            handler(m, ctx)

    target = (path, where) if isinstance(where, int) else f"{path}:{where}"
    m.uprobes.register(target, handler=on_hit)
    return m, m.run(timeout=60), hits, seen


def kill_self(m) -> int:
    return m.resolve("kill_self")


@pytest.mark.parametrize("kernel", KERNELS)
def test_restore_rt_step_never_ends_and_the_next_signal_waits(exe, restore_rt_syscall, kernel):
    """SIGUSR1's handler returns through the probed rt_sigreturn, stepped out of line:
    the task stays in UTASK_SSTEP, so SIGUSR2 stays queued and its handler never runs."""
    m, r, hits, _ = run_model(exe, "restore", restore_rt_syscall, kernel)
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, b"usr1=1\nusr2=0\n"), r.describe()
    assert len(hits) == 1, f"expected one hit (SIGUSR1's return only), got {len(hits)}"


def test_restore_rt_leaves_the_task_stepping_with_its_signal_denied(exe, restore_rt_syscall):
    """After the run: the utask still in UTASK_SSTEP on the __restore_rt probe, SIGUSR2
    queued on the task, signal_denied set and TIF_SIGPENDING cleared."""
    m, r, _, _ = run_model(exe, "restore", restore_rt_syscall)
    task = m.main_process.tasks[0]
    utask = task.utask
    got = (
        utask.state,
        utask.active_uprobe.offset,
        [p.signo for p in task.pending_signals],
        utask.signal_denied,
        utask.sigpending,
    )
    assert got == (UTASK_SSTEP, restore_rt_syscall, [SIGUSR2], True, False), (
        f"expected (state, probe offset, pending, signal_denied, sigpending) = "
        f"{(UTASK_SSTEP, restore_rt_syscall, [SIGUSR2], True, False)}, got {got}"
    )


@pytest.mark.parametrize("kernel", ["6.9", "latest"])
def test_sleep_while_signals_are_held_back_is_not_cut_short(exe, restore_rt_syscall, kernel):
    """In the stuck step, a 100 ms nanosleep: the SIGALRM at 20 ms wakes it
    (signal_wake_up sets TIF_SIGPENDING), get_signal denies it again, the sleep restarts
    (restart_syscall) and completes - the handler never runs, nanosleep returns 0.  A
    model that let signal_pending() see the held-back signals would restart forever."""
    m, r, _, _ = run_model(exe, "restore-sleep", restore_rt_syscall, kernel)
    want = b"usr1=1\nusr2=0\nalrm=0 sleep=0\n"
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, want), f"expected {want!r}, got {r.stdout!r} {r.describe()}"


@pytest.mark.parametrize("kernel", KERNELS)
def test_signal_sent_by_the_stepped_syscall_is_delivered_after_the_step(exe, restore_rt_syscall, kernel):
    """kill_self's probed syscall sends SIGUSR2 to the process: it waits for the #DB after
    the next instruction (the nop, run in the slot), so the handler's frame saves
    kill_self+8 - without a probe the signal would interrupt kill_self+7."""
    m, r, _, _ = run_model(exe, "kill", restore_rt_syscall, kernel)
    assert (r.reason, r.stdout) == ("exit", b"usr2=1 at kill_self+8\n"), r.describe()


@pytest.mark.parametrize("kernel", ["6.9", "latest"])
def test_signal_sent_at_the_hit_is_delivered_after_the_step(exe, restore_rt_syscall, kernel):
    """A consumer on kill_self's first instruction (mov $62,%eax: stepped out of line)
    sends SIGUSR2 at the hit, as bpf_send_signal would: the signal waits for the step
    and is taken at kill_self+5, where the #DB left the task - not in the [uprobes]
    slot.  (The handler returns and kill_self's SIGTERM then ends the guest.)"""

    def send(m, ctx):
        m.send_sig(ctx.task, SIGUSR2, force=False)

    m, r, _, seen = run_model(exe, "term", restore_rt_syscall, kernel, handler=send, at="kill_self")
    after = kill_self(m) + SYSCALL_AT
    got = [(type(e).__name__, getattr(e, "signo", None), getattr(e, "rip", getattr(e, "new_ip", None))) for e in seen]
    want = [("XolDone", None, after), ("Signal", SIGUSR2, after), ("Signal", SIGTERM, after + 2)]
    assert [g for g in got if g[0] != "XolStep"] == want, f"expected {want} after the step, got {got}"
    assert (r.reason, r.signal) == ("signal", SIGTERM), r.describe()


@pytest.mark.parametrize(
    "mode, signo, offset",
    [
        # SIGTERM at its default action is fatal (__fatal_signal_pending): the step is
        # aborted, the task dies at the probed address (arch_uprobe_abort_xol)
        ("term", SIGTERM, SYSCALL_AT),
        # SIGQUIT dumps core: complete_signal starts no group exit, the signal waits for
        # the step's end like any other
        ("quit", SIGQUIT, SYSCALL_AT + 3),
    ],
)
@pytest.mark.parametrize("kernel", ["6.9", "latest"])
def test_fatal_signal_aborts_the_step(exe, restore_rt_syscall, mode, signo, offset, kernel):
    m, r, _, _ = run_model(exe, mode, restore_rt_syscall, kernel)
    want = (signo, kill_self(m) + offset)
    assert (r.reason, r.signal, r.rip) == ("signal", *want), f"expected death by {want}, got {r.describe()}"


def test_fatal_signal_aborts_a_step_that_never_ends(exe, restore_rt_syscall):
    """restore-term: after the stuck __restore_rt step, SIGTERM (fatal) is not held back:
    uprobe_deny_signal marks the step TRAPPED, handle_singlestep aborts it (rip back at
    the probed syscall) and the process dies by SIGTERM."""
    m, r, _, seen = run_model(exe, "restore-term", restore_rt_syscall)
    assert (r.reason, r.signal, r.stdout) == ("signal", SIGTERM, b"usr1=1\nusr2=0\n"), r.describe()
    probed = m.main_process.mem.file_vmas(m.mapped_file(LIBC))[0].vaddr_of(restore_rt_syscall)
    done = [e.new_ip for e in seen if isinstance(e, ev.XolDone)]
    assert done == [probed], f"expected one aborted step back at {probed:#x}, got {[hex(a) for a in done]}"
    utask = m.main_process.tasks[0].utask
    assert (utask.state, utask.active_uprobe) == (UTASK_RUNNING, None), f"utask left {utask.state}"


@pytest.mark.parametrize("trapped, hits, taken_at", [(False, 1, SYSCALL_AT), (True, 2, 0)])
def test_trap_during_the_step_aborts_it(exe, restore_rt_syscall, trapped, hits, taken_at):
    """A signal pending while the slot instruction recorded a trap (``thread.trap_nr``
    changed since arch_uprobe_pre_xol: arch_uprobe_xol_was_trapped) is the instruction's
    own: the step is aborted, the handler's frame saves the probed address, and after
    the handler the same instruction is probed and stepped again (two hits).  Without
    the trap the signal waits for the step's end (kill_self+5, one hit)."""
    m = Machine.from_elf(exe, argv=[exe, "term"])
    seen: list = []
    m.events.subscribe(lambda e: seen.append(e.rip), ev.Signal)

    steps: list = []

    def step_began(e):
        steps.append(e)
        if len(steps) == 1:  # the first step only
            if trapped:
                e.task.thread_fault = (14, 4, 0)  # a #PF recorded its trap_nr
            m.send_sig(e.task, SIGUSR2, force=False)

    m.events.subscribe(step_began, ev.XolStep)
    count: list = []
    m.uprobes.register("kill_self", handler=lambda ctx: count.append(ctx.vaddr))
    r = m.run(timeout=60)
    want = (hits, kill_self(m) + taken_at)
    assert (r.reason, r.signal) == ("signal", SIGTERM), r.describe()
    assert (len(count), seen[0]) == want, f"expected (hits, SIGUSR2 taken at) = {want}, got {(len(count), seen[0])}"


def host_run(exe: str, mode: str, path: str, offset: int) -> subprocess.CompletedProcess:
    """The guest natively with a tracefs uprobe at (path, offset), removed afterwards."""
    probe = ResolvedProbe(f"{path}:{offset:#x}", "deny", "p", offset, 0, "")
    t = Tracefs()
    try:
        with HostProbes(t, [probe], os.path.realpath(path)):
            return subprocess.run([exe, mode], capture_output=True, timeout=60)
    finally:
        t.close()


@needs_tracefs
@pytest.mark.parametrize(
    "mode, status, stdout",
    [
        ("restore", 0, b"usr1=1\nusr2=0\n"),
        ("restore-term", -SIGTERM, b"usr1=1\nusr2=0\n"),
        ("restore-sleep", 0, b"usr1=1\nusr2=0\nalrm=0 sleep=0\n"),
        ("kill", 0, b"usr2=1 at kill_self+8\n"),
        ("term", -SIGTERM, b""),
    ],
)
def test_the_host_kernel_agrees(exe, restore_rt_syscall, mode, status, stdout):
    """The same probe on the host kernel (as root), the model on its profile: what the
    guest prints and how it ends."""
    m, r, _, _ = run_model(exe, mode, restore_rt_syscall, host_profile_name())
    path, where = probe_of(mode, exe, restore_rt_syscall)
    offset = where if isinstance(where, int) else m.uprobes.resolve_target(f"{path}:{where}")[1]
    native = host_run(exe, mode, path, offset)
    model = (r.signal and -r.signal) or r.exit_code
    assert (native.returncode, native.stdout) == (status, stdout), f"the host disagrees: {native}"
    assert (model, r.stdout) == (status, stdout), f"the model disagrees with the host: {r.describe()} {r.stdout!r}"
