"""``uprobe-emu diff -b OBJ``: a BPF object on the host kernel and in the model, compared
by what its programs recorded (maps as dicts, ring buffer records in order), the exit
status and stdout.  The native half loads BPF programs, which needs root."""

from __future__ import annotations

import subprocess

import pytest

from emu.frontends.hostdiff_bpf import BpfRecord, compare

ATTACH = ["--bpf-attach", "on_malloc=libc:malloc", "--bpf-attach", "on_free=libc:free"]


def _record(**kw) -> BpfRecord:
    base = dict(status="exit 0", stdout=b"", pid=1000, maps={"sizes": {b"\x01": b"\x02"}}, rings={"frees": [b"ab"]})
    base.update(kw)
    return BpfRecord(**base)


@pytest.mark.parametrize(
    "model,lines",
    [
        (_record(), []),
        (_record(status="exit 1"), ["status: host exit 0, model exit 1"]),
        (_record(stdout=b"x"), ["stdout: host b'', model b'x'"]),
        (_record(maps={"sizes": {b"\x01": b"\x03"}}), ["map sizes key 01: host 02, model 03"]),
        (_record(maps={"sizes": {}}), ["map sizes key 01: host 02, model missing"]),
        (_record(rings={"frees": [b"ac"]}), ["ringbuf frees record 0: host 61 62, model 61 63"]),
        (
            _record(rings={"frees": [b"ab", b"cd"]}),
            ["ringbuf frees record 1: host none, model 63 64", "ringbuf frees: host 1 records, model 2"],
        ),
    ],
)
def test_compare_names_each_difference(model, lines):
    assert compare(_record(), model) == lines


@pytest.fixture(scope="module")
def as_root(host_tracefs):
    """diff's host side: only where the host's tracing is available (root, tracefs)."""
    if host_tracefs is None:
        pytest.skip("needs root and a tracefs mount (the host kernel's tracing)")


def _diff(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["uprobe-emu", "diff", *argv], capture_output=True, text=True, timeout=180)


def test_the_malloc_tool_agrees_with_the_host(as_root, build_bpf, malloc_target):
    """The same counts per size class and the same free() records - pids and heap
    addresses included - on the host and in the model."""
    p = _diff("-b", build_bpf("malloc_sizes.bpf.c"), *ATTACH, malloc_target)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("agree: host ") and "exit 0, 2 maps, 12 ring buffer records" in p.stdout, p.stdout


def test_only_the_named_programs_attach_on_either_side(as_root, build_bpf, malloc_target):
    """With on_free left out, neither side records a free: the ring buffers agree empty."""
    p = _diff("-b", build_bpf("malloc_sizes.bpf.c"), "--bpf-attach", "on_malloc=libc:malloc", malloc_target)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "exit 0, 2 maps, 0 ring buffer records" in p.stdout, p.stdout


@pytest.mark.parametrize(
    "argv,message",
    [
        ([], "diff needs probes: -e SPEC, or a BPF object -b OBJ"),
        (["-b", "OBJ", "-e", "libc:malloc"], "diff compares either -e probes or a BPF object (-b), not both"),
        (["--bpf-set", "a=1", "-e", "libc:malloc"], "--bpf-attach and --bpf-set need a BPF object (-b OBJ)"),
        (["-b", "OBJ"], "no program to attach (name targets with --bpf-attach PROG=TARGET)"),
    ],
)
def test_bad_diff_bpf_arguments_are_one_line_errors(as_root, build_bpf, malloc_target, argv, message):
    obj = build_bpf("malloc_sizes.bpf.c")
    p = _diff(*[obj if a == "OBJ" else a for a in argv], malloc_target)
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
