"""getdents64 (fs/readdir.c)."""

from __future__ import annotations

import errno as E

from kernel_model.fs.file import fdget
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall


class ReaddirSyscalls:
    """Directory listing."""

    def __init__(self, sc):
        self.m = sc.m

    @syscall(217, "getdents64")
    def sys_getdents64(self, task, regs, fd, dirp, count, *_):
        f = fdget(task, fd)
        if f is None:
            return neg(E.EBADF)
        data = f.getdents64(count & 0xFFFFFFFF)
        if isinstance(data, int):
            return data
        if data:
            self.m.mem.write_user(dirp, data)
        return len(data)
