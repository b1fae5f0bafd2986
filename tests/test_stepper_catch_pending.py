"""The stepper's ``catch exec`` and pending breakpoints, each transcript compared with a
real gdb running the same gcc-built programs natively (no debug info: gdb's
``set debug-file-directory`` points nowhere, so both name functions from ELF symbols)."""

from __future__ import annotations

import re
import subprocess

import pytest
from test_stepper_exec import NOTE, after_exec, gdb_run
from test_stepper_unwind import _tool, shell_lines, unwind_guest  # noqa: F401 (fixture)

from emu import Machine

NO_DEBUG = ["set debug-file-directory /nonexistent"]
LIB_SOURCE = "int pend_func(int x) { return x * 7 + 1; }\n"
MAIN_SOURCE = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) return 2;
    int (*f)(int) = (int (*)(int))dlsym(h, "pend_func");
    printf("%d\n", f(argc));
    return 0;
}
"""


@pytest.fixture(scope="module")
def dlopen_guest(tmp_path_factory):
    """(program, library): a program that dlopen()s argv[1] and calls its pend_func."""
    out = tmp_path_factory.mktemp("pending")
    (out / "lib.c").write_text(LIB_SOURCE)
    (out / "main.c").write_text(MAIN_SOURCE)
    lib, prog = out / "libpend.so", out / "dlmain"
    for cmd in (
        [_tool("gcc"), "-O2", "-shared", "-fPIC", "-o", str(lib), str(out / "lib.c")],
        [_tool("gcc"), "-O2", "-o", str(prog), str(out / "main.c"), "-ldl"],
    ):
        res = subprocess.run(cmd, capture_output=True, text=True)
        assert res.returncode == 0, f"gcc failed: {' '.join(cmd)}\n{res.stderr}"
    return str(prog), str(lib)


def without_chatter(lines: list[str]) -> list[str]:
    return [x for x in lines if "libthread_db" not in x and not x.startswith("=> ")]


def test_catch_exec_stops_in_the_new_image_as_gdb_does(unwind_guest):
    """The exec note, gdb's catchpoint line (in ld.so, named by the interpreter's
    path) and the catchpoint in info breakpoints, with the program it caught."""
    prog, new = unwind_guest("static", "-O2"), unwind_guest("dynamic", "-O2")
    commands = ["catch exec", "run", "info breakpoints"]
    theirs, _ = gdb_run(prog, NO_DEBUG + commands, ("exec", new))
    m = Machine.from_elf(prog, argv=[prog, "exec", new])
    ours, err, _ = shell_lines(m, commands)
    assert err == []
    assert ours[0] == theirs[0] == "Catchpoint 1 (exec)", (ours[:1], theirs[:1])
    pid = NOTE.match(next(x for x in theirs if NOTE.match(x))).group(1)
    want = without_chatter(after_exec(theirs, pid))
    got = without_chatter(after_exec(ours, m.main_process.pid))
    assert got == want, f"after the exec: expected (gdb)\n{want}\nactual (stepper)\n{got}"


def test_info_breakpoints_with_a_catchpoint_and_a_breakpoint(unwind_guest):
    """The Address column widens for a breakpoint; rows in number order."""
    prog = unwind_guest("static", "-O2")
    commands = ["catch exec", "break main", "info breakpoints"]
    theirs, _ = gdb_run(prog, NO_DEBUG + commands, ())
    ours, err, _ = shell_lines(Machine.from_elf(prog), commands)
    assert err == []
    assert ours == theirs, f"expected (gdb)\n{theirs}\nactual (stepper)\n{ours}"


def test_a_breakpoint_on_a_library_not_loaded_is_pending_as_in_gdb(dlopen_guest):
    """gdb's error line on stderr, its pending line on stdout, <PENDING> in the table."""
    prog, lib = dlopen_guest
    commands = ["set breakpoint pending on", "break pend_func", "info breakpoints"]
    theirs, their_err = gdb_run(prog, NO_DEBUG + commands, (lib,))
    ours, err, _ = shell_lines(Machine.from_elf(prog, argv=[prog, lib]), commands)
    assert err == their_err == ['Function "pend_func" not defined.'], (err, their_err)
    assert ours == theirs, f"expected (gdb)\n{theirs}\nactual (stepper)\n{ours}"


def test_a_pending_breakpoint_hits_when_the_library_is_loaded(dlopen_guest):
    """Resolved at the dlopen, it stops in the library (named as gdb names it, with
    `from LIB`), and the frame below is main."""
    prog, lib = dlopen_guest
    commands = ["set breakpoint pending on", "break pend_func", "run", "bt", "info breakpoints"]
    theirs, _ = gdb_run(prog, NO_DEBUG + commands, (lib,))
    ours, _, shell = shell_lines(Machine.from_elf(prog, argv=[prog, lib]), commands)
    stop = f"Breakpoint 1, 0x[0-9a-f]+ in pend_func \\(\\) from {re.escape(lib)}"
    assert any(re.fullmatch(stop, x) for x in theirs), theirs
    assert without_chatter(ours)[1:] == without_chatter(theirs)[1:], (
        f"expected (gdb)\n{theirs}\nactual (stepper)\n{ours}"
    )
    assert shell.s.breakpoints[1].hits == 1


def test_set_breakpoint_pending_off_makes_no_breakpoint(dlopen_guest):
    prog, lib = dlopen_guest
    ours, err, shell = shell_lines(
        Machine.from_elf(prog, argv=[prog, lib]), ["set breakpoint pending off", "break pend_func", "info breakpoints"]
    )
    assert err == ['Function "pend_func" not defined.']
    assert ours == ["No breakpoints or watchpoints."], ours
    assert shell.s.pending_breakpoints() == {}
