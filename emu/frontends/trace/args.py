"""``uprobe-emu trace``'s options; the command is :func:`emu.frontends.trace.cli.cmd_trace`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from emu.frontends.options import add_program_command, count, lazy_command

if TYPE_CHECKING:
    from emu.frontends.options import SubParsers

# The --format names, in the order --help lists them (emu.frontends.trace.formats has a
# writer for each).
FORMAT_NAMES = ("text", "jsonl", "tenet", "chrome")


def add_cli(sub: SubParsers, add_machine_options: Callable[[argparse.ArgumentParser], None]) -> None:
    p = add_program_command(
        sub,
        "trace",
        help="trace every instruction, with the uprobes model's work interleaved",
        description="Run PROGRAM [ARGS...] and write an instruction trace: objdump-style "
        "lines with the registers each instruction changed and the kernel "
        "model's events (text), JSON lines, Tenet deltas, or Chrome trace "
        "events (Perfetto).  Options come before PROGRAM; every word after it goes "
        "to the program.",
    )
    add_machine_options(p)
    p.add_argument(
        "--from", dest="start", metavar="SYMBOL", help="start tracing when the guest reaches SYMBOL[+OFF] or an address"
    )
    p.add_argument(
        "--count", type=count, metavar="N", help="trace at most N instructions (the guest then runs on untraced)"
    )
    p.add_argument(
        "--format", dest="fmt", choices=FORMAT_NAMES, default="text", help="text (default), jsonl, tenet or chrome"
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the trace here (default stdout)")
    p.add_argument("--mem", action="store_true", help="also record memory writes (always on for tenet)")
    p.add_argument(
        "--seek", type=count, metavar="N", help="run (recorded) to instruction N first; the trace starts there"
    )
    p.add_argument(
        "--last-write",
        dest="last_write",
        action="append",
        default=[],
        metavar="REG|ADDR[:SIZE]",
        help="print which instruction last wrote the register or bytes before the --seek "
        "point (replayed from checkpoints; repeatable)",
    )
    p.add_argument(
        "--checkpoint-interval",
        type=count,
        default=None,
        metavar="N",
        help="instructions between checkpoints for --seek/--last-write",
    )
    p.set_defaults(func=lazy_command("emu.frontends.trace.cli", "cmd_trace"))
