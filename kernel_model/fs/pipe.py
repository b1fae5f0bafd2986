"""Pipes (fs/pipe.c): one ``pipe_inode_info`` shared by a read end and a write end.

Each end is an open file description (:class:`PipeEnd`); ``readers``/``writers`` count
the descriptions of each end still open (fork and dup share a description, so they do
not add one, as in the kernel).  The buffer holds at most ``PIPE_DEF_SIZE`` bytes (16
pages, Linux's default).  The ends never sleep themselves: an operation that would
block answers -EAGAIN and the syscall layer (:class:`PipeSyscalls` below) puts the task to
sleep on the pipe's wait queue, a list of callables run by :meth:`Pipe.wake_up` whenever
the pipe's state changes (``wake_up_interruptible_all(&pipe->rd_wait / wr_wait)``).
"""

from __future__ import annotations

import errno as E
import stat as S
import struct

from kernel_model.fs.file import PIPE_DEV, OpenFile, copy_out, stat_bytes
from kernel_model.include.linux.errno import ERESTARTSYS, neg
from kernel_model.include.linux.syscalls import syscall
from kernel_model.include.uapi.linux.fcntl import O_CLOEXEC, O_DIRECT, O_NONBLOCK
from kernel_model.kernel.wait import WaitQueue, sleep_on, still_asleep
from kernel_model.mm.mm_types import GuestFault

PIPE_BUF = 4096  # writes up to this size are atomic
PIPE_DEF_SIZE = 16 * 4096  # PIPE_DEF_BUFFERS pages
FIONREAD = 0x541B
SIGPIPE = 13
PIPE_INO_BASE = 0x10000  # the first pipe's inode number
POLLIN, POLLPRI, POLLOUT, POLLERR, POLLHUP, POLLNVAL = 0x1, 0x2, 0x4, 0x8, 0x10, 0x20
POLLRDNORM, POLLRDBAND, POLLWRNORM, POLLWRBAND = 0x40, 0x80, 0x100, 0x200


class Pipe(WaitQueue):
    """``pipe_inode_info``: the buffer, the end counts and one wait queue for both
    directions (a :class:`~kernel_model.kernel.wait.WaitQueue`: a waiter is a callable
    returning True once it is done, called after every change)."""

    def __init__(self, ino: int, size: int = PIPE_DEF_SIZE):
        super().__init__()
        self.buf = bytearray()
        self.size = size
        self.ino = ino
        self.readers = self.writers = 0

    def poll_mask(self, reading: bool) -> int:
        """pipe_poll: readable while bytes are buffered, hung up without writers;
        writable while a page slot is free (at most 15 pages buffered), an error
        without readers."""
        if reading:
            mask = POLLIN | POLLRDNORM if self.buf else 0
            return mask | (POLLHUP if self.writers == 0 else 0)
        mask = POLLOUT | POLLWRNORM if len(self.buf) <= self.size - PIPE_BUF else 0
        return mask | (POLLERR if self.readers == 0 else 0)


class PipeEnd(OpenFile):
    """One end of a :class:`Pipe` (``pipefifo_fops`` on an O_RDONLY or O_WRONLY file)."""

    is_pipe = True

    def __init__(self, pipe: Pipe, write: bool, status_flags: int = 0):
        super().__init__()
        self.pipe = pipe
        self.readable, self.writable = not write, write
        self.status_flags = status_flags
        if write:
            pipe.writers += 1
        else:
            pipe.readers += 1

    def proc_link(self):
        return f"pipe:[{self.pipe.ino}]"

    @property
    def nonblock(self) -> bool:
        return bool(self.status_flags & O_NONBLOCK)

    def release(self):
        """pipe_release: one end fewer; sleepers on the other side look again (a
        reader sees end of file, a writer EPIPE)."""
        if self.writable:
            self.pipe.writers -= 1
        else:
            self.pipe.readers -= 1
        self.pipe.wake_up()

    def read(self, count, interrupted=None):
        """pipe_read without sleeping: buffered bytes, else 0 (end of file) with no
        writer left, else -EAGAIN."""
        p = self.pipe
        if count == 0:
            return b""
        if p.buf:
            chunk = bytes(p.buf[:count])
            del p.buf[: len(chunk)]
            p.wake_up()
            return chunk
        return b"" if p.writers == 0 else -E.EAGAIN

    def write(self, data):
        """pipe_write without sleeping: -EPIPE with no reader; a write of at most
        PIPE_BUF bytes goes in whole or not at all; a larger one takes what fits.
        -EAGAIN when nothing could be written."""
        p = self.pipe
        if p.readers == 0:
            return -E.EPIPE
        room = p.size - len(p.buf)
        if room == 0 or (len(data) <= PIPE_BUF and room < len(data)):
            return -E.EAGAIN
        n = min(room, len(data))
        p.buf += data[:n]
        p.wake_up()
        return n

    def poll(self) -> int:
        return self.pipe.poll_mask(self.readable)

    def fstat(self):
        return stat_bytes(S.S_IFIFO | 0o600, dev=PIPE_DEV, ino=self.pipe.ino, blksize=4096)

    def ioctl(self, cmd, arg, mem):
        """pipe_ioctl: FIONREAD is the number of buffered bytes."""
        if cmd != FIONREAD:
            return -E.ENOTTY
        mem.write_user(arg, struct.pack("<i", len(self.pipe.buf)))
        return 0


