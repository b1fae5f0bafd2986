"""``uprobe-emu bench``: exact per-iteration events of every trigger scenario under each
kernel profile, the growth scenarios' counts, the JSON report, the CLI, and the cost
model.  No timing is asserted anywhere."""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli, one_line_error

from emu.frontends import bench
from emu.frontends.bench import EVENT_KEYS, SCENARIOS, ColumnSpec, costmodel, count_events, parse_column
from kernel_model.errors import InputError
from kernel_model.profiles import KernelProfile

PROFILES = ("6.9", "6.10", "6.11", "6.14", "6.17", "6.18", "7.2")

# guest instructions of one iteration with the probed instruction emulated or not
# executed (int3 traps are events, not instructions): call, [body], ret, dec, jnz
LOOP_INSNS = {"usermode-count": 6, "syscall-count": 6}
TRAMPOLINE_335_INSNS = 8  # push rax, push rcx, push r11, mov, syscall, pop r11, pop rcx, ret
NOP5_TRAMPOLINE_INSNS = 9  # push rcx, push r11, push rax, mov, syscall, pop rax, pop r11, pop rcx, ret


def expected(name: str, prof: KernelProfile):
    """(per-iteration counters, guest instructions) or the errno the kernel refuses with."""
    ev = {k: 0 for k in EVENT_KEYS}
    ev["syscalls"] = {}
    scen = SCENARIOS[name]
    if name == "usermode-count":
        return ev, 6
    if name == "syscall-count":
        ev["syscalls"] = {121: 1}  # getpgid
        return ev, 6
    site = name.split("-", 1)[1]
    ev["uprobe_hits"] = 1

    def emulated():
        ev.update(bp_traps=1, emulated=1)

    def stepped():
        ev.update(bp_traps=1, db_traps=1, xol_singlesteps=1)

    def optimized():
        ev["syscalls"] = {336: 1}
        ev["uprobe_syscalls"] = 1

    if site in ("nop", "push"):
        emulated()
        ins = 4 if site == "nop" else 9  # push: +mov rbp, call/ret opaque, mov eax, pop
    elif site == "ret":
        stepped()
        ins = 4  # call, ret (out of line), dec, jnz
    elif site == "nop5" and not scen.usdt:
        if prof.optimize == "nop5":
            optimized()
            ins = 5 + NOP5_TRAMPOLINE_INSNS  # call, call tramp, tramp, ret, dec, jnz
        elif prof.nop_emulation == "nop1":
            stepped()
            ins = 5
        else:
            emulated()
            ins = 4
    elif site == "nop10" and not scen.usdt:
        if prof.optimize != "nop10":
            return "ENOTSUPP"
        optimized()
        ins = 6 + NOP10_TRAMPOLINE_INSNS  # + the lea -0x80(%rsp) in front of the call
    elif scen.usdt:
        combo = {"usdt-nop5": "nop5", "usdt-nop10": "nop10"}.get(name)
        if combo and prof.optimize == combo and prof.has_uprobe_syscall:
            optimized()  # libbpf attaches at +1, on the nop5/nop10
            ins = (
                6
                + (NOP5_TRAMPOLINE_INSNS if combo == "nop5" else NOP10_TRAMPOLINE_INSNS)
                + (1 if combo == "nop10" else 0)
            )
        else:
            emulated()  # attached at the leading nop
            ins = 4 if combo is None else 5  # the nop5/nop10 runs natively
    if scen.kind == "return":
        ev["uretprobe_hits"] = 1
        if prof.uretprobe_trampoline == "int3":
            ev["bp_traps"] += 1
        else:
            ev["syscalls"] = {**ev["syscalls"], 335: 1}
            ins += TRAMPOLINE_335_INSNS
        if prof.ri_alloc == "pool":
            ev["ri_reused"] = 1
        else:
            ev.update(ri_allocated=1, ri_freed=1)
    return ev, ins


NOP10_TRAMPOLINE_INSNS = 9  # same body, ret $0x80


CASES = [(s, p) for p in PROFILES for s in SCENARIOS]


