"""One shape for "the host and the model print the same thing" guests."""

from __future__ import annotations

import subprocess

from emu import Machine


def assert_native_then_model(exe: str, mode: str, expected: bytes) -> None:
    """Run ``exe mode`` natively (it must print ``expected``: the host pins the spec),
    then in the model, which must exit 0 with the same bytes."""
    native = subprocess.run([exe, mode], capture_output=True, timeout=60)
    assert native.stdout == expected, f"the host disagrees with the spec: {native.stdout!r}"
    r = Machine.from_elf(exe, argv=[exe, mode]).run(timeout=60)
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, expected), \
        f"expected {expected!r}, got {r.stdout!r} ({r.describe()})"
