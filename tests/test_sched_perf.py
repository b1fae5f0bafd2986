"""The scheduler's time slices: counted in translated blocks (kernel_model.kernel.sched), long by default,
short on request, deterministic for a seed, with exact budgets and working timeouts.
Structural measures only (emu_start calls, spins, instruction counts), never time."""

from __future__ import annotations

import pytest
from cli_helpers import cli, one_line_error

from emu import Machine
from emu.engine.quantum import BlockQuantum
from kernel_model.errors import InputError
from kernel_model.kernel.sched import ALONE_SLICE, MIN_SLICE, SHORT_SLICE_INSNS
from kernel_model.trace.events import Syscall

WORK_ROUNDS = 200_000


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("sched_threads.c", "-static", "-pthread", name="sched_threads")


def machine(path, *args, seed=0, **kw):
    return Machine.from_elf(path, argv=["sched_threads", *args], seed=seed, **kw)


def emu_starts(m) -> int:
    return sum(t.slices for t in m.all_tasks)


def expected_sums(n: int, rounds: int) -> bytes:
    return b"".join(b"%d " % sum(i ^ t for i in range(rounds)) for t in range(max(n, 1))) + b"\n"


def run_work(path, n, seed=0, rounds=WORK_ROUNDS, **kw):
    m = machine(path, "work", str(n), str(rounds), seed=seed, **kw)
    r = m.run(timeout=120)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return m, r


# ------------------------------------------------------------------ determinism


def test_four_threads_replay_exactly_for_a_seed(guest):
    (m1, r1), (m2, r2) = run_work(guest, 4, seed=3), run_work(guest, 4, seed=3)
    assert len(m1.scheduler.history) >= 8, f"the threads hardly interleaved: {m1.scheduler.history}"
    assert m1.scheduler.history == m2.scheduler.history, (
        f"same seed, different switches:\n{m1.scheduler.history}\n{m2.scheduler.history}"
    )
    assert r1.stdout == r2.stdout == expected_sums(4, WORK_ROUNDS), (r1.stdout, r2.stdout)


def test_different_seeds_interleave_four_threads_differently(guest):
    histories = {tuple(run_work(guest, 4, seed=s)[0].scheduler.history) for s in range(4)}
    assert len(histories) >= 3, f"4 seeds gave only {len(histories)} interleavings"


@pytest.mark.parametrize("sched_slice", [None, (1, 40)], ids=["default", "short"])
def test_spinning_threads_see_each_other_within_a_budget(guest, sched_slice):
    """Two threads hand a turn back and forth by spinning on a shared word, with no
    syscalls: only preemption at the end of a slice lets the waiting one see it."""
    kw = {} if sched_slice is None else {"sched_slice": sched_slice}
    m = machine(guest, "pingpong", "20", **kw)
    r = m.run(max_insns=40_000_000, timeout=120)
    assert (r.reason, r.stdout) == ("exit", b"handovers=40\n"), (r.describe(), r.stdout)


def test_short_slices_switch_more_often_than_long_ones(guest):
    short, _ = run_work(guest, 2, rounds=20_000, sched_slice=(1, 40))
    long, _ = run_work(guest, 2, rounds=20_000)
    assert len(short.scheduler.history) > 20 * len(long.scheduler.history), (
        len(short.scheduler.history),
        len(long.scheduler.history),
    )


# ------------------------------------------------------------------ cost, structurally


@pytest.mark.parametrize("threads", [1, 4])
def test_emu_starts_are_bounded_by_the_work_over_the_slice(guest, threads):
    """Each round of the loop is at least one block, so the slices of the threads'
    work number at most rounds / MIN_SLICE (plus those syscalls end)."""
    m, r = run_work(guest, threads)
    assert r.stdout == expected_sums(threads, WORK_ROUNDS)
    bound = threads * WORK_ROUNDS // MIN_SLICE + 20
    assert emu_starts(m) <= bound, f"{emu_starts(m)} emu_starts for {threads} x {WORK_ROUNDS} rounds"


