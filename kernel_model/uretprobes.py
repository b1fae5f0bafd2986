"""Return probes: the return_instance stack, its allocation policies, the trampoline.

Mirrors kernel/events/uprobes.c: ``alloc_return_instance`` / ``free_ret_instance``,
``prepare_uretprobe`` (hijack at the entry hit, chaining, depth limit, cleanup of dead
instances), ``uprobe_handle_trampoline`` and ``handle_uretprobe_chain``; and the x86
``sys_uretprobe`` (syscall 335).

Allocation policies (profile switch ``ri_alloc``), all with identical observable guest
behaviour and different counters:

- ``kmalloc`` (<= 6.13): allocate per hit, free at return.
- ``array64`` (the July 2024 proposal, not merged): 64 instances preallocated per task on
  first use and used as a stack.
- ``pool`` (6.14+, ``utask->ri_pool``): freed instances go to a per-task free list and are
  reused; the pool is bounded by the deepest nesting, not by the number of hits.

``RI_SIZEOF`` models ``sizeof(struct return_instance)`` on x86_64: hprobe {state 4 +
srcu_idx 4, uprobe* 8} = 16, func 8, stack 8, orig_ret_vaddr 8, chained 1 (+3 pad),
cons_cnt 4, next* 8, rcu_head 16, consumer {cookie 8, id 8} = 16, extra_consumers* 8
= 96 bytes, rounded up to the 64-byte cacheline alignment the struct declares: 128.
Session consumers beyond the first add 16 bytes each in ``extra_consumers``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from emu.memory import GuestFault
from emu.signals import SIGNALS

from . import arch_x86 as arch

MAX_URETPROBE_DEPTH = 64
RI_SIZEOF = 128
RI_CONSUMER_SIZEOF = 16
SIGILL = SIGNALS["SIGILL"]


@dataclass(eq=False)
class ReturnInstance:
    """``struct return_instance``."""

    uprobe: object = None
    func: int = 0
    stack: int = 0
    orig_ret_vaddr: int = 0
    chained: bool = False
    consumers: list = field(default_factory=list)      # [(consumer id, cookie)]

    def reset(self) -> None:
        self.uprobe, self.consumers = None, []


class Uretprobes:
    def __init__(self, uprobes):
        self.uprobes = uprobes
        self.machine = uprobes.machine
        self.profile = uprobes.profile
        self.bytes_held = 0

    @property
    def counters(self):
        return self.machine.counters

    # -- allocation policies -----------------------------------------------------------
    def alloc_return_instance(self, task) -> ReturnInstance:
        utask = self.uprobes.utask(task)
        policy = self.profile.ri_alloc
        if policy == "pool" and utask.ri_pool:
            self.counters.ri_reused += 1
            return utask.ri_pool.pop()
        if policy == "array64":
            if utask.ri_array is None:      # first use: the whole array at once
                utask.ri_array = [ReturnInstance() for _ in range(MAX_URETPROBE_DEPTH)]
                self.counters.ri_allocated += MAX_URETPROBE_DEPTH
                self._hold(MAX_URETPROBE_DEPTH * RI_SIZEOF)
            if utask.ri_array:
                self.counters.ri_reused += 1
                return utask.ri_array.pop()
            return ReturnInstance()        # scratch for a hit that will be dropped for depth
        self.counters.ri_allocated += 1
        self._hold(RI_SIZEOF)
        return ReturnInstance()

    def free_ret_instance(self, task, ri: ReturnInstance) -> None:
        policy = self.profile.ri_alloc
        extra = max(0, len(ri.consumers) - 1) * RI_CONSUMER_SIZEOF
        ri.reset()
        if policy == "array64":
            utask = self.uprobes.utask(task)
            if utask.ri_array is not None and len(utask.ri_array) + utask.depth < MAX_URETPROBE_DEPTH:
                utask.ri_array.append(ri)
            return
        if policy == "pool":
            self.uprobes.utask(task).ri_pool.append(ri)
            return
        self.counters.ri_freed += 1
        self.bytes_held -= RI_SIZEOF + extra

    def _hold(self, n: int) -> None:
        self.bytes_held += n
        if self.bytes_held > self.counters.ri_peak_bytes:
            self.counters.ri_peak_bytes = self.bytes_held

    # -- entry side ------------------------------------------------------------------
    def prepare_uretprobe(self, uprobe, task, regs, ri: ReturnInstance) -> None:
        """Hijack the return address at the entry hit, before the probed insn runs."""
        utask = self.uprobes.utask(task)
        area = self.uprobes.get_xol_area(task.process)
        if utask.depth >= MAX_URETPROBE_DEPTH:
            self.counters.ri_dropped_depth += 1
            self.uprobes.emit("uretprobe_depth", task=task, uprobe=uprobe)
            self._drop(task, ri)
            return
        tramp = area.vaddr
        orig = arch.arch_uretprobe_hijack_return_addr(tramp, regs, task.process.mem)
        if orig is None:
            self._drop(task, ri)
            return
        chained = orig == tramp
        self.cleanup_return_instances(task, utask, chained, regs)
        if chained:
            if not utask.return_instances:
                self._drop(task, ri)   # "failed to handle tail call": the return SIGILLs
                return
            orig = utask.return_instances[-1].orig_ret_vaddr
        ri.uprobe, ri.func, ri.stack = uprobe, regs.rip, regs.rsp
        ri.orig_ret_vaddr, ri.chained = orig, chained
        if len(ri.consumers) > 1:
            self._hold(RI_CONSUMER_SIZEOF * (len(ri.consumers) - 1))
        utask.depth += 1
        utask.return_instances.append(ri)
        self.uprobes.emit("uretprobe_hijack", task=task, uprobe=uprobe, stack=ri.stack,
                          orig=orig, chained=chained, tramp=tramp)

    def _drop(self, task, ri: ReturnInstance) -> None:
        self.free_ret_instance(task, ri)

    def cleanup_return_instances(self, task, utask, chained: bool, regs) -> None:
        ctx = arch.RP_CHECK_CHAIN_CALL if chained else arch.RP_CHECK_CALL
        stack = utask.return_instances
        while stack and not arch.arch_uretprobe_is_alive(stack[-1], ctx, regs):
            ri = stack.pop()
            utask.depth -= 1
            self.uprobes.emit("ri_discarded", task=task, ri=ri)
            self.free_ret_instance(task, ri)

    # -- return side ----------------------------------------------------------------
    def handle_trampoline(self, task, regs) -> None:
        """``uprobe_handle_trampoline``: ip <- original return address, then the return
        handlers of the whole chain, newest first; stale chains dropped silently."""
        utask = task.utask
        if utask is None or not utask.return_instances:
            self.machine.force_sig(task, SIGILL, detail="uretprobe trampoline without a "
                                   "return instance", regs=regs)
            return
        stack = utask.return_instances
        while True:
            i = len(stack) - 1
            while i > 0 and stack[i].chained:
                i -= 1
            chain = stack[i:][::-1]                         # newest first
            next_chain = stack[i - 1] if i > 0 else None
            valid = next_chain is None or arch.arch_uretprobe_is_alive(next_chain, arch.RP_CHECK_RET,
                                                                       regs)
            regs.rip = chain[0].orig_ret_vaddr
            del stack[i:]
            utask.depth -= len(chain)
            for ri in chain:
                if valid:
                    self.counters.uretprobe_hits += 1
                    self.handle_uretprobe_chain(task, ri, regs)
                else:
                    self.uprobes.emit("ri_discarded", task=task, ri=ri)
                self.free_ret_instance(task, ri)
            if valid or not stack:
                break
        self.uprobes.emit("uretprobe_return", task=task, new_ip=regs.rip)

    def handle_uretprobe_chain(self, task, ri: ReturnInstance, regs) -> None:
        from .uprobes import UprobeContext
        uprobe = ri.uprobe
        if uprobe is None:
            return
        recorded = dict(ri.consumers)
        sessions = self.profile.session_consumers
        for uc in list(uprobe.consumers):
            if uc.ret_handler is None or not uc.enabled:
                continue
            if sessions and uc.is_session:
                if uc.id not in recorded:
                    continue
                cookie = recorded[uc.id]
            else:
                cookie = None
            ctx = UprobeContext(self.machine, task, regs, uprobe, uc, ri.func, func=ri.func,
                                cookie=cookie, is_return=True)
            uc.ret_handler(ctx)
            self.uprobes.emit("ret_handler", task=task, consumer=uc, func=ri.func, ret=regs.rip)

    # -- sys_uretprobe (x86_64 syscall 335, 6.11+) ------------------------------------
    def sys_uretprobe(self, task, regs, *_args):
        mm = task.process.mm_uprobes
        area = mm.xol_area if mm else None
        if area is None or regs.rip != area.vaddr + arch.URETPROBE_SYSCALL_CHECK:
            self.machine.force_sig(task, SIGILL, detail="uretprobe syscall outside the trampoline",
                                   regs=regs)
            return None
        mem = task.process.mem
        try:
            r11, cx, ax = (mem.read_u64(regs.rsp + 8 * i) for i in range(3))
        except GuestFault:
            self.machine.force_sig(task, SIGILL, detail="uretprobe syscall: bad stack", regs=regs)
            return None
        regs.r11, regs.rcx, regs.rax = r11, cx, ax
        regs.rsp += 24
        regs.orig_rax = -1
        ip, sp = regs.rip, regs.rsp
        self.uprobes.emit("sys_uretprobe", task=task)
        self.handle_trampoline(task, regs)
        if regs.rsp != sp:
            return regs.rax              # a consumer moved sp: full pt_regs (IRET) return
        regs.rsp -= 24
        try:
            for i, v in enumerate((regs.r11, regs.rcx, regs.rip)):
                mem.write_u64(regs.rsp + 8 * i, v)
        except GuestFault:
            self.machine.force_sig(task, SIGILL, detail="uretprobe syscall: bad stack", regs=regs)
            return None
        regs.rip = ip
        regs.r11 = regs.eflags           # ensure SYSRET
        regs.rcx = regs.rip
        return regs.rax
