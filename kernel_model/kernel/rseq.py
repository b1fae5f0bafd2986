"""rseq (kernel/rseq.c): registration, and the CPU number fields the kernel keeps up
to date in the registered ``struct rseq`` (``rseq_update_cpu_node_id``).

glibc registers every thread's area and its ``sched_getcpu()`` reads ``cpu_id`` there
without a syscall, so on a machine of several CPUs the fields follow the task's CPU:
they are written at registration and whenever the task is switched in on a CPU other
than the one they hold (``rseq_migrate``/``rseq_preempt`` then
``rseq_handle_notify_resume`` on the way back to user mode).  On one CPU the area is
left as glibc initialised it, as the model always did: glibc then asks ``getcpu``,
which says CPU 0, so the answer is the same and the syscalls a guest makes are too.
"""

from __future__ import annotations

import errno as E
import struct

from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall
from kernel_model.mm.mm_types import GuestFault

# struct rseq: cpu_id_start (u32), cpu_id (u32), rseq_cs (u64), flags (u32), node_id (u32)
_CPU_IDS = struct.Struct("<II")
_NODE_ID_OFFSET = 20


def rseq_update_cpu_node_id(mem, task) -> None:
    """``rseq_update_cpu_node_id``: cpu_id_start and cpu_id become the task's CPU,
    node_id the one node.  A write that faults is left undone (the kernel would
    send SIGSEGV; the model keeps accepting any registration, as it always has)."""
    try:
        mem.write_user(task.rseq, _CPU_IDS.pack(task.cpu, task.cpu))
        mem.write_user(task.rseq + _NODE_ID_OFFSET, bytes(4))
    except GuestFault:
        pass
    task.rseq_cpu = task.cpu


class RseqSyscalls:
    """Restartable sequences."""

    def __init__(self, sc=None):
        self.m = sc.m if sc is not None else None

    @syscall(334, "rseq", partial="registration is remembered and its CPU ids kept; a sequence is never aborted")
    def sys_rseq(self, task, regs, rseq, length, flags, sig, *_):
        # Registration is accepted and remembered; restartable sequences are never
        # aborted because a single task is never preempted inside one.
        if flags & 1:  # RSEQ_FLAG_UNREGISTER
            task.rseq = 0
            return 0
        if task.rseq:
            return neg(E.EBUSY)
        task.rseq = rseq
        if self.m is not None and rseq and self.m.scheduler.nr_cpu_ids > 1:
            rseq_update_cpu_node_id(self.m.mem, task)
        return 0
