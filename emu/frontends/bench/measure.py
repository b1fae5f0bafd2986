"""Measurement in the model and on bare Unicorn: exact events per iteration, timed runs,
the bare-Unicorn baselines and the growth scenarios.

* Count runs (:func:`count_events`) measure two phases with a guest-instruction hook and
  take the difference, so every number is an exact integer.
* Timed runs (:func:`time_model`) start the clock at the guest's marker syscall, after a
  warm-up, so first-hit effects (the nop5/nop10 optimization, pool and XOL-area creation)
  are excluded.
* Baselines run the same trigger code on a bare Unicorn instance (``emu.engine.baseline``): the
  scenario's loop without any hook, the nop loop with its ``nop`` replaced by ``int3``
  and an empty ``UC_HOOK_INTR`` callback (through the binding, and registered natively:
  the floor of a Python trap handler), and the Qiling-style nop loop with a one-address
  ``UC_HOOK_CODE`` calling an empty Python function (a probe with no semantics).
* Floors: next to each run of a scenario with a hit-cost target, the same hit written
  by hand as one straight-line Python callback on bare Unicorn (``emu.engine.baseline``'s
  ``floor-*`` modes): what the model's structure costs above the least Python that has
  the same semantics.
* Growth: per-hit cost with many probes registered, the time to attach many probes, and
  return_instance memory per allocation policy.
"""

from __future__ import annotations

import statistics
import time
from types import MappingProxyType
from typing import Any

from emu.engine import baseline
from emu.frontends.bench.scenarios import (
    EXIT_NR,
    LOOP_NAMES,
    MARKER_NR,
    SCENARIOS,
    SLED_SIZE,
    ColumnSpec,
    Scenario,
    attach,
    guest_file,
    new_machine,
)
from emu.inspect import registered_uprobes
from kernel_model.errors import EmuError, RegistrationError
from kernel_model.trace.events import Syscall

COUNT_WARMUP, COUNT_N1, COUNT_N2 = 3, 2, 5
# the hand-inlined hit timed next to each run of a scenario with a hit-cost target
FLOOR_MODES = MappingProxyType(
    {
        "uprobe-nop": "floor-nop",
        "uprobe-push": "floor-push",
        "uprobe-ret": "floor-ret",
        "uretprobe-nop": "floor-uretprobe",
    }
)


# ----------------------------------------------------------------------------- counter snapshots


def _snapshot(m) -> dict:
    return m.counters.snapshot()


def _delta(a: dict, b: dict) -> dict:
    """b - a over counter snapshots (dict counters by key)."""
    out = {}
    for k, vb in b.items():
        va = a.get(k)
        if isinstance(vb, dict):
            d = {kk: vb.get(kk, 0) - (va or {}).get(kk, 0) for kk in set(vb) | set(va or {})}
            out[k] = {kk: v for kk, v in d.items() if v}
        else:
            out[k] = vb - (va or 0)
    return out


def _scale(d: dict, div: float) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out[k] = {kk: _num(vv / div) for kk, vv in v.items()}
        else:
            out[k] = _num(v / div)
    return out


def _num(x: float):
    return int(x) if float(x).is_integer() else x


def _without(d: dict, nr_counts: dict) -> dict:
    d = dict(d)
    sys_ = dict(d.get("syscalls", {}))
    for nr, c in nr_counts.items():
        sys_[nr] = sys_.get(nr, 0) - c
        if not sys_[nr]:
            del sys_[nr]
    d["syscalls"] = sys_
    return d


# Counters reported per iteration (others are zero in every scenario or cumulative).
EVENT_KEYS = (
    "bp_traps",
    "db_traps",
    "syscalls",
    "emulated",
    "xol_singlesteps",
    "uprobe_hits",
    "uretprobe_hits",
    "ri_allocated",
    "ri_reused",
    "ri_freed",
    "ri_dropped_depth",
    "args_buffer_fills",
    "text_writes",
    "optimized",
    "uprobe_syscalls",
)


def _events(d: dict) -> dict:
    return {k: d.get(k, 0) for k in EVENT_KEYS}


# ----------------------------------------------------------------------------- model runs


