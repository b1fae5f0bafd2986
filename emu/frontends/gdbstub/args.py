"""``uprobe-emu gdbserver``'s options; the command is :func:`emu.frontends.gdbstub.cli.cmd_gdbserver`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from emu.debug import DEFAULT_STEPPER_INTERVAL
from emu.frontends.options import add_events_option, add_program_command, lazy_command, port_number

if TYPE_CHECKING:
    from emu.frontends.options import SubParsers


def add_cli(sub: SubParsers, add_machine_options: Callable[[argparse.ArgumentParser], None]) -> None:
    p = add_program_command(
        sub,
        "gdbserver",
        help="serve a guest to gdb (target remote :PORT)",
        description="Load PROGRAM under the uprobes model and wait for gdb on "
        "127.0.0.1:PORT; gdb's breakpoints are kept apart from uprobes. "
        "After gdb detaches the guest runs to its end and the exit "
        "code is its own, as with run.",
    )
    add_machine_options(p)
    add_events_option(p)
    p.add_argument("--port", type=port_number, default=1234, metavar="N")
    p.add_argument("--host", default="127.0.0.1", help="listen address (loopback by default)")
    p.add_argument(
        "--checkpoint-interval",
        type=int,
        default=DEFAULT_STEPPER_INTERVAL,
        metavar="N",
        help="record for gdb's reverse-stepi/reverse-continue with a checkpoint every N instructions (0: no recording)",
    )
    p.set_defaults(func=lazy_command("emu.frontends.gdbstub.cli", "cmd_gdbserver"))
