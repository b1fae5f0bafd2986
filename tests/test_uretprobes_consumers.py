"""Consumers of return probes: session cookies, unregistration while a return is
pending, UPROBE_HANDLER_IGNORE / REMOVE at entry, and consumers registered after the
entry hit.

The kernel side: handler_chain(), handle_uretprobe_chain() and the consumer list in
kernel/events/uprobes.c.
"""

from __future__ import annotations

import pytest
from test_uretprobes_support import (
    NR_URETPROBE,
    REC_GUEST,
    SESSION_PROFILES,
    TRAMPOLINE_PROFILES,
    assert_ri_balanced,
    call_loop_guest,
    is_int3,
    leaked,
    machine,
)

from kernel_model.kernel.events.uprobes import UPROBE_HANDLER_IGNORE, UPROBE_HANDLER_REMOVE

# outer(x) calls g(x) then returns g's result + 1; g(x) = x * 3.  _start: outer(4) = 13.
NESTED_GUEST = """
_start:
    mov rdi, 4
    call outer
after_outer:
    mov rdi, rax
    mov eax, 231
    syscall
outer:
    push rbp
    mov rbp, rsp
    call g
    inc rax
    pop rbp
    ret
g:
    lea rax, [rdi + rdi * 2]
    ret
"""


# ----------------------------------------------------------------------------- sessions


@pytest.mark.parametrize("kernel,overrides", SESSION_PROFILES)
def test_session_consumer_sees_its_entry_cookie_at_return(kernel, overrides):
    """A consumer with handler + ret_handler is a session consumer (6.13+): the cookie its
    entry handler stores is handed back to its return handler, per call (recursion: each
    level gets its own)."""
    seen = []
    m = machine(REC_GUEST, kernel, **overrides)

    def on_entry(ctx):
        assert ctx.cookie == 0, "cookie starts at 0"
        ctx.cookie = 0xC00C1E00 + ctx.regs.rdi

    def on_ret(ctx):
        seen.append((ctx.cookie, ctx.regs.rax))

    m.uprobes.register("rec", handler=on_entry, ret_handler=on_ret)
    assert m.run(max_insns=100_000).exit_code == 104
    # innermost rec(0) returns first with 101, rec(3) last with 104
    assert seen == [(0xC00C1E00 + k, 101 + k) for k in range(4)], [(hex(c), v) for c, v in seen]


@pytest.mark.parametrize("kernel,overrides", SESSION_PROFILES)
def test_two_session_consumers_keep_separate_cookies(kernel, overrides):
    """Several session consumers on one probe: each gets its own cookie back (the second
    one lives in extra_consumers)."""
    seen = []
    m = machine(REC_GUEST, kernel, **overrides)
    for tag in (0xA0, 0xB0):
        m.uprobes.register(
            "leaf",
            handler=lambda ctx, t=tag: setattr(ctx, "cookie", t + ctx.regs.rdi),
            ret_handler=lambda ctx, t=tag: seen.append((t, ctx.cookie - t)),
        )
    m.run(max_insns=100_000)
    # leaf args in call order: 100, 101, 102, 103; newest consumer (0xB0) first
    assert seen == [(t, x) for x in (100, 101, 102, 103) for t in (0xB0, 0xA0)]


@pytest.mark.parametrize("kernel", ["6.10", "6.11"])
def test_before_6_13_there_are_no_sessions_ret_handler_gets_no_cookie(kernel):
    seen = []
    m = machine(REC_GUEST, kernel)
    m.uprobes.register(
        "leaf", handler=lambda ctx: setattr(ctx, "cookie", 7), ret_handler=lambda ctx: seen.append(ctx.cookie)
    )
    m.run(max_insns=100_000)
    assert seen == [None] * 4


# ----------------------------------------------------------------------------- unregister


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_consumer_unregistered_between_entry_and_return_is_not_called(kernel):
    """Checklist 25: unregistering does not disturb the pending instance - the return
    address is still restored (right result, no signal) - but the removed consumer's
    return handler is not called."""
    calls = []
    m = machine(NESTED_GUEST, kernel)
    uc = m.uprobes.register("outer", ret_handler=lambda ctx: calls.append("outer"))
    m.uprobes.register("g", handler=lambda ctx: m.uprobes.unregister(uc))
    r = m.run(max_insns=100_000)
    assert (r.reason, r.exit_code) == ("exit", 13), r.describe()
    assert calls == []
    assert m.mem.read(m.resolve("outer"), 1) != b"\xcc", "breakpoint left behind"
    assert leaked(m) == []
    # the trampoline was still used to get back to after_outer
    assert m.counters.syscalls[NR_URETPROBE] == (0 if is_int3(m) else 1)


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_unregistering_one_of_two_consumers_keeps_the_other_return_handler(kernel):
    calls = []
    m = machine(NESTED_GUEST, kernel)
    gone = m.uprobes.register("outer", ret_handler=lambda ctx: calls.append("gone"))
    m.uprobes.register("outer", ret_handler=lambda ctx: calls.append(("kept", ctx.regs.rax)))
    m.uprobes.register("g", handler=lambda ctx: m.uprobes.unregister(gone))
    assert m.run(max_insns=100_000).exit_code == 13
    assert calls == [("kept", 13)]


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_consumer_unregistered_by_an_earlier_return_handler_is_skipped(kernel):
    """The return walk follows the live list: a consumer removed by a handler that ran
    before it in the same walk is not called; one added during the walk is not either."""
    calls = []
    m = machine(NESTED_GUEST, kernel)
    older = m.uprobes.register("g", ret_handler=lambda ctx: calls.append("older"))

    def newer(ctx):
        calls.append("newer")
        if older in older.uprobe.consumers:
            m.uprobes.unregister(older)
            m.uprobes.register("g", ret_handler=lambda c: calls.append("added"))

    m.uprobes.register("g", ret_handler=newer)
    assert m.run(max_insns=100_000).exit_code == 13
    assert calls == ["newer"]


