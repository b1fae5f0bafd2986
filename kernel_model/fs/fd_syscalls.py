"""Descriptor syscalls: dup/dup2/dup3, fcntl, pipe/pipe2, poll/ppoll/select/pselect6,
and the sleeping halves of read/write on pipes and of reads of a host stdin.

A mixin of :class:`kernel_model.kernel.syscalls.Syscalls`.  A task that must wait (a read on an empty
pipe, a write on a full one, a poll with nothing ready) is put to sleep with
``Machine.block`` and a waiter on each pipe involved; the pipe runs its waiters when its
state changes, and the one that can finish completes the syscall in the sleeper's own
address space and ``Machine.wake``\\ s it with the result.  A finite timeout is a
deadline on the virtual clock: when every task sleeps, the machine asks
:meth:`FdSyscalls.expire_timeouts` to move the clock to the earliest deadline
(nothing ever spins).
"""

from __future__ import annotations

import errno as E
import select
import struct
import time

from kernel_model.fs.file import POLL_SLICE_MS, HostInput
from kernel_model.mm.mm_types import GuestFault
from kernel_model.fs.pipe import (POLLERR, POLLHUP, POLLIN, POLLNVAL, POLLOUT, POLLPRI, POLLRDBAND, POLLRDNORM,
                    POLLWRBAND, POLLWRNORM, Pipe, PipeEnd)

O_NONBLOCK, O_APPEND, O_DIRECT, O_NOATIME, O_CLOEXEC = 0o4000, 0o2000, 0o40000, 0o1000000, 0o2000000
FASYNC = 0o20000
SETFL_MASK = O_APPEND | O_NONBLOCK | FASYNC | O_DIRECT | O_NOATIME
F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL = 0, 1, 2, 3, 4
F_DUPFD_CLOEXEC, F_GETPIPE_SZ = 1030, 1032
FD_CLOEXEC = 1
SIGPIPE = 13
POLLIN_SET = POLLRDNORM | POLLRDBAND | POLLIN | POLLHUP | POLLERR
POLLOUT_SET = POLLWRBAND | POLLWRNORM | POLLOUT | POLLERR
POLLEX_SET = POLLPRI
FD_SETSIZE = 1024
PIPE_INO_BASE = 0x10000
# include/linux/errno.h: what a signal makes of an interrupted sleep
ERESTARTSYS, ERESTARTNOHAND, ERESTART_RESTARTBLOCK = 512, 514, 516


def _neg(err: int) -> int:
    return -err


