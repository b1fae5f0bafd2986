"""Wait tokens (the part of kernel/sched/wait.c the model needs): a task that sleeps on
a pipe, a poll, a timer or a futex takes a fresh token; a waiter left from an earlier
sleep (the task was woken otherwise, then slept again) sees a different token and must
not complete the later sleep."""

from __future__ import annotations


def sleep_on(task) -> object:
    """A token for this sleep of ``task``."""
    task.fd_wait = object()
    return task.fd_wait


def still_asleep(task, token) -> bool:
    """Is ``task`` still in the sleep ``token`` was taken for?"""
    return task.state == "blocked" and getattr(task, "fd_wait", None) is token
