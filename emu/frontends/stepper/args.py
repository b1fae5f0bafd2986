"""``uprobe-emu step``'s options; the command is :func:`emu.frontends.stepper.shell.cmd_step`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from emu.debug import DEFAULT_STEPPER_INTERVAL
from emu.frontends.options import add_events_option, add_program_command, lazy_command

if TYPE_CHECKING:
    from emu.frontends.options import SubParsers


def add_cli(sub: SubParsers, add_machine_options: Callable[[argparse.ArgumentParser], None]) -> None:
    p = add_program_command(
        sub,
        "step",
        help="step through a guest with gdb-like commands",
        description="Interactive instruction stepper (PROGRAM: an ELF path or guest:NAME). "
        "Commands come from -x FILE, then from stdin (prompt only on a terminal); "
        "'help' lists them.  Stepping executes through the uprobes kernel model's "
        "own states (int3 trap, out-of-line step, trampolines): a probed "
        "instruction is one step.  --max-insns and --timeout bound each free run "
        "(c, finish, until, ni over a call).  Exit code 0 (2 for a usage or input "
        "error).",
    )
    add_machine_options(p)
    add_events_option(p, "stdout")
    p.add_argument(
        "-x",
        "--command",
        dest="scripts",
        action="append",
        default=[],
        metavar="FILE",
        help="run the commands in FILE first (repeatable)",
    )
    p.add_argument(
        "--checkpoint-interval",
        type=int,
        default=DEFAULT_STEPPER_INTERVAL,
        metavar="N",
        help="record for reverse-stepi/-step/-continue with a checkpoint every N instructions "
        f"(default {DEFAULT_STEPPER_INTERVAL}; 0: no recording)",
    )
    p.set_defaults(func=lazy_command("emu.frontends.stepper.shell", "cmd_step"))
