"""Processes and threads: fork/vfork/clone, the deterministic scheduler, and uprobes
across tasks."""

from __future__ import annotations

from collections import Counter

import pytest

from emu import Machine
from kernel_model.kernel.events.uprobes import UPROBE_HANDLER_REMOVE
from kernel_model.trace.events import XolWait

PROFILES = ["6.10", "6.18", "latest"]


@pytest.fixture(scope="module")
def guests(build_c):
    return {
        "threads": build_c("threads.c", "-static", "-pthread", name="threads"),
        "forks": build_c("forks.c", "-static", name="forks"),
        "fork_pending": build_c("fork_pending.c", "-static", name="fork_pending"),
        "thread_in_probe": build_c("thread_in_probe.c", "-static", "-pthread", name="thread_in_probe"),
    }


def machine(path, **kw):
    kw.setdefault("seed", 0)
    return Machine.from_elf(path, **kw)


# ------------------------------------------------------------------ tasks


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pthreads_run_to_completion(guests, seed):
    r = machine(guests["threads"], seed=seed).run(max_insns=100_000_000)
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, b"total=450 joined=30\n"), r.describe()


def test_getpid_and_gettid_per_thread(guests):
    m = machine(guests["threads"])
    seen = set()
    m.uprobes.register("work", handler=lambda c: seen.add((c.task.process.pid, c.task.tid)))
    m.run()
    pids = {p for p, _ in seen}
    tids = {t for _, t in seen}
    assert pids == {1000} and len(tids) == 3 and 1000 not in tids


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_fork_vfork_and_wait(guests, seed):
    r = machine(guests["forks"], seed=seed).run()
    assert r.stdout.decode().splitlines() == [
        "child work=11",
        "parent saw child exit 7",
        "vfork child exit 9, parent work=3",
    ]


# ------------------------------------------------------------------ scheduler


def _run_history(path, seed, probe=None):
    m = machine(path, seed=seed)
    hits = []
    if probe:
        m.uprobes.register(probe, handler=lambda c: hits.append(c.task.tid))
    r = m.run()
    return r, list(m.scheduler.history), hits


def test_same_seed_same_interleaving(guests):
    a = _run_history(guests["threads"], 7, "work")
    b = _run_history(guests["threads"], 7, "work")
    assert a[1] == b[1] and a[2] == b[2], "a seed must replay exactly"


def test_different_seeds_reach_different_interleavings(guests):
    histories = {tuple(_run_history(guests["threads"], s)[1]) for s in range(4)}
    assert len(histories) >= 3


@pytest.mark.parametrize("seed", range(6))
def test_seed_sweep_probed_runs_match_unprobed(guests, seed):
    """Probes on every instruction of work() and worker(): same output on every seed."""
    from probe_all import boundaries

    plain = machine(guests["threads"], seed=seed).run()
    m = machine(guests["threads"], seed=seed)
    hits = Counter()
    for insn in boundaries(m, names=["work", "worker"]):
        m.uprobes.register(insn.addr, handler=lambda c: hits.__setitem__(c.vaddr, hits[c.vaddr] + 1))
    r = m.run()
    assert (r.exit_code, r.stdout) == (plain.exit_code, plain.stdout)
    assert hits[m.resolve("work")] == 150


# ------------------------------------------------------------------ uprobes across tasks


@pytest.mark.parametrize("kernel", PROFILES)
def test_breakpoints_are_inherited_by_fork(guests, kernel):
    m = machine(guests["forks"], kernel=kernel)
    hits = Counter()
    m.uprobes.register("work", handler=lambda c: hits.update([c.task.process.pid]))
    r = m.run()
    assert r.exit_code == 0
    assert hits == {1000: 2, 1001: 1, 1002: 1}, "parent twice, the fork child and the vfork child once"


@pytest.mark.parametrize("kernel", PROFILES)
def test_fork_while_a_uretprobe_is_pending(guests, kernel):
    m = machine(guests["fork_pending"], kernel=kernel)
    rets = []
    m.uprobes.register("fork_inside", ret_handler=lambda c: rets.append((c.task.process.pid, c.regs.rax)))
    r = m.run()
    assert r.stdout.decode().splitlines() == ["child r=100", "parent r=200 child=5"]
    assert sorted(rets) == [(1000, 200), (1001, 100)], "the handler runs once in each"


