"""``uprobe-emu bench --plot``: the plotted series are the report's numbers (the side by
side table's medians, the ``--cpus`` curves and the published rows they match), the
drawn file is a real PNG / SVG / PDF showing them, and a plot that cannot be made is one
error line before the bench runs."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from cli_helpers import cli, one_line_error

from emu.frontends.bench.plot import bench_chart, bench_series, plot_bench
from emu.frontends.plotting import DPI, Series, figure_size

ENGINE_OK = [
    {"name": "register window", "ok": True, "detail": ""},
    {"name": "native block quantum", "ok": True, "detail": ""},
]


def _res(median, lo, hi):
    return {"status": "ok", "mops": {"min": lo, "median": median, "max": hi}}


def bench_report(columns=("6.11", "6.17"), engine=ENGINE_OK) -> dict:
    """A bench report as ``--json`` writes it: three scenarios, nop10 n/a before 7.3."""
    na = {"status": "n/a", "reason": "ENOTSUPP: nop10 needs the 7.3 optimizer"}
    rows = {
        "uprobe-nop": {
            "6.11": _res(0.773, 0.701, 0.790),
            "6.17": _res(0.774, 0.770, 0.781),
            "7.3": _res(0.912, 0.9, 0.95),
        },
        "uprobe-nop10": {"6.11": na, "6.17": na, "7.3": _res(1.25, 1.2, 1.3)},
        "usermode-count": {"6.11": _res(1.68, 1.5, 1.7), "6.17": _res(12.5, 12.0, 13.1), "7.3": _res(1.93, 1.9, 2.0)},
    }
    return {
        "schema": "uprobe-emu.bench/1",
        "host": {"unicorn": "2.1.4"},
        "config": {"repeat": 3, "warmup": 10, "consumer": "program"},
        "columns": [{"label": c, "kernel": c, "overrides": {}} for c in columns],
        "scenarios": [{"name": n, "description": "", "results": {c: r[c] for c in columns}} for n, r in rows.items()],
        "engine": engine,
    }


def scaling_report(int_keys=True) -> dict:
    """A ``--cpus`` report: two curves whose published rows are the same S1 row for
    6.12/6.13 uprobe-nop and none for the return probe."""
    k = (lambda n: n) if int_keys else str
    pub = {"table": "S1", "row": "SRCU uprobe-nop", "values": {k(1): 3.276, k(2): 4.125, k(4): 7.713}}
    return {
        "cpus": [1, 2, 4],
        "curves": [
            {
                "column": "6.12",
                "scenario": "uprobe-nop",
                "values": {k(4): 7.5, k(1): 3.3, k(2): 4.0},
                "published": [pub],
            },
            {
                "column": "6.13",
                "scenario": "uprobe-nop",
                "values": {k(1): 3.4, k(2): 4.2, k(4): 8.0},
                "published": [pub],
            },
            {
                "column": "6.13",
                "scenario": "uretprobe-nop",
                "values": {k(1): 2.0, k(2): 2.5, k(4): 4.9},
                "published": [],
            },
        ],
        "topology": {"sockets": 2, "cores_per_socket": 20, "threads_per_core": 2},
    }


def svg_tree(path):
    return ET.parse(path).getroot()


def svg_ids(root, prefix: str) -> list[str]:
    return [e.get("id") for e in root.iter() if (e.get("id") or "").startswith(prefix)]


def svg_text(root) -> str:
    return "\n".join("".join(e.itertext()) for e in root.iter() if e.tag.endswith("}text"))


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    assert data[12:16] == b"IHDR", data[12:16]
    return struct.unpack(">II", data[16:24])


# ----------------------------------------------------------------------------- series


def test_bars_are_the_side_by_side_medians_with_min_max():
    got = bench_series(bench_report())
    want = [
        Series(
            "6.11",
            ("uprobe-nop", "usermode-count"),
            (0.773, 1.68),
            "bar",
            0,
            ("0.773", "1.68"),
            (0.701, 1.5),
            (0.790, 1.7),
        ),
        Series(
            "6.17",
            ("uprobe-nop", "usermode-count"),
            (0.774, 12.5),
            "bar",
            1,
            ("0.774", "12.5"),
            (0.770, 12.0),
            (0.781, 13.1),
        ),
    ]
    assert got == want, f"expected {want}, got {got}"


def test_one_profile_is_one_bar_per_scenario():
    got = bench_series(bench_report(("7.3",)))
    want = [
        Series(
            "7.3",
            ("uprobe-nop", "uprobe-nop10", "usermode-count"),
            (0.912, 1.25, 1.93),
            "bar",
            0,
            ("0.912", "1.25", "1.93"),
            (0.9, 1.2, 1.9),
            (0.95, 1.3, 2.0),
        )
    ]
    assert got == want, f"expected {want}, got {got}"


@pytest.mark.parametrize("make", [bench_report, scaling_report], ids=["scenarios", "cpus"])
def test_series_read_back_from_the_json_file_are_the_same(make):
    report = make()
    assert bench_series(json.loads(json.dumps(report))) == bench_series(report)


@pytest.mark.parametrize("int_keys", [True, False], ids=["in-memory", "from-json"])
def test_cpus_curves_are_lines_and_each_published_row_markers_once(int_keys):
    got = bench_series(scaling_report(int_keys))
    want = [
        Series("6.12 uprobe-nop (projected)", (1, 2, 4), (3.3, 4.0, 7.5), "line", 0),
        Series("S1: SRCU uprobe-nop (published)", (1, 2, 4), (3.276, 4.125, 7.713), "markers", 0),
        Series("6.13 uprobe-nop (projected)", (1, 2, 4), (3.4, 4.2, 8.0), "line", 1),
        Series("6.13 uretprobe-nop (projected)", (1, 2, 4), (2.0, 2.5, 4.9), "line", 2),
    ]
    assert got == want, f"expected {want}, got {got}"


def test_bar_chart_names_the_profiles_the_engine_and_the_unit():
    chart = bench_chart(bench_report())
    assert chart.title.splitlines() == [
        "uprobe-emu bench: emulated M triggers/s, 6.11 vs 6.17; median of 3 runs (bar: min-max), consumer=program",
        "engine: Unicorn 2.1.4, every engine fast path in use",
    ], chart.title
    assert (chart.ylabel, chart.categories) == (
        "M triggers/s (emulated)",
        ("uprobe-nop", "uprobe-nop10", "usermode-count"),
    )


def test_bar_chart_title_names_an_engine_fallback():
    engine = [dict(ENGINE_OK[0], ok=False), ENGINE_OK[1]]
    line = bench_chart(bench_report(engine=engine)).title.splitlines()[1]
    assert line == "engine: Unicorn 2.1.4, FALLBACK: register window", line


def test_cpus_chart_names_the_profiles_and_the_machine():
    chart = bench_chart(scaling_report())
    assert chart.title.splitlines()[0] == (
        "uprobe-emu bench --cpus: projected M triggers/s against CPUs, 6.12 vs 6.13 (uprobe-nop, uretprobe-nop)"
    ), chart.title
    assert "2 sockets x 20 cores x 2 threads" in chart.title.splitlines()[1], chart.title
    assert (chart.xlabel, chart.ylabel, chart.categories) == (
        "CPUs (producer threads, one per CPU)",
        "M triggers/s (all CPUs)",
        None,
    )


# ----------------------------------------------------------------------------- files


def test_svg_has_a_bar_per_point_and_the_names_as_text(tmp_path):
    out = tmp_path / "b.svg"
    plot_bench(bench_report(), str(out))
    root = svg_tree(out)
    want = ["bar:6.11:uprobe-nop", "bar:6.11:usermode-count", "bar:6.17:uprobe-nop", "bar:6.17:usermode-count"]
    assert sorted(svg_ids(root, "bar:")) == want
    text = svg_text(root)
    missing = [
        w
        for w in (
            "uprobe-nop",
            "uprobe-nop10",
            "usermode-count",
            "6.11",
            "6.17",
            "0.773",
            "12.5",
            "M triggers/s",
            "Unicorn 2.1.4",
            "n/a",
        )
        if w not in text
    ]
    assert not missing, f"not in the SVG's text: {missing}"


def test_svg_of_scenarios_no_profile_can_run_has_no_bar_but_both_profiles_and_na(tmp_path):
    out = tmp_path / "na.svg"
    report = bench_report()
    report["scenarios"] = [e for e in report["scenarios"] if e["name"] == "uprobe-nop10"]
    plot_bench(report, str(out))
    root = svg_tree(out)
    assert svg_ids(root, "bar:") == []
    texts = svg_text(root).splitlines()
    assert (texts.count("n/a"), texts.count("6.11"), texts.count("6.17")) == (2, 1, 1), texts


def test_svg_of_cpus_has_a_line_per_curve_and_markers_per_published_row(tmp_path):
    out = tmp_path / "c.svg"
    plot_bench(scaling_report(), str(out))
    root = svg_tree(out)
    assert sorted(svg_ids(root, "line:")) == [
        "line:6.12 uprobe-nop (projected)",
        "line:6.13 uprobe-nop (projected)",
        "line:6.13 uretprobe-nop (projected)",
    ]
    assert svg_ids(root, "markers:") == ["markers:S1: SRCU uprobe-nop (published)"]
    assert "CPUs (producer threads, one per CPU)" in svg_text(root)


@pytest.mark.parametrize("make", [bench_report, scaling_report], ids=["scenarios", "cpus"])
def test_png_is_a_png_of_the_figure_size(tmp_path, make):
    out = tmp_path / "b.png"
    report = make()
    plot_bench(report, str(out))
    w, h = figure_size(bench_chart(report))
    assert png_size(out) == (round(w * DPI), round(h * DPI))


def test_pdf_is_a_pdf(tmp_path):
    out = tmp_path / "b.pdf"
    plot_bench(bench_report(), str(out))
    assert out.read_bytes()[:5] == b"%PDF-"


# ----------------------------------------------------------------------------- the command


def test_cli_plots_what_the_json_report_holds(tmp_path):
    svg, js = tmp_path / "bench.svg", tmp_path / "bench.json"
    p = cli(
        "bench",
        "--quick",
        "uprobe-nop",
        "--kernel",
        "6.11",
        "--vs",
        "6.17",
        "--no-growth",
        "--no-checks",
        "--iterations",
        "500",
        "--plot",
        str(svg),
        "--json",
        str(js),
    )
    assert p.returncode == 0, p.stderr.decode()
    assert f"plot: {svg}" in p.stdout.decode()
    assert "side by side" in p.stdout.decode()  # the tables are still printed
    series = bench_series(json.loads(js.read_text()))
    assert [(s.label, s.x) for s in series] == [("6.11", ("uprobe-nop",)), ("6.17", ("uprobe-nop",))]
    root = svg_tree(svg)
    assert sorted(svg_ids(root, "bar:")) == ["bar:6.11:uprobe-nop", "bar:6.17:uprobe-nop"]
    text = svg_text(root)
    labels = [t for s in series for t in s.text]
    assert all(t in text for t in labels), (labels, text)


BLOCK_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None; from emu.console import main; sys.exit(main())"


def test_cli_without_matplotlib_is_one_line_naming_the_fix(tmp_path):
    p = subprocess.run(
        [sys.executable, "-c", BLOCK_MATPLOTLIB, "bench", "--quick", "uprobe-nop", "--plot", str(tmp_path / "b.svg")],
        capture_output=True,
        timeout=120,
    )
    assert one_line_error(p) == "uprobe-emu: error: --plot needs matplotlib: pip install 'uprobe-emu[plot]'"
    assert p.stdout == b"", p.stdout.decode()  # refused before the bench ran


@pytest.mark.parametrize(
    "args,msg",
    [
        (["uprobe-nop", "--plot", "{tmp}/b.gif"], "--plot writes a .png, .svg or .pdf file, not '{tmp}/b.gif'"),
        (["--cpus", "1", "--plot", "{tmp}/c.jpg"], "--plot writes a .png, .svg or .pdf file, not '{tmp}/c.jpg'"),
        (
            ["uprobe-nop", "--plot", "{tmp}/no/such/dir/b.svg"],
            "--plot: cannot write '{tmp}/no/such/dir/b.svg': no directory '{tmp}/no/such/dir'",
        ),
        (["--cpus", "1", "--plot", "{tmp}/no/c.png"], "--plot: cannot write '{tmp}/no/c.png': no directory '{tmp}/no'"),
        (["uprobe-nop", "--plot", "{tmp}/dir.svg"], "--plot: cannot write '{tmp}/dir.svg': it is a directory"),
        (
            ["--threads", "--plot", "{tmp}/b.svg"],
            "--plot draws the scenarios or --cpus, not --threads, --engine or --sweep",
        ),
        (["--programs", "--plot", "{tmp}/b.svg"], "--plot draws the scenarios or --cpus, not --programs alone"),
        (["--fit"], "--fit goes with --cpus"),
    ],
)
def test_cli_plot_that_cannot_be_made_is_one_line_before_the_run(tmp_path, args, msg):
    (tmp_path / "dir.svg").mkdir()
    p = cli("bench", "--quick", *[a.format(tmp=tmp_path) for a in args])
    assert one_line_error(p) == "uprobe-emu: error: " + msg.format(tmp=tmp_path)
    assert p.stdout == b"", p.stdout.decode()
