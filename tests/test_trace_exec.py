"""The tracer follows the traced task across execve (tests/c/exec_work.c).

The gcc-built program execs a copy of itself named ``a_long_program_name``: the trace
goes on in the new image (an ``exec`` line, a full register line at the interpreter's
entry, then the new program's and its libraries' code, symbolized there:
``<work_loop>``, ``<malloc in libc.so.6>``); ftrace lines after the exec name the task
by the kernel's comm (the new file's basename cut to 15 bytes); ``--from`` takes a
library's symbol (``libc:malloc``, or a bare ``malloc`` found in the library once it is
mapped) and a start not reached before the exec is looked for in the new image.  The
events and counters of a traced run equal those of an untraced one.
"""

from __future__ import annotations

import io
import json
import re
import shutil

import pytest
from cli_helpers import cli

from emu import Machine
from emu.frontends.trace import Tracer

NEW_COMM = "a_long_program_"  # "a_long_program_name"[:15] (__set_task_comm)
WORK = 3


@pytest.fixture(scope="module")
def programs(build_c, tmp_path_factory):
    """(the exec'ing program, the copy it execs)."""
    exe = build_c("exec_work.c", name="exec_work")
    copy = tmp_path_factory.mktemp("execwork") / "a_long_program_name"
    shutil.copy(exe, copy)
    return exe, str(copy)


def machine(programs) -> Machine:
    exe, copy = programs
    return Machine.from_elf(exe, argv=[exe, "exec", copy, "work", str(WORK)])


def traced(programs, fmt="text", start=None, events=()):
    m = machine(programs)
    out = io.StringIO()
    t = Tracer(m, fmt, out, start=start)
    for spec in events:
        m.uprobes.add_event(spec, output=t.ftrace_output())
    r = m.run(timeout=120)
    t.close()
    assert r.exit_code == 0, r.describe()
    assert r.stdout == f"exec {programs[1]}\nmallocs={WORK} frees={WORK}\n".encode(), r.stdout
    return out.getvalue(), m, t


def headers(text: str) -> list[str]:
    return re.findall(r"^[0-9a-f]{16} <(.*)>:$", text, re.M)


def test_trace_goes_on_in_the_exec_d_image(programs):
    text, m, t = traced(programs)
    lines = text.splitlines()
    exec_line = f"    # exec: task 1000 ({NEW_COMM}) now runs {programs[1]} in a new address space"
    assert lines.count(exec_line) == 1, f"expected {exec_line!r} once; the trace ends with {lines[-3:]}"
    after = text[text.index(exec_line) :]
    regs = after.splitlines()[1]
    first_rip = re.search(r" rip=(0x[0-9a-f]+)", lines[1]).group(1)
    assert regs.startswith("# registers: rax=0x0 ") and f" rip={first_rip} " in regs, (
        f"expected the new image's registers at ld.so's entry {first_rip}, got {regs!r}"
    )
    new = headers(after)
    assert "work_loop" in new and "malloc in libc.so.6" in new, f"headers after the exec: {new[:40]}"
    assert "before_exec" in headers(text[: text.index(exec_line)]) and "before_exec" not in new
    assert lines[-1] == f"# end: {t.insns} instructions traced (guest exited)", lines[-1]


def test_ftrace_lines_after_exec_have_the_new_comm_and_equal_an_untraced_run(programs, tmp_path):
    exe, copy = programs
    specs = [f"p:g/wl {copy}:work_loop n=%di:s32", "uprobe:libc:malloc"]
    text, _, _ = traced(programs, events=specs)
    in_trace = [line[len("    # ftrace: ") :] for line in text.splitlines() if line.startswith("    # ftrace: ")]
    args = [a for s in specs for a in ("-e", s)]
    untraced = cli("run", *args, exe, "exec", copy, "work", str(WORK))
    assert untraced.returncode == 0, untraced.stderr
    want = [line.strip() for line in untraced.stderr.decode().splitlines()]
    assert len(want) == 1 + WORK and all(w.startswith(f"{NEW_COMM}-1000 ") for w in want), want
    assert [line.strip() for line in in_trace] == want, f"trace {in_trace}\n  run {want}"


def test_counters_of_a_traced_run_equal_an_untraced_one(programs):
    _, traced_m, _ = traced(programs, events=["uprobe:libc:malloc"])
    m = machine(programs)
    m.uprobes.add_event("uprobe:libc:malloc", output=io.StringIO())
    r = m.run(timeout=120)
    assert r.exit_code == 0, r.describe()
    for name in ("uprobe_hits", "bp_traps", "emulated", "xol_singlesteps", "syscalls"):
        got, want = getattr(traced_m.counters, name), getattr(m.counters, name)
        assert got == want, f"{name}: traced {got} != untraced {want}"


