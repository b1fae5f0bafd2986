"""``bench --cpus``: the projection table, the published numbers beside it, the checks,
and ``--plot`` (M/s against CPUs, as the published tables look when drawn).

A projected column is matched with a published row when the two kernels take the same
locks on the scenario's path (the same values of every switch the path reads), so
``--kernel 6.12 --vs 6.13`` finds S1's SRCU row and S1's RCU Tasks Trace row (6.13 adds
nothing to an entry probe's path over it) and S2's "before" row.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from emu.frontends.bench import scaling
from emu.frontends.bench.scaling_tables import FIT_TABLE, TABLES
from emu.frontends.bench.scenarios import SCENARIOS, parse_column
from kernel_model.errors import InputError

# the switches an entry probe's path reads; a return probe's reads these and _RET_PATH
_ENTRY_PATH = ("treelock", "uprobe_lifetime", "consumers_lock", "vma_lookup", "nhit", "perf_filter", "args_buffer")
_RET_PATH = ("uretprobe_lifetime", "uretprobe_trampoline", "ri_alloc")
SCALING_SCENARIOS = tuple(s for s, sc in SCENARIOS.items() if sc.kind in ("entry", "return"))


def _path_key(column: str, scenario: str) -> tuple:
    prof = parse_column(column).profile()
    names = _ENTRY_PATH + (_RET_PATH if SCENARIOS[scenario].kind == "return" else ())
    return (scenario,) + tuple(getattr(prof, k) for k in names)


def published_for(column: str, scenario: str) -> list[tuple[str, Any]]:
    """``[(table id, row)]`` of the published rows with the same path, fitted table first."""
    key = _path_key(column, scenario)
    out = []
    for tid in sorted(TABLES, key=lambda t: (t != FIT_TABLE, t)):
        for row in TABLES[tid].rows:
            if _path_key(row.column, row.scenario) == key:
                out.append((tid, row))
    return out


def run_scaling(
    columns: list[str],
    scenarios: list[str],
    cpus: tuple,
    *,
    prices=scaling.FITTED,
    with_checks: bool = True,
    progress=None,
) -> dict:
    bad = [s for s in scenarios if s not in SCALING_SCENARIOS]
    if bad:
        raise InputError(f"--cpus projects probe scenarios ({', '.join(SCALING_SCENARIOS)}), not {bad[0]!r}")
    task = progress.add_task("projecting", total=len(columns) * len(scenarios) * len(cpus)) if progress else None
    curves = []
    for col in columns:
        for scen in scenarios:
            values = []
            for n in cpus:
                values.append(scaling.project(col, scen, (n,), prices)[0])
                if progress is not None:
                    progress.advance(task)
            pub = []
            for tid, row in published_for(col, scen):
                t = TABLES[tid]
                pub.append(
                    {
                        "table": tid,
                        "row": row.label,
                        "values": {n: row.values[t.cpus.index(n)] for n in cpus if n in t.cpus},
                    }
                )
            pub.sort(key=lambda p: -len(p["values"]))  # the row covering most of the CPUs asked
            curves.append(
                {
                    "column": col,
                    "scenario": scen,
                    "values": dict(zip(cpus, values)),
                    "work_ns": scaling.work_ns(col, scen),
                    "published": pub,
                }
            )
    report = {
        "cpus": list(cpus),
        "curves": curves,
        "topology": scaling.TOPOLOGY.__dict__,
        "prices": [{"price": k, "value": v, "source": s} for k, v, s in scaling.price_table(prices)],
    }
    if with_checks:
        n_rows = sum(len(t.rows) for t in TABLES.values())
        ctask = progress.add_task("published tables", total=n_rows) if progress else None
        report["checks"] = [
            c.as_dict()
            for c in scaling.checks(prices, progress=(lambda: progress.advance(ctask)) if progress else None)
        ]
    return report


def _fmt(x: float) -> str:
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def render_scaling(report: dict, console) -> None:
    cpus = report["cpus"]
    t = Table(
        title="projected M triggers/s against CPUs (contention model on the emulator's recorded "
        "accesses; published values in brackets)",
        title_justify="left",
    )
    t.add_column("CPUs", justify="right")
    for c in report["curves"]:
        pub = c["published"][0] if c["published"] else None
        head = f"{c['column']} {c['scenario']}" + (f"\n[{pub['table']}: {pub['row']}]" if pub else "")
        t.add_column(escape(head), justify="right")
    for n in cpus:
        cells = []
        for c in report["curves"]:
            v = c["values"][n]
            pub = c["published"][0] if c["published"] else None
            p = pub["values"].get(n) if pub else None
            cells.append(_fmt(v) + (f" [{_fmt(p)}]" if p is not None else ""))
        t.add_row(str(n), *cells)
    console.print(t)
    pt = Table(
        title="machine: "
        + "{sockets} sockets x {cores_per_socket} cores x {threads_per_core} threads".format(**report["topology"]),
        title_justify="left",
    )
    for name in ("price", "value", "from"):
        pt.add_column(name)
    for p in report["prices"]:
        pt.add_row(p["price"], f"{p['value']:.4g}", escape(p["source"]))
    console.print(pt)
    if "checks" in report:
        render_checks(report["checks"], console)


def render_checks(checks: list, console) -> None:
    ct = Table(
        title=f"fitted on {FIT_TABLE} (every point, target +-10%); checks on the others: "
        "speed-up over 1 CPU and after/before ratio at each N (+-25%), peak column (+-1)",
        title_justify="left",
    )
    for name in ("table", "kind", "row", "CPUs", "projected", "published", "error", "ok"):
        ct.add_column(name, justify="right" if name in ("CPUs", "projected", "published", "error") else "left")
    for c in checks:
        err = f"{c['error']:.0f} col" if c["what"] == "peak" else f"{c['error']:+.1%}"
        fmt = (lambda x: str(int(x))) if c["what"] == "peak" else (lambda x: f"{x:.3f}")
        ct.add_row(
            c["table"],
            c["what"],
            escape(c["row"]),
            "" if c["cpus"] is None else str(c["cpus"]),
            fmt(c["projected"]),
            fmt(c["published"]),
            err,
            "yes" if c["passes"] else "NO",
        )
    console.print(ct)
    by: dict[tuple[str, str], tuple[int, int, float]] = {}
    for c in checks:
        key = (c["table"], c["what"])
        ok, n, worst = by.get(key, (0, 0, 0.0))
        by[key] = (ok + c["passes"], n + 1, max(worst, abs(c["error"])))
    for (tid, what), (ok, n, worst) in by.items():
        console.print(
            f"{tid} {what}: {ok}/{n} within target, worst |error| "
            + (f"{worst:.0f} column(s)" if what == "peak" else f"{worst:.1%}")
        )
