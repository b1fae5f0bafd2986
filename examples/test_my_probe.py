"""An example of a user's own register test, run by the project's suite.

Run it with `python -m pytest examples/` once uprobe-emu is installed: the plugin
provides the `emu_asm` fixture and the register-diff failure messages.
"""

from emu.testing import call_snapshots, expect_signal

GUEST = """
_start:
    mov rdi, 20
    mov rsi, 22
    call add
    mov rdi, rax
    mov eax, 231
    syscall
add:
    push rbp
    mov rbp, rsp
    lea rax, [rdi + rsi]
    pop rbp
    ret
"""


def test_probe_on_push_rbp_is_transparent(emu_asm):
    plain = emu_asm(GUEST)
    probed = emu_asm(GUEST, kernel="6.18")
    probed.uprobes.register("add", handler=lambda ctx: None)
    assert call_snapshots(probed, "add") == call_snapshots(plain, "add")


def test_handler_changes_the_argument(emu_asm):
    m = emu_asm(GUEST)
    m.uprobes.register("add", handler=lambda ctx: setattr(ctx.regs, "rdi", 100))
    entry, after = call_snapshots(m, "add")
    assert after.rax == 122


def test_a_null_store_is_sigsegv(emu_asm):
    m = emu_asm("_start:\n    xor eax, eax\n    mov qword ptr [rax], 1\n")
    expect_signal(m, "SIGSEGV", addr=0)
