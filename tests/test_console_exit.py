"""The console script ends the process without Python's module teardown, but with
everything else the interpreter's exit does: its exit code, objects in reference cycles
finalized, the atexit callbacks and finalizers, stdout and stderr flushed; and as Python
does while another thread still runs."""

from __future__ import annotations

import subprocess
import sys


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from emu.console import end_process\n" + code],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_exit_code_is_the_commands():
    assert run("end_process(7)\nraise SystemExit(0)").returncode == 7


def test_buffered_output_is_flushed():
    p = run("import sys\nprint('out', end='')\nsys.stderr.write('err')\nend_process(0)")
    assert (p.stdout, p.stderr) == ("out", "err")


def test_atexit_callbacks_run():
    p = run("import atexit\natexit.register(print, 'atexit ran')\nend_process(0)")
    assert p.stdout == "atexit ran\n"


def test_finalizers_of_live_objects_run():
    p = run(
        "import weakref\nclass Held:\n    pass\nheld = Held()\nweakref.finalize(held, print, 'finalized')\n"
        "end_process(0)"
    )
    assert p.stdout == "finalized\n"


def test_an_object_in_a_reference_cycle_is_finalized():
    p = run(
        "class Node:\n    def __del__(self):\n        print('collected')\nn = Node()\nn.me = n\ndel n\nend_process(0)"
    )
    assert p.stdout == "collected\n"


def test_with_another_thread_running_python_exits_as_usual():
    p = run(
        "import threading, time\n"
        "t = threading.Thread(target=lambda: (time.sleep(0.3), print('thread done')))\nt.start()\n"
        "end_process(5)\nprint('returned')\nraise SystemExit(3)"
    )
    assert (p.returncode, p.stdout) == (3, "returned\nthread done\n")


def test_a_closed_stdout_is_no_error():
    p = subprocess.run(
        [sys.executable, "-c", "from emu.console import end_process\nimport sys\nprint('x' * 100000)\nend_process(4)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.returncode == 4 and p.stderr == b""
