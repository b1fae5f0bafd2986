"""The stepper's frames against a real gdb's: ``bt`` unwinds with each file's ``.eh_frame``
at any instruction (a leaf without a frame pointer, a prologue after ``push rbp`` or
``sub rsp``, -O0 and -O2, static and dynamic programs, libc's ``malloc``), through
return addresses a uretprobe hijacked, and ``finish`` goes where gdb's goes, out of
``main`` too (``set backtrace past-main on``).

Each case runs the gcc-built tests/c/unwind.c natively under ``gdb -batch`` and in the
stepper with the same commands; the function of every frame is compared (and its pc,
for frames in the program, whose addresses are the same natively and in the model)."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_helpers import cli

from emu import Machine
from emu.frontends.stepper import Stepper, StepperShell
from kernel_model.fs.elf import image_of

C_SOURCE = Path(__file__).parent / "c" / "unwind.c"
GDB_PREAMBLE = ["set debuginfod enabled off", "set debug-file-directory /nonexistent", "set backtrace past-main on"]
FRAME = re.compile(r"^#(\d+)\s+(?:(?:(0x[0-9a-f]+) in )?(\S+) \(|(<signal handler called>))")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is required for the unwinding tests (install {name})")
    return path


@pytest.fixture(scope="session")
def unwind_guest(tmp_path_factory):
    """unwind_guest("static" | "dynamic", "-O0" | "-O2") -> the compiled program."""
    out = tmp_path_factory.mktemp("unwind")
    cache: dict = {}

    def build(link: str, opt: str) -> str:
        key = (link, opt)
        if key not in cache:
            exe = out / f"unwind_{link}{opt.replace('-', '_')}"
            cmd = [_tool("gcc"), opt, *(["-static"] if link == "static" else []), "-o", str(exe), str(C_SOURCE)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                pytest.fail(f"gcc failed: {' '.join(cmd)}\n{res.stderr}")
            cache[key] = str(exe)
        return cache[key]

    return build


def gdb_lines(prog: str, commands: list[str], args: tuple = ()) -> list[str]:
    p = subprocess.run(
        [_tool("gdb"), "-nx", "-batch", *sum((["-ex", c] for c in commands), []), "--args", prog, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return p.stdout.splitlines()


def shell_lines(m: Machine, commands: list[str]) -> tuple[list[str], list[str], StepperShell]:
    out, err = io.StringIO(), io.StringIO()
    shell = StepperShell(Stepper(m), out=out, err=err)
    for line in commands:
        shell.execute(line.format(malloc=f"*{libc_malloc(m):#x}") if "{malloc}" in line else line)
    return out.getvalue().splitlines(), err.getvalue().splitlines(), shell


def libc_malloc(m: Machine) -> int:
    """malloc's address in the mapped libc (the stepper breaks on program symbols by name)."""
    for vma in m.mem.vmas:
        f = vma.file
        if f is not None and "libc.so" in vma.name and vma.pgoff == 0 and image_of(f) is not None:
            return vma.start + f.elf.resolve("malloc").value
    raise AssertionError("no libc mapping with malloc")


def backtraces(lines: list[str]) -> list[list[tuple[str, int | None]]]:
    """Each ``bt`` listing in a transcript: [(function, pc)] in frame order."""
    out, cur = [], None
    for line in lines:
        m = FRAME.match(line)
        if m is None:
            cur = None
            continue
        if m.group(1) == "0" or cur is None:
            cur = []
            out.append(cur)
        cur.append((m.group(3) or m.group(4), int(m.group(2), 16) if m.group(2) else None))
    return out


def same_function(a: str, b: str, prog: str) -> bool:
    """Two names of one function (gdb and the model may pick different aliases of one
    address, e.g. __libc_start_main_impl / __libc_start_main in a static glibc)."""
    if a == b:
        return True
    syms = Machine.from_elf(prog).process.exe.elf.symbols
    return a in syms and b in syms and syms[a].value == syms[b].value


def assert_same_frames(ours: list, theirs: list, prog: str, in_exe) -> None:
    assert len(ours) == len(theirs) and theirs, (
        f"bt listings: gdb {len(theirs)}, stepper {len(ours)}\n gdb: {theirs}\n ours: {ours}"
    )
    for k, (o, t) in enumerate(zip(ours, theirs)):
        names_o, names_t = [f for f, _ in o], [f for f, _ in t]
        assert len(o) == len(t) and all(same_function(a, b, prog) for a, b in zip(names_o, names_t)), (
            f"bt #{k}: expected (gdb) {names_t}, actual (stepper) {names_o}"
        )
        pcs_o = [pc for _, pc in o]
        pcs_t = [pc for _, pc in t]
        for i, (po, pt) in enumerate(zip(pcs_o, pcs_t)):
            if pt is not None and in_exe(pt):
                assert po == pt, f"bt #{k} frame #{i} {names_t[i]}: gdb pc {pt:#x}, stepper {po:#x}"


