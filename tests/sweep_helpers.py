"""Shared by the sweep tests: programs to sweep, a sweep through the Python API, and
a summary of a sweep's findings that two runners must agree on."""

from __future__ import annotations

from emu.frontends.sweep.case import Program
from emu.frontends.sweep.driver import Sweeper
from emu.frontends.sweep.runners import SerialRunner

# The built-in guests with arguments/stdin that run every part of them
GUEST_ARGS = {
    "fib": (["fib", "30"], b""),
    "echo": (["echo"], b"first line\nsecond line, a little longer\n\nlast"),
    "hello": (["hello"], b""),
    "exit42": (["exit42"], b""),
    "segv": (["segv"], b""),
    "uprobe_targets": (["uprobe_targets", "4"], b""),
    # the nop, push, nop5, nop10 and usdt-nop5 trigger loops, with a warm-up phase
    "bench_trigger": (["bench_trigger", "2", "3", "2"], b""),
}


def guest_program(name: str, argv=None, stdin=None) -> Program:
    a, s = GUEST_ARGS.get(name, ([name], b""))
    return Program.of(f"guest:{name}", argv or a, s if stdin is None else stdin)


def sweep(program, kernel="6.18", runner=None, close=True, **kw):
    runner = runner or SerialRunner()
    sw_kw = {k: kw.pop(k) for k in ("store", "batch") if k in kw}
    try:
        return Sweeper(program, runner, **sw_kw).sweep(kernel, **kw)
    finally:
        if close:
            runner.close()


def findings(result) -> list:
    """What a sweep found, runner-independent: per divergence its class, sites and the
    first point where the runs part."""
    return [(d.cls, tuple(s.key for s in d.sites), d.divergence.first) for d in result.divergences]


def unclassified(result) -> list:
    return [(d.cls, [s.describe() for s in d.sites], d.divergence.first) for d in result.unclassified]
