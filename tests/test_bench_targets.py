"""``uprobe-emu bench``: the hit-path targets (met/missed, each ratio from the same run),
the Qiling-style and native-callback baselines, and ``--programs``.  Structure and exact
counts only - no timing is asserted."""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli

from emu.engine import baseline
from emu.frontends.bench import TARGET_INT3_RATIOS, engine_costs, guest_file, targets
from kernel_model.errors import EmuError

HIT_TARGETS = {"uprobe-nop": 0.20, "uprobe-push": 0.15, "uprobe-ret": 0.15, "uretprobe-nop": 0.15}
QILING = "full semantics vs no semantics: uprobe-nop / Qiling-style code hook"


def _report(ratio: float) -> dict:
    """A report whose every scenario measured ``ratio`` against each baseline."""
    res = {
        "status": "ok",
        "ratio_int3": ratio,
        "ratio_code_hook": ratio,
        "floor_int3": 2.0,
        "floor_code_hook": 0.5,
        "floor_inline_int3": 0.7,
        "floor_inline_code_hook": 0.6,
    }
    return {
        "columns": [{"label": "6.18"}],
        "scenarios": [{"name": s, "results": {"6.18": dict(res)}} for s in HIT_TARGETS],
        "growth": {
            "probe_count": [
                {"probes": 1, "cost_vs_one_probe": 1.0, "best_cost_vs_one_probe": 1.0},
                {"probes": 10_000, "cost_vs_one_probe": 1.05, "best_cost_vs_one_probe": 1.0},
            ],
            "attach": {"probes": 50_000, "attach_seconds": 1.5},
        },
        "projection_checks": [],
    }


def test_the_hit_path_targets_are_the_issues():
    assert dict(TARGET_INT3_RATIOS) == HIT_TARGETS, TARGET_INT3_RATIOS


@pytest.mark.parametrize("ratio, ok", [(0.5, True), (0.01, False)], ids=["met", "missed"])
def test_each_scenario_target_is_judged_against_its_limit(ratio, ok):
    rows = {r["target"]: r for r in targets(_report(ratio))}
    for scen, limit in HIT_TARGETS.items():
        row = rows[f"{scen} / empty-int3-hook baseline"]
        assert (row["value"], row["op"], row["limit"], row["ok"]) == (ratio, ">=", limit, ok), row
        assert row["note"] == "hand-inlined hit: 0.70; floor (native empty trap callback): 2.00", row["note"]


def test_the_qiling_ratio_and_its_floor_are_a_target_line():
    rows = {r["target"]: r for r in targets(_report(0.7))}
    row = rows[QILING]
    assert (row["value"], row["limit"], row["ok"]) == (0.7, 1.0, False), row
    assert row["note"] == "hand-inlined hit: 0.60; floor (native empty trap callback): 0.50", row["note"]


def test_a_target_without_a_measured_floor_says_only_what_was_measured():
    rep = _report(0.5)
    for entry in rep["scenarios"]:
        for key in ("floor_inline_int3", "floor_int3"):
            entry["results"]["6.18"].pop(key)
    rows = {r["target"]: r for r in targets(rep)}
    assert rows["uprobe-push / empty-int3-hook baseline"]["note"] == "", rows


@pytest.mark.parametrize("mode", sorted(baseline.FLOORS))
def test_a_hand_inlined_floor_runs_its_loop_with_one_consumer_call_per_hit(mode):
    """bare_run checks the loop's end (r12 counted down: every return address and
    pushed word was right) and that the consumer ran once per iteration."""
    assert baseline.bare_run(guest_file(), 0, 2000, mode) > 0


def test_a_hand_inlined_push_floor_pushes_the_value_of_rbp(monkeypatch):
    """The floor's push is the instruction's: with another register pushed, the
    guest's pop rbp gives rbp a value that is not the caller's."""
    monkeypatch.setattr(baseline, "W_RBP", baseline.W_RAX)
    with pytest.raises(EmuError, match="rbp not preserved"):
        baseline.bare_run(guest_file(), 0, 200, "floor-push")