def count_events(scen: Scenario, col: ColumnSpec, consumer: str = "program") -> dict:
    """Exact per-iteration events after the warm-up, guest instructions included.

    Runs WARMUP, N1 and N2 iterations as three phases with a ``UC_HOOK_CODE`` counting
    guest instructions; per-iteration values are (phase 2 - phase 1) / (N2 - N1), so the
    code around the loop cancels exactly."""
    try:
        m = new_machine(col, scen.loop, COUNT_N1, COUNT_WARMUP, COUNT_N2)
        hits = attach(m, scen, consumer)
    except RegistrationError as e:
        msg = str(e)
        return {"status": "n/a", "reason": msg if msg.startswith(e.errno_name) else f"{e.errno_name}: {msg}"}
    insns = [0]

    def code(addr, size):
        insns[0] += 1

    m.add_code_hook(code)
    marks = []

    def listener(e):
        if e.nr == MARKER_NR:
            marks.append((insns[0], _snapshot(m), hits()))

    m.events.subscribe(listener, Syscall)
    r = m.run(max_insns=None, timeout=60)
    if r.reason != "exit" or r.exit_code != 0 or len(marks) != 3:
        return {"status": "error", "reason": f"guest ended: {r.describe()}"}
    (i0, s0, h0), (i1, s1, h1), (i2, s2, h2) = marks
    d1, d2 = _delta(s0, s1), _delta(s1, s2)
    diff = _delta(d1, d2)
    dn = COUNT_N2 - COUNT_N1
    per = _events(_scale(diff, dn))
    bp = per["bp_traps"]
    # the int3 instruction itself is the trap (priced as int3), not a guest instruction
    ins = ((i2 - i1) - (i1 - i0)) / dn - bp
    warm = _events(_without(_delta({}, s0), {MARKER_NR: 1}))
    return {
        "status": "ok",
        "per_iter": per,
        "insns_per_iter": _num(ins),
        "hits_per_iter": _num(((h2 - h1) - (h1 - h0)) / dn),
        "warmup_events": warm,
        "exact": _is_exact(per) and float(ins).is_integer(),
    }


def _is_exact(per: dict) -> bool:
    for v in per.values():
        vals = v.values() if isinstance(v, dict) else [v]
        if any(not float(x).is_integer() for x in vals):
            return False
    return True


def time_model(scen: Scenario, col: ColumnSpec, consumer: str, n: int, warmup: int) -> dict:
    """One timed run: ``warmup`` iterations, the marker, ``n`` timed iterations."""
    m = new_machine(col, scen.loop, n, warmup)
    hits = attach(m, scen, consumer)
    state = {}

    def listener(e):
        if e.nr == MARKER_NR:
            state["snap"] = _snapshot(m)
            state["hits"] = hits()
            m.events.unsubscribe(handle)
            state["t0"] = time.perf_counter()

    handle = m.events.subscribe(listener, Syscall)
    r = m.run(max_insns=None, timeout=None)
    t1 = time.perf_counter()
    if r.reason != "exit" or r.exit_code != 0 or "t0" not in state:
        raise EmuError(f"bench guest ended: {r.describe()}")
    d = _without(_delta(state["snap"], _snapshot(m)), {MARKER_NR: 2, EXIT_NR: 1})
    return {"seconds": t1 - state["t0"], "n": n, "totals": _events(d), "hits": hits() - state["hits"]}


def round_iterations(x: float, lo: int, hi: int) -> int:
    x = max(lo, min(hi, int(x)))
    digits = len(str(x)) - 2
    return max(lo, round(x, -digits) if digits > 0 else x)


def measure_scenario(
    scen_name: str,
    col: ColumnSpec,
    consumer: str,
    iterations: int | None,
    warmup: int,
    repeat: int,
    seconds: float,
    adjacent: tuple | None = None,
) -> dict:
    """Count run + timed runs of one scenario in one column.

    ``adjacent=(n_free, n_int3)``: after each timed run, also time the bare-Unicorn
    baselines (this loop hook-free, the nop loop with an int3 and an empty hook) right
    next to it, so the model/baseline ratios hold even when the machine's load drifts."""
    scen = SCENARIOS[scen_name]
    counted = count_events(scen, col, consumer)
    out: dict[str, Any] = {"scenario": scen_name, "column": col.label}
    if counted["status"] != "ok":
        out.update(status=counted["status"], reason=counted["reason"])
        return out
    if iterations is None:
        probe = 20_000 if scen.kind == "none" and scen.loop == 0 else 400
        cal = time_model(scen, col, consumer, probe, warmup)
        per = cal["seconds"] / probe
        n = round_iterations(seconds / per if per > 0 else 1e6, 1000, 50_000_000)
    else:
        n = iterations
    samples, runs, free, int3, code, native, floor = [], [], [], [], [], [], []
    floor_mode = FLOOR_MODES.get(scen_name) if adjacent else None
    floor_error = None
    for _ in range(repeat):
        t = time_model(scen, col, consumer, n, warmup)
        runs.append(t)
        samples.append(n / t["seconds"] / 1e6 if t["seconds"] > 0 else float("inf"))
        if adjacent:
            nf, ni = adjacent
            free.append(nf / bare_run(scen.loop, nf, "none") / 1e6)
            int3.append(ni / bare_run(2, ni, "int3") / 1e6)
            code.append(ni / bare_run(2, ni, "code-hook") / 1e6)
            native.append(ni / bare_run(2, ni, "int3-native") / 1e6)
            if floor_mode:
                try:
                    floor.append(ni / bare_run(0, ni, floor_mode) / 1e6)
                except EmuError as e:  # e.g. no CPU state in place: no floor to show
                    floor_mode, floor_error = None, str(e)
    per_iter = counted["per_iter"]
    timed = _events(_scale(runs[0]["totals"], n))
    consistent = (
        timed == per_iter
        and all(r["totals"] == runs[0]["totals"] for r in runs)
        and runs[0]["hits"] == n * (0 if scen.kind == "none" else 1)
    )
    out.update(
        status="ok",
        iterations=n,
        warmup=warmup,
        samples_mops=samples,
        mops=mops_stats(samples),
        per_iter=per_iter,
        insns_per_iter=counted["insns_per_iter"],
        hits_per_iter=counted["hits_per_iter"],
        warmup_events=counted["warmup_events"],
        exact=counted["exact"],
        consistent=consistent,
        timed_per_iter=timed,
    )
    if adjacent:
        out["adjacent_baselines"] = {
            "hook_free_mops": mops_stats(free),
            "int3_hook_mops": mops_stats(int3),
            "code_hook_mops": mops_stats(code),
            "int3_native_mops": mops_stats(native),
            "iterations": list(adjacent),
        }
        if floor_mode:
            out["adjacent_baselines"]["floor_mops"] = mops_stats(floor)
            out["adjacent_baselines"]["floor_mode"] = floor_mode
        elif floor_error:
            out["adjacent_baselines"]["floor_error"] = floor_error
    return out


