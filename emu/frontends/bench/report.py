"""``uprobe-emu bench``: the kernel's trigger benchmarks (selftests.md 4.1) in the model.

Each scenario runs the built-in guest ``bench_trigger`` (the kernel's trigger bodies in
keystone assembly) under a kernel profile with one consumer that counts hits, and reports

* emulated throughput in M triggers/s (min / median / max over ``--repeat`` runs), timed
  after a warm-up so first-hit effects (the nop5/nop10 optimization, pool and XOL-area
  creation) are excluded;
* the exact events of one iteration from the machine's counters (a count run with a
  guest-instruction hook measures two phases and takes the difference, so every number
  is an exact integer);
* two bare-Unicorn baselines measured in the same process on the same trigger code: the
  scenario's loop without any hook, and the nop loop with its ``nop`` replaced by ``int3``
  and an empty ``UC_HOOK_INTR`` callback (one interrupt per iteration); printed as ratios
  model / baseline;
* the projected kernel throughput of a cost profile (``kernel_model.costmodel``) applied
  to the exact event counts, and for every scenario pair a published table covers, the
  projected ratio beside the published one with the error;
* growth scenarios: per-hit cost with 1, 100 and 10,000 probes registered, the time to
  attach 50,000 probes, and return_instance memory per allocation policy.

Scenarios whose machinery a profile lacks (nop10 before 7.2: the kernel and the model
refuse the probe with ENOTSUPP) are listed as ``n/a (reason)``.

USDT scenarios: the keystone guest has no ``.note.stapsdt``, so the bench probes the site
address (the note's pc) with libbpf's nop-combo rule (``kernel_model.usdt.
usdt_attach_offsets``): attach one byte further, on the nop5/nop10, when the profile has
the uprobe syscall and the site is the matching combo.  The same ELF runs natively for
``--host-kernel``, where the same rule picks the tracefs probe offset.

Consumers (``--consumer``): ``program`` (default; a trace event with a program-only
consumer, like the BPF programs of the kernel's bench: the args buffer is filled only by
kernels without the lazy buffer), ``handler`` (a plain Python uprobe consumer), ``ftrace``
(a trace event that writes ftrace lines; args buffer filled on every hit).

JSON (``--json FILE``), schema ``uprobe-emu.bench/1``::

    {"schema", "host": {...}, "config": {...},
     "columns": [{"label", "kernel", "overrides"}],
     "baselines": {"int3_hook": {"mops": {min, median, max}, ...}, "syscall_hook": ...,
                   "hook_free": {"<loop>": {...}}},
     "scenarios": [{"name", "description", "results": {"<column label>": {
         "status": "ok" | "n/a", "reason", "iterations", "warmup", "samples_mops": [...],
         "mops": {"min", "median", "max"}, "per_iter": {counter: n, "syscalls": {nr: n}},
         "insns_per_iter", "hits_per_iter", "consistent", "ratio_hook_free", "ratio_int3",
         "projected_mops", "projected_ns"}}}],
     "ratios": [{"scenario", "column", "vs", "measured", "projected"}],
     "cost_profile": {"name", "coef", ...}, "projection_checks": [{...}],
     "growth": {"probe_count": [...], "attach": {...}, "ri_memory": [...]},
     "host_kernel": {...} | null,
     "targets": [{"target", "value", "op", "limit", "ok", "note"}]}
"""

from __future__ import annotations

import functools
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from types import SimpleNamespace

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from guest_programs import build_guest, guest_source, write_guest
from kernel_model import costmodel
from kernel_model.profiles import KernelProfile
from kernel_model.usdt import usdt_attach_offsets

from emu import baseline
from emu.asm import asm_to_elf
from emu.frontends.cli import count, seconds
from emu.elf import parse_elf
from emu.errors import EmuError, InputError, RegistrationError
from emu.events import Syscall
from emu.frontends.hostdiff import HostKernelError, HostProbes, ResolvedProbe, Tracefs, host_profile_name, run_tag
from emu.machine import Machine
from emu.mm_types import MappedFile

SCHEMA = "uprobe-emu.bench/1"
GUEST = "bench_trigger"
GUEST_PATH = "/guest/bench_trigger"
MARKER_NR = 110          # getppid: the guest's phase marker
EXIT_NR = 231
SLED_SIZE = 50_000
COUNT_WARMUP, COUNT_N1, COUNT_N2 = 3, 2, 5


# ----------------------------------------------------------------------------- scenarios

@dataclass(frozen=True)
class Scenario:
    name: str
    loop: int                  # the guest's LOOP argument
    target: str | None         # probed symbol (None: no probe)
    kind: str                  # "none" | "entry" | "return"
    usdt: bool = False
    description: str = ""


def _scenarios() -> dict:
    out = [Scenario("usermode-count", 0, None, "none", description="call uprobe_target_nop, bump a counter"),
           Scenario("syscall-count", 1, None, "none", description="syscall(getpgid), bump a counter")]
    for kind, word in (("entry", "uprobe"), ("return", "uretprobe")):
        for i, t in enumerate(("nop", "push", "ret", "nop5", "nop10")):
            out.append(Scenario(f"{word}-{t}", 2 + i, f"uprobe_target_{t}", kind,
                                description=f"{word} on uprobe_target_{t}"))
    for i, t in enumerate(("nop", "nop5", "nop10")):
        out.append(Scenario(f"usdt-{t}", 7 + i, f"usdt_site_{t}", "entry", usdt=True,
                            description=f"USDT site '{'nop' if t == 'nop' else 'nop; ' + t}' "
                                        "(libbpf nop-combo rule)"))
    return {s.name: s for s in out}


SCENARIOS = _scenarios()
LOOP_NAMES = {0: "usermode", 1: "syscall", 2: "nop", 3: "push", 4: "ret", 5: "nop5", 6: "nop10",
              7: "usdt-nop", 8: "usdt-nop5", 9: "usdt-nop10"}


@dataclass(frozen=True)
class ColumnSpec:
    """A kernel profile plus switch overrides: ``6.17`` or ``6.17:nop_emulation=x86_nops``."""

    kernel: str
    overrides: tuple = ()

    @property
    def label(self) -> str:
        if not self.overrides:
            return self.kernel
        return self.kernel + " " + ",".join(f"{k}={v}" for k, v in self.overrides)

    @property
    def key(self) -> str:
        """The costmodel Column key."""
        return self.kernel + "".join(f"+{k}={v}" for k, v in self.overrides)

    def profile(self):
        return KernelProfile.get(self.kernel, **dict(self.overrides))

    def as_dict(self) -> dict:
        return {"label": self.label, "kernel": self.kernel, "overrides": dict(self.overrides)}


def _switch_value(text: str):
    low = text.lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "on", "yes"):
        return True
    if low in ("false", "off", "no"):
        return False
    return text


def parse_column(text: str, extra: dict | None = None) -> ColumnSpec:
    kernel, _, rest = text.partition(":")
    ov = {}
    for part in filter(None, rest.split(",")):
        k, eq, v = part.partition("=")
        if not eq:
            raise InputError(f"bad kernel switch {part!r} (want switch=value)")
        ov[k.strip()] = _switch_value(v.strip())
    ov.update(extra or {})
    spec = ColumnSpec(kernel.strip(), tuple(sorted(ov.items())))
    spec.profile()                     # validates names and switches (InputError)
    return spec


