"""The stepper follows an exec of the stepped process as gdb does (``follow-exec-mode
same``): gdb's ``process N is executing new program: PATH`` note, breakpoints re-set by
location in the new program (one whose function the new program lacks leaves with gdb's
``Error in re-setting breakpoint N: ...``), symbols and frames of the new image, and a
stepi over the exec syscall that runs on to the next breakpoint, as gdb 13's does.
Each transcript is compared with a real gdb running the same gcc-built programs."""

from __future__ import annotations

import re
import subprocess

import pytest
from test_stepper_unwind import _tool, backtraces, shell_lines, unwind_guest  # noqa: F401 (fixture)

from emu import Machine
from emu.debug.disasm import Disassembler
from emu.frontends.stepper import Stepper
from kernel_model.fs.elf import image_of

NOTE = re.compile(r"^process (\d+) is executing new program: (.*)$")


def gdb_run(prog: str, commands: list[str], args: tuple) -> tuple[list[str], list[str]]:
    p = subprocess.run(
        [
            _tool("gdb"),
            "-nx",
            "-batch",
            "-ex",
            "set debuginfod enabled off",
            *sum((["-ex", c] for c in commands), []),
            "--args",
            prog,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return p.stdout.splitlines(), p.stderr.splitlines()


def after_exec(lines: list[str], pid_of) -> list[str]:
    """The transcript from the exec note on, pid as N, without gdb's libthread_db chatter
    and the stepper's ``=> insn`` display lines."""
    start = next((i for i, line in enumerate(lines) if NOTE.match(line)), None)
    assert start is not None, f"no exec note in {lines}"
    out = []
    for line in lines[start:]:
        if "libthread_db" in line or line.startswith("=> "):
            continue
        out.append(NOTE.sub(lambda m: f"process N is executing new program: {m.group(2)}", line))
    assert lines[start].split()[1] == str(pid_of), f"note {lines[start]!r}, expected pid {pid_of}"
    return out


# (first program, exec'd program, its -O, the breakpoint's location); gdb puts `break
# again` past a push rbp prologue, the stepper at the symbol: -O0 code gets `*again`
EXECS = [
    ("static", "dynamic", "-O2", "again"),
    ("dynamic", "static", "-O2", "again"),
    ("static", "static", "-O0", "*again"),
]


@pytest.mark.parametrize("first,second,opt,location", EXECS, ids=[f"{a}-to-{b}{o}" for a, b, o, _ in EXECS])
def test_breakpoints_are_re_set_by_name_in_the_new_program(unwind_guest, first, second, opt, location):
    """A breakpoint on `again` (reached only in the exec'd image) stops there at the new
    program's address; symbols and frames are the new program's."""
    prog, new = unwind_guest(first, "-O2"), unwind_guest(second, opt)
    commands = [f"break {location}", "run", "bt", "p $pc"]
    theirs, _ = gdb_run(prog, commands, ("exec", new))
    m = Machine.from_elf(prog, argv=[prog, "exec", new])
    ours, err, _ = shell_lines(m, commands)
    assert err == []
    pid = m.main_process.pid
    want = after_exec(theirs, NOTE.match(next(x for x in theirs if NOTE.match(x))).group(1))
    got = after_exec(ours, pid)
    assert got == want, f"after the exec: expected (gdb)\n{want}\nactual (stepper)\n{got}"
    assert got[0] == f"process N is executing new program: {new}"


def test_a_breakpoint_on_a_function_the_new_program_lacks_is_not_re_set(unwind_guest):
    """__libc_setup_tls is in the static program only: gdb's error line, on stderr, at the
    exec; the breakpoint does not stop in the new image, the other one does."""
    prog, new = unwind_guest("static", "-O2"), unwind_guest("dynamic", "-O2")
    commands = ["break again", "break __libc_setup_tls", "run", "continue", "bt"]
    theirs, their_err = gdb_run(prog, commands, ("exec", new))
    m = Machine.from_elf(prog, argv=[prog, "exec", new])
    ours, err, shell = shell_lines(m, commands)
    error = 'Error in re-setting breakpoint 2: Function "__libc_setup_tls" not defined.'
    assert error in their_err, their_err
    assert err == [error], f"stepper errors: expected [{error!r}], got {err}"
    stops = lambda lines: [x for x in lines if x.startswith("Breakpoint ") and ", " in x]  # noqa: E731
    assert stops(ours) == stops(theirs), f"stops: gdb {stops(theirs)}, stepper {stops(ours)}"
    assert backtraces(ours) == backtraces(theirs)
    assert sorted(shell.s.breakpoints) == [1]


def test_stepi_over_the_exec_syscall_runs_on_to_a_breakpoint_in_the_new_image(unwind_guest):
    """gdb 13 does not stop a stepi at the exec: the new program runs to `*again`."""
    prog, new = unwind_guest("static", "-O2"), unwind_guest("static", "-O0")
    m = Machine.from_elf(prog, argv=[prog, "exec", new])
    s = Stepper(m)
    addr = m.resolve("execve")
    while s.original_insn(addr).mnemonic != "syscall":
        addr = s.original_insn(addr).next
    commands = ["break *again", f"break *{addr:#x}", "run", "stepi", "bt"]
    theirs, _ = gdb_run(prog, commands, ("exec", new))
    ours, err, _ = shell_lines(Machine.from_elf(prog, argv=[prog, "exec", new]), commands)
    assert err == []
    want = after_exec(theirs, NOTE.match(next(x for x in theirs if NOTE.match(x))).group(1))
    got = after_exec(ours, m.main_process.pid)
    assert got == want, f"after the exec: expected (gdb)\n{want}\nactual (stepper)\n{got}"


def first_instruction(m: Machine) -> int:
    """Where the new image starts: the interpreter's entry (a dynamic program) or the
    program's own."""
    for vma in m.mem.vmas:
        if (
            vma.file is not None
            and vma.pgoff == 0
            and image_of(vma.file) is not None
            and vma.file.elf.path.endswith(".so.2")
            and "ld-linux" in vma.name
        ):
            return vma.start + vma.file.elf.entry  # ld.so links at 0
    exe = m.process.exe
    return exe.elf.entry + (getattr(exe, "load_bias", 0) or 0)


@pytest.mark.parametrize("second,opt", [("static", "-O0"), ("dynamic", "-O2")], ids=["static", "dynamic"])
def test_a_single_step_through_the_exec_ends_at_the_new_images_entry(unwind_guest, second, opt):
    """The engine's step() is one instruction: the exec syscall, ending at the first
    instruction of the new image (its interpreter's for a dynamic program), decoded and
    symbolized from the new address space; the exec is queued as gdb's note."""
    prog, new = unwind_guest("static", "-O2"), unwind_guest(second, opt)
    m = Machine.from_elf(prog, argv=[prog, "exec", new])
    s = Stepper(m)
    addr = m.resolve("execve")
    while s.original_insn(addr).mnemonic != "syscall":
        addr = s.original_insn(addr).next
    s.run_until(f"*{addr:#x}")
    ev = s.step()
    entry = first_instruction(m)
    assert (ev.reason, ev.insns, ev.rip) == ("step", 1, entry), (
        f"expected a 1-insn step to {entry:#x}, got {ev.reason} {ev.insns} {ev.rip:#x}"
    )
    insn = s.original_insn(ev.rip)
    assert insn.bytes == m.mem.read(ev.rip, insn.size), "decoded from the old address space"
    fresh = Disassembler(m).symbolize(ev.rip)
    assert s.symbolize(ev.rip) == fresh, f"symbol at the entry: expected {fresh}, got {s.symbolize(ev.rip)}"
    assert s.take_exec_notes() == [("out", f"process {m.main_process.pid} is executing new program: {new}")]
