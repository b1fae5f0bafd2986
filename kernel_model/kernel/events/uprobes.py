"""The arch-independent uprobes core (kernel/events/uprobes.c).

The objects (:class:`Uprobe`, :class:`UprobeConsumer`, :class:`MmUprobes`,
:class:`UprobeTask`, :class:`XolArea`, the ``UPROBE_HANDLER_*`` codes) are defined in
``uprobes_types`` (as include/linux/uprobes.h) and re-exported here.  Entry points keep
the kernel's names: ``uprobe_register`` / ``uprobe_unregister``,
``uprobe_pre_sstep_notifier``, ``handle_swbp`` (which also recognises the int3 of the
uretprobe trampoline: slot 0 of the mm's XOL area), ``handler_chain``,
``pre_ssout``, and ``handle_debug`` (``uprobe_post_sstep_notifier`` +
``handle_singlestep``).  The x86 specifics (the per-class xol ops) are in
``kernel_model.arch.x86.kernel.uprobes``
and ``kernel_model.arch.x86.lib.insn``; return probes in ``uretprobes``.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from kernel_model.arch.x86.kernel import uprobes as arch
from kernel_model.errors import RegistrationError
from kernel_model.kernel.events.uprobes_fast import install_swbp_fast_path, swbp_fast_path_qualifies
from kernel_model.kernel.events.uprobes_sync import UprobesSync
from kernel_model.kernel.events.uprobes_types import (
    UINSNS_PER_PAGE,
    UPROBE_HANDLER_IGNORE,
    UPROBE_HANDLER_REMOVE,
    UTASK_RUNNING,
    UTASK_SSTEP,
    UTASK_SSTEP_ACK,
    UTASK_SSTEP_TRAPPED,
    MmUprobes,
    Uprobe,
    UprobeConsumer,
    UprobeContext,
    UprobeTask,
    XolArea,
)
from kernel_model.kernel.events.uretprobes import Uretprobes
from kernel_model.kernel.signals import SIGNALS
from kernel_model.mm.mm_types import PAGE_SIZE, PROT_EXEC, PROT_WRITE, TASK_SIZE, GuestFault, MappedFile
from kernel_model.trace import events as ev

if TYPE_CHECKING:
    from kernel_model.arch.x86.lib.insn import ArchUprobe
    from kernel_model.trace.trace_uprobe import TraceEvents

SIGTRAP, SIGILL = SIGNALS["SIGTRAP"], SIGNALS["SIGILL"]


# ----------------------------------------------------------------------------- core


class Uprobes:
    """The uprobes subsystem of one machine (kernel-wide state: the uprobes tree)."""

    trace: TraceEvents  # the tracefs events over it: set by the kernel, made after it

    def __init__(self, kernel):
        self.kernel = kernel
        self.machine = kernel.machine
        self.events = kernel.machine.events  # the machine's typed event stream (kernel_model.trace.events)
        self.profile = kernel.profile
        self.tree: dict = {}  # (file, offset) -> Uprobe
        self.tree_gen = 0  # bumped by every insert and erase
        self._rc_exact = self.profile.handler_chain_rc == "exact"  # (profiles are frozen)
        self._ids = itertools.count(1)
        self.uret = Uretprobes(self)
        self.xol_slots = UINSNS_PER_PAGE  # slots per XOL page (tests may shrink it)
        self.delayed: list = []  # delayed_uprobe_list: [(uprobe, process)]
        # the hot paths' locks, refcounts and RCU read sides; ``sync.log`` is the
        # machine's access log while it records (``Machine.record_accesses``), else None
        self.sync = UprobesSync(self.profile)
        # hits take the chains and the trampoline specialised for the common case
        # (specialize_chain, Uretprobes.handle_trampoline); False: always the general
        # ones (the transparency tests compare the two)
        self.specialized = True

    # -- helpers -----------------------------------------------------------------
    @property
    def counters(self):
        return self.machine.counters

    def mm(self, process) -> MmUprobes:
        if process.mm_uprobes is None:
            process.mm_uprobes = MmUprobes()
        return process.mm_uprobes

    def utask(self, task) -> UprobeTask:
        if task.utask is None:
            task.utask = UprobeTask()
        return task.utask

    # -- which mappings a probe is in ------------------------------------------------
    @staticmethod
    def valid_vma(vma, is_register: bool) -> bool:
        """``valid_vma()``: a private file mapping with VM_MAYEXEC - not VM_EXEC, so a
        read-only (or mprotect'ed non-executable) private mapping of the file
        qualifies; no VM_MAYSHARE; and, to install, no VM_WRITE."""
        if vma.file is None or vma.special or vma.shared or not vma.mayprot & PROT_EXEC:
            return False
        return not (is_register and vma.prot & PROT_WRITE)

    def vaddr_of(self, process, file: MappedFile, offset: int) -> list[int]:
        """Every probe address of (file, offset) in ``process`` (valid_vma(false));
        VM_WRITE only matters when installing: :meth:`register_for_each_vma` checks it."""
        return [vma.vaddr_of(offset) for vma in self.probe_vmas(process, file, offset)]

    def probe_vmas(self, process, file: MappedFile, offset: int) -> list:
        """The mappings of ``file`` in ``process`` that hold ``offset`` and pass
        valid_vma(false): the i_mmap interval walk of ``build_map_info``."""
        return [
            vma
            for vma in process.mem.file_vmas(file)
            if vma.pgoff <= offset < vma.pgoff + vma.end - vma.start and self.valid_vma(vma, False)
        ]

    # -- mappings come and go ----------------------------------------------------------
    def build_probe_list(self, vma, start: int, end: int) -> list[Uprobe]:
        """``build_probe_list``: the uprobes of the vma's inode at file offsets inside
        [start, end), in offset order (the rb-tree's)."""
        lo = vma.offset_of(start)
        hi = lo + (end - start)
        return sorted(
            (u for (f, off), u in self.tree.items() if f is vma.file and lo <= off < hi), key=lambda u: u.offset
        )

    def uprobe_mmap(self, proc, vma) -> None:
        """``uprobe_mmap``, called when a file VMA appears (mmap_region, the loader's
        elf_map) or grows in place (mremap: vma_expand -> vma_complete; a moved VMA keeps
        its pages, and mprotect's splits reach vma_complete with the old, writable
        flags, so neither installs anything): a writable private mapping may
        hold a queued USDT semaphore (``delayed_ref_ctr_inc``); an installable one gets
        the breakpoints of its inode's uprobes whose consumers want this mm.  Errors
        are ignored, as the kernel's callers cannot handle them."""
        if not self.tree:
            return  # no_uprobe_events()
        mm = proc.mm_uprobes
        if vma.file is not None and vma.prot & PROT_WRITE and not vma.shared and mm is not None and mm.has_uprobes:
            self.delayed_ref_ctr_inc(proc, vma)
        if not self.valid_vma(vma, True):
            return
        for uprobe in self.build_probe_list(vma, vma.start, vma.end):
            if self.filter_chain(uprobe, proc):
                try:
                    self.install_breakpoint(proc, uprobe, vma.vaddr_of(uprobe.offset))
                except RegistrationError:
                    pass

    def uprobe_munmap(self, proc, vma, start: int, end: int) -> None:
        """``uprobe_munmap``: unmapping probed pages only marks the mm for a recount
        (MMF_RECALC_UPROBES); the breakpoints go with the pages."""
        mm = proc.mm_uprobes
        if not self.tree or not self.valid_vma(vma, False) or mm is None or not mm.has_uprobes or mm.recalc:
            return
        if self.build_probe_list(vma, max(start, vma.start), min(end, vma.end)):
            mm.recalc = True

    # -- USDT semaphores not mapped yet --------------------------------------------------
    def update_ref_ctr(self, proc, uprobe: Uprobe, d: int) -> bool:
        """``update_ref_ctr``: the semaphore in the file's writable private mapping, or,
        when the process has none yet, a ``delayed_uprobe`` entry to increment it once
        that mapping appears; a decrement forgets the entry."""
        if not uprobe.ref_ctr_offset:
            return True
        ok = True
        if self.kernel.find_ref_ctr(proc, uprobe) is not None:
            ok = self.kernel.ref_ctr_update(proc, uprobe, d)
            if d > 0:
                return ok
        mm = getattr(proc, "mm_owner", None) or proc  # entries are per mm
        if d > 0:
            self.delayed_uprobe_add(uprobe, mm)
        else:
            self.delayed_uprobe_remove(uprobe, mm)
        return ok

    def delayed_uprobe_add(self, uprobe: Uprobe, proc) -> None:
        if not any(u is uprobe and p is proc for u, p in self.delayed):
            self.delayed.insert(0, (uprobe, proc))  # list_add: at the head

    def delayed_uprobe_remove(self, uprobe: Uprobe | None, proc) -> None:
        """Entries of ``uprobe`` (any if None) in ``proc`` (any if None)."""
        if uprobe is None and proc is None:
            return
        self.delayed = [
            (u, p) for u, p in self.delayed if not ((uprobe is None or u is uprobe) and (proc is None or p is proc))
        ]

    def delayed_ref_ctr_inc(self, proc, vma) -> None:
        """``delayed_ref_ctr_inc``: a new writable mapping of the file holding a
        queued semaphore increments it (once) and drops the entry."""
        mm = getattr(proc, "mm_owner", None) or proc
        for entry in list(self.delayed):
            uprobe, p = entry
            if p is not mm or not self._valid_ref_ctr_vma(uprobe, vma):
                continue
            self.kernel.ref_ctr_update(proc, uprobe, +1)
            self.delayed.remove(entry)

    @staticmethod
    def _valid_ref_ctr_vma(uprobe: Uprobe, vma) -> bool:
        return (
            bool(uprobe.ref_ctr_offset)
            and vma.file is uprobe.file
            and vma.prot & PROT_WRITE
            and not vma.shared
            and vma.start <= vma.vaddr_of(uprobe.ref_ctr_offset) < vma.end
        )

    # -- register / unregister -----------------------------------------------------
    def register(
        self,
        target: tuple,
        handler=None,
        ret_handler=None,
        filter=None,
        *,
        ref_ctr_offset: int = 0,
        name: str = "",
        is_trace: bool = False,
    ) -> UprobeConsumer:
        """A consumer made of the handlers, registered on ``target = (file, offset)``:
        ``file`` is a mapped file object, or the exact path of one the main process
        maps.  Symbols and other spellings are the tools' (``machine.uprobes``)."""
        file, offset = target
        if isinstance(file, str):
            path = file
            file = next((f for f in self.machine.process.mapped_files if f.path == path), None)
            if file is None:
                raise RegistrationError("ENOENT", f"{path} is not mapped")
        return self.uprobe_register(
            file, offset, UprobeConsumer(handler, ret_handler, filter, name=name, is_trace=is_trace), ref_ctr_offset
        )

    def uprobe_register(
        self, file: MappedFile, offset: int, uc: UprobeConsumer, ref_ctr_offset: int = 0
    ) -> UprobeConsumer:
        """``uprobe_register``: ``uc`` on (file, offset) - the core only ever sees the
        inode and the offset (symbols and spec spellings are resolved by the tools:
        ``emu.probes``); returns the consumer (pass it to :meth:`unregister`)."""
        if uc.handler is None and uc.ret_handler is None:
            raise RegistrationError("EINVAL", "a consumer needs a handler or a ret_handler")
        if offset > file.size or offset < 0:
            raise RegistrationError(
                "EINVAL", f"offset {offset:#x} is beyond the end of {file.path} ({file.size:#x} bytes)"
            )
        if ref_ctr_offset % 2:
            raise RegistrationError("EINVAL", "ref_ctr_offset must be 2-byte aligned")
        uprobe = self.tree.get((file, offset))
        if uprobe is None:
            uprobe = Uprobe(file, offset, ref_ctr_offset)
            self.tree[(file, offset)] = uprobe
            self.tree_gen += 1
            self.sync.tree_changed()  # insert_uprobe
        elif ref_ctr_offset and uprobe.ref_ctr_offset != ref_ctr_offset:
            raise RegistrationError("EINVAL", "ref_ctr_offset mismatch with the existing uprobe")
        uc.id = next(self._ids)
        uc.uprobe = uprobe
        uprobe.consumers.insert(0, uc)  # consumer_add: list head
        uprobe.chain = uprobe.ret_chain = None
        try:
            self.register_for_each_vma(uprobe, uc)
        except RegistrationError:
            self._consumer_del(uprobe, uc)
            self.register_for_each_vma(uprobe, None)
            raise
        return uc

    def unregister(self, uc: UprobeConsumer) -> None:
        """``uprobe_unregister_nosync`` + ``_sync``: the consumer is gone at once;
        pending return instances still restore their return addresses."""
        uprobe = uc.uprobe
        if uprobe is None or uc not in uprobe.consumers:
            raise RegistrationError("ENOENT", "consumer is not registered")
        self.uprobe_unregister_nosync(uc)
        self.sync.uprobe_unregister_sync()

    def unregister_batch(self, ucs) -> None:
        """Many consumers at once, as a ``uprobe_multi`` link's release does: each
        ``uprobe_unregister_nosync``, then one ``uprobe_unregister_sync`` (one set of
        grace periods for the whole batch)."""
        ucs = list(ucs)
        for uc in ucs:
            if uc.uprobe is None or uc not in uc.uprobe.consumers:
                raise RegistrationError("ENOENT", "consumer is not registered")
        for uc in ucs:
            self.uprobe_unregister_nosync(uc)
        if ucs:
            self.sync.uprobe_unregister_sync()

    def uprobe_unregister_nosync(self, uc: UprobeConsumer) -> None:
        uprobe: Uprobe = uc.uprobe  # type: ignore[assignment]  # the callers found it registered
        self._consumer_del(uprobe, uc)
        self.register_for_each_vma(uprobe, None)

    def _consumer_del(self, uprobe: Uprobe, uc: UprobeConsumer) -> None:
        if uc in uprobe.consumers:
            uprobe.consumers.remove(uc)
            uprobe.chain = uprobe.ret_chain = None
        if not uprobe.consumers and self.tree.get(uprobe.key) is uprobe:
            del self.tree[uprobe.key]
            self.tree_gen += 1
            self.sync.tree_changed()  # delete_uprobe
            self.delayed_uprobe_remove(uprobe, None)  # uprobe_free_deferred

    def register_for_each_vma(self, uprobe: Uprobe, new: UprobeConsumer | None) -> None:
        """Install for a new consumer where its filter wants the mm; on unregister remove
        where no remaining consumer wants it."""
        file, offset = uprobe.file, uprobe.offset
        for proc in self._processes():
            for vma in self.probe_vmas(proc, file, offset):
                vaddr = vma.vaddr_of(offset)
                if new is not None:
                    if vma.prot & PROT_WRITE:
                        continue  # valid_vma(is_register=true)
                    if new.filter is not None and not new.filter(proc):
                        continue
                    self.install_breakpoint(proc, uprobe, vaddr)
                elif self.mm(proc).has_uprobes and not self.filter_chain(uprobe, proc):
                    self.remove_breakpoint(proc, uprobe, vaddr)

    def _processes(self):
        """Every live address space (vfork children borrow their parent's).  The main
        process's stays inspectable after it exits, so probes still apply to it."""
        main = self.machine.main_process
        return [
            p
            for p in self.machine.processes
            if getattr(p, "mm_owner", None) is None and (p.exit_result is None or p is main)
        ]

    @staticmethod
    def filter_chain(uprobe: Uprobe, proc) -> bool:
        """Does any consumer want this mm?  Filters see the process owning the address
        space (a vfork child borrows its parent's mm, as the kernel's filter(mm) sees)."""
        owner = getattr(proc, "mm_owner", None) or proc
        return any(c.filter is None or c.filter(owner) for c in uprobe.consumers)

    def prepare_uprobe(self, uprobe: Uprobe, vaddr: int) -> None:
        """First-time analysis from the FILE bytes (UPROBE_COPY_INSN)."""
        if uprobe.arch is not None:
            return
        if uprobe.offset >= uprobe.file.size:
            raise RegistrationError("EIO", f"nothing to read at offset {uprobe.offset:#x}")
        insn = uprobe.file.read(uprobe.offset, arch.MAX_UINSN_BYTES)
        uprobe.arch = arch.arch_uprobe_analyze_insn(
            insn, nop_policy=self.profile.nop_emulation, optimize=self.profile.optimize, vaddr=vaddr
        )

    def install_breakpoint(self, proc, uprobe: Uprobe, vaddr: int) -> None:
        self.prepare_uprobe(uprobe, vaddr)
        mm = self.mm(proc)
        first = not mm.has_uprobes
        mm.has_uprobes = True
        try:
            wrote = self.set_swbp(proc, uprobe, vaddr)
        except GuestFault:
            if first:
                mm.has_uprobes = False
            raise RegistrationError("EFAULT", f"cannot write the breakpoint at {vaddr:#x}") from None
        mm.recalc = False
        if wrote:
            # uprobe_write() updates the USDT semaphore only when it really writes:
            # verify_opcode() returning "nothing to do" skips update_ref_ctr().
            self.update_ref_ctr(proc, uprobe, +1)

    def set_swbp(self, proc, uprobe: Uprobe, vaddr: int) -> bool:
        """Write the int3; False when there was nothing to do (already optimized, or an
        int3 already in the process: verify_opcode() adopts it)."""
        if self.kernel.optimizer.is_optimized(proc, uprobe, vaddr):
            return False
        if proc.mem.read_byte(vaddr) == arch.UPROBE_SWBP_OPCODE:
            return False  # verify_opcode: nothing to do
        proc.mem.text_poke(vaddr, arch.UPROBE_SWBP_INSN)
        if self.events:
            self.events.publish(ev.TextPoke(vaddr, arch.UPROBE_SWBP_INSN, "install int3"))
        return True

    def remove_breakpoint(self, proc, uprobe: Uprobe, vaddr: int) -> None:
        self.mm(proc).recalc = True
        if not self.kernel.ref_ctr_can_decrement(proc, uprobe):
            return  # update_ref_ctr() refuses to go negative: the write is skipped
        if self.set_orig_insn(proc, uprobe, vaddr):
            self.update_ref_ctr(proc, uprobe, -1)

    def set_orig_insn(self, proc, uprobe: Uprobe, vaddr: int) -> bool:
        """Restore the first byte (after analysis edits: riprel_analyze()'s REX.B quirk).
        False when the byte is no int3 (verify_opcode: nothing to do - e.g. removed
        already by UPROBE_HANDLER_REMOVE), and then the semaphore is left alone.
        An optimized site (6.18+) is restored by ``swbp_unoptimize`` instead, as the x86
        ``set_orig_insn`` does."""
        optimizer = self.kernel.optimizer
        if optimizer.is_optimized(proc, uprobe, vaddr):
            optimizer.swbp_unoptimize(proc, uprobe, vaddr)
            return True
        if proc.mem.read_byte(vaddr) != arch.UPROBE_SWBP_OPCODE:
            return False
        orig = bytes([uprobe.arch.ixol[0]]) if uprobe.arch else uprobe.file.read(uprobe.offset, 1)
        proc.mem.text_poke(vaddr, orig)
        if self.events:
            self.events.publish(ev.TextPoke(vaddr, orig, "restore original byte"))
        return True

    # -- lookup ------------------------------------------------------------------
    def find_active_uprobe(self, proc, vaddr: int) -> Uprobe | None:
        vma = proc.mem.find_vma(vaddr)
        if vma is None or vma.file is None:
            return None
        return self.tree.get((vma.file, vma.offset_of(vaddr)))

    # -- the int3 path -----------------------------------------------------------
    @staticmethod
    def uprobe_pre_sstep_notifier(task) -> bool:
        """``uprobe_pre_sstep_notifier``: the int3 is for uprobes only in an mm with
        MMF_HAS_UPROBES or a task with pending return instances."""
        mm = task.process.mm_uprobes
        utask = task.utask
        return mm is not None and (mm.has_uprobes or bool(utask and utask.return_instances))

    def handle_int3(self, task, regs) -> bool:
        """The DIE_INT3 notifier (``uprobe_pre_sstep_notifier``), then what
        ``uprobe_notify_resume`` runs: ``handle_swbp``.  False: not ours (SIGTRAP)."""
        if not self.uprobe_pre_sstep_notifier(task):
            return False
        return self.handle_swbp(task, regs, (regs.rip - 1) & 0xFFFFFFFFFFFFFFFF)

    def handle_swbp(self, task, regs, bp_vaddr: int, sync: UprobesSync | None = None) -> bool:
        """``handle_swbp``: the int3 uretprobe trampoline, else the probe at bp_vaddr.

        The hot path of every probe hit: what a hit does is decided when the uprobe is
        analysed (``uprobe.arch.ops``) and when consumers come and go (the consumer
        list), so a hit only looks things up.  ``arch_uprobe_skip_sstep`` (the class's
        emulation, then the SIGTRAP a TF-set task gets) is inline here.  A machine that
        records its shared-memory accesses goes through :meth:`_handle_swbp_sync`,
        which comes back here with ``sync``."""
        proc = task.process
        mm = proc.mm_uprobes
        area = mm.xol_area
        if area is not None and bp_vaddr == area.vaddr:  # the int3 trampoline (< 6.11)
            uret = self.uret
            if not uret.handle_trampoline(task, regs):
                uret.uprobe_handle_trampoline(task, regs)
            return True
        if sync is None and self.sync.log is not None:
            return self._handle_swbp_sync(self.sync, task, regs, bp_vaddr)
        mem = proc.mem  # find_active_uprobe, its
        if mm.hit_vma_gen != mem.vma_gen or mm.hit_tree_gen != self.tree_gen:  # answers kept per mm
            mm.hit_cache.clear()
            mm.hit_vma_gen, mm.hit_tree_gen = mem.vma_gen, self.tree_gen
        uprobe = mm.hit_cache.get(bp_vaddr)
        if uprobe is None:
            uprobe = self.find_active_uprobe(proc, bp_vaddr)
            if uprobe is not None:
                mm.hit_cache[bp_vaddr] = uprobe
        if uprobe is None:
            try:
                is_trap = proc.mem.read(bp_vaddr, 1) == arch.UPROBE_SWBP_INSN
            except GuestFault:
                is_trap = False
            if is_trap:
                return False  # a real int3: SIGTRAP
            regs.rip = bp_vaddr  # raced with unregister: restart
            return True
        regs.rip = bp_vaddr
        au = uprobe.arch
        if au is None:
            return True  # analysis not done: trap again
        if task.utask is None:
            self.utask(task)
        counters = self.machine.counters
        counters.uprobe_hits += 1
        uprobe.hits += 1
        bus = self.events
        if bus.active:
            bus.publish(ev.UprobeHit(task, uprobe, bp_vaddr))
        if sync is None:  # run_chain, inlined: the int3 hot path
            chain = uprobe.chain
            if chain is None:
                chain = uprobe.chain = self.specialize_chain(uprobe)
                uprobe.fast_ok = self.specialized and swbp_fast_path_qualifies(uprobe)
            chain(uprobe, task, regs, bp_vaddr)
        else:
            sync.handler_chain_enter(task, uprobe)
            self.handler_chain(uprobe, task, regs, bp_vaddr)
            sync.handler_chain_exit(task, uprobe)
        if au.can_optimize:  # ARCH_UPROBE_FLAG_CAN_OPTIMIZE
            self.kernel.optimizer.arch_uprobe_optimize(task, uprobe, bp_vaddr)
        self.skip_sstep_or_pre_ssout(task, uprobe, regs, bp_vaddr)
        if uprobe.fast_ok and sync is None and self.specialized:
            install_swbp_fast_path(self, task, uprobe, bp_vaddr)
        return True

    def skip_sstep_or_pre_ssout(self, task, uprobe: Uprobe, regs, bp_vaddr: int) -> None:
        """The end of ``handle_swbp`` once the handlers ran: an ip a consumer moved is
        not stepped over (on kernels that skip it), else ``arch_uprobe_skip_sstep``
        (the class's emulation, then the SIGTRAP a TF-set task gets), else the
        out-of-line step (``pre_ssout``)."""
        bus = self.events
        if regs.rip != bp_vaddr and self.profile.ip_change_skips_insn:
            if bus.active:
                bus.publish(ev.IpChanged(task, bp_vaddr, regs.rip))
            return
        au: ArchUprobe = uprobe.arch  # type: ignore[assignment]  # a hit uprobe is analysed
        emulate = au.ops.emulate
        if emulate is not None and emulate(au, regs, task.process.mem):
            self.machine.counters.emulated += 1
            if bus.active:
                bus.publish(ev.Emulated(task, uprobe, regs.rip))
            if regs.tf:
                self.machine.send_sig(task, SIGTRAP, detail="single-step over an emulated probe")
            return
        self.pre_ssout(task, task.utask, uprobe, regs, bp_vaddr)

    def _handle_swbp_sync(self, sync: UprobesSync, task, regs, bp_vaddr: int) -> bool:
        """``handle_swbp`` with the version's synchronization recorded around it."""
        idx = sync.handle_swbp_enter(task)
        proc = task.process
        uprobe = self.find_active_uprobe(proc, bp_vaddr)
        sync.find_active_uprobe(task, proc, uprobe)
        result = self.handle_swbp(task, regs, bp_vaddr, sync)
        utask = task.utask
        stepping = utask is not None and utask.state == UTASK_SSTEP and utask.active_uprobe is uprobe
        # a single-stepped probe keeps (<= 6.11) or takes (pre_ssout) its own reference
        sync.handle_swbp_exit(task, None if stepping else uprobe, idx)
        return result

    def handler_chain(self, uprobe: Uprobe, task, regs, vaddr: int) -> None:
        """Run entry handlers newest first; set up the return probe; REMOVE.

        How return values count is the profile's ``handler_chain_rc``: "exact" (6.13+)
        takes a return instance per hit for the consumers that want one (not REMOVE,
        not IGNORE); "bitmask" (<= 6.12) ANDs the raw values (``remove &= rc``) and
        prepares one return probe for all ret_handlers when any consumer has one and
        not every handler removed (``need_prep && !remove``).

        Each consumer's context is made once and reused hit after hit (it is valid
        during the callback, as the kernel's ``struct pt_regs *`` is)."""
        consumers = uprobe.consumers
        if not consumers:
            return
        exact = self._rc_exact
        remove, need_prep = True, False
        ri = None
        bus = self.events
        first = True
        for uc in tuple(consumers):
            # list_for_each_entry_rcu: a consumer added meanwhile (at the head) is not
            # visited; one removed by an earlier handler (list_del_rcu) is skipped.
            if not first and uc not in consumers:
                continue
            first = False
            rc = 0
            ctx = uc.ctx
            if ctx is None:
                ctx = uc.ctx = UprobeContext(self.machine, task, regs, uprobe, uc, vaddr)
            else:
                ctx.task, ctx._regs, ctx.uprobe, ctx.vaddr, ctx.cookie = task, regs, uprobe, vaddr, 0
            if uc.handler is not None and uc.enabled:
                uc.hits += 1
                rc = uc.handler(ctx) or 0
                if bus.active:
                    bus.publish(ev.HandlerRan(task, uc, rc, vaddr))
            if not exact:
                remove &= isinstance(rc, int) and bool(rc & UPROBE_HANDLER_REMOVE)
                need_prep |= uc.ret_handler is not None
                continue
            remove &= rc == UPROBE_HANDLER_REMOVE
            if uc.ret_handler is not None and rc not in (UPROBE_HANDLER_REMOVE, UPROBE_HANDLER_IGNORE):
                if ri is None:
                    ri = self.uret.alloc_return_instance(task)
                if uc.handler is not None:  # uc.is_session (it has a ret_handler)
                    ri.consumers.append((uc.id, ctx.cookie))
        if need_prep and not remove:
            ri = self.uret.alloc_return_instance(task)
        if ri is not None:
            self.uret.prepare_uretprobe(uprobe, task, regs, ri)
        if remove:
            self._remove_unwanted(uprobe, task)

    def run_chain(self, uprobe: Uprobe, task, regs, vaddr: int, sync: UprobesSync | None) -> None:
        """The consumers of a hit: the uprobe's specialised chain, or the general one
        inside ``register_rwsem`` (where the profile takes it) while the machine
        records its accesses."""
        if sync is None:
            chain = uprobe.chain
            if chain is None:
                chain = uprobe.chain = self.specialize_chain(uprobe)
            chain(uprobe, task, regs, vaddr)
        else:
            sync.handler_chain_enter(task, uprobe)
            self.handler_chain(uprobe, task, regs, vaddr)
            sync.handler_chain_exit(task, uprobe)

    def _remove_unwanted(self, uprobe: Uprobe, task) -> None:
        """Every handler answered REMOVE: unapply, and from 6.12 only after re-checking
        under register_rwsem that no consumer wants this mm."""
        if not self.profile.remove_rechecks_filter or not self.filter_chain(uprobe, task.process):
            self.unapply_uprobe(task.process, uprobe)

    def specialize_chain(self, uprobe: Uprobe):
        """``handler_chain`` as this uprobe's consumers make it, decided once per change
        of the consumer list (``uprobe.chain`` is cleared when a consumer comes or
        goes): one entry consumer with no ret_handler - a perf or BPF probe - gets a
        chain with no loop, no return-instance logic, and its owner's specialised
        handler when it has one (``fast_handler``); any other list gets the general
        :meth:`handler_chain`.  Both have the same effects, counts and events."""
        consumers = uprobe.consumers
        if not self.specialized or len(consumers) != 1:
            return self.handler_chain
        uc = consumers[0]
        if uc.handler is None and uc.ret_handler is not None:
            return self._ret_only_chain(uc)
        if uc.handler is None or uc.ret_handler is not None:
            return self.handler_chain
        handler = uc.fast_handler or uc.handler
        exact, bus, machine = self._rc_exact, self.events, self.machine

        def handler_chain_one(uprobe, task, regs, vaddr):
            ctx = uc.ctx
            if ctx is None:
                ctx = uc.ctx = UprobeContext(machine, task, regs, uprobe, uc, vaddr)
            else:
                ctx.task, ctx._regs, ctx.uprobe, ctx.vaddr, ctx.cookie = task, regs, uprobe, vaddr, 0
            if not uc.enabled:
                return
            uc.hits += 1
            rc = handler(ctx) or 0
            if bus.active:
                bus.publish(ev.HandlerRan(task, uc, rc, vaddr))
            if rc and (rc == UPROBE_HANDLER_REMOVE if exact else isinstance(rc, int) and rc & UPROBE_HANDLER_REMOVE):
                self._remove_unwanted(uprobe, task)

        return handler_chain_one

    def _ret_only_chain(self, uc: UprobeConsumer):
        """``handler_chain`` for one consumer with only a ret_handler (a uretprobe):
        nothing runs at entry, and its rc is 0 under either ``handler_chain_rc`` - the
        kernel asks for a return instance (``alloc_return_instance``, or ``need_prep``
        before 6.13) and ``prepare_uretprobe`` hijacks the return; no REMOVE.  As in
        :meth:`handler_chain` the consumer's context is refreshed (its cookie 0)."""
        machine, uret = self.machine, self.uret
        alloc, prepare = uret.alloc_return_instance, uret.prepare_uretprobe

        def handler_chain_ret(uprobe, task, regs, vaddr):
            ctx = uc.ctx
            if ctx is None:
                ctx = uc.ctx = UprobeContext(machine, task, regs, uprobe, uc, vaddr)
            else:
                ctx.task, ctx._regs, ctx.uprobe, ctx.vaddr, ctx.cookie = task, regs, uprobe, vaddr, 0
            prepare(uprobe, task, regs, alloc(task))

        return handler_chain_ret

    def unapply_uprobe(self, proc, uprobe: Uprobe) -> None:
        for vaddr in self.vaddr_of(proc, uprobe.file, uprobe.offset):
            self.remove_breakpoint(proc, uprobe, vaddr)

    # -- out-of-line single-step ---------------------------------------------------
    def get_xol_area(self, proc) -> XolArea | None:
        """``get_xol_area``: one ``[uprobes]`` page per mm, created on first need.
        None when no page can be found for it (``__create_xol_area`` fails)."""
        mm = self.mm(proc)
        if mm.xol_area is None:
            mem = proc.mem
            vaddr = mem.get_unmapped_area(PAGE_SIZE, hint=TASK_SIZE - PAGE_SIZE)
            if vaddr is None:
                return None
            mem.map(vaddr, PAGE_SIZE, PROT_EXEC, "[uprobes]", special=True)
            area = XolArea(vaddr, nslots=self.xol_slots)
            tramp = arch.uretprobe_trampoline(self.profile)
            mem.text_poke(vaddr, tramp, count=False)
            area.slot_bytes[0] = tramp
            mm.xol_area = area
            if self.events.active:
                self.events.publish(ev.XolAreaMapped(vaddr))
        return mm.xol_area

    def pre_ssout(self, task, utask: UprobeTask, uprobe: Uprobe, regs, bp_vaddr: int) -> None:
        area = task.process.mm_uprobes.xol_area or self.get_xol_area(task.process)
        if area is None:
            # xol_get_insn_slot() returns 0: pre_ssout fails and handle_swbp restarts at
            # bp_vaddr (ip is already there): the task traps again, handlers re-run.
            if self.events.active:
                self.events.publish(ev.XolRestart(task, uprobe))
            return
        slot = area.get_slot()
        if slot is None:
            # every slot is busy: sleep until one is freed, then continue this step
            # (the handlers already ran; they do not run again)
            utask.pending_sstep = (uprobe, bp_vaddr)
            area.waiters.append(task)
            self.machine.block(task, "xol_slot")
            task.on_resume = lambda: self._resume_pre_ssout(task)
            if self.events.active:
                self.events.publish(ev.XolWait(task, uprobe))
            return
        xol_vaddr = area.vaddr + slot * arch.UPROBE_XOL_SLOT_BYTES
        au: ArchUprobe = uprobe.arch  # type: ignore[assignment]  # a hit uprobe is analysed
        ixol = au.ixol
        if area.slot_bytes.get(slot) != ixol:
            task.process.mem.text_poke(xol_vaddr, ixol, count=False)
            area.slot_bytes[slot] = ixol
        utask.xol_slot, utask.xol_vaddr, utask.vaddr = slot, xol_vaddr, bp_vaddr
        sync = self.sync
        if sync.log is not None:
            sync.pre_ssout(task, task.process, uprobe)
        arch.arch_uprobe_pre_xol(au, regs, utask, task.thread_fault)
        utask.active_uprobe = uprobe
        utask.state = UTASK_SSTEP
        self.machine.counters.xol_singlesteps += 1
        if self.events.active:
            self.events.publish(ev.XolStep(task, uprobe, slot, xol_vaddr))

    def _resume_pre_ssout(self, task) -> None:
        """A task woken with a free XOL slot finishes the step it was preparing."""
        utask = task.utask
        uprobe, bp_vaddr = utask.pending_sstep
        utask.pending_sstep = None
        regs = self.machine.read_regs()
        self.pre_ssout(task, utask, uprobe, regs, bp_vaddr)
        self.machine.write_regs(regs)

    def handle_debug(self, task, regs) -> bool:
        """``uprobe_post_sstep_notifier`` + ``handle_singlestep``: a #DB while the task
        has an active uprobe ends its step (UTASK_SSTEP_ACK), whatever caused the #DB."""
        utask = task.utask
        if utask is None or utask.state != UTASK_SSTEP:
            return False
        utask.state = UTASK_SSTEP_ACK
        self.handle_singlestep(task, regs)
        return True

    def handle_singlestep(self, task, regs) -> None:
        """``handle_singlestep`` (uprobe_notify_resume with an active uprobe): finish the
        step (UTASK_SSTEP_ACK: ``arch_uprobe_post_xol``) or abort it
        (UTASK_SSTEP_TRAPPED: ``arch_uprobe_abort_xol``, rip back at the probed
        address), free the slot, and make the signals uprobe_deny_signal held back
        pending again."""
        utask = task.utask
        uprobe = utask.active_uprobe
        if utask.state == UTASK_SSTEP_TRAPPED:
            arch.arch_uprobe_abort_xol(uprobe.arch, regs, utask)
            sigtrap = False
        else:
            sigtrap = arch.arch_uprobe_post_xol(uprobe.arch, regs, task.process.mem, utask)[1]
        self._end_sstep(task, utask)
        sync = self.sync
        if sync.log is not None:
            sync.handle_singlestep(task, task.process, uprobe)
        if self.events.active:
            self.events.publish(ev.XolDone(task, uprobe, regs.rip))
        if sigtrap:
            self.machine.send_sig(task, SIGTRAP, detail="single-step after a probed instruction")

    def uprobe_deny_signal(self, task) -> bool:
        """``uprobe_deny_signal``, the first thing get_signal() asks once a signal is
        pending: a task single-stepping out of line (an active uprobe) takes no signal
        until the step is over.  TIF_SIGPENDING is cleared (the signals stay queued,
        ``signal_denied`` remembers them) and get_signal delivers nothing; the #DB that
        ends the step (handle_singlestep) makes them pending again.  A fatal signal, or
        a trap of the slot instruction itself (arch_uprobe_xol_was_trapped), cannot
        wait: the step is marked UTASK_SSTEP_TRAPPED for uprobe_notify_resume to abort
        before the signal is taken.  True when the task is stepping.

        A step that never ends - the rt_sigreturn of a probed ``syscall`` in
        ``__restore_rt`` restores EFLAGS without TF, so no #DB comes - leaves the task
        in UTASK_SSTEP and every later signal held back, as on Linux.  Before 6.15 the
        flag was cleared under siglock and recalc_sigpending() re-raised it
        (``sstep_siglock``); what a task sees is the same."""
        utask = task.utask
        if utask is None or utask.active_uprobe is None:
            return False
        if utask.sigpending:  # task_sigpending(): the caller found a signal to take
            utask.signal_denied = True
            utask.sigpending = False
            if self.kernel.fatal_signal_pending(task) or arch.arch_uprobe_xol_was_trapped(task):
                utask.state = UTASK_SSTEP_TRAPPED  # set_tsk_thread_flag(TIF_UPROBE)
        return True

    def _end_sstep(self, task, utask: UprobeTask) -> None:
        mm = task.process.mm_uprobes
        area = mm.xol_area if mm is not None else None
        if area is not None and utask.xol_slot > 0:
            area.free_slot(utask.xol_slot)
            if area.waiters:
                self.machine.wake(area.waiters.pop(0), None)
        utask.active_uprobe = None
        utask.state = UTASK_RUNNING
        utask.xol_slot = -1
        if utask.signal_denied:  # set_thread_flag(TIF_SIGPENDING)
            utask.signal_denied = False
            utask.sigpending = True

    def abort_xol_on_fault(self, task, regs) -> None:
        """The slot instruction faulted: arch_uprobe_abort_xol, then the signal is
        delivered with ip = the probed address."""
        utask = task.utask
        if utask is None or utask.state != UTASK_SSTEP:
            return
        arch.arch_uprobe_abort_xol(utask.active_uprobe.arch, regs, utask)
        self._end_sstep(task, utask)
