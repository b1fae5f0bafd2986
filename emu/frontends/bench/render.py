"""The bench report as rich tables: throughput and events per scenario and column, side by
side ratios, baselines, the cost profile, projection checks, growth, the host kernel and
the targets."""

from __future__ import annotations

import statistics

from rich.markup import escape
from rich.table import Table


def _fmt_mops(x: float) -> str:
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


_SHORT = (
    ("bp_traps", "bp"),
    ("db_traps", "db"),
    ("emulated", "emu"),
    ("xol_singlesteps", "xol"),
    ("uprobe_hits", "hit"),
    ("uretprobe_hits", "ret"),
    ("ri_allocated", "ri+"),
    ("ri_reused", "ri~"),
    ("ri_freed", "ri-"),
    ("args_buffer_fills", "args"),
    ("text_writes", "tw"),
)


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


def render_unit_costs(costs: dict, console) -> None:
    """The engine's per-unit costs (``engine_costs.unit_costs``), under the engine line."""
    t = Table(
        title=escape(f"engine per-unit costs (best of {costs['repeat']}; bare Unicorn and the model, this process)"),
        title_justify="left",
    )
    t.add_column("unit")
    t.add_column("ns", justify="right")
    t.add_column("measured as")
    t.add_row(
        "per translated block",
        f"{costs['per_block_ns']:.3g}",
        escape(f"{costs['blocks']:,} blocks of add+jmp against the same instructions in one block, no hooks"),
    )
    t.add_row(
        "per syscall",
        f"{costs['per_syscall_ns']:.4g}",
        escape(
            f"{costs['syscalls']:,} getpid through the model ({costs['model_syscall_ns']:.4g} ns each) "
            f"above bare Unicorn with an empty native syscall hook ({costs['syscall_floor_ns']:.3g} ns)"
        ),
    )
    console.print(t)


def render(report: dict, console) -> None:
    cols = [c["label"] for c in report["columns"]]
    cp = report["cost_profile"]["name"]
    cfg = report["config"]
    t = Table(
        title=escape(
            f"uprobe-emu bench: emulated throughput, M triggers/s = median [min-max] of "
            f"{cfg['repeat']} runs after {cfg['warmup']} warm-up iterations; "
            f"consumer={cfg['consumer']}; x = model / bare-Unicorn baseline timed next "
            f"to each run (code hook: Qiling-style, no probe semantics); projected kernel M/s with cost profile {cp}"
        ),
        title_justify="left",
    )
    t.add_column("scenario", no_wrap=True)
    if len(cols) > 1:
        t.add_column("kernel", no_wrap=True)
    for h in ("M/s", "x hook-free", "x int3 hook", "x code hook", "proj M/s", "events per iteration (exact)"):
        t.add_column(
            escape(h), justify="left" if h.startswith("events") else "right", no_wrap=not h.startswith("events")
        )
    for entry in report["scenarios"]:
        for i, c in enumerate(cols):
            res = entry["results"][c]
            row = [entry["name"] if i == 0 else ""] + ([c] if len(cols) > 1 else [])
            if res.get("status") != "ok":
                reason = res.get("reason", res.get("status", "n/a"))
                row += ["n/a", "", "", "", "", escape(f"n/a ({reason})")]
            else:
                flag = "" if res.get("consistent", True) else "  (!) timed run counted differently"
                row += [
                    _cell_mops(res),
                    f"{res.get('ratio_hook_free', 0):.3f}",
                    f"{res.get('ratio_int3', 0):.3f}",
                    f"{res.get('ratio_code_hook', 0):.3f}",
                    _fmt_mops(res["projected_mops"]),
                    events_str(res) + flag,
                ]
            t.add_row(*row, end_section=i == len(cols) - 1 and len(cols) > 1)
    console.print(t)
    if report.get("host", {}).get("cpu_state_in_place") is False:
        console.print(
            "  (!) Unicorn's CPU state was not found in place in this process: every trap "
            "went through the register API, so these hit costs are not the engine's usual ones"
        )
    console.print(
        "  events: ins guest instructions (int3 excluded), bp int3 traps, db single-step "
        "traps, emu emulated, xol out-of-line steps, hit/ret entry/return consumer passes, "
        "ri+ ri~ ri- return instances allocated/reused/freed, args args-buffer fills, sysN "
        "syscalls by number"
    )
    if len(cols) > 1:
        r = Table(
            title=escape(
                f"side by side: median M/s and ratio to {cols[0]} (measured in the model / projected with {cp})"
            ),
            title_justify="left",
        )
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
    if b.get("int3_native"):
        rows.append(("nop loop, int3 + empty UC_HOOK_INTR registered natively (floor)", b["int3_native"]))
    if b.get("code_hook"):
        rows.append(("nop loop, Qiling-style one-address UC_HOOK_CODE, empty Python function", b["code_hook"]))
    if b["syscall_hook"]:
        rows.append(("syscall loop, empty syscall hook", b["syscall_hook"]))
    for name, v in rows:
        m = v["mops"]
        bt.add_row(
            name, f"{_fmt_mops(m['median'])} [{_fmt_mops(m['min'])}-{_fmt_mops(m['max'])}]", str(v["iterations"])
        )
    console.print(bt)

    prof = report["cost_profile"]
    console.print(f"cost profile {prof['name']}: {prof['description']}; {prof['source']}")
    console.print(
        "  ns per event: "
        + ", ".join(f"{k} {v:.3g}" for k, v in prof["coef_ns"].items() if v)
        + f"  (fitted: {', '.join(prof['fitted'])})"
    )
    if report["projection_checks"]:
        _render_checks(report, console)
    if report.get("growth"):
        _render_growth(report["growth"], console)
    if report.get("host_kernel"):
        render_host(report["host_kernel"], console)
    if report.get("programs"):
        render_programs(report["programs"], console, report.get("program_targets"))
    if report.get("targets"):
        render_targets(report["targets"], console)


