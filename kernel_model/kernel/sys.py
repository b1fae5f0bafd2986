"""Identity and limits: credentials (kernel/sys.c, kernel/groups.c), prctl's task name,
sched_getaffinity, getrusage/times, and the socket calls of a machine without network.

A mixin of :class:`kernel_model.kernel.syscalls.Syscalls`.  Each task holds a :class:`Cred` (the
kernel's ``struct cred``: immutable, replaced whole as ``commit_creds`` does, shared by
the tasks it was copied to).  Privilege is the traditional root model: a task whose
effective uid is 0 has CAP_SETUID/CAP_SETGID (``cap_emulate_setxuid`` drops them when it
leaves euid 0), any other task has none.  The model has no sockets: ``socket`` fails and
every socket call on a descriptor answers as the kernel does for a non-socket.
"""

from __future__ import annotations

import errno as E
import os
import struct
from dataclasses import dataclass, replace

from kernel_model.errors import InputError

NO_ID = 0xFFFFFFFF                 # (uid_t)-1: "unchanged" for setre*/setres*, invalid else
NGROUPS_MAX = 65536
TASK_COMM_LEN = 16
PR_SET_NAME, PR_GET_NAME = 15, 16
CPUMASK_SIZE = 8                   # cpumask_size(): one unsigned long for the one CPU
USER_HZ = 100                      # clock_t ticks per second (times, AT_CLKTCK)
HZ = 250                           # the modeled kernel's tick (Debian's CONFIG_HZ)
TICK_NSEC = 1_000_000_000 // HZ
INITIAL_JIFFIES = (1 << 32) - 300 * HZ   # jiffies wrap 5 minutes after boot (linux/jiffies.h)
RUSAGE_SELF, RUSAGE_CHILDREN, RUSAGE_THREAD = 0, -1, 1
RUSAGE_SIZE = 144                  # sizeof(struct rusage)
TMS_SIZE = 32                      # sizeof(struct tms)
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
NPROTO, SOCK_MAX, SOCK_TYPE_MASK = 46, 11, 0xF
SOCK_NONBLOCK, SOCK_CLOEXEC = 0o4000, 0o2000000
MSG_CMSG_COMPAT = 0x80000000


def _neg(err: int) -> int:
    return -err


