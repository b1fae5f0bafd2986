"""return_instance allocation policies: kmalloc per hit (<= 6.13), the unmerged 2024
array of 64 per task, and the 6.14+ per-task ri_pool.  Same guest-visible behaviour,
different counters and memory footprints.

The kernel side: alloc_return_instance() and ri_pool in kernel/events/uprobes.c.
"""

from __future__ import annotations

import ctypes

import pytest
from test_uretprobes_support import (
    ALLOCS,
    MAX_DEPTH,
    REC_GUEST,
    TAIL_GUEST,
    TRAMPOLINE_PROFILES,
    assert_ri_balanced,
    call_loop_guest,
    deep_guest,
    machine,
)

from kernel_model.kernel.events import uretprobes
from kernel_model.profiles import KernelProfile

RI = uretprobes.RI_SIZEOF


def counts(m) -> dict:
    c = m.counters
    return {"allocated": c.ri_allocated, "reused": c.ri_reused, "freed": c.ri_freed, "peak_bytes": c.ri_peak_bytes}


def run_probed(src, kernel, alloc, symbols, **kw):
    m = machine(src, kernel, alloc)
    rets = []
    for s in symbols:
        m.uprobes.register(s, ret_handler=lambda ctx, s=s: rets.append((s, ctx.regs.rax, ctx.regs.rip)), **kw)
    r = m.run(max_insns=5_000_000)
    return m, r, rets


# ----------------------------------------------------------------------------- same behaviour


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
@pytest.mark.parametrize(
    "src,symbols",
    [
        (REC_GUEST, ("rec", "leaf")),
        (TAIL_GUEST, ("tail_a", "tail_b")),
        (deep_guest(80, times=2), ("deep",)),
        (call_loop_guest(20), ("f",)),
    ],
    ids=["recursion", "tail-call", "deep-80x2", "loop-20"],
)
def test_policies_are_indistinguishable_to_the_guest_and_the_handlers(kernel, src, symbols):
    outcomes = {}
    for alloc in ALLOCS:
        m, r, rets = run_probed(src, kernel, alloc, symbols)
        regs = m.regs.snapshot().pt_regs()
        outcomes[alloc] = (r.reason, r.exit_code, rets, regs, m.counters.uretprobe_hits, m.counters.ri_dropped_depth)
        assert_ri_balanced(m)
    assert outcomes["array64"] == outcomes["kmalloc"], "array64 differs from kmalloc"
    assert outcomes["pool"] == outcomes["kmalloc"], "pool differs from kmalloc"


def test_profiles_pick_kmalloc_before_6_14_and_the_pool_from_6_14():
    picks = {v: KernelProfile.get(v).ri_alloc for v in ("6.10", "6.11", "6.13", "6.14", "6.18", "latest")}
    assert picks == {
        "6.10": "kmalloc",
        "6.11": "kmalloc",
        "6.13": "kmalloc",
        "6.14": "pool",
        "6.18": "pool",
        "latest": "pool",
    }


# ----------------------------------------------------------------------------- counters

N = 50


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_kmalloc_allocates_and_frees_once_per_hit(kernel):
    m, r, _ = run_probed(call_loop_guest(N), kernel, "kmalloc", ("f",))
    expected = {"allocated": N, "reused": 0, "freed": N, "peak_bytes": RI}
    assert counts(m) == expected, f"expected {expected}, got {counts(m)}"
    assert m.uprobes.uret.bytes_held == 0


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_pool_allocates_up_to_the_deepest_nesting_and_reuses_the_rest(kernel):
    """rec(3) with return probes on rec and leaf: at most 5 instances pending (4 rec + 1
    leaf) - 5 allocations, the other 3 hits served from the pool; nothing is freed."""
    m, r, _ = run_probed(REC_GUEST, kernel, "pool", ("rec", "leaf"))
    expected = {"allocated": 5, "reused": 3, "freed": 0, "peak_bytes": 5 * RI}
    assert counts(m) == expected, f"expected {expected}, got {counts(m)}"
    assert len(m.task.utask.ri_pool) == 5


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_pool_after_many_hits_holds_one_instance(kernel):
    m, r, _ = run_probed(call_loop_guest(N), kernel, "pool", ("f",))
    expected = {"allocated": 1, "reused": N - 1, "freed": 0, "peak_bytes": RI}
    assert counts(m) == expected, f"expected {expected}, got {counts(m)}"


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_array64_allocates_64_on_first_use_and_takes_every_instance_from_it(kernel):
    m = machine(call_loop_guest(N), kernel, "array64")
    m.uprobes.register("f", ret_handler=lambda ctx: None)
    assert m.counters.ri_allocated == 0, "nothing before the first hit"
    m.run(max_insns=1_000_000)
    expected = {"allocated": MAX_DEPTH, "reused": N, "freed": 0, "peak_bytes": MAX_DEPTH * RI}
    assert counts(m) == expected, f"expected {expected}, got {counts(m)}"


