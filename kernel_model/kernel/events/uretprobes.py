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

``RI_SIZEOF`` models ``sizeof(struct return_instance)`` on x86_64 as declared in
include/linux/uprobes.h since the ri_pool series (6.14; checked against the header):
hprobe {enum hprobe_state 4 + srcu_idx 4, uprobe* 8} = 16, func 8, stack 8,
orig_ret_vaddr 8, chained 1 (+3 pad), cons_cnt 4, next* 8, rcu_head {next*, func*} 16,
consumer {cookie 8, id 8} = 16, extra_consumers* 8 = 96 bytes, rounded up to the 64-byte
``____cacheline_aligned`` of the struct: 128.  (Older kernels had smaller instances - 6.10:
uprobe*, func, stack, orig_ret_vaddr, chained, next = 48 bytes, no alignment - the model
uses the current size for every policy so that policies compare like for like.)
Session consumers beyond the first live in ``extra_consumers``, an array that
``push_consumer`` grows with ``krealloc`` to ``cons_cnt - 1`` entries of 16 bytes; the array
stays with the instance while it sits in the pool (``ri_pool_push`` only resets
``cons_cnt``) and is freed with it (``ri_free``).
"""

from __future__ import annotations

import struct

from kernel_model.arch.x86.kernel import uprobes as arch
from kernel_model.kernel.events.uprobes_types import MAX_URETPROBE_DEPTH, ReturnInstance, UprobeContext
from kernel_model.kernel.signals import SIGNALS
from kernel_model.mm.mm_types import GuestFault
from kernel_model.trace import events as ev

_SYSCALL_ARGS = struct.Struct("<3Q")  # struct uretprobe_syscall_args: r11, cx, ax

RI_SIZEOF = 128
RI_CONSUMER_SIZEOF = 16
SIGILL = SIGNALS["SIGILL"]
_MASK64 = 0xFFFFFFFFFFFFFFFF


class Uretprobes:
    def __init__(self, uprobes):
        self.uprobes = uprobes
        self.machine = uprobes.machine
        self.profile = uprobes.profile
        self.bytes_held = 0
        self.events = uprobes.events
        self._rc_exact = self.profile.handler_chain_rc == "exact"  # (profiles are frozen)
        self._pool = self.profile.ri_alloc == "pool"

    @property
    def counters(self):
        return self.machine.counters

    # -- allocation policies -----------------------------------------------------------
    def alloc_return_instance(self, task) -> ReturnInstance:
        """``alloc_return_instance``: called by handler_chain for the first consumer that
        wants a return, before ``prepare_uretprobe`` checks the depth (6.13+, since the
        session-consumer rework: profile switch ``handler_chain_rc`` "exact").  Before
        that, handler_chain only noted that a return probe was wanted (``need_prep``) and
        ``prepare_uretprobe`` allocated after its depth check: the instance handed out
        here is then a stand-in, replaced in :meth:`prepare_uretprobe`."""
        if not self._rc_exact:
            return ReturnInstance(scratch=True)
        utask = task.utask
        if self._pool and utask is not None and utask.ri_pool:  # _alloc's ri_pool_pop, inline
            self.machine.counters.ri_reused += 1
            return utask.ri_pool.pop()
        return self._alloc(task)

    def _alloc(self, task) -> ReturnInstance:
        utask = task.utask or self.uprobes.utask(task)
        policy = self.profile.ri_alloc
        if policy == "pool" and utask.ri_pool:
            self.machine.counters.ri_reused += 1
            return utask.ri_pool.pop()
        if policy == "array64":
            if utask.ri_array is None:  # first use: the whole array at once
                utask.ri_array = [ReturnInstance() for _ in range(MAX_URETPROBE_DEPTH)]
                self.counters.ri_allocated += MAX_URETPROBE_DEPTH
                self._hold(MAX_URETPROBE_DEPTH * RI_SIZEOF)
            if utask.ri_array:
                self.counters.ri_reused += 1
                return utask.ri_array.pop()
            # all 64 in use: this hit is about to be dropped for depth (the proposal
            # checked the depth before taking a slot); a stand-in, never counted
            return ReturnInstance(scratch=True)
        self.counters.ri_allocated += 1
        self._hold(RI_SIZEOF)
        return ReturnInstance()

    def push_consumers_memory(self, ri: ReturnInstance) -> None:
        """The ``krealloc`` of ``extra_consumers`` done by ``push_consumer``: grow the
        array to ``cons_cnt - 1`` entries if it is smaller; it never shrinks."""
        need = max(0, len(ri.consumers) - 1) * RI_CONSUMER_SIZEOF
        if need > ri.extra_bytes and not ri.scratch:
            self._hold(need - ri.extra_bytes)
            ri.extra_bytes = need

    def free_ret_instance(self, task, ri: ReturnInstance) -> None:
        """``free_ret_instance``: back to the pool / array, or ``ri_free`` (kmalloc)."""
        policy = self.profile.ri_alloc
        ri.reset()
        if ri.scratch:
            return
        if policy == "array64":
            utask = task.utask or self.uprobes.utask(task)
            if utask.ri_array is not None and len(utask.ri_array) + utask.depth < MAX_URETPROBE_DEPTH:
                utask.ri_array.append(ri)
            return
        if policy == "pool":
            (task.utask or self.uprobes.utask(task)).ri_pool.append(ri)  # ri_pool_push
            return
        self.counters.ri_freed += 1  # ri_free: kfree both
        self.bytes_held -= RI_SIZEOF + ri.extra_bytes
        ri.extra_bytes = 0

    def _hold(self, n: int) -> None:
        self.bytes_held += n
        if self.bytes_held > self.counters.ri_peak_bytes:
            self.counters.ri_peak_bytes = self.bytes_held

    # -- entry side ------------------------------------------------------------------
    def prepare_uretprobe(self, uprobe, task, regs, ri: ReturnInstance) -> None:
        """``prepare_uretprobe``: hijack the return address at the entry hit, before the
        probed instruction runs (depth limit, chaining, cleanup of dead instances)."""
        utask = task.utask or self.uprobes.utask(task)
        if len(ri.consumers) > 1:  # handler_chain's push_consumer calls, done
            self.push_consumers_memory(ri)
        area = task.process.mm_uprobes.xol_area or self.uprobes.get_xol_area(task.process)
        if area is None:  # no XOL area: no trampoline, drop silently
            self._drop(task, ri)
            return
        if utask.depth >= MAX_URETPROBE_DEPTH:
            self.counters.ri_dropped_depth += 1
            if self.events.active:
                self.events.publish(ev.UretprobeDepth(task, uprobe))
            self._drop(task, ri)
            return
        if ri.scratch and self.profile.handler_chain_rc != "exact":
            # <= 6.12: kmalloc (or the policy's equivalent) only now, past the depth check
            consumers, ri = ri.consumers, self._alloc(task)
            ri.consumers = consumers
        tramp = area.vaddr
        orig = arch.arch_uretprobe_hijack_return_addr(tramp, regs, task.process.mem)
        if orig is None:
            self._drop(task, ri)
            return
        chained = orig == tramp
        if utask.return_instances:
            self.cleanup_return_instances(task, utask, chained, regs)
        if chained:
            if not utask.return_instances:
                self._drop(task, ri)  # "failed to handle tail call": the return SIGILLs
                return
            orig = utask.return_instances[-1].orig_ret_vaddr
        ri.uprobe, ri.func, ri.stack = uprobe, regs.rip, regs.rsp
        ri.orig_ret_vaddr, ri.chained = orig, chained
        utask.depth += 1
        utask.return_instances.append(ri)
        sync = self.uprobes.sync
        if sync.log is not None:
            lease = sync.prepare_uretprobe(task, uprobe)
            ri.lease = -1 if lease is None else lease
        if self.events.active:
            self.events.publish(ev.UretprobeHijack(task, uprobe, ri.stack, orig, chained, tramp))

    def _drop(self, task, ri: ReturnInstance) -> None:
        self.free_ret_instance(task, ri)

    def cleanup_return_instances(self, task, utask, chained: bool, regs) -> None:
        """``cleanup_return_instances``: pop instances whose frames are gone (longjmp)."""
        ctx = arch.RP_CHECK_CHAIN_CALL if chained else arch.RP_CHECK_CALL
        stack = utask.return_instances
        while stack and not arch.arch_uretprobe_is_alive(stack[-1], ctx, regs):
            ri = stack.pop()
            utask.depth -= 1
            if self.events.active:
                self.events.publish(ev.RiDiscarded(task, ri))
            if ri.lease is not None and self.uprobes.sync.log is not None:
                self.uprobes.sync.free_ret_instance(task, ri.uprobe, None if ri.lease == -1 else ri.lease)
            self.free_ret_instance(task, ri)

    # -- return side ----------------------------------------------------------------
    def uprobe_handle_trampoline(self, task, regs, sync=None) -> None:
        """``uprobe_handle_trampoline``: ip <- original return address, then the return
        handlers of the whole chain, newest first; stale chains dropped silently.  A
        machine that records its shared-memory accesses comes back here with ``sync``
        inside the read side of the consumers' walk (``handle_trampoline``)."""
        utask = task.utask
        if utask is None or not utask.return_instances:
            self.machine.send_sig(task, SIGILL, detail="uretprobe trampoline without a return instance")
            return
        if sync is None and self.uprobes.sync.log is not None:
            sync = self.uprobes.sync
            idx = sync.handle_trampoline_enter(task)
            self.uprobe_handle_trampoline(task, regs, sync)
            sync.handle_trampoline_exit(task, idx)
            return
        stack = utask.return_instances
        if (
            len(stack) == 1
            or not stack[-1].chained
            and arch.arch_uretprobe_is_alive(stack[-2], arch.RP_CHECK_RET, regs)
        ):
            # the common case: one instance, not chained, its caller's frame alive
            ri = stack.pop()
            utask.depth -= 1
            regs.rip = ri.orig_ret_vaddr
            self.machine.counters.uretprobe_hits += 1
            self.handle_uretprobe_chain(task, ri, regs)
            if sync is not None:
                self._sync_return(sync, task, ri)
            self.free_ret_instance(task, ri)
            if self.events.active:
                self.events.publish(ev.UretprobeReturn(task, regs.rip))
            return
        while True:
            i = len(stack) - 1
            while i > 0 and stack[i].chained:
                i -= 1
            chain = stack[i:][::-1]  # newest first
            next_chain = stack[i - 1] if i > 0 else None
            valid = next_chain is None or arch.arch_uretprobe_is_alive(next_chain, arch.RP_CHECK_RET, regs)
            regs.rip = chain[0].orig_ret_vaddr
            for ri in chain:
                # unlinked one at a time, each before its own handlers run: a handler of
                # the tail-called function still sees its caller's chained instance
                stack.pop()
                utask.depth -= 1
                if valid:
                    self.machine.counters.uretprobe_hits += 1
                    self.handle_uretprobe_chain(task, ri, regs)
                else:
                    if self.events.active:
                        self.events.publish(ev.RiDiscarded(task, ri))
                if sync is not None:
                    self._sync_return(sync, task, ri)
                self.free_ret_instance(task, ri)
            if valid or not stack:
                break
        if self.events.active:
            self.events.publish(ev.UretprobeReturn(task, regs.rip))

    def handle_trampoline(self, task, regs) -> bool:
        """``uprobe_handle_trampoline`` in its common case, the one a return probe takes
        almost always: the newest instance is not chained (no tail call) and either
        alone or with its caller's frame still alive, so the kernel's loop pops exactly
        that one, sets ip to its return address and runs its consumers
        (``handle_uretprobe_chain``, specialised per uprobe: :meth:`specialize_ret_chain`)
        before ``free_ret_instance``.  Taken only with no events bus listening and no
        recorded accesses (the general path publishes and records); False when this is
        not the common case - nothing was done, the general path runs."""
        utask = task.utask
        if utask is None or self.events.active or not self.uprobes.specialized or self.uprobes.sync.log is not None:
            return False
        stack = utask.return_instances
        n = len(stack)
        if n != 1 and (
            not n or stack[-1].chained or not arch.arch_uretprobe_is_alive(stack[-2], arch.RP_CHECK_RET, regs)
        ):
            return False
        ri = stack.pop()
        utask.depth -= 1
        regs.rip = ri.orig_ret_vaddr
        self.machine.counters.uretprobe_hits += 1
        uprobe = ri.uprobe
        if uprobe is not None:
            chain = uprobe.ret_chain
            if chain is None:
                chain = uprobe.ret_chain = self.specialize_ret_chain(uprobe)
            chain(task, ri, regs)
        if self._pool and not ri.scratch:  # free_ret_instance: ri_pool_push, inline
            ri.uprobe, ri.consumers, ri.lease = None, [], None
            utask.ri_pool.append(ri)
        else:
            self.free_ret_instance(task, ri)
        return True

    def specialize_ret_chain(self, uprobe):
        """``handle_uretprobe_chain`` as this uprobe's consumers make it, decided once per
        change of the consumer list (cleared with ``uprobe.chain``), as
        ``Uprobes.specialize_chain`` does for the entry: one return-only consumer - a
        uretprobe, a perf or BPF return probe - is called without the loop, the
        membership checks and the session lookup, through its owner's specialised
        handler when it has one (``fast_ret_handler``: a program-only trace event);
        any other list gets the general :meth:`handle_uretprobe_chain`.  Same effects,
        counts and events."""
        consumers = uprobe.consumers
        if not self.uprobes.specialized or len(consumers) != 1:
            return self.handle_uretprobe_chain
        uc = consumers[0]
        if uc.ret_handler is None or uc.handler is not None:
            return self.handle_uretprobe_chain  # no return work, or a session consumer
        handler = uc.fast_ret_handler or uc.ret_handler
        machine, bus = self.machine, self.events

        def handle_uretprobe_chain_one(task, ri, regs):
            if not uc.enabled:
                return
            ctx = uc.ret_ctx
            if ctx is None:
                ctx = uc.ret_ctx = UprobeContext(
                    machine, task, regs, ri.uprobe, uc, ri.func, func=ri.func, cookie=None, is_return=True
                )
            else:
                ctx.machine, ctx.task, ctx._regs, ctx.uprobe = machine, task, regs, ri.uprobe
                ctx.vaddr = ctx.func = ri.func
                ctx.cookie = None
            handler(ctx)
            if bus.active:
                bus.publish(ev.RetHandlerRan(task, uc, ri.func, regs.rip))

        return handle_uretprobe_chain_one

    @staticmethod
    def _sync_return(sync, task, ri: ReturnInstance) -> None:
        """The recorded return side of one instance: the consumer walk's lock, then the
        instance's hold on the uprobe released (``put_uprobe`` / ``hprobe_finalize``)."""
        if ri.uprobe is None or ri.lease is None:
            return
        sync.handle_uretprobe_chain(task, ri.uprobe)
        sync.free_ret_instance(task, ri.uprobe, None if ri.lease == -1 else ri.lease)

    def handle_uretprobe_chain(self, task, ri: ReturnInstance, regs) -> None:
        """``handle_uretprobe_chain``: the live consumers' return handlers, list order;
        session consumers only if recorded at entry (with their cookie)."""
        uprobe = ri.uprobe
        if uprobe is None:
            return
        recorded = dict(ri.consumers) if ri.consumers else {}
        sessions = self.profile.session_consumers
        consumers = uprobe.consumers
        first = True
        for uc in tuple(consumers):
            # list_for_each_entry_rcu, as in handler_chain: a consumer added meanwhile
            # (at the head) is not visited, one removed by an earlier handler is skipped
            if not first and uc not in consumers:
                continue
            first = False
            if uc.ret_handler is None or not uc.enabled:
                continue
            if sessions and uc.handler is not None:  # uc.is_session (it has a ret_handler)
                if uc.id not in recorded:
                    continue
                cookie = recorded[uc.id]
            else:
                cookie = None
            ctx = uc.ret_ctx  # made once per consumer, reused (see handler_chain)
            if ctx is None:
                ctx = uc.ret_ctx = UprobeContext(
                    self.machine, task, regs, uprobe, uc, ri.func, func=ri.func, cookie=cookie, is_return=True
                )
            else:
                ctx.machine, ctx.task, ctx._regs, ctx.uprobe = self.machine, task, regs, uprobe
                ctx.vaddr = ctx.func = ri.func
                ctx.cookie = cookie
            uc.ret_handler(ctx)
            if self.events.active:
                self.events.publish(ev.RetHandlerRan(task, uc, ri.func, regs.rip))

    # -- sys_uretprobe (x86_64 syscall 335, 6.11+) ------------------------------------
    def sys_uretprobe(self, task, regs, *_args):
        """x86 ``sys_uretprobe`` (arch/x86/kernel/uprobes.c), entered from the trampoline's syscall.

        Its ``sigill:`` exit forces SIGILL and returns -1.  With no return instance,
        uprobe_handle_trampoline only queues its SIGILL: the syscall goes on and
        copies the saved registers back (the ax slot gets regs->ip, still the check
        address), as the 6.18 host does (tests/test_uretprobe_syscall_sigill.py)."""
        mm = task.process.mm_uprobes
        area = mm.xol_area if mm else None
        if area is None or regs.rip != area.vaddr + arch.URETPROBE_SYSCALL_CHECK:
            return self._sys_uretprobe_sigill(task, "uretprobe syscall outside the trampoline")
        mem = task.process.mem
        args_at = regs.rsp
        try:
            r11, cx, ax = mem.read_user_struct(_SYSCALL_ARGS, args_at)  # struct uretprobe_syscall_args
        except GuestFault:
            return self._sys_uretprobe_sigill(task, "uretprobe syscall: bad stack")
        regs.r11, regs.rcx, regs.rax = r11, cx, ax
        regs.rsp = sp = (args_at + 24) & _MASK64
        regs.orig_rax = -1
        ip = regs.rip
        if self.events.active:
            self.events.publish(ev.SysUretprobe(task))
        if not self.handle_trampoline(task, regs):
            self.uprobe_handle_trampoline(task, regs)
        # (the syscall returns regs->ax: None leaves rax as the handlers left it)
        if regs.rsp != sp:
            return None  # a consumer moved sp: full pt_regs (IRET) return
        regs.rsp = args_at
        ret_ip = regs.rip & _MASK64  # args.ax: where the trampoline's ret goes
        regs.rip = ip
        try:
            mem.write_user_struct(_SYSCALL_ARGS, args_at, regs.r11, regs.rcx, ret_ip)
        except GuestFault:
            return self._sys_uretprobe_sigill(task, "uretprobe syscall: bad stack")
        regs.r11 = regs.eflags  # ensure SYSRET
        regs.rcx = ip
        return None

    def _sys_uretprobe_sigill(self, task, detail: str) -> int:
        """sys_uretprobe's ``sigill:`` label: force_sig(SIGILL), return -1."""
        self.machine.send_sig(task, SIGILL, detail=detail)
        return -1
