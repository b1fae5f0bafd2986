"""poll, ppoll, select and pselect6 (fs/select.c).

A poll with nothing ready sleeps with a waiter on each pipe involved; the pipe runs
its waiters when its state changes.  A finite timeout is a deadline on the virtual
clock (:class:`kernel_model.kernel.time.timekeeping.Timeouts`): when every task
sleeps, the machine moves the clock to the earliest deadline (nothing ever spins).
"""

from __future__ import annotations

import errno as E
import struct

from kernel_model.fs.pipe import (
    POLLERR,
    POLLHUP,
    POLLIN,
    POLLNVAL,
    POLLOUT,
    POLLPRI,
    POLLRDBAND,
    POLLRDNORM,
    POLLWRBAND,
    POLLWRNORM,
)
from kernel_model.include.linux.errno import ERESTART_RESTARTBLOCK, ERESTARTNOHAND, neg
from kernel_model.include.linux.syscalls import int_arg, syscall
from kernel_model.kernel.wait import sleep_on, still_asleep
from kernel_model.mm.mm_types import GuestFault

POLLIN_SET = POLLRDNORM | POLLRDBAND | POLLIN | POLLHUP | POLLERR
POLLOUT_SET = POLLWRBAND | POLLWRNORM | POLLOUT | POLLERR
POLLEX_SET = POLLPRI


