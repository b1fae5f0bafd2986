"""``uprobe-emu sweep --plot``: probed sites per divergence class, a bar per kernel
profile (and the host kernel); the series are the report's counts, the drawn file a real
PNG / SVG showing them, and a plot that cannot be made is one error line before the
sweep runs."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from cli_helpers import cli, one_line_error

from emu.frontends.plotting import DPI, Series, figure_size
from emu.frontends.sweep.plot import plot_sweep, sweep_chart, sweep_classes, sweep_series

CLASSES = ("pushf-tf", "syscall-xol", "xol-area-layout", "nop5-redzone", "unclassified")


def _div(cls, n_sites=1):
    return {"class": cls, "sites": [{"offset": i} for i in range(n_sites)], "divergence": {}, "repro": ""}


def sweep_doc(host=False) -> dict:
    """A sweep report as ``--json`` writes it: 6.11 with a pushf, two syscalls and an
    interaction of three probes; 6.17 with one syscall; 6.11's kernels also a class
    the plot does not know."""
    k611 = {
        "kernel": "6.11",
        "sites": 279,
        "refused": {"a": "ENOTSUPP", "b": "ENOTSUPP"},
        "by_class": {"pushf-tf": 1, "syscall-xol": 2, "unclassified": 1, "later-class": 1},
        "divergences": [
            _div("syscall-xol"),
            _div("pushf-tf"),
            _div("unclassified", 3),
            _div("syscall-xol"),
            _div("later-class"),
        ],
    }
    k617 = {
        "kernel": "6.17",
        "sites": 279,
        "refused": {},
        "by_class": {"syscall-xol": 1},
        "divergences": [_div("syscall-xol")],
    }
    doc = {"program": "guest:hello", "argv": ["hello"], "kernels": [k611, k617]}
    if host:
        doc["host"] = {
            "release": "6.18.4",
            "sites": 270,
            "divergences": [
                {"site": {}, "class": "syscall-xol", "divergence": {}},
                {"site": {}, "class": "unclassified", "divergence": {}},
            ],
            "disagreements": [{"site": {}, "host": None, "model": None}],
        }
    return doc


def svg_tree(path):
    return ET.parse(path).getroot()


def svg_ids(root, prefix: str) -> list[str]:
    return [e.get("id") for e in root.iter() if (e.get("id") or "").startswith(prefix)]


def svg_text(root) -> str:
    return "\n".join("".join(e.itertext()) for e in root.iter() if e.tag.endswith("}text"))


def test_classes_are_the_faithful_ones_then_unclassified_then_others():
    assert sweep_classes(sweep_doc()) == CLASSES + ("later-class",)


def test_series_count_sites_per_class_an_interaction_each_of_its_sites():
    got = sweep_series(sweep_doc())
    x = CLASSES + ("later-class",)
    want = [
        Series("6.11", x, (1, 2, 0, 0, 3, 1), "bar", 0, ("1", "2", "0", "0", "3", "1")),
        Series("6.17", x, (0, 1, 0, 0, 0, 0), "bar", 1, ("0", "1", "0", "0", "0", "0")),
    ]
    assert got == want, f"expected {want}, got {got}"


def test_host_kernel_is_one_more_group():
    got = sweep_series(sweep_doc(host=True))[-1]
    want = Series(
        "host 6.18.4", CLASSES + ("later-class",), (0, 1, 0, 0, 1, 0), "bar", 2, ("0", "1", "0", "0", "1", "0")
    )
    assert got == want, f"expected {want}, got {got}"


def test_a_clean_sweep_has_every_class_at_zero():
    doc = {"program": "guest:hello", "kernels": [{"kernel": "7.3", "sites": 1, "refused": {}, "divergences": []}]}
    assert sweep_series(doc) == [Series("7.3", CLASSES, (0,) * 5, "bar", 0, ("0",) * 5)]


def test_chart_names_the_program_and_what_each_profile_swept():
    chart = sweep_chart(sweep_doc(host=True))
    assert chart.title.splitlines() == [
        "uprobe-emu sweep of guest:hello: probed sites per divergence class",
        "6.11: 279 sites, 2 refused; 6.17: 279 sites, 0 refused; host 6.18.4: 270 sites, 1 disagreeing with the model",
    ], chart.title
    assert (chart.ylabel, chart.categories) == ("sites", CLASSES + ("later-class",))


def test_svg_has_a_bar_per_profile_and_class_and_the_names_as_text(tmp_path):
    out = tmp_path / "s.svg"
    plot_sweep(sweep_doc(), str(out))
    root = svg_tree(out)
    want = sorted(f"bar:{k}:{c}" for k in ("6.11", "6.17") for c in CLASSES + ("later-class",))
    assert sorted(svg_ids(root, "bar:")) == want
    text = svg_text(root)
    missing = [w for w in (*CLASSES, "later-class", "6.11", "6.17", "guest:hello", "sites") if w not in text]
    assert not missing, f"not in the SVG's text: {missing}"


def test_png_is_a_png_of_the_figure_size(tmp_path):
    out = tmp_path / "s.png"
    doc = sweep_doc()
    plot_sweep(doc, str(out))
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", data[:16]
    w, h = figure_size(sweep_chart(doc))
    assert struct.unpack(">II", data[16:24]) == (round(w * DPI), round(h * DPI))


def test_cli_plots_the_json_reports_counts(tmp_path):
    svg, js = tmp_path / "sweep.svg", tmp_path / "sweep.json"
    p = cli(
        "sweep",
        "--kernel",
        "6.11,7.3",
        "--sites",
        "insn",
        "--no-progress",
        "--plot",
        str(svg),
        "--json",
        str(js),
        "guest:hello",
    )
    assert p.returncode == 0, p.stderr.decode()
    assert f"plot: {svg}" in p.stdout.decode()
    series = sweep_series(json.loads(js.read_text()))
    # hello's exit syscall runs in the XOL slot: its rcx and r11 stay in the final registers (the write's are
    # overwritten by the exit's)
    assert [(s.label, s.y) for s in series] == [("6.11", (0, 1, 0, 0, 0)), ("7.3", (0, 1, 0, 0, 0))]
    root = svg_tree(svg)
    assert sorted(svg_ids(root, "bar:")) == sorted(f"bar:{k}:{c}" for k in ("6.11", "7.3") for c in CLASSES)


BLOCK_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None; from emu.console import main; sys.exit(main())"


def test_cli_without_matplotlib_is_one_line_naming_the_fix(tmp_path):
    p = subprocess.run(
        [sys.executable, "-c", BLOCK_MATPLOTLIB, "sweep", "--plot", str(tmp_path / "s.svg"), "guest:hello"],
        capture_output=True,
        timeout=120,
    )
    assert one_line_error(p) == "uprobe-emu: error: --plot needs matplotlib: pip install 'uprobe-emu[plot]'"
    assert p.stdout == b"", p.stdout.decode()  # refused before the sweep ran


@pytest.mark.parametrize(
    "path,msg",
    [
        ("{tmp}/s.gif", "--plot writes a .png, .svg or .pdf file, not '{tmp}/s.gif'"),
        ("{tmp}/s", "--plot writes a .png, .svg or .pdf file, not '{tmp}/s'"),
        ("{tmp}/no/such/dir/s.png", "--plot: cannot write '{tmp}/no/such/dir/s.png': no directory '{tmp}/no/such/dir'"),
        ("{tmp}", "--plot writes a .png, .svg or .pdf file, not '{tmp}'"),
    ],
)
def test_cli_plot_that_cannot_be_made_is_one_line_before_the_sweep(tmp_path, path, msg):
    p = cli("sweep", "--plot", path.format(tmp=tmp_path), "guest:hello")
    assert one_line_error(p) == "uprobe-emu: error: " + msg.format(tmp=tmp_path)
    assert p.stdout == b"", p.stdout.decode()
