"""The command line's vocabulary: option types, the options every machine-running command
takes, and commands whose code is imported only when they run.

This module imports no machine, engine or front end: building the whole argument
parser (``uprobe-emu --help``, a usage error) costs the parser alone.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from emu.inspect import MAX_SLICE, MIN_SLICE, NR_CPUS, parse_nr_cpus, parse_slice
from kernel_model.errors import InputError, printable
from kernel_model.profiles import KernelProfile

if TYPE_CHECKING:
    # what add_subparsers() returns: a subcommand module's add_cli adds its parser to it
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]

# the parser class of a command line's subcommands (CommandParser for uprobe-emu's)
P = TypeVar("P", bound=argparse.ArgumentParser)

# Exit codes of the command line besides the guest's own status (128+N: killed by signal N).
EXIT_USAGE = 2
EXIT_BUDGET = 124
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A command line argparse or a command rejects: one line, exit code 2."""


def print_error(line: str) -> None:
    """The one way an error reaches the terminal: one line, control bytes escaped."""
    print(printable(line), file=sys.stderr)


class CommandParser(argparse.ArgumentParser):
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


def clock_start(text: str) -> int | None:
    """``--clock``: the guest's CLOCK_REALTIME at start in ns since the epoch; None for
    the machine's fixed start.  ``host`` is read when the option is parsed."""
    if text == "fixed":
        return None
    if text == "host":
        return time.time_ns()
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"fixed, host or seconds since the epoch, not {text!r}") from None
    if not math.isfinite(seconds) or not 0 <= seconds < 4e9:
        raise argparse.ArgumentTypeError(f"seconds since the epoch, 0 to 4e9, not {text!r}")
    return round(seconds * 1e9)


def port_number(text: str) -> int:
    """A TCP port, 0-65535 (0 = any free port); socket.bind() raises OverflowError else."""
    n = _int(text)
    if not 0 <= n <= 0xFFFF:
        raise argparse.ArgumentTypeError(f"a TCP port is 0-65535, not {text!r}")
    return n


def add_machine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kernel",
        default="latest",
        metavar="V",
        help=f"kernel profile ({', '.join(KernelProfile.names())}); default latest",
    )
    p.add_argument(
        "--max-insns",
        type=count,
        default=0,
        metavar="N",
        help="exact instruction budget (default 0 = none: full speed, the timeout "
        "bounds the run; a budget costs ~5x on hot loops)",
    )
    p.add_argument(
        "--timeout", type=seconds, default=120.0, metavar="S", help="wall-clock limit (default 120; 0 = none)"
    )
    p.add_argument(
        "--max-memory",
        type=_size,
        default=None,
        metavar="SIZE",
        help="limit of the guest's mappings over all its processes (e.g. 512M, "
        "default 4G); past it mmap/brk/fork fail with ENOMEM",
    )
    p.add_argument(
        "--stdin", metavar="FILE", help="file the guest reads on fd 0, as it reads (default: this command's stdin)"
    )
    p.add_argument(
        "--mem-total",
        type=_size,
        default=None,
        metavar="SIZE",
        help="RAM the guest's sysinfo reports, e.g. 512M, 8G (default 4G)",
    )
    p.add_argument(
        "--uid",
        type=_id,
        default=None,
        metavar="N",
        help="the guest's real/effective/saved uid (default: yours; 0 = root, allowed to change ids)",
    )
    p.add_argument("--gid", type=_id, default=None, metavar="N", help="the guest's gid (default: yours)")
    p.add_argument(
        "--groups",
        type=_id_list,
        default=None,
        metavar="N,N...",
        help="the guest's supplementary groups (default: yours when neither "
        "--uid nor --gid is given, else none; '' = none)",
    )
    p.add_argument(
        "--sysroot", metavar="DIR", default="/", help="host directory the guest sees, read-only, as / (default: /)"
    )
    p.add_argument(
        "--grant-dir",
        metavar="DIR",
        action="append",
        default=[],
        help="host directory the guest may also write in, seen where it lies (repeatable; default: none)",
    )
    p.add_argument(
        "--clock",
        type=clock_start,
        default=None,
        metavar="fixed|host|SECONDS",
        help="the guest's CLOCK_REALTIME at start: fixed (default: 2026-01-01T00:00:00Z, the same every run), "
        "host (this host's time now, so the guest dates files as the host does) or seconds since the epoch",
    )
    p.add_argument(
        "--seed",
        type=_int,
        default=0,
        metavar="N",
        help="seed of the scheduler's interleaving and of getrandom (default 0)",
    )
    p.add_argument(
        "--sched-slice",
        type=_sched_slice,
        default=None,
        metavar="MIN:MAX",
        help="time slice of a task while several can run, in translated blocks "
        f"(default {MIN_SLICE}:{MAX_SLICE}; short slices such as 1:40 shake out races)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="say on stderr which of the engine's speed tricks work on this host "
        "(register window, native block quantum, instruction counter) and what runs instead",
    )
    p.add_argument(
        "--cpus",
        type=cpus_count,
        default=None,
        metavar="N",
        help=f"CPUs of the machine, 1-{NR_CPUS} (default 1): up to N tasks run at once "
        "in virtual time, each where its affinity allows",
    )
    p.add_argument(
        "-e",
        "--event",
        action="append",
        default=[],
        metavar="SPEC",
        help="probe spec: tracefs 'p:[GRP/]EV PATH:OFF [ARGS]', 'r:...', "
        "'PATH:SYMBOL[+OFF][%%return]', 'uprobe:PATH:SYM', 'uretprobe:PATH:SYM'"
        " (PATH: any file of the guest's view, mapped yet or not, or a "
        "library's short name: 'uprobe:libc:malloc')",
    )
    p.add_argument(
        "--pid",
        type=_pid,
        default=None,
        metavar="N",
        help="probes fire only in the process with this pid (as bpftrace -p, perf -p)",
    )


