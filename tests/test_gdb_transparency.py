"""Attaching gdb changes nothing the guest or the uprobes model observes: the same probed
guest run with ``uprobe-emu run`` and under ``uprobe-emu gdbserver`` with a real gdb
(breakpoints on probed instructions, stepi through emulated, out-of-line and optimized
sites, finish across a uretprobe-hijacked return) writes the same event stream, the
same output and ends with the same exit code; gdb sees the program's own bytes."""

from __future__ import annotations

import re
import subprocess

import pytest
from cli_helpers import cli
from gdb_client import GDB, UPROBE_EMU, gdbserver_session

from emu import Machine


def probes(exe: str) -> list[str]:
    """outer's entry (push rbp: emulated), work's entry (a rip-relative add: out of
    line), a nop5 site (optimized after its first hit on 6.18), work's return."""
    return [
        "-e",
        f"uprobe:{exe}:outer",
        "-e",
        f"uprobe:{exe}:work",
        "-e",
        f"uprobe:{exe}:nop5_site",
        "-e",
        f"uretprobe:{exe}:work",
    ]


def native(exe: str, tmp_path, kernel: str):
    ev = tmp_path / "native.events"
    p = cli("run", "--kernel", kernel, *probes(exe), "--events", str(ev), exe)
    return p.returncode, p.stdout.decode(), ev.read_text()


def under_gdb(exe: str, tmp_path, kernel: str, commands: list[str]):
    """(gdbserver's exit code, guest output, events, gdb's transcript)."""
    ev = tmp_path / "gdb.events"
    rc, out, _, transcript = gdbserver_session(exe, ["--kernel", kernel, *probes(exe), "--events", str(ev)], commands)
    return rc, out, ev.read_text(), transcript


def pcs(transcript: str) -> list[int]:
    """The values of every ``p/x $pc``."""
    return [int(v, 16) for v in re.findall(r"^\$\d+ = (0x[0-9a-f]+)$", transcript, re.M)]


SESSION = [
    "break *outer",
    "break *work",
    "break *nop5_site",
    "continue",
    "p/x $pc",
    "x/1xb outer",
    "stepi",
    "p/x $pc",  # emulated push
    "continue",
    "p/x $pc",
    "x/2xb work",
    "stepi",
    "p/x $pc",  # out of line add
    "stepi",
    "p/x $pc",  # nop5 (first hit)
    "bt",
    "finish",
    "p/x $pc",  # hijacked return
    "delete 1 2",
    "continue",
    "p/x $pc",
    "x/5xb nop5_site",  # nop5, optimized
    "monitor raw nop5_site 5",
    "stepi",
    "p/x $pc",
    "bt",
    "finish",
    "p/x $pc",
    "delete",
    "continue",
]


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("gdb_probed.c", "-static", name="gdb_probed")


@pytest.mark.parametrize("kernel", ["6.10", "6.18"])
def test_same_events_output_and_exit_with_and_without_gdb(guest, tmp_path, kernel):
    rc, out, events = native(guest, tmp_path, kernel)
    assert rc == 12 and out == "s=12 counter=3\n", (rc, out)
    assert events.count("\n") == 4 * 3, events
    g_rc, g_out, g_events, transcript = under_gdb(guest, tmp_path, kernel, SESSION)
    assert g_events == events, f"events under gdb:\n{g_events}\nwithout:\n{events}"
    assert g_out == out, (g_out, out)
    assert "exited with code 014" in transcript, transcript
    assert g_rc == 0, "gdbserver itself exits 0 once the guest has exited under gdb"


@pytest.mark.parametrize("kernel", ["6.10", "6.18"])
def test_gdb_stops_and_steps_where_the_unprobed_program_would(guest, tmp_path, kernel):
    m = Machine.from_elf(guest)
    outer, work, nop5 = m.resolve("outer"), m.resolve("work"), m.resolve("nop5_site")
    after_call = outer + 4 + 5  # push rbp; mov rbp, rsp; call work
    _, _, _, transcript = under_gdb(guest, tmp_path, kernel, SESSION)
    assert pcs(transcript) == [outer, outer + 1, work, nop5, nop5 + 5, after_call, nop5, nop5 + 5, after_call], (
        transcript
    )
    assert "Program received" not in transcript and "SIGILL" not in transcript, transcript


