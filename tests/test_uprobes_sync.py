"""The synchronization each kernel version does on a probe hit, recorded by the model:
one test per side of every switch, on the bench guest with producers pinned to CPUs
0 and 1 (CPU 1's steady-state trigger is inspected)."""

import functools
from collections import Counter

import pytest

from emu.frontends.bench.producers import producers_elf, record_triggers
from emu.frontends.bench.scenarios import SCENARIOS, attach, parse_column
from emu.inspect import grace_periods
from emu.machine import Machine


@functools.cache
def _trigger(column: str, scenario: str = "uprobe-nop", cpu: int = 1) -> tuple:
    trig = record_triggers(parse_column(column), SCENARIOS[scenario], 2)[cpu]
    return tuple((a.obj, a.inst, a.kind) for a in trig)


def _count(column, obj, kind, scenario="uprobe-nop"):
    return Counter((o, k) for o, _, k in _trigger(column, scenario))[(obj, kind)]


@pytest.mark.parametrize(
    "column,expected",
    [
        ("6.9", {("uprobes_treelock", "lock"): 1, ("uprobes_treelock", "unlock"): 1}),
        ("6.10", {("uprobes_treelock", "atomic"): 2, ("uprobes_seqcount", "read"): 0}),
        ("6.12", {("uprobes_seqcount", "read"): 1, ("uprobes_treelock", "atomic"): 0}),
        ("6.12:treelock=percpu_rwsem", {("uprobes_treelock.read_count", "write"): 2, ("uprobes_seqcount", "read"): 0}),
    ],
)
def test_treelock(column, expected):
    got = {key: _count(column, *key) for key in expected}
    assert got == expected


@pytest.mark.parametrize(
    "column,uprobe_atomics,sda_writes,barriers,task_writes",
    [
        ("6.11", 4, 0, 0, 0),  # get_uprobe, register_rwsem down/up, put_uprobe
        ("6.11:consumers_lock=lockless", 2, 0, 0, 0),
        ("6.12", 0, 2, 2, 0),  # srcu_read_lock/unlock: per-CPU count + smp_mb
        ("6.13", 0, 0, 0, 2),  # rcu_read_lock_trace: the task's nesting only
        ("6.13:uprobe_lifetime=srcu_lite", 0, 2, 0, 0),
    ],
)
def test_uprobe_lifetime_on_an_entry_hit(column, uprobe_atomics, sda_writes, barriers, task_writes):
    got = (
        _count(column, "uprobe", "atomic"),
        _count(column, "uprobes_srcu.sda", "write"),
        _count(column, "smp_mb", "mb"),
        _count(column, "task.trc_reader_nesting", "write"),
    )
    assert got == (uprobe_atomics, sda_writes, barriers, task_writes)


@pytest.mark.parametrize(
    "column,uprobe_atomics,uret_sda_writes,barriers",
    [
        ("6.12", 2, 0, 4),  # the return instance's get/put; uprobes_srcu at entry and return
        ("6.13", 0, 2, 2),  # a lease on uretprobes_srcu (normal SRCU: two barriers)
        ("7.3", 0, 2, 0),  # SRCU-fast-updown: no barrier
    ],
)
def test_uretprobe_lifetime(column, uprobe_atomics, uret_sda_writes, barriers):
    got = (
        _count(column, "uprobe", "atomic", "uretprobe-nop"),
        _count(column, "uretprobes_srcu.sda", "write", "uretprobe-nop"),
        _count(column, "smp_mb", "mb", "uretprobe-nop"),
    )
    assert got == (uprobe_atomics, uret_sda_writes, barriers)


@pytest.mark.parametrize("column,mmap_lock_atomics,mm_lock_seq_reads", [("6.13", 2, 0), ("6.14", 0, 2)])
def test_vma_lookup(column, mmap_lock_atomics, mm_lock_seq_reads):
    assert (_count(column, "mm.mmap_lock", "atomic"), _count(column, "mm.mm_lock_seq", "read")) == (
        mmap_lock_atomics,
        mm_lock_seq_reads,
    )


@pytest.mark.parametrize(
    "column,line", [("6.11", ("trace_uprobe", "bench/trigger")), ("6.12", ("trace_uprobe.nhits", ("bench/trigger", 1)))]
)
def test_nhit_line(column, line):
    writes = [(o, i) for o, i, k in _trigger(column) if k == "write" and o.startswith("trace_uprobe")]
    assert writes == [line]


@pytest.mark.parametrize("column,filter_atomics,buffer_atomics", [("6.9", 2, 2), ("6.10", 0, 0)])
def test_perf_filter_and_args_buffer_mutex(column, filter_atomics, buffer_atomics):
    assert (_count(column, "trace_uprobe", "atomic"), _count(column, "uprobe_cpu_buffer.mutex", "atomic")) == (
        filter_atomics,
        buffer_atomics,
    )


