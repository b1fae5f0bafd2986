"""Wait queues and wait tokens (the part of kernel/sched/wait.c the model needs).

A :class:`WaitQueue` is ``wait_queue_head_t``: its waiters are callables run at every
:meth:`WaitQueue.wake_up`.  A task that sleeps on a pipe, a poll, a timer or a futex takes
a fresh token; a waiter left from an earlier sleep (the task was woken otherwise, then
slept again) sees a different token and must not complete the later sleep."""

from __future__ import annotations


def sleep_on(task) -> object:
    """A token for this sleep of ``task``."""
    task.fd_wait = object()
    return task.fd_wait


def still_asleep(task, token) -> bool:
    """Is ``task`` still in the sleep ``token`` was taken for?"""
    return task.state == "blocked" and getattr(task, "fd_wait", None) is token


class WaitQueue:
    """``wait_queue_head_t``: waiters are callables that return True once done (then
    dropped), run at every :meth:`wake_up`."""

    def __init__(self) -> None:
        self.waiters: list = []
        self._waking = False
        self._again = False

    def wait(self, waiter) -> None:
        self.waiters.append(waiter)

    def wake_up(self) -> None:
        """Run the waiters until none makes progress; a waiter that changes what is
        waited on (a woken writer filling a pipe) makes the others look again."""
        if self._waking:
            self._again = True
            return
        self._waking = True
        try:
            self._again = True
            while self._again:
                self._again = False
                waiters, self.waiters = self.waiters, []
                for w in waiters:
                    if not w():
                        self.waiters.append(w)
        finally:
            self._waking = False
