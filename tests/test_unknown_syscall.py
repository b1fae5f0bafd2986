"""An unknown syscall never hangs: it returns -ENOSYS, is counted by number and name,
and a guest that retries one for ever is stopped by the timeout or the instruction
budget with a result that names it (the run's message, and the CLI's line)."""

from __future__ import annotations

import pytest
from cli_helpers import cli

from emu import Machine
from emu.asm import asm_to_elf

ENOSYS = 38


def spin(nr: int, then: str = "") -> str:
    """A guest calling syscall ``nr`` in a loop (``then``: more of the loop body)."""
    return f"_start:\nloop:\n    mov eax, {nr}\n    syscall\n{then}    jmp loop\n"


def test_an_unknown_syscall_returns_enosys_and_is_counted_by_name():
    m = Machine.from_asm(spin(442))
    m.step()
    m.step()
    assert m.regs.rax == -ENOSYS & (2**64 - 1), f"rax {m.regs.rax:#x}, want -ENOSYS"
    assert dict(m.counters.unknown_syscalls) == {"442:mount_setattr": 1}, m.counters.unknown_syscalls


@pytest.mark.parametrize(
    "limits, reason",
    [
        ({"timeout": 0.5}, "timeout"),
        ({"max_insns": 30_000}, "budget"),
    ],
)
@pytest.mark.parametrize("nr, named", [(442, "442 (mount_setattr)"), (1000, "1000")])
def test_a_guest_spinning_on_one_is_stopped_with_a_message_naming_it(limits, reason, nr, named):
    m = Machine.from_asm(spin(nr))
    r = m.run(**limits)
    calls = sum(m.counters.unknown_syscalls.values())
    want = f"last syscall {named} is not modeled: ENOSYS, {calls} times"
    assert (r.reason, r.detail) == (reason, want), f"{r.reason}: {r.describe()}"
    assert want in r.describe(), r.describe()


def test_no_syscall_is_named_when_the_last_one_was_modeled():
    """ENOSYS earlier in the loop, then getpid: the guest is not stuck on ENOSYS."""
    m = Machine.from_asm(spin(442, then="    mov eax, 39\n    syscall\n"))
    r = m.run(max_insns=30_000)
    assert (r.reason, r.detail) == ("budget", ""), r.describe()


def test_the_cli_names_it(tmp_path):
    exe = tmp_path / "spin"
    exe.write_bytes(asm_to_elf(spin(442))[0])
    exe.chmod(0o755)
    p = cli("run", "--timeout", "1", str(exe), timeout=60)
    err = p.stderr.decode()
    assert p.returncode == 124, (p.returncode, err)
    assert "wall-clock timeout" in err and "last syscall 442 (mount_setattr) is not modeled: ENOSYS" in err, err
