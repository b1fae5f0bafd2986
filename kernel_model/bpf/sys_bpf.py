"""The ``bpf`` entry of the syscall table.  The implementation
(:mod:`kernel_model.bpf.syscall`: attributes, maps, the verifier, BTF) is imported at a
guest's first ``bpf()``: a machine whose guest never calls it never loads the BPF code."""

from __future__ import annotations

from kernel_model.include.linux.syscalls import syscall


class BpfSyscalls:
    """bpf(2)."""

    def __init__(self, sc):
        self._sc = sc
        self._impl = None

    @syscall(
        321,
        "bpf",
        partial="map, program, BTF and uprobe link commands only (no pinning, batches, test runs, fds by id)",
    )
    def sys_bpf(self, task, regs, *args):
        impl = self._impl
        if impl is None:
            from kernel_model.bpf.syscall import BpfCommands

            impl = self._impl = BpfCommands(self._sc)
        return impl.sys_bpf(task, regs, *args)