def test_a_task_alone_runnable_is_not_sliced(guest):
    """One thread works while main sleeps in pthread_join: long slices (ALONE_SLICE)."""
    m, _ = run_work(guest, 1, rounds=4 * ALONE_SLICE)
    assert emu_starts(m) <= 4 + 10, f"{emu_starts(m)} emu_starts"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_wake_up_cuts_the_slice_of_the_waker(guest, seed):
    """main, alone runnable, writes to a pipe a thread sleeps on, then spins until that
    thread runs: the wake-up cuts main's long slice to a seeded one (1000 blocks here,
    a spin round is one block), so main spins a few slices, not ALONE_SLICE blocks."""
    m = machine(guest, "wake", seed=seed, sched_slice=(1000, 1000))
    r = m.run(timeout=60)
    assert r.reason == "exit", r.describe()
    spins = int(r.stdout.split(b"=")[1])
    assert 0 < spins <= 8 * 1000, f"main spun {spins} rounds before the woken thread ran"


# ------------------------------------------------------------------ budgets and timeouts


@pytest.mark.parametrize("budget", [150_000, 400_000])
def test_max_insns_is_exact_with_threads(guest, budget):
    """The budget counts every instruction of every task: a code hook on every
    instruction sees exactly ``budget`` of them."""
    m = machine(guest, "work", "4", "100000", seed=1, sched_slice=(50, 200))
    seen = [0]
    m.add_code_hook(lambda addr, size: seen.__setitem__(0, seen[0] + 1))
    r = m.run(max_insns=budget)
    assert (r.reason, r.insns, seen[0]) == ("budget", budget, budget), (r.describe(), seen[0])
    assert len(m.scheduler.history) > 50, "the threads did not interleave inside the budget"


def test_a_budget_does_not_change_the_interleaving(guest):
    """Slices are counted in blocks whether a budget counts instructions or not."""
    free, _ = run_work(guest, 4, seed=2)
    m = machine(guest, "work", "4", str(WORK_ROUNDS), seed=2)
    r = m.run(max_insns=10**10, timeout=120)
    assert r.reason == "exit", r.describe()
    assert m.scheduler.history == free.scheduler.history


def test_timeout_ends_threads_spinning_forever(guest):
    m = machine(guest, "spin", "3")
    r = m.run(timeout=0.5)
    assert r.reason == "timeout", r.describe()
    assert len(m.scheduler.history) > 3, "the spinners were not interleaved"


# ------------------------------------------------------------------ without the native quantum


def test_instruction_count_slices_where_the_native_quantum_is_missing(guest, monkeypatch):
    """Hosts where the block hook cannot be made slice with Unicorn's instruction
    counter: slower, still deterministic."""
    monkeypatch.setattr(BlockQuantum, "native", property(lambda self: False))
    (m1, r1), (m2, r2) = (run_work(guest, 4, seed=5, rounds=20_000, sched_slice=(5_000, 20_000)) for _ in range(2))
    assert r1.stdout == r2.stdout == expected_sums(4, 20_000)
    assert m1.scheduler.history == m2.scheduler.history and len(m1.scheduler.history) > 4


# ------------------------------------------------------------------ the option


@pytest.mark.parametrize("bad", [(0, 5), (5, 4), (1, 2**41), ("1", "2"), 40, "1:40"])
def test_machine_rejects_bad_slices(guest, bad):
    with pytest.raises(InputError, match="MIN|block"):
        machine(guest, "work", "0", "1", sched_slice=bad)


@pytest.mark.parametrize("text", ["0:5", "9:3", "x", "1:"])
def test_cli_rejects_bad_slices_in_one_line(text):
    assert "--sched-slice" in one_line_error(cli("run", "--sched-slice", text, "guest:hello"))


def test_cli_slice_option_reaches_the_scheduler(guest):
    """The wake guest's spin count depends on the slice: the CLI run prints what the
    API prints with the same slices, and not what the default slices give."""
    res = cli("run", "--sched-slice", "500:500", "--seed", "1", guest, "wake")
    api = machine(guest, "wake", seed=1, sched_slice=(500, 500)).run(timeout=60)
    default = machine(guest, "wake", seed=1).run(timeout=60)
    assert (res.returncode, res.stdout) == (0, api.stdout), (res, api.stdout)
    assert api.stdout != default.stdout, api.stdout


# ------------------------------------------------------------------ the benchmark