@pytest.mark.parametrize("column,siglock", [("6.14", 1), ("6.15", 0)])
def test_single_step_takes_siglock_until_6_15_and_xol_atomics_always(column, siglock):
    got = (
        _count(column, "sighand.siglock", "lock", "uprobe-ret"),
        _count(column, "xol_area.bitmap", "atomic", "uprobe-ret"),
        _count(column, "xol_area", "atomic", "uprobe-ret"),
    )
    assert got == (siglock, 2, 2)


def _written_lines(column, cpu):
    return {(o, i) for o, i, k in _trigger(column, cpu=cpu) if k in ("write", "atomic", "lock", "unlock")}


@pytest.mark.parametrize(
    "column,shared",
    [
        (
            "6.11",
            {("mm.mmap_lock", 1000), ("uprobes_treelock", None), ("uprobe", 1), ("trace_uprobe", "bench/trigger")},
        ),
        ("6.13", {("mm.mmap_lock", 1000)}),
        ("6.14", set()),
    ],
)
def test_lines_two_cpus_both_write(column, shared):
    """What made each version stop scaling: the lines both CPUs store to."""
    assert _written_lines(column, 0) & _written_lines(column, 1) == shared


def _run_recorded(column, scenario, record=True):
    col = parse_column(column)
    m = Machine.from_bytes(
        producers_elf(),
        "/guest/bench_producers",
        argv=["bench_producers", str(SCENARIOS[scenario].loop), "6", "2"],
        kernel=col.kernel,
        cpus=2,
        **dict(col.overrides),
    )
    attach(m, SCENARIOS[scenario], "program")
    if record:
        m.record_accesses()
    r = m.run(max_insns=None, timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return m


@pytest.mark.parametrize("column", ["6.11", "6.12", "6.13", "7.3"])
@pytest.mark.parametrize("scenario", ["uprobe-nop", "uretprobe-nop", "uprobe-ret"])
def test_every_read_side_and_reference_is_released(column, scenario):
    m = _run_recorded(column, scenario)
    sync = m.kernel.uprobes.sync
    refs = {locks.inst: locks.ref.value for _, locks in sync._uprobes.values()}
    srcu = [s.readers_active(i) for s in (sync.uprobes_srcu, sync.uretprobes_srcu) for i in (0, 1)]
    assert (refs, srcu, sync.rcu_tasks_trace.readers()) == ({1: 1}, [0, 0, 0, 0], 0)


@pytest.mark.parametrize("scenario", ["uprobe-nop", "uretprobe-nop", "uprobe-ret"])
def test_recording_changes_no_count(scenario):
    plain, recorded = _run_recorded("6.12", scenario, False), _run_recorded("6.12", scenario)
    assert plain.counters.snapshot() == recorded.counters.snapshot()
    assert plain.kernel.uprobes.sync.log is None


@pytest.mark.parametrize(
    "column,single,batch",
    [
        ("6.11", {}, {}),
        ("6.12", {"uprobes_srcu": 1}, {"uprobes_srcu": 1}),
        ("6.13", {"rcu_tasks_trace": 1, "uretprobes_srcu": 1}, {"rcu_tasks_trace": 1, "uretprobes_srcu": 1}),
    ],
)
def test_unregister_waits_for_grace_periods(column, single, batch):
    """uprobe_unregister_sync after each unregistration; a uprobe_multi-style batch
    waits once for all its consumers."""
    m = Machine.from_bytes(
        producers_elf(), "/guest/bench_producers", argv=["bench_producers", "2", "1", "1"], kernel=column
    )
    file = m.process.exe
    off = file.elf.vaddr_to_offset(file.elf.resolve("uprobe_target_nop").value)
    ucs = [m.uprobes.register((file.path, off + i), handler=lambda ctx: 0) for i in range(3)]
    g0 = grace_periods(m)
    m.uprobes.unregister(ucs[0])
    g1 = grace_periods(m)
    m.uprobes.unregister_batch(ucs[1:])
    g2 = grace_periods(m)
    assert ({k: g1[k] - g0[k] for k in g0 if g1[k] != g0[k]}, {k: g2[k] - g1[k] for k in g0 if g2[k] != g1[k]}) == (
        single,
        batch,
    )


@pytest.mark.parametrize("column,nhits", [("6.11", (12, [])), ("6.12", (0, [6, 6]))])
def test_trace_event_nhit_is_per_cpu_from_6_12(column, nhits):
    """trace_uprobe->nhit: one shared counter, then one per CPU (summed in uprobe_profile)."""
    col = parse_column(column)
    m = Machine.from_bytes(
        producers_elf(),
        "/guest/bench_producers",
        argv=["bench_producers", str(SCENARIOS["uprobe-nop"].loop), "6", "2"],
        kernel=col.kernel,
        cpus=2,
    )
    attach(m, SCENARIOS["uprobe-nop"], "program")
    (ev,) = m.kernel.trace.events
    m.run(max_insns=None, timeout=60)
    assert ((ev.nhit, ev.nhits), ev.hits, m.kernel.trace.uprobe_profile().split()[-1]) == (nhits, 12, "12")
