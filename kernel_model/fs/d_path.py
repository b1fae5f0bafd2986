"""getcwd (fs/d_path.c): the working directory's path in the guest's view."""

from __future__ import annotations

import errno as E
import os

from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall


class DPathSyscalls:
    """The working directory's name."""

    def __init__(self, sc):
        self.m = sc.m
        self.vfs = sc.vfs
        self.namei = sc.namei

    @syscall(79, "getcwd")
    def sys_getcwd(self, task, regs, buf, size, *_):
        """getcwd: ENOENT once the directory is removed, ERANGE when the path and its
        NUL do not fit; the length with the NUL."""
        with self.vfs.nameidata(task) as nd:
            loc = self.namei.cwd_loc(nd, task)
            if isinstance(loc, int) or (loc.fd is not None and os.fstat(loc.fd).st_nlink == 0):
                return neg(E.ENOENT)
        data = os.fsencode(task.process.fs.pwd) + b"\0"
        if len(data) > size & 0xFFFFFFFFFFFFFFFF:
            return neg(E.ERANGE)
        self.m.mem.write_user(buf, data)
        return len(data)
