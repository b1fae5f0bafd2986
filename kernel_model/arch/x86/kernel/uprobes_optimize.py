"""Optimized uprobes: a probed 5-byte nop (6.18-7.2) or 10-byte nop (7.3+) is rewritten
into a ``call`` into a ``[uprobes-trampoline]`` page that enters the kernel through the
``uprobe`` syscall (336) instead of an int3 trap.

Mirrors arch/x86/kernel/uprobes.c: ``arch_uprobe_optimize`` (on the first hit, after
the handlers), the three-step int3 patching protocol of ``swbp_optimize`` /
``swbp_unoptimize``, trampoline placement (``find_nearest_trampoline``: the free gap
nearest to the call within rel32 reach, reused per mm, never unmapped) and
``sys_uprobe``.
"""

from __future__ import annotations

import errno
import struct

from kernel_model.arch.x86.lib.insn import NOP5, NOP10
from kernel_model.kernel.signals import SIGNALS
from kernel_model.mm.mm_types import PAGE_SIZE, PROT_EXEC, PROT_READ, TASK_SIZE, GuestFault
from kernel_model.trace import events as ev

SIGILL = SIGNALS["SIGILL"]
TRAMPOLINE_NAME = "[uprobes-trampoline]"
INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)

# push %rcx; push %r11; push %rax; mov $336,%rax; syscall; pop %rax; pop %r11; pop %rcx;
# ret (nop5) / ret $0x80 (nop10); int3
_TRAMP_HEAD = bytes.fromhex("5141535048c7c0500100000f0558415b59")
UPROBE_TRAMPOLINE_NOP5 = _TRAMP_HEAD + b"\xc3\xcc"
UPROBE_TRAMPOLINE_NOP10 = _TRAMP_HEAD + b"\xc2\x80\x00\xcc"
SYSCALL_RETURN_OFFSET = 13  # ip after the trampoline's syscall
LEA_RSP_MINUS_0X80 = bytes.fromhex("488d642480")


class Design:
    """The per-profile constants of one optimization generation."""

    def __init__(self, kind: str):
        self.kind = kind
        self.size = 5 if kind == "nop5" else 10  # OPT_INSN_SIZE
        self.redzone = 0 if kind == "nop5" else 0x80
        self.nop = NOP5 if kind == "nop5" else NOP10
        self.trampoline = UPROBE_TRAMPOLINE_NOP5 if kind == "nop5" else UPROBE_TRAMPOLINE_NOP10
        self.call_offset = 0 if kind == "nop5" else 5  # where E8 sits

    def optimized_bytes(self, vaddr: int, tramp: int) -> bytes:
        call = vaddr + self.call_offset
        rel = (tramp - (call + 5)) & 0xFFFFFFFF
        head = b"" if self.kind == "nop5" else LEA_RSP_MINUS_0X80
        return head + b"\xe8" + rel.to_bytes(4, "little")


