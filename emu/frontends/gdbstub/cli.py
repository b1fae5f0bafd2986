"""``uprobe-emu gdbserver``: load a program and serve it to gdb."""

from __future__ import annotations

import sys

from emu.frontends.gdbstub.stub import serve_once
from emu.frontends.launch import add_cli_events, events_output, make_machine, report_result
from kernel_model.errors import InputError


def cmd_gdbserver(args) -> int:
    m = make_machine(args)
    if args.checkpoint_interval < 0:
        raise InputError(f"--checkpoint-interval must be >= 0, not {args.checkpoint_interval}")
    with events_output(args) as out:
        if args.event:
            add_cli_events(m, args, out)
        result = serve_once(
            m,
            args.host,
            args.port,
            ready=lambda port: print(
                f"uprobe-emu: listening for gdb on {args.host}:{port}", file=sys.stderr, flush=True
            ),
            max_insns=args.max_insns or None,
            timeout=args.timeout or None,
            checkpoint_interval=args.checkpoint_interval,
        )
    return 0 if result is None else report_result(result, m)