# ----------------------------------------------------------------------------- IGNORE / REMOVE


@pytest.mark.parametrize("rc", [UPROBE_HANDLER_IGNORE, UPROBE_HANDLER_REMOVE], ids=["IGNORE", "REMOVE"])
@pytest.mark.parametrize("kernel,overrides", SESSION_PROFILES)
def test_entry_handler_rc_ignore_or_remove_records_no_return_instance(kernel, overrides, rc):
    """handler_chain: a consumer whose entry handler returns IGNORE or REMOVE gets no
    return instance: no hijack, no trampoline trip, its return handler never runs.
    (REMOVE from a filterless consumer does not remove the breakpoint.)"""
    entries, rets = [], []
    m = machine(call_loop_guest(3), kernel, **overrides)
    m.uprobes.register("f", handler=lambda ctx: entries.append(1) or rc, ret_handler=lambda ctx: rets.append(1))
    r = m.run(max_insns=100_000)
    assert r.exit_code == 9
    c = m.counters
    actual = {
        "entries": len(entries),
        "rets": len(rets),
        "ri_allocated": c.ri_allocated,
        "bp_traps": c.bp_traps,
        "sys_uretprobe": c.syscalls[NR_URETPROBE],
    }
    expected = {"entries": 3, "rets": 0, "ri_allocated": 0, "bp_traps": 3, "sys_uretprobe": 0}
    assert actual == expected, f"expected {expected}, got {actual}"


@pytest.mark.parametrize("rc", [UPROBE_HANDLER_IGNORE, UPROBE_HANDLER_REMOVE], ids=["IGNORE", "REMOVE"])
@pytest.mark.parametrize("kernel,overrides", SESSION_PROFILES)
def test_ignoring_session_consumer_is_skipped_while_another_consumer_returns(kernel, overrides, rc):
    """Mixed consumers: one session consumer answers IGNORE/REMOVE, a return-only consumer
    still needs the instance - it alone is called at return."""
    rets = []
    m = machine(call_loop_guest(2), kernel, **overrides)
    m.uprobes.register("f", ret_handler=lambda ctx: rets.append(("plain", ctx.regs.rax)))
    m.uprobes.register("f", handler=lambda ctx: rc, ret_handler=lambda ctx: rets.append("session"))
    assert m.run(max_insns=100_000).exit_code == 4
    assert rets == [("plain", 1), ("plain", 3)]
    assert m.counters.uretprobe_hits == 2


# ----------------------------------------------------------------------------- late registration


@pytest.mark.parametrize("kernel,overrides", SESSION_PROFILES)
def test_non_session_ret_handler_registered_after_the_entry_hit_is_called(kernel, overrides):
    """handle_uretprobe_chain(): a return-only consumer added between the entry hit and the
    return is called (data NULL); a session consumer added then is not (its id was not
    recorded at entry)."""
    calls = []
    m = machine(NESTED_GUEST, kernel, **overrides)
    m.uprobes.register("outer", ret_handler=lambda ctx: calls.append(("early", ctx.cookie)))

    def register_late(ctx):
        m.uprobes.register("outer", ret_handler=lambda c: calls.append(("late", c.cookie)))
        m.uprobes.register(
            "outer", handler=lambda c: None, ret_handler=lambda c: calls.append(("late-session", c.cookie))
        )

    m.uprobes.register("g", handler=register_late)
    assert m.run(max_insns=100_000).exit_code == 13
    # walk order newest first: late-session (skipped), late, early
    assert calls == [("late", None), ("early", None)]


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_ret_handler_view_real_return_address_return_value_function(kernel):
    """ctx.regs.rip is the real return address (already restored), ctx.regs.rax the
    return value, ctx.func the probed function's address, for every consumer."""
    views = []
    m = machine(NESTED_GUEST, kernel)
    for sym in ("outer", "g"):
        m.uprobes.register(
            sym, ret_handler=lambda ctx: views.append((ctx.func, ctx.regs.rip, ctx.regs.rax, ctx.is_return))
        )
    assert m.run(max_insns=100_000).exit_code == 13
    g_ret = m.resolve("outer") + 4 + 5  # push rbp; mov rbp,rsp; call g -> next insn
    assert views == [(m.resolve("g"), g_ret, 12, True), (m.resolve("outer"), m.resolve("after_outer"), 13, True)]
    assert_ri_balanced(m)
