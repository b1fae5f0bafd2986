"""The multiprocess extensions (thread ids ``pPID.TID``), which tell gdb the guest's
real pid: its /proc reads through vFile then work, among them the vDSO's range from
/proc/PID/task/PID/maps, so gdb loads the vDSO's symbols from memory as it does
natively; and gdb with no program file and no ``set sysroot`` takes the program from the
target when the machine runs with ``--sysroot``."""

from __future__ import annotations

import re
import shutil
import subprocess

from gdb_client import GDB, UPROBE_EMU, RawClient, Stub, guest_machine
from test_gdbstub import gdb_session
from test_stepper_unwind import unwind_guest  # noqa: F401 (fixture)

from emu import Machine


def test_multiprocess_is_announced_when_offered(tmp_path):
    stub = Stub(guest_machine(tmp_path))
    c = RawClient(stub.port)
    assert b"multiprocess+" in c.ask(b"qSupported:multiprocess+;swbreak+").split(b";")
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == [], stub.errors


def test_thread_ids_are_pid_dot_tid(tmp_path):
    m = guest_machine(tmp_path)
    pid, tid = m.process.pid, m.task.tid
    stub = Stub(m)
    c = RawClient(stub.port)
    c.ask(b"qSupported:multiprocess+")
    ptid = b"p%x.%x" % (pid, tid)
    assert c.ask(b"qC") == b"QC" + ptid
    assert c.ask(b"qfThreadInfo") == b"m" + ptid
    assert c.ask(b"Hg" + ptid) == b"OK"
    assert c.ask(b"Hgp0.0") == b"OK"
    assert c.ask(b"Hcp%x.-1" % pid) == b"OK"
    assert c.ask(b"T" + ptid) == b"OK"
    assert c.ask(b"Hgp%x.7fff" % pid) == b"E01", "no such thread"
    assert c.ask(b"Hgp1.zz") == b"E01", "malformed"
    assert c.ask(b"Z0,%x,1" % m.resolve("func")) == b"OK"
    assert c.ask(b"vCont;c:" + ptid) == b"T05swbreak:;thread:" + ptid + b";"
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == [], stub.errors


def test_without_multiprocess_thread_ids_are_plain(tmp_path):
    m = guest_machine(tmp_path)
    stub = Stub(m)
    c = RawClient(stub.port)
    c.ask(b"qSupported:swbreak+")
    assert c.ask(b"qC") == b"QC%x" % m.task.tid
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == [], stub.errors


def test_gdb_loads_the_vdso_symbols_from_memory(unwind_guest):
    """As natively: the vDSO is not in `info sharedlibrary` (gdb filters it out of the
    link_map list by its range) and its symbols resolve in the "system-supplied DSO"
    gdb reads from the guest's memory."""
    prog = unwind_guest("dynamic", "-O2")
    m = Machine.from_elf(prog)
    out = gdb_session(
        m,
        prog,
        [
            "set debug-file-directory /nonexistent",
            "break main",
            "continue",
            "info sharedlibrary",
            "info symbol __vdso_clock_gettime",
            "kill",
        ],
    )
    vdso = next(v for v in m.mem.vmas if v.name == "[vdso]")
    assert re.search(rf"^clock_gettime in section \.text of system-supplied DSO at {vdso.start:#x}$", out, re.M), out
    assert "linux-vdso" not in out, out


def test_gdb_without_a_program_file_reads_it_from_the_sysroot(unwind_guest, tmp_path):
    """`--sysroot DIR`: the exec file is the guest's path, read through vFile
    ("target:"); symbols and breakpoints work in it."""
    assert GDB and UPROBE_EMU
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    shutil.copy(unwind_guest("static", "-O2"), root / "bin" / "prog")
    srv = subprocess.Popen(
        [UPROBE_EMU, "gdbserver", "--sysroot", str(root), "--port", "0", str(root / "bin" / "prog")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = srv.stderr.readline().rsplit(":", 1)[1].strip()
        gdb = subprocess.run(
            [
                GDB,
                "-batch",
                "-nx",
                "-ex",
                "set debuginfod enabled off",
                "-ex",
                f"target remote 127.0.0.1:{port}",
                "-ex",
                "break leaf",
                "-ex",
                "continue",
                "-ex",
                "bt 2",
                "-ex",
                "kill",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        srv.communicate(timeout=60)
    finally:
        srv.kill()
    out = gdb.stdout + gdb.stderr
    assert "Reading symbols from target:/bin/prog..." in out, out
    assert re.search(r"^Breakpoint 1, 0x[0-9a-f]+ in leaf \(\)$", out, re.M), out
    assert re.search(r"^#1  0x[0-9a-f]+ in big_frame \(\)$", out, re.M), out
