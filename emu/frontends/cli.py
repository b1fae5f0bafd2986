"""``uprobe-emu``: run guests under the uprobes model from the shell.

Exit codes: the guest's own status; 128+N when the guest died of signal N (one report
line on stderr); 124 when the instruction budget or the timeout ended the run; 130 on
Ctrl-C; 2 for a usage or input error (one readable line, never a traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import sys

from emu import __version__
from emu.inspect import MAX_SLICE, MIN_SLICE, NR_CPUS, describe_engine, engine_capabilities, parse_nr_cpus, parse_slice
from emu.machine import Machine
from guest_programs import GUESTS, write_guest
from kernel_model.errors import EmuError, InputError, printable
from kernel_model.profiles import KernelProfile

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


def _sched_slice(text: str) -> tuple[int, int]:
    try:
        return parse_slice(text)
    except InputError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def cpus_count(text: str) -> int:
    """A CPU count, 1..NR_CPUS (``--cpus``)."""
    try:
        return parse_nr_cpus(text)
    except InputError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _size(text: str) -> int:
    """A byte count: 4294967296, 0x100000000, 512M, 4G, 4GiB."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        value = int(t[:-1] if scale > 1 else t, 0) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if value < 4096:
        raise argparse.ArgumentTypeError(f"must be at least one page (4096 bytes): {text!r}")
    return value


def count(text: str) -> int:
    """An option value that counts something: an integer >= 0 (0x.. and 0o.. accepted)."""
    n = _int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text!r}")
    return n


