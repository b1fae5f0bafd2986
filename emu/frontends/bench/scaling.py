"""``uprobe-emu bench --cpus``: projected M/s against the number of CPUs.

For each kernel column, scenario and CPU count N the bench guest runs in the model with N
producer threads, thread i pinned to CPU i (``sched_setaffinity``, as the kernel's bench
pins its producers), while the machine records the kernel's shared-memory accesses
(``Machine.record_accesses``).  A steady-state trigger of each CPU - its exact accesses,
in order - plus the trigger's private work (the single-CPU cost model's nanoseconds
for the trigger's exact events) is that CPU's program for the contention model
(:mod:`emu.frontends.bench.contention`), which projects the total M/s.

The machine is the one of the published tables (:data:`TOPOLOGY`).  Its prices are
fitted on ONE table (:data:`~emu.frontends.bench.scaling_tables.FIT_TABLE`, S1) by
:func:`fit_prices`; four are priors with a source (:data:`PRIORS`).  Every other
table is a check: the projected speed-up over one CPU at each N, the after/before ratio
at each N, and the CPU count of each curve's peak, printed with their errors.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from types import MappingProxyType

from emu.frontends.bench import costmodel
from emu.frontends.bench.contention import OP_OF_KIND, Prices, Topology, simulate
from emu.frontends.bench.measure import count_events
from emu.frontends.bench.producers import record_triggers
from emu.frontends.bench.scaling_tables import CHECK_TABLES, FIT_TABLE, TABLES
from emu.frontends.bench.scenarios import SCENARIOS, parse_column
from kernel_model.errors import InputError

TOPOLOGY = Topology(sockets=2, cores_per_socket=20, threads_per_core=2)  # Xeon Gold 6138 x 2

PRIORS = MappingProxyType(
    {
        "local": (0.5, "an L1 hit: one or two cycles"),
        "ht": (
            1.5,
            "a hardware thread sharing its core with a busy sibling runs at ~2/3 speed "
            "(Intel's 'up to 30%' more throughput per core from Hyper-Threading)",
        ),
        "turbo": (0.37, "Xeon Gold 6138: 3.7 GHz single-core turbo, 2.7 GHz all-core turbo (Intel's specification)"),
        "jitter": (
            0.1,
            "a trigger's private work varies +-10% (interrupts, private cache misses); "
            "enough to keep identical CPUs out of lockstep",
        ),
    }
)
FIT_PRICES = ("scale", "atomic", "mb", "xfer_core", "xfer_socket", "contend")

# fit_prices() on S1 (see the README for the command); the priors are PRIORS'
FITTED = Prices(
    local=0.5,
    ht=1.5,
    turbo=0.37,
    jitter=0.1,
    scale=0.922,
    atomic=4.73,
    mb=6.33,
    xfer_core=52.6,
    xfer_socket=92.8,
    contend=0.0162,
)

QUICK_CPUS = (1, 2, 4, 8, 16, 32, 64)
FULL_CPUS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 24, 32, 40, 48, 56, 64, 72, 80)
MAX_CPUS = TOPOLOGY.cpus


def parse_cpus(text: str) -> tuple[int, ...]:
    """``1,2,4,8`` or ``1-8`` or ``all`` (the published columns, 1-80)."""
    if text.strip() in ("all", "full"):
        return FULL_CPUS
    if text.strip() == "quick":
        return QUICK_CPUS
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, dash, hi = part.partition("-")
        try:
            rng = range(int(lo), int(hi) + 1) if dash else [int(lo)]
        except ValueError:
            raise InputError(f"--cpus wants numbers like 1,2,4,8 or 1-8, not {part!r}") from None
        out.extend(rng)
    if not out:
        raise InputError("--cpus needs at least one CPU count")
    bad = [n for n in out if not 1 <= n <= MAX_CPUS]
    if bad:
        raise InputError(f"--cpus: {bad[0]} is outside 1..{MAX_CPUS} (the modeled machine has {MAX_CPUS} CPUs)")
    return tuple(sorted(set(out)))


# ----------------------------------------------------------------------------- programs


@functools.cache
def work_ns(column: str, scenario: str) -> float:
    """The private work of one trigger: the single-CPU cost model (intel-2025) priced on
    the trigger's exact events.  Its coefficients were fitted on kernels without hot
    shared lines (6.17/6.18), so they hold no contention; the locks' own costs are the
    contention model's."""
    scen = SCENARIOS[scenario]
    res = count_events(scen, parse_column(column))
    if res.get("status") != "ok":
        raise InputError(f"{scenario} on {column}: {res.get('reason')}")
    feats = costmodel.features_from_events(dict(res["per_iter"], insns=res["insns_per_iter"]))
    return costmodel.get_machine("intel-2025").cost_ns(feats)


@functools.cache
def programs(column: str, scenario: str, n: int) -> tuple:
    """The contention model's input for N CPUs: per CPU ``(work_ns, ops)``."""
    work = work_ns(column, scenario)
    per_cpu = record_triggers(parse_column(column), SCENARIOS[scenario], n)
    out = []
    for cpu in range(n):
        trig = per_cpu[cpu]
        out.append((work, tuple((OP_OF_KIND[a.kind], None if a.kind == "mb" else (a.obj, a.inst)) for a in trig)))
    return tuple(out)