def _pid(text: str) -> int:
    value = _int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"invalid pid {text!r}: a positive number")
    return value


def add_bpf_options(p: argparse.ArgumentParser) -> None:
    """``-b OBJ`` and its companions: BPF objects loaded as a libbpf tool loads them."""
    p.add_argument(
        "-b",
        "--bpf",
        action="append",
        default=[],
        metavar="OBJ",
        help="load a BPF object (clang -target bpf): its programs whose section names a target "
        "(uprobe/PATH:FUNC, uretprobe/..., uprobe.multi/..., uprobe.session/...) attach themselves; "
        "ring buffer and perf output print as they come, the maps at exit as bpftool map dump prints them",
    )
    p.add_argument(
        "--bpf-attach",
        action="append",
        default=[],
        type=_name_value,
        metavar="PROG=TARGET",
        help="attach BPF program PROG at TARGET (as -e takes it: libc:malloc, PATH:SYMBOL[+OFF], PATH:0xOFF)",
    )
    p.add_argument(
        "--bpf-set",
        action="append",
        default=[],
        type=_name_value,
        metavar="VAR=VALUE",
        help="set the BPF object's const volatile variable VAR (.rodata) to the integer VALUE before the load",
    )


def _name_value(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, not {text!r}")
    return name.strip(), value.strip()


def add_events_option(p: argparse.ArgumentParser, default: str = "stderr") -> None:
    """``--events FILE`` of every command that runs probes (run, step, gdbserver)."""
    p.add_argument(
        "--events-file",
        "--events",
        dest="events_file",
        metavar="FILE",
        help=f"write probe hit lines here instead of {default}",
    )


def add_program_command(sub: argparse._SubParsersAction[P], name: str, *, help: str, description: str) -> P:
    """The parser of a command that runs PROGRAM with ARGS (run, trace, step, gdbserver,
    diff, sweep): ``COMMAND [OPTIONS] [--] PROGRAM [ARGS...]``, every word after PROGRAM
    going to the program (the command line's ``split_program_words`` relies on the
    ``program`` and ``args`` destinations)."""
    p = sub.add_parser(name, usage="%(prog)s [OPTIONS] [--] PROGRAM [ARGS...]", help=help, description=description)
    p.add_argument("program", metavar="PROGRAM")
    p.add_argument("args", nargs="*", metavar="ARGS")
    return p


def lazy_command(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """A subcommand's ``func``: imports ``module`` when the command runs, so the
    parser of every command can be built without loading any of them."""

    def run(args: argparse.Namespace) -> int:
        command: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), function)
        return command(args)

    run.__qualname__ = run.__name__ = function
    return run
