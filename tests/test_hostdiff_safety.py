"""``uprobe-emu diff`` never traces itself, reads its trace in bounded chunks, says when
the host trace lost events, and compares stderr.  On the host as root with tracefs;
skipped only when tracefs cannot be used (the rule of test_hostdiff.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from cli_helpers import cli
from test_hostdiff import needs_tracefs
from test_hostdiff_dynamic import MALLOC_C
from test_hostdiff_security import host_state, processes_running

from emu.frontends import hostdiff
from emu.frontends.cli import main
from emu.frontends.host_tracefs import HostKernelError, HostProbes, read_bounded

# these tests look at the host's own tracefs mount (diff's private ones come and go)
pytestmark = pytest.mark.usefixtures("host_tracefs")

READS_C = r"""
/* Reads stdin a byte at a time (each one a libc read()), then says how many bytes it
 * read on stdout and "done" on stderr. */
#include <stdio.h>
#include <unistd.h>

int main(void)
{
    char c;
    int n = 0;
    while (read(0, &c, 1) == 1)
        n++;
    printf("%d\n", n);
    fprintf(stderr, "done\n");
    return 0;
}
"""

MALLOC_SPECS = ["uprobe:libc:malloc", "r:g/mr libc:malloc ret=$retval", "uprobe:libc:free"]
READ_SPECS = ["uprobe:libc:read", "r:g/rr libc:read ret=$retval"]
MALLOCS = "20000"  # 60000 events: more than a new instance's 1410 KB per CPU holds
OLD_DEFAULT_KB = "1410"


def _build(tmp_path_factory, name: str, source: str) -> str:
    d = tmp_path_factory.mktemp(name)
    src, exe = d / f"{name}.c", d / name
    src.write_text(source)
    res = subprocess.run(["gcc", "-O1", "-pthread", "-o", str(exe), str(src)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return str(exe)


@pytest.fixture(scope="module")
def reads_exe(tmp_path_factory):
    return _build(tmp_path_factory, "reads", READS_C)


@pytest.fixture(scope="module")
def malloc_exe(tmp_path_factory):
    return _build(tmp_path_factory, "mallocs", MALLOC_C)


@pytest.fixture
def stdin_file(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"abcdef")
    return str(path)


def _specs(specs):
    return [w for s in specs for w in ("-e", s)]


class Capture:
    """What the instance holds when :meth:`HostProbes.trace` reads it."""

    def __init__(self, monkeypatch):
        self.text = ""
        self.files: dict = {}
        real = HostProbes.trace

        def trace(hp):
            for rel in ("tracing_on", "buffer_size_kb", "set_event_pid", "options/event-fork"):
                self.files[rel] = hp.t.read(f"{hp.instance}/{rel}").strip()
            self.text = real(hp)
            return self.text

        monkeypatch.setattr(HostProbes, "trace", trace)


# ------------------------------------------------------------------ never tracing itself


def _syscall_in_read(exe: str) -> list[str]:
    """A probe on the ``syscall`` instruction of libc's read (``xor eax,eax; syscall``)."""
    (probe,), _ = hostdiff.resolve_specs(exe, ["uprobe:libc:read"])
    with open(probe.host_path, "rb") as f:
        f.seek(probe.offset)
        at = f.read(64).find(b"\x31\xc0\x0f\x05")
    assert at >= 0, f"no 'xor eax,eax; syscall' in the first 64 bytes of read in {probe.host_path}"
    return [f"p:g/sc {probe.host_path}:{probe.offset + at + 2:#x}"]


