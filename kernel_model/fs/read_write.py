"""The syscalls of fs/read_write.c: read/write, readv/writev, pread64/pwrite64,
preadv/pwritev and lseek.  A read or write that must wait (a pipe, a host stdin)
sleeps in :class:`kernel_model.fs.pipe.PipeSyscalls` or
:class:`kernel_model.drivers.tty.n_tty.HostReads`.
"""

from __future__ import annotations

import errno as E
import struct

from kernel_model.fs.file import HostInput, fdget
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import int_arg, loff_t, syscall

MAX_RW_COUNT = 1 << 24
UIO_MAXIOV = 1024


class ReadWriteSyscalls:
    """Reads and writes of open files."""

    def __init__(self, sc):
        self.m = sc.m
        self.pipes = sc.pipes
        self.host_reads = sc.host_reads

    @syscall(0, "read")
    def sys_read(self, task, regs, fd, buf, count, *_):
        f = fdget(task, fd)
        if f is None or not f.readable:
            return neg(E.EBADF)
        if f.is_pipe:
            return self.pipes.pipe_read(task, f, buf, min(count, MAX_RW_COUNT))
        if isinstance(f, HostInput):
            return self.host_reads.host_read(task, f, buf, min(count, MAX_RW_COUNT))  # may sleep
        data = f.read(min(count, MAX_RW_COUNT), self.m.interrupted)
        if isinstance(data, int):
            return data
        if data:
            self.m.mem.write_user(buf, data)
        return len(data)

    @syscall(1, "write")
    def sys_write(self, task, regs, fd, buf, count, *_):
        f = fdget(task, fd)
        if f is None or not f.writable:
            return neg(E.EBADF)
        if count == 0:
            return 0
        data = self.m.mem.read_user(buf, min(count, MAX_RW_COUNT))
        return self.pipes.pipe_write(task, f, data) if f.is_pipe else f.write(data)

    def _iovecs(self, iov: int, iovcnt: int) -> list[tuple[int, int]] | int:
        """import_iovec: at most UIO_MAXIOV entries, none negative, the total capped at
        MAX_RW_COUNT."""
        if int_arg(iovcnt) < 0 or int_arg(iovcnt) > UIO_MAXIOV:
            return neg(E.EINVAL)
        out, total = [], 0
        for i in range(int_arg(iovcnt)):
            base, ln = struct.unpack("<QQ", self.m.mem.read_user(iov + 16 * i, 16))
            if ln >> 63:
                return neg(E.EINVAL)
            ln = min(ln, MAX_RW_COUNT - total)
            total += ln
            out.append((base, ln))
        return out

    def _gather(self, vecs) -> bytes:
        return b"".join(self.m.mem.read_user(b, n) for b, n in vecs if n)

    def _scatter(self, vecs, data: bytes) -> int:
        done = 0
        for base, ln in vecs:
            if done >= len(data):
                break
            piece = data[done : done + ln]
            self.m.mem.write_user(base, piece)
            done += len(piece)
        return done

    @syscall(20, "writev")
    def sys_writev(self, task, regs, fd, iov, iovcnt, *_):
        f = fdget(task, fd)
        if f is None or not f.writable:
            return neg(E.EBADF)
        vecs = self._iovecs(iov, iovcnt)
        if isinstance(vecs, int):
            return vecs
        data = self._gather(vecs)
        if not data:
            return 0
        return self.pipes.pipe_write(task, f, data) if f.is_pipe else f.write(data)

    @syscall(19, "readv")
    def sys_readv(self, task, regs, fd, iov, iovcnt, *_):
        f = fdget(task, fd)
        if f is None or not f.readable:
            return neg(E.EBADF)
        vecs = self._iovecs(iov, iovcnt)
        if isinstance(vecs, int):
            return vecs
        total = sum(n for _, n in vecs)
        if f.is_pipe:  # a short read of the first buffer
            first = next(((b, n) for b, n in vecs if n), None)
            return 0 if first is None else self.pipes.pipe_read(task, f, first[0], first[1])
        if isinstance(f, HostInput):  # the same short read, sleeping as read does
            first = next(((b, n) for b, n in vecs if n), None)
            return 0 if first is None else self.host_reads.host_read(task, f, first[0], first[1])
        data = f.read(total, self.m.interrupted) if total else b""
        return data if isinstance(data, int) else self._scatter(vecs, data)

    @syscall(17, "pread64")
    def sys_pread64(self, task, regs, fd, buf, count, off, *_):
        f = fdget(task, fd)
        if f is None or not f.readable:
            return neg(E.EBADF)
        if loff_t(off) < 0:
            return neg(E.EINVAL)
        data = f.pread(min(count, MAX_RW_COUNT), loff_t(off))
        if isinstance(data, int):
            return data
        if data:
            self.m.mem.write_user(buf, data)
        return len(data)

    @syscall(18, "pwrite64")
    def sys_pwrite64(self, task, regs, fd, buf, count, off, *_):
        f = fdget(task, fd)
        if f is None or not f.writable:
            return neg(E.EBADF)
        if loff_t(off) < 0:
            return neg(E.EINVAL)
        if f.is_pipe:
            return neg(E.ESPIPE)
        if count == 0:
            return 0
        return f.pwrite(self.m.mem.read_user(buf, min(count, MAX_RW_COUNT)), loff_t(off))

    @syscall(295, "preadv")
    def sys_preadv(self, task, regs, fd, iov, iovcnt, pos_l, pos_h, *_):
        f = fdget(task, fd)
        if f is None or not f.readable:
            return neg(E.EBADF)
        if loff_t(pos_l) < 0:
            return neg(E.EINVAL)
        vecs = self._iovecs(iov, iovcnt)
        if isinstance(vecs, int):
            return vecs
        data = f.pread(sum(n for _, n in vecs), loff_t(pos_l))
        return data if isinstance(data, int) else self._scatter(vecs, data)

    @syscall(296, "pwritev")
    def sys_pwritev(self, task, regs, fd, iov, iovcnt, pos_l, pos_h, *_):
        f = fdget(task, fd)
        if f is None or not f.writable:
            return neg(E.EBADF)
        if loff_t(pos_l) < 0:
            return neg(E.EINVAL)
        vecs = self._iovecs(iov, iovcnt)
        if isinstance(vecs, int):
            return vecs
        if f.is_pipe:
            return neg(E.ESPIPE)
        data = self._gather(vecs)
        return f.pwrite(data, loff_t(pos_l)) if data else 0

    @syscall(8, "lseek")
    def sys_lseek(self, task, regs, fd, off, whence, *_):
        f = fdget(task, fd)
        if f is None:
            return neg(E.EBADF)
        if whence & 0xFFFFFFFF > 4:  # SEEK_MAX = SEEK_HOLE
            return neg(E.EINVAL)
        return f.lseek(loff_t(off), whence & 0xFFFFFFFF)
