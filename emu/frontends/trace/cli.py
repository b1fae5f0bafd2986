"""``uprobe-emu trace``: the subcommand (the CLI finds it through
:func:`emu.frontends.trace.add_cli`) and a quick throughput measurement
(``python -m emu.frontends.trace.cli [N] [FORMAT...]``)."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from emu.frontends.cli import add_cli_events, make_machine, print_error, report_result
from emu.frontends.trace import seek
from emu.frontends.trace.formats import FORMATS
from emu.frontends.trace.tracer import Tracer
from emu.machine import Machine
from kernel_model.errors import InputError


def add_cli(sub, add_machine_options) -> None:
    p = sub.add_parser(
        "trace", usage="%(prog)s [OPTIONS] [--] PROGRAM [ARGS...]",
        help="trace every instruction, with the uprobes model's work interleaved",
        description="Run PROGRAM [ARGS...] and write an instruction trace: objdump-style "
                    "lines with the registers each instruction changed and the kernel "
                    "model's events (text), JSON lines, Tenet deltas, or Chrome trace "
                    "events (Perfetto).  Options come before PROGRAM; every word after it goes "
                    "to the program.")
    p.add_argument("program", metavar="PROGRAM")
    p.add_argument("args", nargs="*", metavar="ARGS")
    add_machine_options(p)
    p.add_argument("--from", dest="start", metavar="SYMBOL",
                   help="start tracing when the guest reaches SYMBOL[+OFF] or an address")
    p.add_argument("--count", type=_count, metavar="N",
                   help="trace at most N instructions (the guest then runs on untraced)")
    p.add_argument("--format", dest="fmt", choices=FORMATS, default="text",
                   help="text (default), jsonl, tenet or chrome")
    p.add_argument("-o", "--output", metavar="FILE", help="write the trace here (default stdout)")
    p.add_argument("--mem", action="store_true",
                   help="also record memory writes (always on for tenet)")
    p.add_argument("--seek", type=_count, metavar="N",
                   help="run (recorded) to instruction N first; the trace starts there")
    p.add_argument("--last-write", dest="last_write", action="append", default=[], metavar="REG|ADDR[:SIZE]",
                   help="print which instruction last wrote the register or bytes before the --seek "
                        "point (replayed from checkpoints; repeatable)")
    p.add_argument("--checkpoint-interval", type=_count, default=None, metavar="N",
                   help="instructions between checkpoints for --seek/--last-write")
    p.set_defaults(func=cmd_trace)


def _count(text: str) -> int:
    try:
        n = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return n


def cmd_trace(args) -> int:
    to_stdout = not args.output
    # A machine-readable trace on stdout keeps stdout for the trace alone; the guest's
    # own output then goes to stderr after the run.
    passthrough = not to_stdout or args.fmt == "text"
    m = make_machine(args, passthrough=passthrough)
    out = None
    if args.output:
        try:
            out = open(args.output, "w")
        except OSError as e:
            raise InputError(f"cannot write the trace to {args.output!r}: {e.strerror}") from None
    try:
        sink = None
        if args.seek is not None or args.last_write:        # probes first, then the seek
            sink = seek.LateSink(sys.stderr)
            if args.event:
                add_cli_events(m, args, sink)
            seek.apply_cli(m, args.seek, args.last_write, args.checkpoint_interval or seek.DEFAULT_INTERVAL)
        tracer = Tracer(m, args.fmt, out, start=args.start, count=args.count,
                        mem=True if args.mem else None)
        if sink is not None:
            sink.target = tracer.ftrace_output(sys.stderr)
        elif args.event:
            add_cli_events(m, args, tracer.ftrace_output(sys.stderr))
        with m.interruptible():
            result = m.run(max_insns=args.max_insns or None, timeout=args.timeout or None)
        tracer.close()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise InputError(f"cannot write the trace: {e.strerror or e}") from None
    finally:
        if out is not None:
            out.close()
    if not passthrough:
        sys.stdout.flush()
        for data in (m.stdout, m.stderr):
            if data:
                sys.stderr.buffer.write(bytes(data))
        sys.stderr.flush()
    if args.start is not None and not tracer.insns:
        why = "" if tracer.start_addr is not None else \
            " (neither the program nor a file it mapped has it)"
        print_error(f"uprobe-emu: trace: {args.start} was never reached{why}")
    return report_result(result, m)


def _bench(n: int = 500_000, fmts=("text",), repeat: int = 3) -> None:
    """``python -m emu.frontends.trace.cli [N] [FORMAT...]``: traced instructions per second for
    guest:fib traced to a temporary file (best of ``repeat``)."""
    for fmt in fmts:
        best = float("inf")
        for _ in range(repeat):
            m = Machine.from_guest("fib", argv=["fib", "100000000"])
            with tempfile.TemporaryFile("w") as f:
                t0 = time.perf_counter()
                t = Tracer(m, fmt, f, count=n)
                m.run(max_insns=n + 10)
                t.close()
                f.flush()
                best = min(best, time.perf_counter() - t0)
        print(f"{fmt}: {n} instructions in {best:.3f} s = {n / best / 1e6:.3f} M traced insns/s")


if __name__ == "__main__":
    _bench(int(sys.argv[1]) if len(sys.argv) > 1 else 500_000, tuple(sys.argv[2:]) or ("text",))
