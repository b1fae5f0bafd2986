"""The synchronization on the uprobes hot paths, as each kernel version has it.

One probe hit is the same work on every version; what changed from 6.9 to 7.3 is which
locks, reference counts and RCU read sides the hit takes, and so which cache lines all
CPUs hitting one probe share.  This class owns the kernel-wide primitives
(``uprobes_treelock`` or ``uprobes_seqcount``, ``uprobes_srcu``, the RCU Tasks Trace
read side, ``uretprobes_srcu``) and the per-object ones (``mm->mmap_lock`` and
``mm->mm_lock_seq``, ``uprobe->ref`` and ``uprobe->register_rwsem``, the XOL area's
bitmap and ``slot_count``, ``sighand->siglock``, the trace_uprobe's filter rwlock and
``nhit``, the per-CPU args buffer mutex), and its methods are called where the kernel
calls the primitives, under the kernel's names:

=========================  ===================================================
``handle_swbp_enter/exit``  the lifetime's read side around the hit
``find_active_uprobe``      ``mmap_read_lock`` or ``mmap_lock_speculate_*``,
                            then ``find_uprobe``: the treelock / seqcount, and
                            ``get_uprobe`` where the lifetime is a refcount
``handler_chain_enter/exit``  ``register_rwsem`` (<= 6.11)
``uprobe_dispatcher``       ``uprobe_perf_filter``, ``nhit``, the args buffer
``prepare_uretprobe``       the return instance's hold on the uprobe
``handle_trampoline*``      the return side
``pre_ssout`` /
``handle_singlestep``       the XOL slot atomics, the refcount, ``siglock``
``uprobe_unregister_sync``  the grace periods an unregistration waits for
=========================  ===================================================

Each profile switch (``treelock``, ``uprobe_lifetime``, ``consumers_lock``,
``uretprobe_lifetime``, ``vma_lookup``, ``nhit``, ``perf_filter``, ``sstep_siglock``)
picks one version's code; the commits are beside the switches in
:mod:`kernel_model.profiles`.  Accesses go to ``log`` (an
:class:`~kernel_model.kernel.locking.access_log.AccessLog`) when one is attached; the
hot paths call in only then, so a machine that does not record pays nothing.  The
grace periods of unregistration are counted always.
"""

from __future__ import annotations

from kernel_model.include.linux.percpu_counter import PerCpuCounter, SharedCounter
from kernel_model.include.linux.refcount import Refcount
from kernel_model.include.linux.seqlock import SeqCount
from kernel_model.kernel.locking.access_log import ATOMIC, READ
from kernel_model.kernel.locking.percpu_rwsem import PercpuRwSemaphore
from kernel_model.kernel.locking.rwlock import RwLock
from kernel_model.kernel.locking.rwsem import RwSemaphore
from kernel_model.kernel.locking.spinlock import SpinLock
from kernel_model.kernel.rcu.srcutree import SrcuStruct
from kernel_model.kernel.rcu.tasks_trace import RcuTasksTrace


class _UprobeLocks:
    """The first cache line of ``struct uprobe``: ``rb_node``, ``ref`` and
    ``register_rwsem`` sit together in it, so they are one line here."""

    __slots__ = ("ref", "register_rwsem", "inst")

    def __init__(self, inst: int):
        self.inst = inst
        self.ref = Refcount("uprobe", inst)
        self.register_rwsem = RwSemaphore("uprobe", inst)


class _MmLocks:
    __slots__ = ("mmap_lock", "mm_lock_seq", "inst")

    def __init__(self, inst: int):
        self.inst = inst
        self.mmap_lock = RwSemaphore("mm.mmap_lock", inst)
        self.mm_lock_seq = SeqCount("mm.mm_lock_seq", inst)