def column_from_costmodel(col) -> ColumnSpec:
    return ColumnSpec(col.profile, tuple(sorted(col.overrides)))


# ----------------------------------------------------------------------------- guest

def guest_elf() -> bytes:
    return build_guest(GUEST)[0]


@functools.cache
def growth_elf() -> bytes:
    """The same guest with a never-executed run of SLED_SIZE one-byte nops appended to its
    text (``probe_sled``): distinct probe sites for the growth scenarios.  Built here, not
    registered as a guest, so the built-in guest stays small."""
    src = guest_source(GUEST)
    head, sep, data = src.partition("\n.data\n")
    sled = f"\nprobe_sled:\n    .fill {SLED_SIZE}, 1, 0x90\nprobe_sled_end:\n    ret\n"
    return asm_to_elf(head + sled + sep + data)[0]


@functools.cache
def guest_file():
    """The guest as a MappedFile (for offsets without a machine)."""
    data = guest_elf()
    return MappedFile(GUEST_PATH, data, parse_elf(data, GUEST_PATH))


def site_offset(file, scen: Scenario, profile) -> int:
    """File offset the scenario probes; USDT sites follow libbpf's nop-combo rule."""
    vaddr = file.elf.resolve(scen.target).value
    if scen.usdt:
        offset, _ = usdt_attach_offsets(file, SimpleNamespace(pc=vaddr, semaphore=0), profile)
        return offset
    return file.elf.vaddr_to_offset(vaddr)


def new_machine(col: ColumnSpec, loop: int, n: int, warmup: int, n2: int = 0, *, sled: bool = False):
    argv = [GUEST, str(loop), str(n), str(warmup), str(n2)]
    return Machine.from_bytes(growth_elf() if sled else guest_elf(), GUEST_PATH, argv=argv,
                              kernel=col.kernel, **dict(col.overrides))


def attach(m, scen: Scenario, consumer: str, box: list):
    """Attach the counting consumer; raises RegistrationError when the kernel refuses."""
    if scen.kind == "none":
        return None
    file = m.process.exe
    off = site_offset(file, scen, m.profile)

    def count(ctx):
        box[0] += 1

    ret = scen.kind == "return"
    if consumer == "handler":
        if ret:
            return m.uprobes.register((file.path, off), ret_handler=count)
        return m.uprobes.register((file.path, off), handler=count)
    if consumer not in ("program", "ftrace"):
        raise InputError(f"unknown consumer {consumer!r} (handler, program, ftrace)")
    return m.uprobes.add_event(f"{'r' if ret else 'p'}:bench/trigger {file.path}:{off:#x}",
                               ftrace=consumer == "ftrace", programs=[count])


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
EVENT_KEYS = ("bp_traps", "db_traps", "syscalls", "emulated", "xol_singlesteps", "uprobe_hits",
              "uretprobe_hits", "ri_allocated", "ri_reused", "ri_freed", "ri_dropped_depth",
              "args_buffer_fills", "text_writes", "optimized", "uprobe_syscalls")


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
        box = [0]
        attach(m, scen, consumer, box)
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
            marks.append((insns[0], _snapshot(m), box[0]))

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
    return {"status": "ok", "per_iter": per, "insns_per_iter": _num(ins),
            "hits_per_iter": _num(((h2 - h1) - (h1 - h0)) / dn),
            "warmup_events": warm, "exact": _is_exact(per) and float(ins).is_integer()}


def _is_exact(per: dict) -> bool:
    for v in per.values():
        vals = v.values() if isinstance(v, dict) else [v]
        if any(not float(x).is_integer() for x in vals):
            return False
    return True


def time_model(scen: Scenario, col: ColumnSpec, consumer: str, n: int, warmup: int) -> dict:
    """One timed run: ``warmup`` iterations, the marker, ``n`` timed iterations."""
    m = new_machine(col, scen.loop, n, warmup)
    box = [0]
    attach(m, scen, consumer, box)
    state = {}

    def listener(e):
        if e.nr == MARKER_NR:
            state["snap"] = _snapshot(m)
            state["hits"] = box[0]
            m.events.unsubscribe(handle)
            state["t0"] = time.perf_counter()

    handle = m.events.subscribe(listener, Syscall)
    r = m.run(max_insns=None, timeout=None)
    t1 = time.perf_counter()
    if r.reason != "exit" or r.exit_code != 0 or "t0" not in state:
        raise EmuError(f"bench guest ended: {r.describe()}")
    d = _without(_delta(state["snap"], _snapshot(m)), {MARKER_NR: 2, EXIT_NR: 1})
    return {"seconds": t1 - state["t0"], "n": n, "totals": _events(d), "hits": box[0] - state["hits"]}


def _round_n(x: float, lo: int, hi: int) -> int:
    x = max(lo, min(hi, int(x)))
    digits = len(str(x)) - 2
    return max(lo, round(x, -digits) if digits > 0 else x)


def measure_scenario(scen_name: str, col: ColumnSpec, consumer: str, iterations: int | None,
                     warmup: int, repeat: int, seconds: float, adjacent: tuple | None = None) -> dict:
    """Count run + timed runs of one scenario in one column.

    ``adjacent=(n_free, n_int3)``: after each timed run, also time the bare-Unicorn
    baselines (this loop hook-free, the nop loop with an int3 and an empty hook) right
    next to it, so the model/baseline ratios hold even when the machine's load drifts."""
    scen = SCENARIOS[scen_name]
    counted = count_events(scen, col, consumer)
    out = {"scenario": scen_name, "column": col.label}
    if counted["status"] != "ok":
        out.update(status=counted["status"], reason=counted["reason"])
        return out
    if iterations is None:
        probe = 20_000 if scen.kind == "none" and scen.loop == 0 else 400
        cal = time_model(scen, col, consumer, probe, warmup)
        per = cal["seconds"] / probe
        n = _round_n(seconds / per if per > 0 else 1e6, 1000, 50_000_000)
    else:
        n = iterations
    samples, runs, free, int3 = [], [], [], []
    for _ in range(repeat):
        t = time_model(scen, col, consumer, n, warmup)
        runs.append(t)
        samples.append(n / t["seconds"] / 1e6 if t["seconds"] > 0 else float("inf"))
        if adjacent:
            nf, ni = adjacent
            free.append(nf / bare_run(scen.loop, nf, "none") / 1e6)
            int3.append(ni / bare_run(2, ni, "int3") / 1e6)
    per_iter = counted["per_iter"]
    timed = _events(_scale(runs[0]["totals"], n))
    consistent = timed == per_iter and all(r["totals"] == runs[0]["totals"] for r in runs) and \
        runs[0]["hits"] == n * (0 if scen.kind == "none" else 1)
    out.update(status="ok", iterations=n, warmup=warmup, samples_mops=samples,
               mops=_stats(samples), per_iter=per_iter, insns_per_iter=counted["insns_per_iter"],
               hits_per_iter=counted["hits_per_iter"], warmup_events=counted["warmup_events"],
               exact=counted["exact"], consistent=consistent, timed_per_iter=timed)
    if adjacent:
        out["adjacent_baselines"] = {"hook_free_mops": _stats(free), "int3_hook_mops": _stats(int3),
                                     "iterations": list(adjacent)}
    return out