def test_gdb_reads_the_program_bytes_and_monitor_raw_the_model(guest, tmp_path):
    _, _, _, transcript = under_gdb(guest, tmp_path, "6.18", SESSION)
    assert re.search(r"<outer>:\t0x55\n", transcript), transcript  # not 0xcc
    assert re.search(r"<work>:\t0x01\t0x3d\n", transcript), transcript
    assert re.search(r"<work\+6>:\t0x0f\t0x1f\t0x44\t0x00\t0x00\n", transcript), transcript
    raw = re.search(r"^0x[0-9a-f]+: (e8( [0-9a-f]{2}){4})$", transcript, re.M)
    assert raw, f"monitor raw shows the optimized call:\n{transcript}"


def test_backtrace_through_a_hijacked_return_shows_the_callers(guest, tmp_path):
    _, _, _, transcript = under_gdb(guest, tmp_path, "6.18", SESSION)
    bts = re.findall(r"^#\d+ .*$", transcript, re.M)
    names = [re.search(r" in (\w+) | (\w+) \(", line) for line in bts]
    funcs = [n.group(1) or n.group(2) for n in names]
    assert funcs == ["work", "outer", "main"] * 2, bts
    assert "[uprobes]" not in transcript and "?? ()" not in transcript, transcript


STEPPER_SCRIPT = "b *outer\nb *work\nc\nx/2xb outer\nsi\nc\nx/2xb work\nsi\nsi\ndisas work\ndelete\nc\n"


@pytest.mark.parametrize("kernel", ["6.10", "6.18"])
def test_stepper_session_has_the_events_and_exit_of_a_plain_run(guest, tmp_path, kernel):
    rc, out, events = native(guest, tmp_path, kernel)
    ev = tmp_path / "step.events"
    p = cli("step", "--kernel", kernel, *probes(guest), "--events", str(ev), guest, input=STEPPER_SCRIPT.encode())
    text = p.stdout.decode()
    assert p.returncode == 0 and p.stderr == b"", p.stderr
    assert ev.read_text() == events, f"stepper events:\n{ev.read_text()}\nrun's:\n{events}"
    assert text.startswith("Breakpoint 1 at"), text
    assert "s=12 counter=3\n" in text and "exited with code 014]" in text, text


def test_stepper_x_and_disas_show_the_program_bytes(guest, tmp_path):
    p = cli("step", "--kernel", "6.18", *probes(guest), guest, input=STEPPER_SCRIPT.encode())
    text = p.stdout.decode()
    m = Machine.from_elf(guest)
    outer, work = m.resolve("outer"), m.resolve("work")
    assert f"{outer:#x} <outer>:\t0x55\t0x48\n" in text, text
    assert f"{work:#x} <work>:\t0x01\t0x3d\n" in text, text
    assert re.search(
        rf"^     {work:x}:\t01 3d [0-9a-f ]+\tadd    dword ptr \[rip \+ 0x[0-9a-f]+\], edi"
        r".*        # uprobe site, in memory: int3$",
        text,
        re.M,
    ), text
    assert f"=> {outer:#x} <outer>:\tpush   rbp        # uprobe site, in memory: int3" in text, text


# ----------------------------------------------------------------- the raw protocol


@pytest.fixture
def probed(tmp_path):
    """The raw-protocol guest with a uprobe and a uretprobe on func; stopped at func+1
    (after the probed push), so the return address is hijacked."""
    from gdb_client import RawClient, Stub, guest_machine

    m = guest_machine(tmp_path, kernel="6.18")
    hits = []
    m.uprobes.register("func", handler=lambda c: hits.append("entry"), ret_handler=lambda c: hits.append("return"))
    stub = Stub(m)
    c = RawClient(stub.port)
    func = m.resolve("func")
    assert c.ask(b"Z0,%x,1" % (func + 1)) == b"OK"
    assert c.ask(b"c").startswith(b"T05swbreak:")
    yield m, c, hits
    c.close()
    stub.finished(10)
    assert stub.errors == [], "\n".join(stub.errors)


def test_m_shows_the_probed_instruction_and_the_original_return_address(probed):
    m, c, _ = probed
    func, after_call = m.resolve("func"), m.resolve("again") + 5
    assert m.mem.read(func, 1) == b"\xcc", "the int3 is in memory"
    assert c.ask(b"m%x,4" % func) == b"554889e5"
    slot = m.read_regs().rsp + 8
    tramp = m.process.mm_uprobes.xol_area.vaddr
    assert m.mem.read_u64(slot) == tramp, "the return address is hijacked"
    assert c.ask(b"m%x,8" % slot) == after_call.to_bytes(8, "little").hex().encode()