@pytest.mark.parametrize("mode", ["none", "int3", "floor-ret", "floor-uretprobe"])
def test_every_baseline_gives_back_the_callee_saved_rbp(mode):
    loop = 4 if mode == "none" else 2
    assert baseline.bare_run(guest_file(), loop, 100, mode) > 0


def test_attach_and_probe_count_targets_use_the_issues_limits():
    rows = {r["target"]: r for r in targets(_report(0.5))}
    attach = rows["attach 50,000 probes (s)"]
    assert (attach["limit"], attach["ok"]) == (1.0, False), attach
    many = rows["per-hit cost, 10,000 probes / 1 probe (median)"]
    assert (many["limit"], many["ok"]) == (1.1, True), many


@pytest.mark.parametrize("mode", ["code-hook", "int3-native"])
def test_the_new_baselines_complete_their_loops(mode):
    assert baseline.bare_run(guest_file(), 2, 2000, mode) > 0


def test_an_unknown_baseline_mode_is_an_emu_error():
    with pytest.raises(EmuError, match="unknown baseline mode 'bogus'"):
        baseline.bare_run(guest_file(), 2, 10, "bogus")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "b.json"
    proc = cli("bench", "--quick", "--no-growth", "--no-checks", "uprobe-nop", "--json", str(out), timeout=300)
    return proc, json.loads(out.read_text())


def test_the_bench_prints_the_qiling_baseline_and_the_target_lines(quick):
    proc, _ = quick
    text = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()
    for needle in (
        "Qiling-style one-address UC_HOOK_CODE",
        "registered natively (floor)",
        "x code hook",
        "uprobe-nop / empty-int3-hook baseline",
        "full semantics vs no semantics",
        "hand-inlined hit",
    ):
        assert needle in text, f"{needle!r} not printed"
    assert ("met" in text) or ("MISSED" in text), text


def test_the_json_has_the_new_baselines_and_ratios(quick):
    _, rep = quick
    b = rep["baselines"]
    assert b["code_hook"]["mode"] == "code-hook" and b["int3_native"]["mode"] == "int3-native", b
    res = rep["scenarios"][0]["results"][rep["columns"][0]["label"]]
    assert {
        "ratio_code_hook",
        "ratio_int3_native",
        "floor_int3",
        "floor_code_hook",
        "floor_inline_int3",
        "floor_inline_code_hook",
    } <= set(res), sorted(res)
    adj = res["adjacent_baselines"]
    assert adj["floor_mode"] == "floor-nop" and adj["floor_mops"]["median"] > 0, adj
    names = [t["target"] for t in rep["targets"]]
    assert "uprobe-nop / empty-int3-hook baseline" in names and QILING in names, names


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "p.json"
    proc = cli("bench", "--programs", "--repeat", "1", "--json", str(out), timeout=600)
    return proc, json.loads(out.read_text())


def test_programs_prints_each_workload_beside_its_native_time(programs):
    proc, _ = programs
    assert proc.returncode == 0, proc.stderr.decode()
    text = proc.stdout.decode()
    for needle in ("glibc-startup", "malloc-loop", "shell-pipeline", "native s", "events/s"):
        assert needle in text, f"{needle!r} not printed"


def test_programs_count_exactly_the_malloc_and_free_calls(programs):
    _, rep = programs
    rows = {r["program"]: r for r in rep["programs"]}
    assert [rows[p]["status"] for p in ("glibc-startup", "malloc-loop", "shell-pipeline")] == ["ok"] * 3, rows
    loop = rows["malloc-loop"]
    assert (loop["probes"], loop["probe_hits"]) == (["libc:malloc", "libc:free"], 4000), loop
    assert rows["glibc-startup"]["syscalls"] > 0 and rows["shell-pipeline"]["syscalls"] > 0, rows


