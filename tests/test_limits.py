"""Resource limits, personality and other processes' groups (kernel_model/kernel/resource.py,
kernel_model/kernel/sys_pgrp.py) against native runs of tests/c/rlimits.c.

The native side starts with the model's RLIMIT_NOFILE (the kernel's INIT_RLIMITS:
1024/4096) via util-linux's prlimit, and runs as uid 1000 via setpriv where the case is
about privilege (the suite runs as root, as CI does)."""

from __future__ import annotations

import os
import subprocess

import pytest

from emu import Machine
from kernel_model.kernel.resource import RLIMIT_NOFILE, RLIMIT_SIGPENDING, init_rlimits


@pytest.fixture(scope="module")
def exe(build_c):
    return build_c("rlimits.c", "-static")


def _native(exe: str, mode: str, uid: int | None = None) -> subprocess.CompletedProcess:
    cmd = ["prlimit", "--nofile=1024:4096"]
    if uid is not None:
        assert os.geteuid() == 0, "an unprivileged native reference run needs root (setpriv)"
        cmd += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    return subprocess.run(cmd + [exe, mode], capture_output=True, timeout=60)


@pytest.mark.parametrize("mode, uid", [("nofile", None), ("unprivileged", 1000), ("persona", None), ("pgid", None)])
def test_matches_native(exe, mode, uid):
    native = _native(exe, mode, uid)
    assert native.returncode == 0, native
    kw = {} if uid is None else {"uid": uid, "gid": uid, "groups": []}
    r = Machine.from_elf(exe, argv=[exe, mode], **kw).run(timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    assert r.stdout == native.stdout, f"native:\n{native.stdout.decode()}\nmodel:\n{r.stdout.decode()}"


def test_nofile_soft_limit_bounds_new_descriptors(exe):
    """Pinned, not only compared: the EBADF of dup2 at the limit is what setrlimit buys."""
    r = Machine.from_elf(exe, argv=[exe, "nofile"]).run(timeout=60)
    assert b"dup2 to 99: 99 errno=0\ndup2 to 100: -1 errno=9\n" in r.stdout, r.stdout


@pytest.mark.parametrize("mem_total, threads", [(4 << 30, 16384), (1 << 30, 4096)])
def test_process_count_limits_follow_the_modeled_ram(mem_total, threads):
    """fork_init: max_threads = RAM / (8 * THREAD_SIZE); RLIMIT_SIGPENDING is half."""
    limits = init_rlimits(mem_total)
    assert limits[RLIMIT_SIGPENDING] == (threads, threads), limits[RLIMIT_SIGPENDING]
    assert limits[RLIMIT_NOFILE] == (1024, 4096)


def test_busybox_ulimit_n_takes_effect():
    script = "ulimit -n 100; ulimit -n; ulimit -Hn"
    native = subprocess.run(
        ["prlimit", "--nofile=1024:4096", "/bin/busybox", "sh", "-c", script], capture_output=True, timeout=60
    )
    r = Machine.from_elf("/bin/busybox", argv=["busybox", "sh", "-c", script]).run(timeout=60)
    assert (r.stdout, r.exit_code) == (native.stdout, native.returncode) == (b"100\n100\n", 0), (
        r.stdout,
        native.stdout,
    )
