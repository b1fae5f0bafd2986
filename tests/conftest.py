"""Shared fixtures: gcc-built guests compiled into a session temp dir.

gcc is a hard requirement of the suite: a missing gcc fails the tests that need it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

C_DIR = Path(__file__).parent / "c"


def _gcc() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is required to build the C guests (install gcc)")
    return gcc


@pytest.fixture(scope="session")
def build_c(tmp_path_factory):
    """build_c("name.c", "-static", ...) -> path of the compiled guest (cached)."""
    out_dir = tmp_path_factory.mktemp("cguests")
    cache: dict = {}

    def build(source: str, *flags: str, name: str | None = None) -> str:
        key = (source, flags)
        if key not in cache:
            src = C_DIR / source
            exe = out_dir / (name or (Path(source).stem + "".join(f.replace("-", "_") for f in flags)))
            cmd = [_gcc(), "-O1", "-g", "-fno-omit-frame-pointer", *flags, "-o", str(exe), str(src)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                pytest.fail(f"gcc failed: {' '.join(cmd)}\n{res.stderr}")
            cache[key] = str(exe)
        return cache[key]

    return build


@pytest.fixture(scope="session")
def host_tracefs(tmp_path_factory):
    """A tracefs mount that stays for the session, as most hosts have one (systemd
    mounts /sys/kernel/tracing): the existing one, else one mounted here (as root) and
    unmounted at the end.  The tests of diff's and sweep's own private mounts unmount
    every tracefs in a mount namespace of their own, so they still see none."""
    import os

    from emu.frontends import hostdiff

    found = hostdiff.find_tracefs()
    if found is not None or os.geteuid() != 0:
        yield found
        return
    path = tmp_path_factory.mktemp("tracefs")
    if subprocess.run(["mount", "-t", "tracefs", "nodev", str(path)], capture_output=True).returncode != 0:
        yield None
        return
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", str(path)], capture_output=True)


@pytest.fixture(scope="session")
def build_bpf(tmp_path_factory):
    """build_bpf("name.bpf.c", *clang_flags) -> path of the BPF object built from
    guest_programs/bpf with clang (``emu.bpf_build``); a missing clang fails the test."""
    from emu.probes.bpf_build import BpfBuildError, build, source_path

    out_dir = tmp_path_factory.mktemp("bpfobjs")

    def build_one(source: str, *flags: str) -> str:
        try:
            return str(build(source_path(source), out_dir, *flags))
        except BpfBuildError as e:
            pytest.fail(str(e))

    return build_one


@pytest.fixture(scope="session")
def malloc_target(tmp_path_factory):
    """guest_programs/bpf/malloc_target.c built (dynamic, -O1): the malloc_sizes tool's target."""
    out = tmp_path_factory.mktemp("malloc_target") / "malloc_target"
    src = Path(__file__).parent.parent / "guest_programs" / "bpf" / "malloc_target.c"
    res = subprocess.run([_gcc(), "-O1", "-o", str(out), str(src)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(f"gcc failed on {src.name}:\n{res.stderr}")
    return str(out)
