"""The return_instance stack: recursion with entry and return probes, tail calls
(chained instances), the depth limit of 64, and frames abandoned by longjmp.

The kernel side: prepare_uretprobe() (chained instances, MAX_URETPROBE_DEPTH) and
cleanup_return_instances() in kernel/events/uprobes.c.
"""

from __future__ import annotations

import pytest
from test_uretprobes_support import (
    ALLOCS,
    NR_URETPROBE,
    REC_GUEST,
    TAIL_GUEST,
    TRAMPOLINE_PROFILES,
    assert_ri_balanced,
    deep_guest,
    is_int3,
    machine,
    rec_expected,
)

from emu import Machine
from kernel_model.trace.events import RiDiscarded, UretprobeHijack, UretprobeReturn


def record_events(m, symbols):
    """Entry + return consumer per symbol; events as (kind, name, value, ret label)."""
    events = []
    addr_to_label = {}

    def label_of(addr):
        if addr not in addr_to_label:
            addr_to_label[addr] = m.symbolize(addr)
        return addr_to_label[addr]

    for name in symbols:
        m.uprobes.register(
            name,
            handler=lambda ctx, name=name: events.append(("entry", name, ctx.regs.rdi, None)),
            ret_handler=lambda ctx, name=name: events.append(("return", name, ctx.regs.rax, label_of(ctx.regs.rip))),
        )
    return events


def fmt_events(ev):
    return "\n".join(f"  {k:6} {n:6} {v:#x} {site or ''}" for k, n, v, site in ev)


# ----------------------------------------------------------------------------- recursion


@pytest.mark.parametrize("alloc", ALLOCS)
@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_recursion_entry_and_return_handlers_in_exact_order(kernel, alloc):
    """rec(3) recursing into itself and calling leaf at every level, with entry and
    return probes on both: every handler runs once per call, in call/return order, each
    return handler with its own return value and its own real return address."""
    m = machine(REC_GUEST, kernel, alloc)
    events = record_events(m, ["rec", "leaf"])
    r = m.run(max_insns=100_000)
    assert (r.reason, r.exit_code) == ("exit", 104), r.describe()
    expected = rec_expected(3)
    assert events == expected, (
        f"[{kernel}] handler order\nexpected:\n{fmt_events(expected)}\ngot:\n{fmt_events(events)}"
    )
    c = m.counters
    assert (c.uprobe_hits, c.uretprobe_hits) == (8, 8)  # 4 rec + 4 leaf
    assert c.syscalls[NR_URETPROBE] == (0 if is_int3(m) else 8)
    assert_ri_balanced(m)


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_recursion_depth_rises_and_falls_with_the_calls(kernel):
    """utask depth = number of pending instances: 4 nested rec + 1 leaf at the deepest."""
    depths = []
    m = machine(REC_GUEST, kernel)
    m.uprobes.register("rec", ret_handler=lambda ctx: None)
    m.uprobes.register("leaf", ret_handler=lambda ctx: None)
    m.events.subscribe(lambda e: depths.append(e.task.utask.depth), UretprobeHijack, UretprobeReturn)
    m.run(max_insns=100_000)
    # hijack: rec3 rec2 rec1 rec0 leaf(5) | ret leaf(4) ret rec0(3) | leaf(4) ret(3) ret rec1(2) ...
    assert depths == [1, 2, 3, 4, 5, 4, 3, 4, 3, 2, 3, 2, 1, 2, 1, 0]
    assert max(depths) == 5


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_consumers_on_one_probe_run_newest_first_at_entry_and_at_return(kernel):
    """handler_chain() and handle_uretprobe_chain(): entry handlers run newest-registered first, and return
    handlers walk the same list - also newest first, not the reverse of entry order."""
    order = []
    m = machine(REC_GUEST, kernel)
    for name in ("A", "B", "C"):
        m.uprobes.register(
            "leaf",
            handler=lambda ctx, n=name: order.append(("entry", n)),
            ret_handler=lambda ctx, n=name: order.append(("return", n)),
        )
    m.run(max_insns=100_000)
    one_call = [("entry", "C"), ("entry", "B"), ("entry", "A"), ("return", "C"), ("return", "B"), ("return", "A")]
    assert order == one_call * 4


# ----------------------------------------------------------------------------- tail calls


