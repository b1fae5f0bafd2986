"""epoll (fs/eventpoll.c): an epoll instance is an anonymous-inode file
(``anon_inode:[eventpoll]``) holding one item per watched (file, descriptor) pair.

A file the model can poll has ``poll()`` (``f_op->poll``); the ones whose readiness
changes while a task sleeps also have a wait queue - a pipe's
(:class:`kernel_model.fs.pipe.Pipe`), a BPF ring buffer map's - that runs its waiters
when their state changes.  Each item keeps a waiter on its file's queue
(``ep_poll_callback``): it marks the item ready (what an edge-triggered item reports
once) and runs the epoll instance's own queue, where a sleeping ``epoll_wait`` and an
epoll instance watching this one wait.

Level-triggered items are polled again at every ``epoll_wait`` (the kernel puts them
back on the ready list after reporting them); edge-triggered ones (``EPOLLET``) are
reported once per wake-up; ``EPOLLONESHOT`` disables an item after its first report
until ``EPOLL_CTL_MOD``.  A finite timeout is a deadline on the virtual clock; a signal
ends the sleep with -EINTR (epoll_wait is never restarted).  An item goes away with
its file's last reference (``eventpoll_release``), not when its descriptor is closed
while a duplicate keeps the file open - then, as on Linux, it still reports the old
descriptor's data.
"""

from __future__ import annotations

import errno as E
import struct

from kernel_model.fs.file import HostFile, OpenFile, stat_bytes
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import fd_arg, int_arg, syscall
from kernel_model.include.uapi.linux.fcntl import O_CLOEXEC
from kernel_model.kernel.wait import WaitQueue, sleep_on, still_asleep
from kernel_model.mm.mm_types import TASK_SIZE, GuestFault

EPOLLIN, EPOLLPRI, EPOLLOUT, EPOLLERR, EPOLLHUP = 0x1, 0x2, 0x4, 0x8, 0x10
EPOLLRDNORM, EPOLLRDBAND, EPOLLWRNORM, EPOLLWRBAND, EPOLLMSG = 0x40, 0x80, 0x100, 0x200, 0x400
EPOLLRDHUP = 0x2000
EPOLLEXCLUSIVE, EPOLLWAKEUP, EPOLLONESHOT, EPOLLET = 1 << 28, 1 << 29, 1 << 30, 1 << 31
EP_PRIVATE_BITS = EPOLLWAKEUP | EPOLLONESHOT | EPOLLET | EPOLLEXCLUSIVE
# the events EPOLLEXCLUSIVE may be combined with (EPOLLEXCLUSIVE_OK_BITS)
EPOLLEXCLUSIVE_OK_BITS = EPOLLINOUT = (
    EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLWAKEUP | EPOLLET | EPOLLEXCLUSIVE | EPOLLRDNORM | EPOLLWRNORM
)
EPOLL_CTL_ADD, EPOLL_CTL_DEL, EPOLL_CTL_MOD = 1, 2, 3
EPOLL_CLOEXEC = O_CLOEXEC
# struct epoll_event is packed on x86_64: __u32 events, __u64 data
EPOLL_EVENT = struct.Struct("<IQ")
EP_MAX_EVENTS = 0x7FFFFFFF // EPOLL_EVENT.size
EP_MAX_NESTS = 4
# the one inode of anon_inodefs (fs/anon_inodes.c) behind epoll, BPF and perf event files:
# mode 0600 without a file type, st_dev as the host's 6.18 shows it (0:16)
ANON_INODE_MODE, ANON_INODE_DEV, ANON_INODE_INO = 0o600, 0x10, 1


def wait_queue_of(file: OpenFile):
    """The queue a sleeper on ``file`` waits on (the pipe's, or the file's own
    ``wait_queue``), or None for a file whose readiness never changes while a task
    sleeps (stdio, /proc files: always ready)."""
    if file.is_pipe:
        return getattr(file, "pipe", None)
    return getattr(file, "wait_queue", None)


