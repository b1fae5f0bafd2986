"""``uprobe-emu trace``: the command (its options are in :mod:`emu.frontends.trace.args`)
and a quick throughput measurement (``python -m emu.frontends.trace.cli [N] [FORMAT...]``)."""

from __future__ import annotations

import sys
import tempfile
import time

from emu.frontends.launch import add_cli_events, make_machine, report_result
from emu.frontends.options import print_error
from emu.frontends.trace import seek
from emu.frontends.trace.tracer import Tracer
from emu.machine import Machine
from kernel_model.errors import InputError


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
        if args.seek is not None or args.last_write:  # probes first, then the seek
            sink = seek.LateSink(sys.stderr)
            if args.event:
                add_cli_events(m, args, sink)
            seek.apply_cli(m, args.seek, args.last_write, args.checkpoint_interval or seek.DEFAULT_INTERVAL)
        tracer = Tracer(m, args.fmt, out, start=args.start, count=args.count, mem=True if args.mem else None)
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
        why = "" if tracer.start_addr is not None else " (neither the program nor a file it mapped has it)"
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