@pytest.mark.parametrize("name,kernel", CASES, ids=[f"{s}@{p}" for s, p in CASES])
def test_events_per_iteration_are_exact(name, kernel):
    prof = KernelProfile.get(kernel)
    want = expected(name, prof)
    got = count_events(SCENARIOS[name], ColumnSpec(kernel), "handler")
    if isinstance(want, str):
        assert got["status"] == "n/a", got
        assert got["reason"].startswith(want), got["reason"]
        return
    ev, ins = want
    assert got["status"] == "ok", got
    assert got["exact"], got
    assert got["per_iter"] == ev, f"{name}@{kernel}: expected {ev}, got {got['per_iter']}"
    assert got["insns_per_iter"] == ins, f"{name}@{kernel}: expected {ins} insns, got {got['insns_per_iter']}"
    assert got["hits_per_iter"] == (0 if SCENARIOS[name].kind == "none" else 1)


def test_the_briefs_examples():
    def per(name, kernel, **ov):
        r = count_events(SCENARIOS[name], ColumnSpec(kernel, tuple(ov.items())), "handler")
        return r["per_iter"]

    ret = per("uprobe-ret", "6.18")
    assert (ret["bp_traps"], ret["db_traps"]) == (1, 1)
    nop = per("uprobe-nop", "6.18")
    assert (nop["bp_traps"], nop["emulated"], nop["db_traps"]) == (1, 1, 0)
    sys_tramp = per("uretprobe-nop", "6.11")
    assert (sys_tramp["bp_traps"], sys_tramp["syscalls"]) == (1, {335: 1})
    int3_tramp = per("uretprobe-nop", "6.10")
    assert (int3_tramp["bp_traps"], int3_tramp["syscalls"]) == (2, {})
    opt = per("uprobe-nop5", "6.18")
    assert (opt["bp_traps"], opt["syscalls"]) == (0, {336: 1})
    assert per("usermode-count", "6.18") == {k: ({} if k == "syscalls" else 0) for k in EVENT_KEYS}
    assert per("syscall-count", "6.18")["syscalls"] == {121: 1}


def test_warmup_takes_the_first_hit_effects():
    r = count_events(SCENARIOS["uprobe-nop5"], ColumnSpec("6.18"), "handler")
    warm = r["warmup_events"]
    assert warm["optimized"] == 1 and warm["bp_traps"] == 1 and warm["emulated"] == 1
    assert r["per_iter"]["optimized"] == 0 and r["per_iter"]["text_writes"] == 0


@pytest.mark.parametrize(
    "kernel,consumer,fills",
    [
        ("6.9", "program", 1),
        ("6.10", "program", 0),
        ("6.9", "ftrace", 1),
        ("6.10", "ftrace", 1),
        ("6.10", "handler", 0),
    ],
)
@pytest.mark.parametrize("name", ["uprobe-nop", "uretprobe-nop"])
def test_args_buffer_lazy_vs_eager(kernel, consumer, fills, name):
    r = count_events(SCENARIOS[name], ColumnSpec(kernel), consumer)
    assert r["per_iter"]["args_buffer_fills"] == fills
    assert r["hits_per_iter"] == 1


@pytest.mark.parametrize(
    "policy,per_iter,warm_alloc",
    [
        ("kmalloc", {"ri_allocated": 1, "ri_reused": 0, "ri_freed": 1}, 3),
        ("array64", {"ri_allocated": 0, "ri_reused": 1, "ri_freed": 0}, 64),
        ("pool", {"ri_allocated": 0, "ri_reused": 1, "ri_freed": 0}, 1),
    ],
)
def test_return_instance_policies(policy, per_iter, warm_alloc):
    r = count_events(SCENARIOS["uretprobe-nop"], parse_column("6.18", {"ri_alloc": policy}), "handler")
    assert {k: r["per_iter"][k] for k in per_iter} == per_iter
    assert r["warmup_events"]["ri_allocated"] == warm_alloc  # 3 warm-up iterations


