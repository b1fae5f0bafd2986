"""Run the installed ``uprobe-emu`` command the way a user does."""

from __future__ import annotations

import shutil
import subprocess


def cli(*args: str, input: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    exe = shutil.which("uprobe-emu")
    assert exe, "uprobe-emu is not installed (pip install .)"
    return subprocess.run([exe, *args], input=input, capture_output=True, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """Exit 2, one line on stderr, no traceback; returns the line."""
    err = proc.stderr.decode()
    assert proc.returncode == 2, (proc.returncode, err)
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]
