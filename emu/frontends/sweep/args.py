"""``uprobe-emu sweep``'s options; the command is :func:`emu.frontends.sweep.cli.cmd_sweep`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from emu.frontends.options import add_program_command, count, cpus_count, lazy_command, seconds

if TYPE_CHECKING:
    from emu.frontends.options import SubParsers


def add_cli(sub: SubParsers, add_machine_options: Callable[[argparse.ArgumentParser], None]) -> None:
    p = add_program_command(
        sub,
        "sweep",
        help="probe every instruction (function, return) and report where probing changes what the program does",
        description="Run PROGRAM unprobed, then with do-nothing probes on every site, many "
        "per run, bisecting only the batches whose run differs (exit status or "
        "signal, stdout/stderr, syscalls with arguments, final registers, "
        "writable memory). Exit 1 when a divergence is not a known "
        "kernel-faithful one.",
    )
    p.add_argument(
        "--sites",
        default="insn",
        metavar="insn|func|ret|FILE",
        help="every instruction boundary of .text (default), every function "
        "entry, every function's return probe, or the sites listed in FILE "
        "([PATH:]0xOFF or [PATH:]SYMBOL[+OFF], %%return for a return probe)",
    )
    p.add_argument(
        "--site",
        action="append",
        default=[],
        metavar="SITE",
        help="sweep just this site (repeatable; the syntax of a --sites FILE line)",
    )
    p.add_argument("--libraries", action="store_true", help="also the libraries (and ld.so) the program maps")
    p.add_argument(
        "--kernel",
        default="latest",
        metavar="A,B,...",
        help="kernel profile(s), comma-separated (default latest; with --host: the host's release)",
    )
    p.add_argument("--jobs", "-j", type=count, default=1, metavar="N", help="run cases on a local pool of N processes")
    p.add_argument(
        "--ray",
        metavar="ADDRESS|auto",
        help="run cases on a Ray cluster (pip install 'uprobe-emu[ray]'); auto: the "
        "cluster `ray start` made here; local: start a Ray on this machine",
    )
    p.add_argument(
        "--batch",
        type=count,
        default=0,
        metavar="N",
        help="sites per first-round run (default: the sites shared out over the workers)",
    )
    p.add_argument(
        "--host",
        action="store_true",
        help="also sweep under the host kernel's uprobes through tracefs (root; "
        "runs PROGRAM UNSANDBOXED AS ROOT) and compare with the model",
    )
    p.add_argument("--json", metavar="FILE", help="write the whole result as JSON")
    p.add_argument("--jsonl", metavar="FILE", help="stream each case's result to FILE")
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="also draw the probed sites per divergence class, a bar per kernel profile, to FILE "
        "(.png, .svg or .pdf; needs matplotlib: pip install 'uprobe-emu[plot]')",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the sweep recorded in --jsonl FILE: recorded cases are not rerun",
    )
    p.add_argument("--stdin", metavar="FILE")
    p.add_argument("--sysroot", metavar="DIR", default="/")
    p.add_argument("--seed", type=int, default=0, metavar="N")
    p.add_argument("--cpus", type=cpus_count, default=1, metavar="N", help="CPUs of each run's machine (default 1)")
    p.add_argument(
        "--timeout",
        type=seconds,
        default=120.0,
        metavar="S",
        help="wall-clock limit of each run (default 120; 0 = none)",
    )
    p.add_argument(
        "--max-insns", type=count, default=0, metavar="N", help="exact instruction budget of each run (0 = none)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=lazy_command("emu.frontends.sweep.cli", "cmd_sweep"))