def test_bench_threads_guest_runs_its_threads():
    from emu.frontends.bench.threads import GUEST_PATH, threads_elf

    m = Machine.from_bytes(threads_elf(), GUEST_PATH, argv=["threads", "4", "400000"])
    r = m.run(timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    assert (len(m.all_tasks), m.counters.syscalls[56]) == (5, 4), (len(m.all_tasks), m.counters.syscalls[56])
    assert len(m.scheduler.history) > 4, m.scheduler.history


def test_bench_threads_prints_the_ratio_against_its_target():
    res = cli("bench", "--threads", "--iterations", "200000", "--repeat", "1")
    out = res.stdout.decode()
    assert res.returncode == 0, res
    for row in ("main thread", "1 thread", "4 threads"):
        assert row in out, out
    assert "W on 4 threads / W on 1 thread" in out and ("met" in out or "MISSED" in out), out


# ------------------------------------------------------------------ no needless engine cost


def _record_starts(m):
    """(timeout, count, blocks, block hook attached) of every engine start of ``m``."""
    engine, starts = m.engine, []
    real = engine.start

    def start(cpu, rip, timeout, count, blocks=None):
        starts.append((timeout, count, blocks, engine.quantum.attached(cpu)))
        return real(cpu, rip, timeout, count, blocks)

    engine.start = start
    return starts


def test_the_block_hook_is_detached_once_the_threads_have_exited(guest):
    """While the threads run, the slices are counted by the native block hook; once
    they have exited and main is alone, the hook is removed from its Unicorn instance
    (nothing runs per block) before main's next start, and main's printf runs with
    no hook attached."""
    m = machine(guest, "work", "3", "20000", seed=1)
    starts = _record_starts(m)
    attached_at_write = []
    m.events.subscribe(
        lambda e: attached_at_write.append(m.engine.quantum.attached(m.uc)) if e.nr == 1 else None, Syscall
    )
    r = m.run(timeout=120)
    assert (r.reason, r.stdout) == ("exit", expected_sums(3, 20000)), r.describe()
    sliced = [s for s in starts if s[2] is not None]
    assert sliced and all(s[3] for s in sliced), "the threaded slices ran without the block hook"
    last_sliced = max(i for i, s in enumerate(starts) if s[2] is not None)
    after = starts[last_sliced + 1 :]
    assert after and not any(s[3] for s in after), f"the hook stayed after the threads exited: {after}"
    assert attached_at_write == [False], attached_at_write
    assert not m.engine.quantum.attached(m.uc)


def test_a_single_task_never_gets_the_block_hook():
    m = Machine.from_asm(_SPIN_THEN_EXIT)
    starts = _record_starts(m)
    r = m.run(timeout=30)
    assert r.reason == "exit", r.describe()
    assert starts and not any(s[3] for s in starts) and all(s[2] is None for s in starts), starts


def test_only_a_start_nothing_bounds_gets_a_unicorn_timer(guest):
    """Unicorn's timeout costs a timer thread per emu_start: threaded slices and
    budget-bounded starts run without it (the deadline is checked between starts);
    a lone task with no budget keeps it, so a guest spinning forever still ends."""
    m = machine(guest, "work", "3", "20000", seed=1)
    starts = _record_starts(m)
    assert m.run(timeout=120).reason == "exit"
    assert all(not s[0] for s in starts if s[2] is not None), "a threaded slice asked for a Unicorn timer"
    assert any(s[0] for s in starts if s[2] is None), "the lone task's unbounded start had no timer"
    m = Machine.from_asm(_SPIN_FOREVER)
    starts = _record_starts(m)
    r = m.run(max_insns=SHORT_SLICE_INSNS, timeout=60)
    assert r.reason == "budget" and all(not s[0] for s in starts), starts
    m = Machine.from_asm(_SPIN_FOREVER)
    starts = _record_starts(m)
    r = m.run(timeout=0.3)
    assert r.reason == "timeout" and starts and starts[0][0], (r.describe(), starts)


def test_threads_spinning_forever_end_at_the_timeout_with_a_large_budget(guest):
    m = machine(guest, "spin", "3")
    r = m.run(max_insns=10**12, timeout=0.5)
    assert r.reason == "timeout", r.describe()


_SPIN_FOREVER = """
_start:
spin:
    jmp spin
"""

_SPIN_THEN_EXIT = """
_start:
    mov ecx, 100000
again:
    dec ecx
    jnz again
    mov eax, 60
    xor edi, edi
    syscall
"""
