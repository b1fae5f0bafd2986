"""ioctl (fs/ioctl.c): the open file's own ioctl (terminals, /dev files)."""

from __future__ import annotations

import errno as E

from kernel_model.fs.file import fdget
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall


class IoctlSyscalls:
    """Device control."""

    def __init__(self, sc):
        self.m = sc.m

    @syscall(16, "ioctl")
    def sys_ioctl(self, task, regs, fd, cmd, arg, *_):
        f = fdget(task, fd)
        if f is None:
            return neg(E.EBADF)
        return f.ioctl(cmd & 0xFFFFFFFF, arg, self.m.mem)