def test_forked_child_gets_its_xol_area_at_the_parents_address(guests):
    """dup_xol_work: the child that inherited a pending return instance gets its own
    [uprobes] page at the parent's address, with the trampoline in slot 0."""
    m = machine(guests["fork_pending"], kernel="6.18")
    areas = {}

    def ret(ctx):
        proc = ctx.task.process
        vma = proc.mem.find_vma(proc.mm_uprobes.xol_area.vaddr)
        areas[proc.pid] = (vma.start, vma.perms(), proc.mem.read(vma.start, 1))

    m.uprobes.register("fork_inside", ret_handler=ret)
    m.run()
    assert areas == {1000: (0x7FFFFFFFE000, "--xp", b"\x50"), 1001: (0x7FFFFFFFE000, "--xp", b"\x50")}


def test_thread_created_inside_a_probed_function_has_no_return_instances(guests):
    m = machine(guests["thread_in_probe"], kernel="6.18")
    seen = []
    m.uprobes.register("spawn", ret_handler=lambda c: seen.append(("spawn", c.regs.rax)))

    def leaf_entry(ctx):
        utask = ctx.task.utask
        seen.append(("leaf", ctx.task.tid != 1000, len(utask.return_instances) if utask else 0))

    m.uprobes.register("leaf", handler=leaf_entry, ret_handler=lambda c: seen.append(("leaf_ret", c.regs.rax)))
    r = m.run()
    assert r.stdout == b"spawn=42\n"
    assert seen == [("leaf", True, 0), ("leaf_ret", 42), ("spawn", 42)]


def test_filter_fork_removes_the_breakpoint_from_the_child_only(guests):
    """filter_fork: a consumer that wants only the parent returns REMOVE in the child;
    the child's copy loses the breakpoint, the parent keeps it."""
    m = machine(guests["forks"], kernel="6.18")
    hits = Counter()

    def handler(ctx):
        hits.update([ctx.task.process.pid])
        return 0 if ctx.task.process.pid == 1000 else UPROBE_HANDLER_REMOVE

    m.uprobes.register("work", handler=handler, filter=lambda proc: proc.pid == 1000)
    r = m.run()
    assert r.exit_code == 0
    # parent twice; fork child once (then removed in its mm); the vfork child shares the
    # parent's mm, where the parent's filter still wants the breakpoint
    assert hits == {1000: 2, 1001: 1, 1002: 1}
    assert m.mem.read(m.resolve("work"), 1) == b"\xcc"


def test_filter_clone_vm_keeps_the_shared_breakpoint(guests):
    m = machine(guests["threads"], kernel="6.18")
    hits = Counter()
    m.uprobes.register(
        "work",
        handler=lambda c: (hits.update([c.task.tid]), UPROBE_HANDLER_REMOVE)[1],
        filter=lambda proc: proc.pid == 1000,
    )
    m.run()
    assert sum(hits.values()) == 150, "threads share the mm that the filter still wants"


@pytest.mark.parametrize(
    "kernel,child", [("6.18", "signal 11"), ("7.1", "signal 11"), ("7.2", "signal 11"), ("7.3", "exit 3")]
)
def test_optimized_site_after_fork_per_profile(tmp_path, kernel, child):
    """Measured on a real 6.18: the child inherits `call` into a [uprobes-trampoline]
    that fork did not copy (VM_DONTCOPY) and dies of SIGSEGV; 7.3 copies trampolines."""
    from guest_programs import build_corpus_guest

    exe = build_corpus_guest("forkopt", str(tmp_path))
    m = Machine.from_elf(exe, kernel=kernel)
    m.uprobes.register("site_nop5", handler=lambda c: None)
    r = m.run()
    lines = r.stdout.decode().splitlines()
    status = next(ln for ln in lines if ln.startswith("child status:"))
    assert status == f"child status: {child}"