def _int(value: int) -> int:
    """A C ``int`` argument: signed 32-bit."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >> 31 else value


def _valid_id(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < NO_ID:
        raise InputError(f"{what} must be an integer 0-{NO_ID - 1}, not {value!r}")
    return value


@dataclass(frozen=True)
class Cred:
    """``struct cred``'s ids: real, effective, saved and filesystem uid/gid, and the
    supplementary groups (kept sorted, as ``groups_sort`` does)."""
    uid: int
    euid: int
    suid: int
    fsuid: int
    gid: int
    egid: int
    sgid: int
    fsgid: int
    groups: tuple[int, ...] = ()

    @classmethod
    def initial(cls, uid: int | None = None, gid: int | None = None,
                groups: tuple[int, ...] | list[int] | None = None) -> "Cred":
        """The first task's credentials: every uid ``uid`` and every gid ``gid``
        (default: the invoking user's, as ``os.getuid()``/``os.getgid()``), and the
        supplementary ``groups`` (default: the invoking user's when both ids are the
        invoking user's, none otherwise)."""
        own = uid is None and gid is None
        uid = os.getuid() if uid is None else _valid_id(uid, "uid")
        gid = os.getgid() if gid is None else _valid_id(gid, "gid")
        if groups is None:
            groups = os.getgroups() if own else ()
        groups = tuple(sorted(_valid_id(g, "a group id") for g in groups))
        if len(groups) > NGROUPS_MAX:
            raise InputError(f"at most {NGROUPS_MAX} supplementary groups, not {len(groups)}")
        return cls(uid, uid, uid, uid, gid, gid, gid, gid, groups)

    @property
    def privileged(self) -> bool:
        """CAP_SETUID/CAP_SETGID in the effective set: euid 0 (root)."""
        return self.euid == 0


class IdentitySyscalls:
    """Credentials, prctl(PR_SET_NAME/PR_GET_NAME), affinity, usage, and no network."""

    # -- reading ids ----------------------------------------------------------------
    def sys_getuid(self, task, regs, *_):
        return task.cred.uid

    def sys_geteuid(self, task, regs, *_):
        return task.cred.euid

    def sys_getgid(self, task, regs, *_):
        return task.cred.gid

    def sys_getegid(self, task, regs, *_):
        return task.cred.egid

    def sys_getresuid(self, task, regs, rp, ep, sp, *_):
        c = task.cred
        return self._put_ids(((rp, c.uid), (ep, c.euid), (sp, c.suid)))

    def sys_getresgid(self, task, regs, rp, ep, sp, *_):
        c = task.cred
        return self._put_ids(((rp, c.gid), (ep, c.egid), (sp, c.sgid)))

    def _put_ids(self, pairs) -> int:
        for addr, value in pairs:           # put_user one by one: EFAULT stops there
            self.mem.write_user(addr, struct.pack("<I", value))
        return 0

    def sys_getgroups(self, task, regs, size, lst, *_):
        """groups16/getgroups: size 0 asks for the count; a smaller list is EINVAL."""
        size, groups = _int(size), task.cred.groups
        if size < 0:
            return _neg(E.EINVAL)
        if size:
            if size < len(groups):
                return _neg(E.EINVAL)
            self.mem.write_user(lst, struct.pack(f"<{len(groups)}I", *groups))
        return len(groups)

    # -- changing ids (__sys_setuid and friends) ------------------------------------
    def sys_setuid(self, task, regs, uid, *_):
        return self._setxid(task, uid & NO_ID, "uid")

    def sys_setgid(self, task, regs, gid, *_):
        return self._setxid(task, gid & NO_ID, "gid")

    def _setxid(self, task, new: int, kind: str) -> int:
        """__sys_setuid/__sys_setgid: a privileged task sets real, saved, effective and
        fs ids; another may only set its effective (and fs) id to its real or saved id."""
        if new == NO_ID:
            return _neg(E.EINVAL)
        old = task.cred
        real, saved = getattr(old, kind), getattr(old, "s" + kind)
        if old.privileged:
            changes = {kind: new, "s" + kind: new}
        elif new in (real, saved):
            changes = {}
        else:
            return _neg(E.EPERM)
        self._commit(task, **changes, **{"e" + kind: new, "fs" + kind: new})
        return 0

    def sys_setreuid(self, task, regs, ruid, euid, *_):
        return self._setrexid(task, ruid & NO_ID, euid & NO_ID, "uid")

    def sys_setregid(self, task, regs, rgid, egid, *_):
        return self._setrexid(task, rgid & NO_ID, egid & NO_ID, "gid")

    def _setrexid(self, task, r: int, e: int, kind: str) -> int:
        """__sys_setreuid: the real id may become the real or effective one, the
        effective id any of real/effective/saved; the saved id follows the new
        effective one when the real id was given or the effective one moved off it."""
        old = task.cred
        real, eff, saved = getattr(old, kind), getattr(old, "e" + kind), getattr(old, "s" + kind)
        if not old.privileged and ((r != NO_ID and r not in (real, eff))
                                   or (e != NO_ID and e not in (real, eff, saved))):
            return _neg(E.EPERM)
        new_r = real if r == NO_ID else r
        new_e = eff if e == NO_ID else e
        new_s = new_e if r != NO_ID or (e != NO_ID and e != real) else saved
        self._commit(task, **{kind: new_r, "e" + kind: new_e, "s" + kind: new_s, "fs" + kind: new_e})
        return 0

    def sys_setresuid(self, task, regs, r, e, s, *_):
        return self._setresxid(task, (r & NO_ID, e & NO_ID, s & NO_ID), "uid")

    def sys_setresgid(self, task, regs, r, e, s, *_):
        return self._setresxid(task, (r & NO_ID, e & NO_ID, s & NO_ID), "gid")

    def _setresxid(self, task, ids, kind: str) -> int:
        """__sys_setresuid: an unprivileged task may set each id to any of its current
        real, effective or saved ids; -1 leaves one unchanged."""
        old = task.cred
        names = (kind, "e" + kind, "s" + kind)
        current = tuple(getattr(old, n) for n in names)
        if not old.privileged and any(v != NO_ID and v not in current for v in ids):
            return _neg(E.EPERM)
        new = {n: (c if v == NO_ID else v) for n, c, v in zip(names, current, ids)}
        self._commit(task, **new, **{"fs" + kind: new["e" + kind]})
        return 0

    def sys_setfsuid(self, task, regs, uid, *_):
        return self._setfsxid(task, uid & NO_ID, "uid")

    def sys_setfsgid(self, task, regs, gid, *_):
        return self._setfsxid(task, gid & NO_ID, "gid")

    def _setfsxid(self, task, new: int, kind: str) -> int:
        """__sys_setfsuid: always returns the old fs id; changes it only to one of the
        task's ids, or to any valid id when privileged."""
        old = task.cred
        old_fs = getattr(old, "fs" + kind)
        allowed = (getattr(old, kind), getattr(old, "e" + kind), getattr(old, "s" + kind), old_fs)
        if new != NO_ID and (new in allowed or old.privileged) and new != old_fs:
            self._commit(task, **{"fs" + kind: new})
        return old_fs

    def sys_setgroups(self, task, regs, size, lst, *_):
        """setgroups: needs CAP_SETGID (may_setgroups); the list is stored sorted."""
        size = _int(size)
        if not task.cred.privileged:
            return _neg(E.EPERM)
        if not 0 <= size <= NGROUPS_MAX:
            return _neg(E.EINVAL)
        groups = struct.unpack(f"<{size}I", self.mem.read_user(lst, 4 * size)) if size else ()
        self._commit(task, groups=tuple(sorted(groups)))
        return 0

    @staticmethod
    def _commit(task, **changes) -> None:
        """prepare_creds + commit_creds: the task gets a new Cred; others sharing the
        old one keep it."""
        if changes:
            task.cred = replace(task.cred, **changes)

    # -- prctl --------------------------------------------------------------------
    def sys_prctl(self, task, regs, option, arg2, *_):
        """PR_SET_NAME/PR_GET_NAME on the calling thread's ``comm`` (TASK_COMM_LEN 16:
        15 bytes and a NUL; a name that is not UTF-8 reads back with U+FFFD).  Other options are not modeled: ENOSYS, counted as
        ``prctl(N)`` among the unknown syscalls."""
        option = _int(option)
        if option == PR_SET_NAME:
            raw = self.mem.read_cstring(arg2, TASK_COMM_LEN - 1)[:TASK_COMM_LEN - 1]
            task.comm = raw.decode("utf-8", "replace")
            return 0
        if option == PR_GET_NAME:
            name = task.comm.encode("utf-8")[:TASK_COMM_LEN - 1]
            self.mem.write_user(arg2, name.ljust(TASK_COMM_LEN, b"\0"))
            return 0
        self.m.counters.unknown_syscalls[f"157:prctl({option})"] += 1
        return _neg(E.ENOSYS)

    # -- scheduling and usage ------------------------------------------------------
    def sys_sched_getaffinity(self, task, regs, pid, length, mask, *_):
        """sched_getaffinity: the buffer must hold nr_cpu_ids bits and be a whole
        number of longs; min(len, cpumask_size()) bytes of the one-CPU mask are copied
        and their count returned."""
        length &= 0xFFFFFFFF
        if length * 8 < 1 or length % 8:
            return _neg(E.EINVAL)
        if self._find_task(task, pid) is None:
            return _neg(E.ESRCH)
        n = min(length, CPUMASK_SIZE)
        self.mem.write_user(mask, (1).to_bytes(CPUMASK_SIZE, "little")[:n])
        return n

    def _find_task(self, task, pid):
        pid = _int(pid)
        if pid == 0:
            return task
        return next((t for t in self.m.tasks if t.tid == pid), None)

    def sys_getrusage(self, task, regs, who, ru, *_):
        """getrusage: the model keeps no CPU time, page faults or context switches of
        its own (no per-instruction accounting on the hot path), so every field is 0
        for RUSAGE_SELF, RUSAGE_CHILDREN and RUSAGE_THREAD alike."""
        if _int(who) not in (RUSAGE_SELF, RUSAGE_CHILDREN, RUSAGE_THREAD):
            return _neg(E.EINVAL)
        self.mem.write_user(ru, bytes(RUSAGE_SIZE))
        return 0

    def sys_times(self, task, regs, buf, *_):
        """times: the tms fields (user/system time of the process and its children) are
        0 as in getrusage; the result is jiffies_64_to_clock_t(get_jiffies_64()): the
        jiffies of the virtual clock's uptime, counted from INITIAL_JIFFIES, in USER_HZ
        ticks."""
        if buf:
            self.mem.write_user(buf, bytes(TMS_SIZE))
        jiffies = INITIAL_JIFFIES + self.boot_clock_ns() // TICK_NSEC
        return jiffies * TICK_NSEC // (1_000_000_000 // USER_HZ)

    # -- no network -----------------------------------------------------------------
    def sys_socket(self, task, regs, family, type_, protocol, *_):
        """__sys_socket/__sock_create on a kernel whose only families are AF_UNIX,
        AF_INET and AF_INET6 and whose security module denies creating those: EINVAL
        for bad flags or types, EAFNOSUPPORT for other families, EACCES."""
        family, type_ = _int(family), _int(type_)
        if type_ & ~SOCK_TYPE_MASK & ~(SOCK_CLOEXEC | SOCK_NONBLOCK):
            return _neg(E.EINVAL)
        if not 0 <= family < NPROTO:
            return _neg(E.EAFNOSUPPORT)
        if not 0 <= type_ & SOCK_TYPE_MASK < SOCK_MAX:
            return _neg(E.EINVAL)
        if family in (AF_UNIX, AF_INET, AF_INET6):
            return _neg(E.EACCES)                     # security_socket_create
        return _neg(E.EAFNOSUPPORT)

    sys_socketpair = sys_socket

    def _sockfd_lookup(self, task, fd) -> int:
        """sockfd_lookup_light: EBADF for no descriptor, ENOTSOCK for any other (no
        descriptor of the model is a socket)."""
        return _neg(E.ENOTSOCK) if task.process.fds.get(fd & 0xFFFFFFFF) else _neg(E.EBADF)

    def _sock_call(self, task, regs, fd, *_):
        return self._sockfd_lookup(task, fd)

    sys_getpeername = sys_getsockname = sys_getsockopt = sys_setsockopt = _sock_call
    sys_bind = sys_connect = sys_listen = sys_shutdown = sys_accept = _sock_call
    sys_sendto = sys_recvfrom = _sock_call

    def sys_accept4(self, task, regs, fd, addr, addrlen, flags, *_):
        if _int(flags) & ~(SOCK_CLOEXEC | SOCK_NONBLOCK):
            return _neg(E.EINVAL)
        return self._sockfd_lookup(task, fd)

    def sys_sendmsg(self, task, regs, fd, msg, flags, *_):
        if flags & MSG_CMSG_COMPAT:                   # forbid_cmsg_compat
            return _neg(E.EINVAL)
        return self._sockfd_lookup(task, fd)

    sys_recvmsg = sys_sendmsg