def _stats(samples: list[float]) -> dict:
    return {"min": min(samples), "median": statistics.median(samples), "max": max(samples)}


# ----------------------------------------------------------------------------- bare Unicorn

def bare_run(loop: int, n: int, mode: str = "none") -> float:
    """Seconds for ``n`` iterations of a guest loop on a bare Unicorn instance (see
    :func:`emu.baseline.bare_run`)."""
    return baseline.bare_run(guest_file(), loop, n, mode)


def measure_baseline(loop: int, mode: str, iterations: int | None, repeat: int, seconds: float) -> dict:
    if iterations is None:
        probe = 200_000 if mode == "none" else 20_000
        per = bare_run(loop, probe, mode) / probe
        n = _round_n(seconds / per, 1000, 200_000_000)
    else:
        n = iterations
    samples = [n / bare_run(loop, n, mode) / 1e6 for _ in range(repeat)]
    return {"loop": LOOP_NAMES[2 if mode == "int3" else loop], "mode": mode, "iterations": n,
            "samples_mops": samples, "mops": _stats(samples)}


# ----------------------------------------------------------------------------- growth

def _probe_count_sample(col: ColumnSpec, consumer: str, count: int, n: int, warmup: int) -> tuple:
    scen = SCENARIOS["uprobe-nop"]
    m = new_machine(col, scen.loop, n, warmup, sled=True)
    box = [0]
    attach(m, scen, consumer, box)
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
    return n / dt / 1e6, reg_s, _events(_scale(d, n)), len(m.uprobes.tree)


def growth_probe_counts(col: ColumnSpec, consumer: str, counts: tuple, n: int, warmup: int,
                        repeat: int) -> list:
    """uprobe-nop with ``count`` probes registered in the process (count-1 of them on the
    sled), for each count; the counts are interleaved run by run so that a change of
    machine load hits them alike."""
    samples = {c: [] for c in counts}
    info = {}
    for _ in range(repeat):
        for c in counts:
            mops, reg_s, per, tree = _probe_count_sample(col, consumer, c, n, warmup)
            samples[c].append(mops)
            info[c] = (reg_s, per, tree)
    rows = []
    for c in counts:
        st = _stats(samples[c])
        reg_s, per, tree = info[c]
        rows.append({"probes": c, "iterations": n, "register_seconds": reg_s, "samples_mops": samples[c],
                     "mops": st, "ns_per_hit": 1000.0 / st["median"], "best_ns_per_hit": 1000.0 / st["max"],
                     "per_iter": per, "uprobes_in_tree": tree})
    one = rows[0]
    for r in rows:
        r["cost_vs_one_probe"] = r["ns_per_hit"] / one["ns_per_hit"]
        r["best_cost_vs_one_probe"] = r["best_ns_per_hit"] / one["best_ns_per_hit"]
    return rows


def _noop(ctx):
    return 0


def growth_attach(col: ColumnSpec, count: int = SLED_SIZE) -> dict:
    """Time to register ``count`` probes (one consumer each) on distinct sites."""
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
    du = time.perf_counter() - t1
    return {"probes": count, "attach_seconds": dt, "us_per_probe": dt / count * 1e6,
            "text_writes": writes, "detach_seconds": du, "kernel_reference_seconds": 0.2}


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
    return {"policy": policy, "column": c.label, "iterations": iterations, "depth": 2,
            "uretprobe_hits": k.uretprobe_hits, "handler_calls": hits,
            "ri_allocated": k.ri_allocated, "ri_reused": k.ri_reused, "ri_freed": k.ri_freed,
            "ri_peak_bytes": k.ri_peak_bytes, "seconds": dt,
            "tenth": {"uretprobe_hits": small.uretprobe_hits, "ri_allocated": small.ri_allocated,
                      "ri_peak_bytes": small.ri_peak_bytes},
            "bounded": small.ri_peak_bytes == k.ri_peak_bytes}


# ----------------------------------------------------------------------------- host kernel

def host_native(scen_name: str, n: int | None, warmup: int, repeat: int, seconds: float,
                tracefs, path: str, profile) -> dict:
    """Run the trigger ELF natively with a tracefs uprobe (instance tracing off); time
    N iterations minus a 0-iteration run."""
    scen = SCENARIOS[scen_name]
    out = {"scenario": scen_name}

    def run(iters: int) -> float:
        t0 = time.perf_counter()
        res = subprocess.run([path, str(scen.loop), str(iters), str(warmup)], capture_output=True)
        dt = time.perf_counter() - t0
        if res.returncode != 0:
            raise HostKernelError(f"native bench_trigger exited {res.returncode}")
        return dt

    def calibrate():
        nonlocal n
        if n is None:
            probe = 2_000_000 if scen.kind == "none" and scen.loop == 0 else 50_000
            base = min(run(0) for _ in range(3))
            per = max(run(probe) - base, 1e-6) / probe
            n = _round_n(seconds / per, 10_000, 2_000_000_000)

    def measure():
        samples = []
        for _ in range(repeat):
            t0, tn = run(0), run(n)
            samples.append(n / max(tn - t0, 1e-9) / 1e6)
        return samples

    group = run_tag()
    if scen.kind == "none":
        calibrate()
        samples = measure()
        out.update(status="ok", iterations=n, samples_mops=samples, mops=_stats(samples))
        return out
    off = site_offset(guest_file(), scen, profile)
    kind = "r" if scen.kind == "return" else "p"
    try:
        with HostProbes(tracefs, [ResolvedProbe("bench", "bench", kind, off, 0, "")], path) as hp:
            ev = f"{hp.instance}/events/{group}/bench/enable"
            if tracefs.read(ev).strip() != "1":
                # the group enable skips an event the kernel refused; ask it for the errno
                try:
                    tracefs.write(ev, "1")
                except HostKernelError as e:
                    raise HostKernelError(_errno_text(str(e))) from None
            tracefs.write(f"{hp.instance}/tracing_on", "0")
            calibrate()
            before = _profile_hits(tracefs, path)
            samples = measure()
            hits = _profile_hits(tracefs, path) - before
    except HostKernelError as e:
        out.update(status="n/a", reason=str(e))
        return out
    expect = repeat * (n + 2 * warmup)
    if hits == 0:
        out.update(status="n/a", reason="probe never installed: 0 of "
                   f"{expect} expected hits (the kernel refused the instruction when the ELF was "
                   "mapped, as prepare_uprobe does; tracefs accepted the event)", hits=0,
                   expected_hits=expect)
        return out
    out.update(status="ok", iterations=n, samples_mops=samples, mops=_stats(samples),
               probe=f"{kind}:{path}:{off:#x}", hits=hits, expected_hits=expect)
    return out


