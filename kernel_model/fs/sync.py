"""fsync and fdatasync (fs/sync.c)."""

from __future__ import annotations

import errno as E
import os

from kernel_model.fs.file import HostFile, fdget
from kernel_model.fs.namei_syscalls import host_call
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall


class SyncSyscalls:
    """Flushing a file to its host file."""

    @syscall(74, "fsync")
    def sys_fsync(self, task, regs, fd, *_):
        """vfs_fsync_range: the host file's own fsync; EINVAL for a file without one
        (pipes, terminals, modeled files)."""
        f = fdget(task, fd)
        if f is None or getattr(f, "path_only", False):
            return neg(E.EBADF)
        if not isinstance(f, HostFile):
            return neg(E.EINVAL)
        return host_call(os.fsync, f.fd)

    @syscall(75, "fdatasync")
    def sys_fdatasync(self, task, regs, fd, *_):
        return self.sys_fsync(task, regs, fd)