class UprobesSync:
    def __init__(self, profile, log=None):
        self.profile = profile
        self.log = log
        p = profile
        self.treelock = {
            "spinlock": SpinLock("uprobes_treelock"),
            "rwlock": RwLock("uprobes_treelock"),
            "percpu_rwsem": PercpuRwSemaphore("uprobes_treelock"),
        }.get(p.treelock)
        self.uprobes_seqcount = SeqCount("uprobes_seqcount")
        self.uprobes_srcu = SrcuStruct("uprobes_srcu", "lite" if p.uprobe_lifetime == "srcu_lite" else "srcu")
        self.rcu_tasks_trace = RcuTasksTrace()
        self.uretprobes_srcu = SrcuStruct(
            "uretprobes_srcu", "fast" if p.uretprobe_lifetime == "srcu_fast_updown" else "srcu"
        )
        self._lifetime = p.uprobe_lifetime
        self._uprobes: dict[int, tuple] = {}  # id(uprobe) -> (uprobe, _UprobeLocks)
        self._mms: dict[int, tuple] = {}  # id(mm owner) -> (process, _MmLocks)
        self._sighands: dict[int, tuple] = {}
        self._counters: dict[int, tuple] = {}  # id(trace event) -> (event, nhit counter, filter rwlock)

    # -- per-object primitives, made when first used ------------------------------
    def uprobe_locks(self, uprobe) -> _UprobeLocks:
        got = self._uprobes.get(id(uprobe))
        if got is None:
            got = self._uprobes[id(uprobe)] = (uprobe, _UprobeLocks(len(self._uprobes) + 1))
        return got[1]

    def mm_locks(self, proc) -> _MmLocks:
        mm = proc.mm_owner or proc
        got = self._mms.get(id(mm))
        if got is None:
            got = self._mms[id(mm)] = (mm, _MmLocks(mm.pid))
        return got[1]

    def siglock(self, proc) -> SpinLock:
        sighand = proc.sighand
        got = self._sighands.get(id(sighand))
        if got is None:
            got = self._sighands[id(sighand)] = (sighand, SpinLock("sighand.siglock", proc.pid))
        return got[1]

    def nhit(self, event):
        """``trace_uprobe->nhit`` (or ``nhits``) of a trace event."""
        return self._trace_uprobe(event)[1]

    def _trace_uprobe(self, event):
        got = self._counters.get(id(event))
        if got is None:
            name = event.name
            counter = (
                PerCpuCounter("trace_uprobe.nhits", name)
                if self.profile.nhit == "percpu"
                else SharedCounter("trace_uprobe", name)
            )
            got = self._counters[id(event)] = (event, counter, RwLock("trace_uprobe", name))
        return got

    # -- the int3 path ---------------------------------------------------------------
    def handle_swbp_enter(self, task) -> int | None:
        """A trigger begins; the entry lifetime's read side: ``srcu_read_lock(&uprobes_srcu)``
        (6.12) or ``rcu_read_lock_trace()`` (6.13+).  Returns the SRCU index."""
        log, cpu = self.log, task.cpu
        log.begin(cpu)
        lifetime = self._lifetime
        if lifetime == "rcu_tasks_trace":
            self.rcu_tasks_trace.read_lock(log, cpu, task.tid)
        elif lifetime != "refcount":
            return self.uprobes_srcu.read_lock(log, cpu)
        return None

    def find_active_uprobe(self, task, proc, uprobe) -> None:
        """``find_active_uprobe`` (``_rcu`` / ``_speculative`` in later versions): the
        VMA under ``mmap_read_lock`` or the ``mm_lock_seq`` speculation, then
        ``find_uprobe`` under the treelock (taking a reference where the lifetime is a
        refcount) or ``find_uprobe_rcu`` under ``uprobes_seqcount``."""
        log, cpu = self.log, task.cpu
        mm = self.mm_locks(proc)
        speculative = self.profile.vma_lookup == "speculative"
        if speculative:
            seq = mm.mm_lock_seq.read_begin(log, cpu)  # mmap_lock_speculate_try_begin
        else:
            mm.mmap_lock.down_read(log, cpu)  # mmap_read_lock
        if uprobe is not None:
            self._find_uprobe(log, cpu, uprobe)
        if speculative:
            mm.mm_lock_seq.read_retry(log, cpu, seq)  # mmap_lock_speculate_retry
        else:
            mm.mmap_lock.up_read(log, cpu)  # mmap_read_unlock

    def _find_uprobe(self, log, cpu: int, uprobe) -> None:
        locks = self.uprobe_locks(uprobe)
        kind = self.profile.treelock
        if kind == "seqcount":
            self.uprobes_seqcount.read_begin(log, cpu)  # find_uprobe_rcu
            log.add(cpu, "uprobe", locks.inst, READ)  # rb_find_rcu: the node
            return
        lock = self.treelock
        if kind == "spinlock":
            lock.lock(log, cpu)
        elif kind == "rwlock":
            lock.read_lock(log, cpu)
        else:
            lock.down_read(log, cpu)
        log.add(cpu, "uprobe", locks.inst, READ)  # __find_uprobe: the node
        if self._lifetime == "refcount":
            locks.ref.inc(log, cpu)  # get_uprobe
        if kind == "spinlock":
            lock.unlock(log, cpu)
        elif kind == "rwlock":
            lock.read_unlock(log, cpu)
        else:
            lock.up_read(log, cpu)

    def handler_chain_enter(self, task, uprobe) -> None:
        if self.profile.consumers_lock == "register_rwsem":
            self.uprobe_locks(uprobe).register_rwsem.down_read(self.log, task.cpu)

    def handler_chain_exit(self, task, uprobe) -> None:
        if self.profile.consumers_lock == "register_rwsem":
            self.uprobe_locks(uprobe).register_rwsem.up_read(self.log, task.cpu)

    def handle_swbp_exit(self, task, uprobe, idx: int | None) -> None:
        """The end of ``handle_swbp`` (emulated, or after ``pre_ssout``): ``put_uprobe``
        or the read side's unlock."""
        log, cpu = self.log, task.cpu
        lifetime = self._lifetime
        if lifetime == "refcount":
            if uprobe is not None:
                self.uprobe_locks(uprobe).ref.dec_and_test(log, cpu)
        elif lifetime == "rcu_tasks_trace":
            self.rcu_tasks_trace.read_unlock(log, cpu, task.tid)
        else:
            self.uprobes_srcu.read_unlock(log, cpu, idx)

    # -- the consumer: trace_uprobe ------------------------------------------------------
    def uprobe_dispatcher(self, task, event, fills_buffer: bool, is_return: bool = False) -> None:
        """``uprobe_dispatcher``: ``nhit``, ``uprobe_perf_filter``, the per-CPU args
        buffer's mutex (``uprobe_buffer_get``/``put``) when it is filled.  A return
        probe's trace_uprobe has this entry handler too (it bumps ``nhit`` and checks
        the filter at the entry), then ``uretprobe_dispatcher`` fills the buffer again
        at the return; the model's return event runs once, at the return, so both
        sides are recorded there."""
        log, cpu = self.log, task.cpu
        _, nhit, filter_lock = self._trace_uprobe(event)
        nhit.inc(log, cpu)
        if self.profile.perf_filter == "rwlock":
            filter_lock.read_lock(log, cpu)
            filter_lock.read_unlock(log, cpu)
        for _ in range(2 if is_return and fills_buffer else 1 if fills_buffer else 0):
            log.add(cpu, "uprobe_cpu_buffer.mutex", cpu, ATOMIC)  # mutex_lock
            log.add(cpu, "uprobe_cpu_buffer.mutex", cpu, ATOMIC)  # mutex_unlock

    # -- return probes ---------------------------------------------------------------------
    def prepare_uretprobe(self, task, uprobe) -> int | None:
        """The return instance's hold on its uprobe: ``get_uprobe`` (<= 6.12) or a
        lease on ``uretprobes_srcu`` (``hprobe_init_leased``, 6.13+)."""
        log, cpu = self.log, task.cpu
        if self.profile.uretprobe_lifetime == "refcount":
            self.uprobe_locks(uprobe).ref.inc(log, cpu)
            return None
        return self.uretprobes_srcu.read_lock(log, cpu)

    def handle_trampoline_enter(self, task) -> int | None:
        """``handle_trampoline``: the consumers are walked under the entry lifetime's
        read side from 6.12 on (a refcount-held return instance needed none)."""
        log, cpu = self.log, task.cpu
        lifetime = self._lifetime
        if lifetime == "refcount":
            return None
        if lifetime == "rcu_tasks_trace":
            self.rcu_tasks_trace.read_lock(log, cpu, task.tid)
            return None
        return self.uprobes_srcu.read_lock(log, cpu)

    def handle_uretprobe_chain(self, task, uprobe) -> None:
        if self.profile.consumers_lock == "register_rwsem":
            rwsem = self.uprobe_locks(uprobe).register_rwsem
            rwsem.down_read(self.log, task.cpu)
            rwsem.up_read(self.log, task.cpu)

    def free_ret_instance(self, task, uprobe, lease: int | None) -> None:
        """``put_uprobe`` (<= 6.12) or ``hprobe_finalize``'s ``__srcu_read_unlock``."""
        log, cpu = self.log, task.cpu
        if self.profile.uretprobe_lifetime == "refcount":
            self.uprobe_locks(uprobe).ref.dec_and_test(log, cpu)
        elif lease is not None:
            self.uretprobes_srcu.read_unlock(log, cpu, lease)

    def handle_trampoline_exit(self, task, idx: int | None) -> None:
        log, cpu = self.log, task.cpu
        lifetime = self._lifetime
        if lifetime == "rcu_tasks_trace":
            self.rcu_tasks_trace.read_unlock(log, cpu, task.tid)
        elif lifetime != "refcount":
            self.uprobes_srcu.read_unlock(log, cpu, idx)

    # -- single-stepping out of line --------------------------------------------------------
    def pre_ssout(self, task, proc, uprobe) -> None:
        """``pre_ssout``: ``try_get_uprobe`` (6.12+: the hit itself holds none), then
        ``xol_take_insn_slot``: ``test_and_set_bit`` on the area's bitmap and
        ``atomic_inc(&area->slot_count)``."""
        log, cpu = self.log, task.cpu
        if self._lifetime != "refcount":
            self.uprobe_locks(uprobe).ref.inc(log, cpu)
        inst = (proc.mm_owner or proc).pid
        log.add(cpu, "xol_area.bitmap", inst, ATOMIC)
        log.add(cpu, "xol_area", inst, ATOMIC)

    def handle_singlestep(self, task, proc, uprobe) -> None:
        """``handle_singlestep``: ``put_uprobe``, ``xol_free_insn_slot`` (``clear_bit``,
        ``atomic_dec(&area->slot_count)``, ``waitqueue_active``), and until 6.15
        ``siglock`` around ``recalc_sigpending``."""
        log, cpu = self.log, task.cpu
        if uprobe is not None:
            self.uprobe_locks(uprobe).ref.dec_and_test(log, cpu)
        inst = (proc.mm_owner or proc).pid
        log.add(cpu, "xol_area.bitmap", inst, ATOMIC)
        log.add(cpu, "xol_area", inst, ATOMIC)
        log.add(cpu, "xol_area", inst, READ)
        if self.profile.sstep_siglock:
            lock = self.siglock(proc)
            lock.lock(log, cpu)
            lock.unlock(log, cpu)

    # -- registration --------------------------------------------------------------------------
    def tree_changed(self) -> None:
        """``insert_uprobe`` / ``delete_uprobe``: the writer side of the tree's
        protection (``write_seqcount_begin/end`` from 6.12 on)."""
        if self.profile.treelock == "seqcount":
            self.uprobes_seqcount.write_begin()
            self.uprobes_seqcount.write_end()

    def uprobe_unregister_sync(self) -> int:
        """``uprobe_unregister_sync``: the grace periods an unregistration waits for
        before its consumer may go away - none while a refcount kept uprobes alive
        (<= 6.11), ``synchronize_srcu(&uprobes_srcu)`` in 6.12,
        ``synchronize_rcu_tasks_trace()`` and ``synchronize_srcu(&uretprobes_srcu)``
        from 6.13.  Returns how many were waited for."""
        lifetime = self._lifetime
        if lifetime == "refcount":
            return 0
        n = 0
        if lifetime == "rcu_tasks_trace":
            self.rcu_tasks_trace.synchronize()
            n += 1
        else:
            self.uprobes_srcu.synchronize()
            n += 1
        if self.profile.uretprobe_lifetime != "refcount":
            self.uretprobes_srcu.synchronize()
            n += 1
        return n

    def grace_periods(self) -> dict:
        return {
            "uprobes_srcu": self.uprobes_srcu.grace_periods,
            "rcu_tasks_trace": self.rcu_tasks_trace.grace_periods,
            "uretprobes_srcu": self.uretprobes_srcu.grace_periods,
        }
