"""The breakpoint fast path of one probed site: ``exc_int3`` -> ``handle_swbp`` ->
``handler_chain`` -> ``arch_uprobe_skip_sstep`` specialised, in one frame, for the
hit that is by far the most common - a probe on an instruction the kernel emulates (a
function's ``push %rbp`` or ``endbr64``, padding nops, a USDT site's nop, a jmp, call or
jcc) with one consumer: an entry handler alone, or a return handler alone (a
uretprobe, whose entry work is ``prepare_uretprobe``).  A nop or jmp needs no register
at all (its emulation moves rip to a constant); the others read the registers they
emulate on.

``handle_swbp`` installs it in the engine (``Engine.set_breakpoint_fast_path``) after a
hit that went the general way, when the site qualifies; the engine calls it before
the trap handler for the int3 at that address when TF is clear.  Each hit first checks
what the general path would do differently, and hands the trap back untouched
(returns None) when anything does:

* the site is stale: the VMAs or the uprobe's consumer list changed since it was
  built (the VMA generation, the specialised chain object: a uprobe leaves the tree
  only with its last consumer), or another process's task traps on the same CPU state
  (a ``vfork`` child);
* the trap is not an ordinary one: a task not running, a syscall to restart, a run
  that has ended;
* something listens or records: the events bus, the access log of ``sync``;
* the task has no ``uprobe_task`` yet, the mm lost MMF_HAS_UPROBES, the consumer is
  disabled.

Then it counts what the general path counts (``bp_traps``, ``uprobe_hits``, the
uprobe's and the consumer's hits, ``emulated``), runs the handler with the consumer's
context (its ``regs`` read only if the handler asks for them) and returns the
emulated instruction's resume address.  When the exit to user mode has work after all (a
signal queued before the hit or by the handler, a task the handler stopped) or a
handler changed registers, the trap takes its general end instead
(``Uprobes.skip_sstep_or_pre_ssout``, ``Traps.exc_int3_exit``) on the registers as
the general path would have them.  Same effects, counts and events: the
transparency tests run every case both ways (``Uprobes.specialized`` off).
"""

from __future__ import annotations

from kernel_model.arch.x86.kernel import uprobes as arch
from kernel_model.kernel.events.uprobes_types import UPROBE_HANDLER_REMOVE
from kernel_model.trace import events as ev


def swbp_fast_path_qualifies(uprobe) -> bool:
    """May the uprobe's hits take a fast path?  An instruction that is emulated (its
    class has ``emulate``: nop, jmp, call, jcc, push) and not optimized away, one
    consumer with an entry handler alone or a return handler alone.  Decided when
    ``handle_swbp`` specialises the uprobe's chain."""
    au = uprobe.arch
    consumers = uprobe.consumers
    if au is None or au.can_optimize or au.ops.emulate is None or len(consumers) != 1:
        return False
    uc = consumers[0]
    return (uc.handler is None) != (uc.ret_handler is None)


def install_swbp_fast_path(uprobes, task, uprobe, bp_vaddr: int) -> None:
    """Give the site at ``bp_vaddr`` of the task's address space its fast path unless
    it has a current one (called by ``handle_swbp`` after a general hit of a uprobe that
    qualifies)."""
    engine = uprobes.kernel.engine
    if engine is None:
        return  # a kernel driven without a CPU (its unit tests)
    proc = task.process
    cpu, mem = proc.cpu, proc.mem
    key = (mem.vma_gen, uprobe.chain)
    have = engine.breakpoint_fast_path(cpu, bp_vaddr)
    if have is not None and have.key == key:
        return
    if uprobe.chain is None:  # a handler of this very hit added or removed a consumer
        return
    uc = uprobe.consumers[0]
    if uc.ctx is None:
        return
    target = arch.branch_emulated_target(uprobe.arch, bp_vaddr)
    engine.set_breakpoint_fast_path(cpu, bp_vaddr, _swbp_fast_path(uprobes, proc, uprobe, uc, bp_vaddr, target, key))


