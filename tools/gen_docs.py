#!/usr/bin/env python3
"""The documentation's generated reference pages, and the MkDocs hook that adds them.

Four pages are made from the code at build time, never committed, so they cannot go
stale: the command-line reference (from ``emu.frontends.cli.build_parser()``), the
kernel profiles (from ``kernel_model/profiles.py``: every profile's switches, and the
kernel commits its source cites for each change), and the syscall table (from the
syscall registry, ``kernel_model.arch.x86.entry.syscall_table``). The Python API page
is written by hand as ``::: module.name`` directives that mkdocstrings expands.

``mkdocs.yml`` names this file under ``hooks:``; MkDocs calls :func:`on_files`, which adds
each page as a generated file. To look at the pages without building the site:

    python tools/gen_docs.py OUTDIR
"""

from __future__ import annotations

import argparse
import ast
import html
import io
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROFILES_SOURCE = ROOT / "kernel_model" / "profiles.py"
COMMIT = re.compile(r"\b[0-9a-f]{12}\b")


def md_text(text: str) -> str:
    """``text`` as literal Markdown prose: HTML characters and Markdown's emphasis,
    code, link and table characters escaped."""
    text = html.escape(text, quote=False)
    return re.sub(r"([\\`*_\[\]|])", r"\\\1", text)


# ------------------------------------------------------------------ command line
def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def subcommand_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: a.help or "" for a in action._choices_actions}
    return {}


def _option_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return parser._get_formatter()._expand_help(action)


def _option_name(action: argparse.Action) -> str:
    metavar = action.metavar
    if action.nargs == 0:
        spelled = list(action.option_strings)
    else:
        if metavar is None:
            metavar = "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
        if isinstance(metavar, tuple):
            metavar = " ".join(metavar)
        if not action.option_strings:
            return str(metavar)
        spelled = [f"{o} {metavar}" for o in action.option_strings]
    return ", ".join(spelled)


def cli_options(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """(how the option or argument is written, its help) for every argument of
    ``parser``, in the order ``--help`` lists them; ``-h`` left out."""
    out = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        text = _option_help(parser, action)
        if not text and not action.option_strings:
            text = "positional"
        out.append((_option_name(action), text))
    return out


def render_cli() -> str:
    """The command-line reference: the top-level usage, then per command its usage,
    description and every option with its help, as ``uprobe-emu COMMAND --help`` gives
    them."""
    from emu.frontends.cli import build_parser

    parser = build_parser()
    lines = [
        "# Command-line reference",
        "",
        "Generated from the argument parser at build time: what `uprobe-emu COMMAND --help` says.",
        "",
        "```text",
        parser.format_usage().strip(),
        "```",
        "",
    ]
    if parser.description:
        lines += [md_text(parser.description), ""]
    lines += ["| option | |", "|---|---|"]
    lines += [f"| `{name}` | {md_text(text)} |" for name, text in cli_options(parser)]
    lines.append("")
    helps = subcommand_help(parser)
    commands = subcommands(parser)
    lines += ["| command | what it does |", "|---|---|"]
    lines += [f"| [`{name}`](#{name}) | {md_text(helps.get(name, ''))} |" for name in commands]
    lines.append("")
    for name, sub in commands.items():
        lines += [f"## {name}", ""]
        if helps.get(name):
            lines += [md_text(helps[name][0].upper() + helps[name][1:]) + ".", ""]
        lines += ["```text", sub.format_usage().strip(), "```", ""]
        if sub.description:
            lines += [md_text(sub.description), ""]
        opts = cli_options(sub)
        if opts:
            lines += ["| argument or option | |", "|---|---|"]
            lines += [f"| `{opt}` | {md_text(text)} |" for opt, text in opts]
            lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------ kernel profiles
def _comments(source: str) -> dict[int, tuple[str, bool]]:
    """line -> (comment text, whether the line holds code too)."""
    out = {}
    code_lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            code_lines.update(range(tok.start[0], tok.end[0] + 1))
    return {n: (text, n in code_lines) for n, text in out.items()}


def _notes(comments: dict[int, tuple[str, bool]], first: int, last: int) -> list[str]:
    """The comments of lines first..last as notes: a comment after code starts a note,
    a comment line right under a comment continues it, any other starts one."""
    notes: list[str] = []
    for n in range(first, last + 1):
        if n not in comments:
            continue
        text, after_code = comments[n]
        if notes and not after_code and n - 1 in comments:
            notes[-1] += " " + text
        else:
            notes.append(text)
    return notes


def profile_changes(source: str | None = None) -> dict[str, list[str]]:
    """profile name -> the notes ``_build()`` in kernel_model/profiles.py gives with the
    changes leading to it (kernel commits and their titles)."""
    source = PROFILES_SOURCE.read_text() if source is None else source
    comments = _comments(source)
    build = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "_build")
    out: dict[str, list[str]] = {}
    start = build.body[0].lineno
    for stmt in build.body:
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.targets[0], ast.Subscript)
            and isinstance(stmt.targets[0].slice, ast.Constant)
        ):
            out[stmt.targets[0].slice.value] = _notes(comments, start, stmt.end_lineno)
            start = stmt.end_lineno + 1
    return out


