"""The ``perf_event_open`` entry of the syscall table.  The implementation
(:mod:`kernel_model.kernel.events.core`, with the BPF attach it needs) is imported at
a guest's first call: a machine whose guest never opens a perf event never loads it."""

from __future__ import annotations

from kernel_model.include.linux.syscalls import syscall


class PerfEventSyscalls:
    """perf_event_open(2)."""

    def __init__(self, sc):
        self._sc = sc
        self._impl = None

    @syscall(
        298,
        "perf_event_open",
        partial="the uprobe PMU only (other types ENOENT); no samples, counts, groups or cgroups; cpu not filtered",
    )
    def sys_perf_event_open(self, task, regs, *args):
        impl = self._impl
        if impl is None:
            from kernel_model.kernel.events.core import PerfEventOpen

            impl = self._impl = PerfEventOpen(self._sc)
        return impl.sys_perf_event_open(task, regs, *args)
