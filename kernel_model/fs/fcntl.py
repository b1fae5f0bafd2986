"""fcntl (fs/fcntl.c): the descriptor and status-flag commands."""

from __future__ import annotations

import errno as E

from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall
from kernel_model.include.uapi.linux.fcntl import FASYNC, O_APPEND, O_DIRECT, O_NOATIME, O_NONBLOCK

SETFL_MASK = O_APPEND | O_NONBLOCK | FASYNC | O_DIRECT | O_NOATIME
F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL = 0, 1, 2, 3, 4
F_DUPFD_CLOEXEC, F_GETPIPE_SZ = 1030, 1032
FD_CLOEXEC = 1


class FcntlSyscalls:
    """File control."""

    @syscall(
        72,
        "fcntl",
        partial="descriptor and status-flag commands and F_GETPIPE_SZ; locks, leases and the rest are EINVAL",
    )
    def sys_fcntl(self, task, regs, fd, cmd, arg, *_):
        """do_fcntl for the descriptor and status-flag commands; others EINVAL."""
        table = task.process.files
        fd = fd & 0xFFFFFFFF
        f = table.get(fd)
        if f is None:
            return neg(E.EBADF)
        cmd &= 0xFFFFFFFF
        if cmd in (F_DUPFD, F_DUPFD_CLOEXEC):
            lowest = arg & 0xFFFFFFFF  # an unsigned long from a C int
            if lowest >= table.limit:
                return neg(E.EINVAL)
            return table.install(f, lowest, cloexec=cmd == F_DUPFD_CLOEXEC)
        if cmd == F_GETFD:
            return FD_CLOEXEC if fd in table.cloexec else 0
        if cmd == F_SETFD:
            table.set_cloexec(fd, bool(arg & FD_CLOEXEC))
            return 0
        if cmd == F_GETFL:
            return f.f_flags
        if cmd == F_SETFL:
            f.status_flags = (f.status_flags & ~SETFL_MASK) | (arg & SETFL_MASK)
            return 0
        if cmd == F_GETPIPE_SZ:
            return f.pipe.size if f.is_pipe else neg(E.EBADF)
        return neg(E.EINVAL)
