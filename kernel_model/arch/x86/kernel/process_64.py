"""arch_prctl (arch/x86/kernel/process_64.c): the FS and GS bases."""

from __future__ import annotations

import errno as E

from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall

ARCH_SET_GS, ARCH_SET_FS, ARCH_GET_FS, ARCH_GET_GS = 0x1001, 0x1002, 0x1003, 0x1004


class ArchPrctlSyscalls:
    """The x86_64 segment bases."""

    def __init__(self, sc):
        self.m = sc.m

    @syscall(158, "arch_prctl")
    def sys_arch_prctl(self, task, regs, code, addr, *_):
        if code == ARCH_SET_FS:
            regs.fs_base = addr
        elif code == ARCH_SET_GS:
            regs.gs_base = addr
        elif code == ARCH_GET_FS:
            self.m.mem.write_u64(addr, regs.fs_base)
        elif code == ARCH_GET_GS:
            self.m.mem.write_u64(addr, regs.gs_base)
        else:
            return neg(E.EINVAL)
        return 0
