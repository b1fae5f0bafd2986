"""The bench run and its report: the job list (scenarios x columns, baselines, the count
runs the projection checks need, growth), the job pool, and the report assembled from
the results - ratios to the baselines, projected kernel cost, projected vs published
ratios, the project's performance targets - and its JSON file (schema
``uprobe-emu.bench/1``, described in the package docstring)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
from dataclasses import dataclass
from typing import IO, Any

from emu.engine import baseline
from emu.frontends.bench import costmodel
from emu.frontends.bench.measure import (
    count_events,
    growth_attach,
    growth_probe_counts,
    growth_ri,
    measure_baseline,
    measure_scenario,
)
from emu.frontends.bench.scenarios import LOOP_NAMES, SCENARIOS, SLED_SIZE, column_from_costmodel
from kernel_model.errors import EmuError

SCHEMA = "uprobe-emu.bench/1"
# Hit-path targets: model M/s over the bare int3 + empty-hook loop, timed in the same run.
TARGET_INT3_RATIOS = (("uprobe-nop", 0.20), ("uprobe-push", 0.15), ("uprobe-ret", 0.15), ("uretprobe-nop", 0.15))


@dataclass
class Config:
    """What one run measures; ``cli.config_from_args`` makes it from the options."""

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
    growth_repeat: int = 5
    adjacent: tuple | None = (1_000_000, 100_000)  # bare iterations timed next to each run
    host_iterations: int | None = None


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


def run_bench(cfg: Config, progress=None) -> dict:
    cost = costmodel.get_machine(cfg.cost_profile)
    loops = sorted({SCENARIOS[s].loop for s in cfg.scenarios})
    jobs = [
        ("baseline", (lp, "none", cfg.iterations and max(cfg.iterations, 10_000), cfg.repeat, cfg.seconds / 2))
        for lp in loops
    ]
    jobs += [
        ("baseline", (2, mode, cfg.iterations and max(cfg.iterations, 10_000), cfg.repeat, cfg.seconds / 2))
        for mode in ("int3", "int3-native", "code-hook")
    ]
    jobs += [("baseline", (1, "syscall", cfg.iterations and max(cfg.iterations, 10_000), cfg.repeat, cfg.seconds / 2))]
    scen_jobs = [
        ("scenario", (s, c, cfg.consumer, cfg.iterations, cfg.warmup, cfg.repeat, cfg.seconds, cfg.adjacent))
        for s in cfg.scenarios
        for c in cfg.columns
    ]
    check_cols = [column_from_costmodel(c) for c in costmodel.required_columns()] if cfg.checks else []
    table_scens = sorted({s for t in costmodel.TABLES.values() for s in t.rows} | set(costmodel.HOST_ANCHORS.rows))
    count_jobs: list[tuple[str, tuple]] = []
    for c in check_cols:
        for s in table_scens:
            count_jobs.append(("count", (s, c, "program")))
            if c.key == costmodel.HOST_ANCHORS.columns[0].key and s in costmodel.HOST_ANCHORS.rows:
                count_jobs.append(("count", (s, c, "ftrace")))
    growth_jobs: list[tuple[str, tuple]] = []
    if cfg.growth:
        base = cfg.columns[0]
        gi = cfg.growth_iterations or 50_000
        growth_jobs.append(("probes", (base, cfg.consumer, tuple(cfg.probe_counts), gi, cfg.warmup, cfg.growth_repeat)))
        growth_jobs.append(("attach", (base, cfg.attach_count, cfg.growth_repeat)))
        for pol in cfg.ri_policies:
            growth_jobs.append(("ri", (base, pol, cfg.ri_iterations)))
    all_jobs = jobs + scen_jobs + count_jobs
    task = progress.add_task("bench", total=len(all_jobs) + len(growth_jobs)) if progress else None
    results = _run_jobs(all_jobs, cfg.workers, progress, task)
    # growth timings are sensitive to parallel load: always one at a time
    results += _run_jobs(growth_jobs, 1, progress, task)
    return _assemble(cfg, cost, results)


# ----------------------------------------------------------------------------- report


def programs_report(cfg: Config) -> dict:
    """The report of ``bench --programs`` alone: the host, the configuration, and the
    ``programs`` rows the command adds."""
    return {
        "schema": SCHEMA,
        "host": _host(),
        "config": {"kernel": cfg.columns[0].label, "repeat": cfg.repeat},
        "programs": [],
    }


def _host() -> dict:
    return {
        "release": os.uname().release,
        "machine": os.uname().machine,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "unicorn": baseline.unicorn_version(),
        "cpu_state_in_place": baseline.cpu_state_in_place(),
    }


def _assemble(cfg: Config, cost, results: list) -> dict:
    baselines: dict[str, Any] = {
        "hook_free": {},
        "int3_hook": None,
        "int3_native": None,
        "code_hook": None,
        "syscall_hook": None,
    }
    measured, counts = {}, {}
    growth: dict[str, Any] = {"probe_count": [], "attach": None, "ri_memory": []}
    for kind, payload, res in results:
        if kind == "baseline":
            if payload[1] == "none":
                baselines["hook_free"][LOOP_NAMES[payload[0]]] = res
            elif payload[1] == "int3":
                baselines["int3_hook"] = res
            elif payload[1] == "int3-native":
                baselines["int3_native"] = res
            elif payload[1] == "code-hook":
                baselines["code_hook"] = res
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
    code = baselines["code_hook"]["mops"]["median"] if baselines["code_hook"] else None
    native = baselines["int3_native"]["mops"]["median"] if baselines["int3_native"] else None
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
                if adj:  # baselines timed right next to each model run
                    res["ratio_hook_free"] = med / adj["hook_free_mops"]["median"]
                    res["ratio_int3"] = med / adj["int3_hook_mops"]["median"]
                    res["ratio_code_hook"] = med / adj["code_hook_mops"]["median"]
                    res["ratio_int3_native"] = med / adj["int3_native_mops"]["median"]
                    # the floor: the native empty trap callback against the int3 baseline
                    res["floor_int3"] = adj["int3_native_mops"]["median"] / adj["int3_hook_mops"]["median"]
                    res["floor_code_hook"] = adj["int3_native_mops"]["median"] / adj["code_hook_mops"]["median"]
                    if "floor_mops" in adj:  # the hand-inlined hit, against the same baselines
                        res["floor_inline_int3"] = adj["floor_mops"]["median"] / adj["int3_hook_mops"]["median"]
                        res["floor_inline_code_hook"] = adj["floor_mops"]["median"] / adj["code_hook_mops"]["median"]
                else:
                    if bare:
                        res["ratio_hook_free"] = med / bare["mops"]["median"]
                    if int3:
                        res["ratio_int3"] = med / int3
                    if code:
                        res["ratio_code_hook"] = med / code
                    if native:
                        res["ratio_int3_native"] = med / native
                    if native and int3:
                        res["floor_int3"] = native / int3
                    if native and code:
                        res["floor_code_hook"] = native / code
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
                    ratios.append(
                        {
                            "scenario": entry["name"],
                            "column": b.label,
                            "vs": a.label,
                            "measured": rb["mops"]["median"] / ra["mops"]["median"],
                            "projected": rb["projected_mops"] / ra["projected_mops"],
                        }
                    )
    checks = []
    if counts:
        ev_prog: dict = {}
        ev_ftrace: dict = {}
        for (s, key, consumer), res in counts.items():
            if res.get("status") != "ok":
                continue
            fv = costmodel.features_from_events(dict(res["per_iter"], insns=res["insns_per_iter"]))
            (ev_prog if consumer == "program" else ev_ftrace)[(key, s)] = fv
        checks = [c.as_dict() for c in costmodel.ratio_checks(cost, ev_prog)]
        counts_out = {
            f"{s}@{k}/{c}": {
                "per_iter": r.get("per_iter"),
                "insns_per_iter": r.get("insns_per_iter"),
                "status": r.get("status"),
            }
            for (s, k, c), r in counts.items()
        }
    else:
        counts_out = {}
    report = {
        "schema": SCHEMA,
        "host": _host(),
        "config": {
            "scenarios": cfg.scenarios,
            "consumer": cfg.consumer,
            "iterations": cfg.iterations,
            "warmup": cfg.warmup,
            "repeat": cfg.repeat,
            "seconds": cfg.seconds,
            "workers": cfg.workers,
            "cost_profile": cfg.cost_profile,
        },
        "columns": [c.as_dict() for c in cfg.columns],
        "baselines": baselines,
        "scenarios": scenarios,
        "ratios": ratios,
        "cost_profile": {
            "name": cost.name,
            "description": cost.description,
            "coef_ns": cost.coef,
            "fitted": list(cost.fitted),
            "source": cost.source,
            "fit_residuals": {f"{k[1]} ({k[0]})": v for k, v in cost.residuals.items()},
        },
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

    def floors(inline, native):
        notes = [
            f"hand-inlined hit: {inline:.2f}" if inline else "",
            f"floor (native empty trap callback): {native:.2f}" if native else "",
        ]
        return "; ".join(n for n in notes if n)

    for scen, lim in TARGET_INT3_RATIOS:
        r = res.get(scen)
        if r and r.get("status") == "ok" and "ratio_int3" in r:
            add(
                f"{scen} / empty-int3-hook baseline",
                r["ratio_int3"],
                ">=",
                lim,
                floors(r.get("floor_inline_int3"), r.get("floor_int3")),
            )
    r = res.get("uprobe-nop")
    if r and r.get("status") == "ok" and "ratio_code_hook" in r:
        add(
            "full semantics vs no semantics: uprobe-nop / Qiling-style code hook",
            r["ratio_code_hook"],
            ">=",
            1.0,
            floors(r.get("floor_inline_code_hook"), r.get("floor_code_hook")),
        )
    r = res.get("usermode-count")
    if r and r.get("status") == "ok":
        add("usermode-count / hook-free Unicorn", r["ratio_hook_free"], ">=", 0.7)
    g = report.get("growth") or {}
    pcs = [x for x in g.get("probe_count") or [] if "cost_vs_one_probe" in x]
    if pcs:
        last = pcs[-1]
        add(
            f"per-hit cost, {last['probes']:,} probes / 1 probe (median)",
            last["cost_vs_one_probe"],
            "<=",
            1.1,
            f"best runs: {last['best_cost_vs_one_probe']:.2f}",
        )
    a = g.get("attach")
    if a and "attach_seconds" in a:
        scale = SLED_SIZE / a["probes"]
        secs = a["attach_seconds"] * scale
        notes = [
            f"best of {a['repeat']}, median {a['median_attach_seconds'] * scale:.2f}" if a.get("repeat", 1) > 1 else "",
            "" if a["probes"] == SLED_SIZE else f"extrapolated from {a['probes']:,}",
        ]
        add("attach 50,000 probes (s)", secs, "<=", 1.0, "; ".join(n for n in notes if n))
    checks = report.get("projection_checks") or []
    cal = [abs(c["error"]) for c in checks if c["calibration"]]
    oth = [abs(c["error"]) for c in checks if not c["calibration"]]
    if cal:
        add("max |error| of projected ratios, calibration table", max(cal), "<=", 0.15)
    if oth:
        add(
            "max |error| of projected ratios, other tables",
            max(oth),
            "<=",
            0.25,
            f"{sum(e <= 0.25 for e in oth)}/{len(oth)} pairs within",
        )
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


# ----------------------------------------------------------------------------- JSON file


class JsonReport:
    """``--json FILE``, opened before the run so a bad path fails in a second, not after
    minutes of benchmarking.  The file is opened for appending (an existing report is
    not truncated by a run that then fails), rewritten at the end, and removed again if
    this run created it and did not finish."""

    def __init__(self, path: str | None):
        self.path, self.created, self.done = path, False, False
        self.file: IO[str] | None = None

    def __enter__(self) -> "JsonReport":
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
        if self.created and not self.done and self.path:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def _json_default(o):
    if isinstance(o, float):
        return o
    return str(o)
