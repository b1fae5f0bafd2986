"""The stepper: exact single steps through the uprobes kernel model, breakpoints that are
not uprobes, step over / finish / bt across pending uretprobes, gdb's `info registers`
layout checked against a real gdb, and the `uprobe-emu step` command."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_helpers import cli

from emu import Machine
from emu.asm import asm_to_elf
from emu.debug.disasm import Disassembler, format_objdump_line
from emu.frontends.stepper import Stepper, StepperError, StepperShell

NOP5 = ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00"

# push rbp (emulated), nop5 (optimized on 6.18), a stack load and ret (both out of line)
KINDS_GUEST = f"""
_start:
    mov rbx, 2
again:
    call func
    dec rbx
    jnz again
    mov eax, 231
    xor edi, edi
    syscall
func:
    push rbp
    mov rbp, rsp
    push rbx
site_nop5:
    {NOP5}
site_mov:
    mov rax, [rbp-8]
    pop rbx
    pop rbp
site_ret:
    ret
"""

# _start -> outer -> inner, frame pointers everywhere; leaf_body is a label inside inner
NESTED_GUEST = """
_start:
    call outer
    mov eax, 231
    xor edi, edi
    syscall
outer:
    push rbp
    mov rbp, rsp
    call inner
after_inner:
    pop rbp
    ret
inner:
    push rbp
    mov rbp, rsp
    mov rax, 5
leaf_body:
    nop
    pop rbp
    ret
"""

# every general register set to a value the natural column renders differently
REGS_GUEST = """
_start:
    mov rsp, 0x403000
    push 0xad7
    popfq
    mov rax, -1
    mov rbx, 0x1122334455667788
    mov rcx, 0x8000000000000000
    mov rdx, 0x7fffffffffffffff
    mov rsi, 0x402010
    mov rdi, 1
    mov rbp, 0x402ff0
    mov r8, -2
    mov r9, 0
    mov r10, 0x10
    mov r11, 0xffffffff
    mov r12, 0x100000000
    mov r13, 12345
    mov r14, -12345
    mov r15, 0x401000
stop:
    nop
    mov eax, 60
    xor edi, edi
    syscall
.data
buf:
    .quad 1, 2, 3, 4
