"""Optimized uprobes (nop5 / nop10 sites rewritten to call the uprobe-syscall
trampoline).  Placeholder until the optimized-uprobes work lands: nothing is ever
optimized, and syscall 336 behaves as from outside a trampoline."""

from __future__ import annotations

import errno

from emu.signals import SIGNALS


class Optimizer:
    def __init__(self, kernel):
        self.kernel = kernel

    def is_optimized(self, proc, uprobe, vaddr) -> bool:
        return False

    def remove(self, proc, uprobe, vaddr) -> bool:
        return False

    def arch_uprobe_optimize(self, task, uprobe, vaddr) -> None:
        return None

    def sys_uprobe(self, task, regs, *args):
        how = self.kernel.profile.uprobe_syscall_outside
        if how == "SIGILL":
            self.kernel.machine.force_sig(task, SIGNALS["SIGILL"], detail="uprobe syscall outside "
                                          "a trampoline", regs=regs)
            return None
        return -getattr(errno, how)
