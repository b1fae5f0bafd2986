"""utimensat (fs/utimes.c)."""

from __future__ import annotations

import errno as E
import os
import struct
import time

from kernel_model.fs.file import fdget
from kernel_model.fs.namei import MAY_WRITE
from kernel_model.fs.namei_syscalls import host_call, proc_fd
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import fd_arg, syscall
from kernel_model.include.uapi.linux.fcntl import AT_EMPTY_PATH, AT_FDCWD, AT_SYMLINK_NOFOLLOW

UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2


class UtimesSyscalls:
    """File timestamps."""

    def __init__(self, sc):
        self.m = sc.m
        self.namei = sc.namei
        self.open = sc.open

    @syscall(280, "utimensat")
    def sys_utimensat(self, task, regs, dirfd, path, times, flags, *_):
        """sys_utimensat/do_utimes/vfs_utimes in order: both UTIME_OMIT does nothing
        (not even the lookup); the flags; NULL path: the descriptor itself (no flags);
        the lookup; EINVAL for a bad tv_nsec; EROFS; then "now" needs ownership or write
        permission (EACCES), explicit times ownership (EPERM)."""
        flags &= 0xFFFFFFFF
        spec = [(0, UTIME_NOW), (0, UTIME_NOW)]
        if times:
            spec = [struct.unpack("<qq", self.m.mem.read_user(times + 16 * i, 16)) for i in (0, 1)]
            if all(ns == UTIME_OMIT for _, ns in spec):
                return 0
        if not path:
            if fd_arg(dirfd) == fd_arg(AT_FDCWD):
                return neg(E.EFAULT)
            if flags:
                return neg(E.EINVAL)
            f = fdget(task, dirfd)
            if f is None or getattr(f, "path_only", False):
                return neg(E.EBADF)
            flags = AT_EMPTY_PATH
        elif flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH):
            return neg(E.EINVAL)

        def valid(loc):
            bad = any(ns not in (UTIME_NOW, UTIME_OMIT) and not 0 <= ns < 1_000_000_000 for _, ns in spec)
            return neg(E.EINVAL) if bad else 0

        def change(nd, loc):
            a = loc.attrs(task)
            now = all(ns == UTIME_NOW for _, ns in spec)
            if not self.namei.owner_or_capable(nd.cred, a):
                if not now:
                    return neg(E.EPERM)
                err = self.namei.perm(nd, loc, MAY_WRITE)
                if err:
                    return err
            cur = os.stat(proc_fd(loc.fd))
            t = time.time_ns()
            vals = tuple(
                old if ns == UTIME_OMIT else t if ns == UTIME_NOW else sec * 1_000_000_000 + ns
                for (sec, ns), old in zip(spec, (cur.st_atime_ns, cur.st_mtime_ns))
            )
            return host_call(os.utime, proc_fd(loc.fd), ns=vals)

        return self.open.setattr_at(task, dirfd, path, flags, change, pre=valid)
