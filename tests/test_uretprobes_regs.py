"""uretprobes and registers: the port of the kernel's uprobe_syscall selftests
(uretprobe_regs_equal, regs_change, uretprobe_syscall_call) for both trampolines, the
return handler's view, sys_uretprobe's full-register return, and the SIGILL cases.

The kernel side: sys_uretprobe() and uprobe_handle_trampoline(); the selftests are
tools/testing/selftests/bpf/prog_tests/uprobe_syscall.c.
"""

from __future__ import annotations

import pytest
from test_uretprobes_support import (
    ALL_FLAGS,
    ALL_VALUES,
    ALLOCS,
    FAKE_TRAMPOLINE_GUEST,
    GPRS,
    KEEP_RAX,
    LEAK_THEN_CALL_TRAMPOLINE,
    LEAK_THEN_FAKE_CHAIN,
    NR_URETPROBE,
    PLAIN_URETPROBE_SYSCALL,
    TRAMPOLINE_PROFILES,
    USER_SLOTS,
    assert_ri_balanced,
    call_loop_guest,
    diff_regs,
    fmt_diff,
    is_int3,
    leaked,
    machine,
    run_regs_guest,
    trampoline_vaddr,
)

from kernel_model.arch.x86.kernel import uprobes as arch_x86
from kernel_model.kernel.signals import SIGNALS

SIGILL = SIGNALS["SIGILL"]
U64 = 0xFFFFFFFFFFFFFFFF


def uretprobe_on(symbol, seen=None, ret_handler=None):
    """A probe(m) callback registering a return-only consumer that records ctx views."""

    def probe(m):
        def on_ret(ctx):
            if seen is not None:
                seen.append({"regs": ctx.regs.pt_regs(), "func": ctx.func, "rip": ctx.regs.rip})
            if ret_handler is not None:
                ret_handler(ctx)

        m.uprobes.register(symbol, ret_handler=on_ret)

    return probe


# ----------------------------------------------------------------------------- regs_equal


@pytest.mark.parametrize("alloc", ALLOCS)
@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_uretprobe_regs_equal_caller_sees_every_slot_unchanged_but_rax(kernel, alloc):
    """uretprobe_regs_equal: after the call returns through the trampoline, all 21
    pt_regs slots the caller can snapshot equal the ones before the call, except rax =
    the trigger's return value - eflags and rsp included."""
    m, r, s = run_regs_guest(kernel, alloc, uretprobe_on("uretprobe_regs_trigger"))
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    assert m.counters.uretprobe_hits == 1
    expected = dict(s["before_keep"], rax=KEEP_RAX)
    d = diff_regs(expected, s["after_keep"])
    assert not d, f"[{kernel}] caller after the uretprobed call: {fmt_diff(d)}"