def test_timed_runs_count_the_same_events():
    res = bench.measure_scenario("uretprobe-nop", ColumnSpec("6.18"), "program", 300, 3, 2, 0.1)
    assert res["status"] == "ok" and res["consistent"], res
    assert res["timed_per_iter"] == res["per_iter"]
    assert res["iterations"] == 300 and len(res["samples_mops"]) == 2


def test_unsupported_scenario_is_na_not_faked():
    res = bench.measure_scenario("uprobe-nop10", ColumnSpec("6.18"), "program", 100, 2, 1, 0.1)
    assert res["status"] == "n/a" and res["reason"].startswith("ENOTSUPP")
    assert "mops" not in res


def test_usdt_sites_follow_the_nop_combo_rule():
    f = bench.guest_file()
    site5 = f.elf.vaddr_to_offset(f.elf.resolve("usdt_site_nop5").value)
    site10 = f.elf.vaddr_to_offset(f.elf.resolve("usdt_site_nop10").value)
    assert bench.site_offset(f, SCENARIOS["usdt-nop5"], KernelProfile.get("6.18")) == site5 + 1
    assert bench.site_offset(f, SCENARIOS["usdt-nop5"], KernelProfile.get("6.17")) == site5
    assert bench.site_offset(f, SCENARIOS["usdt-nop10"], KernelProfile.get("6.18")) == site10
    assert bench.site_offset(f, SCENARIOS["usdt-nop10"], KernelProfile.get("7.3")) == site10 + 1


def test_bare_unicorn_baselines_complete_their_loops():
    for loop, mode in ((0, "none"), (1, "none"), (2, "int3"), (1, "syscall"), (4, "none")):
        assert bench.bare_run(loop, 50, mode) > 0


# ----------------------------------------------------------------------------- growth


def test_growth_many_probes_keep_the_hit_path():
    rows = bench.growth_probe_counts(ColumnSpec("6.18"), "handler", (1, 100), 50, 2, 1)
    assert [r["uprobes_in_tree"] for r in rows] == [1, 100]
    for r in rows:
        assert (r["per_iter"]["bp_traps"], r["per_iter"]["emulated"], r["per_iter"]["uprobe_hits"]) == (1, 1, 1)


def test_growth_attach_counts():
    r = bench.growth_attach(ColumnSpec("6.18"), 1500)
    assert r["probes"] == 1500 and r["text_writes"] == 1500


def test_growth_attach_reports_the_best_of_its_repeats_and_keeps_every_sample():
    r = bench.growth_attach(ColumnSpec("6.18"), 300, repeat=3)
    assert (r["repeat"], len(r["attach_samples"]), len(r["detach_samples"]), r["text_writes"]) == (3, 3, 3, 300), r
    assert r["attach_seconds"] == min(r["attach_samples"]), r
    assert min(r["attach_samples"]) <= r["median_attach_seconds"] <= max(r["attach_samples"]), r


def test_growth_probe_count_ratio_is_the_median_of_each_repeat_against_its_neighbour(monkeypatch):
    """Repeat k of N probes is divided by repeat k of one probe (timed next to it), and
    the median of those ratios is the figure: one slow one-probe run cannot fake a
    growth, nor hide one."""
    mops = {1: iter([10.0, 5.0, 10.0]), 100: iter([10.0, 5.0, 8.0])}
    monkeypatch.setattr(
        bench.measure, "_probe_count_sample", lambda col, consumer, c, n, warmup: (next(mops[c]), 0.0, {}, c)
    )
    rows = bench.growth_probe_counts(ColumnSpec("6.18"), "handler", (1, 100), 50, 2, 3)
    hundred = rows[1]
    assert hundred["paired_cost_vs_one_probe"] == [1.0, 1.0, 1.25], hundred
    assert hundred["cost_vs_one_probe"] == 1.0, hundred
    assert hundred["ns_per_hit"] / rows[0]["ns_per_hit"] == 1.25, hundred  # medians 10 and 8: the drift shows


