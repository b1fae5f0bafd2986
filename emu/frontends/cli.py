"""``uprobe-emu``: run guests under the uprobes model from the shell.

Exit codes: the guest's own status; 128+N when the guest died of signal N (one report
line on stderr); 124 when the instruction budget or the timeout ended the run; 130 on
Ctrl-C; 2 for a usage or input error (one readable line, never a traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from emu import __version__
from emu.frontends.options import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CommandParser,
    UsageError,
    add_bpf_options,
    add_events_option,
    add_machine_options,
    add_program_command,
    lazy_command,
    print_error,
)
from kernel_model.errors import EmuError


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="uprobe-emu",
        description="Run x86_64 guests on Unicorn under a model of Linux uprobes.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)

    run = add_program_command(
        sub,
        "run",
        help="run a guest (PROGRAM: an ELF path or guest:NAME)",
        description="Run PROGRAM with ARGS: options come before PROGRAM, every "
        "word after it goes to the program unchanged.",
    )
    add_machine_options(run)
    add_events_option(run)
    add_bpf_options(run)
    run.add_argument("--counters", action="store_true", help="print the event counters at exit")
    run.set_defaults(func=lazy_command("emu.frontends.launch", "cmd_run"))

    g = sub.add_parser("guests", help="list the built-in guests")
    g.add_argument("--write", metavar="DIR", help="also write each guest as an ELF file into DIR")
    g.set_defaults(func=lazy_command("emu.frontends.launch", "cmd_guests"))

    # Further subcommands live with their features: each module's add_cli(sub, common)
    # adds a subparser whose func imports the command's code when it runs.
    for name in CLI_MODULES:
        importlib.import_module(name).add_cli(sub, add_machine_options)
    return parser


# The argument definitions of the other subcommands: light modules that import none of
# their command's code, so building the parser loads neither the machine nor a front end.
CLI_MODULES = (
    "emu.frontends.trace.args",
    "emu.frontends.stepper.args",
    "emu.frontends.bench.args",
    "emu.frontends.hostdiff_args",
    "emu.frontends.gdbstub.args",
    "emu.frontends.sweep.args",
)


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
        args = parser.parse_args(argv)  # --help, --version, or a usage error
        if args.command is None:
            raise UsageError("uprobe-emu: a COMMAND is required ('uprobe-emu' alone shows examples)")
        return args
    sub = subparsers.choices[argv[0]]
    if not _takes_program(sub):
        args = sub.parse_intermixed_args(argv[1:])
    else:
        options, program, guest_args = split_program_words(sub, argv[1:])
        if program is None:
            sub.parse_args([*options, "--", "PROGRAM"])  # --help, or the error of a bad option
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
            return words[:i], (words[i + 1] if i + 1 < len(words) else None), words[i + 2 :]
        if not word.startswith("-") or word == "-":
            return words[:i], word, words[i + 1 :]
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            matches = [name] if name in takes_value else [s for s in longs if s.startswith(name)]
            value_next = "=" not in word and len(matches) == 1 and takes_value[matches[0]]
        else:
            value_next = len(word) == 2 and takes_value.get(word, False)
        i += 2 if value_next else 1
    return words, None, []


def _dispatch(args: argparse.Namespace) -> int:
    func = getattr(args, "func", None)
    if func is None:
        raise UsageError(f"uprobe-emu: unknown command {args.command!r}")
    result: int = func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