def exe_range(m: Machine):
    spans = [(v.start, v.end) for v in m.mem.vmas if v.file is not None and v.file is m.process.exe]
    return lambda pc: any(a <= pc < b for a, b in spans)


# Each case: commands for both (the stepper's `{malloc}` is libc's malloc by address in a
# dynamic program; gdb resolves the name), and where the stops are.
CASES = {
    "leaf-entry": ["break *leaf", "run", "bt"],
    "in-leaf": ["break *leaf", "run", "stepi", "bt"],
    "prologue-after-push": ["break *big_frame", "run", "stepi", "bt", "stepi", "bt"],
    "body-after-call": ["break *leaf", "run", "finish", "bt"],
    "finish-to-start": ["break *leaf", "run", "finish", "finish", "bt", "finish", "bt"],
    "finish-from-prologue": ["break *big_frame", "run", "stepi", "finish", "bt"],
    "malloc-from-main": ["break *main", "run", "break {malloc}", "continue", "bt", "stepi 3", "bt"],
}
BUILDS = [("static", "-O0"), ("static", "-O2"), ("dynamic", "-O0"), ("dynamic", "-O2")]


def gdb_commands(commands: list[str]) -> list[str]:
    return GDB_PREAMBLE + [c.replace("{malloc}", "malloc") for c in commands]


def stepper_commands(commands: list[str], link: str) -> list[str]:
    # the stepper never stops for a guest's signal (gdb: handle SIG nostop noprint pass)
    cmds = ["set backtrace past-main on"] + [c for c in commands if not c.startswith("handle ")]
    if link == "static":
        cmds = [c.replace("{malloc}", "malloc") for c in cmds]
    return cmds


def compare(unwind_guest, link, opt, commands, probes=(), args=()):
    prog = unwind_guest(link, opt)
    theirs = backtraces(gdb_lines(prog, gdb_commands(commands), args))
    m = Machine.from_elf(prog, argv=[prog, *args])
    hits = []
    for sym in probes:
        m.uprobes.register(sym, ret_handler=lambda ctx, s=sym: hits.append((s, ctx.regs.rip)))
    out, err, shell = shell_lines(m, stepper_commands(commands, link))
    assert err == [], f"stepper errors: {err}"
    assert_same_frames(backtraces(out), theirs, prog, exe_range(m))
    return out, hits, shell


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("link,opt", BUILDS, ids=[f"{a}{b}" for a, b in BUILDS])
def test_bt_matches_gdb(unwind_guest, link, opt, case):
    compare(unwind_guest, link, opt, CASES[case])


@pytest.mark.parametrize("link,opt", BUILDS, ids=[f"{a}{b}" for a, b in BUILDS])
def test_bt_through_a_signal_frame_matches_gdb(unwind_guest, link, opt):
    """A handler's caller is gdb's ``<signal handler called>`` frame (the restorer),
    unwound from the rt_sigframe's saved registers to raise() and on; from the restorer
    itself (after finish) too."""
    out, _, _ = compare(
        unwind_guest,
        link,
        opt,
        ["handle SIGUSR1 nostop noprint pass", "break *on_usr1", "run", "bt", "stepi", "bt", "finish", "bt"],
        args=("signal",),
    )
    listings = backtraces(out)
    assert listings[0][1][0] == "<signal handler called>", listings[0]
    assert any(b[0][0] == "<signal handler called>" for b in listings), listings  # in the restorer


# under pending return probes: the frames gdb sees natively (no probes there)
PROBED = {
    "leaf-under-big_frame": (["break *leaf", "run", "stepi", "bt"], ("big_frame", "main")),
    "in-probed-leaf": (["break *leaf", "run", "stepi", "bt"], ("leaf",)),
    "malloc-under-alloc": (["break *main", "run", "break {malloc}", "continue", "stepi 3", "bt"], ("alloc", "main")),
}


@pytest.mark.parametrize("case", list(PROBED))
@pytest.mark.parametrize("link,opt", [("static", "-O2"), ("dynamic", "-O2")], ids=["static-O2", "dynamic-O2"])
def test_bt_under_pending_uretprobes_matches_gdb_without_them(unwind_guest, link, opt, case):
    commands, probes = PROBED[case]
    out, _, shell = compare(unwind_guest, link, opt, commands, probes)
    s = shell.s
    tramp = s.machine.process.mm_uprobes.xol_area.vaddr
    frames = s.backtrace()
    hijacked = [f.level for f in frames if f.uretprobe]
    assert len(hijacked) == len(probes), f"frames shown from return instances: {hijacked}, probes {probes}"
    for level in hijacked:
        slot = frames[level - 1].slot
        assert s.machine.mem.read_u64(slot) == tramp, f"frame #{level}: slot {slot:#x} is not hijacked"


