"""The ``uprobe-emu`` console script.

A Ctrl-C while the tool is still importing its modules (a second or more on a loaded
machine) ends it with the CLI's one line and exit 130, not a traceback from the middle of
an import.  When the command has returned, the process ends without Python's teardown of
its modules (:func:`end_process`)."""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading

EXIT_INTERRUPTED = 130


def main() -> int:
    try:
        from emu.frontends.cli import main as cli_main

        code = cli_main()  # handles Ctrl-C itself once it has parsed its arguments
    except KeyboardInterrupt:
        print("uprobe-emu: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    end_process(code)
    return code


def end_process(code: int) -> None:
    """Leave with ``code`` now, as the interpreter would but for its last step.

    At exit Python frees every object of every module, one module after the other: for
    the four hundred modules a run loads, 15-25 ms, as long as the whole run of a small
    program.  The console script has nothing left to do once its command has returned,
    so it does what the interpreter's exit does that anyone can see - collects the
    objects left in reference cycles (their ``__del__`` runs), runs the ``atexit``
    callbacks (Ray's shutdown, the finalizers that close the guests' host files),
    flushes stdout and stderr - and ends with ``os._exit``.  While another thread still runs it returns
    instead, and Python's exit waits for that thread as usual."""
    if threading.active_count() != 1:
        return
    gc.collect()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe, a closed stream: nothing more to write
            pass
    os._exit(code)