def file_can_poll(file: OpenFile) -> bool:
    """``file_can_poll``: regular files of a disk filesystem and directories have no
    ``->poll``."""
    return not isinstance(file, HostFile) and not file.is_dir


class Epitem:
    """``struct epitem``: a watched (file, fd), its events and data, and whether a
    wake-up came since it was last reported (``rdllink`` membership)."""

    __slots__ = ("fd", "file", "events", "data", "ready", "live")

    def __init__(self, fd: int, file: OpenFile, events: int, data: int):
        self.fd, self.file, self.events, self.data = fd, file, events, data
        self.ready = False
        self.live = True


class EventPoll(OpenFile):
    """An epoll instance (``struct eventpoll`` behind its anonymous-inode file)."""

    readable = True

    def __init__(self) -> None:
        super().__init__()
        self.items: dict[tuple[int, int], Epitem] = {}  # (id(file), fd) -> item
        self.wait_queue = WaitQueue()  # ep->wq and ep->poll_wait in one

    def proc_link(self):
        return "anon_inode:[eventpoll]"

    def fstat(self):
        return stat_bytes(ANON_INODE_MODE, dev=ANON_INODE_DEV, ino=ANON_INODE_INO, uid=0, gid=0)

    def release(self):
        for item in self.items.values():
            item.live = False
        self.items.clear()

    def read(self, count, interrupted):
        return -E.EINVAL

    def write(self, data):
        return -E.EINVAL

    def _prune(self) -> None:
        """eventpoll_release: items whose file's last reference is gone."""
        for key in [k for k, it in self.items.items() if it.file.refs <= 0]:
            self.items.pop(key).live = False

    def item_revents(self, item: Epitem) -> int:
        """ep_item_poll: what the item reports now (0 for a disabled one-shot item)."""
        want = item.events & ~EP_PRIVATE_BITS
        if not want:
            return 0
        return item.file.poll() & want

    def poll(self) -> int:
        """ep_eventpoll_poll: readable while some item would be reported."""
        self._prune()
        for item in self.items.values():
            if self.item_revents(item) and (not item.events & EPOLLET or item.ready):
                return EPOLLIN | EPOLLRDNORM
        return 0

    def collect(self, maxevents: int) -> list[tuple[int, int]]:
        """ep_send_events: (revents, data) of up to ``maxevents`` ready items, in the
        order they were added; edge-triggered ones lose their ready mark, one-shot
        ones are disabled."""
        self._prune()
        out: list[tuple[int, int]] = []
        for item in self.items.values():
            if len(out) >= maxevents:
                break
            if item.events & EPOLLET and not item.ready:
                continue
            revents = self.item_revents(item)
            item.ready = False
            if not revents:
                continue
            out.append((revents, item.data))
            if item.events & EPOLLONESHOT:
                item.events &= EP_PRIVATE_BITS
        return out

    def insert(self, fd: int, file: OpenFile, events: int, data: int) -> int:
        """ep_insert: the item, its waiter on the file's queue, and an initial poll
        (a file ready now is on the ready list at once)."""
        if isinstance(file, EventPoll) and self._nest_depth(file) >= EP_MAX_NESTS:
            return -E.ELOOP  # ep_loop_check: a cycle, or nesting too deep
        item = Epitem(fd, file, events, data)
        self.items[(id(file), fd)] = item
        queue = wait_queue_of(file)
        if queue is not None:

            def callback() -> bool:
                """ep_poll_callback: mark ready, wake the sleepers on this instance."""
                if not item.live:
                    return True
                item.ready = True
                self.wait_queue.wake_up()
                return False

            queue.wait(callback)
        item.ready = bool(self.item_revents(item))
        if item.ready:
            self.wait_queue.wake_up()
        return 0

    def _nest_depth(self, other: EventPoll) -> int:
        """How deep ``other``'s epoll nesting already is (ep_loop_check's bound)."""
        if other is self:
            return EP_MAX_NESTS
        depth = 0
        for item in other.items.values():
            if isinstance(item.file, EventPoll):
                depth = max(depth, 1 + self._nest_depth(item.file))
        return depth