@pytest.mark.parametrize("alloc", ALLOCS)
@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_uretprobe_regs_equal_same_snapshots_with_and_without_the_uretprobe(kernel, alloc):
    """Both register snapshots (before/after, both triggers) are bit-identical to the run
    without any probe: the uretprobe is invisible to the guest."""
    _, _, plain = run_regs_guest(kernel, alloc)
    _, _, probed = run_regs_guest(
        kernel, alloc, lambda m: (uretprobe_on("uretprobe_regs_trigger")(m), uretprobe_on("trigger_all")(m))
    )
    for buf in plain:
        d = diff_regs(plain[buf], probed[buf])
        assert not d, f"[{kernel}] {buf} differs from the unprobed run: {fmt_diff(d)}"


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_uretprobe_preserves_every_register_the_trigger_sets(kernel):
    """A trigger that returns with known values in every register (rcx and r11, the
    registers the syscall instruction clobbers, included) and known flags: the caller
    sees exactly those values through either trampoline."""
    m, r, s = run_regs_guest(kernel, None, uretprobe_on("trigger_all"))
    assert m.counters.uretprobe_hits == 1
    after = s["after_all"]
    d = diff_regs(ALL_VALUES, after)
    assert not d, f"[{kernel}] caller after trigger_all: {fmt_diff(d)}"
    assert after["eflags"] & 0xFFF == ALL_FLAGS, (
        f"[{kernel}] eflags: expected {ALL_FLAGS:#x} in the low bits, got {after['eflags']:#x}"
    )
    assert after["rsp"] == s["before_all"]["rsp"], (
        f"[{kernel}] rsp: expected {s['before_all']['rsp']:#x}, got {after['rsp']:#x}"
    )


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_uretprobe_ret_handler_sees_the_caller_registers(kernel):
    """The BPF side of uretprobe_regs_equal: the return handler's pt_regs equal what the
    caller sees after the return (r15..rdi, eflags, rsp), with rax = the return value,
    rip = the real return address and func = the probed function."""
    seen = []
    m, r, s = run_regs_guest(kernel, None, uretprobe_on("uretprobe_regs_trigger", seen))
    assert len(seen) == 1
    view, after = seen[0]["regs"], s["after_keep"]
    # right after the return the harness still has the `after` pointer pushed: rsp is
    # 8 below the value it records once that is popped
    expected = dict(after, rsp=after["rsp"] - 8)
    d = diff_regs(expected, view, GPRS + ("eflags", "rsp"))
    assert not d, f"[{kernel}] ret handler regs vs caller after the call: {fmt_diff(d)}"
    assert view["rax"] == KEEP_RAX
    assert seen[0]["rip"] == view["rip"] == m.resolve("harness_keep_ret"), (
        f"rip: expected the return address {m.resolve('harness_keep_ret'):#x}, got {view['rip']:#x}"
    )
    assert seen[0]["func"] == m.resolve("uretprobe_regs_trigger")
    assert (view["cs"], view["ss"]) == (0x33, 0x2B)


def test_ret_handler_sees_syscall_path_orig_rax_minus_one():
    """sys_uretprobe sets orig_ax = -1 before the handlers run (no syscall restart)."""
    seen = []
    run_regs_guest("6.18", None, uretprobe_on("uretprobe_regs_trigger", seen))
    assert seen[0]["regs"]["orig_rax"] == -1


@pytest.mark.parametrize("slots", [("rax",), ("rcx",), ("r11",), ("rax", "rcx", "r11")], ids=lambda s: "+".join(s))
def test_regs_equal_would_catch_a_trampoline_that_loses_rax_rcx_r11(slots):
    """The check above is not vacuous: the machine's `syscall` really clobbers rcx/r11
    (and rax holds 335), so a trampoline that did not save and restore them would be
    caught.  Simulated by overwriting the saved slots with the live values at the syscall."""
    clobbered_at_entry = {}

    def probe(m):
        uretprobe_on("uretprobe_regs_trigger")(m)
        real = m.uprobes.uret.sys_uretprobe

        def broken(task, regs, *args):
            tramp = trampoline_vaddr(m)
            clobbered_at_entry.update(rcx=regs.rcx, r11=regs.r11, rax=regs.rax, eflags=regs.eflags, tramp=tramp)
            slot = {"r11": 0, "rcx": 8, "rax": 16}
            for name in slots:
                m.mem.write_u64(regs.rsp + slot[name], getattr(regs, name))
            return real(task, regs, *args)

        m.syscalls.register(NR_URETPROBE, broken)

    m, r, s = run_regs_guest("6.18", None, probe)
    # what the hardware did at the trampoline's syscall
    assert clobbered_at_entry["rcx"] == clobbered_at_entry["tramp"] + arch_x86.URETPROBE_SYSCALL_CHECK
    assert clobbered_at_entry["r11"] == clobbered_at_entry["eflags"]
    assert clobbered_at_entry["rax"] == NR_URETPROBE
    expected = dict(s["before_keep"], rax=KEEP_RAX)
    d = diff_regs(expected, s["after_keep"])
    assert set(d) == set(slots), f"expected exactly {slots} to differ, got {fmt_diff(d)}"


