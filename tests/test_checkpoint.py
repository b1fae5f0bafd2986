"""Checkpoints and deterministic replay (emu.replay.checkpoint): restoring a checkpoint and
running forward repeats the first run exactly - probe hits, return instances, counters,
registers, memory - and nothing that already left the machine is emitted twice."""

from __future__ import annotations

import hashlib

import pytest

from emu import Machine
from emu.replay.checkpoint import CheckpointError, Recorder

EXPECTED_STDOUT = b"start 10\nthreads 77\nchild 15\nparent saw 7, 6\n"


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("replay.c", "-static", "-pthread", name="replay")


def _ev(e) -> tuple:
    """An event as plain values (a task as its tid)."""
    out = [e.kind]
    for name in e.__match_args__:
        v = getattr(e, name)
        plain = isinstance(v, (int, str, tuple, type(None)))
        out.append(v.tid if hasattr(v, "tid") else v if plain else type(v).__name__)
    return tuple(out)


class Probed:
    """The replay guest with a uprobe and a uretprobe on work(), every event and
    every handler call logged with the instruction clock."""

    def __init__(self, path, **kw):
        self.m = m = Machine.from_elf(path, seed=1, **kw)
        self.calls: list = []
        self.events: list = []
        m.uprobes.register(
            "work",
            handler=lambda c: self.calls.append((m.insn_clock(), "entry", c.task.tid, c.regs.rdi)),
            ret_handler=lambda c: self.calls.append((m.insn_clock(), "return", c.task.tid, c.regs.rax)),
        )
        m.events.subscribe(lambda e: self.events.append((m.insn_clock(), *_ev(e))))


def memory_digest(m) -> str:
    h = hashlib.sha256()
    for p in m.processes:
        if p.mem.uc is None:
            continue
        for v in p.mem.vmas:
            h.update(repr((p.pid, v.start, v.end, v.prot, v.name)).encode())
            if v.prot & 1:
                h.update(p.mem.read(v.start, v.end - v.start))
    return h.hexdigest()


def machine_state(m) -> dict:
    ut = m.task.utask
    return {
        "icount": m.icount,
        "tid": m.task.tid,
        "regs": tuple(m.read_regs().values()),
        "counters": m.counters.snapshot(),
        "memory": memory_digest(m),
        "return_instances": len(ut.return_instances) if ut is not None else 0,
        "tasks": sorted(t.tid for t in m.tasks),
        "processes": sorted(p.pid for p in m.processes),
        "stdout": bytes(m.stdout),
        "history": list(m.scheduler.history),
    }


def _diff(want: dict, got: dict) -> str:
    return "; ".join(f"{k}: expected {want[k]!r:.200}, got {got[k]!r:.200}" for k in want if want[k] != got[k])


@pytest.fixture(scope="module")
def first_run(guest):
    """One recorded run to the end: the reference every replay is compared with."""
    p = Probed(guest)
    rec = Recorder(p.m, interval=2000, max_checkpoints=64)
    res = p.m.run()
    assert (res.reason, res.exit_code, res.stdout) == ("exit", 0, EXPECTED_STDOUT), res.describe()
    res.calls, res.events = list(p.calls), list(p.events)
    return p, rec, res


def test_recording_changes_nothing_the_guest_or_the_model_observes(guest, first_run):
    """Compared with a counted run (an instruction budget): a run without one lets the
    parent go on after clone's reschedule request (Unicorn drops that emu_stop)."""
    p, rec, _ = first_run
    free = Probed(guest)
    res = free.m.run(max_insns=10**9)
    assert res.stdout == EXPECTED_STDOUT
    assert free.events == p.events, "the event stream of a recorded run differs from a free run"
    assert free.calls == p.calls
    assert free.m.counters.snapshot() == p.m.counters.snapshot()
    assert free.m.scheduler.history == p.m.scheduler.history