@pytest.mark.parametrize(
    "alloc,expected",
    [
        ("kmalloc", {"allocated": 160, "reused": 0, "freed": 160, "peak_bytes": 65 * RI}),
        # the 65th instance is allocated by handler_chain before prepare_uretprobe drops it,
        # then recycled for the next 15 dropped hits and for the second round
        ("pool", {"allocated": 65, "reused": 95, "freed": 0, "peak_bytes": 65 * RI}),
        ("array64", {"allocated": 64, "reused": 128, "freed": 0, "peak_bytes": 64 * RI}),
    ],
)
def test_depth_limit_counters_per_policy(alloc, expected):
    """Two rounds of 80-deep recursion (160 hits, 32 dropped for depth)."""
    m, r, rets = run_probed(deep_guest(80, times=2), "6.18", alloc, ("deep",))
    assert r.exit_code == 79 and len(rets) == 128
    assert m.counters.ri_dropped_depth == 32
    assert counts(m) == expected, f"[{alloc}] expected {expected}, got {counts(m)}"
    assert_ri_balanced(m)


@pytest.mark.parametrize("kernel,allocated", [("6.10", 64), ("6.11", 64), ("6.13", 80), ("6.18", 80)])
def test_kmalloc_before_6_13_allocates_only_past_the_depth_check(kernel, allocated):
    """<= 6.12 prepare_uretprobe checked the depth before kmalloc: the 16 hits beyond
    depth 64 allocate nothing.  From 6.13 handler_chain allocates first and
    prepare_uretprobe frees the instance it cannot use."""
    m, r, rets = run_probed(deep_guest(80), kernel, "kmalloc", ("deep",))
    assert r.exit_code == 79 and len(rets) == 64 and m.counters.ri_dropped_depth == 16
    c = m.counters
    assert (c.ri_allocated, c.ri_freed) == (allocated, allocated), (
        f"[{kernel}] allocated/freed: expected {allocated}, got {c.ri_allocated}/{c.ri_freed}"
    )
    assert m.uprobes.uret.bytes_held == 0


@pytest.mark.parametrize("alloc", ["kmalloc", "pool"])
def test_peak_bytes_are_bounded_by_depth_not_by_hits(alloc):
    """10-deep recursion repeated 30 times = 300 hits: the peak is 10 instances."""
    m, r, _ = run_probed(deep_guest(10, times=30), "6.18", alloc, ("deep",))
    assert m.counters.uprobe_hits == 300
    assert m.counters.ri_peak_bytes == 10 * RI, f"[{alloc}] peak: expected {10 * RI}, got {m.counters.ri_peak_bytes}"


# ----------------------------------------------------------------------------- session extras


def two_session_consumers(m, sym):
    for tag in (1, 2):
        m.uprobes.register(sym, handler=lambda ctx, t=tag: setattr(ctx, "cookie", t), ret_handler=lambda ctx: None)


@pytest.mark.parametrize(
    "alloc,expected_peak", [("kmalloc", RI + 16), ("pool", RI + 16), ("array64", MAX_DEPTH * RI + 16)]
)
def test_extra_session_consumer_array_is_kept_with_a_recycled_instance(alloc, expected_peak):
    """A second session consumer needs a 16-byte extra_consumers array; a pooled instance
    keeps it, so 50 hits cost one instance + one array, not 50 arrays."""
    m = machine(call_loop_guest(N), "6.18", alloc)
    two_session_consumers(m, "f")
    assert m.run(max_insns=1_000_000).exit_code == (N * N) & 0xFF
    assert m.counters.ri_peak_bytes == expected_peak, (
        f"[{alloc}] peak: expected {expected_peak}, got {m.counters.ri_peak_bytes}"
    )


def test_kmalloc_frees_exactly_what_it_allocated_with_extras_and_depth_drops():
    """kmalloc: every instance and its extra array are freed - including the ones dropped
    at the depth limit - so nothing is held at exit."""
    m = machine(deep_guest(80), "6.18", "kmalloc")
    two_session_consumers(m, "deep")
    assert m.run(max_insns=1_000_000).exit_code == 79
    assert m.uprobes.uret.bytes_held == 0, f"bytes still held: {m.uprobes.uret.bytes_held}"
    assert m.counters.ri_allocated == m.counters.ri_freed == 80


# ----------------------------------------------------------------------------- struct size


class _Hprobe(ctypes.Structure):
    _fields_ = [("state", ctypes.c_int), ("srcu_idx", ctypes.c_int), ("uprobe", ctypes.c_void_p)]


class _RcuHead(ctypes.Structure):
    _fields_ = [("next", ctypes.c_void_p), ("func", ctypes.c_void_p)]


class _ReturnConsumer(ctypes.Structure):
    _fields_ = [("cookie", ctypes.c_uint64), ("id", ctypes.c_uint64)]


class _ReturnInstance(ctypes.Structure):
    """The field list of struct return_instance (include/linux/uprobes.h, 6.14+)."""

    _fields_ = [
        ("hprobe", _Hprobe),
        ("func", ctypes.c_ulong),
        ("stack", ctypes.c_ulong),
        ("orig_ret_vaddr", ctypes.c_ulong),
        ("chained", ctypes.c_bool),
        ("cons_cnt", ctypes.c_int),
        ("next", ctypes.c_void_p),
        ("rcu", _RcuHead),
        ("consumer", _ReturnConsumer),
        ("extra_consumers", ctypes.c_void_p),
    ]


def test_ri_sizeof_is_the_cacheline_aligned_struct_size():
    raw = ctypes.sizeof(_ReturnInstance)
    assert raw == 96
    cacheline = 64
    assert RI == -(-raw // cacheline) * cacheline == 128
    assert uretprobes.RI_CONSUMER_SIZEOF == ctypes.sizeof(_ReturnConsumer) == 16