def mops_stats(samples: list[float]) -> dict:
    return {"min": min(samples), "median": statistics.median(samples), "max": max(samples)}


# ----------------------------------------------------------------------------- bare Unicorn


def bare_run(loop: int, n: int, mode: str = "none") -> float:
    """Seconds for ``n`` iterations of a guest loop on a bare Unicorn instance (see
    :func:`emu.engine.baseline.bare_run`)."""
    return baseline.bare_run(guest_file(), loop, n, mode)


def measure_baseline(loop: int, mode: str, iterations: int | None, repeat: int, seconds: float) -> dict:
    if iterations is None:
        probe = 200_000 if mode == "none" else 20_000
        per = bare_run(loop, probe, mode) / probe
        n = round_iterations(seconds / per, 1000, 200_000_000)
    else:
        n = iterations
    samples = [n / bare_run(loop, n, mode) / 1e6 for _ in range(repeat)]
    nop_loop = mode in ("int3", "int3-native", "code-hook")
    return {
        "loop": LOOP_NAMES[2 if nop_loop else loop],
        "mode": mode,
        "iterations": n,
        "samples_mops": samples,
        "mops": mops_stats(samples),
    }


# ----------------------------------------------------------------------------- growth


def _probe_count_sample(col: ColumnSpec, consumer: str, count: int, n: int, warmup: int) -> tuple:
    scen = SCENARIOS["uprobe-nop"]
    m = new_machine(col, scen.loop, n, warmup, sled=True)
    attach(m, scen, consumer)
    file = m.process.exe
    sled = file.elf.vaddr_to_offset(file.elf.resolve("probe_sled").value)
    t0 = time.perf_counter()
    for i in range(count - 1):
        m.uprobes.register((file.path, sled + i), handler=_noop)
    reg_s = time.perf_counter() - t0
    state = {}

    def listener(e):
        if e.nr == MARKER_NR:
            state["snap"] = _snapshot(m)
            m.events.unsubscribe(handle)
            state["t0"] = time.perf_counter()

    handle = m.events.subscribe(listener, Syscall)
    r = m.run(max_insns=None, timeout=None)
    dt = time.perf_counter() - state.get("t0", 0)
    if r.reason != "exit" or "snap" not in state:
        raise EmuError(f"bench guest ended: {r.describe()}")
    d = _without(_delta(state["snap"], _snapshot(m)), {MARKER_NR: 2, EXIT_NR: 1})
    return n / dt / 1e6, reg_s, _events(_scale(d, n)), len(registered_uprobes(m))