@needs_tracefs
@pytest.mark.parametrize("where, events", [("entry-and-return", 14), ("syscall-insn", 7)])
def test_a_probe_on_libc_read_finishes_in_seconds_with_nothing_left(reads_exe, stdin_file, where, events):
    """diff reads the trace through libc's read(): with the probe on read, its own reads
    must not be recorded (they made the trace grow as fast as it was read).  The program
    reads 6 bytes and the end of the file: 7 reads."""
    specs = READ_SPECS if where == "entry-and-return" else _syscall_in_read(reads_exe)
    start = time.monotonic()
    p = subprocess.Popen(
        ["uprobe-emu", "diff", *_specs(specs), "--stdin", stdin_file, reads_exe],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise AssertionError("diff with a probe on libc read did not finish in 30 s") from None
    took = time.monotonic() - start
    assert p.returncode == 0 and out.decode().startswith("agree: "), (p.returncode, out, err)
    assert out.decode().endswith(f", {events} events\n"), f"expected {events} events: {out!r}"
    assert took < 20, f"diff took {took:.1f} s"
    assert host_state(p.pid) == ([], False), f"left in tracefs: {host_state(p.pid)}"
    assert processes_running(reads_exe) == []


@needs_tracefs
def test_a_bystander_hitting_the_probe_is_not_recorded(malloc_exe, monkeypatch):
    """Another process calling malloc all the time: the instance's pid filter keeps its
    events out of the buffer (not only out of the comparison)."""
    cap = Capture(monkeypatch)
    bystander = subprocess.Popen([malloc_exe, "0", "spin"])
    try:
        time.sleep(0.05)
        probes, _ = hostdiff.resolve_specs(malloc_exe, ["uprobe:libc:malloc"])
        native = hostdiff.run_native(malloc_exe, [malloc_exe, "3"], probes, b"", 60)
    finally:
        bystander.kill()
        bystander.wait()
    pids = {int(rec["pid"]) for rec in hostdiff.parse_trace(cap.text)}
    assert bystander.pid not in pids, f"the bystander's events were recorded: pids {sorted(pids)}"
    assert len(native.events) == 3, [e.describe() for e in native.events]


@needs_tracefs
@pytest.mark.parametrize(
    "rel, expected",
    [("tracing_on", "0"), ("options/event-fork", "1"), ("set_event_pid", str(os.getpid()))],
)
def test_the_instance_as_the_trace_is_read(malloc_exe, monkeypatch, rel, expected):
    """Recording is off before the trace is read; the pid filter holds the forking thread
    (this one) and follows its forks."""
    cap = Capture(monkeypatch)
    probes, _ = hostdiff.resolve_specs(malloc_exe, ["uprobe:libc:malloc"])
    hostdiff.run_native(malloc_exe, [malloc_exe, "1"], probes, b"", 60)
    got = cap.files[rel].split()
    assert expected in got, f"{rel}: expected {expected!r} in it, got {cap.files[rel]!r}"


# ------------------------------------------------------------------ bounded reads


def test_a_read_past_its_bound_is_one_error():
    with pytest.raises(HostKernelError) as e:
        read_bounded("/dev/zero", 1 << 20)
    assert str(e.value) == "zero grew past 1048576 bytes while it was read", str(e.value)


READER = """
import sys
from emu.frontends.host_tracefs import fatal_signals_clean_up, read_bounded
with fatal_signals_clean_up():
    print("reading", flush=True)
    read_bounded("/dev/zero", 1 << 62)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_a_read_that_never_ends(sig):
    """A file that never ends (a trace still recording its reader) is read a chunk at a
    time: the signal's handler runs between two chunks and the process dies of it."""
    p = subprocess.Popen([sys.executable, "-c", READER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert p.stdout.readline() == b"reading\n"
        p.send_signal(sig)
        rc = p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        p.kill()
        p.wait()
    assert rc == -sig, f"expected death by {sig.name} ({-sig}), got {rc}"


# ------------------------------------------------------------------ lost events


@needs_tracefs
def test_a_small_buffer_loses_events_and_says_so(malloc_exe):
    probes, _ = hostdiff.resolve_specs(malloc_exe, MALLOC_SPECS)
    native = hostdiff.run_native(malloc_exe, [malloc_exe, MALLOCS], probes, b"", 60, buffer_kb=8)
    assert native.lost_events > 0, f"a 8 KB buffer kept all {len(native.events)} events"


@needs_tracefs
@pytest.mark.parametrize(
    "extra, rc, head",
    [
        ((), 0, "agree: host "),
        (("--buffer-kb", OLD_DEFAULT_KB), hostdiff.EXIT_INCOMPLETE, "INCOMPLETE (host "),
        (("--buffer-kb", "8"), hostdiff.EXIT_INCOMPLETE, "INCOMPLETE (host "),
    ],
    ids=["sized-to-the-run", "default-size", "tiny"],
)
def test_tens_of_thousands_of_events_agree_or_say_they_were_lost(malloc_exe, extra, rc, head):
    p = cli("diff", *extra, *_specs(MALLOC_SPECS), malloc_exe, MALLOCS)
    out = p.stdout.decode()
    assert p.returncode == rc and out.startswith(head), (p.returncode, out[:2000], p.stderr.decode())
    assert "DIVERGE" not in out and "differs at event" not in out, f"lost events shown as a divergence: {out[:2000]}"
    assert ("events lost: the host trace buffer lost " in out) == (rc != 0), out[:2000]


@needs_tracefs
def test_a_python3_run_with_tens_of_thousands_of_mallocs_agrees():
    python = "/usr/bin/python3"  # the distribution's, linked statically with libpython
    p = cli("diff", *_specs(MALLOC_SPECS[:2]), python, "-c", "x = [bytearray(600) for i in range(20000)]")
    out = p.stdout.decode()
    assert p.returncode == 0 and out.startswith("agree: host "), (p.returncode, out[:2000], p.stderr.decode())


def test_the_trace_texts_lost_lines_are_counted():
    text = (
        "# tracer: nop\nCPU:1 [LOST 42 EVENTS]\n  m-9  [001] ..... 1.000000: ev0: (0x401000)\nCPU:0 [LOST 3 EVENTS]\n"
    )
    assert hostdiff.lost_in_text(text) == 45


@pytest.mark.parametrize(
    "args, expected",
    [([], hostdiff.BASE_BUFFER_KB), (["x" * 16] * 1024, hostdiff.BASE_BUFFER_KB + 128)],
    ids=["no-events", "1024-events"],
)
def test_the_buffer_is_sized_to_the_models_events(args, expected):
    """Twice (EVENT_BYTES + the args' text) an event, on top of a new instance's size."""
    events = [hostdiff.Event("e", "entry", 0, None, a) for a in args]
    assert hostdiff.buffer_kb_for(events) == expected


def test_the_buffer_is_bounded():
    events = [hostdiff.Event("e", "entry", 0, None, "x" * 4096)] * 100_000
    got, most = hostdiff.buffer_kb_for(events), hostdiff.max_buffer_kb()
    assert got == most <= hostdiff.MAX_BUFFER_KB, (got, most)


def test_a_lost_trace_is_not_compared_event_by_event():
    host = hostdiff.RunRecord("exit 0", b"", [hostdiff.Event("e", "entry", 1, None, "")], lost_events=7)
    model = hostdiff.RunRecord("exit 0", b"", [hostdiff.Event("e", "entry", 2, None, "")])
    assert hostdiff.compare(host, model) == [hostdiff.lost_line(host)], hostdiff.compare(host, model)


# ------------------------------------------------------------------ stderr


def test_a_stderr_difference_is_a_divergence():
    host = hostdiff.RunRecord("exit 0", b"out", stderr=b"warning: x\n")
    model = hostdiff.RunRecord("exit 0", b"out", stderr=b"warning: y\n")
    assert hostdiff.compare(host, model) == ["stderr differs at byte 9: host b'warning: x\\n', model b'warning: y\\n'"]


@needs_tracefs
def test_the_models_stderr_is_recorded(reads_exe):
    probes, _ = hostdiff.resolve_specs(reads_exe, READ_SPECS)
    model = hostdiff.run_model(reads_exe, [reads_exe], probes, b"ab", hostdiff.host_profile_name(), None)
    assert model.stderr == b"done\n", model.stderr


@needs_tracefs
def test_the_cli_shows_a_stderr_divergence(reads_exe, monkeypatch, capsys):
    real = hostdiff.run_model

    def run_model(*a, **kw):
        rec = real(*a, **kw)
        rec.stderr = b"dune\n"
        return rec

    monkeypatch.setattr(hostdiff, "run_model", run_model)
    rc = main(["diff", "-e", READ_SPECS[0], reads_exe])
    out = capsys.readouterr().out.splitlines()
    assert rc == 1 and out[1:] == ["stderr differs at byte 1: host b'done\\n', model b'dune\\n'"], (rc, out)