@pytest.mark.parametrize("offset,data", [(0, b"90"), (-1, b"9090"), (0, b"90909090")])
def test_a_write_that_changes_a_probed_instruction_is_refused(probed, offset, data):
    m, c, hits = probed
    func = m.resolve("func")
    before = m.mem.read(func - 1, 8)
    assert c.ask(b"M%x,%x:%s" % (func + offset, len(data) // 2, data)) == b"E14"
    assert m.mem.read(func - 1, 8) == before, "nothing written"


def test_a_write_next_to_the_probed_instruction_goes_through(probed):
    m, c, hits = probed
    func = m.resolve("func")
    assert c.ask(b"M%x,3:909090" % (func + 1)) == b"OK"
    assert m.mem.read(func, 4) == b"\xcc\x90\x90\x90"
    assert c.ask(b"m%x,4" % func) == b"55909090"


def test_a_write_of_the_program_bytes_keeps_the_probe(probed):
    m, c, hits = probed
    func = m.resolve("func")
    assert c.ask(b"M%x,4:554889e5" % func) == b"OK"
    assert m.mem.read(func, 4) == b"\xcc\x48\x89\xe5", "the int3 stays in memory"
    assert c.ask(b"z0,%x,1" % (func + 1)) == b"OK"
    assert c.ask(b"c") == b"W2a"
    assert hits == ["entry", "return"] * 3, hits


def test_a_write_to_a_hijacked_return_address_is_refused(probed):
    m, c, _ = probed
    slot = m.read_regs().rsp + 8
    assert c.ask(b"M%x,8:%s" % (slot, (0x401000).to_bytes(8, "little").hex().encode())) == b"E14"
    same = (m.resolve("again") + 5).to_bytes(8, "little").hex().encode()
    assert c.ask(b"M%x,8:%s" % (slot, same)) == b"OK"
    assert m.mem.read_u64(slot) == m.process.mm_uprobes.xol_area.vaddr


def test_monitor_raw_shows_memory_as_the_cpu_fetches_it(probed):
    m, c, _ = probed
    func = m.resolve("func")
    c.send_packet(b"qRcmd," + f"raw {func:#x} 4".encode().hex().encode())
    assert c.ack() == b"+"
    out = bytes.fromhex(c.reply()[1:].decode()).decode()
    assert c.reply() == b"OK"
    assert out == f"{func:#x}: cc 48 89 e5\n", out


# ----------------------------------------------------------------- gdb without a file


def test_gdb_without_a_file_learns_the_program_from_the_stub(guest, tmp_path):
    """qXfer:exec-file names the program (gdb reads its symbols through vFile, its
    "target:" sysroot), qXfer:auxv gives its entry, qXfer:features the registers; the
    probed entry shows the program's byte."""
    assert GDB and UPROBE_EMU
    srv = subprocess.Popen(
        [UPROBE_EMU, "gdbserver", *probes(guest), "--port", "0", guest],
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
                f"target remote 127.0.0.1:{port}",
                "-ex",
                "info auxv",
                "-ex",
                "info inferiors",
                "-ex",
                "x/1xb outer",
                "-ex",
                "p $orig_rax",
                "-ex",
                "p/x $fs_base",
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
    m = Machine.from_elf(guest)
    assert f"Reading symbols from target:{guest}..." in out, out
    assert re.search(rf"^9 +AT_ENTRY +Entry point of program +{m.read_regs().rip:#x}$", out, re.M), out
    inferior = rf"^\* 1 +process {m.process.pid} +1 \(remote 127\.0\.0\.1:{port}\) +target:{re.escape(guest)}"
    assert re.search(inferior, out, re.M), out
    assert f"{m.resolve('outer'):#x} <outer>:\t0x55\n" in out, out
    assert "$1 = -1\n$2 = 0x0\n" in out, out


def test_a_gdb_breakpoint_on_a_probed_instruction_stops_before_the_probe_fires(guest, tmp_path):
    _, _, events, transcript = under_gdb(
        guest, tmp_path, "6.18", ["break *outer", "continue", "monitor probes", "stepi", "monitor probes", "kill"]
    )
    m = Machine.from_elf(guest)
    outer = m.resolve("outer")
    site = rf"^{outer:#x} {re.escape(guest)}:0x{outer - 0x400000:x} hits=(\d) consumers=1 push$"
    assert re.findall(site, transcript, re.M) == ["0", "1"], transcript
    assert events.count(": outer: (") == 1, events


@pytest.mark.parametrize("command,extra", [("gdbserver", ["--port", "0"]), ("step", [])])
def test_an_unwritable_events_file_is_one_line_and_exit_2(guest, tmp_path, command, extra):
    from cli_helpers import one_line_error

    bad = tmp_path / "no" / "such"
    p = cli(command, "--events", str(bad), *extra, guest, input=b"q\n")
    assert one_line_error(p) == f"uprobe-emu: error: cannot write '{bad}': No such file or directory"
