"""Finding a process by a pid the guest names (kernel/pid.c): the lookups of setpgid,
getpgid and getsid."""

from __future__ import annotations


def find_process_by_vpid(machine, pid: int):
    """find_task_by_vpid: the process whose thread-group leader is ``pid`` (zombies
    included, until reaped), "thread" when ``pid`` is another thread's tid, or None."""
    for p in machine.processes:
        if p.pid == pid:
            return p
    if any(t.tid == pid for p in machine.processes for t in p.tasks):
        return "thread"
    return None


def process_of_tid(machine, tid: int):
    """The process of the task ``tid``, or None."""
    return next((p for p in machine.processes for t in p.tasks if t.tid == tid), None)
