"""The synchronization primitives of the hot paths: each keeps the kernel's state and
records exactly the shared-memory accesses the kernel's code makes."""

import pytest

from kernel_model.include.linux.percpu_counter import PerCpuCounter, SharedCounter
from kernel_model.include.linux.refcount import Refcount
from kernel_model.include.linux.seqlock import SeqCount
from kernel_model.kernel.locking.access_log import ATOMIC, LOCK, MB, READ, UNLOCK, WRITE, AccessLog
from kernel_model.kernel.locking.percpu_rwsem import PercpuRwSemaphore
from kernel_model.kernel.locking.rwlock import RwLock
from kernel_model.kernel.locking.rwsem import RwSemaphore
from kernel_model.kernel.locking.spinlock import SpinLock
from kernel_model.kernel.rcu.srcutree import SrcuStruct
from kernel_model.kernel.rcu.tasks_trace import RcuTasksTrace


def _records(log, cpu=0):
    return [(a.obj, a.inst, a.kind) for a in log.streams.get(cpu, [])]


def test_spinlock_acquire_is_an_exclusive_lock_and_release_a_store():
    log, lock = AccessLog(), SpinLock("uprobes_treelock")
    lock.lock(log, 3)
    assert lock.owner == 3
    lock.unlock(log, 3)
    assert (lock.owner, _records(log, 3)) == (
        None,
        [("uprobes_treelock", None, LOCK), ("uprobes_treelock", None, UNLOCK)],
    )


def test_spinlock_taken_twice_is_a_modeling_error():
    lock = SpinLock("l")
    lock.lock(None, 0)
    with pytest.raises(RuntimeError, match="while CPU 0 holds it"):
        lock.lock(None, 1)


@pytest.mark.parametrize(
    "cls,enter,leave", [(RwLock, "read_lock", "read_unlock"), (RwSemaphore, "down_read", "up_read")]
)
def test_reader_sections_are_two_atomics_on_the_lock_line(cls, enter, leave):
    log, lock = AccessLog(), cls("mm.mmap_lock", 7)
    getattr(lock, enter)(log, 1)
    getattr(lock, enter)(log, 2)
    assert lock.readers == 2
    getattr(lock, leave)(log, 1)
    getattr(lock, leave)(log, 2)
    assert (lock.readers, _records(log, 1)) == (0, [("mm.mmap_lock", 7, ATOMIC)] * 2)


def test_reader_unlock_without_reader_is_an_error():
    with pytest.raises(RuntimeError, match="without a reader"):
        RwSemaphore("s").up_read(None, 0)


def test_percpu_rwsem_readers_write_only_their_own_cpu_line():
    log, sem = AccessLog(), PercpuRwSemaphore("uprobes_treelock")
    sem.down_read(log, 4)
    sem.up_read(log, 4)
    assert _records(log, 4) == [
        ("uprobes_treelock.rss", None, READ),
        ("uprobes_treelock.read_count", 4, WRITE),
        ("uprobes_treelock.read_count", 4, WRITE),
    ]
    assert sem.readers() == 0


def test_seqcount_readers_only_load_and_see_a_writer():
    log, seq = AccessLog(), SeqCount("uprobes_seqcount")
    start = seq.read_begin(log, 0)
    assert not seq.read_retry(log, 0, start)
    seq.write_begin()
    seq.write_end()
    assert seq.read_retry(log, 0, start), "a write between begin and retry must force a retry"
    assert {k for _, _, k in _records(log)} == {READ}


def test_refcount_get_put_are_atomics_and_underflow_is_an_error():
    log, ref = AccessLog(), Refcount("uprobe", 1)
    ref.inc(log, 0)
    assert not ref.dec_and_test(log, 0)
    assert ref.dec_and_test(log, 0), "the last put must report zero"
    assert _records(log) == [("uprobe", 1, ATOMIC)] * 3
    with pytest.raises(RuntimeError, match="underflow"):
        ref.dec_and_test(None, 0)


def test_shared_counter_is_one_line_percpu_counter_one_line_per_cpu():
    log = AccessLog()
    shared, percpu = SharedCounter("trace_uprobe", "ev"), PerCpuCounter("trace_uprobe.nhits", "ev")
    for cpu in (0, 1, 1):
        shared.inc(log, cpu)
        percpu.inc(log, cpu)
    lines = {(a.obj, a.inst) for s in log.streams.values() for a in s}
    assert (shared.sum(), percpu.sum(), percpu.values) == (3, 3, {0: 1, 1: 2})
    assert lines == {("trace_uprobe", "ev"), ("trace_uprobe.nhits", ("ev", 0)), ("trace_uprobe.nhits", ("ev", 1))}


@pytest.mark.parametrize("flavor,barriers", [("srcu", 2), ("lite", 0), ("fast", 0)])
def test_srcu_read_side_barriers_by_flavor(flavor, barriers):
    log, ssp = AccessLog(), SrcuStruct("uprobes_srcu", flavor)
    idx = ssp.read_lock(log, 2)
    ssp.read_unlock(log, 2, idx)
    kinds = [k for _, _, k in _records(log, 2)]
    assert kinds.count(MB) == barriers, kinds
    assert [r for r in _records(log, 2) if r[2] == WRITE] == [("uprobes_srcu.sda", 2, WRITE)] * 2


def test_srcu_counts_readers_per_index_and_synchronize_flips_it():
    ssp = SrcuStruct("uretprobes_srcu")
    idx = ssp.read_lock(None, 0)
    assert ssp.readers_active(idx) == 1
    ssp.synchronize()
    assert (ssp.idx, ssp.grace_periods) == (idx ^ 1, 1)
    new = ssp.read_lock(None, 1)
    ssp.read_unlock(None, 0, idx)
    assert (ssp.readers_active(idx), ssp.readers_active(new)) == (0, 1)


def test_srcu_unknown_flavor_is_refused():
    with pytest.raises(ValueError, match="flavor"):
        SrcuStruct("s", "classic")


def test_rcu_tasks_trace_read_side_touches_only_the_task():
    log, rcu = AccessLog(), RcuTasksTrace()
    rcu.read_lock(log, 5, 1234)
    assert rcu.readers() == 1
    rcu.read_unlock(log, 5, 1234)
    assert (rcu.readers(), _records(log, 5)) == (0, [("task.trc_reader_nesting", 1234, WRITE)] * 2)
    with pytest.raises(RuntimeError, match="outside a read section"):
        rcu.read_unlock(None, 5, 1234)


def test_access_log_cuts_triggers_at_begin_and_counts():
    log = AccessLog()
    log.add(0, "before", None, READ)
    for _ in range(2):
        log.begin(0)
        log.add(0, "mm.mmap_lock", 1, ATOMIC)
    assert [len(t) for t in log.triggers(0)] == [1, 1]
    assert log.counts()[("mm.mmap_lock", ATOMIC)] == 2