@pytest.mark.parametrize(
    "policy,allocated,reused,freed,peak",
    [("kmalloc", 200, 0, 200, 256), ("array64", 64, 200, 0, 64 * 128), ("pool", 2, 198, 0, 256)],
)
def test_growth_return_instance_memory(policy, allocated, reused, freed, peak):
    r = bench.growth_ri(ColumnSpec("6.18"), policy, 100)  # 100 iterations, depth 2
    assert r["uretprobe_hits"] == 200 and r["handler_calls"] == 200
    assert (r["ri_allocated"], r["ri_reused"], r["ri_freed"], r["ri_peak_bytes"]) == (allocated, reused, freed, peak)
    assert r["bounded"] and r["tenth"]["ri_peak_bytes"] == peak


# ----------------------------------------------------------------------------- report / CLI


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "b.json"
    proc = cli("bench", "--quick", "uprobe-nop", "--json", str(out), timeout=300)
    return proc, json.loads(out.read_text())


def test_cli_quick_prints_the_tables(quick_run):
    proc, _ = quick_run
    assert proc.returncode == 0, proc.stderr.decode()
    text = proc.stdout.decode()
    for needle in (
        "uprobe-nop",
        "events per iteration",
        "bp 1 emu 1 hit 1",
        "bare Unicorn",
        "projected vs published",
        "5.11f (calibration)",
        "growth",
        "per translated block",
        "per syscall",
    ):
        assert needle in text, needle
    assert "Traceback" not in proc.stderr.decode()


def test_json_schema(quick_run):
    _, rep = quick_run
    assert rep["schema"] == "uprobe-emu.bench/1"
    assert set(rep) >= {
        "host",
        "config",
        "columns",
        "baselines",
        "scenarios",
        "ratios",
        "cost_profile",
        "projection_checks",
        "growth",
        "host_kernel",
        "targets",
        "unit_costs",
    }
    assert rep["unit_costs"]["per_block_ns"] > 0 and rep["unit_costs"]["per_syscall_ns"] > 0, rep["unit_costs"]
    assert rep["columns"] == [{"label": "latest", "kernel": "latest", "overrides": {}}]
    (scen,) = rep["scenarios"]
    res = scen["results"]["latest"]
    assert scen["name"] == "uprobe-nop" and res["status"] == "ok"
    assert set(res) >= {
        "iterations",
        "warmup",
        "samples_mops",
        "mops",
        "per_iter",
        "insns_per_iter",
        "ratio_hook_free",
        "ratio_int3",
        "projected_mops",
        "projected_ns",
    }
    assert set(res["mops"]) == {"min", "median", "max"}
    assert res["per_iter"]["bp_traps"] == 1 and res["insns_per_iter"] == 4
    b = rep["baselines"]
    assert "nop" in b["hook_free"] and b["int3_hook"]["mops"]["median"] > 0
    assert {c["table"] for c in rep["projection_checks"]} >= {"5.11f", "5.2-intel", "5.11e"}
    g = rep["growth"]
    assert [r["probes"] for r in g["probe_count"]] == [1, 100, 10_000]
    assert g["attach"]["text_writes"] == g["attach"]["probes"]
    assert [r["policy"] for r in g["ri_memory"]] == ["kmalloc", "array64", "pool"]
    names = [t["target"] for t in rep["targets"]]
    assert "uprobe-nop / empty-int3-hook baseline" in names and "attach 50,000 probes (s)" in names


def test_the_report_says_whether_the_cpu_state_was_found_in_place(quick_run):
    _, rep = quick_run
    assert rep["host"]["cpu_state_in_place"] is True, rep["host"]


@pytest.mark.parametrize("in_place", [True, False])
def test_hit_costs_measured_without_the_cpu_state_in_place_are_flagged(quick_run, in_place):
    from rich.console import Console

    from emu.frontends.bench.render import render

    _, rep = quick_run
    rep = dict(rep, host=dict(rep["host"], cpu_state_in_place=in_place))
    console = Console(record=True, width=250)
    render(rep, console)
    flagged = "CPU state was not found in place" in console.export_text()
    assert flagged is not in_place, (in_place, flagged)


def test_cli_rejects_unknown_scenario():
    line = one_line_error(cli("bench", "--quick", "uprobe-bogus"))
    assert "unknown scenario 'uprobe-bogus'" in line