def _errno_text(msg: str) -> str:
    """tracefs reports the kernel's ENOTSUPP (524) as 'Unknown error 524'."""
    return msg.replace("Unknown error 524", "ENOTSUPP (524)")


def _profile_hits(tracefs, path: str) -> int:
    """Hits of our event in ``uprobe_profile`` (lines: path, event name, hits)."""
    total = 0
    for line in tracefs.read("uprobe_profile").splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == path and parts[1] == "bench":
            total += int(parts[-1])
    return total


# ----------------------------------------------------------------------------- orchestration

def _job(args):
    kind, payload = args
    try:
        if kind == "scenario":
            return kind, payload, measure_scenario(*payload)
        if kind == "count":
            scen, col, consumer = payload
            return kind, payload, count_events(SCENARIOS[scen], col, consumer)
        if kind == "baseline":
            return kind, payload, measure_baseline(*payload)
        if kind == "probes":
            return kind, payload, growth_probe_counts(*payload)
        if kind == "attach":
            return kind, payload, growth_attach(*payload)
        if kind == "ri":
            return kind, payload, growth_ri(*payload)
    except EmuError as e:
        return kind, payload, {"status": "error", "reason": str(e)}
    raise ValueError(kind)


def _run_jobs(jobs: list, workers: int, progress, task) -> list:
    results = []
    if workers <= 1 or len(jobs) <= 1:
        for j in jobs:
            if progress is not None:
                progress.update(task, description=_job_label(j))
            results.append(_job(j))
            if progress is not None:
                progress.advance(task)
        return results
    with mp.get_context("fork").Pool(workers) as pool:
        for res in pool.imap_unordered(_job, jobs):
            results.append(res)
            if progress is not None:
                progress.update(task, description=_job_label((res[0], res[1])))
                progress.advance(task)
    return results


def _job_label(job) -> str:
    kind, p = job
    if kind == "scenario":
        return f"{p[0]} @ {p[1].label}"
    if kind == "count":
        return f"count {p[0]} @ {p[1].label}"
    if kind == "baseline":
        return f"bare Unicorn {LOOP_NAMES[p[0]]} ({p[1]})"
    if kind == "probes":
        return f"uprobe-nop with {', '.join(map(str, p[2]))} probes"
    if kind == "attach":
        return f"attach {p[1]} probes"
    return f"return instances ({p[1]})"


@dataclass
class Config:
    scenarios: list
    columns: list
    consumer: str = "program"
    iterations: int | None = None
    warmup: int = 10
    repeat: int = 3
    seconds: float = 0.5
    workers: int = 1
    cost_profile: str = "intel-2025"
    growth: bool = True
    checks: bool = True
    probe_counts: tuple = (1, 100, 10_000)
    attach_count: int = SLED_SIZE
    ri_iterations: int = 50_000
    ri_policies: tuple = ("kmalloc", "array64", "pool")
    growth_iterations: int | None = None
    growth_repeat: int = 3
    adjacent: tuple | None = (1_000_000, 100_000)   # bare iterations timed next to each run
    host_iterations: int | None = None


def run_bench(cfg: Config, progress=None) -> dict:
    cost = costmodel.get_machine(cfg.cost_profile)
    loops = sorted({SCENARIOS[s].loop for s in cfg.scenarios})
    jobs = [("baseline", (lp, "none", cfg.iterations and max(cfg.iterations, 10_000), cfg.repeat,
                          cfg.seconds / 2)) for lp in loops]
    jobs += [("baseline", (2, "int3", cfg.iterations and max(cfg.iterations, 10_000), cfg.repeat,
                           cfg.seconds / 2)),
             ("baseline", (1, "syscall", cfg.iterations and max(cfg.iterations, 10_000), cfg.repeat,
                           cfg.seconds / 2))]
    scen_jobs = [("scenario", (s, c, cfg.consumer, cfg.iterations, cfg.warmup, cfg.repeat, cfg.seconds,
                               cfg.adjacent))
                 for s in cfg.scenarios for c in cfg.columns]
    check_cols = [column_from_costmodel(c) for c in costmodel.required_columns()] if cfg.checks else []
    table_scens = sorted({s for t in costmodel.TABLES.values() for s in t.rows} |
                         set(costmodel.HOST_ANCHORS.rows))
    count_jobs = []
    for c in check_cols:
        for s in table_scens:
            count_jobs.append(("count", (s, c, "program")))
            if c.key == costmodel.HOST_ANCHORS.columns[0].key and s in costmodel.HOST_ANCHORS.rows:
                count_jobs.append(("count", (s, c, "ftrace")))
    growth_jobs = []
    if cfg.growth:
        base = cfg.columns[0]
        gi = cfg.growth_iterations or 50_000
        growth_jobs.append(("probes", (base, cfg.consumer, tuple(cfg.probe_counts), gi,
                                       cfg.warmup, cfg.growth_repeat)))
        growth_jobs.append(("attach", (base, cfg.attach_count)))
        for pol in cfg.ri_policies:
            growth_jobs.append(("ri", (base, pol, cfg.ri_iterations)))
    all_jobs = jobs + scen_jobs + count_jobs
    task = progress.add_task("bench", total=len(all_jobs) + len(growth_jobs)) if progress else None
    results = _run_jobs(all_jobs, cfg.workers, progress, task)
    # growth timings are sensitive to parallel load: always one at a time
    results += _run_jobs(growth_jobs, 1, progress, task)
    return _assemble(cfg, cost, results)


