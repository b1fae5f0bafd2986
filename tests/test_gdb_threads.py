"""Threads under gdb: a stop reply names the thread that stopped, and from then on
that thread is the selected one (``Hg``/``Hc`` reset, as gdbserver's general thread
follows the event), so ``g`` shows its registers even when gdb had selected another
thread before resuming (``info threads``); ``vCont;s:TID;c`` and ``Hc TID`` + ``s``
step thread TID."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading

import pytest
from gdb_client import RawClient, Stub

from emu import Machine
from emu.debug.disasm import Disassembler
from emu.frontends.gdbstub import serve_once

GDB = shutil.which("gdb")


@pytest.fixture(scope="module")
def threads_exe(build_c):
    return build_c("threads.c", "-static", "-pthread", name="threads")


def gdb_script(machine, exe, script: str, tmp_path, timeout=120) -> str:
    """Serve ``machine``; run gdb -batch on a command file (breakpoint ``commands``)."""
    assert GDB
    port, ready = {}, threading.Event()

    def on_ready(p):
        port["n"] = p
        ready.set()

    t = threading.Thread(target=serve_once, args=(machine, "127.0.0.1", 0), kwargs={"ready": on_ready}, daemon=True)
    t.start()
    assert ready.wait(10)
    path = tmp_path / "cmds.gdb"
    path.write_text(f"set pagination off\nset confirm off\ntarget remote 127.0.0.1:{port['n']}\n" + script)
    out = subprocess.run([GDB, "-batch", "-nx", "-x", str(path), exe], capture_output=True, text=True, timeout=timeout)
    t.join(30)
    return out.stdout + out.stderr


HITS = """break work
commands
silent
printf "hit thread=%d x=%ld\\n", $_thread, x
info threads
continue
end
continue
"""


def test_no_breakpoint_hit_is_skipped_after_info_threads(threads_exe, tmp_path):
    """Three workers call work(id) 50 times each: gdb sees all 150 hits, each with the
    hitting thread's own argument (its registers)."""
    m = Machine.from_elf(threads_exe, argv=[threads_exe, "3"])
    out = gdb_script(m, threads_exe, HITS, tmp_path)
    hits = re.findall(r"^hit thread=(\d+) x=(\d+)$", out, re.M)
    per_thread: dict = {}
    for thread, x in hits:
        per_thread.setdefault(thread, set()).add(x)
    assert len(hits) == 150, f"{len(hits)} hits seen:\n{out[-3000:]}"
    assert sorted(per_thread) == ["2", "3", "4"], per_thread
    assert sorted(min(v) for v in per_thread.values()) == ["0", "1", "2"] and all(
        len(v) == 1 for v in per_thread.values()
    ), per_thread
    assert m.exited and m.main_process.exit_result.exit_code == 0, out[-2000:]


# ----------------------------------------------------------------- the raw protocol


@pytest.fixture
def stopped(threads_exe):
    """Stopped at work's breakpoint in the first worker; main is runnable."""
    m = Machine.from_elf(threads_exe, argv=[threads_exe, "2"])
    stub = Stub(m)
    c = RawClient(stub.port)
    assert c.ask(b"Z0,%x,1" % m.resolve("work")) == b"OK"
    reply = c.ask(b"c")
    main = m.main_process.pid
    worker = int(re.fullmatch(rb"T05swbreak:;thread:([0-9a-f]+);", reply).group(1), 16)
    assert worker != main
    yield m, c, main, worker
    c.close()
    stub.finished(10)
    assert stub.errors == [], "\n".join(stub.errors)


def rip_of(m, tid) -> int:
    return m.task_reg_read(next(t for t in m.tasks if t.tid == tid), "rip")


def g_rip(reply: bytes) -> int:
    return int.from_bytes(bytes.fromhex(reply[16 * 16 : 17 * 16].decode()), "little")


def test_the_stop_reply_selects_the_thread_that_stopped(stopped):
    m, c, main, worker = stopped
    assert c.ask(b"Hg%x" % main) == b"OK"
    assert g_rip(c.ask(b"g")) == rip_of(m, main)
    assert c.ask(b"z0,%x,1" % m.resolve("work")) == b"OK"
    assert c.ask(b"Z0,%x,1" % m.resolve("work")) == b"OK"
    reply = c.ask(b"c")
    tid = int(re.fullmatch(rb"T05swbreak:;thread:([0-9a-f]+);", reply).group(1), 16)
    assert g_rip(c.ask(b"g")) == rip_of(m, tid) == m.resolve("work"), (
        "g shows the reporting thread, not the one selected before the resume"
    )


@pytest.mark.parametrize("how", ["vcont", "hc"])
def test_step_of_another_thread_steps_that_thread(stopped, how):
    m, c, main, worker = stopped
    start, worker_rip = rip_of(m, main), rip_of(m, worker)
    insn = Disassembler(m).decode(start)
    assert not insn.mnemonic.startswith(("j", "call", "ret", "syscall")), insn.text
    if how == "vcont":
        reply = c.ask(b"vCont;s:%x;c" % main)
    else:
        assert c.ask(b"Hc%x" % main) == b"OK"
        reply = c.ask(b"s")
    assert reply == b"T05thread:%x;" % main
    assert rip_of(m, main) == start + insn.size
    assert rip_of(m, worker) == worker_rip, "the stepped thread ran, the stopped one did not move"
    assert g_rip(c.ask(b"g")) == start + insn.size