def project(column: str, scenario: str, cpus, prices: Prices = FITTED, *, measure: int = 60) -> list[float]:
    return [simulate(list(programs(column, scenario, n)), TOPOLOGY, prices, measure=measure) for n in cpus]


# ----------------------------------------------------------------------------- fit and checks


def fit_objective(prices: Prices, table=FIT_TABLE, measure: int = 40) -> list[float]:
    """Relative errors of every point of the fitted table (an id or a table)."""
    t = TABLES[table] if isinstance(table, str) else table
    errs: list[float] = []
    for row in t.rows:
        got = project(row.column, row.scenario, t.cpus, prices, measure=measure)
        errs.extend(g / v - 1.0 for g, v in zip(got, row.values))
    return errs


def fit_prices(
    start: Prices = FITTED, table=FIT_TABLE, *, keys=FIT_PRICES, measure: int = 40, progress=None
) -> tuple[Prices, list[float]]:
    """Minimize the sum of squared relative errors over ``keys`` (the priors held) with
    Nelder-Mead - the projection is a simulation, piecewise in the prices, so no
    gradients; needs scipy (``pip install 'uprobe-emu[fit]'``).  Returns the prices
    and the fitted table's errors."""
    try:
        from scipy.optimize import minimize
    except ImportError:
        raise InputError("fitting needs scipy: pip install 'uprobe-emu[fit]'") from None

    def cost(x):
        if progress is not None:
            progress()
        p = start.replace(**{k: max(float(v), 1e-6) for k, v in zip(keys, x)})
        return sum(e * e for e in fit_objective(p, table, measure))

    res = minimize(
        cost,
        [getattr(start, k) for k in keys],
        method="Nelder-Mead",
        options={"maxfev": 300, "xatol": 1e-3, "fatol": 1e-5},
    )
    best = start.replace(**{k: max(float(v), 1e-6) for k, v in zip(keys, res.x)})
    return best, fit_objective(best, table, measure)


@dataclass(frozen=True)
class Check:
    table: str
    what: str  # "fit" | "speedup" | "ratio" | "peak"
    row: str
    cpus: int | None
    projected: float
    published: float
    apart: int = 0  # peak: columns between the projected and the published peak

    @property
    def error(self) -> float:
        """Relative error (a peak's: the columns apart)."""
        if self.what == "peak":
            return float(self.apart)
        return self.projected / self.published - 1.0

    @property
    def tolerance(self) -> float:
        return {"fit": 0.10, "speedup": 0.25, "ratio": 0.25, "peak": 1.0}[self.what]

    @property
    def passes(self) -> bool:
        return abs(self.error) <= self.tolerance + 1e-12

    def as_dict(self) -> dict:
        return {
            "table": self.table,
            "what": self.what,
            "row": self.row,
            "cpus": self.cpus,
            "projected": self.projected,
            "published": self.published,
            "error": self.error,
            "tolerance": self.tolerance,
            "passes": self.passes,
        }


def _peak_column(cpus, values) -> int:
    return max(range(len(values)), key=lambda i: values[i])


def checks(prices: Prices = FITTED, tables=None, *, measure: int = 60, progress=None) -> list[Check]:
    """The fitted table point by point, then every check table's speed-ups, ratios and
    peaks."""
    out: list[Check] = []
    for tid in tables or (FIT_TABLE,) + CHECK_TABLES:
        t = TABLES[tid]
        proj = {}
        for row in t.rows:
            proj[row.label] = project(row.column, row.scenario, t.cpus, prices, measure=measure)
            if progress is not None:
                progress()
        for row in t.rows:
            got = proj[row.label]
            if tid == FIT_TABLE:
                out.extend(Check(tid, "fit", row.label, n, g, v) for n, g, v in zip(t.cpus, got, row.values))
                continue
            out.extend(
                Check(tid, "speedup", row.label, n, g / got[0], v / row.values[0])
                for n, g, v in zip(t.cpus, got, row.values)
                if n != 1
            )
            pi, qi = _peak_column(t.cpus, got), _peak_column(t.cpus, row.values)
            out.append(Check(tid, "peak", row.label, None, t.cpus[pi], t.cpus[qi], abs(pi - qi)))
        if tid == FIT_TABLE:
            continue
        for before, after in t.comparisons:
            b, a = proj[before], proj[after]
            rb, ra = t.row(before).values, t.row(after).values
            out.extend(
                Check(tid, "ratio", f"{after} / {before}", n, a[i] / b[i], ra[i] / rb[i]) for i, n in enumerate(t.cpus)
            )
    return out


def price_table(prices: Prices = FITTED) -> list[tuple[str, float, str]]:
    """(price, value, where it comes from)."""
    out = []
    for f in fields(Prices):
        v = getattr(prices, f.name)
        src = PRIORS[f.name][1] if f.name in PRIORS else f"fitted on {FIT_TABLE}"
        out.append((f.name, v, src))
    return out
