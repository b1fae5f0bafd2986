"""Z2/Z3/Z4 watchpoints (write, read, access) on guest memory, through the machine's
memory hooks: like x86 debug registers they trap after the accessing instruction
completed (it ran exactly once), and the stop reply names the watchpoint
(``watch:``/``rwatch:``/``awatch:``).  A real gdb's ``watch var`` shows the old and the
new value; the stepper has ``watch``/``rwatch``/``awatch``."""

from __future__ import annotations

import io
import shutil

import pytest
from gdb_client import RawClient, Stub

from emu import Machine
from emu.frontends.stepper import Stepper, StepperShell

GDB = shutil.which("gdb")

# adds 5 to buf three times (a read-modify-write), reads other each time; exits with buf
WATCH_GUEST = """
_start:
    lea rbx, [rip + buf]
    mov rcx, 3
loop:
    add qword ptr [rbx], 5
    mov rax, qword ptr [rbx + 8]
    dec rcx
    jnz loop
    mov rdi, qword ptr [rbx]
    mov eax, 231
    syscall
.data
buf: .quad 0
other: .quad 7
"""


@pytest.fixture
def session():
    m = Machine.from_asm(WATCH_GUEST)
    stub = Stub(m)
    c = RawClient(stub.port)
    yield m, c
    c.close()
    stub.finished(10)
    assert stub.errors == [], "\n".join(stub.errors)


def rip(m) -> int:
    return m.read_regs().rip


def test_write_watchpoint_stops_after_the_instruction_which_ran_once(session):
    m, c = session
    buf, after_add = m.resolve("buf"), m.resolve("loop") + 4
    assert c.ask(b"Z2,%x,8" % buf) == b"OK"
    for n in (1, 2, 3):
        assert c.ask(b"c") == b"T05watch:%x;thread:%x;" % (buf, m.task.tid)
        assert rip(m) == after_add, f"{rip(m):#x} != {after_add:#x}"
        assert m.mem.read_u64(buf) == 5 * n, "the add ran exactly once per stop"
    assert c.ask(b"c") == b"W0f"


def test_read_watchpoint_ignores_writes_and_stops_after_the_read(session):
    m, c = session
    other, after_read = m.resolve("other"), m.resolve("loop") + 8
    assert c.ask(b"Z3,%x,8" % other) == b"OK"
    assert c.ask(b"c") == b"T05rwatch:%x;thread:%x;" % (other, m.task.tid)
    assert rip(m) == after_read and m.read_regs().rax == 7
    assert c.ask(b"z3,%x,8" % other) == b"OK"
    assert c.ask(b"c") == b"W0f"


def test_a_read_watchpoint_on_a_read_modify_write_leaves_one_write(session):
    m, c = session
    buf = m.resolve("buf")
    assert c.ask(b"Z3,%x,8" % buf) == b"OK"
    assert c.ask(b"c") == b"T05rwatch:%x;thread:%x;" % (buf, m.task.tid)
    assert m.mem.read_u64(buf) == 5
    assert c.ask(b"z3,%x,8" % buf) == b"OK"
    assert c.ask(b"c") == b"W0f"


def test_access_watchpoint_sees_the_read_of_a_read_modify_write(session):
    m, c = session
    buf = m.resolve("buf")
    assert c.ask(b"Z4,%x,4" % buf) == b"OK"
    assert c.ask(b"c") == b"T05awatch:%x;thread:%x;" % (buf, m.task.tid)
    assert rip(m) == m.resolve("loop") + 4 and m.mem.read_u64(buf) == 5


@pytest.mark.parametrize(
    "offset,size,hit", [(0, 1, True), (7, 1, True), (6, 2, True), (4, 4, True), (8, 2, False), (12, 4, False)]
)
def test_watchpoint_sizes_and_overlap(session, offset, size, hit):
    m, c = session
    buf = m.resolve("buf")
    assert c.ask(b"Z2,%x,%x" % (buf + offset, size)) == b"OK"
    want = b"T05watch:%x;thread:%x;" % (buf + offset, m.task.tid) if hit else b"W0f"
    assert c.ask(b"c") == want


