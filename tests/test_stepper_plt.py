"""PLT stubs in the stepper are named as gdb names them (``malloc@plt``, BFD's
synthetic symbols): ``break malloc@plt``, the stop line, ``bt``, ``p $pc`` and the call
annotation in ``disas``; compared with a real gdb on the same gcc-built program."""

from __future__ import annotations

import re
import subprocess

import pytest
from test_stepper_exec import gdb_run
from test_stepper_unwind import _tool, shell_lines

from emu import Machine
from emu.debug.plt import plt_entries

SOURCE = r"""
#include <stdlib.h>
__attribute__((noinline)) void *grab(int n) { void *p = malloc(n); asm volatile("" ::: "memory"); return p; }
int main(int argc, char **argv) { void *p = grab(argc * 16); free(p); return p == NULL; }
"""
NO_DEBUG = ["set debug-file-directory /nonexistent"]


@pytest.fixture(scope="module", params=[[], ["-fcf-protection=full", "-Wl,-z,ibtplt"]], ids=["plt", "plt.sec"])
def plt_guest(tmp_path_factory, request):
    out = tmp_path_factory.mktemp("plt")
    (out / "plt.c").write_text(SOURCE)
    exe = out / "plt"
    cmd = [_tool("gcc"), "-O1", *request.param, "-o", str(exe), str(out / "plt.c")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, f"gcc failed: {' '.join(cmd)}\n{res.stderr}"
    return str(exe)


def test_plt_entries_name_malloc_and_free(plt_guest):
    names = sorted(name for _, _, name in plt_entries(open(plt_guest, "rb").read()))
    assert {"malloc@plt", "free@plt"} <= set(names), names


def test_break_at_malloc_plt_stops_and_backtraces_as_gdb(plt_guest):
    commands = ["break malloc@plt", "run", "bt", "p $pc"]
    theirs, _ = gdb_run(plt_guest, NO_DEBUG + commands, ())
    ours, err, _ = shell_lines(Machine.from_elf(plt_guest), commands)
    assert err == []
    keep = re.compile(r"^(Breakpoint 1(\.1)?, |#\d|\$1 = )")
    want = [x.replace("Breakpoint 1.1,", "Breakpoint 1,") for x in theirs if keep.match(x)]
    got = [x for x in ours if keep.match(x)]
    assert got == want, f"expected (gdb)\n{want}\nactual (stepper)\n{got}"
    assert "Breakpoint 1, 0x" in got[0] and got[0].endswith(" in malloc@plt ()"), got


def test_the_call_to_malloc_is_annotated_as_malloc_plt(plt_guest):
    ours, err, _ = shell_lines(Machine.from_elf(plt_guest), ["break grab", "run", "disas"])
    assert err == []
    calls = [x for x in ours if "\tcall " in x]
    assert calls and calls[0].endswith("<malloc@plt>"), calls


def test_info_symbol_is_gdbs(plt_guest):
    """NAME [+ N] in section S of FILE: the program by its path, libc by its link_map
    name; an address no symbol holds says so."""
    commands = [
        "break grab",
        "run",
        "info symbol $pc",
        "info symbol $pc+4",
        "info symbol malloc",
        "info symbol 0",
        "info symbol $sp",
    ]
    theirs, their_err = gdb_run(plt_guest, NO_DEBUG + commands, ())
    ours, err, _ = shell_lines(Machine.from_elf(plt_guest), commands)
    assert err == []
    pick = lambda lines: [x for x in lines if " in section " in x or x.startswith("No symbol matches")]  # noqa: E731
    assert pick(ours) == pick(theirs), f"expected (gdb)\n{pick(theirs)}\nactual (stepper)\n{pick(ours)}"
    assert len(pick(ours)) == 5, ours


def test_info_symbol_names_a_plt_stub(plt_guest):
    m = Machine.from_elf(plt_guest)
    start = next(a for a, _, name in plt_entries(open(plt_guest, "rb").read()) if name == "malloc@plt")
    ours, err, _ = shell_lines(m, ["break main", "run", f"info symbol {start + m.process.exe.load_bias + 2:#x}"])
    assert err == []
    assert (
        ours[-1] == f"malloc@plt + 2 in section {'.plt.sec' if '.plt.sec' in section_names(plt_guest) else '.plt'}"
        f" of {plt_guest}"
    ), ours


def section_names(path: str) -> set[str]:
    out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True).stdout
    return set(re.findall(r"\] (\.\S+)", out))


def test_the_plt_jump_names_its_got_slot_as_gdb(plt_guest):
    """x/2i at malloc@plt: the rip-relative GOT operand of its jump (after endbr64
    under IBT) is annotated <malloc@got.plt>."""
    commands = ["break malloc@plt", "run", "x/2i $pc"]
    theirs, _ = gdb_run(plt_guest, NO_DEBUG + commands, ())
    ours, err, _ = shell_lines(Machine.from_elf(plt_guest), commands)
    assert err == []
    mine = [x for x in ours if "\tjmp " in x or "\tbnd jmp " in x][-1]
    gdbs = [x for x in theirs if "\tjmp " in x or "\tbnd jmp " in x][-1]
    assert gdbs.endswith(" <malloc@got.plt>") and mine.endswith(" <malloc@got.plt>"), (gdbs, mine)
    assert mine.split("\t")[0].lstrip("=> ") == gdbs.split("\t")[0].lstrip("=> "), (gdbs, mine)


def test_break_on_a_function_only_the_plt_has_yet_moves_to_the_library(plt_guest):
    """At the interpreter's entry libc is not loaded: `break malloc` is set on
    malloc@plt (gdb's linespec), then re-set to libc's malloc when ld.so maps it, where
    it hits; transcripts as gdb's after `starti`."""
    commands = ["starti", "break malloc", "info breakpoints", "continue", "info breakpoints", "bt 3"]
    theirs, _ = gdb_run(plt_guest, NO_DEBUG + commands, ())
    ours, err, _ = shell_lines(Machine.from_elf(plt_guest), commands)
    assert err == []

    def drop(lines):
        return [x for x in lines if x and not x.startswith("=> ") and "libthread_db" not in x and x != "Continuing."]

    assert drop(ours) == drop(theirs), f"expected (gdb)\n{drop(theirs)}\nactual (stepper)\n{drop(ours)}"