def test_programs_run_the_seven_target_programs_and_print_their_targets(programs):
    """busybox and coreutils sha256sum, xz, sort, python3, a bash-static loop and gcc:
    each runs to exit 0 in the model (or is n/a because the host lacks the tool), and
    the geometric-mean and worst-slowdown targets are printed."""
    proc, rep = programs
    rows = {r["program"]: r for r in rep["programs"]}
    for name in ("busybox-sha256sum", "sha256sum", "xz", "sort", "python3", "bash-loop", "gcc-hello"):
        row = rows[name]
        assert row["status"] == "ok" or row["reason"].endswith("not found"), row
        if row["status"] == "ok":
            assert row["slowdown"] > 1 and row["syscalls"] > 0, row
    names = [t["target"] for t in rep["program_targets"]]
    assert names[0] == "real programs, geometric mean x native", names
    assert "geometric mean" in proc.stdout.decode()


def test_engine_costs_print_the_store_and_mapping_targets(tmp_path):
    out = tmp_path / "e.json"
    proc = cli("bench", "--engine", "--repeat", "1", "--json", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    rep = json.loads(out.read_text())
    assert rep["loads_seconds"] > 0 and rep["stores_seconds"] > 0 and rep["maps_seconds"] > 0, rep
    assert [t["limit"] for t in rep["targets"]] == [2.0, 1.0], rep["targets"]
    text = proc.stdout.decode()
    assert "guest stores / loads" in text and "3,000 one-page mmaps" in text, text
    assert [c["name"] for c in rep["engine"]] == [
        "register window",
        "native block quantum",
        "instruction counter",
        "exception state",
    ]
    assert "engine: register window in use" in text, text
    _assert_unit_costs(rep, text)


def _assert_unit_costs(rep: dict, text: str) -> None:
    """The two per-unit costs: in the JSON as positive numbers, and printed."""
    u = rep["unit_costs"]
    for key in ("per_block_ns", "per_syscall_ns", "syscall_floor_ns", "model_syscall_ns"):
        assert isinstance(u[key], float) and u[key] > 0, (key, u)
    assert u["model_syscall_ns"] > u["syscall_floor_ns"], u
    assert "engine per-unit costs" in text and "per translated block" in text and "per syscall" in text, text
    assert f"{u['per_block_ns']:.3g}" in text and f"{u['per_syscall_ns']:.4g}" in text, text


def test_every_bench_report_prints_the_engine_unit_costs(quick):
    proc, rep = quick
    _assert_unit_costs(rep, proc.stdout.decode())


def test_the_unit_cost_loops_measure_what_they_say():
    """The chained loop runs 64 blocks per iteration where the straight one runs one,
    with the same instructions: it is the slower (unit_costs also checks that the
    model's getpid loop made exactly its syscalls)."""
    chained, straight = baseline.block_loops(20_000)
    assert chained > straight > 0, (chained, straight)
    costs = engine_costs.unit_costs(1)
    assert costs["blocks"] == engine_costs.BLOCK_ITERATIONS * baseline.BLOCKS_PER_ITERATION
    assert costs["per_block_ns"] > 0 and costs["per_syscall_ns"] > 0, costs


def test_the_sweep_target_times_a_whole_sweep_with_its_libraries(tmp_path, monkeypatch):
    """``bench --sweep`` on a three-instruction static program (the real one, /bin/true
    with ld.so and libc, takes minutes): every instruction is a site, the runs and the
    time are reported, and the target row is judged against five minutes."""
    from keystone import KS_ARCH_X86, KS_MODE_64, Ks

    from emu.elf_writer import build_elf
    from emu.frontends.bench import sweep_target

    code = bytes(Ks(KS_ARCH_X86, KS_MODE_64).asm("mov eax, 60; xor edi, edi; syscall", 0x401000)[0])
    path = tmp_path / "exit0"
    path.write_bytes(
        build_elf(text=code, text_vaddr=0x401000, entry=0x401000, symbols=[("_start", 0x401000, len(code), "FUNC")])
    )
    path.chmod(0o755)
    monkeypatch.setattr(sweep_target, "SWEEP_PROGRAM", str(path))
    rep = sweep_target.run_sweep_target(1)
    assert rep["sites"] == 3, rep
    assert rep["runs"] >= 1 + rep["divergences"], rep
    (row,) = rep["targets"]
    assert row["op"] == "<=" and row["limit"] == 5.0 and row["ok"] == (rep["seconds"] / 60 <= 5.0), row
    assert "3 sites" in row["note"] and f"{rep['runs']} runs" in row["note"], row["note"]
