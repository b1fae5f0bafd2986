"""``bench --plot FILE``: the bench's numbers as a chart (PNG, SVG or PDF by the extension).

* The scenario bench: each scenario's emulated M triggers/s per kernel column as grouped
  bars - the medians of the "side by side" table, with the runs' min-max as error bars
  (``--kernel A --vs B``: two bars a scenario; one column: one bar).  A scenario a
  profile cannot run (``n/a``: nop10 before 7.3, where the kernel refuses the probe with
  ENOTSUPP) has no bar for that column.
* ``--cpus``: the projected M/s against CPUs, one line per column and scenario, and the
  published row matched with it (the one the table prints in brackets) as markers.

:func:`bench_series` and :func:`bench_chart` are pure functions of the report - the dict
``--json`` writes, in memory or read back (CPU counts then are strings) - and
:func:`plot_bench` draws it (:mod:`emu.frontends.plotting`).
"""

from __future__ import annotations

from emu.frontends.plotting import Chart, Series, check_plot_path, draw, format_value

__all__ = ["bench_chart", "bench_series", "check_plot_path", "plot_bench"]

UNIT = "M triggers/s"


def bench_series(report: dict) -> list[Series]:
    """The plotted series: bars per column for the scenario bench, lines (and published
    markers) per curve for ``--cpus``."""
    if "curves" in report:
        return _scaling_series(report)
    out = []
    for i, col in enumerate(c["label"] for c in report["columns"]):
        ok = [
            (e["name"], e["results"][col]["mops"])
            for e in report["scenarios"]
            if e["results"][col].get("status") == "ok"
        ]
        out.append(
            Series(
                col,
                tuple(n for n, _ in ok),
                tuple(m["median"] for _, m in ok),
                "bar",
                i,
                tuple(format_value(m["median"]) for _, m in ok),
                tuple(m["min"] for _, m in ok),
                tuple(m["max"] for _, m in ok),
            )
        )
    return out


def _scaling_series(report: dict) -> list[Series]:
    out, seen = [], set()
    for i, c in enumerate(report["curves"]):
        xs = sorted(c["values"], key=int)
        out.append(
            Series(
                f"{c['column']} {c['scenario']} (projected)",
                tuple(int(n) for n in xs),
                tuple(c["values"][n] for n in xs),
                "line",
                i,
            )
        )
        if c["published"]:
            pub = c["published"][0]  # the row the table prints in brackets
            key = (pub["table"], pub["row"])
            if key in seen or not pub["values"]:
                continue
            seen.add(key)
            px = sorted(pub["values"], key=int)
            out.append(
                Series(
                    f"{pub['table']}: {pub['row']} (published)",
                    tuple(int(n) for n in px),
                    tuple(pub["values"][n] for n in px),
                    "markers",
                    i,
                )
            )
    return out


def _engine(report: dict) -> str:
    unicorn = report.get("host", {}).get("unicorn")
    head = f"Unicorn {unicorn}" if unicorn else "Unicorn"
    fallbacks = [c["name"] for c in report.get("engine") or [] if not c.get("ok")]
    return head + (f", FALLBACK: {', '.join(fallbacks)}" if fallbacks else ", every engine fast path in use")


def bench_chart(report: dict) -> Chart:
    """The series with the title (the kernel columns and the engine) and axis labels."""
    series = tuple(bench_series(report))
    if "curves" in report:
        cols = list(dict.fromkeys(c["column"] for c in report["curves"]))
        scens = list(dict.fromkeys(c["scenario"] for c in report["curves"]))
        topo = report.get("topology") or {}
        machine = (
            "{sockets} sockets x {cores_per_socket} cores x {threads_per_core} threads".format(**topo)
            if topo
            else "the published tables' machine"
        )
        return Chart(
            f"uprobe-emu bench --cpus: projected {UNIT} against CPUs, {' vs '.join(cols)} "
            f"({', '.join(scens)})\ncontention model on the emulator's recorded accesses, {machine}",
            "CPUs (producer threads, one per CPU)",
            f"{UNIT} (all CPUs)",
            series,
        )
    cols = [c["label"] for c in report["columns"]]
    cfg = report.get("config", {})
    runs = cfg.get("repeat")
    how = f"median of {runs} run{'s' if runs != 1 else ''} (bar: min-max)" if runs else "median"
    return Chart(
        f"uprobe-emu bench: emulated {UNIT}, {' vs '.join(cols)}; {how}, "
        f"consumer={cfg.get('consumer', 'program')}\nengine: {_engine(report)}",
        "scenario",
        f"{UNIT} (emulated)",
        series,
        tuple(e["name"] for e in report["scenarios"]),
    )


def plot_bench(report: dict, path: str) -> None:
    """Draw the bench report (scenario bench or ``--cpus``) to ``path``."""
    draw(bench_chart(report), path)