# ----------------------------------------------------------------------------- regs_change

CHANGED = {
    "rax": 0x12345678DEADBEEF,
    "rcx": 0x87654321FEEBDAED,
    "r11": U64,
    "rdx": 0x0D0D0D0D0D0D0D0D,
    "rsi": 0x0E0E0E0E0E0E0E0E,
    "r8": 0x0808080808080808,
    "r15": 0x0F0F0F0F0F0F0F0F,
    "rbx": 0x0B0B0B0B0B0B0B0B,
    "rbp": 0x0BBB0BBB0BBB0BBB,
}


@pytest.mark.parametrize("alloc", ALLOCS)
@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_regs_change_ret_handler_values_reach_the_caller(kernel, alloc):
    """regs_change (G1): a return handler sets rax, rcx, r11 (and others); the caller sees
    exactly those values and every other slot unchanged."""

    def set_regs(ctx):
        for name, v in CHANGED.items():
            setattr(ctx.regs, name, v)

    m, r, s = run_regs_guest(kernel, alloc, uretprobe_on("uretprobe_regs_trigger", ret_handler=set_regs))
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    expected = dict(s["before_keep"], **CHANGED)
    d = diff_regs(expected, s["after_keep"])
    assert not d, f"[{kernel}] caller after regs_change: {fmt_diff(d)}"


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_regs_change_entry_rcx_and_return_rax_r11(kernel):
    """regs_change (G2+): the entry handler sets rcx, the return handler sets rax and r11;
    all three reach the caller."""

    def probe(m):
        def on_entry(ctx):
            ctx.regs.rcx = CHANGED["rcx"]

        def on_ret(ctx):
            ctx.regs.rax, ctx.regs.r11 = CHANGED["rax"], CHANGED["r11"]

        m.uprobes.register("uretprobe_regs_trigger", handler=on_entry, ret_handler=on_ret)

    m, r, s = run_regs_guest(kernel, None, probe)
    expected = dict(s["before_keep"], rax=CHANGED["rax"], rcx=CHANGED["rcx"], r11=CHANGED["r11"])
    d = diff_regs(expected, s["after_keep"])
    assert not d, f"[{kernel}] caller after regs_change: {fmt_diff(d)}"


# ----------------------------------------------------------------------------- full-regs return

RSP_GUEST = """
_start:
    mov rcx, 0x0c0c0c0c0c0c0c0c
    mov r11, 0x0b0b0b0b0b0b0b0b
    mov rbx, rsp
    call trigger
ret_site:
    mov r12, rsp
    mov r13, rcx
    mov r14, r11
    mov r15, rax
    mov rsp, rbx
    mov eax, 231
    xor edi, edi
    syscall
trigger:
    mov rax, 0xdeadbeef
    ret
"""


@pytest.mark.parametrize("change", ["rsp", "rsp+rcx+r11"])
@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_ret_handler_moving_rsp_returns_with_full_registers(kernel, change):
    """sys_uretprobe step 6: when a handler moves rsp the kernel returns with the full
    pt_regs (IRET path) straight to the original return address - the trampoline's
    pop/pop/ret do not run, rsp is the handler's, rcx/r11 are the pre-trampoline values
    (or the handler's).  The int3 trampoline gives the same result."""

    def on_ret(ctx):
        ctx.regs.rsp = ctx.regs.rsp - 64
        if change != "rsp":
            ctx.regs.rcx, ctx.regs.r11 = 0x1C, 0x11

    m = machine(RSP_GUEST, kernel)
    m.uprobes.register("trigger", ret_handler=on_ret)
    r = m.run(max_insns=100_000)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    regs = m.regs.snapshot()
    expected = {
        "r12": regs.rbx - 64,
        "r15": 0xDEADBEEF,
        "r13": 0x0C0C0C0C0C0C0C0C if change == "rsp" else 0x1C,
        "r14": 0x0B0B0B0B0B0B0B0B if change == "rsp" else 0x11,
    }
    actual = {k: getattr(regs, k) for k in expected}
    d = diff_regs(expected, actual)
    assert not d, f"[{kernel}] after the return (r12=rsp, r13=rcx, r14=r11, r15=rax): {fmt_diff(d)}"
    assert m.counters.syscalls[NR_URETPROBE] == (0 if is_int3(m) else 1)


