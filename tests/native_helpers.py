"""One shape for "the host and the model print the same thing" guests."""

from __future__ import annotations

import re
import subprocess

from emu import Machine

_CENTISECONDS = re.compile(rb"\b(rem_cs|left_cs)=(\d+)")


def _within_host_slack(native: bytes, expected: bytes, slack_cs: int) -> bool:
    """``native`` equals ``expected`` but for time-left values (``rem_cs=``/``left_cs=``)
    up to ``slack_cs`` below the expected ones: on a loaded host the interrupting
    signal comes late.  The model, on its virtual clock, must be exact."""
    want = {m.group(1): int(m.group(2)) for m in _CENTISECONDS.finditer(expected)}

    def pin(m):
        name, got = m.group(1), int(m.group(2))
        ok = name in want and want[name] - slack_cs <= got <= want[name]
        return b"%s=%d" % (name, want[name] if ok else got)

    return _CENTISECONDS.sub(pin, native) == expected


def assert_native_then_model(exe: str, mode: str, expected: bytes, *, slack_cs: int = 0) -> None:
    """Run ``exe mode`` natively (it must print ``expected``: the host pins the spec;
    ``slack_cs``: see :func:`_within_host_slack`), then in the model, which must exit 0
    with exactly the expected bytes."""
    native = subprocess.run([exe, mode], capture_output=True, timeout=60)
    assert _within_host_slack(native.stdout, expected, slack_cs), f"the host disagrees with the spec: {native.stdout!r}"
    r = Machine.from_elf(exe, argv=[exe, mode]).run(timeout=60)
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, expected), (
        f"expected {expected!r}, got {r.stdout!r} ({r.describe()})"
    )