@pytest.mark.parametrize("packet,reply", [(b"Z2,%x,3", b"E01"), (b"Z2,%x,10", b"E01"), (b"Z3,%x,0", b"E01")])
def test_watchpoint_sizes_other_than_1_2_4_8_are_refused(session, packet, reply):
    m, c = session
    assert c.ask(packet % m.resolve("buf")) == reply


def test_watchpoint_on_unmapped_memory_is_refused(session):
    _, c = session
    assert c.ask(b"Z2,10,8") == b"E14"


def test_stepi_over_a_watched_write_reports_the_watchpoint(session):
    m, c = session
    buf = m.resolve("buf")
    assert c.ask(b"Z2,%x,8" % buf) == b"OK"
    for _ in range(2):  # lea, mov: no access
        assert c.ask(b"s") == b"T05thread:%x;" % m.task.tid
    assert c.ask(b"s") == b"T05watch:%x;thread:%x;" % (buf, m.task.tid)
    assert rip(m) == m.resolve("loop") + 4 and m.mem.read_u64(buf) == 5


def test_a_watched_write_executed_out_of_line_is_seen():
    """A probed instruction runs in the XOL slot: its access is still the program's."""
    m = Machine.from_asm(WATCH_GUEST, kernel="6.18")
    hits = []
    m.uprobes.register("loop", handler=lambda ctx: hits.append(1))
    s = Stepper(m)
    s.watch("buf", 8, "write")
    ev = s.cont()
    assert (ev.reason, ev.rip, ev.data_addr) == ("watchpoint", m.resolve("loop") + 4, m.resolve("buf"))
    assert hits == [1] and m.mem.read_u64(m.resolve("buf")) == 5


def test_stepper_watch_commands_report_old_and_new_values():
    m = Machine.from_asm(WATCH_GUEST)
    out = io.StringIO()
    shell = StepperShell(Stepper(m), out=out, err=out)
    shell.run_lines(["watch buf", "c", "rwatch other", "c", "delete", "c"])
    text = out.getvalue()
    assert "Hardware watchpoint 1: buf\n" in text
    assert "Hardware watchpoint 1: buf\n\nOld value = 0\nNew value = 5\n" in text, text
    assert "Hardware read watchpoint 2: other\n\nValue = 7\n" in text, text
    assert "exited with code 017]" in text, text


# ----------------------------------------------------------------- a real gdb


def gdb_watch(machine, exe, commands):
    from test_gdbstub import gdb_session

    return gdb_session(machine, exe, commands)


@pytest.mark.parametrize("probed", [False, True])
def test_gdb_watch_on_a_global_shows_old_and_new_values(build_c, probed):
    exe = build_c("gdb_probed.c", "-static", name="gdb_probed")
    m = Machine.from_elf(exe)
    if probed:  # the write to counter runs out of line
        m.uprobes.register("work", handler=lambda ctx: None)
    out = gdb_watch(m, exe, ["break main", "continue", "watch counter", "continue", "continue", "delete", "continue"])
    assert "Hardware watchpoint 2: counter" in out, out
    assert "Old value = 0\nNew value = 1\n" in out and "Old value = 1\nNew value = 3\n" in out, out
    assert out.count("\nwork (x=x@entry=") == 2, "stopped after the add, in work"
    assert "exited with code 014" in out, out


def test_gdb_rwatch_and_awatch(build_c):
    exe = build_c("gdb_probed.c", "-static", name="gdb_probed")
    m = Machine.from_elf(exe)
    out = gdb_watch(
        m,
        exe,
        [
            "break main",
            "continue",
            "rwatch counter",
            "continue",
            "delete",
            "awatch counter",
            "continue",
            "delete",
            "continue",
        ],
    )
    assert "Hardware read watchpoint 2: counter\n\nValue = 0\n" in out, out
    assert "Hardware access (read/write) watchpoint 3: counter\n\nOld value = 0\nNew value = 1\n" in out, out
    assert "exited with code 014" in out, out
