"""A statically linked libbpf tool run inside the guest: guest_programs/bpf/malloc_sizes.c
opens malloc_sizes.bpf.o, loads it (libbpf's feature probes, BTF, maps, programs),
attaches two uprobes through the uprobe perf PMU and BPF links, streams free() records
through a ring buffer it mmap()s and waits on with epoll, then reads the hash map of
malloc size classes.  The same command runs natively (which needs root: loading BPF
programs does) and in the model; both must print the same free records and size
classes."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from emu import Machine

BPF_DIR = Path(__file__).parent.parent / "guest_programs" / "bpf"
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


def _gcc(*args: str) -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is required to build the libbpf tool")
    res = subprocess.run([gcc, *args], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(f"gcc failed: gcc {' '.join(args)}\n{res.stderr}")


@pytest.fixture(scope="session")
def tool(build_bpf, tmp_path_factory):
    """(tool, object, target): the tool linked statically against libbpf 1.1, its BPF
    object, and the program it runs."""
    out = tmp_path_factory.mktemp("bpftool")
    exe, target = out / "malloc_sizes", out / "malloc_target"
    _gcc("-O2", "-static", "-o", str(exe), str(BPF_DIR / "malloc_sizes.c"), "-lbpf", "-lelf", "-lz")
    _gcc("-O1", "-o", str(target), str(BPF_DIR / "malloc_target.c"))
    return str(exe), build_bpf("malloc_sizes.bpf.c"), str(target)


def argv_of(tool) -> list[str]:
    exe, obj, target = tool
    return [exe, obj, LIBC, target]


@pytest.fixture(scope="session")
def native(tool, host_tracefs):
    """The tool on the host kernel: like every host-kernel comparison of the suite, only
    where the host's tracing is available (root, a tracefs mount)."""
    if host_tracefs is None:
        pytest.skip("needs root and a tracefs mount (the host kernel's tracing)")
    p = subprocess.run(argv_of(tool), capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode().splitlines()


@pytest.fixture(scope="session")
def model(tool):
    argv = argv_of(tool)
    r = Machine.from_elf(argv[0], argv=argv, uid=0, gid=0).run(timeout=120)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe() + "\n" + r.stderr.decode()
    return r.stdout.decode().splitlines()


def records(lines: list[str], prefix: str) -> list[str]:
    return [ln for ln in lines if ln.startswith(prefix)]


def test_the_tool_sees_every_free_record_natively_seen(native, model):
    want = records(native, "free #")
    assert want and records(model, "free #") == want


def test_the_size_classes_match(native, model):
    want = records(native, "class ")
    assert want and records(model, "class ") == want


def test_the_child_exit_status_matches(native, model):
    assert records(model, "exit ") == records(native, "exit ") == ["exit 0"]


def test_the_whole_output_matches(native, model):
    assert model == native


def test_the_command_line_runs_it_as_root(tool, native):
    """``uprobe-emu run --uid 0 TOOL ...``: the same output through the CLI."""
    p = subprocess.run(["uprobe-emu", "run", "--uid", "0", *argv_of(tool)], capture_output=True, timeout=120)
    assert (p.returncode, p.stdout.decode().splitlines()) == (0, native), p.stderr.decode()


def test_without_root_libbpf_cannot_load(tool):
    """As an unprivileged user bpf() is EPERM: the tool reports it and fails.  (The
    files are copied where that user may read them.)"""
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o755)
        copies = []
        for path in tool:
            copies.append(shutil.copy(path, d))
            os.chmod(copies[-1], 0o755)
        argv = [copies[0], copies[1], LIBC, copies[2]]
        r = Machine.from_elf(argv[0], argv=argv, uid=1000, gid=1000).run(timeout=120)
    assert (r.exit_code, b"Operation not permitted" in r.stderr) == (1, True), r.stderr.decode()
