"""What a new task or process inherits from uprobes (kernel/events/uprobes.c
``uprobe_copy_process`` / ``dup_utask`` / ``dup_xol_work`` and ``uprobe_dup_mmap``;
arch/x86 trampoline VM_DONTCOPY history).

- Breakpoints and optimized sites are bytes of the process's private text copy: fork
  copies them with the rest of the address space (the machine does the copy).
- The [uprobes] XOL page is VM_DONTCOPY: a forked child gets a new one at the same
  address, created only when it inherited return instances (dup_xol_work).
- [uprobes-trampoline] pages were VM_DONTCOPY on 6.18-7.1, so a forked child inherits
  ``call``s into an unmapped page (measured on a real 6.18: the child dies of SIGSEGV at
  the site); 7.3 copies them.
- Pending return instances are copied for fork and vfork, never for threads.
"""

from __future__ import annotations

from dataclasses import replace

from kernel_model.arch.x86.kernel import uprobes as arch
from kernel_model.errors import RegistrationError
from kernel_model.kernel.events.uprobes_types import MmUprobes, XolArea
from kernel_model.kernel.events.uretprobes import RI_SIZEOF
from kernel_model.mm.mm_types import PAGE_SIZE, PROT_EXEC, PROT_WRITE


def vma_dontcopy(profile, vma) -> bool:
    if not vma.special:
        return False
    if vma.name == "[uprobes]":
        return True
    if vma.name == "[uprobes-trampoline]":
        return not profile.trampolines_copied_on_fork
    return False


def dup_mmap(uprobes, parent, child) -> None:
    """The child's per-mm uprobes state: MMF_HAS_UPROBES is inherited, the XOL area is not."""
    pm = parent.mm_uprobes
    child.mm_uprobes = MmUprobes(has_uprobes=pm.has_uprobes if pm else False, recalc=pm.recalc if pm else False)


def copy_process(uprobes, parent_task, child_task, *, share_mm: bool, vfork: bool) -> None:
    utask = parent_task.utask
    if utask is None or not utask.return_instances:
        return
    if share_mm and not vfork:
        return  # a thread starts with no return instances
    child = uprobes.utask(child_task)
    for ri in utask.return_instances:
        child.return_instances.append(replace(ri, consumers=list(ri.consumers)))
    child.depth = utask.depth
    uprobes.counters.ri_allocated += len(utask.return_instances)
    if not share_mm:
        dup_xol_area(uprobes, parent_task.process, child_task.process)


def dup_xol_area(uprobes, parent, child) -> None:
    """dup_xol_work: the child's XOL page at the parent's address (its trampoline in slot 0)."""
    area = parent.mm_uprobes.xol_area if parent.mm_uprobes else None
    mm = uprobes.mm(child)
    if area is None or mm.xol_area is not None:
        return
    child.mem.map(area.vaddr, PAGE_SIZE, PROT_EXEC, "[uprobes]", special=True)
    tramp = arch.uretprobe_trampoline(uprobes.profile)
    child.mem.text_poke(area.vaddr, tramp, count=False)
    mm.xol_area = XolArea(area.vaddr, nslots=uprobes.xol_slots)  # as get_xol_area sizes it
    mm.xol_area.slot_bytes[0] = tramp


def uprobe_free_utask(uprobes, task) -> None:
    """``uprobe_free_utask`` from mm_release (exit and exec): the task's uprobes state
    goes - every pending return instance is freed (its hijacked return address stays
    on a stack that exec throws away), with the pool or array it kept (``ri_free``)."""
    utask, task.utask = task.utask, None
    if utask is None:
        return
    uret = uprobes.uret
    if utask.ri_array is not None:  # array64: the array goes in one piece
        n = len(utask.ri_array) + len(utask.return_instances)
        uprobes.counters.ri_freed += n
        uret.bytes_held -= n * RI_SIZEOF
        return
    kept = [ri for ri in utask.return_instances + utask.ri_pool if not ri.scratch]
    uprobes.counters.ri_freed += len(kept)
    uret.bytes_held -= sum(RI_SIZEOF + ri.extra_bytes for ri in kept)


def uprobe_mmap(uprobes, proc) -> None:
    """``uprobe_mmap`` for every mapping of a new mm (exec's load_elf_binary maps the
    program and its interpreter): each registered uprobe on a mapped file, in a private
    mapping that is not writable (valid_vma), is installed where a consumer's filter
    wants this mm (build_probe_list + install_breakpoint; errors are ignored)."""
    for uprobe in list(uprobes.tree.values()):
        for vma in uprobes.probe_vmas(proc, uprobe.file, uprobe.offset):
            if vma.prot & PROT_WRITE or not uprobes.filter_chain(uprobe, proc):
                continue
            try:
                uprobes.install_breakpoint(proc, uprobe, vma.vaddr_of(uprobe.offset))
            except RegistrationError:
                pass
