"""mprotect (mm/mprotect.c)."""

from __future__ import annotations

import errno as E

from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall
from kernel_model.mm.mm_types import PAGE_SIZE, PROT_EXEC, PROT_READ, PROT_WRITE, page_up

PROT_GROWSDOWN, PROT_GROWSUP = 0x01000000, 0x02000000


class MprotectSyscalls:
    """Changing a mapping's protection."""

    def __init__(self, sc):
        self.m = sc.m

    @syscall(10, "mprotect")
    def sys_mprotect(self, task, regs, addr, length, prot, *_):
        """do_mprotect_pkey: EACCES when a mapping would gain a permission outside its
        VM_MAY* bits (the kernel's answer for [uprobes] made readable or writable, for
        [uprobes-trampoline] made writable, and for a shared mapping of a read-only
        descriptor made writable).  The split VMAs keep their file and offsets."""
        if addr & (PAGE_SIZE - 1):
            return neg(E.EINVAL)
        if prot & ~(PROT_READ | PROT_WRITE | PROT_EXEC | PROT_GROWSDOWN | PROT_GROWSUP):
            return neg(E.EINVAL)
        prot &= PROT_READ | PROT_WRITE | PROT_EXEC
        if length == 0:
            return 0
        end = page_up(addr + length)
        if end <= addr or end > 1 << 64:
            return neg(E.ENOMEM)
        if not self.m.mem.may_protect(addr, end - addr, prot):
            return neg(E.EACCES)
        return 0 if self.m.mem.protect(addr, end - addr, prot) else neg(E.ENOMEM)