@pytest.mark.parametrize("alloc", ALLOCS)
@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_tail_call_one_trampoline_hit_two_return_handlers_innermost_first(kernel, alloc):
    """tail_a jmp's to tail_b: tail_b's hijack finds the trampoline already at [sp] and
    chains its instance; the single trip through the trampoline runs tail_b's handler
    then tail_a's, both with the real return address and the final return value."""
    rets, hijacks = [], []
    m = machine(TAIL_GUEST, kernel, alloc)
    for name in ("tail_a", "tail_b"):
        m.uprobes.register(
            name, ret_handler=lambda ctx: rets.append((m.symbolize(ctx.func), ctx.regs.rip, ctx.regs.rax))
        )
    m.events.subscribe(lambda e: hijacks.append((e.chained, e.orig)), UretprobeHijack)
    r = m.run(max_insns=100_000)
    assert (r.reason, r.exit_code) == ("exit", 16), r.describe()
    after_a = m.resolve("after_a")
    expected = [("tail_b", after_a, 16), ("tail_a", after_a, 16)]
    assert rets == expected, f"[{kernel}] return handlers: expected {expected}, got {rets}"
    assert hijacks == [(False, after_a), (True, after_a)], f"hijacks (chained, orig): {hijacks}"
    c = m.counters
    trampoline_trips = {"bp_traps": c.bp_traps - c.uprobe_hits, "syscall335": c.syscalls[NR_URETPROBE]}
    assert trampoline_trips == ({"bp_traps": 1, "syscall335": 0} if is_int3(m) else {"bp_traps": 0, "syscall335": 1}), (
        trampoline_trips
    )
    assert (c.uprobe_hits, c.uretprobe_hits) == (2, 2)
    assert_ri_balanced(m)


def test_tail_call_chained_instance_copies_the_callers_original_return():
    """The chained instance records the top instance's orig_ret_vaddr, not the trampoline
    found at [sp], and the same stack slot."""
    snap = []
    m = machine(TAIL_GUEST, "latest")
    m.uprobes.register("tail_a", ret_handler=lambda ctx: None)
    m.uprobes.register("tail_b", ret_handler=lambda ctx: None)
    m.events.subscribe(
        lambda e: snap.append(
            [(ri.func, ri.stack, ri.orig_ret_vaddr, ri.chained) for ri in e.task.utask.return_instances]
        ),
        UretprobeHijack,
    )
    m.run(max_insns=100_000)
    a, b, ret = m.resolve("tail_a"), m.resolve("tail_b"), m.resolve("after_a")
    stack = snap[-1][0][1]
    assert snap[-1] == [(a, stack, ret, False), (b, stack, ret, True)]


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_chain_instances_are_unlinked_one_at_a_time(kernel):
    """uprobe_handle_trampoline pops each instance of a chain just before its handlers:
    tail_b's return handler still sees tail_a's (chained-to) instance pending, tail_a's
    sees none."""
    views = []
    m = machine(TAIL_GUEST, kernel)
    for name in ("tail_a", "tail_b"):
        m.uprobes.register(
            name,
            ret_handler=lambda ctx: views.append(
                (
                    m.symbolize(ctx.func),
                    ctx.task.utask.depth,
                    [m.symbolize(ri.func) for ri in ctx.task.utask.return_instances],
                )
            ),
        )
    m.run(max_insns=100_000)
    assert views == [("tail_b", 1, ["tail_a"]), ("tail_a", 0, [])]


# ----------------------------------------------------------------------------- depth limit


@pytest.mark.parametrize("alloc", ALLOCS)
@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_80_deep_recursion_runs_64_return_handlers_and_drops_16(kernel, alloc):
    """MAX_URETPROBE_DEPTH: the 65th..80th nested calls get no return instance (their
    entry handlers still run); the outermost 64 return handlers run, innermost first,
    and the result is unchanged."""
    entries, rets = [], []
    m = machine(deep_guest(80), kernel, alloc)
    m.uprobes.register(
        "deep", handler=lambda ctx: entries.append(ctx.regs.rdi), ret_handler=lambda ctx: rets.append(ctx.regs.rax)
    )
    r = m.run(max_insns=1_000_000)
    assert (r.reason, r.exit_code) == ("exit", 79), r.describe()
    assert entries == list(range(79, -1, -1))
    # deep(k) returns k; calls with k = 15..0 are nested deeper than 64
    assert rets == list(range(16, 80)), f"return values seen: {rets}"
    c = m.counters
    actual = {
        "uprobe_hits": c.uprobe_hits,
        "uretprobe_hits": c.uretprobe_hits,
        "ri_dropped_depth": c.ri_dropped_depth,
        "sys_uretprobe": c.syscalls[NR_URETPROBE],
    }
    expected = {
        "uprobe_hits": 80,
        "uretprobe_hits": 64,
        "ri_dropped_depth": 16,
        "sys_uretprobe": 0 if is_int3(m) else 64,
    }
    assert actual == expected, f"[{kernel}/{alloc}] expected {expected}, got {actual}"
    assert_ri_balanced(m)


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_depth_limit_is_per_nesting_not_per_run(kernel):
    """Two rounds of 80-deep recursion: each round drops exactly 16; depth returns to 0."""
    rets = []
    m = machine(deep_guest(80, times=2), kernel)
    m.uprobes.register("deep", ret_handler=lambda ctx: rets.append(ctx.regs.rax))
    r = m.run(max_insns=1_000_000)
    assert r.exit_code == 79
    assert rets == list(range(16, 80)) * 2
    assert m.counters.ri_dropped_depth == 32
    assert m.task.utask.depth == 0


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_exactly_64_deep_loses_nothing(kernel):
    rets = []
    m = machine(deep_guest(64), kernel)
    m.uprobes.register("deep", ret_handler=lambda ctx: rets.append(ctx.regs.rax))
    assert m.run(max_insns=1_000_000).exit_code == 63
    assert rets == list(range(64)) and m.counters.ri_dropped_depth == 0