def _assemble(cfg: Config, cost, results: list) -> dict:
    baselines = {"hook_free": {}, "int3_hook": None, "syscall_hook": None}
    measured, counts = {}, {}
    growth = {"probe_count": [], "attach": None, "ri_memory": []}
    for kind, payload, res in results:
        if kind == "baseline":
            if payload[1] == "none":
                baselines["hook_free"][LOOP_NAMES[payload[0]]] = res
            elif payload[1] == "int3":
                baselines["int3_hook"] = res
            else:
                baselines["syscall_hook"] = res
        elif kind == "scenario":
            measured[(payload[0], payload[1].label)] = res
        elif kind == "count":
            counts[(payload[0], payload[1].key, payload[2])] = res
        elif kind == "probes":
            growth["probe_count"] = res if isinstance(res, list) else [res]
        elif kind == "attach":
            growth["attach"] = res
        elif kind == "ri":
            growth["ri_memory"].append(res)
    order = {p: i for i, p in enumerate(cfg.ri_policies)}
    growth["ri_memory"].sort(key=lambda r: order.get(r.get("policy"), 99))
    _ri_extrapolate(growth["ri_memory"])

    int3 = baselines["int3_hook"]["mops"]["median"] if baselines["int3_hook"] else None
    scenarios = []
    for s in cfg.scenarios:
        scen = SCENARIOS[s]
        entry = {"name": s, "description": scen.description, "results": {}}
        for c in cfg.columns:
            res = dict(measured[(s, c.label)])
            if res.get("status") == "ok":
                bare = baselines["hook_free"].get(LOOP_NAMES[scen.loop])
                med = res["mops"]["median"]
                adj = res.get("adjacent_baselines")
                if adj:           # baselines timed right next to each model run
                    res["ratio_hook_free"] = med / adj["hook_free_mops"]["median"]
                    res["ratio_int3"] = med / adj["int3_hook_mops"]["median"]
                else:
                    if bare:
                        res["ratio_hook_free"] = med / bare["mops"]["median"]
                    if int3:
                        res["ratio_int3"] = med / int3
                fv = costmodel.features_from_events(dict(res["per_iter"], insns=res["insns_per_iter"]))
                res["features"] = fv
                res["projected_ns"] = cost.cost_ns(fv)
                res["projected_mops"] = cost.project_mops(fv)
            entry["results"][c.label] = res
        scenarios.append(entry)
    ratios = []
    if len(cfg.columns) > 1:
        a = cfg.columns[0]
        for entry in scenarios:
            ra = entry["results"][a.label]
            for b in cfg.columns[1:]:
                rb = entry["results"][b.label]
                if ra.get("status") == "ok" and rb.get("status") == "ok":
                    ratios.append({"scenario": entry["name"], "column": b.label, "vs": a.label,
                                   "measured": rb["mops"]["median"] / ra["mops"]["median"],
                                   "projected": rb["projected_mops"] / ra["projected_mops"]})
    checks = []
    if counts:
        ev_prog, ev_ftrace = {}, {}
        for (s, key, consumer), res in counts.items():
            if res.get("status") != "ok":
                continue
            fv = costmodel.features_from_events(dict(res["per_iter"], insns=res["insns_per_iter"]))
            (ev_prog if consumer == "program" else ev_ftrace)[(key, s)] = fv
        checks = [c.as_dict() for c in costmodel.ratio_checks(cost, ev_prog)]
        counts_out = {f"{s}@{k}/{c}": {"per_iter": r.get("per_iter"), "insns_per_iter": r.get("insns_per_iter"),
                                      "status": r.get("status")} for (s, k, c), r in counts.items()}
    else:
        counts_out = {}
    report = {
        "schema": SCHEMA,
        "host": {"release": os.uname().release, "machine": os.uname().machine,
                 "python": sys.version.split()[0], "cpus": os.cpu_count(), "unicorn": _unicorn_version()},
        "config": {"scenarios": cfg.scenarios, "consumer": cfg.consumer, "iterations": cfg.iterations,
                   "warmup": cfg.warmup, "repeat": cfg.repeat, "seconds": cfg.seconds,
                   "workers": cfg.workers, "cost_profile": cfg.cost_profile},
        "columns": [c.as_dict() for c in cfg.columns],
        "baselines": baselines,
        "scenarios": scenarios,
        "ratios": ratios,
        "cost_profile": {"name": cost.name, "description": cost.description, "coef_ns": cost.coef,
                         "fitted": list(cost.fitted), "source": cost.source,
                         "fit_residuals": {f"{k[1]} ({k[0]})": v for k, v in cost.residuals.items()}},
        "projection_checks": checks,
        "check_counts": counts_out,
        "growth": growth if cfg.growth else None,
        "host_kernel": None,
    }
    report["targets"] = targets(report)
    return report


def targets(report: dict) -> list:
    """The project's performance targets, evaluated on the first column."""
    out = []
    col = report["columns"][0]["label"]
    res = {e["name"]: e["results"][col] for e in report["scenarios"]}

    def add(name, value, op, limit, note=""):
        if value is None:
            return
        ok = value >= limit if op == ">=" else value <= limit
        out.append({"target": name, "value": value, "op": op, "limit": limit, "ok": ok, "note": note})

    for scen, lim in (("uprobe-nop", 0.35), ("uretprobe-nop", 0.15)):
        r = res.get(scen)
        if r and r.get("status") == "ok":
            add(f"{scen} / empty-int3-hook baseline", r["ratio_int3"], ">=", lim)
    r = res.get("usermode-count")
    if r and r.get("status") == "ok":
        add("usermode-count / hook-free Unicorn", r["ratio_hook_free"], ">=", 0.7)
    g = report.get("growth") or {}
    pcs = [x for x in g.get("probe_count") or [] if "cost_vs_one_probe" in x]
    if pcs:
        last = pcs[-1]
        add(f"per-hit cost, {last['probes']:,} probes / 1 probe (median)", last["cost_vs_one_probe"], "<=", 1.1,
            f"best runs: {last['best_cost_vs_one_probe']:.2f}")
    a = g.get("attach")
    if a and "attach_seconds" in a:
        secs = a["attach_seconds"] * SLED_SIZE / a["probes"]
        add("attach 50,000 probes (s)", secs, "<=", 2.0,
            "" if a["probes"] == SLED_SIZE else f"extrapolated from {a['probes']:,}")
    checks = report.get("projection_checks") or []
    cal = [abs(c["error"]) for c in checks if c["calibration"]]
    oth = [abs(c["error"]) for c in checks if not c["calibration"]]
    if cal:
        add("max |error| of projected ratios, calibration table", max(cal), "<=", 0.15)
    if oth:
        add("max |error| of projected ratios, other tables", max(oth), "<=", 0.25,
            f"{sum(e <= 0.25 for e in oth)}/{len(oth)} pairs within")
    return out


def _ri_extrapolate(rows: list) -> None:
    """Figures at a million uretprobe hits.  Measured when the run had that many hits;
    otherwise extrapolated and marked so: the peak is the measured one when it did not
    change between a tenth of the hits and all of them (bounded), allocations scale with
    hits where they grew with them (kmalloc), and time scales linearly."""
    for r in rows:
        if not r.get("uretprobe_hits"):
            continue
        hits = r["uretprobe_hits"]
        scale = 1_000_000 / hits
        grew = r["ri_allocated"] != r["tenth"]["ri_allocated"]
        r["at_1M_hits"] = {
            "measured": hits >= 1_000_000,
            "ri_peak_bytes": r["ri_peak_bytes"] if r["bounded"] or hits >= 1_000_000 else None,
            "ri_allocated": round(r["ri_allocated"] * scale) if grew and hits < 1_000_000 else r["ri_allocated"],
            "seconds": r["seconds"] * scale,
        }


def _unicorn_version() -> str:
    return baseline.unicorn_version()


# ----------------------------------------------------------------------------- printing

def _fmt_mops(x: float) -> str:
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


_SHORT = (("bp_traps", "bp"), ("db_traps", "db"), ("emulated", "emu"), ("xol_singlesteps", "xol"),
          ("uprobe_hits", "hit"), ("uretprobe_hits", "ret"), ("ri_allocated", "ri+"),
          ("ri_reused", "ri~"), ("ri_freed", "ri-"), ("args_buffer_fills", "args"),
          ("text_writes", "tw"))


def events_str(res: dict) -> str:
    per = res["per_iter"]
    parts = [f"ins {_g(res['insns_per_iter'])}"]
    for k, short in _SHORT:
        if per.get(k):
            parts.append(f"{short} {_g(per[k])}")
    for nr, c in sorted(per.get("syscalls", {}).items()):
        parts.append(f"sys{nr} {_g(c)}")
    return " ".join(parts)


