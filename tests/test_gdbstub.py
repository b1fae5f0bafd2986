"""A real gdb (batch mode) attached to the remote stub: registers, memory, breakpoints,
stepping across probes, exit codes and signals."""

from __future__ import annotations

import shutil
import subprocess
import threading

import pytest
from gdb_client import GUEST  # exits 42 after three calls; its `spin` is not reached here

from emu import Machine
from emu.frontends.gdbstub import REGISTERS, serve_once, target_xml

GDB = shutil.which("gdb")


def write_elf(tmp_path, source=GUEST, name="g"):
    from emu.asm import asm_to_elf

    elf, _ = asm_to_elf(source)
    path = tmp_path / name
    path.write_bytes(elf)
    return str(path)


def gdb_session(machine, exe, commands, timeout=60, join=10):
    """Serve ``machine`` on a free port in a thread; run gdb -batch with ``commands``
    (then wait up to ``join`` seconds for the stub to end)."""
    assert GDB, "gdb is required for these tests"
    port = {}
    ready = threading.Event()

    def on_ready(p):
        port["n"] = p
        ready.set()

    t = threading.Thread(target=serve_once, args=(machine, "127.0.0.1", 0), kwargs={"ready": on_ready}, daemon=True)
    t.start()
    assert ready.wait(10)
    args = [
        GDB,
        "-batch",
        "-nx",
        "-ex",
        "set pagination off",
        "-ex",
        "set confirm off",
        "-ex",
        f"target remote 127.0.0.1:{port['n']}",
    ]
    for c in commands:
        args += ["-ex", c]
    args.append(exe)
    out = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    t.join(join)
    return out.stdout + out.stderr


def test_target_description_is_well_formed_xml():
    import xml.dom.minidom

    doc = xml.dom.minidom.parseString(target_xml())
    regs = doc.getElementsByTagName("reg")
    assert [r.getAttribute("name") for r in regs] == [n for n, _, _ in REGISTERS]
    assert [int(r.getAttribute("regnum")) for r in regs] == list(range(len(REGISTERS)))


def test_info_registers_match_the_model(tmp_path):
    exe = write_elf(tmp_path)
    m = Machine.from_elf(exe)
    regs = m.read_regs()
    out = gdb_session(m, exe, ["info registers rip rsp eflags cs ss", "p/x $fs_base", "p $orig_rax"])
    assert f"rip            {regs.rip:#x}            {regs.rip:#x} <_start>" in out
    assert f"rsp            {regs.rsp:#x}      {regs.rsp:#x}" in out
    assert "eflags         0x202               [ IF ]" in out
    assert "cs             0x33                51" in out
    assert "ss             0x2b                43" in out
    assert "$1 = 0x0" in out and "$2 = -1" in out


def test_memory_at_a_probe_site_shows_the_program_and_monitor_raw_the_int3(tmp_path):
    exe = write_elf(tmp_path)
    m = Machine.from_elf(exe)
    m.uprobes.register("func", handler=lambda c: None)
    out = gdb_session(m, exe, ["x/4xb func", "monitor raw func 4"])
    assert "<func>:\t0x55\t0x48\t0x89\t0xe5" in out, out
    assert f"{m.resolve('func'):#x}: cc 48 89 e5" in out, out


def test_break_continue_and_exit_code(tmp_path):
    exe = write_elf(tmp_path)
    m = Machine.from_elf(exe)
    out = gdb_session(m, exe, ["break func", "continue", "info registers rip", "delete", "continue"])
    assert "Breakpoint 1, 0x" in out and "in func ()" in out
    assert "<func+4>" in out, "gdb puts 'break func' after the push rbp; mov rbp,rsp prologue"
    assert "exited with code 052" in out


def test_gdb_breakpoints_are_not_uprobe_hits_and_vice_versa(tmp_path):
    exe = write_elf(tmp_path)
    m = Machine.from_elf(exe)
    hits = []
    m.uprobes.register("func", handler=lambda c: hits.append(1))
    out = gdb_session(m, exe, ["break again", "continue", "continue", "delete", "continue"])
    assert out.count("Breakpoint 1, ") == 2
    assert hits == [1, 1, 1], "three uprobe hits, none caused by gdb's breakpoint"
    assert m.counters.uprobe_hits == 3
    assert m.mem.read(m.resolve("again"), 1) != b"\xcc", "gdb breakpoints never write guest memory"


