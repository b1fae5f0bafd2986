"""``bench --consumer bpf``: the kernel bench's own consumer, a BPF counting program built
from guest_programs/bpf/bench_count.bpf.c, on a uprobe perf event.

Its events per iteration are exact, and they are the program-only trace event's: one
trap, one consumer pass, and the args buffer filled only by a kernel without the lazy
buffer (6.9); the hits are what the BPF program's per-CPU counters say."""

from __future__ import annotations

import json
import subprocess

import pytest

from emu.frontends.bench.measure import count_events
from emu.frontends.bench.scenarios import SCENARIOS, ColumnSpec

CASES = [
    ("6.9", "uprobe-nop", 1),
    ("6.10", "uprobe-nop", 0),
    ("6.18", "uprobe-nop", 0),
    ("6.9", "uretprobe-nop", 1),
    ("6.11", "uretprobe-nop", 0),
    ("7.3", "uretprobe-nop", 0),
]


@pytest.fixture(scope="module")
def counted():
    out = {}
    for kernel, scen, _ in CASES:
        for consumer in ("bpf", "program"):
            out[kernel, scen, consumer] = count_events(SCENARIOS[scen], ColumnSpec(kernel), consumer)
    return out


@pytest.mark.parametrize("kernel,scen,fills", CASES)
def test_the_args_buffer_is_filled_only_without_the_lazy_buffer(counted, kernel, scen, fills):
    r = counted[kernel, scen, "bpf"]
    assert (r["status"], r["per_iter"]["args_buffer_fills"]) == ("ok", fills), r


@pytest.mark.parametrize("kernel,scen,fills", CASES)
def test_the_bpf_program_counts_one_hit_per_iteration(counted, kernel, scen, fills):
    r = counted[kernel, scen, "bpf"]
    assert (r["hits_per_iter"], r["exact"]) == (1, True), r


@pytest.mark.parametrize("kernel,scen,fills", CASES)
def test_the_events_are_the_program_only_trace_events(counted, kernel, scen, fills):
    """The perf-event path costs what a program-only tracefs event costs: the same traps,
    syscalls, consumer passes and return instances."""
    bpf, prog = counted[kernel, scen, "bpf"], counted[kernel, scen, "program"]
    assert (bpf["per_iter"], bpf["insns_per_iter"]) == (prog["per_iter"], prog["insns_per_iter"])


def test_the_cli_reports_the_bpf_consumer(tmp_path):
    out = tmp_path / "bench.json"
    p = subprocess.run(
        [
            "uprobe-emu",
            "bench",
            "--consumer",
            "bpf",
            "--iterations",
            "200",
            "--repeat",
            "1",
            "--warmup",
            "2",
            "--no-growth",
            "--no-checks",
            "--kernel",
            "6.9",
            "--vs",
            "6.18",
            "--json",
            str(out),
            "uprobe-nop",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    report = json.loads(out.read_text())
    assert report["config"]["consumer"] == "bpf", report["config"]
    results = report["scenarios"][0]["results"]
    fills = {col: r["per_iter"]["args_buffer_fills"] for col, r in results.items()}
    assert fills == {"6.9": 1, "6.18": 0}, fills