def _g(x) -> str:
    return str(x) if isinstance(x, int) else f"{x:.3g}"


def _na(res: dict) -> str:
    reason = res.get("reason", "")
    short = reason.split(":")[0] if reason else res.get("status", "n/a")
    return f"n/a ({short})"


def _cell_mops(res: dict) -> str:
    m = res["mops"]
    return f"{_fmt_mops(m['median'])} [{_fmt_mops(m['min'])}-{_fmt_mops(m['max'])}]"


def render(report: dict, console) -> None:
    cols = [c["label"] for c in report["columns"]]
    cp = report["cost_profile"]["name"]
    cfg = report["config"]
    t = Table(title=escape(f"uprobe-emu bench: emulated throughput, M triggers/s = median [min-max] of "
                           f"{cfg['repeat']} runs after {cfg['warmup']} warm-up iterations; "
                           f"consumer={cfg['consumer']}; x = model / bare-Unicorn baseline timed next "
                           f"to each run; projected kernel M/s with cost profile {cp}"),
              title_justify="left")
    t.add_column("scenario", no_wrap=True)
    if len(cols) > 1:
        t.add_column("kernel", no_wrap=True)
    for h in ("M/s", "x hook-free", "x int3 hook", "proj M/s", "events per iteration (exact)"):
        t.add_column(escape(h), justify="left" if h.startswith("events") else "right",
                     no_wrap=not h.startswith("events"))
    for entry in report["scenarios"]:
        for i, c in enumerate(cols):
            res = entry["results"][c]
            row = [entry["name"] if i == 0 else ""] + ([c] if len(cols) > 1 else [])
            if res.get("status") != "ok":
                reason = res.get("reason", res.get("status", "n/a"))
                row += ["n/a", "", "", "", escape(f"n/a ({reason})")]
            else:
                flag = "" if res.get("consistent", True) else "  (!) timed run counted differently"
                row += [_cell_mops(res), f"{res.get('ratio_hook_free', 0):.3f}",
                        f"{res.get('ratio_int3', 0):.3f}", _fmt_mops(res["projected_mops"]),
                        events_str(res) + flag]
            t.add_row(*row, end_section=i == len(cols) - 1 and len(cols) > 1)
    console.print(t)
    console.print("  events: ins guest instructions (int3 excluded), bp int3 traps, db single-step "
                  "traps, emu emulated, xol out-of-line steps, hit/ret entry/return consumer passes, "
                  "ri+ ri~ ri- return instances allocated/reused/freed, args args-buffer fills, sysN "
                  "syscalls by number")
    if len(cols) > 1:
        r = Table(title=escape(f"side by side: median M/s and ratio to {cols[0]} (measured in the "
                               f"model / projected with {cp})"), title_justify="left")
        r.add_column("scenario", no_wrap=True)
        for c in cols:
            r.add_column(escape(c), justify="right")
        for c in cols[1:]:
            r.add_column(escape(f"{c} / {cols[0]}"), justify="right")
        ratio = {(x["scenario"], x["column"]): x for x in report["ratios"]}
        for entry in report["scenarios"]:
            row = [entry["name"]]
            for c in cols:
                res = entry["results"][c]
                row.append(_fmt_mops(res["mops"]["median"]) if res.get("status") == "ok" else "n/a")
            for c in cols[1:]:
                x = ratio.get((entry["name"], c))
                row.append(f"{x['measured']:.2f} / {x['projected']:.2f}" if x else "-")
            r.add_row(*row)
        console.print(r)

    b = report["baselines"]
    bt = Table(title="bare Unicorn baselines (same process, same trigger code)", title_justify="left")
    bt.add_column("baseline")
    bt.add_column(escape("M/s median [min-max]"), justify="right")
    bt.add_column("iterations", justify="right")
    rows = [(f"hook-free loop {k}", v) for k, v in sorted(b["hook_free"].items())]
    if b["int3_hook"]:
        rows.append(("nop loop, int3 + empty UC_HOOK_INTR", b["int3_hook"]))
    if b["syscall_hook"]:
        rows.append(("syscall loop, empty syscall hook", b["syscall_hook"]))
    for name, v in rows:
        m = v["mops"]
        bt.add_row(name, f"{_fmt_mops(m['median'])} [{_fmt_mops(m['min'])}-{_fmt_mops(m['max'])}]",
                   str(v["iterations"]))
    console.print(bt)

    prof = report["cost_profile"]
    console.print(f"cost profile {prof['name']}: {prof['description']}; {prof['source']}")
    console.print("  ns per event: " + ", ".join(f"{k} {v:.3g}" for k, v in prof["coef_ns"].items()
                                                  if v) + f"  (fitted: {', '.join(prof['fitted'])})")
    if report["projection_checks"]:
        _render_checks(report, console)
    if report.get("growth"):
        _render_growth(report["growth"], console)
    if report.get("host_kernel"):
        render_host(report["host_kernel"], console)
    if report.get("targets"):
        _render_targets(report["targets"], console)


def _render_targets(rows: list, console) -> None:
    t = Table(title="targets", title_justify="left")
    for h in ("target", "measured", "limit", "", "note"):
        t.add_column(h, justify="right" if h in ("measured", "limit") else "left")
    for r in rows:
        t.add_row(r["target"], f"{r['value']:.3g}", f"{r['op']} {r['limit']:g}", "met" if r["ok"] else "MISSED",
                  r["note"])
    console.print(t)


def _render_checks(report: dict, console) -> None:
    checks = report["projection_checks"]
    t = Table(title=f"projected vs published ratios (cost profile {report['cost_profile']['name']}; "
                    "target: calibration table +-15%, others +-25%)", title_justify="left")
    for h in ("table", "pair", "published", "projected", "error", ""):
        t.add_column(h, justify="right" if h in ("published", "projected", "error") else "left")
    for c in checks:
        lim = 0.15 if c["calibration"] else 0.25
        ok = abs(c["error"]) <= lim
        note = ("fit" if c["calibration"] else "") + (" prior-src" if c["prior_source"] else "")
        t.add_row(c["table"], c["label"], f"{c['published']:.3f}", f"{c['projected']:.3f}",
                  f"{c['error'] * 100:+.1f}%", ("ok" if ok else "MISS") + (f" ({note.strip()})" if note.strip() else ""))
    console.print(t)
    s = Table(title="projection error by table", title_justify="left")
    for h in ("table", "pairs", "mean |err|", "max |err|", "within target"):
        s.add_column(h, justify="left" if h == "table" else "right")
    by = {}
    for c in checks:
        by.setdefault(c["table"], []).append(c)
    for tid, cs in by.items():
        lim = 0.15 if cs[0]["calibration"] else 0.25
        errs = [abs(c["error"]) for c in cs]
        s.add_row(tid + (" (calibration)" if cs[0]["calibration"] else ""), str(len(cs)),
                  f"{statistics.mean(errs) * 100:.1f}%", f"{max(errs) * 100:.1f}%",
                  f"{sum(e <= lim for e in errs)}/{len(errs)}")
    console.print(s)