def test_finish_from_main_lands_in_the_c_runtime_as_gdb_does(unwind_guest):
    """With past-main on, finish from main returns into __libc_start_call_main at the
    same pc as gdb's; by default gdb (and the stepper) call main the outermost frame."""
    prog = unwind_guest("static", "-O2")
    commands = ["break *main", "run", "finish", "p $pc"]
    theirs = gdb_lines(prog, GDB_PREAMBLE + commands)
    out, err, _ = shell_lines(Machine.from_elf(prog), ["set backtrace past-main on"] + commands)
    assert err == []
    want = [line for line in theirs if line.startswith("$1 = ")]
    got = [line for line in out if line.startswith("$1 = ")]
    assert want and got == want, f"pc after finish: gdb {want}, stepper {got}"
    assert "__libc_start_call_main" in got[0]
    default_gdb = subprocess.run(
        [_tool("gdb"), "-nx", "-batch", "-ex", "break *main", "-ex", "run", "-ex", "finish", prog],
        capture_output=True,
        text=True,
        timeout=120,
    )
    _, err, _ = shell_lines(Machine.from_elf(prog), ["break *main", "run", "finish"])
    assert err and err[-1] in default_gdb.stderr, f"gdb: {default_gdb.stderr!r}, stepper: {err}"


@pytest.mark.parametrize("link", ["static", "dynamic"])
def test_finish_across_a_hijacked_return_lands_at_the_original_caller(unwind_guest, link):
    """finish from inside a uretprobed function: the caller's pc as gdb's finish (no probes
    natively), the return handler ran once, at that same address."""
    prog = unwind_guest(link, "-O2")
    commands = ["break *big_frame", "run", "stepi", "finish", "p $pc"]
    theirs = [line for line in gdb_lines(prog, GDB_PREAMBLE + commands) if line.startswith("$1 = ")]
    m = Machine.from_elf(prog)
    hits = []
    m.uprobes.register("big_frame", ret_handler=lambda ctx: hits.append(ctx.regs.rip))
    out, err, shell = shell_lines(m, ["set backtrace past-main on"] + commands)
    assert err == []
    got = [line for line in out if line.startswith("$1 = ")]
    assert theirs and got == theirs, f"pc after finish: gdb {theirs}, stepper {got}"
    assert hits == [shell.s.rip], f"return handler runs: expected one at {shell.s.rip:#x}, got {hits}"


def plt_stub(prog: str) -> int:
    """The PLT entry alloc() calls malloc through (a dynamic program)."""
    m = Machine.from_elf(prog)
    s = Stepper(m)
    addr = m.resolve("alloc")
    while s.original_insn(addr).mnemonic != "call":
        addr = s.original_insn(addr).next
    return int(s.original_insn(addr).op_str, 16)


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_bt_in_the_plt_follows_its_cfa_expression(unwind_guest, opt):
    """A PLT entry's CFA is a DWARF expression of rsp and rip (``DW_CFA_def_cfa_expression``):
    at the entry, after its ``push``, and in PLT0 the caller is alloc, as in gdb.  (Frame
    #0's name is not compared: gdb names PLT entries ``malloc@plt``, the model's symbols
    have no PLT names.)"""
    prog = unwind_guest("dynamic", opt)
    commands = [f"break *{plt_stub(prog):#x}", "run", "bt", "stepi 2", "bt", "stepi 2", "bt"]
    theirs = backtraces(gdb_lines(prog, gdb_commands(commands)))
    m = Machine.from_elf(prog)
    out, err, _ = shell_lines(m, stepper_commands(commands, "dynamic"))
    assert err == []
    ours = backtraces(out)
    assert len(ours) == len(theirs) == 3, f"bt listings: gdb {theirs}, stepper {ours}"
    for k, (o, t) in enumerate(zip(ours, theirs)):
        assert o[0][1] == t[0][1], f"bt #{k}: frame #0 at {t[0][1]:#x} (gdb), {o[0][1]:#x} (stepper)"
        assert_same_frames([o[1:]], [t[1:]], prog, exe_range(m))


@pytest.mark.parametrize("link", ["static", "dynamic"])
def test_uprobe_emu_step_from_stdin_shows_gdbs_frames_with_a_return_probe(unwind_guest, link):
    """`uprobe-emu step -e 'r:...' PROG` fed through stdin: with return probes pending on
    big_frame and main, the frames in leaf are gdb's (no probes natively), past main too."""
    prog = unwind_guest(link, "-O2")
    commands = ["break *leaf", "run", "stepi", "bt", "finish", "bt"]
    theirs = backtraces(gdb_lines(prog, gdb_commands(commands)))
    script = "\n".join(stepper_commands(commands, link)) + "\n"
    p = cli("step", "-e", "r:t/rb big_frame", "-e", "r:t/rm main", prog, input=script.encode())
    assert p.returncode == 0 and p.stderr == b"", (p.returncode, p.stderr)
    m = Machine.from_elf(prog)
    Stepper(m).run_until("leaf")
    assert_same_frames(backtraces(p.stdout.decode().splitlines()), theirs, prog, exe_range(m))
    assert p.stdout.decode().count("[uretprobe pending") == 2 + 2, p.stdout.decode()