@pytest.mark.parametrize("target", [1, 9_000, 11_460, 14_600, 16_000, 18_000, 19_500])
def test_seek_reaches_the_state_a_run_of_that_many_instructions_has(guest, first_run, target):
    p, rec, _ = first_run
    ref = Probed(guest)
    ref.m.run(max_insns=target)
    want = machine_state(ref.m)
    rec.seek(target)
    got = machine_state(p.m)
    assert got == want, _diff(want, got)
    rec.seek(rec.end)


@pytest.mark.parametrize("target", [0, 11_460, 15_000, 19_000])
def test_replay_to_the_end_repeats_probe_hits_return_instances_and_counters(first_run, target):
    p, rec, res = first_run
    end = rec.end
    counters = p.m.counters.snapshot()
    delivered = len(p.events)
    rec.seek(target)
    at = len(p.calls)
    replayed = []
    rec.on_replayed_event = lambda e: replayed.append((p.m.insn_clock(), *_ev(e)))
    try:
        again = p.m.run()
    finally:
        rec.on_replayed_event = None
    assert (again.reason, again.exit_code, again.stdout) == (res.reason, res.exit_code, res.stdout)
    assert p.m.icount == end
    assert p.calls[at:] == [c for c in res.calls if c[0] > target], "handler calls differ on replay"
    assert replayed == [e for e in res.events if e[0] > target], "replayed events differ from the first run"
    assert len(p.events) == delivered, "events were delivered twice"
    assert p.m.counters.snapshot() == counters


@pytest.mark.parametrize("nth_entry", [1, 3, 4, 9])
def test_return_instance_depth_after_a_seek_is_the_calls_not_yet_returned(first_run, nth_entry):
    """Inside the probed recursion the task holds one return instance per work() frame
    entered and not yet left (counted from the first run's handler calls)."""
    p, rec, res = first_run
    target = res.calls[nth_entry - 1][0] + 2
    tid = res.calls[nth_entry - 1][2]
    open_frames = sum(1 if c[1] == "entry" else -1 for c in res.calls if c[0] <= target and c[2] == tid)
    rec.seek(target)
    task = next(t for t in p.m.tasks if t.tid == tid)
    got = len(task.utask.return_instances)
    assert got == open_frames >= 1, f"expected {open_frames} return instances at {target}, got {got}"
    rec.seek(rec.end)


def test_guest_output_passed_to_the_host_is_not_written_twice(guest, capfd):
    m = Machine.from_elf(guest, seed=1, passthrough=True)
    rec = m.record(interval=1500)
    m.run()
    rec.seek(12_000)
    m.run()
    rec.seek(0)
    m.run()
    out, _ = capfd.readouterr()
    assert out.encode() == EXPECTED_STDOUT


def test_checkpoint_memory_is_bounded(guest):
    m = Machine.from_elf(guest, seed=1)
    rec = Recorder(m, interval=300, max_checkpoints=6)
    seen = []
    m.events.subscribe(lambda e: seen.append(len(rec.checkpoints)))
    m.run()
    assert max(seen) <= 6 and len(rec.checkpoints) <= 6, (max(seen), len(rec.checkpoints))
    assert rec.checkpoints[0].position == 0 and rec.stats()["dropped"] > 0
    rec.seek(1000)  # from the first checkpoint, the only one before it
    assert m.icount == 1000
    stats = rec.stats()
    assert stats["bytes"] > 0 and stats["checkpoints"] == len(rec.checkpoints)


def test_a_code_hook_stop_leaves_the_clock_at_the_instruction_not_run():
    m = Machine.from_asm("""
_start:
    mov ecx, 0
loop:
    inc ecx
    cmp ecx, 1000
    jne loop
target:
    nop
    mov eax, 60
    xor edi, edi
    syscall
""")
    rec = m.record(interval=10_000)
    at = m.resolve("target")
    m.add_code_hook(lambda a, s: m.stop("here"), at, at)
    res = m.run()
    assert (res.reason, m.pc, m.icount) == ("stopped", at, 3001), (res.reason, hex(m.pc), m.icount)
    rec.seek(3000)
    assert (m.pc, m.reg_read("rcx")) == (m.resolve("loop") + 8, 1000)  # at the last jne


