"""``uprobe-emu gdbserver``: load a program and serve it to gdb."""

from __future__ import annotations

import sys

from emu.debug import reverse
from emu.frontends.cli import add_cli_events, add_events_option, events_output, make_machine, port_number, report_result
from emu.frontends.gdbstub.stub import serve_once
from kernel_model.errors import InputError


def add_cli(sub, add_machine_options) -> None:
    p = sub.add_parser("gdbserver", usage="%(prog)s [OPTIONS] [--] PROGRAM [ARGS...]",
                       help="serve a guest to gdb (target remote :PORT)",
                       description="Load PROGRAM under the uprobes model and wait for gdb on "
                                   "127.0.0.1:PORT; gdb's breakpoints are kept apart from uprobes. "
                                   "After gdb detaches the guest runs to its end and the exit "
                                   "code is its own, as with run.")
    p.add_argument("program", metavar="PROGRAM")
    p.add_argument("args", nargs="*", metavar="ARGS")
    add_machine_options(p)
    add_events_option(p)
    p.add_argument("--port", type=port_number, default=1234, metavar="N")
    p.add_argument("--host", default="127.0.0.1", help="listen address (loopback by default)")
    p.add_argument("--checkpoint-interval", type=int, default=reverse.DEFAULT_STEPPER_INTERVAL, metavar="N",
                   help="record for gdb's reverse-stepi/reverse-continue with a checkpoint every N "
                        "instructions (0: no recording)")
    p.set_defaults(func=cmd_gdbserver)


def cmd_gdbserver(args) -> int:
    m = make_machine(args)
    if args.checkpoint_interval < 0:
        raise InputError(f"--checkpoint-interval must be >= 0, not {args.checkpoint_interval}")
    with events_output(args) as out:
        if args.event:
            add_cli_events(m, args, out)
        result = serve_once(m, args.host, args.port,
                            ready=lambda port: print(f"uprobe-emu: listening for gdb on {args.host}:{port}",
                                                     file=sys.stderr, flush=True),
                            max_insns=args.max_insns or None, timeout=args.timeout or None,
                            checkpoint_interval=args.checkpoint_interval)
    return 0 if result is None else report_result(result, m)