def growth_probe_counts(col: ColumnSpec, consumer: str, counts: tuple, n: int, warmup: int, repeat: int) -> list:
    """uprobe-nop with ``count`` probes registered in the process (count-1 of them on the
    sled), for each count; the counts are interleaved run by run so that a change of
    machine load hits them alike."""
    samples: dict[int, list[float]] = {c: [] for c in counts}
    info: dict = {}
    for _ in range(repeat):
        for c in counts:
            mops, reg_s, per, tree = _probe_count_sample(col, consumer, c, n, warmup)
            samples[c].append(mops)
            info[c] = (reg_s, per, tree)
    rows = []
    for c in counts:
        st = mops_stats(samples[c])
        reg_s, per, tree = info[c]
        rows.append(
            {
                "probes": c,
                "iterations": n,
                "register_seconds": reg_s,
                "samples_mops": samples[c],
                "mops": st,
                "ns_per_hit": 1000.0 / st["median"],
                "best_ns_per_hit": 1000.0 / st["max"],
                "per_iter": per,
                "uprobes_in_tree": tree,
            }
        )
    one = rows[0]
    for r in rows:
        # each repeat's ratio is taken against the one-probe run next to it in time, so
        # a drift of the machine's load between repeats cancels; the median of those
        # ratios is the figure
        paired = [a / b for a, b in zip(one["samples_mops"], r["samples_mops"])]
        r["paired_cost_vs_one_probe"] = paired
        r["cost_vs_one_probe"] = statistics.median(paired)
        r["best_cost_vs_one_probe"] = r["best_ns_per_hit"] / one["best_ns_per_hit"]
    return rows


def _noop(ctx):
    return 0


def _attach_sample(col: ColumnSpec, count: int) -> tuple:
    """One attach of ``count`` probes on a fresh machine, then their detach: (attach s,
    detach s, text writes after the attach)."""
    m = new_machine(col, 2, 0, 0, sled=True)
    file = m.process.exe
    sled = file.elf.vaddr_to_offset(file.elf.resolve("probe_sled").value)
    path = file.path
    reg = m.uprobes.register
    t0 = time.perf_counter()
    consumers = [reg((path, sled + i), handler=_noop) for i in range(count)]
    dt = time.perf_counter() - t0
    writes = m.counters.text_writes
    t1 = time.perf_counter()
    for c in consumers:
        m.uprobes.unregister(c)
    return dt, time.perf_counter() - t1, writes


def growth_attach(col: ColumnSpec, count: int = SLED_SIZE, repeat: int = 1) -> dict:
    """Time to register ``count`` probes (one consumer each) on distinct sites, best of
    ``repeat`` attaches (each on a fresh machine; every sample is kept)."""
    samples = [_attach_sample(col, count) for _ in range(max(1, repeat))]
    attach_s = [a for a, _d, _w in samples]
    detach_s = [d for _a, d, _w in samples]
    writes = {w for _a, _d, w in samples}
    if len(writes) != 1:
        raise EmuError(f"attach wrote {sorted(writes)} text bytes in its repeats: not one count")
    dt = min(attach_s)
    return {
        "probes": count,
        "repeat": len(samples),
        "attach_seconds": dt,
        "attach_samples": attach_s,
        "median_attach_seconds": statistics.median(attach_s),
        "us_per_probe": dt / count * 1e6,
        "text_writes": writes.pop(),
        "detach_seconds": min(detach_s),
        "detach_samples": detach_s,
        "kernel_reference_seconds": 0.2,
    }


def _ri_run(col: ColumnSpec, iterations: int) -> tuple:
    m = new_machine(col, 3, iterations, 0)
    box = [0]
    file = m.process.exe

    def ret(ctx):
        box[0] += 1

    for sym in ("uprobe_target_push", "opaque_noop_func"):
        off = file.elf.vaddr_to_offset(file.elf.resolve(sym).value)
        m.uprobes.register((file.path, off), ret_handler=ret)
    t0 = time.perf_counter()
    r = m.run(max_insns=None, timeout=None)
    dt = time.perf_counter() - t0
    if r.reason != "exit":
        raise EmuError(f"bench guest ended: {r.describe()}")
    return m.counters, box[0], dt


def growth_ri(col: ColumnSpec, policy: str, iterations: int) -> dict:
    """Return-instance memory after ``2 * iterations`` uretprobe hits at depth 2
    (uretprobes on uprobe_target_push and on opaque_noop_func, which it calls), and after
    a tenth of them: equal peaks show the memory is bounded by depth, not hits."""
    c = ColumnSpec(col.kernel, tuple(sorted(dict(col.overrides, ri_alloc=policy).items())))
    small, _, _ = _ri_run(c, max(1, iterations // 10))
    k, hits, dt = _ri_run(c, iterations)
    return {
        "policy": policy,
        "column": c.label,
        "iterations": iterations,
        "depth": 2,
        "uretprobe_hits": k.uretprobe_hits,
        "handler_calls": hits,
        "ri_allocated": k.ri_allocated,
        "ri_reused": k.ri_reused,
        "ri_freed": k.ri_freed,
        "ri_peak_bytes": k.ri_peak_bytes,
        "seconds": dt,
        "tenth": {
            "uretprobe_hits": small.uretprobe_hits,
            "ri_allocated": small.ri_allocated,
            "ri_peak_bytes": small.ri_peak_bytes,
        },
        "bounded": small.ri_peak_bytes == k.ri_peak_bytes,
    }