def seconds(text: str) -> float:
    """A duration: a finite number >= 0 (``nan`` and ``inf`` would reach Unicorn's
    microsecond timeout as a conversion error)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, not {text!r}")
    return value


def _id(text: str) -> int:
    """A uid or gid: 0 to 4294967294 ((uid_t)-1 means "no id")."""
    n = _int(text)
    if not 0 <= n < 0xFFFFFFFF:
        raise argparse.ArgumentTypeError(f"an id is 0-4294967294, not {text!r}")
    return n


def _id_list(text: str) -> list[int]:
    return [_id(t) for t in text.split(",")] if text else []


def port_number(text: str) -> int:
    """A TCP port, 0-65535 (0 = any free port); socket.bind() raises OverflowError else."""
    n = _int(text)
    if not 0 <= n <= 0xFFFF:
        raise argparse.ArgumentTypeError(f"a TCP port is 0-65535, not {text!r}")
    return n


def _add_machine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", default="latest", metavar="V",
                   help=f"kernel profile ({', '.join(KernelProfile.names())}); default latest")
    p.add_argument("--max-insns", type=count, default=0, metavar="N",
                   help="exact instruction budget (default 0 = none: full speed, the timeout "
                        "bounds the run; a budget costs ~5x on hot loops)")
    p.add_argument("--timeout", type=seconds, default=120.0, metavar="S",
                   help="wall-clock limit (default 120; 0 = none)")
    p.add_argument("--max-memory", type=_size, default=None, metavar="SIZE",
                   help="limit of the guest's mappings over all its processes (e.g. 512M, "
                        "default 4G); past it mmap/brk/fork fail with ENOMEM")
    p.add_argument("--stdin", metavar="FILE",
                   help="file the guest reads on fd 0, as it reads (default: this command's stdin)")
    p.add_argument("--mem-total", type=_size, default=None, metavar="SIZE",
                   help="RAM the guest's sysinfo reports, e.g. 512M, 8G (default 4G)")
    p.add_argument("--uid", type=_id, default=None, metavar="N",
                   help="the guest's real/effective/saved uid (default: yours; 0 = root, "
                        "allowed to change ids)")
    p.add_argument("--gid", type=_id, default=None, metavar="N",
                   help="the guest's gid (default: yours)")
    p.add_argument("--groups", type=_id_list, default=None, metavar="N,N...",
                   help="the guest's supplementary groups (default: yours when neither "
                        "--uid nor --gid is given, else none; '' = none)")
    p.add_argument("--sysroot", metavar="DIR", default="/",
                   help="host directory the guest sees, read-only, as / (default: /)")
    p.add_argument("--grant-dir", metavar="DIR", action="append", default=[],
                   help="host directory the guest may also write in, seen where it lies "
                        "(repeatable; default: none)")
    p.add_argument("--seed", type=_int, default=0, metavar="N",
                   help="seed of the scheduler's interleaving and of getrandom (default 0)")
    p.add_argument("--sched-slice", type=_sched_slice, default=None, metavar="MIN:MAX",
                   help="time slice of a task while several can run, in translated blocks "
                        f"(default {MIN_SLICE}:{MAX_SLICE}; short slices such as 1:40 shake out races)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="say on stderr which of the engine's speed tricks work on this host "
                        "(register window, native block quantum, instruction counter) and what runs instead")
    p.add_argument("--cpus", type=cpus_count, default=None, metavar="N",
                   help=f"CPUs of the machine, 1-{NR_CPUS} (default 1): up to N tasks run at once "
                        "in virtual time, each where its affinity allows")
    p.add_argument("-e", "--event", action="append", default=[], metavar="SPEC",
                   help="probe spec: tracefs 'p:[GRP/]EV PATH:OFF [ARGS]', 'r:...', "
                        "'PATH:SYMBOL[+OFF][%%return]', 'uprobe:PATH:SYM', 'uretprobe:PATH:SYM'"
                        " (PATH: any file of the guest's view, mapped yet or not, or a "
                        "library's short name: 'uprobe:libc:malloc')")
    p.add_argument("--pid", type=_pid, default=None, metavar="N",
                   help="probes fire only in the process with this pid (as bpftrace -p, "
                        "perf -p)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="uprobe-emu",
                     description="Run x86_64 guests on Unicorn under a model of Linux uprobes.",
                     epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser("run", help="run a guest (PROGRAM: an ELF path or guest:NAME)",
                         usage="%(prog)s [OPTIONS] [--] PROGRAM [ARGS...]",
                         description="Run PROGRAM with ARGS: options come before PROGRAM, every "
                                     "word after it goes to the program unchanged.")
    run.add_argument("program", metavar="PROGRAM")
    run.add_argument("args", nargs="*", metavar="ARGS")
    _add_machine_options(run)
    add_events_option(run)
    run.add_argument("--counters", action="store_true", help="print the event counters at exit")

    g = sub.add_parser("guests", help="list the built-in guests")
    g.add_argument("--write", metavar="DIR", help="also write each guest as an ELF file into DIR")

    # Further subcommands live with their features: each module's add_cli(sub, common)
    # adds a subparser whose defaults carry func=cmd_xxx.
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
CLI_MODULES = ("emu.frontends.trace", "emu.frontends.stepper", "emu.frontends.bench",
               "emu.frontends.hostdiff", "emu.frontends.gdbstub", "emu.frontends.sweep")


EXAMPLES = """\
examples:
  uprobe-emu run /usr/bin/python3 -c 'print(6 * 7)'
  uprobe-emu run -e uprobe:libc:malloc -e 'r:libc/malloc_ret libc:malloc ret=$retval' /bin/echo hi
  uprobe-emu run --kernel 6.9 -e 'p:grp/ev guest:hello:_start sp=%sp' guest:hello
  uprobe-emu trace --count 20 guest:hello
  uprobe-emu step -e uprobe:libc:malloc /bin/echo hi   (then: c, info registers, bt, rsi)
  uprobe-emu gdbserver --port 1234 guest:fib 5        (then: gdb -ex 'target remote :1234')
  uprobe-emu bench --quick uprobe-nop uretprobe-nop --kernel 6.12 --vs 6.13
  sudo uprobe-emu diff -e uprobe:libc:malloc /bin/echo hi  (the host kernel and the model)
  uprobe-emu guests                                    (the built-in guests)

