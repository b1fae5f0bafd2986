"""Resource limits (kernel/sys.c: do_prlimit, getrlimit/setrlimit/prlimit64).

Each process holds its ``signal->rlim`` (:attr:`kernel_model.kernel.task.SignalStruct.rlim`),
copied at fork and kept across exec; a new machine starts with the kernel's ``INIT_RLIMITS``
(include/asm-generic/resource.h), the
process-count limits sized from the modeled RAM as ``set_max_threads`` does.

What a limit changes in the model: RLIMIT_NOFILE bounds the descriptor numbers
``alloc_fd`` hands out (``dup2``/``fcntl(F_DUPFD)`` and ``poll``'s nfds check read it too).
The other limits are kept and reported, not enforced (README, Known limits).
"""

from __future__ import annotations

import errno as E
import struct

from kernel_model.errors import InputError
from kernel_model.include.linux.syscalls import pid_t, syscall

RLIM_INFINITY = 0xFFFFFFFFFFFFFFFF
(
    RLIMIT_CPU,
    RLIMIT_FSIZE,
    RLIMIT_DATA,
    RLIMIT_STACK,
    RLIMIT_CORE,
    RLIMIT_RSS,
    RLIMIT_NPROC,
    RLIMIT_NOFILE,
    RLIMIT_MEMLOCK,
    RLIMIT_AS,
    RLIMIT_LOCKS,
    RLIMIT_SIGPENDING,
    RLIMIT_MSGQUEUE,
    RLIMIT_NICE,
    RLIMIT_RTPRIO,
    RLIMIT_RTTIME,
) = range(16)
RLIM_NLIMITS = 16
NR_OPEN = 1024 * 1024  # fs.nr_open's default (sysctl_nr_open)
THREAD_SIZE = 16 * 1024  # x86_64 kernel stacks
MLOCK_LIMIT = 8 << 20
MQ_BYTES_MAX = 819200


def init_rlimits(mem_total: int) -> list[tuple[int, int]]:
    """INIT_RLIMITS for a machine with ``mem_total`` bytes of RAM: init_task's limits
    after fork_init set RLIMIT_NPROC and RLIMIT_SIGPENDING to max_threads / 2."""
    max_threads = max(20, min(mem_total // (THREAD_SIZE * 8), 0x3FFFFFFF))
    half = max_threads // 2
    inf = (RLIM_INFINITY, RLIM_INFINITY)
    limits = [inf] * RLIM_NLIMITS
    limits[RLIMIT_STACK] = (8 << 20, RLIM_INFINITY)
    limits[RLIMIT_CORE] = (0, RLIM_INFINITY)
    limits[RLIMIT_NPROC] = (half, half)
    limits[RLIMIT_NOFILE] = (1024, 4096)  # INR_OPEN_CUR, INR_OPEN_MAX
    limits[RLIMIT_MEMLOCK] = (MLOCK_LIMIT, MLOCK_LIMIT)
    limits[RLIMIT_SIGPENDING] = (half, half)
    limits[RLIMIT_MSGQUEUE] = (MQ_BYTES_MAX, MQ_BYTES_MAX)
    limits[RLIMIT_NICE] = (0, 0)
    limits[RLIMIT_RTPRIO] = (0, 0)
    return limits


def check_rlimits(limits: object) -> list[tuple[int, int]] | None:
    """Initial limits given to a machine: RLIM_NLIMITS (soft, hard) pairs of integers
    with soft <= hard, each 0..RLIM_INFINITY; None for INIT_RLIMITS."""
    if limits is None:
        return None
    if not isinstance(limits, (list, tuple)) or len(limits) != RLIM_NLIMITS:
        raise InputError(f"rlimits must be {RLIM_NLIMITS} (soft, hard) pairs, not {limits!r}")
    out = []
    for pair in limits:
        if (
            not isinstance(pair, (list, tuple))
            or len(pair) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= RLIM_INFINITY for v in pair)
            or pair[0] > pair[1]
        ):
            raise InputError(f"an rlimit is (soft, hard) with 0 <= soft <= hard <= 2**64-1, not {pair!r}")
        out.append((pair[0], pair[1]))
    return out


class RlimitSyscalls:
    """getrlimit/setrlimit/prlimit64 on each process's ``signal->rlim``."""

    def __init__(self, sc, initial: list[tuple[int, int]] | None = None):
        self.m = sc.m
        self.mem_total = sc.mem_total
        self.initial = initial  # the first process's limits when not INIT_RLIMITS (a diff like the host)

    def rlimits_of(self, proc) -> list[tuple[int, int]]:
        if proc.signal.rlim is None:
            proc.signal.rlim = list(self.initial) if self.initial is not None else init_rlimits(self.mem_total)
        return proc.signal.rlim

    def do_prlimit(self, task, proc, resource: int, new: tuple[int, int] | None) -> tuple[int, int] | int:
        """do_prlimit: the old limit, after installing ``new`` (EINVAL for cur > max or
        NOFILE past nr_open... EPERM to raise a hard limit without privilege)."""
        if resource >= RLIM_NLIMITS:
            return -E.EINVAL
        limits = self.rlimits_of(proc)
        old = limits[resource]
        if new is not None:
            cur, mx = new
            if cur > mx:
                return -E.EINVAL
            if resource == RLIMIT_NOFILE and mx > NR_OPEN:
                return -E.EPERM
            if mx > old[1] and not (task.cred is not None and task.cred.euid == 0):
                return -E.EPERM  # raising the hard limit needs CAP_SYS_RESOURCE
            limits[resource] = (cur, mx)
            if resource == RLIMIT_NOFILE:
                proc.files.limit = min(cur, NR_OPEN)
        return old

    def _target(self, task, pid: int):
        """prlimit64's pid: 0 is the caller, else any guest process (the caller has
        the same credentials as every guest process: check_prlimit_permission passes)."""
        pid = pid_t(pid)
        if pid == 0 or pid == task.process.pid:
            return task.process
        if pid < 0:
            return None
        return next((p for p in self.m.processes if p.pid == pid and p.exit_result is None), None) or next(
            (t.process for p in self.m.processes for t in p.tasks if t.tid == pid), None
        )

    @syscall(302, "prlimit64")
    def sys_prlimit64(self, task, regs, pid, resource, new, old, *_):
        proc = self._target(task, pid)
        if proc is None:
            return -E.ESRCH
        want = struct.unpack("<QQ", self.m.mem.read_user(new, 16)) if new else None
        got = self.do_prlimit(task, proc, resource & 0xFFFFFFFF, want)
        if isinstance(got, int):
            return got
        if old:
            self.m.mem.write_user(old, struct.pack("<QQ", *got))
        return 0

    @syscall(97, "getrlimit")
    def sys_getrlimit(self, task, regs, resource, old, *_):
        got = self.do_prlimit(task, task.process, resource & 0xFFFFFFFF, None)
        if isinstance(got, int):
            return got
        self.m.mem.write_user(old, struct.pack("<QQ", *got))
        return 0

    @syscall(160, "setrlimit")
    def sys_setrlimit(self, task, regs, resource, new, *_):
        want = struct.unpack("<QQ", self.m.mem.read_user(new, 16))
        got = self.do_prlimit(task, task.process, resource & 0xFFFFFFFF, want)
        return got if isinstance(got, int) else 0