class SelectSyscalls:
    """Waiting for descriptors to become ready."""

    def __init__(self, sc):
        self.m = sc.m
        self.clock = sc.clock
        self.timeouts = sc.timeouts

    @syscall(7, "poll")
    def sys_poll(self, task, regs, ufds, nfds, timeout_ms, *_):
        """poll: a signal ends the wait with -ERESTART_RESTARTBLOCK; restart_syscall
        (do_restart_poll) polls again until the original deadline."""
        ms = int_arg(timeout_ms)
        return self._restartable_poll(task, ufds, nfds, None if ms < 0 else self.clock.ns + ms * 1_000_000)

    def _restartable_poll(self, task, ufds, nfds, deadline: int | None):
        timeout = None if deadline is None else max(0, deadline - self.clock.ns)

        def restart(t):
            return self._restartable_poll(t, ufds, nfds, deadline)

        return self._poll(task, ufds, nfds, timeout, None, restart=restart)

    @syscall(271, "ppoll")
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
            return neg(E.EINVAL)
        new = struct.unpack("<Q", task.process.mem.read_user(uset, 8))[0]
        task.saved_sigmask, task.sigmask = task.sigmask, new & ~((1 << 8) | (1 << 18))
        return 0

    @staticmethod
    def _restore_sigmask_unless_interrupted(task, ret):
        """restore_saved_sigmask_unless(ret == -ERESTARTNOHAND): a wait that ended
        without a signal puts the old mask back at once; an interrupted one keeps the
        temporary mask until the handler's frame has saved the old one."""
        if ret is not None and ret != neg(ERESTARTNOHAND) and task.saved_sigmask is not None:
            task.sigmask, task.saved_sigmask = task.saved_sigmask, None
        return ret

    def _read_timespec(self, task, tsp: int, usec: bool = False) -> int | None:
        """A timeout argument in ns (None: wait for ever); -EINVAL when malformed."""
        if not tsp:
            return None
        sec, frac = struct.unpack("<qq", task.process.mem.read_user(tsp, 16))
        scale, top = (1000, 1_000_000) if usec else (1, 1_000_000_000)
        if sec < 0 or not 0 <= frac < top:
            return neg(E.EINVAL)
        return sec * 1_000_000_000 + frac * scale

    def _poll(self, task, ufds: int, nfds: int, timeout: int | None, tsp: int | None, restart=None):
        """do_sys_poll: revents for every entry (POLLNVAL for a closed descriptor, 0
        for a negative one); the number of entries with revents."""
        if nfds > task.process.files.limit:
            return neg(E.EINVAL)
        mem = task.process.mem
        raw = mem.read_user(ufds, 8 * nfds) if nfds else b""
        entries = [struct.unpack_from("<ihh", raw, 8 * i) for i in range(nfds)]

        def check(final: bool):
            revents, ready = [], 0
            for fd, events, _ in entries:
                r = 0
                if fd >= 0:
                    f = task.process.files.get(fd)
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

        pipes = [
            f.pipe
            for fd, _, _ in entries
            if fd >= 0
            for f in [task.process.files.get(fd)]
            if f is not None and f.is_pipe
        ]
        return self._wait_ready(task, check, timeout, pipes, tsp, usec=False, reason="poll", restart=restart)

    @syscall(23, "select")
    def sys_select(self, task, regs, n, inp, outp, exp, tvp, *_):
        timeout = self._read_timespec(task, tvp, usec=True)
        if isinstance(timeout, int) and timeout < 0:
            return timeout
        return self._select(task, n, inp, outp, exp, timeout, tvp or None, usec=True)

    @syscall(270, "pselect6")
    def sys_pselect6(self, task, regs, n, inp, outp, exp, tsp, sig, *_):
        timeout = self._read_timespec(task, tsp)
        if isinstance(timeout, int) and timeout < 0:
            return timeout
        if sig:  # struct { const sigset_t *p; size_t size; }
            uset, size = struct.unpack("<QQ", task.process.mem.read_user(sig, 16))
            err = self._set_user_sigmask(task, uset, size)
            if err:
                return err
        return self._restore_sigmask_unless_interrupted(
            task, self._select(task, n, inp, outp, exp, timeout, tsp or None, usec=False)
        )

    def _select(self, task, n, inp, outp, exp, timeout, tsp, usec: bool):
        """core_sys_select: the three fd_sets in, the ready ones out (all cleared when
        none is), EBADF for a set descriptor that is not open."""
        n = int_arg(n)
        if n < 0:
            return neg(E.EINVAL)
        n = min(n, task.process.files.limit)
        size = (n + 63) // 64 * 8
        mem = task.process.mem
        sets = [(p, int.from_bytes(mem.read_user(p, size), "little") if p and size else 0) for p in (inp, outp, exp)]
        wanted = 0
        for _, bits in sets:
            wanted |= bits
        fds = [fd for fd in range(n) if wanted >> fd & 1]
        for fd in fds:
            if task.process.files.get(fd) is None:
                return neg(E.EBADF)

        def check(final: bool):
            result, ready = [], 0
            masks = {fd: task.process.files.get(fd).poll() if fd in task.process.files else POLLNVAL for fd in fds}
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

        pipes = [task.process.files.get(fd).pipe for fd in fds if task.process.files.get(fd).is_pipe]
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
        deadline = None if timeout is None else self.clock.ns + timeout
        state = {"done": False}
        token = sleep_on(task)

        def finish(final: bool) -> bool:
            if state["done"] or not still_asleep(task, token):
                state["done"] = True
                return True
            try:
                got = check(final)
            except GuestFault:
                got = neg(E.EFAULT)
            if got is None:
                return False
            state["done"] = True
            if tsp is not None and deadline is not None:
                self._write_remaining(task, tsp, max(0, deadline - self.clock.ns), usec)
            self._restore_sigmask_unless_interrupted(task, got)
            self.m.wake(task, got)
            return True

        def interrupted() -> int:
            state["done"] = True
            if tsp is not None and deadline is not None:
                self._write_remaining(task, tsp, max(0, deadline - self.clock.ns), usec)
            if restart is None:
                return neg(ERESTARTNOHAND)
            task.restart_block = restart
            return neg(ERESTART_RESTARTBLOCK)

        for p in set(pipes):
            p.wait(lambda: finish(False))
        if deadline is not None:
            self.timeouts.add(deadline, task.tid, lambda: finish(True), state)
        self.m.block(task, reason, interrupt=interrupted)
        return None

    @staticmethod
    def _write_remaining(task, tsp: int, ns: int, usec: bool) -> None:
        frac = ns % 1_000_000_000
        try:
            task.process.mem.write_user(tsp, struct.pack("<qq", ns // 1_000_000_000, frac // 1000 if usec else frac))
        except GuestFault:
            pass
