"""A linear cost model of the kernel's uprobes paths, driven by the emulator's exact
event counts.

The emulator does not run at kernel speed, but it counts exactly what the kernel does
per trigger: int3 traps, single-step traps, syscall entries, uprobe and uretprobe
handler-chain runs, emulated instructions, return_instance allocations, args-buffer
fills, guest instructions.  A *machine profile* prices each event in nanoseconds; the
projected cost of one trigger is the dot product, and the projected throughput is
``1000 / cost_ns`` M triggers per second::

    cost_ns = sum(coef[f] * events_per_trigger[f] for f in FEATURES)

Features (:data:`FEATURES`) and what they stand for in the kernel:

==============  =======================================================================
``insn``        one guest (user-space) instruction executed natively, trampolines too
``int3``        an int3 (#BP) round trip: exception entry, ``handle_swbp`` lookup, exit
``singlestep``  an out-of-line single-step: XOL slot setup, #DB round trip, fixups
``syscall``     a syscall entry/exit (getpgid, the uretprobe 335 and uprobe 336 ones)
``uprobe``      one entry-side consumer pass (``handler_chain`` + the BPF program)
``uretprobe``   one return-side consumer pass (``handle_uretprobe_chain`` + program)
``emulate``     emulating the probed instruction in the kernel (nop, push, jmp...)
``ri_alloc``    a return_instance kmalloc + free (per hit without a pool)
``ri_reuse``    a return_instance taken from the per-task pool
``args_fill``   filling the per-CPU args buffer (``uprobe_cpu_buffer``)
``text_write``  a text patch (install/optimize); zero per trigger in steady state
==============  =======================================================================

Calibration.  One published table is fitted by weighted least squares (relative
errors: weights 1/observed, so the 6.6 ns loop and the 900 ns single-step count
alike), with non-negative coefficients: :data:`CALIBRATION_TABLE` - Jiri
Olsa's PATCHv6 10/22 (2025-07-20), Intel, 10 scenarios x 2 kernels.  It is the widest
single-machine table: it has every event class a modern kernel produces in one run
(loop only, plain syscall, int3 + emulation, int3 + single-step - its "current" nop5
is single-stepped -, the optimized nop5 through the uprobe syscall, and return probes
through the uretprobe syscall), and its two columns map onto two profiles exactly
(6.17 and 6.18).  Its rows leave four coefficients unidentifiable (``emulate`` always
co-occurs with ``int3``; ``ri_reuse`` with ``uretprobe``; there is no ``ri_alloc`` and
no ``args_fill``): those are fixed priors taken from other tables (:data:`PRIORS`,
each with its source), and the checks that use those same tables are marked.

Every other table in :data:`TABLES` is a check, never fitted: the bench projects the
ratio of each scenario pair a table covers (the same row in its two kernels, and each
row against ``uprobe-nop`` in the same kernel) and prints it next to the published
ratio with the relative error.  Ratios cancel most of the machine's speed, so tables
from other machines are fair checks of the *structure* of the model.

Machine profiles (:data:`MACHINES`): ``intel-2025`` (the calibration machine) and
``host-6.18`` (this project's VM running Linux 6.18, fitted on :data:`HOST_ANCHORS`,
measured with a tracefs consumer whose instance has tracing off, so each hit
fills the args buffer).  ``bench --host-kernel`` measures the host again and can fit a
live profile with :func:`fit_profile`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kernel_model.errors import InputError

FEATURES = (
    "insn",
    "int3",
    "singlestep",
    "syscall",
    "uprobe",
    "uretprobe",
    "emulate",
    "ri_alloc",
    "ri_reuse",
    "args_fill",
    "text_write",
)

FEATURE_DOC = {
    "insn": "guest instruction",
    "int3": "int3 round trip",
    "singlestep": "single-step #DB + XOL",
    "syscall": "syscall entry/exit",
    "uprobe": "entry consumer pass",
    "uretprobe": "return consumer pass",
    "emulate": "in-kernel emulation",
    "ri_alloc": "return_instance kmalloc+free",
    "ri_reuse": "return_instance from pool",
    "args_fill": "args-buffer fill",
    "text_write": "text patch",
}

# Coefficients the calibration table cannot identify (ns), with where they come from.
PRIORS = {
    "emulate": (
        5.0,
        "a few kernel instructions (nop/push emulation); always paired with int3 "
        "in table 5.11f, so not separable there",
    ),
    "ri_alloc": (83.0, "5.10 ri_pool, 1 thread: uretprobe-nop 1.898 -> 2.253 M/s = 83 ns per hit"),
    "ri_reuse": (0.0, "folded into 'uretprobe' (always paired in table 5.11f)"),
    "args_fill": (10.0, "5.1 lazy args buffer: uprobe-nop 2.657 -> 2.732 M/s = 10.3 ns per hit"),
    "text_write": (1000.0, "not in steady state; order of a text_poke"),
}


def features_from_events(ev: dict) -> dict[str, float]:
    """Per-trigger feature vector from per-iteration emulator counts.

    ``ev`` has the counter names of ``kernel_model.kernel.counters.Counters`` (``syscalls`` a dict by
    number) plus ``insns`` (guest instructions per iteration)."""
    sys = ev.get("syscalls") or {}
    return {
        "insn": float(ev.get("insns", 0)),
        "int3": float(ev.get("bp_traps", 0)),
        "singlestep": float(ev.get("db_traps", 0)),
        "syscall": float(sum(sys.values())),
        "uprobe": float(ev.get("uprobe_hits", 0)),
        "uretprobe": float(ev.get("uretprobe_hits", 0)),
        "emulate": float(ev.get("emulated", 0)),
        "ri_alloc": float(ev.get("ri_allocated", 0)),
        "ri_reuse": float(ev.get("ri_reused", 0)),
        "args_fill": float(ev.get("args_buffer_fills", 0)),
        "text_write": float(ev.get("text_writes", 0)),
    }


# ----------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class CostProfile:
    """A machine: ns per event, plus where the numbers came from."""

    name: str
    description: str
    coef: dict  # feature -> ns
    fitted: tuple = ()  # features set by the fit
    source: str = ""
    residuals: dict = field(default_factory=dict)  # (column, scenario) -> relative error

    def cost_ns(self, features: dict) -> float:
        return sum(self.coef.get(f, 0.0) * features.get(f, 0.0) for f in FEATURES)

    def project_mops(self, features: dict) -> float:
        c = self.cost_ns(features)
        return 1000.0 / c if c > 0 else float("inf")

    def breakdown(self, features: dict) -> dict:
        return {f: self.coef.get(f, 0.0) * features.get(f, 0.0) for f in FEATURES if features.get(f, 0.0)}


def relative_error(projected: float, published: float) -> float:
    """``projected / published - 1`` (0.10 = the projection is 10% high)."""
    return projected / published - 1.0


# ----------------------------------------------------------------------------- fitting


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None if singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        scale = max(abs(m[r][col]) for r in range(n)) or 1.0
        if abs(m[piv][col]) < 1e-12 * scale:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col and m[r][col]:
                k = m[r][col] / m[col][col]
                m[r] = [x - k * y for x, y in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]


def least_squares(
    rows: list[dict],
    observed_ns: list[float],
    fit: list[str],
    fixed: dict[str, float] | None = None,
    relative: bool = True,
    nonnegative: bool = True,
) -> dict[str, float]:
    """Fit ``observed_ns[i] ~ sum(c[f] * rows[i][f])`` over ``fit`` features, the
    ``fixed`` ones held at their values.  ``relative`` weights each row by 1/observed
    (minimizes relative errors).  Features that are zero in every row are left out
    (unidentifiable: coefficient 0 unless fixed).  With ``nonnegative``, a negative
    coefficient is pinned to 0 and the rest refitted (active set)."""
    fixed = dict(fixed or {})
    active = [f for f in fit if f not in fixed and any(r.get(f, 0.0) for r in rows)]
    out = {f: 0.0 for f in fit}
    out.update(fixed)
    while active:
        y = [obs - sum(v * r.get(f, 0.0) for f, v in fixed.items()) for r, obs in zip(rows, observed_ns)]
        w = [1.0 / (obs * obs) if relative else 1.0 for obs in observed_ns]
        n = len(active)
        ata = [[sum(wi * r.get(fa, 0.0) * r.get(fb, 0.0) for wi, r in zip(w, rows)) for fb in active] for fa in active]
        aty = [sum(wi * r.get(fa, 0.0) * yi for wi, r, yi in zip(w, rows, y)) for fa in active]
        sol = _solve(ata, aty)
        if sol is None:
            raise ValueError(f"features {active} are not identifiable from these rows (collinear)")
        coef = dict(zip(active, sol))
        neg = [f for f in active if coef[f] < 0]
        if nonnegative and neg:
            worst = min(neg, key=lambda f: coef[f])
            fixed[worst] = 0.0
            out[worst] = 0.0
            active.remove(worst)
            continue
        out.update(coef)
        assert len(coef) == n
        break
    return out


# ----------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class Column:
    """A published column and the kernel profile (+ switch overrides) it corresponds to."""

    label: str
    profile: str
    overrides: tuple = ()  # (("nop_emulation", "x86_nops"), ...)

    @property
    def key(self) -> str:
        return self.profile + "".join(f"+{k}={v}" for k, v in self.overrides)


@dataclass(frozen=True)
class PublishedTable:
    id: str
    title: str
    columns: tuple  # Column, ...
    rows: dict  # scenario -> (M/s per column; None = not published)
    note: str = ""
    prior_source: tuple = ()  # features whose prior came from this table

    def cells(self):
        for scen, vals in self.rows.items():
            for col, v in zip(self.columns, vals):
                if v is not None:
                    yield col, scen, v


_RET_ROWS = ("uretprobe-nop", "uretprobe-push", "uretprobe-ret")

TABLES = {
    t.id: t
    for t in (
        PublishedTable(
            "5.11f",
            "uprobes/x86: optimize uprobes, PATCHv6 10/22 (2025-07-20), Intel",
            (Column("current", "6.17"), Column("optimised", "6.18")),
            {
                "usermode-count": (152.604, 152.448),
                "syscall-count": (13.359, 14.321),
                "uprobe-nop": (3.229, 3.148),
                "uprobe-push": (3.086, 2.976),
                "uprobe-ret": (1.114, 1.068),
                "uprobe-nop5": (1.121, 7.038),
                "uretprobe-nop": (2.145, 2.109),
                "uretprobe-push": (2.070, 2.035),
                "uretprobe-ret": (0.931, 0.908),
                "uretprobe-nop5": (0.957, 3.377),
            },
            "calibration table; 'current' predates the April 2025 NOP emulation (nop5 single-stepped)",
        ),
        PublishedTable(
            "5.11e",
            "uprobes: optimize usdt probes, PATCHv5 00/22 cover (2025-07-11), Intel",
            (Column("current", "6.17", (("nop_emulation", "x86_nops"),)), Column("optimised", "6.18")),
            {
                "usermode-count": (152.501, 152.343),
                "syscall-count": (14.463, 14.851),
                "uprobe-nop": (3.160, 3.204),
                "uprobe-push": (3.003, 3.040),
                "uprobe-ret": (1.100, 1.098),
                "uprobe-nop5": (3.132, 7.286),
                "uretprobe-nop": (2.103, 2.144),
                "uretprobe-push": (2.027, 2.069),
                "uretprobe-ret": (0.914, 0.922),
                "uretprobe-nop5": (2.115, 3.487),
            },
            "'current' already emulates nop5 (6.17 + x86_nops)",
        ),
        PublishedTable(
            "5.11d",
            "uprobes/x86: optimize uprobes, RFCv2 12/18 (2025-02-24), machine not stated",
            (Column("current", "6.14"), Column("optimised", "6.18")),
            {
                "usermode-count": (818.836, 818.386),
                "syscall-count": (8.917, 8.923),
                "uprobe-nop": (3.056, 3.086),
                "uprobe-push": (2.903, 2.751),
                "uprobe-ret": (1.533, 1.481),
                "uprobe-nop5": (1.492, 4.016),
                "uretprobe-nop": (1.783, 1.712),
                "uretprobe-push": (1.672, 1.616),
                "uretprobe-ret": (1.067, 1.052),
                "uretprobe-nop5": (1.052, 2.015),
            },
        ),
        PublishedTable(
            "5.11c",
            "uprobes/x86: emulate nop5, bpf-next 07/13 (2024-12-11), machine not stated",
            (Column("nop5 single-stepped", "6.13"), Column("nop5 emulated", "6.13", (("nop_emulation", "x86_nops"),))),
            {
                "uprobe-nop": (3.252, 3.281),
                "uprobe-push": (3.097, 3.085),
                "uprobe-ret": (1.116, 1.130),
                "uprobe-nop5": (1.115, 3.276),
                "uretprobe-nop": (1.731, 1.716),
                "uretprobe-push": (1.673, 1.651),
                "uretprobe-ret": (0.843, 0.846),
            },
            "uretprobe-nop5 rows omitted (the bench measured an entry probe there)",
        ),
        PublishedTable(
            "5.2-intel",
            "uretprobe syscall, PATCHv2 (2024-04-02), Intel Core i7-1165G7",
            (Column("int3 trampoline", "6.10"), Column("syscall trampoline", "6.11")),
            {
                "syscall-count": (15.888, 15.116),
                "uprobe-nop": (3.016, 3.001),
                "uprobe-push": (2.832, 2.831),
                "uprobe-ret": (1.104, 1.102),
                "uretprobe-nop": (1.487, 1.969),
                "uretprobe-push": (1.456, 1.905),
                "uretprobe-ret": (0.816, 0.933),
            },
            "'base' row read as syscall-count",
        ),
        PublishedTable(
            "5.2-amd",
            "uretprobe syscall, PATCHv2 (2024-04-02), AMD Ryzen 7 5700U",
            (Column("int3 trampoline", "6.10"), Column("syscall trampoline", "6.11")),
            {
                "syscall-count": (5.105, 5.119),
                "uprobe-nop": (1.552, 1.523),
                "uprobe-push": (1.408, 1.384),
                "uprobe-ret": (0.827, 0.826),
                "uretprobe-nop": (0.779, 0.866),
                "uretprobe-push": (0.750, 0.826),
                "uretprobe-ret": (0.539, 0.581),
            },
            "'base' row read as syscall-count",
        ),
        PublishedTable(
            "5.1",
            "uprobes: args buffer lazily (2024-03-18), machine not stated",
            (Column("before", "6.9"), Column("after lazy buffer", "6.10")),
            {
                "uprobe-nop": (2.657, 2.732),
                "uprobe-push": (2.499, 2.621),
                "uprobe-ret": (1.100, 1.105),
                "uretprobe-nop": (1.356, 1.396),
                "uretprobe-push": (1.317, 1.347),
                "uretprobe-ret": (0.785, 0.800),
            },
            "the 'after both' column (lockless filter check) is not modeled",
            ("args_fill",),
        ),
        PublishedTable(
            "5.10",
            "uprobes: ri_pool (2024-12-05), 1 CPU, machine not stated",
            (Column("baseline", "6.13"), Column("with ri_pool", "6.14")),
            {"uretprobe-nop": (1.898, 2.253)},
            "",
            ("ri_alloc",),
        ),
    )
}

CALIBRATION_TABLE = "5.11f"

# The host's own numbers (Linux 6.18 in this project's VM, a tracefs
# consumer in an instance with tracing off, best of 3).  Not a published table: they
# calibrate the host-6.18 machine profile.
HOST_ANCHORS = PublishedTable(
    "host-6.18",
    "this project's VM, Linux 6.18, tracefs consumer with tracing off",
    (Column("host", "6.18"),),
    {
        "usermode-count": (740.0,),
        "syscall-count": (9.2,),
        "uprobe-nop": (1.8,),
        "uprobe-push": (1.6,),
        "uprobe-ret": (0.19,),
        "uprobe-nop5": (3.0,),
        "uretprobe-nop": (1.2,),
        "uretprobe-ret": (0.17,),
    },
)

FIT_FEATURES = ("insn", "int3", "singlestep", "syscall", "uprobe", "uretprobe")

# Per-iteration event counts of the bench_trigger guest as the emulator counts them
# (``uprobe-emu bench`` count runs, program-only consumer; the host anchors with a
# tracefs consumer).  They make this module self-contained; tests/test_bench.py checks
# that the emulator still produces exactly these vectors.
# key: (column key, scenario) -> {feature: per-trigger count}


def _ev(
    insn, int3=0, singlestep=0, syscall=0, uprobe=0, uretprobe=0, emulate=0, ri_alloc=0, ri_reuse=0, args_fill=0
) -> dict:
    return {
        "insn": insn,
        "int3": int3,
        "singlestep": singlestep,
        "syscall": syscall,
        "uprobe": uprobe,
        "uretprobe": uretprobe,
        "emulate": emulate,
        "ri_alloc": ri_alloc,
        "ri_reuse": ri_reuse,
        "args_fill": args_fill,
        "text_write": 0,
    }


CALIBRATION_EVENTS = {
    ("6.17", "usermode-count"): _ev(6),
    ("6.17", "syscall-count"): _ev(6, syscall=1),
    ("6.17", "uprobe-nop"): _ev(4, int3=1, uprobe=1, emulate=1),
    ("6.17", "uprobe-push"): _ev(9, int3=1, uprobe=1, emulate=1),
    ("6.17", "uprobe-ret"): _ev(4, int3=1, singlestep=1, uprobe=1),
    ("6.17", "uprobe-nop5"): _ev(5, int3=1, singlestep=1, uprobe=1),
    ("6.17", "uretprobe-nop"): _ev(12, int3=1, syscall=1, uprobe=1, uretprobe=1, emulate=1, ri_reuse=1),
    ("6.17", "uretprobe-push"): _ev(17, int3=1, syscall=1, uprobe=1, uretprobe=1, emulate=1, ri_reuse=1),
    ("6.17", "uretprobe-ret"): _ev(12, int3=1, singlestep=1, syscall=1, uprobe=1, uretprobe=1, ri_reuse=1),
    ("6.17", "uretprobe-nop5"): _ev(13, int3=1, singlestep=1, syscall=1, uprobe=1, uretprobe=1, ri_reuse=1),
    ("6.18", "usermode-count"): _ev(6),
    ("6.18", "syscall-count"): _ev(6, syscall=1),
    ("6.18", "uprobe-nop"): _ev(4, int3=1, uprobe=1, emulate=1),
    ("6.18", "uprobe-push"): _ev(9, int3=1, uprobe=1, emulate=1),
    ("6.18", "uprobe-ret"): _ev(4, int3=1, singlestep=1, uprobe=1),
    ("6.18", "uprobe-nop5"): _ev(14, syscall=1, uprobe=1),
    ("6.18", "uretprobe-nop"): _ev(12, int3=1, syscall=1, uprobe=1, uretprobe=1, emulate=1, ri_reuse=1),
    ("6.18", "uretprobe-push"): _ev(17, int3=1, syscall=1, uprobe=1, uretprobe=1, emulate=1, ri_reuse=1),
    ("6.18", "uretprobe-ret"): _ev(12, int3=1, singlestep=1, syscall=1, uprobe=1, uretprobe=1, ri_reuse=1),
    ("6.18", "uretprobe-nop5"): _ev(22, syscall=2, uprobe=1, uretprobe=1, ri_reuse=1),
}

# The same guest under 6.18 with a tracefs (ftrace) consumer: every hit fills the args buffer.
HOST_EVENTS = {
    ("6.18", "usermode-count"): _ev(6),
    ("6.18", "syscall-count"): _ev(6, syscall=1),
    ("6.18", "uprobe-nop"): _ev(4, int3=1, uprobe=1, emulate=1, args_fill=1),
    ("6.18", "uprobe-push"): _ev(9, int3=1, uprobe=1, emulate=1, args_fill=1),
    ("6.18", "uprobe-ret"): _ev(4, int3=1, singlestep=1, uprobe=1, args_fill=1),
    ("6.18", "uprobe-nop5"): _ev(14, syscall=1, uprobe=1, args_fill=1),
    ("6.18", "uretprobe-nop"): _ev(12, int3=1, syscall=1, uprobe=1, uretprobe=1, emulate=1, ri_reuse=1, args_fill=1),
    ("6.18", "uretprobe-ret"): _ev(12, int3=1, singlestep=1, syscall=1, uprobe=1, uretprobe=1, ri_reuse=1, args_fill=1),
}


# ----------------------------------------------------------------------------- machines


def fit_profile(
    name: str,
    description: str,
    table: PublishedTable,
    events: dict,
    fit_features=FIT_FEATURES,
    priors: dict | None = None,
) -> CostProfile:
    """Fit a machine profile to ``table`` given ``events[(column key, scenario)]``
    (feature vectors).  Cells without events are skipped."""
    pri = {k: v[0] for k, v in PRIORS.items()} if priors is None else dict(priors)
    rows, obs, keys = [], [], []
    for col, scen, mops in table.cells():
        fv = events.get((col.key, scen))
        if fv is None:
            continue
        rows.append(fv)
        obs.append(1000.0 / mops)
        keys.append((col.label, scen))
    coef = least_squares(rows, obs, list(fit_features), fixed=pri)
    for f in FEATURES:
        coef.setdefault(f, 0.0)
    prof = CostProfile(
        name,
        description,
        coef,
        tuple(f for f in fit_features if f not in pri),
        f"least squares on table {table.id}: {table.title}",
    )
    res = {k: relative_error(prof.project_mops(r), 1000.0 / o) for k, r, o in zip(keys, rows, obs)}
    return CostProfile(prof.name, prof.description, prof.coef, prof.fitted, prof.source, res)


@functools.cache
def machines() -> Mapping[str, CostProfile]:
    """The shipped machine profiles, read-only.  Fitting is a pure function of the
    constant tables above, so it is memoized (done once, on first use) instead of
    being kept in a module-level dict that callers could change."""
    return MappingProxyType(
        {
            "intel-2025": fit_profile(
                "intel-2025",
                "the calibration machine: Intel of table 5.11f, Jul 2025",
                TABLES[CALIBRATION_TABLE],
                CALIBRATION_EVENTS,
            ),
            "host-6.18": fit_profile(
                "host-6.18",
                "this project's VM (2 cores), Linux 6.18, tracefs consumer, tracing off",
                HOST_ANCHORS,
                HOST_EVENTS,
            ),
        }
    )


def get_machine(name: str) -> CostProfile:
    ms = machines()
    if name not in ms:
        raise InputError(f"unknown cost profile {name!r}; known: {', '.join(ms)}")
    return ms[name]


# ----------------------------------------------------------------------------- checks


@dataclass
class RatioCheck:
    table: str
    kind: str  # "kernels" (same row, column B / column A) | "scenarios" (row / uprobe-nop)
    label: str  # human description
    published: float
    projected: float
    calibration: bool  # the table the profile was fitted on
    prior: bool  # the table also supplied a prior

    @property
    def error(self) -> float:
        return relative_error(self.projected, self.published)

    def as_dict(self) -> dict:
        return {
            "table": self.table,
            "kind": self.kind,
            "label": self.label,
            "published": self.published,
            "projected": self.projected,
            "error": self.error,
            "calibration": self.calibration,
            "prior_source": self.prior,
        }


def ratio_checks(profile: CostProfile, events: dict, tables=None, reference: str = "uprobe-nop") -> list[RatioCheck]:
    """Projected vs published ratios for every scenario pair the tables cover.

    ``events[(column key, scenario)]`` are feature vectors.  For a two-column table:
    each row's column-B/column-A throughput ratio; for every column: each row against
    ``reference`` in the same column."""
    tables = list(TABLES.values()) if tables is None else tables
    out = []
    for t in tables:
        calib = profile.source.endswith(f"table {t.id}: {t.title}")
        prior = bool(t.prior_source)

        def proj(col, scen):
            fv = events.get((col.key, scen))
            return None if fv is None else profile.project_mops(fv)

        if len(t.columns) == 2:
            a, b = t.columns
            for scen, vals in t.rows.items():
                if vals[0] is None or vals[1] is None:
                    continue
                pa, pb = proj(a, scen), proj(b, scen)
                if pa is None or pb is None:
                    continue
                out.append(
                    RatioCheck(
                        t.id, "kernels", f"{scen}: {b.label} / {a.label}", vals[1] / vals[0], pb / pa, calib, prior
                    )
                )
        for i, col in enumerate(t.columns):
            ref = t.rows.get(reference)
            if ref is None or ref[i] is None:
                continue
            pref = proj(col, reference)
            if pref is None:
                continue
            for scen, vals in t.rows.items():
                if scen == reference or vals[i] is None:
                    continue
                p = proj(col, scen)
                if p is None:
                    continue
                out.append(
                    RatioCheck(
                        t.id,
                        "scenarios",
                        f"{scen} / {reference} ({col.label})",
                        vals[i] / ref[i],
                        p / pref,
                        calib,
                        prior,
                    )
                )
    return out


def required_columns(tables=None) -> list[Column]:
    """Every (profile, overrides) the checks need event counts for."""
    tables = list(TABLES.values()) if tables is None else tables
    seen, out = set(), []
    for t in list(tables) + [HOST_ANCHORS]:
        for c in t.columns:
            if c.key not in seen:
                seen.add(c.key)
                out.append(c)
    return out
