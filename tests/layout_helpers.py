"""Native runs with address-space randomization off (``setarch -R``: the
ADDR_NO_RANDOMIZE personality), the reference for the loader's layout."""

from __future__ import annotations

import ctypes
import subprocess

ADDR_NO_RANDOMIZE = 0x0040000


def _no_randomize() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.personality(ctypes.c_ulong(ADDR_NO_RANDOMIZE)) == -1:
        raise OSError(ctypes.get_errno(), "personality(ADDR_NO_RANDOMIZE)")


def run_native_norandom(argv: list[str], env: list[str]) -> subprocess.CompletedProcess:
    """``argv`` run natively as ``setarch -R`` runs it, with exactly ``env``."""
    return subprocess.run(
        argv, env=dict(e.split("=", 1) for e in env), capture_output=True, timeout=60, preexec_fn=_no_randomize
    )