def render_programs(rows: list, console, targets: list | None = None) -> None:
    """``--programs``: each real workload in the model beside its native time, then the
    real-program targets."""
    t = Table(
        title="programs: real workloads, best of the runs in the model and natively; events = syscalls + probe hits",
        title_justify="left",
    )
    for h in ("program", "probes", "model s", "native s", "x native", "syscalls", "probe hits", "events/s"):
        t.add_column(h, justify="left" if h in ("program", "probes") else "right")
    for r in rows:
        if r.get("status") != "ok":
            t.add_row(r["program"], "", "n/a", "", "", "", "", escape(f"n/a ({r.get('reason', '')})"))
            continue
        t.add_row(
            escape(r["program"] + ": " + " ".join(r["argv"])),
            escape(", ".join(r["probes"]) or "-"),
            f"{r['model_seconds']:.3f}",
            f"{r['native_seconds']:.4f}",
            f"{r['slowdown']:.0f}" if r.get("slowdown") else "-",
            f"{r['syscalls']:,}",
            f"{r['probe_hits']:,}",
            f"{r['events_per_second']:,.0f}" if r.get("events_per_second") else "-",
        )
    console.print(t)
    if targets:
        render_targets(targets, console)


def render_targets(rows: list, console) -> None:
    t = Table(title="targets", title_justify="left")
    for h in ("target", "measured", "limit", "", "note"):
        t.add_column(h, justify="right" if h in ("measured", "limit") else "left")
    for r in rows:
        t.add_row(
            r["target"], f"{r['value']:.3g}", f"{r['op']} {r['limit']:g}", "met" if r["ok"] else "MISSED", r["note"]
        )
    console.print(t)


def _render_checks(report: dict, console) -> None:
    checks = report["projection_checks"]
    t = Table(
        title=f"projected vs published ratios (cost profile {report['cost_profile']['name']}; "
        "target: calibration table +-15%, others +-25%)",
        title_justify="left",
    )
    for h in ("table", "pair", "published", "projected", "error", ""):
        t.add_column(h, justify="right" if h in ("published", "projected", "error") else "left")
    for c in checks:
        lim = 0.15 if c["calibration"] else 0.25
        ok = abs(c["error"]) <= lim
        note = ("fit" if c["calibration"] else "") + (" prior-src" if c["prior_source"] else "")
        t.add_row(
            c["table"],
            c["label"],
            f"{c['published']:.3f}",
            f"{c['projected']:.3f}",
            f"{c['error'] * 100:+.1f}%",
            ("ok" if ok else "MISS") + (f" ({note.strip()})" if note.strip() else ""),
        )
    console.print(t)
    s = Table(title="projection error by table", title_justify="left")
    for h in ("table", "pairs", "mean |err|", "max |err|", "within target"):
        s.add_column(h, justify="left" if h == "table" else "right")
    by: dict[str, list] = {}
    for c in checks:
        by.setdefault(c["table"], []).append(c)
    for tid, cs in by.items():
        lim = 0.15 if cs[0]["calibration"] else 0.25
        errs = [abs(c["error"]) for c in cs]
        s.add_row(
            tid + (" (calibration)" if cs[0]["calibration"] else ""),
            str(len(cs)),
            f"{statistics.mean(errs) * 100:.1f}%",
            f"{max(errs) * 100:.1f}%",
            f"{sum(e <= lim for e in errs)}/{len(errs)}",
        )
    console.print(s)


