"""The ``uprobe-emu`` console script: a Ctrl-C while the tool is still importing its
modules (a second or more on a loaded machine) ends it with the CLI's one line and exit
130, not a traceback from the middle of an import."""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130


def main() -> int:
    try:
        from emu.frontends.cli import main as cli_main
        return cli_main()       # handles Ctrl-C itself once it has parsed its arguments
    except KeyboardInterrupt:
        print("uprobe-emu: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