def test_full_regs_return_skips_the_trampoline_tail():
    """On the full-register path the user never executes the trampoline's pop r11 /
    pop rcx / ret: execution resumes at the return address itself."""
    events = []
    m = machine(RSP_GUEST, "6.18")
    m.uprobes.register("trigger", ret_handler=lambda ctx: setattr(ctx.regs, "rsp", ctx.regs.rsp - 64))
    m.events.subscribe(lambda e: events.append((e.kind, getattr(e, "new_ip", None))))
    m.run(max_insns=100_000)
    assert ("uretprobe_return", m.resolve("ret_site")) in events


# ----------------------------------------------------------------------------- syscall 335 misuse


@pytest.mark.parametrize("kernel", ["6.11", "6.18", "latest"])
def test_uretprobe_syscall_call_from_a_fake_trampoline_is_sigill(kernel):
    """uretprobe_syscall_call: a byte-for-byte copy of the trampoline in ordinary code,
    reached from a uretprobed function, issues syscall 335: the task dies of SIGILL and
    no return handler runs."""
    ret_calls = []
    m = machine(FAKE_TRAMPOLINE_GUEST, kernel)
    m.uprobes.register("uretprobe_syscall_call", ret_handler=lambda ctx: ret_calls.append(ctx.func))
    r = m.run(max_insns=100_000)
    assert (r.reason, r.signal_name) == ("signal", "SIGILL"), r.describe()
    assert ret_calls == [], "no return handler may run"
    assert m.counters.uretprobe_hits == 0 and m.counters.syscalls[NR_URETPROBE] == 1
    assert r.rip_symbol.startswith("uretprobe_syscall_call_1"), r.rip_symbol


@pytest.mark.parametrize("probed", [False, True], ids=["no-uprobes", "uprobes-in-use"])
@pytest.mark.parametrize("kernel", ["6.11", "6.18", "latest"])
def test_uretprobe_syscall_from_ordinary_code_is_sigill(kernel, probed):
    """syscall 335 outside the trampoline kills with SIGILL, whether or not the process
    has an XOL area yet."""
    m = machine(PLAIN_URETPROBE_SYSCALL, kernel)
    if probed:
        m.uprobes.register("after_335", ret_handler=lambda ctx: None)
    r = m.run(max_insns=10_000)
    assert (r.reason, r.signal_name) == ("signal", "SIGILL"), r.describe()
    assert m.counters.signals[SIGILL] == 1


def test_uretprobe_syscall_does_not_exist_before_6_11():
    """On 6.10 there is no syscall 335: -ENOSYS and the process lives on."""
    m = machine(PLAIN_URETPROBE_SYSCALL, "6.10")
    r = m.run(max_insns=10_000)
    assert (r.reason, r.exit_code) == ("exit", (-38) & 0xFF), r.describe()
    assert m.counters.signals[SIGILL] == 0


