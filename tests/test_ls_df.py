"""Coreutils ``ls -la /etc`` and ``df /`` (dynamically linked, run through the CLI) print
what they print natively.  ls reads every entry's xattrs (lgetxattr security.selinux,
getxattr of the POSIX ACLs) and statfs; df reads statfs of / and the mount table.

ls prints "Mmm dd HH:MM" for a file less than six months old by *its* clock and
"Mmm dd  YYYY" otherwise: with the guest's clock started at the host's (``--clock
host``) the time column matches too; with the model's fixed clock it is the one column
that differs, and only in that form.  df's numbers are the host disk's at the time of the call: the model's output
is compared with native runs just before and after it, retried while the disk changes
in between."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

DATE = re.compile(rb"\b[A-Z][a-z]{2} [ \d]\d (?:\d\d:\d\d| \d{4}) ")


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} (coreutils) is required")
    return path


def emu(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["uprobe-emu", "run", *argv], capture_output=True, timeout=300)


def test_ls_la_etc_matches_native_with_the_hosts_clock():
    ls = tool("ls")
    want = subprocess.run([ls, "-la", "/etc"], capture_output=True, timeout=60)
    got = emu("--clock", "host", ls, "-la", "/etc")
    assert (got.returncode, got.stderr) == (0, b""), got.stderr.decode()
    assert got.stdout == want.stdout, f"expected\n{want.stdout.decode()}\ngot\n{got.stdout.decode()}"


def test_ls_la_etc_differs_only_in_the_time_column_on_the_fixed_clock():
    ls = tool("ls")
    want = subprocess.run([ls, "-la", "/etc"], capture_output=True, timeout=60)
    got = emu(ls, "-la", "/etc")
    assert (got.returncode, got.stderr) == (0, b""), got.stderr.decode()
    assert DATE.sub(b"DATE ", got.stdout) == DATE.sub(b"DATE ", want.stdout), (
        f"expected\n{want.stdout.decode()}\ngot\n{got.stdout.decode()}"
    )


def test_df_root_matches_native():
    df = tool("df")
    for _ in range(5):
        before = subprocess.run([df, "/"], capture_output=True, timeout=60).stdout
        got = emu(df, "/")
        after = subprocess.run([df, "/"], capture_output=True, timeout=60).stdout
        if before == after:
            break
    assert (got.returncode, got.stderr) == (0, b""), got.stderr.decode()
    assert got.stdout in (before, after), f"expected\n{before.decode()}\ngot\n{got.stdout.decode()}"