def _render_growth(g: dict, console) -> None:
    if g["probe_count"]:
        t = Table(title="growth: uprobe-nop per-hit cost with N probes registered in the process", title_justify="left")
        for h in (
            "probes",
            "register s",
            "M/s median",
            "ns/hit (median)",
            "x cost of 1 probe (median of pairs)",
            "ns/hit (best)",
            "x (best)",
            "events/iter",
        ):
            t.add_column(h, justify="right")
        for r in g["probe_count"]:
            if "mops" not in r:
                t.add_row(str(r.get("probes", "?")), _na(r), *[""] * 6)
                continue
            ev = " ".join(f"{s} {_g(r['per_iter'][k])}" for k, s in _SHORT if r["per_iter"].get(k))
            t.add_row(
                f"{r['probes']:,}",
                f"{r['register_seconds']:.2f}",
                _fmt_mops(r["mops"]["median"]),
                f"{r['ns_per_hit']:.0f}",
                f"{r['cost_vs_one_probe']:.3f}",
                f"{r['best_ns_per_hit']:.0f}",
                f"{r['best_cost_vs_one_probe']:.3f}",
                ev,
            )
        console.print(t)
    a = g.get("attach")
    if a and "attach_seconds" in a:
        runs = a.get("attach_samples") or [a["attach_seconds"]]
        spread = f", best of {len(runs)}: {', '.join(f'{x:.2f}' for x in runs)}" if len(runs) > 1 else ""
        console.print(
            f"growth: attach {a['probes']:,} probes: {a['attach_seconds']:.2f} s "
            f"({a['us_per_probe']:.1f} us/probe, {a['text_writes']:,} text writes{spread}); detach "
            f"{a['detach_seconds']:.2f} s; kernel uprobe_multi reference ~0.2 s"
        )
    if g["ri_memory"]:
        t = Table(
            title="growth: return_instance memory, uretprobes at depth 2 (push target + the function it calls)",
            title_justify="left",
        )
        for h in (
            "policy",
            "uretprobe hits",
            "ri allocated",
            "ri reused",
            "peak bytes",
            "peak at 1/10 hits",
            "s",
            "at 1M hits: peak bytes",
            "allocations",
            "s",
        ):
            t.add_column(h, justify="right")
        for r in g["ri_memory"]:
            if "ri_peak_bytes" not in r:
                t.add_row(r.get("policy", "?"), _na(r), *[""] * 8)
                continue
            x = r.get("at_1M_hits", {})
            how = "measured" if x.get("measured") else "extrapolated"
            peak = x.get("ri_peak_bytes")
            t.add_row(
                r["policy"],
                f"{r['uretprobe_hits']:,}",
                f"{r['ri_allocated']:,}",
                f"{r['ri_reused']:,}",
                f"{r['ri_peak_bytes']:,}",
                f"{r['tenth']['ri_peak_bytes']:,}",
                f"{r['seconds']:.1f}",
                (f"{peak:,}" if peak is not None else "unbounded?") + f" ({how})",
                f"{x.get('ri_allocated', 0):,}",
                f"{x.get('seconds', 0):.0f}" + ("" if x.get("measured") else " (est.)"),
            )
        console.print(t)


def render_host(h: dict, console) -> None:
    t = Table(
        title=f"host kernel {h['release']} (native, tracefs uprobe event enabled in a private "
        f"instance with tracing_on=0) vs the model ({h['profile']})",
        title_justify="left",
    )
    for hd in (
        "scenario",
        escape("host M/s [min-max]"),
        "hits ok",
        "model M/s",
        "model/host",
        f"proj ({h['cost_profile']})",
        "proj/host",
        "proj (host-live fit)",
    ):
        t.add_column(hd, justify="left" if hd == "scenario" else "right")
    for r in h["rows"]:
        if r.get("status") != "ok":
            t.add_row(r["scenario"], _na(r), "", "", "", "", "", "")
            continue
        m = r["mops"]
        model = r.get("model_mops")
        proj = r.get("projected_mops")
        live = r.get("live_projected_mops")
        hits = (
            ""
            if "hits" not in r
            else ("yes" if r["hits"] == r["expected_hits"] else f"{r['hits']}/{r['expected_hits']}")
        )
        t.add_row(
            r["scenario"],
            f"{_fmt_mops(m['median'])} [{_fmt_mops(m['min'])}-{_fmt_mops(m['max'])}]",
            hits,
            _fmt_mops(model) if model else "-",
            f"{model / m['median']:.2e}" if model else "-",
            _fmt_mops(proj) if proj else "-",
            f"{proj / m['median']:.2f}" if proj else "-",
            _fmt_mops(live) if live else "-",
        )
    console.print(t)
    if h.get("live_fit"):
        lf = h["live_fit"]
        console.print("  host-live fit (ns): " + ", ".join(f"{k} {v:.3g}" for k, v in lf["coef_ns"].items() if v))
