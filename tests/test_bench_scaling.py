"""``uprobe-emu bench --cpus``: the projection against CPU counts, the published
tables beside it, the checks, the plot; ``--detach``."""

import json

import pytest
from cli_helpers import cli, one_line_error

from emu.frontends.bench import scaling
from emu.frontends.bench.scaling_report import published_for
from emu.frontends.bench.scaling_tables import CHECK_TABLES, FIT_TABLE, TABLES
from kernel_model.errors import InputError


@pytest.mark.parametrize(
    "text,cpus",
    [
        ("1,2,4", (1, 2, 4)),
        ("1-3", (1, 2, 3)),
        ("4,1,4", (1, 4)),
        ("quick", scaling.QUICK_CPUS),
        ("all", scaling.FULL_CPUS),
    ],
)
def test_parse_cpus(text, cpus):
    assert scaling.parse_cpus(text) == cpus


@pytest.mark.parametrize(
    "text,msg", [("0", "outside 1..80"), ("81", "outside 1..80"), ("a", "numbers"), ("", "at least one")]
)
def test_parse_cpus_refuses(text, msg):
    with pytest.raises(InputError, match=msg):
        scaling.parse_cpus(text)


@pytest.mark.parametrize(
    "column,scenario,rows",
    [
        ("6.12", "uprobe-nop", [("S1", "SRCU uprobe-nop")]),
        ("6.13", "uprobe-nop", [("S1", "RCU-TT uprobe-nop"), ("S2", "before")]),
        ("6.14", "uprobe-nop", [("S2", "after"), ("S3", "RCU Tasks Trace")]),
        ("6.13", "uretprobe-nop", []),  # its return path has uretprobes_srcu: not S1's
        ("7.3", "uprobe-nop", [("S2", "after"), ("S3", "RCU Tasks Trace")]),
    ],
)
def test_published_rows_match_columns_with_the_same_locks(column, scenario, rows):
    assert [(t, r.label) for t, r in published_for(column, scenario)] == rows


def test_every_published_row_is_a_valid_column_and_scenario():
    for t in TABLES.values():
        for r in t.rows:
            assert len(r.values) == len(t.cpus), (t.id, r.label)
            assert published_for(r.column, r.scenario), (t.id, r.label)


def test_one_cpu_projection_is_the_private_work_plus_the_locks_own_cost():
    (got,) = scaling.project("6.14", "uprobe-nop", (1,), scaling.FITTED.replace(jitter=0.0))
    work = scaling.work_ns("6.14", "uprobe-nop") * scaling.FITTED.scale
    # 6.14's entry hit shares nothing: one CPU runs at its private cost plus a few L1 hits
    assert 1000 / got == pytest.approx(work, abs=5.0)


def test_checks_cover_every_point_of_the_fit_and_every_check_table():
    checks = scaling.checks(tables=(FIT_TABLE,) + CHECK_TABLES, measure=10)
    fit = [c for c in checks if c.what == "fit"]
    assert len(fit) == sum(len(r.values) for r in TABLES[FIT_TABLE].rows)
    for tid in CHECK_TABLES:
        t = TABLES[tid]
        speedups = [c for c in checks if c.table == tid and c.what == "speedup"]
        ratios = [c for c in checks if c.table == tid and c.what == "ratio"]
        peaks = [c for c in checks if c.table == tid and c.what == "peak"]
        assert (len(speedups), len(ratios), len(peaks)) == (
            len(t.rows) * (len(t.cpus) - 1),
            len(t.comparisons) * len(t.cpus),
            len(t.rows),
        )


def test_check_error_and_tolerance():
    c = scaling.Check("S2", "ratio", "after / before", 8, 2.2, 2.0)
    assert (round(c.error, 6), c.tolerance, c.passes) == (0.1, 0.25, True)
    peak = scaling.Check("S2", "peak", "before", None, 8, 5, apart=2)
    assert (peak.error, peak.passes) == (2.0, False)


