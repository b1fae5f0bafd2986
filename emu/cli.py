"""``uprobe-emu``: run guests under the uprobes model from the shell.

Exit codes: the guest's own status; 128+N when the guest died of signal N (one report
line on stderr); 124 when the instruction budget or the timeout ended the run; 130 on
Ctrl-C; 2 for a usage or input error (one readable line, never a traceback).
"""

from __future__ import annotations

import argparse
import os
import sys

from .errors import EmuError

EXIT_USAGE = 2
EXIT_BUDGET = 124
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


def _int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _size(text: str) -> int:
    """A byte count: 4294967296, 0x100000000, 512M, 4G, 4GiB."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        value = int(t[:-1] if scale > 1 else t, 0) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a positive size: {text!r}")
    return value


def _add_machine_options(p: argparse.ArgumentParser) -> None:
    from kernel_model.profiles import KernelProfile
    p.add_argument("--kernel", default="latest", metavar="V",
                   help=f"kernel profile ({', '.join(KernelProfile.names())}); default latest")
    p.add_argument("--max-insns", type=_int, default=0, metavar="N",
                   help="exact instruction budget (default 0 = none: full speed, the timeout "
                        "bounds the run; a budget costs ~5x on hot loops)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S", help="wall-clock limit")
    p.add_argument("--max-memory", type=_size, default=None, metavar="SIZE",
                   help="limit of the guest's mappings over all its processes (e.g. 512M, "
                        "default 4G); past it mmap/brk/fork fail with ENOMEM")
    p.add_argument("--stdin", metavar="FILE", help="file whose bytes the guest reads on fd 0")
    p.add_argument("--grant-dir", metavar="DIR",
                   help="host directory the guest may open files in (default: none)")
    p.add_argument("--seed", type=_int, default=0, metavar="N",
                   help="seed of the scheduler's interleaving and of getrandom (default 0)")
    p.add_argument("-e", "--event", action="append", default=[], metavar="SPEC",
                   help="probe spec: tracefs 'p:[GRP/]EV PATH:OFF [ARGS]', 'r:...', "
                        "'PATH:SYMBOL[+OFF][%%return]', 'uprobe:PATH:SYM', 'uretprobe:PATH:SYM'")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="uprobe-emu",
                     description="Run x86_64 guests on Unicorn under a model of Linux uprobes.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    run = sub.add_parser("run", help="run a guest (PROGRAM: a static ELF path or guest:NAME)",
                         description="Run PROGRAM [ARGS...]; arguments for the guest that start "
                                     "with '-' go after '--'.")
    run.add_argument("program", metavar="PROGRAM")
    run.add_argument("args", nargs="*", metavar="ARGS")
    _add_machine_options(run)
    run.add_argument("--events-file", "--events", dest="events_file", metavar="FILE",
                     help="write probe hit lines here instead of stderr")
    run.add_argument("--counters", action="store_true", help="print the event counters at exit")

    g = sub.add_parser("guests", help="list the built-in guests")
    g.add_argument("--write", metavar="DIR", help="also write each guest as an ELF file into DIR")

    # Further subcommands live with their features: each module's add_cli(sub, common)
    # adds a subparser whose defaults carry func=cmd_xxx.
    import importlib
    for name in CLI_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        mod.add_cli(sub, _add_machine_options)
    return parser


# Modules that contribute subcommands (trace, step, bench, diff, gdbserver ...).
CLI_MODULES = ("emu.trace", "emu.stepper", "emu.bench", "emu.hostdiff", "emu.gdbstub")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    guest_tail: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, guest_tail = argv[:i], argv[i + 1:]
    parser = build_parser()
    try:
        args = _parse(parser, argv)
        args.guest_tail = guest_tail
        return _dispatch(args)
    except UsageError as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
    except EmuError as e:
        print(f"uprobe-emu: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("uprobe-emu: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Options may come before or after PROGRAM (argparse's intermixed parsing, which
    only works on the subcommand's own parser)."""
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if not argv or argv[0].startswith("-") or argv[0] not in subparsers.choices:
        return parser.parse_args(argv)          # --help, or a usage error
    args = subparsers.choices[argv[0]].parse_intermixed_args(argv[1:])
    args.command = argv[0]
    return args


def _dispatch(args) -> int:
    if args.command == "guests":
        return cmd_guests(args)
    if args.command == "run":
        return cmd_run(args)
    func = getattr(args, "func", None)
    if func is None:
        raise UsageError(f"uprobe-emu: unknown command {args.command!r}")
    return func(args)


def cmd_guests(args) -> int:
    from guest_programs import GUESTS, write_guest
    for name in sorted(GUESTS):
        print(f"guest:{name:<18} {GUESTS[name].description}")
    if args.write:
        os.makedirs(args.write, exist_ok=True)
        for name in GUESTS:
            write_guest(name, os.path.join(args.write, name))
    return 0


def make_machine(args, passthrough: bool = True):
    from .machine import Machine
    stdin = b""
    if args.stdin:
        try:
            with open(args.stdin, "rb") as f:
                stdin = f.read()
        except OSError as e:
            raise EmuError(f"cannot read --stdin file {args.stdin!r}: {e.strerror}") from None
    if args.grant_dir and not os.path.isdir(args.grant_dir):
        raise EmuError(f"--grant-dir {args.grant_dir!r} is not a directory")
    extra = list(getattr(args, "args", []) or []) + list(getattr(args, "guest_tail", []))
    prog = args.program
    guest_argv = [prog[len("guest:"):] if prog.startswith("guest:") else prog] + extra
    return Machine.from_program(args.program, argv=guest_argv, kernel=args.kernel, stdin=stdin,
                                passthrough=passthrough, grant_dir=args.grant_dir,
                                seed=getattr(args, "seed", 0), **_memory_option(args))


def _memory_option(args) -> dict:
    size = getattr(args, "max_memory", None)
    return {} if size is None else {"max_memory": size}


def report_result(result, machine=None) -> int:
    if result.reason == "exit":
        return result.status
    print(f"uprobe-emu: guest {result.describe()}", file=sys.stderr)
    if result.reason == "signal":
        return result.status
    if result.reason == "stopped" and "SIGINT" in result.detail:
        return EXIT_INTERRUPTED
    return EXIT_BUDGET


def cmd_run(args) -> int:
    m = make_machine(args)
    out = _open_events(args)
    try:
        if args.event:
            m.uprobes.add_events(args.event, output=out)
        with m.interruptible():
            result = m.run(max_insns=args.max_insns or None, timeout=args.timeout or None)
    finally:
        if out not in (None, sys.stderr):
            out.close()
    code = report_result(result, m)
    if args.counters:
        _print_counters(m)
    return code


def _open_events(args):
    if not getattr(args, "events_file", None):
        return sys.stderr
    try:
        return open(args.events_file, "w")
    except OSError as e:
        raise EmuError(f"cannot write {args.events_file!r}: {e.strerror}") from None


def _print_counters(m) -> None:
    snap = m.counters.snapshot()
    for k, v in snap.items():
        if v:
            print(f"{k}: {v}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
