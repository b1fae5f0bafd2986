"""uretprobe edge cases: the trampoline bytes, hijack failures, a return handler that
redirects ip, an entry handler that changes ip, a probe that is not at a function entry.

The kernel side: prepare_uretprobe(), uprobe_handle_trampoline() and the x86
trampolines (arch/x86/kernel/uprobes.c).
"""

from __future__ import annotations

import pytest
from test_uretprobes_support import (
    ALLOCS,
    SESSION_PROFILES,
    TRAMPOLINE_PROFILES,
    assert_ri_balanced,
    call_loop_guest,
    leaked,
    machine,
    trampoline_vaddr,
)

# uretprobe_trampoline (6.11+): push rax; push rcx; push r11; mov $335,%rax; syscall; pop r11; pop rcx; ret
SYSCALL_TRAMPOLINE = bytes.fromhex("50 51 41 53 48 c7 c0 4f 01 00 00 0f 05 41 5b 59 c3")


@pytest.mark.parametrize(
    "kernel,expected",
    [
        ("6.10", b"\xcc"),
        ("6.11", SYSCALL_TRAMPOLINE),
        ("6.17", SYSCALL_TRAMPOLINE),
        ("6.18", SYSCALL_TRAMPOLINE + b"\xcc"),
        ("latest", SYSCALL_TRAMPOLINE + b"\xcc"),
    ],
)
def test_xol_slot_0_holds_the_profiles_trampoline(kernel, expected):
    m = machine(call_loop_guest(1), kernel)
    m.uprobes.register("f", ret_handler=lambda ctx: None)
    m.run(max_insns=100_000)
    tramp = trampoline_vaddr(m)
    got = m.mem.read(tramp, len(expected))
    assert got == expected, f"[{kernel}] slot 0: expected {expected.hex(' ')}, got {got.hex(' ')}"
    if len(expected) > 1:
        # the instruction after the syscall is the only valid sys_uretprobe caller
        assert expected[13:15] == b"\x41\x5b"


# ----------------------------------------------------------------------------- hijack failures

UNREADABLE_SP = """
_start:
    mov rsp, 0x10000            # nothing mapped there
    jmp f
f:
    mov edi, 3
    mov eax, 231
    syscall
"""

READONLY_SP = """
_start:
    lea rsp, [rip + _start]     # text: readable, not writable
    jmp f
f:
    mov edi, 4
    mov eax, 231
    syscall
"""


@pytest.mark.parametrize("alloc", ALLOCS)
@pytest.mark.parametrize("src,code", [(UNREADABLE_SP, 3), (READONLY_SP, 4)], ids=["unreadable", "readonly"])
def test_hijack_that_cannot_read_or_write_sp_drops_the_instance_without_a_signal(src, code, alloc):
    """arch_uretprobe_hijack_return_addr: a fault reading [sp], or a write that fails
    completely, returns -1: no instance, no signal; the function runs on."""
    entries = []
    m = machine(src, "6.18", alloc)
    m.uprobes.register("f", handler=lambda ctx: entries.append(1), ret_handler=lambda ctx: None)
    r = m.run(max_insns=10_000)
    assert (r.reason, r.exit_code) == ("exit", code), r.describe()
    assert entries == [1] and leaked(m) == []
    assert m.counters.signals.total() == 0
    assert_ri_balanced(m)


# ----------------------------------------------------------------------------- ip changes

REDIRECT_GUEST = """
_start:
    call f
normal_return:
    mov edi, 1
    mov eax, 231
    syscall
elsewhere:
    mov rdi, rax
    mov eax, 231
    syscall
f:
    mov eax, 42
    ret
"""


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_ret_handler_can_redirect_the_return(kernel):
    """A return handler that sets ip sends the task there: the syscall trampoline's final
    `ret` pops the handler's ip from the old rax slot; the int3 path sets it directly."""
    m = machine(REDIRECT_GUEST, kernel)

    def on_ret(ctx):
        assert ctx.regs.rip == m.resolve("normal_return")
        ctx.regs.rip = m.resolve("elsewhere")

    m.uprobes.register("f", ret_handler=on_ret)
    r = m.run(max_insns=10_000)
    assert (r.reason, r.exit_code) == ("exit", 42), r.describe()


SKIP_GUEST = """
_start:
    mov rdi, 5
    call f
after_f:
    mov rdi, rax
    mov eax, 231
    syscall
f:
    lea rax, [rdi + 1]
    ret
f2:
    lea rax, [rdi + 100]
    ret
"""


@pytest.mark.parametrize("kernel,overrides", [p for p in SESSION_PROFILES if p.id != "6.13-syscall"])
def test_entry_handler_changing_ip_records_the_new_ip_as_func(kernel, overrides):
    """ri->func = regs->ip after the handlers: an entry handler that diverts f to f2 makes
    the return instance (and the return handler's func) name f2.  (6.18+: an ip change
    skips the probed instruction.)"""
    seen = []
    m = machine(SKIP_GUEST, kernel, **overrides)
    m.uprobes.register(
        "f",
        handler=lambda ctx: setattr(ctx.regs, "rip", m.resolve("f2")),
        ret_handler=lambda ctx: seen.append((ctx.func, ctx.regs.rip, ctx.regs.rax)),
    )
    r = m.run(max_insns=10_000)
    assert r.exit_code == 105
    assert seen == [(m.resolve("f2"), m.resolve("after_f"), 105)]


# ----------------------------------------------------------------------------- not at entry

MID_FUNCTION_GUEST = """
_start:
    mov rbx, 0x1234
    call f
after_f:
    mov r12, rbx
    mov eax, 231
    xor edi, edi
    syscall
f:
    push rbx
mid:
    mov rbx, 7
    pop rbx
    ret
"""


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_return_probe_not_at_function_entry_overwrites_whatever_is_at_sp(kernel):
    """The kernel never checks that a return probe sits at a function entry: at `mid`,
    [sp] is the saved rbx, which becomes the trampoline address; f then returns normally
    (its real return address was untouched), rbx comes back as the trampoline, and the
    return handler never runs."""
    rets = []
    m = machine(MID_FUNCTION_GUEST, kernel)
    m.uprobes.register("mid", ret_handler=lambda ctx: rets.append(ctx.regs.rip))
    r = m.run(max_insns=10_000)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    tramp = trampoline_vaddr(m)
    assert m.regs.r12 == tramp, f"rbx after f: expected the trampoline {tramp:#x}, got {m.regs.r12:#x}"
    assert rets == []
    [ri] = leaked(m)  # the instance stays pending: its frame looks alive
    assert ri.orig_ret_vaddr == 0x1234