@pytest.mark.parametrize(
    "start, label",
    [
        ("libc:malloc", "malloc in libc.so.6"),
        ("malloc", "malloc in libc.so.6"),
        ("work_loop", "work_loop"),
    ],
    ids=["path-symbol", "bare-library-symbol", "new-program-symbol"],
)
def test_from_a_symbol_reached_only_after_the_exec(programs, start, label):
    """The first image never calls malloc nor reaches work_loop: the start is found in
    the new image (libc mapped by its ld.so, work_loop in the new program)."""
    text, m, t = traced(programs, start=start)
    assert "# exec:" not in text, "the trace started before the exec"
    assert headers(text)[0] == label, f"first header {headers(text)[:1]}, expected {label!r}"
    assert text.splitlines()[0] == f"# uprobe-emu trace: {programs[1]} (kernel {m.profile.name}, pid 1000)"
    assert t.start_addr == int(re.search(r"rip=(0x[0-9a-f]+)", text).group(1), 16)


def test_jsonl_symbolizes_instructions_of_the_new_image_with_their_library(programs):
    text, _, _ = traced(programs, fmt="jsonl", start="libc:malloc")
    insns = [json.loads(line) for line in text.splitlines() if '"type":"insn"' in line]
    assert (
        insns[0]["sym"] == "malloc in libc.so.6"
        and insns[1]["sym"].startswith("malloc+0x")
        and insns[1]["sym"].endswith(" in libc.so.6")
    ), insns[:2]


def test_jsonl_exec_event(programs):
    text, _, _ = traced(programs, fmt="jsonl")
    objs = [json.loads(line) for line in text.splitlines()]
    ex = [o for o in objs if o.get("event") == "exec"]
    assert [(o["tid"], o["filename"]) for o in ex] == [(1000, programs[1])], ex
    i = objs.index(ex[0])
    assert objs[i + 1]["type"] == "start", objs[i + 1]


def test_cli_trace_from_a_library_symbol(programs, tmp_path):
    exe, copy = programs
    out = tmp_path / "t.txt"
    p = cli("trace", "--from", "libc:malloc", "-o", str(out), exe, "exec", copy, "work", "1")
    assert p.returncode == 0, p.stderr
    assert headers(out.read_text())[0] == "malloc in libc.so.6", out.read_text()[:500]


@pytest.mark.parametrize("count", [1, 3, 6])
def test_a_trace_that_ends_inside_a_block_lets_the_guest_run_on(programs, count):
    """The count runs out inside the first block after the start: removing the
    whole-space hook drops every translation from inside a callback, and the emu_start
    must end there too (a block chained to dropped code once sent the guest's call to
    the wrong address until its stack overflowed)."""
    exe = programs[0]
    m = Machine.from_elf(exe, argv=[exe, "work", "3"])
    out = io.StringIO()
    t = Tracer(m, "text", out, start="work_loop", count=count)
    r = m.run(timeout=60)
    t.close()
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, b"mallocs=3 frees=3\n"), r.describe()
    assert out.getvalue().splitlines()[-1] == f"# end: {count} instructions traced (count of {count} reached)"


def test_a_vfork_child_that_execs_leaves_the_trace(build_c):
    """tests/c/exec.c "vfork": the child borrows the traced CPU until its execve of
    /proc/self/exe gives it an address space of its own; the parent resumes."""
    exe = build_c("exec.c", "-static", name="exec")
    m = Machine.from_elf(exe, argv=[exe, "vfork"])
    out = io.StringIO()
    t = Tracer(m, "text", out)
    r = m.run(timeout=60)
    t.close()
    assert r.exit_code == 0, r.describe()
    lines = out.getvalue().splitlines()
    line = "    # exec: task 1001 (exe) now runs /proc/self/exe in a new address space (it leaves this trace)"
    assert lines.count(line) == 1, [x for x in lines if "exec:" in x]
    i = lines.index(line)
    assert lines[i + 2] == "# task 1000 (exec) is on the CPU", lines[i : i + 3]


def test_cli_a_bare_symbol_no_mapped_file_has_is_reported(programs, tmp_path):
    """A dynamic program's bare --from waits for its library (as a pending gdb
    breakpoint); if nothing the process mapped defined it, the command says so."""
    exe = programs[0]
    p = cli("trace", "--from", "no_such_symbol", "-o", str(tmp_path / "t"), exe, "work", "1")
    assert p.returncode == 0, p.stderr
    assert (
        p.stderr.decode().splitlines()[-1] == "uprobe-emu: trace: no_such_symbol was never "
        "reached (neither the program nor a file it mapped has it)"
    ), p.stderr
