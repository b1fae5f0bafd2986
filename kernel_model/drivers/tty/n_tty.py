"""Reads of the guest's stdin when it is a host descriptor (the CLI's stdin: a terminal,
a file or a pipe): what is there now, or a sleep, as n_tty_read sleeps, while other
tasks run; when every task sleeps the machine waits for the host in wall time, up to
the next virtual deadline.
"""

from __future__ import annotations

import errno as E
import select
import time

from kernel_model.fs.file import POLL_SLICE_MS, HostInput, copy_out
from kernel_model.include.linux.errno import ERESTARTSYS, neg
from kernel_model.include.uapi.linux.fcntl import O_NONBLOCK
from kernel_model.kernel.wait import sleep_on, still_asleep


def _host_ready(f) -> bool:
    """Would a read of the host descriptor behind ``f`` return at once (data, end of
    file or an error)?"""
    poller = select.poll()
    poller.register(f.fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


class HostReads:
    """The sleeping readers of a host descriptor."""

    def __init__(self, sc):
        self.m = sc.m
        self.clock = sc.clock
        self.waits: list = []

    def host_read(self, task, f: HostInput, buf: int, count: int) -> int | None:
        """A read of fd 0 backed by a host descriptor: what is there now, or sleep (as
        n_tty_read / pipe_read do, -ERESTARTSYS when a signal comes first) while other
        tasks run; when every task sleeps the machine waits for the host in wall time,
        up to the next virtual deadline (see :meth:`wait_host_input`).  O_NONBLOCK (set
        with fcntl on the guest's description): -EAGAIN instead of sleeping."""
        if _host_ready(f):
            return copy_out(task, buf, f.read(count, self.m.interrupted))
        if f.status_flags & O_NONBLOCK:
            return neg(E.EAGAIN)
        token = sleep_on(task)

        def retry() -> bool:
            if not still_asleep(task, token):
                return True
            if not _host_ready(f):
                return False
            self.m.wake(task, copy_out(task, buf, f.read(count, self.m.interrupted)))
            return True

        self.waits.append((f, retry))
        self.m.block(task, "host_read", interrupt=neg(ERESTARTSYS))
        return None

    def poll_host_waits(self, timeout_ms: int = 0) -> bool:
        """Complete the host reads whose descriptor became readable within
        ``timeout_ms``; True when a sleeper woke.  Cheap when nobody waits."""
        waits = self.waits
        if not waits:
            return False
        if timeout_ms:
            poller = select.poll()
            for f, _ in waits:
                poller.register(f.fd, select.POLLIN | select.POLLPRI)
            poller.poll(timeout_ms)
        before = sum(1 for t in self.m.tasks if t.state == "running")
        waits[:] = [(f, retry) for f, retry in waits if not retry()]
        return sum(1 for t in self.m.tasks if t.state == "running") > before

    def wait_host_input(self, until_ns: int | None) -> bool:
        """Every task sleeps and some wait for the host: wait for its input in wall time
        (a virtual ns is a real one here), at most until the virtual deadline
        ``until_ns``, in slices so the run's timeout or Ctrl-C ends the wait.  The
        virtual clock moves on by the time waited.  True when a reader woke; False at
        the deadline, when interrupted, or with no host reader."""
        if not self.waits:
            return False
        start, base = time.monotonic_ns(), self.clock.ns
        while True:
            waited = time.monotonic_ns() - start
            left = None if until_ns is None else until_ns - base - waited
            if left is not None and left <= 0:
                self.clock.ns = max(self.clock.ns, until_ns)
                return False
            slice_ms = POLL_SLICE_MS if left is None else max(1, min(POLL_SLICE_MS, left // 1_000_000))
            woke = self.poll_host_waits(slice_ms)
            self.clock.ns = max(self.clock.ns, base + time.monotonic_ns() - start)
            if woke:
                return True
            if self.m.interrupted():
                return False
