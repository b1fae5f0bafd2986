"""The modeled kernel of one machine: its profile, the uprobes subsystem, and the
trap entry points the machine calls (the kernel's do_int3 / exc_debug notifiers)."""

from __future__ import annotations

from emu.signals import SIGNALS

from .profiles import KernelProfile

SIGTRAP = SIGNALS["SIGTRAP"]


class Kernel:
    def __init__(self, machine, profile="latest", **overrides):
        self.machine = machine
        self.profile = profile if isinstance(profile, KernelProfile) else \
            KernelProfile.get(profile, **overrides)
        from .uprobes import Uprobes
        self.uprobes = Uprobes(self)

    # -- traps -----------------------------------------------------------------
    def do_int3(self, task, regs) -> None:
        """#BP from user mode: uprobes first (uprobe_pre_sstep_notifier), else SIGTRAP."""
        if self.uprobes.handle_int3(task, regs):
            return
        self.machine.force_sig(task, SIGTRAP, detail="breakpoint trap (int3)", regs=regs)

    def do_debug(self, task, regs) -> None:
        """#DB from user mode: a uprobes single-step completes, else SIGTRAP."""
        if self.uprobes.handle_debug(task, regs):
            return
        self.machine.force_sig(task, SIGTRAP, detail="trace trap (single-step)", regs=regs)

    def fixup_fault(self, task, regs) -> None:
        """A fault is about to become a signal: abort an out-of-line step first so the
        signal is reported at the probed address (arch_uprobe_abort_xol)."""
        self.uprobes.abort_xol_on_fault(task, regs)