class PipeSyscalls:
    """pipe and pipe2 (fs/pipe.c), and the sleeping halves of read and write on a pipe."""

    def __init__(self, m=None):
        self.m = m
        self.ino = PIPE_INO_BASE

    @syscall(22, "pipe")
    def sys_pipe(self, task, regs, fds, *_):
        return self.sys_pipe2(task, regs, fds, 0)

    @syscall(293, "pipe2")
    def sys_pipe2(self, task, regs, fds, flags, *_):
        """do_pipe2: two descriptions on one new pipe; nothing stays installed when the
        descriptors cannot be copied out."""
        if flags & ~(O_CLOEXEC | O_NONBLOCK | O_DIRECT) & 0xFFFFFFFF:
            return neg(E.EINVAL)
        table = task.process.files
        self.ino += 1
        pipe = Pipe(self.ino)
        status = flags & (O_NONBLOCK | O_DIRECT)
        cloexec = bool(flags & O_CLOEXEC)
        rd = table.install(PipeEnd(pipe, False, status), 0, cloexec)
        if rd < 0:
            return rd
        wr = table.install(PipeEnd(pipe, True, status), 0, cloexec)
        if wr < 0:
            table.close(rd)
            return wr
        try:
            task.process.mem.write_user(fds, struct.pack("<ii", rd, wr))
        except GuestFault:
            table.close(rd)
            table.close(wr)
            return neg(E.EFAULT)
        return 0

    def pipe_read(self, task, f: PipeEnd, buf: int, count: int) -> int | None:
        """pipe_read: buffered bytes now, end of file, -EAGAIN on O_NONBLOCK, or sleep
        until a writer writes or the last one goes."""
        res = f.read(count)
        if res != -E.EAGAIN or f.nonblock:
            return copy_out(task, buf, res)

        token = sleep_on(task)

        def retry() -> bool:
            if not still_asleep(task, token):
                return True  # the task died or was woken otherwise
            got = f.read(count)
            if got == -E.EAGAIN:
                return False
            self.m.wake(task, copy_out(task, buf, got))
            return True

        f.pipe.wait(retry)
        self.m.block(task, "pipe_read", interrupt=neg(ERESTARTSYS))
        return None

    def pipe_write(self, task, f: PipeEnd, data: bytes) -> int | None:
        """pipe_write: a blocking write returns once every byte is in the pipe (sleeping
        while it is full); EPIPE and SIGPIPE when no reader is left, or the count
        written so far."""
        done = self._write_some(task, f, data, 0)
        if isinstance(done, int):
            return done
        state = {"written": done[0]}
        token = sleep_on(task)

        def retry() -> bool:
            if not still_asleep(task, token):
                return True
            res = self._write_some(task, f, data, state["written"])
            if isinstance(res, tuple):
                state["written"] = res[0]
                return False
            self.m.wake(task, res)
            return True

        f.pipe.wait(retry)
        # pipe_write: a signal ends the wait with the count written so far, if any
        self.m.block(task, "pipe_write", interrupt=lambda: state["written"] or neg(ERESTARTSYS))
        return None

    def _write_some(self, task, f: PipeEnd, data: bytes, written: int):
        """Write what fits from ``written`` on: the final result (count or errno), or
        ``(written,)`` when the rest must wait for room."""
        while written < len(data):
            n = f.write(data[written:])
            if n == -E.EPIPE:
                self.m.send_sig(task, SIGPIPE, detail="write to a pipe with no reader")
                return written or neg(E.EPIPE)
            if n == -E.EAGAIN:
                return (written or neg(E.EAGAIN)) if f.nonblock else (written,)
            written += n
        return written