def test_columns_from_vs_and_policy():
    from argparse import Namespace

    args = Namespace(
        scenarios=["uretprobe-nop"],
        kernel="6.10",
        vs=["6.11"],
        policy="kmalloc,pool",
        consumer="program",
        iterations=10,
        seconds=None,
        warmup=None,
        repeat=None,
        quick=True,
        workers=1,
        cost_profile="intel-2025",
        no_growth=True,
        no_checks=True,
        ri_iterations=None,
        host_kernel=False,
    )
    cfg = bench.config_from_args(args)
    assert [c.label for c in cfg.columns] == [
        "6.10 ri_alloc=kmalloc",
        "6.10 ri_alloc=pool",
        "6.11 ri_alloc=kmalloc",
        "6.11 ri_alloc=pool",
    ]
    assert parse_column("6.17:nop_emulation=x86_nops").profile().nop_emulation == "x86_nops"
    with pytest.raises(InputError):
        parse_column("6.17:no_such_switch=1")


def test_side_by_side_report_has_ratios():
    cfg = bench.Config(
        scenarios=["uretprobe-nop", "uprobe-nop10"],
        columns=[ColumnSpec("6.10"), ColumnSpec("6.11")],
        iterations=100,
        warmup=2,
        repeat=1,
        growth=False,
        checks=False,
    )
    rep = bench.run_bench(cfg)
    (r,) = rep["ratios"]  # nop10 is n/a in both columns: no ratio
    assert r["scenario"] == "uretprobe-nop" and r["column"] == "6.11" and r["vs"] == "6.10"
    assert r["projected"] > 1  # the syscall trampoline is cheaper than a second int3
    assert rep["scenarios"][1]["results"]["6.10"]["status"] == "n/a"
    json.dumps(rep)


# ----------------------------------------------------------------------------- cost model


def test_fit_recovers_known_coefficients():
    true = {"insn": 1.5, "int3": 250.0, "singlestep": 600.0, "syscall": 70.0, "uprobe": 40.0, "uretprobe": 90.0}
    rows = [
        {"insn": 6},
        {"insn": 6, "syscall": 1},
        {"insn": 4, "int3": 1, "uprobe": 1},
        {"insn": 4, "int3": 1, "singlestep": 1, "uprobe": 1},
        {"insn": 14, "syscall": 1, "uprobe": 1},
        {"insn": 12, "int3": 1, "syscall": 1, "uprobe": 1, "uretprobe": 1},
        {"insn": 4, "int3": 2, "uprobe": 1, "uretprobe": 1},
    ]
    obs = [sum(true[f] * r.get(f, 0) for f in true) for r in rows]
    got = costmodel.least_squares(rows, obs, list(true))
    for f, v in true.items():
        assert got[f] == pytest.approx(v, rel=1e-9)
    # with fixed priors, only the others are fitted
    fixed = dict(true, uretprobe=90.0)
    got2 = costmodel.least_squares(rows, obs, list(true), fixed={"uretprobe": 90.0})
    assert got2 == pytest.approx(fixed)


def test_fit_is_nonnegative_and_refuses_collinear_features():
    rows = [{"a": 1, "b": 1}, {"a": 2, "b": 2}]
    with pytest.raises(ValueError):
        costmodel.least_squares(rows, [10.0, 20.0], ["a", "b"])
    rows = [{"a": 1}, {"a": 1, "b": 1}]
    got = costmodel.least_squares(rows, [10.0, 8.0], ["a", "b"])  # b would be -2
    assert got["b"] == 0.0 and got["a"] > 0


def test_projection_and_error():
    prof = costmodel.CostProfile("t", "test", {"insn": 1.0, "int3": 99.0})
    fv = {"insn": 1, "int3": 1}
    assert prof.cost_ns(fv) == 100.0
    assert prof.project_mops(fv) == pytest.approx(10.0)
    assert costmodel.relative_error(1.1, 1.0) == pytest.approx(0.1)
    assert costmodel.relative_error(0.75, 1.0) == pytest.approx(-0.25)