class EventpollSyscalls:
    """epoll_create, epoll_create1, epoll_ctl, epoll_wait, epoll_pwait, epoll_pwait2."""

    def __init__(self, sc):
        self.m = sc.m
        self.clock = sc.clock
        self.timeouts = sc.timeouts

    @syscall(213, "epoll_create")
    def sys_epoll_create(self, task, regs, size, *_):
        """epoll_create: ``size`` only has to be positive."""
        if int_arg(size) <= 0:
            return neg(E.EINVAL)
        return self._create(task, 0)

    @syscall(291, "epoll_create1")
    def sys_epoll_create1(self, task, regs, flags, *_):
        if int_arg(flags) & ~EPOLL_CLOEXEC:
            return neg(E.EINVAL)
        return self._create(task, int_arg(flags))

    @staticmethod
    def _create(task, flags: int) -> int:
        return task.process.files.install(EventPoll(), 0, cloexec=bool(flags & EPOLL_CLOEXEC))

    @syscall(233, "epoll_ctl", partial="no wake-up sources (EPOLLWAKEUP is dropped as without CAP_BLOCK_SUSPEND)")
    def sys_epoll_ctl(self, task, regs, epfd, op, fd, event, *_):
        """do_epoll_ctl's checks in the kernel's order."""
        op = int_arg(op)
        events = data = 0
        has_event = op != EPOLL_CTL_DEL
        if has_event:
            try:
                events, data = task.process.mem.read_user_struct(EPOLL_EVENT, event)
            except GuestFault:
                return neg(E.EFAULT)
        files = task.process.files
        ep = files.get(fd_arg(epfd))
        if ep is None:
            return neg(E.EBADF)
        fd = fd_arg(fd)
        tf = files.get(fd)
        if tf is None:
            return neg(E.EBADF)
        if not file_can_poll(tf):
            return neg(E.EPERM)
        if has_event:
            events &= ~EPOLLWAKEUP  # ep_take_care_of_epollwakeup without CAP_BLOCK_SUSPEND
        if ep is tf or not isinstance(ep, EventPoll):
            return neg(E.EINVAL)
        if has_event and events & EPOLLEXCLUSIVE:
            if op == EPOLL_CTL_MOD:
                return neg(E.EINVAL)
            if op == EPOLL_CTL_ADD and (isinstance(tf, EventPoll) or events & ~EPOLLEXCLUSIVE_OK_BITS):
                return neg(E.EINVAL)
        ep._prune()
        item = ep.items.get((id(tf), fd))
        if op == EPOLL_CTL_ADD:
            if item is not None:
                return neg(E.EEXIST)
            return ep.insert(fd, tf, events | EPOLLERR | EPOLLHUP, data)
        if op == EPOLL_CTL_DEL:
            if item is None:
                return neg(E.ENOENT)
            ep.items.pop((id(tf), fd)).live = False
            return 0
        if op == EPOLL_CTL_MOD:
            if item is None:
                return neg(E.ENOENT)
            if item.events & EPOLLEXCLUSIVE:
                return neg(E.EINVAL)
            item.events, item.data = events | EPOLLERR | EPOLLHUP, data  # ep_modify, then a poll
            item.ready = bool(ep.item_revents(item))
            if item.ready:
                ep.wait_queue.wake_up()
            return 0
        return neg(E.EINVAL)

    @syscall(232, "epoll_wait")
    def sys_epoll_wait(self, task, regs, epfd, events, maxevents, timeout, *_):
        ms = int_arg(timeout)
        return self._epoll_wait(task, epfd, events, maxevents, None if ms < 0 else ms * 1_000_000)

    @syscall(281, "epoll_pwait")
    def sys_epoll_pwait(self, task, regs, epfd, events, maxevents, timeout, sigmask, sigsetsize):
        ms = int_arg(timeout)
        return self._pwait(task, epfd, events, maxevents, None if ms < 0 else ms * 1_000_000, sigmask, sigsetsize)

    @syscall(441, "epoll_pwait2")
    def sys_epoll_pwait2(self, task, regs, epfd, events, maxevents, tsp, sigmask, sigsetsize):
        """epoll_pwait2: the timeout is a timespec (NULL: for ever)."""
        timeout = None
        if tsp:
            try:
                sec, nsec = struct.unpack("<qq", task.process.mem.read_user(tsp, 16))
            except GuestFault:
                return neg(E.EFAULT)
            if sec < 0 or not 0 <= nsec < 1_000_000_000:
                return neg(E.EINVAL)
            timeout = sec * 1_000_000_000 + nsec
        return self._pwait(task, epfd, events, maxevents, timeout, sigmask, sigsetsize)

    def _pwait(self, task, epfd, events, maxevents, timeout, sigmask, sigsetsize):
        """do_epoll_pwait: the temporary signal mask for the wait (set_user_sigmask),
        put back unless a signal interrupted it (its handler's frame saves the old)."""
        if sigmask:
            if sigsetsize != 8:
                return neg(E.EINVAL)
            try:
                new = struct.unpack("<Q", task.process.mem.read_user(sigmask, 8))[0]
            except GuestFault:
                return neg(E.EFAULT)
            task.saved_sigmask, task.sigmask = task.sigmask, new & ~((1 << 8) | (1 << 18))
        ret = self._epoll_wait(task, epfd, events, maxevents, timeout, restore_mask=bool(sigmask))
        if ret is not None:
            self._restore_mask(task, ret)
        return ret

    @staticmethod
    def _restore_mask(task, ret: int) -> None:
        if ret != neg(E.EINTR) and task.saved_sigmask is not None:
            task.sigmask, task.saved_sigmask = task.saved_sigmask, None

    def _epoll_wait(self, task, epfd, uevents, maxevents, timeout: int | None, *, restore_mask: bool = False):
        """do_epoll_wait + ep_poll: ready items now, none after a zero timeout, else a
        sleep on the instance's queue until one is ready, the deadline, or a signal."""
        maxevents = int_arg(maxevents)
        if maxevents <= 0 or maxevents > EP_MAX_EVENTS:
            return neg(E.EINVAL)
        if uevents + maxevents * EPOLL_EVENT.size > TASK_SIZE:
            return neg(E.EFAULT)  # access_ok
        ep = task.process.files.get(fd_arg(epfd))
        if ep is None:
            return neg(E.EBADF)
        if not isinstance(ep, EventPoll):
            return neg(E.EINVAL)

        def send(final: bool):
            got = ep.collect(maxevents)
            if not got and not final:
                return None
            try:
                task.process.mem.write_user(uevents, b"".join(EPOLL_EVENT.pack(ev, data) for ev, data in got))
            except GuestFault:
                return neg(E.EFAULT)
            return len(got)

        res = send(timeout == 0)
        if res is not None:
            return res
        deadline = None if timeout is None else self.clock.ns + timeout
        state = {"done": False}
        token = sleep_on(task)

        def finish(final: bool) -> bool:
            if state["done"] or not still_asleep(task, token):
                state["done"] = True
                return True
            got = send(final)
            if got is None:
                return False
            state["done"] = True
            if restore_mask:
                self._restore_mask(task, got)
            self.m.wake(task, got)
            return True

        def interrupted() -> int:
            state["done"] = True
            return neg(E.EINTR)

        ep.wait_queue.wait(lambda: finish(False))
        if deadline is not None:
            self.timeouts.add(deadline, task.tid, lambda: finish(True), state)
        self.m.block(task, "epoll_wait", interrupt=interrupted)
        return None
