"""Pipes (fs/pipe.c): one ``pipe_inode_info`` shared by a read end and a write end.

Each end is an open file description (:class:`PipeEnd`); ``readers``/``writers`` count
the descriptions of each end still open (fork and dup share a description, so they do
not add one, as in the kernel).  The buffer holds at most ``PIPE_DEF_SIZE`` bytes (16
pages, Linux's default).  The ends never sleep themselves: an operation that would
block answers -EAGAIN and the syscall layer (:mod:`kernel_model.fs.fd_syscalls`) puts the task to
sleep on the pipe's wait queue, a list of callables run by :meth:`Pipe.wake_up` whenever
the pipe's state changes (``wake_up_interruptible_all(&pipe->rd_wait / wr_wait)``).
"""

from __future__ import annotations

import errno as E
import stat as S
import struct

from kernel_model.fs.file import PIPE_DEV, OpenFile, stat_bytes

PIPE_BUF = 4096                   # writes up to this size are atomic
PIPE_DEF_SIZE = 16 * 4096         # PIPE_DEF_BUFFERS pages
FIONREAD = 0x541B
O_NONBLOCK = 0o4000
POLLIN, POLLPRI, POLLOUT, POLLERR, POLLHUP, POLLNVAL = 0x1, 0x2, 0x4, 0x8, 0x10, 0x20
POLLRDNORM, POLLRDBAND, POLLWRNORM, POLLWRBAND = 0x40, 0x80, 0x100, 0x200


class Pipe:
    """``pipe_inode_info``: the buffer, the end counts and one wait queue for both
    directions.  A waiter is a callable returning True once it is done (it is then
    dropped); it is called after every change."""

    def __init__(self, ino: int, size: int = PIPE_DEF_SIZE):
        self.buf = bytearray()
        self.size = size
        self.ino = ino
        self.readers = self.writers = 0
        self.waiters: list = []
        self._waking = False
        self._again = False

    def wait(self, waiter) -> None:
        self.waiters.append(waiter)

    def wake_up(self) -> None:
        """Run the waiters until none makes progress; a waiter that changes the pipe
        (a woken writer filling it) makes the others look again."""
        if self._waking:
            self._again = True
            return
        self._waking = True
        try:
            self._again = True
            while self._again:
                self._again = False
                waiters, self.waiters = self.waiters, []
                for w in waiters:
                    if not w():
                        self.waiters.append(w)
        finally:
            self._waking = False

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
            del p.buf[:len(chunk)]
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