@pytest.mark.parametrize("kernel", ["6.10", "6.18"])
def test_stepping_across_a_probed_ret_and_a_uretprobe_return(tmp_path, kernel):
    """stepi over a probed ret (out of line) and through the uretprobe trampoline lands
    exactly where a native run would: back in _start after the call."""
    exe = write_elf(tmp_path)
    m = Machine.from_elf(exe, kernel=kernel)
    rets = []
    m.uprobes.register("func", handler=lambda c: None, ret_handler=lambda c: rets.append(c.regs.rax))
    ret_addr = m.resolve("func") + 1 + 3 + 7 + 1  # push, mov, mov, pop: the ret
    m.uprobes.register(ret_addr, handler=lambda c: None)
    after_call = m.resolve("again") + 5
    out = gdb_session(
        m, exe, [f"break *{ret_addr:#x}", "continue", "delete", "stepi", "info registers rip rax", "kill"]
    )
    assert f"rip            {after_call:#x}" in out, out
    assert "rax            0x1234" in out
    assert rets == [0x1234], "the return handler ran exactly once"


def test_segfault_is_reported_as_sigsegv(tmp_path):
    """As under ptrace: the stop at the fault first (pc at the faulting store), the
    death at the next continue."""
    exe = write_elf(tmp_path, "_start:\n    mov rax, 0x10\n    mov qword ptr [rax], 1\n", "segv")
    m = Machine.from_elf(exe)
    store = m.resolve("_start") + 7
    out = gdb_session(m, exe, ["continue", "continue"])
    want = (
        f"\nProgram received signal SIGSEGV, Segmentation fault.\n{store:#018x} in _start ()\n"
        "\nProgram terminated with signal SIGSEGV, Segmentation fault.\n"
    )
    assert want in out, out


def test_monitor_lists_probes_and_counters_at_a_stop(tmp_path):
    exe = write_elf(tmp_path)
    m = Machine.from_elf(exe, kernel="6.18")
    m.uprobes.register("func", handler=lambda c: None)
    out = gdb_session(m, exe, ["break again", "continue", "continue", "monitor probes", "monitor counters", "kill"])
    assert f"{m.resolve('func'):#x} {exe}:0x{m.resolve('func') - 0x400000:x} hits=1 consumers=1 push" in out
    assert "uprobe_hits: 1" in out and "bp_traps: 1" in out


def test_monitor_before_running(tmp_path):
    exe = write_elf(tmp_path)
    m = Machine.from_elf(exe, kernel="6.18")
    m.uprobes.register("func", handler=lambda c: None)
    out = gdb_session(m, exe, ["monitor probes", "monitor counters", "kill"])
    func = m.resolve("func")
    assert f"{func:#x} {exe}:0x{func - 0x400000:x} hits=0 consumers=1 push" in out
    assert "text_writes: 1" in out


def test_threads_appear_as_gdb_threads(build_c, tmp_path):
    exe = build_c("threads.c", "-static", "-pthread", name="threads")
    m = Machine.from_elf(exe)
    out = gdb_session(m, exe, ["break work", "continue", "info threads"])
    assert out.count("Thread ") >= 2, out


def test_gdbserver_cli_serves_and_exits(tmp_path):
    assert GDB
    exe = write_elf(tmp_path)
    srv = subprocess.Popen(
        [shutil.which("uprobe-emu"), "gdbserver", "--port", "0", exe], stderr=subprocess.PIPE, text=True
    )
    try:
        line = srv.stderr.readline()
        assert line.startswith("uprobe-emu: listening for gdb on 127.0.0.1:")
        port = line.rsplit(":", 1)[1].strip()
        out = subprocess.run(
            [GDB, "-batch", "-nx", "-ex", f"target remote :{port}", "-ex", "continue", exe],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "exited with code 052" in out.stdout + out.stderr
        assert srv.wait(20) == 0
    finally:
        srv.kill()
