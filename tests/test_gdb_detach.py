"""``D`` (gdb's ``detach``) lets the guest run on to its natural end, as a process
gdbserver detaches from goes on: breakpoints and watchpoints are gone, probes keep
firing and their events are still written, the output is complete.  As the guest lives
inside ``uprobe-emu gdbserver``, the command then ends with the guest's status, as
``run`` does (gdbserver itself exits 0 and leaves the process running)."""

from __future__ import annotations

import re

import pytest
from cli_helpers import cli
from gdb_client import RawClient, Stub, gdbserver_session, guest_machine


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("gdb_probed.c", "-static", name="gdb_probed")


def test_detach_runs_the_guest_to_its_end_with_its_events_and_status(guest, tmp_path):
    spec = ["-e", f"uprobe:{guest}:work", "-e", f"uretprobe:{guest}:work"]
    native_ev, ev = tmp_path / "native.events", tmp_path / "gdb.events"
    run = cli("run", *spec, "--events", str(native_ev), guest)
    rc, out, err, transcript = gdbserver_session(
        guest, spec + ["--events", str(ev)], ["break work", "continue", "detach"]
    )
    assert "Breakpoint 1, work" in transcript, transcript
    # the multiprocess extensions tell gdb the guest's pid
    assert re.search(r"^\[Inferior 1 \(process \d+\) detached\]$", transcript, re.M), transcript
    assert out == run.stdout.decode() == "s=12 counter=3\n", out
    assert ev.read_text() == native_ev.read_text(), ev.read_text()
    assert ev.read_text().count("work__return") == 3
    assert (rc, run.returncode) == (12, 12), (rc, err)


def test_detach_with_a_watchpoint_set_runs_on_without_it(guest, tmp_path):
    rc, out, err, transcript = gdbserver_session(guest, [], ["break main", "continue", "watch counter", "detach"])
    assert "Hardware watchpoint 2: counter" in transcript, transcript
    assert (rc, out) == (12, "s=12 counter=3\n"), (rc, out, err)


def test_the_guest_ended_by_a_signal_after_detach_is_reported_as_run_reports_it(tmp_path):
    from emu.asm import asm_to_elf

    elf, _ = asm_to_elf("_start:\n    nop\n    mov rax, 0x10\n    mov qword ptr [rax], 1\n")
    exe = tmp_path / "segv"
    exe.write_bytes(elf)
    rc, _, err, transcript = gdbserver_session(str(exe), [], ["stepi", "detach"])
    assert rc == 128 + 11, (rc, err)
    assert "uprobe-emu: guest killed by SIGSEGV" in err, err


# ----------------------------------------------------------------- the raw protocol


def raw_session(tmp_path):
    m = guest_machine(tmp_path)
    hits = []
    m.uprobes.register("func", handler=lambda c: hits.append(1))
    stub = Stub(m)
    return m, hits, stub, RawClient(stub.port)


def test_D_after_a_breakpoint_lets_the_guest_exit_with_its_code(tmp_path):
    m, hits, stub, c = raw_session(tmp_path)
    func = m.resolve("func")
    assert c.ask(b"Z0,%x,1" % func) == b"OK"
    assert c.ask(b"c").startswith(b"T05swbreak:")
    assert hits == []
    assert c.ask(b"D") == b"OK"
    assert stub.finished(10), "the stub returns once the guest has run to its end"
    assert stub.errors == [], stub.errors
    assert m.exited and m.main_process.exit_result.exit_code == 42
    assert hits == [1, 1, 1], "every probe hit of the rest of the run, none twice"


def test_D_with_a_pid_before_running_runs_the_whole_guest(tmp_path):
    m, hits, stub, c = raw_session(tmp_path)
    assert c.ask(b"D;%x" % m.main_process.pid) == b"OK"
    assert stub.finished(10) and stub.errors == []
    assert m.main_process.exit_result.exit_code == 42 and hits == [1, 1, 1]
