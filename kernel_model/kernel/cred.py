"""Credentials (kernel/cred.c) and the syscalls that read and change them (kernel/sys.c's
set*id, kernel/groups.c).

Each task holds a :class:`Cred` (the kernel's ``struct cred``: immutable, replaced
whole as ``commit_creds`` does, shared by the tasks it was copied to).  Privilege is
the traditional root model: a task whose effective uid is 0 has CAP_SETUID/CAP_SETGID
(``cap_emulate_setxuid`` drops them when it leaves euid 0), any other task has none.
"""

from __future__ import annotations

import errno as E
import os
import struct
from dataclasses import dataclass, replace

from kernel_model.errors import InputError
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import int_arg, syscall

NO_ID = 0xFFFFFFFF  # (uid_t)-1: "unchanged" for setre*/setres*, invalid else
NGROUPS_MAX = 65536


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
    def initial(
        cls, uid: int | None = None, gid: int | None = None, groups: tuple[int, ...] | list[int] | None = None
    ) -> "Cred":
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


class CredSyscalls:
    """get*id, set*id, getgroups/setgroups."""

    def __init__(self, sc):
        self.m = sc.m

    @syscall(102, "getuid")
    def sys_getuid(self, task, regs, *_):
        return task.cred.uid

    @syscall(107, "geteuid")
    def sys_geteuid(self, task, regs, *_):
        return task.cred.euid

    @syscall(104, "getgid")
    def sys_getgid(self, task, regs, *_):
        return task.cred.gid

    @syscall(108, "getegid")
    def sys_getegid(self, task, regs, *_):
        return task.cred.egid

    @syscall(118, "getresuid")
    def sys_getresuid(self, task, regs, rp, ep, sp, *_):
        c = task.cred
        return self._put_ids(((rp, c.uid), (ep, c.euid), (sp, c.suid)))

    @syscall(120, "getresgid")
    def sys_getresgid(self, task, regs, rp, ep, sp, *_):
        c = task.cred
        return self._put_ids(((rp, c.gid), (ep, c.egid), (sp, c.sgid)))

    def _put_ids(self, pairs) -> int:
        for addr, value in pairs:  # put_user one by one: EFAULT stops there
            self.m.mem.write_user(addr, struct.pack("<I", value))
        return 0

    @syscall(115, "getgroups")
    def sys_getgroups(self, task, regs, size, lst, *_):
        """groups16/getgroups: size 0 asks for the count; a smaller list is EINVAL."""
        size, groups = int_arg(size), task.cred.groups
        if size < 0:
            return neg(E.EINVAL)
        if size:
            if size < len(groups):
                return neg(E.EINVAL)
            self.m.mem.write_user(lst, struct.pack(f"<{len(groups)}I", *groups))
        return len(groups)

    @syscall(105, "setuid")
    def sys_setuid(self, task, regs, uid, *_):
        return self._setxid(task, uid & NO_ID, "uid")

    @syscall(106, "setgid")
    def sys_setgid(self, task, regs, gid, *_):
        return self._setxid(task, gid & NO_ID, "gid")

    def _setxid(self, task, new: int, kind: str) -> int:
        """__sys_setuid/__sys_setgid: a privileged task sets real, saved, effective and
        fs ids; another may only set its effective (and fs) id to its real or saved id."""
        if new == NO_ID:
            return neg(E.EINVAL)
        old = task.cred
        real, saved = getattr(old, kind), getattr(old, "s" + kind)
        if old.privileged:
            changes = {kind: new, "s" + kind: new}
        elif new in (real, saved):
            changes = {}
        else:
            return neg(E.EPERM)
        self._commit(task, **changes, **{"e" + kind: new, "fs" + kind: new})
        return 0

    @syscall(113, "setreuid")
    def sys_setreuid(self, task, regs, ruid, euid, *_):
        return self._setrexid(task, ruid & NO_ID, euid & NO_ID, "uid")

    @syscall(114, "setregid")
    def sys_setregid(self, task, regs, rgid, egid, *_):
        return self._setrexid(task, rgid & NO_ID, egid & NO_ID, "gid")

    def _setrexid(self, task, r: int, e: int, kind: str) -> int:
        """__sys_setreuid: the real id may become the real or effective one, the
        effective id any of real/effective/saved; the saved id follows the new
        effective one when the real id was given or the effective one moved off it."""
        old = task.cred
        real, eff, saved = getattr(old, kind), getattr(old, "e" + kind), getattr(old, "s" + kind)
        if not old.privileged and (
            (r != NO_ID and r not in (real, eff)) or (e != NO_ID and e not in (real, eff, saved))
        ):
            return neg(E.EPERM)
        new_r = real if r == NO_ID else r
        new_e = eff if e == NO_ID else e
        new_s = new_e if r != NO_ID or (e != NO_ID and e != real) else saved
        self._commit(task, **{kind: new_r, "e" + kind: new_e, "s" + kind: new_s, "fs" + kind: new_e})
        return 0

    @syscall(117, "setresuid")
    def sys_setresuid(self, task, regs, r, e, s, *_):
        return self._setresxid(task, (r & NO_ID, e & NO_ID, s & NO_ID), "uid")

    @syscall(119, "setresgid")
    def sys_setresgid(self, task, regs, r, e, s, *_):
        return self._setresxid(task, (r & NO_ID, e & NO_ID, s & NO_ID), "gid")

    def _setresxid(self, task, ids, kind: str) -> int:
        """__sys_setresuid: an unprivileged task may set each id to any of its current
        real, effective or saved ids; -1 leaves one unchanged."""
        old = task.cred
        names = (kind, "e" + kind, "s" + kind)
        current = tuple(getattr(old, n) for n in names)
        if not old.privileged and any(v != NO_ID and v not in current for v in ids):
            return neg(E.EPERM)
        new = {n: (c if v == NO_ID else v) for n, c, v in zip(names, current, ids)}
        self._commit(task, **new, **{"fs" + kind: new["e" + kind]})
        return 0

    @syscall(122, "setfsuid")
    def sys_setfsuid(self, task, regs, uid, *_):
        return self._setfsxid(task, uid & NO_ID, "uid")

    @syscall(123, "setfsgid")
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

    @syscall(116, "setgroups")
    def sys_setgroups(self, task, regs, size, lst, *_):
        """setgroups: needs CAP_SETGID (may_setgroups); the list is stored sorted."""
        size = int_arg(size)
        if not task.cred.privileged:
            return neg(E.EPERM)
        if not 0 <= size <= NGROUPS_MAX:
            return neg(E.EINVAL)
        groups = struct.unpack(f"<{size}I", self.m.mem.read_user(lst, 4 * size)) if size else ()
        self._commit(task, groups=tuple(sorted(groups)))
        return 0

    @staticmethod
    def _commit(task, **changes) -> None:
        """prepare_creds + commit_creds: the task gets a new Cred; others sharing the
        old one keep it."""
        if changes:
            task.cred = replace(task.cred, **changes)