def test_machine_checkpoint_and_restore_without_a_recorder(guest):
    p = Probed(guest)
    p.m.run(max_insns=12_000)
    cp = p.m.checkpoint()
    state = machine_state(p.m)
    calls = len(p.calls)
    first = p.m.run()
    after = p.calls[calls:]
    p.m.restore(cp)
    got = machine_state(p.m)
    assert got == state, _diff(state, got)
    n = len(p.calls)
    again = p.m.run()
    assert (again.exit_code, again.stdout) == (first.exit_code, first.stdout) == (0, EXPECTED_STDOUT)
    assert p.calls[n:] == after and after


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: Recorder(m, interval=0), "interval"),
        (lambda m: Recorder(m, max_checkpoints=1), "max_checkpoints"),
        (lambda m: m.record().seek(10**9), "outside the recorded history"),
        (lambda m: m.restore("cp"), "not a checkpoint"),
    ],
)
def test_bad_requests_are_one_line_errors(call, message):
    m = Machine.from_guest("exit42")
    with pytest.raises(CheckpointError, match=message):
        call(m)


def test_a_budget_that_ends_after_an_instruction_ending_in_f4_is_not_a_hlt():
    """``mov r12, rsi`` is 49 89 f4: a counted run (every run of a recorder) that stops
    right after it must not take the 0xf4 for a hlt and kill the guest."""
    m = Machine.from_asm("""
_start:
    mov r12, rsi
    mov eax, 60
    mov edi, 3
    syscall
""")
    res = m.run(max_insns=1)
    assert (res.reason, m.pc) == ("budget", m.resolve("_start") + 3), res.describe()
    assert m.run().exit_code == 3


BUSYBOX_SCRIPT = "/bin/busybox echo hi; x=$(/bin/busybox printf %s abc); echo $x done"


@pytest.fixture(scope="module")
def shell_run():
    """busybox sh forking, exec'ing and reading a pipe, recorded with a checkpoint
    every 3000 instructions (address spaces come and go between them)."""
    m = Machine.from_elf("/bin/busybox", argv=["sh", "-c", BUSYBOX_SCRIPT], seed=2)
    rec = Recorder(m, interval=3000)
    res = m.run()
    assert (res.exit_code, res.stdout) == (0, b"hi\nabc done\n"), res.describe()
    return m, rec, res


@pytest.mark.parametrize("fraction", [0.2, 0.35, 0.5, 0.7, 0.99])
def test_seek_across_fork_exec_and_exit_reaches_the_state_of_a_counted_run(shell_run, fraction):
    m, rec, _ = shell_run
    target = int(rec.end * fraction)
    ref = Machine.from_elf("/bin/busybox", argv=["sh", "-c", BUSYBOX_SCRIPT], seed=2)
    Recorder(ref, interval=1 << 40)  # recorded runs slice threads by instructions
    ref.run(max_insns=target)
    want = machine_state(ref)
    rec.seek(target)
    got = machine_state(m)
    assert got == want, _diff(want, got)
    again = m.run()
    assert (again.exit_code, again.stdout, m.icount) == (0, b"hi\nabc done\n", rec.end)


def test_a_step_a_code_hook_stops_before_its_instruction_does_not_advance_the_clock():
    m = Machine.from_asm("""
_start:
    mov eax, 1
    mov eax, 60
    xor edi, edi
    syscall
""")
    m.record(interval=100)
    at = m.resolve("_start") + 5
    m.step()
    h = m.add_code_hook(lambda a, s: m.stop("held"), at, at)
    m.step()
    assert (m.pc, m.icount) == (at, 1), (hex(m.pc), m.icount)
    m.remove_hook(h)
    m.step()
    assert (m.pc, m.icount, m.reg_read("rax")) == (at + 5, 2, 60)