def switch_notes(source: str | None = None) -> dict[str, str]:
    """switch -> the comments next to and above its field in ``KernelProfile``."""
    source = PROFILES_SOURCE.read_text() if source is None else source
    comments = _comments(source)
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "KernelProfile")
    out = {}
    start = cls.body[0].lineno
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            notes = [t for t in _notes(comments, start, stmt.end_lineno) if not t.startswith("--")]
            out[stmt.target.id] = " ".join(notes)
            start = stmt.end_lineno + 1
    return out


def _value(v) -> str:
    return "—" if v is None else str(v)


def render_profiles() -> str:
    """The kernel profile reference: per profile what changed from the one before (the
    switch values, computed from the profiles themselves) and the commits the source
    cites; then every switch of every profile, and what each switch means."""
    from kernel_model.profiles import KernelProfile

    names = KernelProfile.names()
    profiles = [KernelProfile.get(n) for n in names]
    changes = profile_changes()
    meaning = switch_notes()
    lines = [
        "# Kernel profiles",
        "",
        "Generated from `kernel_model/profiles.py` at build time. A profile is one kernel release's "
        "values of the uprobes switches; `--kernel V` (CLI) or `Machine(kernel=V)` picks one, and "
        "`--kernel V:switch=value` or `Machine(kernel=V, switch=value)` overrides a switch "
        "(see [Kernel profiles](../guide/kernel-profiles.md)).",
        "",
        "## What each release changed",
        "",
        "| profile | uname -r | switches changed from the profile above | kernel changes |",
        "|---|---|---|---|",
    ]
    prev = None
    for prof in profiles:
        if prev is None:
            changed = "the base: every switch as in the table below"
        else:
            diff = [
                f"`{k}={_value(getattr(prof, k))}`"
                for k in KernelProfile.SWITCHES
                if getattr(prof, k) != getattr(prev, k)
            ]
            changed = ", ".join(diff) if diff else "none"
        notes = "; ".join(md_text(n) for n in changes.get(prof.name, []))
        lines.append(f"| {prof.name} | {prof.release} | {changed} | {notes} |")
        prev = prof
    lines += [
        "",
        "## Every switch of every profile",
        "",
        "| switch | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for k in KernelProfile.SWITCHES:
        lines.append(f"| `{k}` | " + " | ".join(md_text(_value(getattr(p, k))) for p in profiles) + " |")
    lines += ["", "## What the switches mean", "", "| switch | values and releases |", "|---|---|"]
    lines += [f"| `{k}` | {md_text(meaning.get(k, ''))} |" for k in KernelProfile.SWITCHES]
    lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------ syscalls
def render_syscalls() -> str:
    """The syscall table page: every syscall the machine models, from the registry."""
    from kernel_model.arch.x86.entry.syscall_table import render_markdown

    return "\n".join(
        [
            "# Syscall table",
            "",
            "Every syscall the machine models (`Machine().syscalls.table`), generated from the syscall "
            "registry at build time. Each handler is registered where its subsystem lives with "
            '`@syscall(nr, name)` (`partial="..."` says what of it is not modeled); '
            "`kernel_model/arch/x86/entry/syscall_table.py` collects them, builds each machine's dispatch table "
            "and renders this table. Any other number returns `-ENOSYS` and is counted by `nr:name` in "
            "`m.counters.unknown_syscalls`; `uprobe-emu run --counters` prints them, and a run stopped while its "
            "task retried one names it (`last syscall 442 (mount_setattr) is not modeled`).",
            "",
            render_markdown(),
        ]
    )


PAGES = {
    "reference/cli.md": render_cli,
    "reference/profiles.md": render_profiles,
    "reference/syscalls.md": render_syscalls,
}


# ------------------------------------------------------------------ the MkDocs hook
def on_files(files, config):
    """Add the generated pages to the site's files (MkDocs hook)."""
    from mkdocs.structure.files import File

    for uri, render in PAGES.items():
        files.append(File.generated(config, uri, content=render()))
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write the documentation's generated pages into a directory.")
    ap.add_argument("outdir", help="directory to write reference/*.md into")
    args = ap.parse_args(argv)
    for uri, render in PAGES.items():
        path = Path(args.outdir) / uri
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
