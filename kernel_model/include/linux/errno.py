"""The kernel's internal errno values (include/linux/errno.h) and the one way a handler
spells a failure: a syscall returns ``neg(E.EXXX)``, the negative errno the syscall
ABI puts in rax.

The ``ERESTART*`` values never reach the guest: the signal delivery path turns them
into a restart or -EINTR (arch_do_signal_or_restart).
"""

from __future__ import annotations

ERESTARTSYS = 512
ERESTARTNOINTR = 513
ERESTARTNOHAND = 514  # restart if no handler
ERESTART_RESTARTBLOCK = 516  # restart by calling sys_restart_syscall


def neg(err: int) -> int:
    """A syscall's failure result: the negative errno."""
    return -err