def _render_growth(g: dict, console) -> None:
    if g["probe_count"]:
        t = Table(title="growth: uprobe-nop per-hit cost with N probes registered in the process",
                  title_justify="left")
        for h in ("probes", "register s", "M/s median", "ns/hit (median)", "x cost of 1 probe",
                  "ns/hit (best)", "x (best)", "events/iter"):
            t.add_column(h, justify="right")
        for r in g["probe_count"]:
            if "mops" not in r:
                t.add_row(str(r.get("probes", "?")), _na(r), *[""] * 6)
                continue
            ev = " ".join(f"{s} {_g(r['per_iter'][k])}" for k, s in _SHORT if r["per_iter"].get(k))
            t.add_row(f"{r['probes']:,}", f"{r['register_seconds']:.2f}", _fmt_mops(r["mops"]["median"]),
                      f"{r['ns_per_hit']:.0f}", f"{r['cost_vs_one_probe']:.3f}",
                      f"{r['best_ns_per_hit']:.0f}", f"{r['best_cost_vs_one_probe']:.3f}", ev)
        console.print(t)
    a = g.get("attach")
    if a and "attach_seconds" in a:
        console.print(f"growth: attach {a['probes']:,} probes: {a['attach_seconds']:.2f} s "
                      f"({a['us_per_probe']:.1f} us/probe, {a['text_writes']:,} text writes); detach "
                      f"{a['detach_seconds']:.2f} s; kernel uprobe_multi reference ~0.2 s")
    if g["ri_memory"]:
        t = Table(title="growth: return_instance memory, uretprobes at depth 2 (push target + the "
                        "function it calls)", title_justify="left")
        for h in ("policy", "uretprobe hits", "ri allocated", "ri reused", "peak bytes",
                  "peak at 1/10 hits", "s", "at 1M hits: peak bytes", "allocations", "s"):
            t.add_column(h, justify="right")
        for r in g["ri_memory"]:
            if "ri_peak_bytes" not in r:
                t.add_row(r.get("policy", "?"), _na(r), *[""] * 8)
                continue
            x = r.get("at_1M_hits", {})
            how = "measured" if x.get("measured") else "extrapolated"
            peak = x.get("ri_peak_bytes")
            t.add_row(r["policy"], f"{r['uretprobe_hits']:,}", f"{r['ri_allocated']:,}", f"{r['ri_reused']:,}",
                      f"{r['ri_peak_bytes']:,}", f"{r['tenth']['ri_peak_bytes']:,}", f"{r['seconds']:.1f}",
                      (f"{peak:,}" if peak is not None else "unbounded?") + f" ({how})",
                      f"{x.get('ri_allocated', 0):,}", f"{x.get('seconds', 0):.0f}" + ("" if x.get("measured") else " (est.)"))
        console.print(t)


def render_host(h: dict, console) -> None:
    t = Table(title=f"host kernel {h['release']} (native, tracefs uprobe event enabled in a private "
                    f"instance with tracing_on=0) vs the model ({h['profile']})", title_justify="left")
    for hd in ("scenario", escape("host M/s [min-max]"), "hits ok", "model M/s", "model/host",
               f"proj ({h['cost_profile']})", "proj/host", "proj (host-live fit)"):
        t.add_column(hd, justify="left" if hd == "scenario" else "right")
    for r in h["rows"]:
        if r.get("status") != "ok":
            t.add_row(r["scenario"], _na(r), "", "", "", "", "", "")
            continue
        m = r["mops"]
        model = r.get("model_mops")
        proj = r.get("projected_mops")
        live = r.get("live_projected_mops")
        hits = "" if "hits" not in r else ("yes" if r["hits"] == r["expected_hits"] else
                                           f"{r['hits']}/{r['expected_hits']}")
        t.add_row(r["scenario"], f"{_fmt_mops(m['median'])} [{_fmt_mops(m['min'])}-{_fmt_mops(m['max'])}]",
                  hits, _fmt_mops(model) if model else "-",
                  f"{model / m['median']:.2e}" if model else "-", _fmt_mops(proj) if proj else "-",
                  f"{proj / m['median']:.2f}" if proj else "-", _fmt_mops(live) if live else "-")
    console.print(t)
    if h.get("live_fit"):
        lf = h["live_fit"]
        console.print("  host-live fit (ns): " + ", ".join(f"{k} {v:.3g}" for k, v in lf["coef_ns"].items() if v))


# ----------------------------------------------------------------------------- host mode

def run_host(cfg: Config, progress=None) -> dict:
    """Native measurements on this host's kernel, beside the model's."""
    prof_name = host_profile_name()
    col = ColumnSpec(prof_name)
    profile = col.profile()
    tmp = tempfile.mkdtemp(prefix="uemu-bench-")
    path = os.path.join(tmp, GUEST)
    write_guest(GUEST, path)
    os.chmod(path, 0o755)
    rows = []
    task = progress.add_task("host kernel", total=len(cfg.scenarios) * 2) if progress else None
    try:
        tracefs = Tracefs()
        try:
            for s in cfg.scenarios:
                if progress:
                    progress.update(task, description=f"host {s}")
                try:
                    r = host_native(s, cfg.host_iterations, cfg.warmup, cfg.repeat, cfg.seconds,
                                    tracefs, path, profile)
                except HostKernelError as e:
                    r = {"scenario": s, "status": "n/a", "reason": str(e)}
                rows.append(r)
                if progress:
                    progress.advance(task)
                    progress.update(task, description=f"model {s}")
                ftr = count_events(SCENARIOS[s], col, "ftrace")
                if ftr.get("status") == "ok":
                    r["model_events"] = ftr["per_iter"]
                    r["model_insns"] = ftr["insns_per_iter"]
                    r["features"] = costmodel.features_from_events(dict(ftr["per_iter"], insns=ftr["insns_per_iter"]))
                if r.get("status") == "ok" and ftr.get("status") == "ok":
                    mm = measure_scenario(s, col, cfg.consumer, cfg.iterations, cfg.warmup, 1,
                                          min(cfg.seconds, 0.3))
                    r["model_mops"] = mm["mops"]["median"] if mm.get("status") == "ok" else None
                if progress:
                    progress.advance(task)
        finally:
            tracefs.close()
    finally:
        try:
            os.unlink(path)
            os.rmdir(tmp)
        except OSError:
            pass
    cost = costmodel.get_machine(cfg.cost_profile if cfg.cost_profile.startswith("host") else "host-6.18")
    for r in rows:
        if "features" in r:
            r["projected_mops"] = cost.project_mops(r["features"])
    live = None
    okrows = {r["scenario"]: r for r in rows if r.get("status") == "ok" and "features" in r}
    if len(okrows) >= len(costmodel.FIT_FEATURES):
        table = costmodel.PublishedTable("host-live", "this host, measured now", (costmodel.Column("host", prof_name),),
                                         {s: (r["mops"]["median"],) for s, r in okrows.items()})
        try:
            lp = costmodel.fit_profile("host-live", "this host, measured now", table,
                                       {(prof_name, s): r["features"] for s, r in okrows.items()})
            live = {"coef_ns": lp.coef, "residuals": {k[1]: v for k, v in lp.residuals.items()}}
            for r in okrows.values():
                r["live_projected_mops"] = lp.project_mops(r["features"])
        except ValueError as e:
            live = {"error": str(e)}
    return {"release": os.uname().release, "profile": prof_name, "cost_profile": cost.name,
            "rows": rows, "live_fit": live,
            "method": "tracefs uprobe/uretprobe event enabled in a private instance whose tracing_on is 0; "
                      "wall time of N iterations minus a 0-iteration run of the same ELF"}