def test_attach_and_detach_while_other_threads_run(guests):
    """uprobe_race in miniature: probes come and go while threads are inside the
    function, between entry and return, or in an out-of-line step; nothing is lost."""
    m = machine(guests["threads"], kernel="6.18", seed=3)
    m.scheduler.min_slice, m.scheduler.max_slice = 1, 30
    state = {"uc": None, "n": 0}
    calls = Counter()
    rets = Counter()
    real = m.syscalls.table[202]  # futex: called by the threads at every contended lock

    def toggling_futex(task, regs, *a):
        state["n"] += 1
        if state["uc"] is None:
            state["uc"] = m.uprobes.register(
                "work", handler=lambda c: calls.update(["entry"]), ret_handler=lambda c: rets.update(["ret"])
            )
        elif state["n"] % 2 == 0:
            m.uprobes.unregister(state["uc"])
            state["uc"] = None
        return real(task, regs, *a)

    m.syscalls.register(202, toggling_futex)
    r = m.run()
    assert r.stdout == b"total=450 joined=30\n"
    assert rets["ret"] <= calls["entry"]
    work = m.resolve("work")
    orig = m.process.exe.read(m.process.exe.elf.vaddr_to_offset(m.process.exe.elf.resolve("work").value), 1)
    expected = b"\xcc" if state["uc"] is not None else orig
    assert m.mem.read(work, 1) == expected, "no corrupted site bytes"
    assert m.mem.read(work + 1, 3) == m.process.exe.read(
        m.process.exe.elf.vaddr_to_offset(m.process.exe.elf.resolve("work").value) + 1, 3
    )


def test_per_task_counters(guests):
    m = machine(guests["threads"], kernel="6.18")
    m.uprobes.register("work", handler=lambda c: None)
    m.run()
    per_task = {t.tid: t.counters.uprobe_hits for t in m.all_tasks if t.tid != 1000}
    assert sorted(per_task.values()) == [50, 50, 50]
    assert m.main_process.counters.uprobe_hits == 150


def test_threads_wait_for_a_free_xol_slot_and_handlers_run_once(guests):
    """With one usable XOL slot and tiny time slices, threads find the slot busy and
    sleep until it is freed; each hit's handlers still run exactly once."""
    m = machine(guests["threads"], kernel="6.18", seed=5)
    m.uprobes.xol_slots = 2  # slot 0 is the trampoline: one usable
    m.scheduler.min_slice, m.scheduler.max_slice = 1, 3
    hits = Counter()
    waits = []
    m.events.subscribe(lambda e: waits.append(e.task.tid), XolWait)
    m.uprobes.register("work", handler=lambda c: hits.update([c.task.tid]))
    r = m.run()
    assert r.stdout == b"total=450 joined=30\n"
    assert sorted(hits.values()) == [50, 50, 50]
    assert m.counters.xol_singlesteps == 150 and m.counters.uprobe_hits == 150
    assert waits, "no thread ever waited for the slot: the test did not exercise it"


def test_usdt_race_attach_detach_semaphore_ends_at_zero(build_c):
    """Port of uprobe_race: trigger threads against attach/detach (done at every futex
    call); handlers never run for a detached consumer and the semaphore ends at 0."""
    import os

    inc = os.path.join(os.path.dirname(__file__), "..", "guest_programs", "c")
    exe = build_c("usdt_race.c", "-static", "-pthread", f"-I{inc}", name="usdt_race")
    m = Machine.from_elf(exe, kernel="6.18", seed=2)
    m.scheduler.min_slice, m.scheduler.max_slice = 1, 40
    live = {"ucs": None, "toggles": 0}
    stale = []

    def handler(ctx):
        if ctx.consumer not in ctx.uprobe.consumers:
            stale.append(ctx.task.tid)

    real = m.syscalls.table[202]

    def toggling_futex(task, regs, *a):
        live["toggles"] += 1
        if live["ucs"] is None:
            live["ucs"] = m.uprobes.register_usdt(f"usdt:{exe}:race:hit", handler=handler)
        else:
            for uc in live["ucs"]:
                m.uprobes.unregister(uc)
            live["ucs"] = None
        return real(task, regs, *a)

    m.syscalls.register(202, toggling_futex)
    r = m.run()
    assert r.stdout == b"calls=120\n"
    assert live["toggles"] > 2 and not stale
    if live["ucs"] is not None:
        for uc in live["ucs"]:
            m.uprobes.unregister(uc)
    sema = m.resolve("race_hit_semaphore")
    assert m.mem.read(sema, 2) == b"\0\0", "the semaphore ends at 0"


def test_kill_between_processes(build_c):
    exe = build_c("killchild.c", "-static", name="killchild")
    r = Machine.from_elf(exe).run()
    assert (r.exit_code, r.stdout) == (0, b"child killed by 15\n")