def test_fake_trampoline_on_6_10_returns_to_its_saved_rax_slot():
    """On 6.10 the fake trampoline's syscall fails with -ENOSYS and nobody rewrites the
    rax slot, so its final `ret` jumps to the caller's saved rax (here 0): SIGSEGV on the
    fetch, not SIGILL, and still no return handler."""
    ret_calls = []
    m = machine(FAKE_TRAMPOLINE_GUEST, "6.10")
    m.uprobes.register("uretprobe_syscall_call", ret_handler=lambda ctx: ret_calls.append(ctx.regs.rax))
    r = m.run(max_insns=100_000)
    assert (r.reason, r.signal_name, r.fault_addr) == ("signal", "SIGSEGV", 0), r.describe()
    assert ret_calls == []


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_reaching_the_trampoline_with_no_return_instance_is_sigill(kernel):
    """The guest leaks the trampoline address (read from [rsp] after the hijack) and
    calls it when nothing is pending: "failed to handle uretprobe" -> SIGILL."""
    seen = []
    m = machine(LEAK_THEN_CALL_TRAMPOLINE, kernel)
    m.uprobes.register("leak", ret_handler=lambda ctx: seen.append(ctx.regs.rax))
    r = m.run(max_insns=100_000)
    assert (r.reason, r.signal_name) == ("signal", "SIGILL"), r.describe()
    tramp = trampoline_vaddr(m)
    assert seen == [tramp], f"leak() returned {[hex(v) for v in seen]}, trampoline {tramp:#x}"
    assert m.counters.uretprobe_hits == 1
    assert m.counters.syscalls[NR_URETPROBE] == (0 if is_int3(m) else 2)


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_chained_hijack_with_nothing_to_chain_is_dropped_and_the_return_sigills(kernel):
    """Checklist 14: [sp] already holds the trampoline but no instance is pending: the new
    instance is dropped (no handler), and the eventual return through the trampoline
    raises SIGILL."""
    seen = []
    m = machine(LEAK_THEN_FAKE_CHAIN, kernel)
    m.uprobes.register("leak", ret_handler=lambda ctx: seen.append("leak"))
    m.uprobes.register("chained", ret_handler=lambda ctx: seen.append("chained"))
    r = m.run(max_insns=100_000)
    assert (r.reason, r.signal_name) == ("signal", "SIGILL"), r.describe()
    assert seen == ["leak"]
    assert leaked(m) == []


# ----------------------------------------------------------------------------- counts

N_CALLS = 5


@pytest.mark.parametrize("alloc", ALLOCS)
@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_exact_trap_and_syscall_counts_per_probed_call(kernel, alloc):
    """int3 trampoline: 2 #BP per probed call (entry + trampoline), no syscall 335;
    syscall trampoline: 1 #BP + 1 syscall 335 per call."""
    m = machine(call_loop_guest(N_CALLS), kernel, alloc)
    m.uprobes.register("f", ret_handler=lambda ctx: None)
    r = m.run(max_insns=100_000)
    assert r.exit_code == N_CALLS * N_CALLS
    c = m.counters
    per_call = {"bp_traps": 2 if is_int3(m) else 1, "sys_uretprobe": 0 if is_int3(m) else 1}
    actual = {"bp_traps": c.bp_traps / N_CALLS, "sys_uretprobe": c.syscalls[NR_URETPROBE] / N_CALLS}
    assert actual == per_call, f"[{kernel}] per call: expected {per_call}, got {actual}"
    assert (c.uprobe_hits, c.uretprobe_hits) == (N_CALLS, N_CALLS)
    assert_ri_balanced(m)


def test_both_trampolines_give_identical_guest_results():
    """Exit status, output, register snapshots and final registers (other than the ones
    the final exit syscall sets) are the same under every trampoline and policy."""
    outcomes = {}
    for kernel in ("6.10", "6.11", "6.18", "latest"):
        for alloc in ALLOCS:
            m, r, s = run_regs_guest(
                kernel, alloc, lambda m: (uretprobe_on("uretprobe_regs_trigger")(m), uretprobe_on("trigger_all")(m))
            )
            final = m.regs.snapshot().pt_regs()
            outcomes[(kernel, alloc)] = (r.exit_code, r.stdout, s, {k: final[k] for k in USER_SLOTS})
    ref_key = ("6.10", "kmalloc")
    for key, val in outcomes.items():
        assert val == outcomes[ref_key], f"{key} differs from {ref_key}"