"""

C_GUEST = r"""
#include <stdio.h>
__attribute__((noinline)) int leaf(int x) { asm volatile("" ::: "memory"); return x * 3 + 1; }
__attribute__((noinline)) int middle(int x) { int r = leaf(x) + 2; asm volatile("" ::: "memory"); return r; }
int main(int argc, char **argv) { int r = middle(argc + 4); printf("r=%d\n", r); return r & 7; }
"""


def _gdb() -> str:
    gdb = shutil.which("gdb")
    if gdb is None:
        pytest.fail("gdb is required for the `info registers` layout tests (install gdb)")
    return gdb


def write_asm(tmp_path: Path, name: str, source: str) -> Path:
    elf, _ = asm_to_elf(source)
    path = tmp_path / name
    path.write_bytes(elf)
    path.chmod(0o755)
    return path


def run_gdb(prog: Path, script: str, tmp_path: Path) -> list[str]:
    cmds = tmp_path / "gdb.cmds"
    cmds.write_text(script)
    p = subprocess.run(
        [_gdb(), "-nx", "-batch", "-x", str(cmds), str(prog)], capture_output=True, text=True, timeout=120
    )
    return p.stdout.splitlines()


def run_shell(m: Machine, script: str) -> tuple[list[str], list[str]]:
    out, err = io.StringIO(), io.StringIO()
    StepperShell(Stepper(m), out=out, err=err).run_lines(script.splitlines())
    return out.getvalue().splitlines(), err.getvalue().splitlines()


def without_display(lines: list[str]) -> list[str]:
    """Drop the ``=> insn`` line the stepper shows after each stop (gdb's display/i)."""
    out = []
    for i, line in enumerate(lines):
        prev = lines[i - 1] if i else ""
        if line.startswith("=> ") and (" in " in prev and prev.endswith(" ()") or prev.startswith("Breakpoint ")):
            continue
        out.append(line)
    return out


def regs_tuple(m: Machine) -> tuple:
    return tuple(m.read_regs().as_dict().items())


def step_to_end(m: Machine):
    """[(rip, registers)] after each single step until the guest ends, and the stepper."""
    s = Stepper(m)
    seen = []
    while True:
        ev = s.step()
        if ev.reason != "step":
            seen.append((ev.reason, ev.exit_code))
            return seen, s
        seen.append((ev.rip, regs_tuple(m)))


def first_difference(a: list, b: list) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            if isinstance(x[1], tuple) and isinstance(y[1], tuple):
                diff = {k: (hex(v), hex(dict(y[1])[k])) for k, v in x[1] if dict(y[1])[k] != v}
                return f"step {i}: rip {x[0]:#x} vs {y[0]:#x}, registers (probed, unprobed) {diff}"
            return f"step {i}: {x!r} vs {y!r}"
    return f"lengths {len(a)} vs {len(b)}"


# ------------------------------------------------------------------------- single steps


@pytest.mark.parametrize(
    "site,kernel,path",
    [
        ("func", "6.10", "emulated"),
        ("func", "6.18", "emulated"),
        ("site_ret", "6.10", "xol"),
        ("site_ret", "6.18", "xol"),
        ("site_ret", "7.2", "xol"),
        ("site_mov", "6.18", "xol"),
        ("site_nop5", "6.18", "optimized"),
    ],
    ids=["push@6.10", "push@6.18", "ret@6.10", "ret@6.18", "ret@7.2", "mov@6.18", "nop5@6.18"],
)
def test_step_across_a_probed_insn_lands_where_the_unprobed_step_would(site, kernel, path):
    expected, plain = step_to_end(Machine.from_asm(KINDS_GUEST, kernel=kernel))
    m = Machine.from_asm(KINDS_GUEST, kernel=kernel)
    hits = []
    m.uprobes.register(site, handler=lambda ctx: hits.append(ctx.vaddr))
    site_addr = m.resolve(site)
    s = Stepper(m)
    seen = []
    while True:
        before = (s.rip, len(hits))
        ev = s.step()
        if ev.reason != "step":
            seen.append((ev.reason, ev.exit_code))
            break
        seen.append((ev.rip, regs_tuple(m)))
        assert ev.insns == 1
        # the handler runs exactly once, in the step that executes the probed insn
        assert len(hits) - before[1] == (1 if before[0] == site_addr else 0)
        vma = m.mem.find_vma(ev.rip)
        assert not vma.special, f"stopped in {vma.name}"
    assert seen == expected, first_difference(seen, expected)
    assert hits == [site_addr, site_addr]
    assert s.insns == plain.insns == len(expected)
    c = m.counters
    if path == "emulated":
        assert (c.emulated, c.xol_singlesteps) == (2, 0)
    elif path == "xol":
        assert (c.xol_singlesteps, c.db_traps) == (2, 2)
    else:  # first hit: int3, then the site is a call into [uprobes-trampoline]
        assert (c.optimized, c.bp_traps, c.uprobe_syscalls) == (1, 1, 1)
        assert s.hidden_insns > 0


def test_single_steps_match_the_machines_instruction_budget():
    m = Machine.from_guest("fib", argv=["fib", "40"])
    seen, s = step_to_end(m)
    a, b = 0, 1
    for _ in range(40):
        a, b = b, a + b
    assert seen[-1] == ("exit", a & 0xFF)
    total = s.insns
    for n in (1, 2, 7, 100, total - 1):
        ref = Machine.from_guest("fib", argv=["fib", "40"])
        res = ref.run(max_insns=n)
        assert res.reason == "budget"
        assert (ref.read_regs().rip, regs_tuple(ref)) == seen[n - 1], f"after {n} instructions"


def test_rep_string_insn_steps_once_per_iteration_like_hardware():
    m = Machine.from_asm("""
_start:
    mov ecx, 3
    lea rdi, [rsp-64]
    rep stosq
    mov eax, 231
    xor edi, edi
    syscall
""")
    s = Stepper(m)
    s.step(2)
    rep = s.rip
    rips = [(s.step().rip, m.read_regs().rcx) for _ in range(3)]
    assert rips == [(rep, 2), (rep, 1), (rep + 3, 0)]  # f3 48 ab
    assert s.insns == 5


def test_step_count_stops_early_at_a_breakpoint():
    m = Machine.from_asm(NESTED_GUEST)
    s = Stepper(m)
    bp = s.break_at("outer")
    ev = s.step(10)
    assert (ev.reason, ev.rip, ev.insns, bp.hits) == ("breakpoint", m.resolve("outer"), 1, 1)


# ------------------------------------------------------------------------- breakpoints


def test_breakpoint_stops_before_the_insn_and_changes_no_memory():
    m = Machine.from_asm(NESTED_GUEST)
    text = m.mem.read(0x401000, 0x40)
    s = Stepper(m)
    bp = s.break_at("inner")
    assert m.mem.read(0x401000, 0x40) == text
    ev = s.cont()
    assert (ev.reason, ev.rip, ev.symbol, ev.breakpoint) == ("breakpoint", m.resolve("inner"), "inner", bp)
    assert m.mem.read(0x401000, 0x40) == text
    assert (m.counters.bp_traps, m.counters.uprobe_hits) == (0, 0)
    assert s.cont().reason == "exit" and bp.hits == 1


def test_breakpoint_on_a_probed_site_stops_before_the_handler_which_then_runs_once():
    m = Machine.from_asm(NESTED_GUEST, kernel="6.18")
    hits = []
    m.uprobes.register("inner", handler=lambda ctx: hits.append(ctx.vaddr))
    s = Stepper(m)
    s.break_at("inner")
    ev = s.cont()
    assert (ev.reason, ev.rip, hits) == ("breakpoint", m.resolve("inner"), [])
    assert m.counters.bp_traps == 0
    ev = s.cont()
    assert ev.reason == "exit" and hits == [m.resolve("inner")]
    assert (m.counters.bp_traps, m.counters.uprobe_hits) == (1, 1)


def test_deleted_and_disabled_breakpoints_do_not_stop():
    m = Machine.from_asm(KINDS_GUEST)
    s = Stepper(m)
    b1 = s.break_at("func")
    b2 = s.break_at("*" + hex(m.resolve("site_ret")))
    assert (b1.number, b2.number) == (1, 2)
    s.enable(2, False)
    assert s.cont().breakpoint is b1
    s.delete(1)
    assert s.cont().reason == "exit"
    with pytest.raises(StepperError, match="No breakpoint number 1"):
        s.delete(1)


def test_breakpoints_refuse_non_code_and_kernel_model_pages():
    m = Machine.from_asm(NESTED_GUEST, kernel="6.18")
    m.uprobes.register("inner", ret_handler=lambda ctx: None)
    s = Stepper(m)
    s.run_until("leaf_body")
    xol = m.process.mm_uprobes.xol_area.vaddr
    with pytest.raises(StepperError, match=r"\[uprobes\]"):
        s.break_at(xol)
    with pytest.raises(StepperError, match="not in executable memory"):
        s.break_at(m.read_regs().rsp)
    with pytest.raises(StepperError, match='Function "nope" not defined'):
        s.break_at("nope")


def test_run_until_a_symbol_and_an_address():
    m = Machine.from_asm(NESTED_GUEST)
    s = Stepper(m)
    assert s.run_until("leaf_body").rip == m.resolve("leaf_body")
    ev = s.run_until("*" + hex(m.resolve("after_inner")))
    assert (ev.reason, ev.verb, ev.symbol) == ("step", "run_until", "after_inner")


# ------------------------------------------------------------------------- step over, finish


@pytest.mark.parametrize("kernel", ["6.10", "6.18"])
def test_step_over_a_call_runs_through_a_pending_uretprobe_trampoline(kernel):
    ref = Machine.from_asm(NESTED_GUEST, kernel=kernel)
    rs = Stepper(ref)
    rs.run_until("outer")
    rs.step(2)
    ref_ev = rs.step_over()
    m = Machine.from_asm(NESTED_GUEST, kernel=kernel)
    rets = []
    m.uprobes.register("inner", ret_handler=lambda ctx: rets.append(ctx.regs.rip))
    s = Stepper(m)
    s.run_until("outer")
    s.step(2)
    assert s.original_insn(s.rip).mnemonic == "call"
    ev = s.step_over()
    assert (ev.reason, ev.rip, ev.symbol) == ("step", m.resolve("after_inner"), "after_inner")
    assert regs_tuple(m) == regs_tuple(ref) and ev.rip == ref_ev.rip
    assert rets == [m.resolve("after_inner")] and m.counters.uretprobe_hits == 1


@pytest.mark.parametrize("verb", ["step", "step_over"])
def test_a_step_of_zero_instructions_stops_where_it_is(verb):
    m = Machine.from_asm(NESTED_GUEST)
    s = Stepper(m)
    s.run_until("inner")
    ev = getattr(s, verb)(0)
    got = (ev.reason, ev.verb, ev.rip, ev.insns)
    assert got == ("step", verb, m.resolve("inner"), 0), f"expected an empty step at inner, got {got}"


def test_step_over_a_non_call_is_a_step():
    m = Machine.from_asm(NESTED_GUEST)
    s = Stepper(m)
    s.run_until("inner")
    ev = s.step_over()
    assert (ev.rip, ev.insns) == (m.resolve("inner") + 1, 1)


@pytest.mark.parametrize("kernel", ["6.10", "6.18"])
def test_finish_returns_to_the_real_caller_through_the_uretprobe_trampoline(kernel):
    ref = Machine.from_asm(NESTED_GUEST, kernel=kernel)
    rs = Stepper(ref)
    rs.run_until("leaf_body")
    rs.finish()
    m = Machine.from_asm(NESTED_GUEST, kernel=kernel)
    rets = []
    m.uprobes.register("inner", ret_handler=lambda ctx: rets.append(ctx.regs.rip))
    m.uprobes.register("outer", ret_handler=lambda ctx: rets.append(ctx.regs.rip))
    s = Stepper(m)
    s.run_until("leaf_body")
    ev = s.finish()
    assert (ev.reason, ev.verb, ev.rip) == ("step", "finish", m.resolve("after_inner"))
    assert regs_tuple(m) == regs_tuple(ref)
    assert rets == [m.resolve("after_inner")]
    ev = s.finish()
    assert ev.rip == m.resolve("_start") + 5
    assert rets == [m.resolve("after_inner"), m.resolve("_start") + 5]
    with pytest.raises(StepperError, match="outermost frame"):
        s.finish()


def test_finish_from_a_function_entry_and_from_its_ret():
    m = Machine.from_asm(NESTED_GUEST)
    s = Stepper(m)
    s.run_until("inner")
    assert s.finish().rip == m.resolve("after_inner")
    s.run_until("*" + hex(m.resolve("after_inner") + 1))  # outer's ret
    assert s.original_insn(s.rip).mnemonic == "ret"
    assert s.finish().rip == m.resolve("_start") + 5


def test_finish_stops_at_a_breakpoint_on_the_way():
    m = Machine.from_asm(NESTED_GUEST)
    s = Stepper(m)
    s.run_until("outer")
    s.break_at("leaf_body")
    ev = s.finish()
    assert (ev.reason, ev.symbol) == ("breakpoint", "leaf_body")


# ------------------------------------------------------------------------- bt


@pytest.mark.parametrize("kernel", ["6.10", "6.18"])
def test_bt_through_pending_return_probes_shows_the_real_return_addresses(kernel):
    ref = Machine.from_asm(NESTED_GUEST, kernel=kernel)
    rs = Stepper(ref)
    rs.run_until("leaf_body")
    expected = [(f.pc, f.function) for f in rs.backtrace()]
    assert expected == [
        (ref.resolve("leaf_body"), "leaf_body"),
        (ref.resolve("after_inner"), "outer"),
        (ref.resolve("_start") + 5, "_start"),
    ]
    m = Machine.from_asm(NESTED_GUEST, kernel=kernel)
    m.uprobes.register("inner", ret_handler=lambda ctx: None)
    m.uprobes.register("outer", ret_handler=lambda ctx: None)
    s = Stepper(m)
    s.run_until("leaf_body")
    tramp = m.process.mm_uprobes.xol_area.vaddr
    assert m.mem.read_u64(m.read_regs().rbp + 8) == tramp, "the return address is hijacked"
    frames = s.backtrace()
    assert [(f.pc, f.function) for f in frames] == expected
    assert [f.uretprobe for f in frames] == [False, True, True]
    out, _ = run_shell_on(s, "bt")
    assert tramp not in [int(line.split()[1], 16) for line in out]
    assert out[1].startswith(f"#1  {m.resolve('after_inner'):#018x} in outer ()")


def run_shell_on(stepper: Stepper, script: str):
    out, err = io.StringIO(), io.StringIO()
    StepperShell(stepper, out=out, err=err).run_lines(script.splitlines())
    return out.getvalue().splitlines(), err.getvalue().splitlines()


def test_bt_in_the_prologue_and_at_entry():
    m = Machine.from_asm(NESTED_GUEST)
    s = Stepper(m)
    s.run_until("inner")
    at_entry = [f.pc for f in s.backtrace()]
    s.step()  # after push rbp
    assert [f.pc for f in s.backtrace()][1:] == at_entry[1:]
    s.step()  # after mov rbp, rsp
    assert [f.pc for f in s.backtrace()][1:] == at_entry[1:]
    assert at_entry[1:] == [m.resolve("after_inner"), m.resolve("_start") + 5]


# ------------------------------------------------------------------------- registers


def test_set_and_print_registers_and_sub_registers():
    m = Machine.from_asm(NESTED_GUEST)
    out, err = run_shell(
        m,
        "set $rax = 0x1122334455667788\nset $al = 0xff\np/x $rax\n"
        "set $eax = -1\np/x $rax\np $eax\np $ah\nset $rip = inner\np $pc\n"
        "p $rsp - 8\np/x -1\np 0x10 - 0x20\nset $cs = 1\np $nope",
    )
    assert out == [
        "$1 = 0x11223344556677ff",
        "$2 = 0x11223344ffffffff",
        "$3 = -1",
        "$4 = -1",
        f"$5 = (void (*)()) {m.resolve('inner'):#x} <inner>",
        f"$6 = (void *) {m.read_regs().rsp - 8:#x}",
        "$7 = 0xffffffff",
        "$8 = -16",
    ]
    assert err == ["Register $cs is fixed for a 64-bit Linux task.", "Invalid register `nope'"]


GDB_SCRIPT = """\
b *0x401085
run
info registers
info registers rip rax fs_base gs_base pc
p $rax
p $rip
p $rsp
p $eflags
p/x $rax
p $eax
p $cs
p $fs_base
p $al
p/x $eflags
p $rsp+8
p $rip+1
p/d $rbx
p/u $rax
x/4gx $rsi
x/8bx $pc
x/4wx 0x402000
x/10hx 0x402000
x/5gx 0x402000
x/3dg 0x402000
x/2ug 0x402000
x 0x402000
info breakpoints
stepi
p $pc
bt
"""


def test_info_registers_and_print_match_real_gdb_line_for_line(tmp_path):
    """The regs guest runs natively under gdb and in the emulator, stopped at the same
    breakpoint with every register forced to the same value: the transcripts are the same,
    but for gdb's k0-k7 (AVX-512 host; the emulated CPU has none), gdb's unwinder note and
    the stepper's `=> insn` line after each stop."""
    prog = write_asm(tmp_path, "regs", REGS_GUEST)
    theirs = [
        line
        for line in run_gdb(prog, GDB_SCRIPT, tmp_path)
        if not (line[:1] == "k" and line[1:2].isdigit() and line[2:3] == " ")
        and not line.startswith("Backtrace stopped:")
    ]
    assert any(line.startswith("rax            0xffffffffffffffff  -1") for line in theirs), theirs
    ours, err = run_shell(Machine.from_elf(str(prog)), GDB_SCRIPT)
    assert err == []
    assert without_display(ours) == theirs


def test_info_registers_layout_columns():
    m = Machine.from_asm(REGS_GUEST)
    s = Stepper(m)
    s.run_until("stop")
    lines = s.format_registers().splitlines()
    assert [line.split()[0] for line in lines] == [
        "rax",
        "rbx",
        "rcx",
        "rdx",
        "rsi",
        "rdi",
        "rbp",
        "rsp",
        "r8",
        "r9",
        "r10",
        "r11",
        "r12",
        "r13",
        "r14",
        "r15",
        "rip",
        "eflags",
        "cs",
        "ss",
        "ds",
        "es",
        "fs",
        "gs",
    ]
    for line in lines:
        assert line[15:17] == "0x" and line[14] == " " and line[34] == " " and line[35] != " ", line
    assert lines[16] == "rip            0x401085            0x401085 <stop>"
    assert lines[17] == "eflags         0xad7               [ CF PF AF ZF SF IF OF ]"
    assert s.format_registers(["fs_base", "$gs_base"]).splitlines() == [
        "fs_base        0x0                 0",
        "gs_base        0x0                 0",
    ]


def test_single_step_locations_match_gdb_stepping_the_native_program(tmp_path):
    prog = write_asm(tmp_path, "regs", REGS_GUEST)
    script = "starti\n" + "si\n" * 5 + "si 4\nni\nx/3i $pc\ninfo registers rip\n"
    theirs = run_gdb(prog, script, tmp_path)
    ours, err = run_shell(Machine.from_elf(str(prog)), script)
    assert err == []
    ours = without_display(ours)
    strip = lambda lines: [line.split("\t")[0] for line in lines]  # noqa: E731 (asm syntax differs)
    assert strip(ours) == strip(theirs)
    assert len(ours) == 1 + 2 + 7 + 3 + 1


def test_bt_and_finish_match_gdb_on_a_gcc_guest(tmp_path):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is required to build the C guests")
    src = tmp_path / "nested.c"
    src.write_text(C_GUEST)
    prog = tmp_path / "nested"
    subprocess.run(
        [gcc, "-static", "-O1", "-fno-omit-frame-pointer", "-o", str(prog), str(src)], check=True, capture_output=True
    )
    script = "break *leaf\nrun\nbt\nfinish\nbt\np $rip\ninfo registers rip\n"
    theirs = run_gdb(prog, script, tmp_path)
    ours, err = run_shell(Machine.from_elf(str(prog)), script)
    assert err == []
    assert without_display(ours) == theirs
    # with a return probe on middle: the same frames (main's real return address)
    m = Machine.from_elf(str(prog))
    m.uprobes.register("middle", ret_handler=lambda ctx: None)
    ours_probed, _ = run_shell(m, script)
    note = "  [uretprobe pending: saved return address is the trampoline]"
    probed = without_display(ours_probed)
    assert probed[5] == theirs[5] + note and theirs[5].endswith(" in main ()")
    assert [line.replace(note, "") for line in probed] == theirs


# ------------------------------------------------------------------------- x and disas


def test_x_formats_and_unmapped_memory():
    m = Machine.from_asm(REGS_GUEST)
    out, err = run_shell(m, "until stop\nx/2gx 0x402000\nx/3i $pc\nx/2bx 0\nx/2q 0x402000")
    out = without_display(out)
    assert out == [
        "0x0000000000401085 in stop ()",
        "0x402000 <buf>:\t0x0000000000000001\t0x0000000000000002",
        "=> 0x401085 <stop>:\tnop",
        "   0x401086 <stop+1>:\tmov    eax, 0x3c",
        "   0x40108b <stop+6>:\txor    edi, edi",
    ]
    assert err == ["Cannot access memory at address 0x0", 'Undefined output format "q".']


def test_disas_is_objdump_layout_with_the_rip_marker_and_probe_sites(tmp_path):
    prog = write_asm(tmp_path, "kinds", KINDS_GUEST)
    objdump = subprocess.run(["objdump", "-d", str(prog)], capture_output=True, text=True).stdout
    ref = [line for line in objdump.splitlines() if line.startswith("  ")]
    m = Machine.from_elf(str(prog), kernel="6.10")
    m.uprobes.register("func", handler=lambda ctx: None)
    out, err = run_shell(m, "until site_mov\ndisas func\ndisas")
    assert err == []
    out = without_display(out)[1:]
    func, nop5 = m.resolve("func"), m.resolve("site_nop5")
    assert out[0] == f"{func:016x} <func>:"
    assert out[4] == f"{m.resolve('site_mov'):016x} <site_mov>:"  # every asm label is a symbol
    body = out[1:4] + out[5:]
    by_addr = {int(line.split(":")[0], 16): line for line in ref}
    for ours in body:
        mark, line = ours[:3], ours[3:]
        theirs = by_addr[int(line.split(":")[0], 16)]
        if line.startswith(f"  {func:x}:"):  # the program's bytes; the int3 is noted
            assert line.split("\t")[:2] == theirs.split("\t")[:2], line
            assert line.endswith("push   rbp        # uprobe site, in memory: int3"), line
        else:  # address and bytes columns are objdump's exactly; the syntax is capstone's
            assert line.split("\t")[:2] == theirs.split("\t")[:2]
        assert mark == ("=> " if line.startswith(f"  {m.resolve('site_mov'):x}:") else "   ")
    assert [int(line[3:].split(":")[0], 16) for line in body] == [
        func,
        func + 1,
        func + 4,
        m.resolve("site_mov"),
        m.resolve("site_mov") + 4,
        m.resolve("site_mov") + 5,
    ]  # up to the next label, site_ret
    assert nop5 == func + 5


def test_objdump_lines_for_long_encodings_and_symbols():
    m = Machine.from_asm("""
_start:
    movabs rbx, 0x1122334455667788
    call func
    lock add qword ptr [rip + 0x10], 1
    .byte 0x06
func:
    ret
""")
    d = Disassembler(m)
    lines = [d.format(i) for i in d.range(0x401000, m.resolve("func") + 1)]
    assert lines == [
        "  401000:\t48 bb 88 77 66 55 44 \tmovabs rbx, 0x1122334455667788\n  401007:\t33 22 11 ",
        "  40100a:\te8 0a 00 00 00       \tcall   0x401019 <func>",
        "  40100f:\tf0 48 83 05 10 00 00 \tlock add qword ptr [rip + 0x10], 1        # 401028\n  401016:\t00 01 ",
        "  401018:\t06                   \t(bad)",
        "  401019:\tc3                   \tret",
    ]
    assert d.symbol_header(m.resolve("func")) == f"{m.resolve('func'):016x} <func>:"
    assert d.symbol_header(m.resolve("func") + 1) is None
    assert format_objdump_line(d.decode(0x401000)).startswith("  401000:\t48 bb")


def test_disassembler_cache_follows_probe_install_and_removal():
    m = Machine.from_asm(NESTED_GUEST, kernel="6.10")
    d = Disassembler(m)
    inner = m.resolve("inner")
    assert d.decode(inner).mnemonic == "push"
    c = m.uprobes.register("inner", handler=lambda ctx: None)
    assert d.decode(inner).mnemonic == "int3"
    m.uprobes.unregister(c)
    assert d.decode(inner).mnemonic == "push"


# ------------------------------------------------------------------------- shell errors


def test_command_errors_are_one_line_and_the_session_goes_on():
    m = Machine.from_asm(NESTED_GUEST)
    out, err = run_shell(
        m,
        "frob\ndelete 9\ninfo nothing\nb\nx/2gx\nuntil\nprobe enable 3\n"
        "p 1+\nsi 0\nc\nsi\ninfo registers\nbt\np $rax\nb inner",
    )
    assert err == [
        'Undefined command: "frob".  Try "help".',
        "No breakpoint number 9.",
        'Undefined info command: "nothing".  Try "help info".',
        "Argument required (starting display address).",
        "Argument required (a location).",
        "No probe number 3.",
        "A syntax error in expression.",
        "bad count '0'",
        "The program is not being run.",
        "The program has no registers now.",
        "No stack.",
        "The program has no registers now.",
    ]
    assert out[0] == f"Breakpoint 1 at {m.resolve('_start'):#x}"
    assert out[-2] == "[Inferior 1 (process 1000) exited normally]"
    assert out[-1] == f"Breakpoint 2 at {m.resolve('inner'):#x}"


def test_exit_and_signal_reports():
    out, _ = run_shell(Machine.from_guest("exit42"), "c")
    assert out == ["Continuing.", "[Inferior 1 (process 1000) exited with code 052]"]
    out, _ = run_shell(Machine.from_guest("segv"), "c")
    assert out[:3] == ["Continuing.", "", "Program terminated with signal SIGSEGV, Segmentation fault."]
    assert "fault address 0x10" in out[3]


# ------------------------------------------------------------------------- the CLI


def test_cli_step_reads_commands_from_stdin_without_prompts():
    p = cli("step", "guest:hello", input=b"b _start\ninfo breakpoints\nsi\nc\nq\n")
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    assert "(uprobe-emu)" not in out
    assert out.splitlines() == [
        "Breakpoint 1 at 0x401000",
        "Num     Type           Disp Enb Address            What",
        "1       breakpoint     keep y   0x0000000000401000 <_start>",
        "0x0000000000401005 in _start ()",
        "=> 0x401005 <_start+5>:\tmov    edi, 1",
        "Continuing.",
        "hello, world",
        "[Inferior 1 (process 1000) exited normally]",
    ]
    assert p.stderr == b""


def test_cli_step_script_file_events_and_probe_toggling(tmp_path):
    prog = write_asm(tmp_path, "kinds", KINDS_GUEST)
    script = tmp_path / "cmds"
    script.write_text("b func\nc\nprobe list\nprobe disable 1\nc\nprobe enable 1\nc\nprobe list\n")
    p = cli("step", "-x", str(script), "--kernel", "6.18", "-e", f"p:grp/fentry {prog}:site_mov", str(prog), input=b"")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.decode().splitlines()
    events = [line for line in lines if ": fentry:" in line]
    assert len(events) == 1, lines  # first call: disabled; second: enabled
    listing = [line for line in lines if "grp/fentry" in line]
    assert listing[0].split()[:3] == ["1", "y", "0"]
    assert listing[1].split()[:3] == ["1", "y", "1"]
    assert "[Inferior 1 (process 1000) exited normally]" in lines
    assert lines.index("[Inferior 1 (process 1000) exited normally]") < lines.index(listing[1])


def test_cli_step_bad_input_is_one_line_and_exit_2():
    p = cli("step", "guest:nope", input=b"")
    assert p.returncode == 2 and len(p.stderr.decode().strip().splitlines()) == 1
    p = cli("step", "-x", "/nonexistent/cmds", "guest:hello", input=b"")
    assert p.returncode == 2 and "cannot read command file" in p.stderr.decode()


def test_steps_stay_single_after_a_free_run_made_outside_the_stepper():
    """Unicorn's instruction counter misses blocks translated during a count-less run;
    the stepper notices such runs and still executes exactly one instruction."""
    m = Machine.from_guest("fib", argv=["fib", "1000"])
    s = Stepper(m)
    s.step(3)
    loop = m.resolve("fib_loop")
    hits = []

    def stop_third(ctx):
        hits.append(1)
        if len(hits) == 3:
            ctx.machine.stop("enough")

    m.uprobes.register("fib_loop", handler=stop_third)
    assert m.run(max_insns=None).reason == "stopped"
    assert m.mem.find_vma(s.rip).name == "[uprobes]"  # stopped during the out-of-line step
    seen = [s.step().rip for _ in range(6)]
    sizes = [4, 3, 3, 3, 2]  # lea, mov, mov, dec, jnz
    assert seen == [loop + 4, loop + 7, loop + 10, loop + 13, loop, loop + 4], [hex(a) for a in seen]
    assert sum(sizes) == 15 and len(hits) == 4
    assert s.insns == 3 + 6


def test_stepping_into_a_fault_or_hlt_ends_with_the_signal():
    m = Machine.from_guest("segv")
    s = Stepper(m)
    ev = s.step(100)
    assert (ev.reason, ev.signal, ev.result.fault_addr) == ("signal", 11, 0x10)
    with pytest.raises(StepperError, match="not being run"):
        s.step()
    m = Machine.from_asm("_start:\n    add al, 0xf4\n    hlt\n")
    s = Stepper(m)
    ev = s.step()  # ends in byte 0xf4 but is no hlt
    assert (ev.reason, ev.rip) == ("step", 0x401002)
    ev = s.step()
    assert (ev.reason, ev.signal, ev.result.rip) == ("signal", 11, 0x401002)
