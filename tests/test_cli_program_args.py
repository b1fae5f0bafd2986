"""``uprobe-emu COMMAND [OPTIONS] [--] PROGRAM [ARGS...]``: options before PROGRAM,
every word after it to the program unchanged - a ``--`` or an option-like word
included - as strace, valgrind, ``perf record`` and ``gdb --args`` do; ``--version``;
``uprobe-emu`` alone prints examples, and the examples work."""

from __future__ import annotations

import argparse
import importlib.metadata
import shlex

import pytest
from cli_helpers import cli, one_line_error

import emu
from emu.frontends.cli import EXAMPLES, build_parser, split_program_words

PROGRAM_COMMANDS = ("run", "trace", "step", "gdbserver", "diff", "sweep")


def _sub(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[command]


def test_every_word_after_the_program_reaches_it_unchanged():
    p = cli("run", "/bin/echo", "-n", "--", "-x", "--kernel", "6.9", "hi")
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout == b"-- -x --kernel 6.9 hi", p.stdout


def test_a_program_with_its_own_options_runs_as_typed():
    p = cli("run", "/usr/bin/python3", "-c", "import sys; print(sys.argv[1:])", "-v", "--", "x")
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout == b"['-v', '--', 'x']\n", p.stdout


def test_options_before_the_program_are_the_tools():
    p = cli("run", "--kernel", "6.9", "-e", "p:g/ev guest:fib:fib_loop", "--timeout=30", "guest:fib", "3")
    assert p.returncode == 2, p.stderr.decode()  # fib(3): the guest's own status
    assert p.stderr.decode().count(" ev: (") == 3, p.stderr.decode()


def test_a_double_dash_before_the_program_ends_the_options():
    p = cli("run", "--kernel", "6.9", "--", "/bin/echo", "--kernel")
    assert (p.returncode, p.stdout) == (0, b"--kernel\n"), (p.returncode, p.stdout, p.stderr)


@pytest.mark.parametrize("command", PROGRAM_COMMANDS)
def test_a_missing_program_is_one_line_that_shows_the_usage(command):
    extra = ["-e", "uprobe:libc:malloc"] if command == "diff" else []
    line = one_line_error(cli(command, *extra))
    assert (
        line == f"uprobe-emu {command}: PROGRAM is missing (usage: uprobe-emu {command} [OPTIONS] [--] "
        "PROGRAM [ARGS...])"
    ), line


@pytest.mark.parametrize("command", PROGRAM_COMMANDS)
def test_the_usage_line_puts_options_before_the_program(command):
    assert _sub(command).format_usage().strip() == f"usage: uprobe-emu {command} [OPTIONS] [--] PROGRAM [ARGS...]"


@pytest.mark.parametrize("command", [c for c in PROGRAM_COMMANDS if c != "sweep"])  # (sweep has no -e)
@pytest.mark.parametrize(
    "words, split",
    [
        (["prog", "-e", "x"], ([], "prog", ["-e", "x"])),
        (["-e", "spec", "prog", "a"], (["-e", "spec"], "prog", ["a"])),
        (["-espec", "prog"], (["-espec"], "prog", [])),
        (["--timeout", "5", "prog"], (["--timeout", "5"], "prog", [])),
        (["--timeout=5", "prog", "--timeout"], (["--timeout=5"], "prog", ["--timeout"])),
        (["--time", "5", "prog"], (["--time", "5"], "prog", [])),  # an abbreviation
        (["--", "-prog", "--"], ([], "-prog", ["--"])),
        (["-e", "spec"], (["-e", "spec"], None, [])),
        (["-", "x"], ([], "-", ["x"])),
    ],
)
def test_the_words_split_at_the_program(command, words, split):
    assert split_program_words(_sub(command), words) == split


@pytest.mark.parametrize("command", ["run", "trace", "step", "gdbserver", "sweep"])
def test_a_flag_takes_no_value(command):
    assert split_program_words(_sub(command), ["-v" if command != "sweep" else "--libraries", "prog", "x"])[1:] == (
        "prog",
        ["x"],
    )


def test_version_is_the_one_version_source():
    p = cli("--version")
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode() == f"uprobe-emu {emu.__version__}\n"
    assert importlib.metadata.version("uprobe-emu") == emu.__version__


def test_no_command_prints_examples():
    p = cli()
    assert p.returncode == 0, p.stderr.decode()
    out = p.stdout.decode()
    assert out.startswith("usage: uprobe-emu") and EXAMPLES in out, out


def _examples(command: str) -> list[list[str]]:
    lines = [ln.split("(then:")[0].split("(the ")[0].strip() for ln in EXAMPLES.splitlines()]
    return [shlex.split(ln)[1:] for ln in lines if ln.startswith(f"uprobe-emu {command}")]


@pytest.mark.parametrize("words", _examples("run") + _examples("trace") + _examples("guests"), ids=shlex.join)
def test_each_example_runs_as_shown(words):
    p = cli(*words, timeout=300)
    assert p.returncode == 0, (words, p.stderr.decode()[-2000:])
    assert "error" not in p.stderr.decode().lower(), p.stderr.decode()[-2000:]


def test_the_step_example_stops_nowhere_and_runs_the_program():
    (words,) = _examples("step")
    p = cli(*words, input=b"c\n")
    assert p.returncode == 0, p.stderr.decode()
    assert b"hi\n" in p.stdout and b"exited normally" in p.stdout, p.stdout
    assert b" malloc: (" in p.stdout + p.stderr
