"""personality (kernel/exec_domain.c)."""

from __future__ import annotations

from kernel_model.include.linux.syscalls import syscall


class PersonalitySyscalls:
    """The process's execution domain."""

    @syscall(135, "personality")
    def sys_personality(self, task, regs, persona, *_):
        """kernel/exec_domain.c: the old persona; 0xffffffff only asks.  PER_LINUX32
        makes uname report i686 (override_architecture); exec keeps the persona (x86_64's
        SET_PERSONALITY clears only READ_IMPLIES_EXEC)."""
        old = task.process.personality
        persona &= 0xFFFFFFFF
        if persona != 0xFFFFFFFF:
            task.process.personality = persona
        return old