def _swbp_fast_path(uprobes, proc, uprobe, uc, bp_vaddr: int, target: int | None, key: tuple):
    """The site's fast path: ``uc`` is the one consumer, with an entry handler only or
    (a uretprobe) a return handler only - then the entry work is
    ``alloc_return_instance`` + ``prepare_uretprobe``, as ``Uprobes._ret_only_chain``."""
    kernel, machine = uprobes.kernel, uprobes.machine
    counters, bus, sync, engine = machine.counters, uprobes.events, uprobes.sync, kernel.engine
    mem, cpu, rf, signal, mm = proc.mem, proc.cpu, proc.cpu_regs, proc.signal, proc.mm_uprobes
    vma_gen, chain = key
    ret_only = uc.handler is None
    handler = uc.fast_handler or uc.handler
    au = uprobe.arch
    emulate = au.ops.emulate
    alloc, prepare = uprobes.uret.alloc_return_instance, uprobes.uret.prepare_uretprobe
    exact = uprobes._rc_exact

    def load_regs():
        """The registers as the general path has them at handler_chain (rip at the probe)."""
        regs = rf.trap_regs(kernel.task.orig_rax)
        regs.rip = bp_vaddr
        return regs

    def handle_swbp_fast():
        if mem.vma_gen != vma_gen or uprobe.chain is not chain or proc.cpu is not cpu or not uprobes.specialized:
            engine.clear_breakpoint_fast_path(cpu, bp_vaddr)  # stale: the next general hit rebuilds it
            return None
        task = kernel.task
        orig_rax = task.orig_rax
        if (
            task.process is not proc
            or bus.active
            or sync.log is not None
            or task.state != "running"
            or kernel.int3_needs_exc_int3
            or task.utask is None
            or not mm.has_uprobes
            or (orig_rax is not None and orig_rax >= 0)
            or not (ret_only or uc.enabled)
        ):
            return None
        counters.bp_traps += 1  # exc_int3
        counters.uprobe_hits += 1  # handle_swbp
        uprobe.hits += 1
        ctx = uc.ctx  # handler_chain, one consumer
        if ret_only:
            regs = load_regs()
            ctx.task, ctx._regs, ctx.uprobe, ctx.vaddr, ctx.cookie = task, regs, uprobe, bp_vaddr, 0
            prepare(uprobe, task, regs, alloc(task))
        else:
            ctx.task, ctx._regs, ctx.uprobe, ctx.vaddr, ctx.cookie = task, None, uprobe, bp_vaddr, 0
            ctx.regs_loader = load_regs
            uc.hits += 1
            rc = handler(ctx) or 0
            if bus.active:
                bus.publish(ev.HandlerRan(task, uc, rc, bp_vaddr))
            if rc and (rc == UPROBE_HANDLER_REMOVE if exact else isinstance(rc, int) and rc & UPROBE_HANDLER_REMOVE):
                uprobes._remove_unwanted(uprobe, task)
            regs = ctx._regs
        if not bus.active and not task.pending_signals and not signal.shared_pending and task.state == "running":
            if regs is None:
                if target is not None:  # a nop or jmp: no register needed
                    counters.emulated += 1  # arch_uprobe_skip_sstep
                    return target
                regs = ctx._regs = load_regs()
            if regs.stores_nothing(bp_vaddr) and regs.orig_rax == orig_rax and emulate(au, regs, mem):
                counters.emulated += 1  # (a failed push: the general end)
                return regs.rip
        if regs is None:
            regs = ctx._regs = load_regs()
        uprobes.skip_sstep_or_pre_ssout(task, uprobe, regs, bp_vaddr)
        return kernel.exc_int3_exit(task, regs, cpu, rf)  # REGISTERS_STORED

    handle_swbp_fast.key = key  # type: ignore[attr-defined]  # what the engine compares (a function attribute)
    return handle_swbp_fast