def test_features_from_counters():
    ev = {
        "insns": 12,
        "bp_traps": 1,
        "syscalls": {335: 1, 336: 1},
        "uprobe_hits": 1,
        "uretprobe_hits": 1,
        "emulated": 1,
        "ri_reused": 1,
        "args_buffer_fills": 1,
    }
    fv = costmodel.features_from_events(ev)
    assert (
        fv["insn"],
        fv["int3"],
        fv["syscall"],
        fv["uprobe"],
        fv["uretprobe"],
        fv["ri_reuse"],
        fv["args_fill"],
        fv["singlestep"],
    ) == (12, 1, 2, 1, 1, 1, 1, 0)


def test_calibration_profile_fits_its_table_within_15_percent():
    prof = costmodel.get_machine("intel-2025")
    assert set(prof.fitted) == set(costmodel.FIT_FEATURES)
    assert len(prof.residuals) == 20
    assert max(abs(e) for e in prof.residuals.values()) <= 0.15
    assert all(v >= 0 for v in prof.coef.values())


def test_ratio_checks_use_other_tables_than_the_fit():
    prof = costmodel.get_machine("intel-2025")
    checks = costmodel.ratio_checks(prof, costmodel.CALIBRATION_EVENTS)
    assert {c.table for c in checks if c.calibration} == {"5.11f"}
    assert any(not c.calibration for c in checks)  # 6.18 columns of 5.11d/5.11e
    # a table whose columns have no events yields no checks
    assert costmodel.ratio_checks(prof, {}, [costmodel.TABLES["5.2-intel"]]) == []
    c = costmodel.RatioCheck("x", "kernels", "a", 2.0, 2.5, False, False)
    assert c.error == pytest.approx(0.25)


@pytest.mark.parametrize("table,consumer", [("calibration", "program"), ("host", "ftrace")])
def test_embedded_event_vectors_match_the_emulator(table, consumer):
    events = costmodel.CALIBRATION_EVENTS if table == "calibration" else costmodel.HOST_EVENTS
    for (key, scen), fv in events.items():
        r = count_events(SCENARIOS[scen], ColumnSpec(key), consumer)
        live = costmodel.features_from_events(dict(r["per_iter"], insns=r["insns_per_iter"]))
        assert live == fv, f"{scen}@{key}: emulator counts {live}, costmodel has {fv}"


def test_unknown_cost_profile_is_an_input_error():
    with pytest.raises(InputError):
        costmodel.get_machine("no-such-machine")


# ----------------------------------------------------------------------------- host kernel


def _tracefs_reason():
    from emu.frontends.host_tracefs import HostKernelError, Tracefs

    try:
        Tracefs().close()
    except HostKernelError as e:
        return str(e)
    return None


@pytest.mark.skipif(_tracefs_reason() is not None, reason=f"host tracefs unusable: {_tracefs_reason()}")
def test_host_kernel_run_counts_every_hit(tmp_path):
    import os

    from emu.frontends.host_tracefs import Tracefs, run_tag
    from emu.frontends.hostdiff import host_profile_name
    from guest_programs import write_guest

    path = str(tmp_path / "bench_trigger")
    write_guest("bench_trigger", path)
    os.chmod(path, 0o755)
    prof = KernelProfile.get(host_profile_name())
    t = Tracefs()
    try:
        ok = bench.host_native("uprobe-nop", 20_000, 2, 1, 0.1, t, path, prof)
        ret = bench.host_native("uretprobe-nop", 20_000, 2, 1, 0.1, t, path, prof)
        nop10 = bench.host_native("uprobe-nop10", 1000, 2, 1, 0.1, t, path, prof)
    finally:
        t.close()
    for r in (ok, ret):
        assert r["status"] == "ok" and r["hits"] == r["expected_hits"] == 20_004, r
    if prof.optimize != "nop10":
        assert nop10["status"] == "n/a" and "never installed" in nop10["reason"]
    t = Tracefs()
    try:
        assert f"{run_tag()}/bench" not in t.read("uprobe_events")  # removed again
    finally:
        t.close()