class Optimizer:
    def __init__(self, kernel):
        self.kernel = kernel
        self.machine = kernel.machine
        self.profile = kernel.profile
        self.design = Design(self.profile.optimize) if self.profile.optimize else None
        self.events = kernel.machine.events

    @property
    def counters(self):
        return self.machine.counters

    # -- trampolines -----------------------------------------------------------------
    def trampolines(self, proc) -> list:
        return [v for v in proc.mem.vmas if v.special and v.name == TRAMPOLINE_NAME]

    def in_trampoline(self, proc, addr: int) -> bool:
        vma = proc.mem.find_vma(addr)
        return vma is not None and vma.special and vma.name == TRAMPOLINE_NAME

    @staticmethod
    def arch_uprobe_is_callable(tramp: int, vaddr: int, size: int) -> bool:
        """Can a ``call`` at vaddr (rel32) reach the trampoline?"""
        delta = vaddr + size - tramp
        return INT32_MIN <= delta <= INT32_MAX

    def get_uprobe_trampoline(self, proc, vaddr: int) -> int | None:
        """Reuse a reachable trampoline of this mm, else map a new one nearby."""
        size = self.design.size
        for vma in self.trampolines(proc):
            if self.arch_uprobe_is_callable(vma.start, vaddr, size):
                return vma.start
        where = self.find_nearest_trampoline(proc, vaddr + size)
        if where is None:
            return None
        proc.mem.map(where, PAGE_SIZE, PROT_READ | PROT_EXEC, TRAMPOLINE_NAME, special=True)
        proc.mem.text_poke(where, self.design.trampoline, count=False)
        if self.events:
            self.events.publish(ev.TrampolineMapped(where))
        return where

    def find_nearest_trampoline(self, proc, call_end: int) -> int | None:
        """The free page nearest to ``call_end`` searching up and down (top-down)."""
        mem = proc.mem
        up_lo = (call_end + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1)
        up_hi = min(call_end + INT32_MAX, TASK_SIZE)
        down_hi = call_end & ~(PAGE_SIZE - 1)
        down_lo = max(call_end + INT32_MIN, PAGE_SIZE)
        above = below = None
        a = up_lo
        while a + PAGE_SIZE <= up_hi:
            vma = next((v for v in mem.vmas if v.start < a + PAGE_SIZE and a < v.end), None)
            if vma is None:
                above = a
                break
            a = vma.end
        b = down_hi - PAGE_SIZE
        while b >= down_lo:
            vma = next((v for v in mem.vmas if v.start < b + PAGE_SIZE and b < v.end), None)
            if vma is None:
                below = b
                break
            b = (vma.start - PAGE_SIZE) & ~(PAGE_SIZE - 1)
        if above is None:
            return below
        if below is None:
            return above
        return above if above - call_end <= call_end - below else below

    # -- site state ------------------------------------------------------------------
    def _eligible(self, uprobe) -> bool:
        return self.design is not None and uprobe.arch is not None and uprobe.arch.can_optimize

    def is_optimized(self, proc, uprobe, vaddr: int) -> bool:
        """The site holds the optimized call into a trampoline of this mm."""
        if not self._eligible(uprobe):
            return False
        d = self.design
        try:
            site = proc.mem.read(vaddr, d.size)
        except GuestFault:
            return False
        if d.kind == "nop10" and site[:5] != LEA_RSP_MINUS_0X80:
            return False
        call = vaddr + d.call_offset
        if site[d.call_offset] != 0xE8:
            return False
        rel = int.from_bytes(site[d.call_offset + 1 : d.call_offset + 5], "little", signed=True)
        return self.in_trampoline(proc, call + 5 + rel)

    def should_optimize(self, uprobe) -> bool:
        """ARCH_UPROBE_FLAG_CAN_OPTIMIZE set and ARCH_UPROBE_FLAG_OPTIMIZE_FAIL clear."""
        return self._eligible(uprobe) and not uprobe.optimize_fail

    # -- optimize / unoptimize -----------------------------------------------------------
    def arch_uprobe_optimize(self, task, uprobe, vaddr: int) -> None:
        """On the first hit in an mm, after the handlers, in the hitting task; the
        re-check that the site still holds the int3 (another thread may have optimized
        it), then ``__arch_uprobe_optimize`` / ``swbp_optimize``."""
        if not self.should_optimize(uprobe):
            return
        proc = task.process
        mem = proc.mem
        if mem.read(vaddr, 1) != b"\xcc":
            return
        d = self.design
        tramp = self.get_uprobe_trampoline(proc, vaddr)
        if tramp is None:
            uprobe.optimize_fail = True
            self.counters.optimize_failed += 1
            if self.events:
                self.events.publish(ev.OptimizeFailed(vaddr))
            return
        new = d.optimized_bytes(vaddr, tramp)
        # int3 protocol: byte 0 is int3 already; write the tail, then byte 0
        mem.text_poke(vaddr + 1, new[1:])
        if self.events:
            self.events.publish(ev.TextPoke(vaddr + 1, new[1:], "optimize: tail bytes"))
        mem.text_poke(vaddr, new[:1])
        if self.events:
            self.events.publish(ev.TextPoke(vaddr, new[:1], "optimize: first byte"))
        self.counters.optimized += 1
        if self.events:
            self.events.publish(ev.Optimized(vaddr, tramp))

    def swbp_unoptimize(self, proc, uprobe, vaddr: int) -> None:
        """The reverse protocol for an optimized site (x86 ``set_orig_insn`` calls it
        when ``is_optimized``): int3 on byte 0, the original tail, then byte 0."""
        d = self.design
        mem = proc.mem
        orig = uprobe.file.read(uprobe.offset, d.size)
        mem.text_poke(vaddr, b"\xcc")
        if self.events:
            self.events.publish(ev.TextPoke(vaddr, b"\xcc", "unoptimize: int3"))
        mem.text_poke(vaddr + 1, orig[1:5])
        if self.events:
            self.events.publish(ev.TextPoke(vaddr + 1, orig[1:5], "unoptimize: nop bytes"))
        mem.text_poke(vaddr, orig[:1])
        if self.events:
            self.events.publish(ev.TextPoke(vaddr, orig[:1], "unoptimize: first byte"))
        self.counters.unoptimized += 1

    # -- sys_uprobe (336) -------------------------------------------------------------
    def sys_uprobe(self, task, regs, *args):
        proc = task.process
        if self.design is None or not self.in_trampoline(proc, regs.rip):
            how = self.profile.uprobe_syscall_outside
            if how == "SIGILL":
                self.machine.send_sig(task, SIGILL, detail="uprobe syscall outside a trampoline")
                return None
            return -getattr(errno, how)
        d = self.design
        mem = proc.mem
        try:
            ax, r11, cx, retaddr = struct.unpack("<4Q", mem.read_user(regs.rsp, 32))  # uprobe_syscall_args
        except GuestFault:
            self.machine.send_sig(task, SIGILL, detail="uprobe syscall: bad stack")
            return None
        tramp_ret = regs.rip
        regs.rax, regs.r11, regs.rcx = ax, r11, cx
        regs.rip = retaddr - d.size
        regs.rsp += 32 + d.redzone
        regs.orig_rax = -1
        ip, sp = regs.rip, regs.rsp
        self.counters.uprobe_syscalls += 1
        if self.events:
            self.events.publish(ev.SysUprobe(task, ip))
        self.handle_syscall_uprobe(task, regs, ip)
        if regs.rsp != sp:
            if regs.rip == ip:
                regs.rip += d.size
            return regs.rax  # full pt_regs return, trampoline bypassed
        regs.rsp -= 32 + d.redzone
        target = retaddr if regs.rip == ip else regs.rip
        try:
            mem.write_user(
                regs.rsp,
                struct.pack("<4Q", regs.rax & 0xFFFFFFFFFFFFFFFF, regs.r11, regs.rcx, target & 0xFFFFFFFFFFFFFFFF),
            )
        except GuestFault:
            self.machine.send_sig(task, SIGILL, detail="uprobe syscall: bad stack")
            return None
        regs.rip = tramp_ret
        regs.r11 = regs.eflags
        regs.rcx = regs.rip
        return 0

    def handle_syscall_uprobe(self, task, regs, vaddr: int) -> None:
        """``handle_syscall_uprobe``: the hit of an optimized site, under the entry
        lifetime's read side (recorded when the machine records its accesses)."""
        up = self.kernel.uprobes
        sync = up.sync
        if sync.log is not None:
            idx = sync.handle_swbp_enter(task)
            uprobe = up.find_active_uprobe(task.process, vaddr)
            sync.find_active_uprobe(task, task.process, uprobe)
            self._handle_syscall_uprobe(task, regs, vaddr, uprobe, sync)
            sync.handle_swbp_exit(task, uprobe, idx)
            return
        self._handle_syscall_uprobe(task, regs, vaddr, up.find_active_uprobe(task.process, vaddr), None)

    def _handle_syscall_uprobe(self, task, regs, vaddr: int, uprobe, sync) -> None:
        up = self.kernel.uprobes
        if uprobe is None:
            return
        up.utask(task)
        self.counters.uprobe_hits += 1
        uprobe.hits += 1
        if self.events:
            self.events.publish(ev.UprobeHit(task, uprobe, vaddr))
        up.run_chain(uprobe, task, regs, vaddr, sync)
