"""The modeled kernel of one machine: its profile, the uprobes subsystem, and the
trap entry points the machine calls (the kernel's do_int3 / exc_debug notifiers)."""

from __future__ import annotations

from kernel_model.trace.events import RefCtrUpdate
from kernel_model.mm.mm_types import GuestFault, PROT_WRITE
from kernel_model.kernel.signals import SIGNALS

from kernel_model.kernel.events.uprobes_fork import copy_process, dup_mmap, uprobe_free_utask, uprobe_mmap, vma_dontcopy
from kernel_model.arch.x86.kernel.uprobes_optimize import Optimizer
from kernel_model.profiles import KernelProfile
from kernel_model.trace.trace_uprobe import TraceEvents
from kernel_model.kernel.events.uprobes import Uprobes

SIGTRAP = SIGNALS["SIGTRAP"]


class Kernel:
    def __init__(self, machine, profile="latest", **overrides):
        self.machine = machine
        self.profile = profile if isinstance(profile, KernelProfile) else \
            KernelProfile.get(profile, **overrides)
        self.uprobes = Uprobes(self)
        self.optimizer = Optimizer(self)
        self.trace = TraceEvents(self.uprobes)
        self.uprobes.trace = self.trace
        if self.profile.has_uretprobe_syscall:
            machine.syscalls.register(335, self.uprobes.uret.sys_uretprobe)
        if self.profile.has_uprobe_syscall:
            machine.syscalls.register(336, self.optimizer.sys_uprobe)

    # -- traps -----------------------------------------------------------------
    def do_int3(self, task, regs) -> None:
        """#BP from user mode: uprobes first (uprobe_pre_sstep_notifier), else SIGTRAP.
        (``Uprobes.handle_int3``, one frame shorter: the notifier, then handle_swbp.)"""
        uprobes = self.uprobes
        if uprobes.uprobe_pre_sstep_notifier(task) and \
                uprobes.handle_swbp(task, regs, (regs.rip - 1) & 0xFFFFFFFFFFFFFFFF):
            return
        self.machine.send_sig(task, SIGTRAP, detail="breakpoint trap (int3)")

    def do_debug(self, task, regs) -> None:
        """#DB from user mode: a uprobes single-step completes, else SIGTRAP."""
        if self.uprobes.handle_debug(task, regs):
            return
        self.machine.send_sig(task, SIGTRAP, detail="trace trap (single-step)")

    def fixup_fault(self, task, regs) -> None:
        """A fault is about to become a signal: abort an out-of-line step first so the
        signal is reported at the probed address (arch_uprobe_abort_xol)."""
        self.uprobes.abort_xol_on_fault(task, regs)

    # -- process lifecycle -------------------------------------------------------
    def task_exit(self, task) -> None:
        """uprobe_free_utask frees the task's uprobes state at exit; the model keeps it
        on the dead task so tests can inspect what was still pending."""
        return None

    def process_exit(self, proc) -> None:
        return None

    def copy_process(self, parent_task, child_task, *, share_mm: bool, vfork: bool) -> None:
        """uprobe_copy_process: pending return instances for fork/vfork children."""
        copy_process(self.uprobes, parent_task, child_task, share_mm=share_mm, vfork=vfork)

    def exec_mm(self, task) -> None:
        """What exec does to uprobes state, once the new image is mapped: exec_mmap's
        mm_release frees the task's utask with its pending return instances
        (``uprobe_free_utask``, in mm_release in every modeled release); the old mm's
        state (MMF_HAS_UPROBES, the [uprobes] XOL area) went with the old mm
        (``uprobe_clear_state`` at its __mmput) and the new mm starts without any; the
        mappings load_elf_binary made get their probes through ``uprobe_mmap``."""
        uprobe_free_utask(self.uprobes, task)
        uprobe_mmap(self.uprobes, task.process)

    def vma_dontcopy(self, vma) -> bool:
        return vma_dontcopy(self.profile, vma)

    def dup_mmap(self, parent, child) -> None:
        dup_mmap(self.uprobes, parent, child)

    # -- mappings ------------------------------------------------------------------
    def uprobe_mmap(self, proc, vma) -> None:
        """A file VMA appeared in ``proc`` (mmap_region / elf_map / vma_complete):
        uprobes installs its inode's probes there (``uprobe_mmap``)."""
        self.uprobes.uprobe_mmap(proc, vma)

    def uprobe_munmap(self, proc, vma, start: int, end: int) -> None:
        """[start, end) of a file VMA is being unmapped (``uprobe_munmap``)."""
        self.uprobes.uprobe_munmap(proc, vma, start, end)

    # -- USDT semaphores ---------------------------------------------------------
    def _ref_ctr(self, proc, uprobe) -> tuple[int, int] | None:
        """(address, value) of the USDT semaphore in the file's writable mapping."""
        if not uprobe.ref_ctr_offset:
            return None
        for vma in proc.mem.vmas:
            if vma.file is uprobe.file and vma.prot & PROT_WRITE and \
                    vma.pgoff <= uprobe.ref_ctr_offset < vma.pgoff + vma.size:
                addr = vma.vaddr_of(uprobe.ref_ctr_offset)
                try:
                    return addr, int.from_bytes(proc.mem.read(addr, 2), "little", signed=True)
                except GuestFault:
                    return None
        return None

    def ref_ctr_update(self, proc, uprobe, delta: int) -> bool:
        """``update_ref_ctr``: the 16-bit semaphore at ``ref_ctr_offset`` rises on install
        and falls on removal.  Going below zero is refused (-EINVAL, "ref_ctr going
        negative"): returns False and writes nothing."""
        found = self._ref_ctr(proc, uprobe)
        if found is None:
            return True
        addr, cur = found
        if cur + delta < 0:
            return False
        new = cur + delta
        try:
            # __update_ref_ctr: get_user_pages_remote(FOLL_WRITE), a write the mapping allows
            proc.mem.write_user(addr, (new & 0xFFFF).to_bytes(2, "little"))
        except GuestFault:
            return False
        events = self.machine.events
        if events:
            events.publish(RefCtrUpdate(proc.pid, addr, cur, new))
        return True

    def ref_ctr_can_decrement(self, proc, uprobe) -> bool:
        found = self._ref_ctr(proc, uprobe)
        return found is None or found[1] > 0
