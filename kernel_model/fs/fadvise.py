"""fadvise64 (mm/fadvise.c): advice about a file's page cache use.

The model has no page cache, so accepted advice changes nothing; what is modeled is
what the kernel refuses, in its order (``ksys_fadvise64_64``, ``generic_fadvise``):
EBADF for a descriptor that is not open or is an ``O_PATH`` one (fdget), ESPIPE for a
pipe or FIFO, EINVAL for a negative length, then EINVAL for advice that is not one of
POSIX_FADV_NORMAL ... POSIX_FADV_NOREUSE.
"""

from __future__ import annotations

import errno as E
import stat as S
import struct

from kernel_model.fs.file import fdget
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import int_arg, loff_t, syscall

POSIX_FADV_NORMAL, POSIX_FADV_NOREUSE = 0, 5


class FadviseSyscalls:
    """Page cache advice."""

    @syscall(221, "fadvise64")
    def sys_fadvise64(self, task, regs, fd, offset, length, advice, *_):
        f = fdget(task, fd)
        if f is None or getattr(f, "path_only", False):
            return neg(E.EBADF)
        st = f.fstat()
        if isinstance(st, int):
            return st
        (mode,) = struct.unpack_from("<I", st, 24)
        if S.S_ISFIFO(mode):
            return neg(E.ESPIPE)
        if loff_t(length) < 0:
            return neg(E.EINVAL)
        if not POSIX_FADV_NORMAL <= int_arg(advice) <= POSIX_FADV_NOREUSE:
            return neg(E.EINVAL)
        return 0
