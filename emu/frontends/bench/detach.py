"""``bench --detach N``: what attaching and detaching N probes costs on each kernel.

Unregistering a uprobe waits, from 6.12 on, for the grace periods of the RCU flavors
that protect the hit path (``uprobe_unregister_sync``): ``synchronize_srcu`` (6.12), then
``synchronize_rcu_tasks_trace`` and ``synchronize_srcu(&uretprobes_srcu)`` (6.13+).  A
tool that attaches one perf_event per probe pays them per probe when it closes the
events; a ``uprobe_multi`` link pays them once for all its probes.

The model counts the grace periods exactly (it runs the registrations and both kinds
of unregistration on the bench guest's probe sled); the seconds are priced with
:data:`PRICES`: the per-probe work is fitted on the 6.8 report (its kernel waited for
no grace period), the grace-period lengths are priors with their sources, and the
other reports are printed as checks with their errors.
"""

from __future__ import annotations

from types import MappingProxyType

from rich.markup import escape
from rich.table import Table

from emu.frontends.bench.scenarios import SLED_SIZE, new_machine, parse_column
from emu.inspect import grace_periods
from kernel_model.errors import InputError

PROBES = 4  # probes registered per counting run (counts are per probe, exact)

PRICES = MappingProxyType(
    {
        "probe": (
            0.04,
            "s per probe attached and detached without grace periods: fitted on users' "
            "6.8 report (0.04 s per probe; 6.8 waited for none)",
        ),
        "rcu_tasks_trace": (
            0.034,
            "s per synchronize_rcu_tasks_trace: the ~34 ms per perf_event fd close reported on the lists",
        ),
        "uprobes_srcu": (0.010, "s per synchronize_srcu: a prior (a few jiffies with no long readers)"),
        "uretprobes_srcu": (0.010, "s per synchronize_srcu(&uretprobes_srcu): the same prior"),
    }
)

# (what, kernel column, per-probe seconds or ratio, source)
REPORTS = (
    ("per probe, one perf_event each", "6.9", 0.04, "users: ~0.04 s per probe on 6.8 (fitted)"),
    ("per probe, one perf_event each", "6.12", 0.25, "users: ~0.25 s per probe on 6.12"),
    ("separate / uprobe_multi, 1,000 probes", "6.13", 90.0 / 22.0, "users: attach 90 s -> 22 s with uprobe_multi"),
)


def _noop(ctx):
    return 0


def count_grace_periods(column: str) -> dict:
    """Grace periods per probe detached alone, and per batch of a uprobe_multi release."""
    col = parse_column(column)
    m = new_machine(col, 0, 0, 0, sled=True)
    file = m.process.exe
    base = file.elf.vaddr_to_offset(file.elf.resolve("probe_sled").value)
    if PROBES * 2 > SLED_SIZE:
        raise InputError("probe sled too small")

    def register(start):
        return [m.uprobes.register((file.path, base + start + i), handler=_noop) for i in range(PROBES)]

    ucs = register(0)
    g0 = grace_periods(m)
    for uc in ucs:
        m.uprobes.unregister(uc)
    g1 = grace_periods(m)
    m.uprobes.unregister_batch(register(PROBES))
    g2 = grace_periods(m)
    single = {k: (g1[k] - g0[k]) / PROBES for k in g0}
    batch = {k: g2[k] - g1[k] for k in g0}
    return {"single": single, "batch": batch}


def _gp_seconds(gps: dict) -> float:
    return sum(n * PRICES[k][0] for k, n in gps.items())


def project(column: str, n: int) -> dict:
    gp = count_grace_periods(column)
    per = PRICES["probe"][0]
    separate = n * (per + _gp_seconds(gp["single"]))
    multi = n * per + _gp_seconds(gp["batch"])
    return {
        "column": column,
        "probes": n,
        "grace_periods_per_probe": gp["single"],
        "grace_periods_per_batch": gp["batch"],
        "separate_s": separate,
        "uprobe_multi_s": multi,
    }


def run_detach(columns: list[str], n: int) -> dict:
    rows = [project(c, n) for c in columns]
    checks = []
    for what, col, published, source in REPORTS:
        p = project(col, 1000)
        got = p["separate_s"] / 1000 if what.startswith("per probe") else p["separate_s"] / p["uprobe_multi_s"]
        checks.append(
            {
                "what": what,
                "column": col,
                "projected": got,
                "published": published,
                "error": got / published - 1.0,
                "source": source,
            }
        )
    return {
        "probes": n,
        "rows": rows,
        "checks": checks,
        "prices": {k: {"value": v, "source": s} for k, (v, s) in PRICES.items()},
    }


def render_detach(report: dict, console) -> None:
    t = Table(
        title=f"attach + detach {report['probes']} probes (grace periods counted in the model, priced below)",
        title_justify="left",
    )
    for name in ("kernel", "grace periods per probe", "per batch", "one perf_event each", "uprobe_multi"):
        t.add_column(name, justify="right")
    for r in report["rows"]:

        def gps(d):
            return ", ".join(f"{k} {v:g}" for k, v in d.items() if v) or "none"

        t.add_row(
            escape(r["column"]),
            gps(r["grace_periods_per_probe"]),
            gps(r["grace_periods_per_batch"]),
            f"{r['separate_s']:.2f} s",
            f"{r['uprobe_multi_s']:.2f} s",
        )
    console.print(t)
    pt = Table(title="prices", title_justify="left")
    for name in ("price", "value", "from"):
        pt.add_column(name)
    for k, p in report["prices"].items():
        pt.add_row(k, f"{p['value']:g}", escape(p["source"]))
    console.print(pt)
    ct = Table(title="reports (the first fitted, the others checks)", title_justify="left")
    for name in ("what", "kernel", "projected", "reported", "error", "source"):
        ct.add_column(name)
    for c in report["checks"]:
        ct.add_row(
            escape(c["what"]),
            c["column"],
            f"{c['projected']:.3g}",
            f"{c['published']:.3g}",
            f"{c['error']:+.0%}",
            escape(c["source"]),
        )
    console.print(ct)