# ----------------------------------------------------------------------------- longjmp

LJ_PROBED = ("inner", "middle", "leaf", "outer")


def run_longjmp(build_c, kernel, alloc=None, **overrides):
    exe = build_c("uretprobe_longjmp.c", "-static")
    if alloc:
        overrides["ri_alloc"] = alloc
    m = Machine.from_elf(exe, kernel=kernel, **overrides)
    events, discarded, depth_at_hijack = [], [], []
    for name in LJ_PROBED:
        m.uprobes.register(
            name,
            handler=lambda ctx, n=name: events.append(("entry", n, ctx.regs.rdi & 0xFFFFFFFF)),
            ret_handler=lambda ctx, n=name: events.append(("return", n, ctx.regs.rax & 0xFFFFFFFF)),
        )

    def listen(e):
        if isinstance(e, RiDiscarded):
            discarded.append(m.symbolize(e.ri.func))
        else:
            depth_at_hijack.append((m.symbolize(e.task.utask.return_instances[-1].func), e.task.utask.depth))

    m.events.subscribe(listen, RiDiscarded, UretprobeHijack)
    r = m.run(max_insns=50_000_000)
    return m, r, events, discarded, depth_at_hijack


def longjmp_expected():
    ev = []
    for rnd in range(3):
        ev += [("entry", "middle", 3)] + [("entry", "inner", k) for k in (3, 2, 1, 0)]
        ev += [("entry", "leaf", rnd), ("return", "leaf", 2 * rnd)]
    ev += [("entry", "outer", 2), ("entry", "middle", 2)]
    ev += [("entry", "inner", k) for k in (2, 1, 0)]
    ev += [("return", "outer", 1002)]
    return ev


@pytest.mark.parametrize("alloc", ALLOCS)
@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_longjmp_abandoned_frames_get_no_return_handler(build_c, kernel, alloc):
    """longjmp out of middle -> inner x4: those frames never return, so no return handler
    runs for them; the next probed call (leaf) and the return of outer (whose own setjmp
    caught the longjmp) see correct results."""
    m, r, events, discarded, _ = run_longjmp(build_c, kernel, alloc)
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, b"total=1008\n"), r.describe()
    expected = longjmp_expected()
    assert events == expected, "\n".join(f"{e} | {a}" for e, a in zip(expected + [None] * 9, events))


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_longjmp_stale_instances_are_discarded_at_the_next_call_and_at_return(build_c, kernel):
    """Stale instances go away lazily: in main's loop at leaf's entry (RP_CHECK_CALL:
    sp is not below their stack), and inside outer at its return through the trampoline
    (RP_CHECK_RET: the next chain is dead), innermost first."""
    m, r, events, discarded, _ = run_longjmp(build_c, kernel)
    per_round = ["inner", "inner", "inner", "inner", "middle"]
    assert discarded == per_round * 3 + ["inner", "inner", "inner", "middle"], discarded


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_longjmp_later_calls_count_depth_from_scratch(build_c, kernel):
    """After the abandoned frames are discarded, leaf's instance is the only one: depth 1."""
    m, r, events, discarded, depths = run_longjmp(build_c, kernel)
    leaf_depths = [d for name, d in depths if name == "leaf"]
    assert leaf_depths == [1, 1, 1]
    assert [d for name, d in depths if name == "outer"] == [1]


@pytest.mark.parametrize("alloc", ALLOCS)
@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_longjmp_leaks_nothing(build_c, kernel, alloc):
    """At exit no instance is pending and every instance went back to its allocator."""
    m, r, *_ = run_longjmp(build_c, kernel, alloc)
    assert r.exit_code == 0
    assert_ri_balanced(m)
    c = m.counters
    assert (c.uprobe_hits, c.uretprobe_hits) == (23, 4)
    if alloc == "pool":
        # deepest live set: middle + 4 inner, plus the instance allocated at leaf's entry
        # before cleanup ran (alloc_return_instance precedes prepare_uretprobe)
        assert c.ri_allocated == 6, c.ri_allocated