'uprobe-emu COMMAND --help' describes a command."""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv:
        parser.print_usage()
        print(EXAMPLES)
        return 0
    try:
        args = _parse(parser, _attach_delete_events(argv))
        return _dispatch(args)
    except UsageError as e:
        print_error(str(e))
        return EXIT_USAGE
    except EmuError as e:
        print_error(f"uprobe-emu: error: {e}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("uprobe-emu: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0


def print_error(line: str) -> None:
    """The one way an error reaches the terminal: one line, control bytes escaped."""
    print(printable(line), file=sys.stderr)


def _attach_delete_events(argv: list[str]) -> list[str]:
    """``-e -:[GRP/]EVENT`` is a delete request, not an option: argparse takes any word
    starting with ``-`` for an option, so the value is attached (``--event=-:...``)."""
    out: list[str] = []
    it = iter(argv)
    for word in it:
        if word in ("-e", "--event"):
            value = next(it, None)
            if value is not None and value.startswith("-:"):
                out.append(f"--event={value}")
                continue
            out.append(word)
            if value is not None:
                out.append(value)
            continue
        out.append(word)
    return out


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """A command that runs a PROGRAM takes its options before it and gives the program
    every word after it, unchanged (a ``--`` or ``-x`` among them included), as strace,
    valgrind, perf record and ``gdb --args`` do; a ``--`` before PROGRAM ends the
    options.  Other commands parse as argparse does."""
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if not argv or argv[0].startswith("-") or argv[0] not in subparsers.choices:
        args = parser.parse_args(argv)          # --help, --version, or a usage error
        if args.command is None:
            raise UsageError("uprobe-emu: a COMMAND is required ('uprobe-emu' alone shows examples)")
        return args
    sub = subparsers.choices[argv[0]]
    if not _takes_program(sub):
        args = sub.parse_intermixed_args(argv[1:])
    else:
        options, program, guest_args = split_program_words(sub, argv[1:])
        if program is None:
            sub.parse_args([*options, "--", "PROGRAM"])     # --help, or the error of a bad option
            raise UsageError(f"{sub.prog}: PROGRAM is missing (usage: {sub.prog} [OPTIONS] [--] PROGRAM [ARGS...])")
        args = sub.parse_args([*options, "--", program])
        args.args = guest_args
    args.command = argv[0]
    return args


def _takes_program(sub: argparse.ArgumentParser) -> bool:
    return any(a.dest == "program" for a in sub._actions)


def split_program_words(sub: argparse.ArgumentParser, words: list[str]) -> tuple[list, str | None, list]:
    """``(options, PROGRAM, its arguments)``: the options are the words up to the first
    that is not an option or an option's value (an option's value is the next word
    unless given as ``--opt=V`` or ``-eV``), or up to ``--``."""
    takes_value = {s: a.nargs != 0 for a in sub._actions for s in a.option_strings}
    longs = [s for s in takes_value if s.startswith("--")]
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            return words[:i], (words[i + 1] if i + 1 < len(words) else None), words[i + 2:]
        if not word.startswith("-") or word == "-":
            return words[:i], word, words[i + 1:]
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            matches = [name] if name in takes_value else [s for s in longs if s.startswith(name)]
            value_next = "=" not in word and len(matches) == 1 and takes_value[matches[0]]
        else:
            value_next = len(word) == 2 and takes_value.get(word, False)
        i += 2 if value_next else 1
    return words, None, []


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
    for name in sorted(GUESTS):
        print(f"guest:{name:<18} {GUESTS[name].description}")
    if args.write:
        try:
            os.makedirs(args.write, exist_ok=True)
            for name in GUESTS:
                write_guest(name, os.path.join(args.write, name))
        except OSError as e:
            raise EmuError(f"cannot write the guests into {args.write!r}: "
                           f"{e.strerror or e}") from None
    return 0


# `diff` feeds the same stdin bytes to the native run and the model, so it holds them
# in memory: bounded, so `diff --stdin /dev/zero` is an error, not a host out of memory.
MAX_STDIN_BYTES = 64 << 20


def read_stdin_file(path: str | None) -> bytes:
    """The bytes of ``--stdin FILE`` (b"" without one), at most MAX_STDIN_BYTES."""
    if not path:
        return b""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_STDIN_BYTES + 1)
    except OSError as e:
        raise EmuError(f"cannot read --stdin file {path!r}: {e.strerror or e}") from None
    if len(data) > MAX_STDIN_BYTES:
        raise EmuError(f"--stdin file {path!r} is larger than {MAX_STDIN_BYTES >> 20} MiB")
    return data


def _open_stdin(args, own_stdin: bool) -> bytes | int:
    """The guest's fd 0: the --stdin file (opened without blocking on a FIFO, read as
    the guest reads), else this command's own stdin, else (own_stdin False: the
    command reads its stdin itself) an empty pipe."""
    if args.stdin:
        try:
            return os.open(args.stdin, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as e:
            raise EmuError(f"cannot read --stdin file {args.stdin!r}: {e.strerror}") from None
    return 0 if own_stdin else b""


def make_machine(args, passthrough: bool = True, own_stdin: bool = True):
    """The machine of a CLI run.  With ``passthrough`` the guest's fds 0-2 are
    described as this command's own (a terminal, a file or a pipe), as they would be
    natively; otherwise its output is captured, so fds 1 and 2 are pipes."""
    for opt, value in [("--sysroot", getattr(args, "sysroot", "/"))] + \
            [("--grant-dir", d) for d in getattr(args, "grant_dir", None) or []]:
        if not os.path.isdir(value):
            raise EmuError(f"{opt} {value!r} is not a directory")
    extra = list(getattr(args, "args", []) or [])
    prog = args.program
    guest_argv = [prog[len("guest:"):] if prog.startswith("guest:") else prog] + extra
    if getattr(args, "verbose", False):
        print(f"uprobe-emu: {describe_engine(engine_capabilities())}", file=sys.stderr)
    stdin = _open_stdin(args, own_stdin and passthrough)
    try:
        return Machine.from_program(args.program, argv=guest_argv, kernel=args.kernel, stdin=stdin,
                                    passthrough=passthrough, sysroot=getattr(args, "sysroot", "/"),
                                    grant_dirs=getattr(args, "grant_dir", None) or [],
                                    seed=getattr(args, "seed", 0),
                                    **_sched_option(args),
                                    stdio="host" if passthrough else "pipe",
                                    mem_total=getattr(args, "mem_total", None),
                                    uid=getattr(args, "uid", None), gid=getattr(args, "gid", None),
                                    groups=getattr(args, "groups", None),
                                    **_memory_option(args))
    finally:
        if isinstance(stdin, int) and stdin != 0:
            os.close(stdin)


def _sched_option(args) -> dict:
    bounds, cpus = getattr(args, "sched_slice", None), getattr(args, "cpus", None)
    return ({} if bounds is None else {"sched_slice": bounds}) | ({} if cpus is None else {"cpus": cpus})


def _memory_option(args) -> dict:
    size = getattr(args, "max_memory", None)
    return {} if size is None else {"max_memory": size}


def report_result(result, machine=None) -> int:
    if result.reason == "exit":
        return result.status
    print_error(f"uprobe-emu: guest {result.describe()}")
    if result.reason == "signal":
        return result.status
    if result.reason == "stopped" and "SIGINT" in result.detail:
        return EXIT_INTERRUPTED
    return EXIT_BUDGET


def _pid(text: str) -> int:
    value = _int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"invalid pid {text!r}: a positive number")
    return value


def add_cli_events(m, args, output) -> None:
    """The -e specs, filtered by --pid; notes on what they probe (IFUNC resolvers)
    go to stderr."""
    pid = getattr(args, "pid", None)
    flt = None if pid is None else (lambda proc: proc.pid == pid)
    m.uprobes.add_events(args.event, output=output, filter=flt)
    for note in m.uprobes.notes:
        print(f"uprobe-emu: note: {note}", file=sys.stderr)
    m.uprobes.notes.clear()


def add_events_option(p: argparse.ArgumentParser, default: str = "stderr") -> None:
    """``--events FILE`` of every command that runs probes (run, step, gdbserver)."""
    p.add_argument("--events-file", "--events", dest="events_file", metavar="FILE",
                   help=f"write probe hit lines here instead of {default}")


@contextlib.contextmanager
def events_output(args, default=None):
    """The stream of probe hit lines: ``--events FILE`` (opened for writing, closed at
    the end) or ``default`` (stderr)."""
    out = _open_events(args, default)
    try:
        yield out
    finally:
        if out is not (default or sys.stderr):
            out.close()


def cmd_run(args) -> int:
    m = make_machine(args)
    with events_output(args) as out:
        if args.event:
            add_cli_events(m, args, out)
        with m.interruptible():
            result = m.run(max_insns=args.max_insns or None, timeout=args.timeout or None)
    code = report_result(result, m)
    if args.counters:
        _print_counters(m)
    return code


def _open_events(args, default=None):
    if not getattr(args, "events_file", None):
        return default or sys.stderr
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