# ----------------------------------------------------------------------------- CLI

def add_cli(sub, add_machine_options) -> None:
    p = sub.add_parser(
        "bench", help="the kernel's trigger benchmarks in the model (and on the host kernel)",
        description="Run the kernel's bench_trigger scenarios under kernel profiles: emulated "
                    "M/s, exact events per iteration, bare-Unicorn baselines, projected kernel "
                    "cost, growth scenarios.  Scenarios: " + ", ".join(SCENARIOS) + ".")
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="default: all")
    p.add_argument("--kernel", default="latest", metavar="V",
                   help=f"kernel profile ({', '.join(KernelProfile.names())}), optionally with "
                        "switches: 6.17:nop_emulation=x86_nops; default latest")
    p.add_argument("--vs", metavar="V2", action="append", default=[],
                   help="a second profile to compare with (side by side, with ratios)")
    p.add_argument("--policy", metavar="P,P", help="compare return_instance allocation policies "
                                                    "(kmalloc, array64, pool)")
    p.add_argument("--consumer", default="program", choices=("program", "handler", "ftrace"),
                   help="hit counter: program-only trace event (default), Python handler, ftrace event")
    p.add_argument("--iterations", type=count, metavar="N", help="timed iterations (default: sized to --seconds)")
    p.add_argument("--seconds", type=seconds, default=None, metavar="S",
                   help="target duration of one timed run when --iterations is not given (default 0.5)")
    p.add_argument("--warmup", type=count, default=None, metavar="W", help="warm-up iterations (default 10)")
    p.add_argument("--repeat", type=count, default=None, metavar="R", help="timed runs per scenario (default 3)")
    p.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    p.add_argument("--quick", action="store_true", help="small iteration counts (seconds)")
    p.add_argument("--workers", type=count, default=1, metavar="N",
                   help="run scenarios in N processes (timings compete for cores)")
    p.add_argument("--cost-profile", default="intel-2025", metavar="NAME",
                   help="machine profile for projected kernel cost (intel-2025, host-6.18)")
    p.add_argument("--no-growth", action="store_true", help="skip the growth scenarios")
    p.add_argument("--no-checks", action="store_true", help="skip the published-ratio checks")
    p.add_argument("--ri-iterations", type=count, metavar="N",
                   help="loop iterations of the return-instance growth scenario (2 uretprobe hits each)")
    p.add_argument("--host-kernel", action="store_true",
                   help="also measure the same scenarios natively on this host's kernel (root, tracefs)")
    p.set_defaults(func=cmd_bench)


def config_from_args(args) -> Config:
    names = args.scenarios or list(SCENARIOS)
    bad = [s for s in names if s not in SCENARIOS]
    if bad:
        raise InputError(f"unknown scenario {bad[0]!r}; known: {', '.join(SCENARIOS)}")
    kernels = [args.kernel] + list(args.vs)
    policies = [p.strip() for p in args.policy.split(",")] if args.policy else [None]
    for pol in policies:
        if pol is not None and pol not in ("kmalloc", "array64", "pool"):
            raise InputError(f"unknown return_instance policy {pol!r} (kmalloc, array64, pool)")
    cols = []
    for k in kernels:
        for pol in policies:
            cols.append(parse_column(k, {"ri_alloc": pol} if pol else None))
    if len({c.label for c in cols}) != len(cols):
        raise InputError("the same kernel column is given twice")
    if args.iterations is not None and args.iterations < 1:
        raise InputError("--iterations must be positive")
    if args.repeat is not None and args.repeat < 1:
        raise InputError("--repeat must be at least 1")
    if args.seconds is not None and args.seconds <= 0:
        raise InputError("--seconds must be more than 0")
    if args.workers < 1:
        raise InputError("--workers must be at least 1")
    costmodel.get_machine(args.cost_profile)
    q = args.quick
    cfg = Config(scenarios=names, columns=cols, consumer=args.consumer,
                 iterations=args.iterations if args.iterations is not None else (2000 if q else None),
                 warmup=args.warmup if args.warmup is not None else (2 if q else 10),
                 repeat=args.repeat if args.repeat is not None else (1 if q else 3),
                 seconds=args.seconds if args.seconds is not None else (0.05 if q else 0.5),
                 workers=args.workers, cost_profile=args.cost_profile, growth=not args.no_growth,
                 checks=not args.no_checks)
    cfg.host_iterations = args.iterations
    cfg.growth_repeat = max(cfg.repeat, 3)
    if q:
        cfg.attach_count = 5_000
        cfg.ri_iterations = 500
        cfg.growth_iterations = 2000
        cfg.growth_repeat = 1
        cfg.adjacent = (100_000, 10_000)
    if args.ri_iterations:
        cfg.ri_iterations = args.ri_iterations
    return cfg


def _consoles():
    out = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 220)
    err = Console(file=sys.stderr)
    return out, err


def cmd_bench(args) -> int:
    cfg = config_from_args(args)
    out, err = _consoles()
    with _JsonReport(args.json) as json_out:
        with Progress(TextColumn("{task.description:<40}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err, transient=err.is_terminal) as progress:
            report = run_bench(cfg, progress)
            if args.host_kernel:
                try:
                    report["host_kernel"] = run_host(cfg, progress)
                except HostKernelError as e:
                    raise EmuError(f"--host-kernel: {e}") from None
        render(report, out)
        json_out.write(report)
    return 0


class _JsonReport:
    """``--json FILE``, opened before the run so a bad path fails in a second, not after
    minutes of benchmarking.  The file is opened for appending (an existing report is
    not truncated by a run that then fails), rewritten at the end, and removed again if
    this run created it and did not finish."""

    def __init__(self, path: str | None):
        self.path, self.file, self.created, self.done = path, None, False, False

    def __enter__(self) -> "_JsonReport":
        if self.path:
            self.created = not os.path.exists(self.path)
            try:
                self.file = open(self.path, "a")
            except OSError as e:
                raise EmuError(f"cannot write --json {self.path!r}: {e.strerror or e}") from None
        return self

    def write(self, report: dict) -> None:
        if self.file is None:
            return
        try:
            self.file.seek(0)
            self.file.truncate()
            json.dump(report, self.file, indent=1, default=_json_default)
            self.file.flush()
        except OSError as e:
            raise EmuError(f"cannot write --json {self.path!r}: {e.strerror or e}") from None
        self.done = True

    def __exit__(self, *exc) -> None:
        if self.file is None:
            return
        try:
            self.file.close()
        except OSError:
            pass
        if self.created and not self.done:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def _json_default(o):
    if isinstance(o, float):
        return o
    return str(o)