def _host_ready(f) -> bool:
    """Would a read of the host descriptor behind ``f`` return at once (data, end of
    file or an error)?"""
    poller = select.poll()
    poller.register(f.fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


def _int(value: int) -> int:
    """A C int argument: signed 32-bit."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >> 31 else value


class FdSyscalls:
    """Descriptor-table and pipe syscalls."""

    # -- dup / fcntl --------------------------------------------------------------------
    def sys_dup(self, task, regs, fd, *_):
        f = task.process.fds.get(fd & 0xFFFFFFFF)
        if f is None:
            return _neg(E.EBADF)
        return task.process.fds.install(f, 0)

    def sys_dup2(self, task, regs, old, new, *_):
        old, new = old & 0xFFFFFFFF, new & 0xFFFFFFFF
        if old == new:                       # ksys_dup2: only checks that old is open
            return new if old in task.process.fds else _neg(E.EBADF)
        return self._dup3(task, old, new, 0)

    def sys_dup3(self, task, regs, old, new, flags, *_):
        old, new = old & 0xFFFFFFFF, new & 0xFFFFFFFF
        if flags & ~O_CLOEXEC & 0xFFFFFFFF:
            return _neg(E.EINVAL)
        if old == new:
            return _neg(E.EINVAL)
        return self._dup3(task, old, new, flags)

    def _dup3(self, task, old: int, new: int, flags: int) -> int:
        table = task.process.fds
        if new >= table.limit:
            return _neg(E.EBADF)
        f = table.get(old)
        if f is None:
            return _neg(E.EBADF)
        return table.replace(new, f, bool(flags & O_CLOEXEC))

    def sys_fcntl(self, task, regs, fd, cmd, arg, *_):
        """do_fcntl for the descriptor and status-flag commands; others EINVAL."""
        table = task.process.fds
        fd = fd & 0xFFFFFFFF
        f = table.get(fd)
        if f is None:
            return _neg(E.EBADF)
        cmd &= 0xFFFFFFFF
        if cmd in (F_DUPFD, F_DUPFD_CLOEXEC):
            lowest = arg & 0xFFFFFFFF                   # an unsigned long from a C int
            if lowest >= table.limit:
                return _neg(E.EINVAL)
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
            return f.pipe.size if f.is_pipe else _neg(E.EBADF)
        return _neg(E.EINVAL)

    # -- pipes ------------------------------------------------------------------------
    def sys_pipe(self, task, regs, fds, *_):
        return self.sys_pipe2(task, regs, fds, 0)

    def sys_pipe2(self, task, regs, fds, flags, *_):
        """do_pipe2: two descriptions on one new pipe; nothing stays installed when the
        descriptors cannot be copied out."""
        if flags & ~(O_CLOEXEC | O_NONBLOCK | O_DIRECT) & 0xFFFFFFFF:
            return _neg(E.EINVAL)
        table = task.process.fds
        self._pipe_ino = getattr(self, "_pipe_ino", PIPE_INO_BASE) + 1
        pipe = Pipe(self._pipe_ino)
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
            return _neg(E.EFAULT)
        return 0

    def pipe_read(self, task, f: PipeEnd, buf: int, count: int) -> int | None:
        """pipe_read: buffered bytes now, end of file, -EAGAIN on O_NONBLOCK, or sleep
        until a writer writes or the last one goes."""
        res = f.read(count)
        if res != -E.EAGAIN or f.nonblock:
            return self._copy_out(task, buf, res)

        token = self._sleep_on(task)

        def retry() -> bool:
            if not self._still_asleep(task, token):
                return True                  # the task died or was woken otherwise
            got = f.read(count)
            if got == -E.EAGAIN:
                return False
            self.m.wake(task, self._copy_out(task, buf, got))
            return True

        f.pipe.wait(retry)
        self.m.block(task, "pipe_read", interrupt=_neg(ERESTARTSYS))
        return None

    # -- reads of a host descriptor (the CLI's stdin) ---------------------------------
    def host_read(self, task, f: HostInput, buf: int, count: int) -> int | None:
        """A read of fd 0 backed by a host descriptor: what is there now, or sleep (as
        n_tty_read / pipe_read do, -ERESTARTSYS when a signal comes first) while other
        tasks run; when every task sleeps the machine waits for the host in wall time,
        up to the next virtual deadline (see :meth:`wait_host_input`).  O_NONBLOCK (set
        with fcntl on the guest's description): -EAGAIN instead of sleeping."""
        if _host_ready(f):
            return self._copy_out(task, buf, f.read(count, self.interrupted))
        if f.status_flags & O_NONBLOCK:
            return _neg(E.EAGAIN)
        token = self._sleep_on(task)

        def retry() -> bool:
            if not self._still_asleep(task, token):
                return True
            if not _host_ready(f):
                return False
            self.m.wake(task, self._copy_out(task, buf, f.read(count, self.interrupted)))
            return True

        self._host_waits().append((f, retry))
        self.m.block(task, "host_read", interrupt=_neg(ERESTARTSYS))
        return None

    def _host_waits(self) -> list:
        if not hasattr(self, "_host_waiters"):
            self._host_waiters = []
        return self._host_waiters

    def poll_host_waits(self, timeout_ms: int = 0) -> bool:
        """Complete the host reads whose descriptor became readable within
        ``timeout_ms``; True when a sleeper woke.  Cheap when nobody waits."""
        waits = self._host_waits()
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
        if not self._host_waits():
            return False
        start, base = time.monotonic_ns(), self.clock_ns
        while True:
            waited = time.monotonic_ns() - start
            left = None if until_ns is None else until_ns - base - waited
            if left is not None and left <= 0:
                self.clock_ns = max(self.clock_ns, until_ns)
                return False
            slice_ms = POLL_SLICE_MS if left is None else max(1, min(POLL_SLICE_MS, left // 1_000_000))
            woke = self.poll_host_waits(slice_ms)
            self.clock_ns = max(self.clock_ns, base + time.monotonic_ns() - start)
            if woke:
                return True
            if self.interrupted():
                return False

    @staticmethod
    def _sleep_on(task) -> object:
        """A token for this sleep: a waiter left on a pipe from an earlier sleep (the
        task was woken otherwise, then slept again) must not complete a later one."""
        task.fd_wait = object()
        return task.fd_wait

    @staticmethod
    def _still_asleep(task, token) -> bool:
        return task.state == "blocked" and getattr(task, "fd_wait", None) is token

    @staticmethod
    def _copy_out(task, buf: int, data) -> int:
        if isinstance(data, int):
            return data
        if data:
            try:
                task.process.mem.write_user(buf, data)
            except GuestFault:
                return _neg(E.EFAULT)
        return len(data)

    def pipe_write(self, task, f: PipeEnd, data: bytes) -> int | None:
        """pipe_write: a blocking write returns once every byte is in the pipe (sleeping
        while it is full); EPIPE and SIGPIPE when no reader is left, or the count
        written so far."""
        done = self._write_some(task, f, data, 0)
        if isinstance(done, int):
            return done
        state = {"written": done[0]}
        token = self._sleep_on(task)

        def retry() -> bool:
            if not self._still_asleep(task, token):
                return True
            res = self._write_some(task, f, data, state["written"])
            if isinstance(res, tuple):
                state["written"] = res[0]
                return False
            self.m.wake(task, res)
            return True

        f.pipe.wait(retry)
        # pipe_write: a signal ends the wait with the count written so far, if any
        self.m.block(task, "pipe_write", interrupt=lambda: state["written"] or _neg(ERESTARTSYS))
        return None

    def _write_some(self, task, f: PipeEnd, data: bytes, written: int):
        """Write what fits from ``written`` on: the final result (count or errno), or
        ``(written,)`` when the rest must wait for room."""
        while written < len(data):
            n = f.write(data[written:])
            if n == -E.EPIPE:
                self.m.send_sig(task, SIGPIPE, detail="write to a pipe with no reader")
                return written or _neg(E.EPIPE)
            if n == -E.EAGAIN:
                return (written or _neg(E.EAGAIN)) if f.nonblock else (written,)
            written += n
        return written

    # -- poll / select -----------------------------------------------------------------
    def sys_poll(self, task, regs, ufds, nfds, timeout_ms, *_):
        """poll: a signal ends the wait with -ERESTART_RESTARTBLOCK; restart_syscall
        (do_restart_poll) polls again until the original deadline."""
        ms = _int(timeout_ms)
        return self._restartable_poll(task, ufds, nfds, None if ms < 0 else self.clock_ns + ms * 1_000_000)

    def _restartable_poll(self, task, ufds, nfds, deadline: int | None):
        timeout = None if deadline is None else max(0, deadline - self.clock_ns)

        def restart(t):
            return self._restartable_poll(t, ufds, nfds, deadline)
        return self._poll(task, ufds, nfds, timeout, None, restart=restart)

    def sys_ppoll(self, task, regs, ufds, nfds, tsp, sigmask, sigsetsize, *_):
        timeout = self._read_timespec(task, tsp)
        if isinstance(timeout, int) and timeout < 0:
            return timeout
        err = self._set_user_sigmask(task, sigmask, sigsetsize)
        if err:
            return err
        ret = self._poll(task, ufds, nfds, timeout, tsp or None)
        return self._restore_sigmask_unless_interrupted(task, ret)

    def _set_user_sigmask(self, task, uset: int, size: int) -> int:
        """set_user_sigmask: ppoll/pselect6's mask for the duration of the wait (the
        old one saved, as rt_sigsuspend saves it); 0, or -EINVAL/-EFAULT."""
        if not uset:
            return 0
        if size != 8:
            return _neg(E.EINVAL)
        new = struct.unpack("<Q", task.process.mem.read_user(uset, 8))[0]
        task.saved_sigmask, task.sigmask = task.sigmask, new & ~((1 << 8) | (1 << 18))
        return 0

    @staticmethod
    def _restore_sigmask_unless_interrupted(task, ret):
        """restore_saved_sigmask_unless(ret == -ERESTARTNOHAND): a wait that ended
        without a signal puts the old mask back at once; an interrupted one keeps the
        temporary mask until the handler's frame has saved the old one."""
        if ret is not None and ret != _neg(ERESTARTNOHAND) and task.saved_sigmask is not None:
            task.sigmask, task.saved_sigmask = task.saved_sigmask, None
        return ret

    def _read_timespec(self, task, tsp: int, usec: bool = False) -> int | None:
        """A timeout argument in ns (None: wait for ever); -EINVAL when malformed."""
        if not tsp:
            return None
        sec, frac = struct.unpack("<qq", task.process.mem.read_user(tsp, 16))
        scale, top = (1000, 1_000_000) if usec else (1, 1_000_000_000)
        if sec < 0 or not 0 <= frac < top:
            return _neg(E.EINVAL)
        return sec * 1_000_000_000 + frac * scale

    def _poll(self, task, ufds: int, nfds: int, timeout: int | None, tsp: int | None, restart=None):
        """do_sys_poll: revents for every entry (POLLNVAL for a closed descriptor, 0
        for a negative one); the number of entries with revents."""
        if nfds > task.process.fds.limit:
            return _neg(E.EINVAL)
        mem = task.process.mem
        raw = mem.read_user(ufds, 8 * nfds) if nfds else b""
        entries = [struct.unpack_from("<ihh", raw, 8 * i) for i in range(nfds)]

        def check(final: bool):
            revents, ready = [], 0
            for fd, events, _ in entries:
                r = 0
                if fd >= 0:
                    f = task.process.fds.get(fd)
                    want = (events & 0xFFFF) | POLLERR | POLLHUP
                    r = POLLNVAL if f is None else f.poll() & want
                revents.append(r)
                ready += bool(r)
            if not ready and not final:
                return None
            out = b"".join(struct.pack("<ihh", fd, ev, r) for (fd, ev, _), r in zip(entries, revents))
            if out:
                mem.write_user(ufds, out)
            return ready

        pipes = [f.pipe for fd, _, _ in entries if fd >= 0
                 for f in [task.process.fds.get(fd)] if f is not None and f.is_pipe]
        return self._wait_ready(task, check, timeout, pipes, tsp, usec=False, reason="poll", restart=restart)

    def sys_select(self, task, regs, n, inp, outp, exp, tvp, *_):
        timeout = self._read_timespec(task, tvp, usec=True)
        if isinstance(timeout, int) and timeout < 0:
            return timeout
        return self._select(task, n, inp, outp, exp, timeout, tvp or None, usec=True)

    def sys_pselect6(self, task, regs, n, inp, outp, exp, tsp, sig, *_):
        timeout = self._read_timespec(task, tsp)
        if isinstance(timeout, int) and timeout < 0:
            return timeout
        if sig:                           # struct { const sigset_t *p; size_t size; }
            uset, size = struct.unpack("<QQ", task.process.mem.read_user(sig, 16))
            err = self._set_user_sigmask(task, uset, size)
            if err:
                return err
        return self._restore_sigmask_unless_interrupted(
            task, self._select(task, n, inp, outp, exp, timeout, tsp or None, usec=False))

    def _select(self, task, n, inp, outp, exp, timeout, tsp, usec: bool):
        """core_sys_select: the three fd_sets in, the ready ones out (all cleared when
        none is), EBADF for a set descriptor that is not open."""
        n = _int(n)
        if n < 0:
            return _neg(E.EINVAL)
        n = min(n, task.process.fds.limit)
        size = (n + 63) // 64 * 8
        mem = task.process.mem
        sets = [(p, int.from_bytes(mem.read_user(p, size), "little") if p and size else 0)
                for p in (inp, outp, exp)]
        wanted = 0
        for _, bits in sets:
            wanted |= bits
        fds = [fd for fd in range(n) if wanted >> fd & 1]
        for fd in fds:
            if task.process.fds.get(fd) is None:
                return _neg(E.EBADF)

        def check(final: bool):
            result, ready = [], 0
            masks = {fd: task.process.fds.get(fd).poll() if fd in task.process.fds else POLLNVAL
                     for fd in fds}
            for (_, bits), kind in zip(sets, (POLLIN_SET, POLLOUT_SET, POLLEX_SET)):
                got = 0
                for fd in fds:
                    if bits >> fd & 1 and masks[fd] & kind:
                        got |= 1 << fd
                        ready += 1
                result.append(got)
            if not ready and not final:
                return None
            for (p, _), got in zip(sets, result):
                if p and size:
                    mem.write_user(p, got.to_bytes(size, "little"))
            return ready

        pipes = [task.process.fds.get(fd).pipe for fd in fds if task.process.fds.get(fd).is_pipe]
        return self._wait_ready(task, check, timeout, pipes, tsp, usec=usec, reason="select")

    def _wait_ready(self, task, check, timeout, pipes, tsp, *, usec: bool, reason: str, restart=None):
        """do_poll / do_select's loop without the loop: ready now, timed out now (a zero
        timeout), or asleep on every pipe until one is ready or the deadline passes.
        The remaining time is written back to ``tsp`` (poll_select_finish).  A signal
        ends the sleep with -ERESTARTNOHAND, or with ``restart`` (poll's
        do_restart_poll) as the restart_block and -ERESTART_RESTARTBLOCK."""
        res = check(timeout == 0)
        if res is not None:
            return res
        deadline = None if timeout is None else self.clock_ns + timeout
        state = {"done": False}
        token = self._sleep_on(task)

        def finish(final: bool) -> bool:
            if state["done"] or not self._still_asleep(task, token):
                state["done"] = True
                return True
            try:
                got = check(final)
            except GuestFault:
                got = _neg(E.EFAULT)
            if got is None:
                return False
            state["done"] = True
            if tsp is not None and deadline is not None:
                self._write_remaining(task, tsp, max(0, deadline - self.clock_ns), usec)
            self._restore_sigmask_unless_interrupted(task, got)
            self.m.wake(task, got)
            return True

        def interrupted() -> int:
            state["done"] = True
            if tsp is not None and deadline is not None:
                self._write_remaining(task, tsp, max(0, deadline - self.clock_ns), usec)
            if restart is None:
                return _neg(ERESTARTNOHAND)
            task.restart_block = restart
            return _neg(ERESTART_RESTARTBLOCK)

        for p in set(pipes):
            p.wait(lambda: finish(False))
        if deadline is not None:
            pending = self._timeouts()
            pending[:] = [e for e in pending if not e[3]["done"]]
            pending.append((deadline, task.tid, lambda: finish(True), state))
        self.m.block(task, reason, interrupt=interrupted)
        return None

    @staticmethod
    def _write_remaining(task, tsp: int, ns: int, usec: bool) -> None:
        frac = ns % 1_000_000_000
        try:
            task.process.mem.write_user(tsp, struct.pack("<qq", ns // 1_000_000_000,
                                                         frac // 1000 if usec else frac))
        except GuestFault:
            pass

    def _timeouts(self) -> list:
        if not hasattr(self, "_poll_timeouts"):
            self._poll_timeouts = []
        return self._poll_timeouts

    def next_poll_deadline_ns(self) -> int | None:
        """The earliest deadline of a sleep still waiting for it (poll, select,
        nanosleep); one a signal or its pipe ended is no deadline any more."""
        return min((e[0] for e in self._timeouts() if not e[3]["done"]), default=None)

    def expire_due(self) -> None:
        """Fire the sleeps (poll, select, nanosleep, futex) whose deadline the clock
        has reached while tasks ran."""
        pending = self._timeouts()
        if not any(e[0] <= self.clock_ns for e in pending):
            return
        due = sorted((e for e in pending if e[0] <= self.clock_ns), key=lambda e: (e[0], e[1]))
        pending[:] = [e for e in pending if e[0] > self.clock_ns]
        for _, _, fire, state in due:
            if not state["done"]:
                fire()

    def expire_timeouts(self) -> bool:
        """Every task sleeps: move the virtual clock to the earliest poll/select
        deadline and time that sleeper out.  False when no deadline is pending."""
        pending = self._timeouts()
        while pending:
            pending.sort(key=lambda e: (e[0], e[1]))
            deadline, _, fire, state = pending.pop(0)
            if state["done"]:
                continue                     # ended otherwise: the clock does not go there
            self.clock_ns = max(self.clock_ns, deadline)
            before = sum(1 for t in self.m.tasks if t.state == "running")
            fire()
            if sum(1 for t in self.m.tasks if t.state == "running") > before:
                return True
        return False
