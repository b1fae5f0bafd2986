"""rseq (kernel/rseq.c).
"""

from __future__ import annotations

import errno as E

from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall


class RseqSyscalls:
    """Restartable sequences."""

    @syscall(334, "rseq", partial="registration is remembered; a sequence is never aborted")
    def sys_rseq(self, task, regs, rseq, length, flags, sig, *_):
        # Registration is accepted and remembered; restartable sequences are never
        # aborted because a single task is never preempted inside one.
        if flags & 1:  # RSEQ_FLAG_UNREGISTER
            task.rseq = 0
            return 0
        if task.rseq:
            return neg(E.EBUSY)
        task.rseq = rseq
        return 0
