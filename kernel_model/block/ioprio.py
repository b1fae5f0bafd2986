"""ioprio_get (block/ioprio.c).  include/linux/ioprio.h: IOPRIO_PRIO_VALUE(IOPRIO_CLASS_NONE,
0) is what a task without an io_context reports; the model never gives a task one
(ioprio_set is not modeled).
"""

from __future__ import annotations

import errno as E

from kernel_model.include.linux.syscalls import int_arg, syscall

IOPRIO_WHO_PROCESS, IOPRIO_WHO_PGRP, IOPRIO_WHO_USER = 1, 2, 3
# include/linux/ioprio.h: IOPRIO_PRIO_VALUE(IOPRIO_CLASS_NONE, 0), what a task without an
# io_context reports; the model never gives a task one (ioprio_set is not modeled).
IOPRIO_DEFAULT = 0


class IoprioSyscalls:
    """I/O priorities."""

    def __init__(self, sc):
        self.m = sc.m

    @syscall(252, "ioprio_get", partial="every task has the default priority (no io_context)")
    def sys_ioprio_get(self, task, regs, which, who, *_):
        """block/ioprio.c: the I/O priority of a task, the best of a process group or of
        a user's tasks; ESRCH when none matches."""
        which, who = int_arg(which), int_arg(who)
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
