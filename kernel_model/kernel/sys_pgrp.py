"""Process groups, sessions and I/O priority: small syscalls shells and busybox applets
call (kernel/sys.c ``setpgid``/``getsid``/``ksys_setsid``, block/ioprio.c
``ioprio_get``).

Sessions: ``Process.sid`` holds the session id as a guest pid; the first process's
session leader is the invoking shell, outside the guest's pid namespace, so its sid is 0
(what ``pid_vnr`` answers for a pid the namespace cannot see).  A process is a session
leader (``signal->leader``) when its sid is its own pid.
"""

from __future__ import annotations

import errno as E

IOPRIO_WHO_PROCESS, IOPRIO_WHO_PGRP, IOPRIO_WHO_USER = 1, 2, 3
# include/linux/ioprio.h: IOPRIO_PRIO_VALUE(IOPRIO_CLASS_NONE, 0), what a task without an
# io_context reports; the model never gives a task one (ioprio_set is not modeled).
IOPRIO_DEFAULT = 0


def _signed(value: int) -> int:
    """An ``int``/``pid_t`` argument: the low 32 bits, signed."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >> 31 else value


class MiscSyscalls:
    """Mixin of :class:`kernel_model.kernel.syscalls.Syscalls` (``self.m`` is the machine)."""

    def _process_by_pid(self, pid: int):
        """find_task_by_vpid: the process whose thread-group leader is ``pid`` (zombies
        included, until reaped), "thread" when ``pid`` is another thread's tid, or None."""
        for p in self.m.processes:
            if p.pid == pid:
                return p
        if any(t.tid == pid for p in self.m.processes for t in p.tasks):
            return "thread"
        return None

    def _process_of_task(self, tid: int):
        return next((p for p in self.m.processes for t in p.tasks if t.tid == tid), None)

    def sys_setpgid(self, task, regs, pid, pgid, *_):
        """kernel/sys.c setpgid: only the caller or one of its children, never a session
        leader, and only into a group of the caller's session."""
        me = task.process
        pid, pgid = _signed(pid) or me.pid, _signed(pgid)
        pgid = pgid or pid
        if pgid < 0:
            return -E.EINVAL
        p = self._process_by_pid(pid)
        if p is None:
            return -E.ESRCH
        if p == "thread":
            return -E.EINVAL
        if p.parent is me:
            if p.sid != me.sid:
                return -E.EPERM
            # (EACCES for a child that has exec'd: there is no execve)
        elif p is not me:
            return -E.ESRCH
        if p.sid == p.pid:
            return -E.EPERM
        if pgid != pid and not any(g.pgid == pgid and g.sid == me.sid for g in self.m.processes):
            return -E.EPERM
        p.pgid = pgid
        return 0

    def sys_getsid(self, task, regs, pid, *_):
        """The session of the caller (pid 0) or of any task's process."""
        pid = _signed(pid)
        p = task.process if pid == 0 else self._process_by_pid(pid)
        if p == "thread":
            p = self._process_of_task(pid)
        return -E.ESRCH if p is None else p.sid

    def sys_setsid(self, task, regs, *_):
        """ksys_setsid: not for a session leader, nor when a process group with the
        caller's pid exists (it would then lead a group it is not in)."""
        me = task.process
        if me.sid == me.pid or any(p.pgid == me.pid for p in self.m.processes):
            return -E.EPERM
        me.sid = me.pgid = me.pid
        return me.pid

    def sys_ioprio_get(self, task, regs, which, who, *_):
        """block/ioprio.c: the I/O priority of a task, the best of a process group or of
        a user's tasks; ESRCH when none matches."""
        which, who = _signed(which), _signed(who)
        tasks = [t for p in self.m.processes for t in p.tasks]
        if which == IOPRIO_WHO_PROCESS:
            found = who == 0 or any(t.tid == who for t in tasks)
        elif which == IOPRIO_WHO_PGRP:
            pgrp = who or task.process.pgid
            found = any(t.process.pgid == pgrp for t in tasks)
        elif which == IOPRIO_WHO_USER:
            found = any(t.cred is not None and t.cred.uid == (who & 0xFFFFFFFF) for t in tasks)
        else:
            return -E.EINVAL
        return IOPRIO_DEFAULT if found else -E.ESRCH

    def sys_personality(self, task, regs, persona, *_):
        """kernel/exec_domain.c: the old persona; 0xffffffff only asks.  PER_LINUX32
        makes uname report i686 (override_architecture); exec keeps the persona (x86_64's
        SET_PERSONALITY clears only READ_IMPLIES_EXEC)."""
        old = task.process.personality
        persona &= 0xFFFFFFFF
        if persona != 0xFFFFFFFF:
            task.process.personality = persona
        return old