def test_fit_recovers_a_price_from_a_table_the_model_made():
    """The fit is least squares on relative errors: given a table the model itself
    projected with a known scale, it finds that scale again."""
    truth = scaling.FITTED.replace(scale=0.9)
    t = TABLES["S3"]
    row = t.rows[0]
    values = tuple(scaling.project(row.column, row.scenario, t.cpus[:3], truth, measure=10))
    synthetic = type(t)("synthetic", "", "", t.cpus[:3], (type(row)("r", row.column, row.scenario, values),))
    got, errs = scaling.fit_prices(scaling.FITTED, synthetic, keys=("scale",), measure=10)
    assert got.scale == pytest.approx(0.9, rel=0.02) and max(map(abs, errs)) < 0.02, (got.scale, errs)


def test_cli_projects_two_kernels_side_by_side(tmp_path):
    out = tmp_path / "r.json"
    p = cli(
        "bench", "--cpus", "1,2,4", "--kernel", "6.12", "--vs", "6.14", "uprobe-nop", "--no-checks", "--json", str(out)
    )
    assert p.returncode == 0, p.stderr.decode()
    text = p.stdout.decode()
    assert "6.12 uprobe-nop" in text and "6.14 uprobe-nop" in text and "[S1: SRCU uprobe-nop]" in text
    report = json.loads(out.read_text())
    assert [c["column"] for c in report["curves"]] == ["6.12", "6.14"]
    assert sorted(report["curves"][0]["values"]) == ["1", "2", "4"]
    assert report["curves"][0]["published"][0]["values"] == {"1": 3.276, "2": 4.125, "4": 7.713}


def test_cli_switch_set_to_a_design_that_never_shipped():
    p = cli("bench", "--cpus", "1,8", "--kernel", "6.12:treelock=percpu_rwsem", "uprobe-nop", "--no-checks")
    assert p.returncode == 0, p.stderr.decode()
    assert "treelock=percpu_rwsem uprobe-nop" in p.stdout.decode()


@pytest.mark.parametrize("suffix", ["svg", "png"])
def test_cli_plot(tmp_path, suffix):
    out = tmp_path / f"scaling.{suffix}"
    p = cli("bench", "--cpus", "1,2", "--kernel", "6.13", "uprobe-nop", "--no-checks", "--plot", str(out))
    assert p.returncode == 0, p.stderr.decode()
    head = out.read_bytes()[:200]
    assert (b"<svg" in head) if suffix == "svg" else head.startswith(b"\x89PNG"), head[:40]


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--cpus", "0"], "outside 1..80"),
        (["--cpus", "1", "--plot", "x.gif"], ".png, .svg or .pdf"),
        (["--fit"], "goes with --cpus"),
        (["--cpus", "1", "usermode-count"], "probe scenarios"),
        (["--cpus", "1", "--kernel", "6.12:treelock=mutex"], "treelock is one of"),
    ],
)
def test_cli_bad_input_is_one_line(args, msg):
    assert msg in one_line_error(cli("bench", *args))


def test_cli_detach_counts_grace_periods_per_kernel(tmp_path):
    out = tmp_path / "d.json"
    p = cli("bench", "--detach", "100", "--kernel", "6.11", "--vs", "6.13", "--json", str(out))
    assert p.returncode == 0, p.stderr.decode()
    rows = {r["column"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["6.11"]["grace_periods_per_probe"] == {"uprobes_srcu": 0, "rcu_tasks_trace": 0, "uretprobes_srcu": 0}
    assert rows["6.13"]["grace_periods_per_probe"] == {"uprobes_srcu": 0, "rcu_tasks_trace": 1, "uretprobes_srcu": 1}
    assert rows["6.13"]["separate_s"] > rows["6.13"]["uprobe_multi_s"] > rows["6.11"]["uprobe_multi_s"] * 0.99
