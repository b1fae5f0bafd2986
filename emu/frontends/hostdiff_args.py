"""``uprobe-emu diff``'s options; the command is :func:`emu.frontends.hostdiff.cmd_diff`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from emu.frontends.options import add_bpf_options, add_program_command, count, lazy_command, seconds

if TYPE_CHECKING:
    from emu.frontends.options import SubParsers


def env_assignment(text: str) -> str:
    """``--env VAR=VAL``: a variable name (no ``=``, not empty) and its value."""
    name, sep, _ = text.partition("=")
    if not sep or not name or "\0" in text:
        raise argparse.ArgumentTypeError(f"VAR=VAL, not {text!r}")
    return text


def add_cli(sub: SubParsers, add_machine_options: Callable[[argparse.ArgumentParser], None]) -> None:
    p = add_program_command(
        sub,
        "diff",
        help="run a guest under the host kernel's uprobes and the model; compare",
        description="Run PROGRAM natively with the probes created through tracefs "
        "and in the model under the matching kernel profile, then "
        "compare exit status, stdout and the ordered event stream. "
        "The native side needs root and runs PROGRAM UNSANDBOXED AS "
        "ROOT: diff only programs you trust. Host probes, the trace "
        "instance and any tracefs mount of ours are removed on exit, "
        "error, Ctrl-C and fatal signals; after a SIGKILL the next "
        "run removes them. Only PROGRAM and its descendants are recorded. "
        "With -b OBJ, a BPF object's programs are the probes: their maps and ring buffer records "
        "are compared instead of the event stream. "
        "Exit status: 0 the runs agree, 1 they diverge (exit status, stdout, stderr or "
        "events), 2 an error, 3 the host trace lost events (its buffer overran: the event "
        "streams are not compared; the rest agrees).",
    )
    p.add_argument(
        "-e",
        "--event",
        action="append",
        default=[],
        metavar="SPEC",
        help="probe spec (tracefs p:/r: with fetchargs, PATH:SYMBOL[%%return], ...); or -b",
    )
    add_bpf_options(p)
    p.add_argument("--kernel", default="auto", metavar="auto|V", help="model profile; auto = the host's release")
    p.add_argument("--stdin", metavar="FILE")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        type=env_assignment,
        metavar="VAR=VAL",
        help="add VAR=VAL to the environment of both runs (repeatable; after GLIBC_TUNABLES, so it may replace it)",
    )
    p.add_argument(
        "--like-host",
        action="store_true",
        help="line up the other way: the model takes this host's resource limits and CPU count "
        "(default: the native program gets the model's)",
    )
    p.add_argument(
        "--glibc-tunables",
        default="auto",
        metavar="auto|none|VALUE",
        help="GLIBC_TUNABLES of both runs: auto (default: the host's glibc is told the emulated CPU's features, "
        "preferred flags and cache sizes, so both pick the same string-function and memmove variants), "
        "none, or this value",
    )
    p.add_argument(
        "--clock",
        default="host",
        metavar="host|fixed|SECONDS",
        help="the model's CLOCK_REALTIME at start: host (default: this host's time when the model starts, so "
        "both runs date files alike), fixed (the model's 2026-01-01) or seconds since the epoch",
    )
    p.add_argument("--timeout", type=seconds, default=60.0, metavar="S")
    p.add_argument(
        "--max-insns", type=count, default=0, metavar="N", help="exact instruction budget of the model run (0 = none)"
    )
    p.add_argument(
        "--buffer-kb",
        type=count,
        default=0,
        metavar="KB",
        help="per-CPU trace buffer of the native run (0 = sized to the model run's events); "
        "at most a quarter of the available memory",
    )
    p.set_defaults(func=lazy_command("emu.frontends.hostdiff", "cmd_diff"))
