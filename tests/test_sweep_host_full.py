"""``sweep --host`` compares what the model's sweep compares wherever the host lets us
see it: exit status or signal, stdout, stderr and each task's syscalls (numbers always;
arguments and return values when the run is laid out without ASLR, but the fields two
unprobed native runs disagree on).  The parser and the comparison are tested on
captured trace lines; the native side (skipped only when tracefs cannot be used, the
rule of test_hostdiff.py) on tests/c/sweep_stderr.c, whose stderr and syscalls depend on
its argument."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from sweep_helpers import sweep
from test_hostdiff import needs_tracefs, our_probes_left

from emu.frontends import hostdiff
from emu.frontends.host_tracefs import HostKernelError
from emu.frontends.hostdiff import RunRecord, parse_syscalls, run_native
from emu.frontends.sweep.case import Program
from emu.frontends.sweep.compare import Divergence, RunDigest, host_view
from emu.frontends.sweep.driver import SiteDivergence
from emu.frontends.sweep.host import (
    NativeNoise,
    compare_native,
    host_sweep,
    kernel_refusal,
    native_digest,
    native_noise,
    native_reference,
    native_run,
)
from emu.frontends.sweep.sites import Site, insn_sites
from kernel_model.fs.elf import load_elf_file
from kernel_model.profiles import KernelProfile

# these tests look at the host's own tracefs mount (diff's private ones come and go)
pytestmark = pytest.mark.usefixtures("host_tracefs")

U64 = (1 << 64) - 1
WRITE, GETPPID, EXIT_GROUP, EXECVE, CLONE, RT_SIGRETURN, BRK = 1, 110, 231, 59, 56, 15, 12


def line(comm_pid: str, body: str, cpu: int = 0) -> str:
    return f"     {comm_pid}   [{cpu:03d}] ..... 29601.083063: {body}"


# Lines as 6.18 prints them (captured from an instance, the values shortened)
SAMPLE = [
    line("python3-100", "sys_enter: NR 1 (4, 7f8d9132fef0, 5, 0, 0, 0)"),  # the parent
    line("my prog-200", "sched_process_exec: filename=/t/my prog pid=200 old_pid=200"),
    line("my prog-200", f"sys_exit: NR {EXECVE} = 0"),  # no entry seen
    line("my prog-200", "sys_enter: NR 12 (0, c, 27, ffffffffffffffff, 2, 800)"),
    line("my prog-200", "sys_exit: NR 12 = 1005355008"),
    line("my prog-200", "sys_enter: NR 56 (3d0f00, 7f0000001000, 7f0000001990, 7f0000001990, 7f00000016c0, 0)"),
    line("my prog-201", f"sys_exit: NR {CLONE} = 0", cpu=1),  # the new thread
    line("my prog-201", "sys_enter: NR 16 (2, 5413, 7ffe80f0ee80, 8, 3bedca10, 1)", cpu=1),
    line("my prog-200", "sys_exit: NR 56 = 201"),
    line("my prog-201", "sys_exit: NR 16 = -25", cpu=1),
    line("my prog-201", "ev0: (0x401000) arg=1", cpu=1),  # a probe's event
    line("my prog-200", "sys_enter: NR 15 (ffffffff, 7ffe80f0e010, ffffffffffffffa8, 0, 7, 3bedcef0)"),
    line("my prog-200", "sys_exit: NR -1 = 0"),  # rt_sigreturn
    line("my prog-200", "sys_enter: NR 231 (3, e7, 3c, 8, ffffffffffffffa8, 3bedc2a0)"),
]


def test_parse_syscalls_pairs_each_exit_with_its_tasks_pending_entry():
    got = parse_syscalls("\n".join(SAMPLE), {200, 201})
    expected = {
        200: [
            (BRK, (0, 0xC, 0x27, U64, 2, 0x800), 1005355008),
            (CLONE, (0x3D0F00, 0x7F0000001000, 0x7F0000001990, 0x7F0000001990, 0x7F00000016C0, 0), 201),
            (RT_SIGRETURN, (0xFFFFFFFF, 0x7FFE80F0E010, 0xFFFFFFFFFFFFFFA8, 0, 7, 0x3BEDCEF0), 0),
            (EXIT_GROUP, (3, 0xE7, 0x3C, 8, 0xFFFFFFFFFFFFFFA8, 0x3BEDC2A0), None),
        ],
        201: [(16, (2, 0x5413, 0x7FFE80F0EE80, 8, 0x3BEDCA10, 1), (-25) & U64)],
    }
    assert got == expected, f"expected {expected}\n     got {got}"


@pytest.mark.parametrize("tids,expected_tasks", [({200}, [200]), ({201}, [201]), ({999}, [])])
def test_parse_syscalls_keeps_only_the_given_tasks(tids, expected_tasks):
    got = parse_syscalls("\n".join(SAMPLE), tids)
    assert sorted(got) == expected_tasks, f"expected tasks {expected_tasks}, got {sorted(got)}"


@pytest.mark.parametrize(
    "exit_line",
    [f"sys_exit: NR {EXECVE} = 0", f"sys_exit: NR {CLONE} = 0"],
    ids=["execve-the-trace-starts-in", "clone-in-the-new-task"],
)
def test_an_exit_with_no_pending_entry_is_dropped(exit_line):
    text = "\n".join(
        [line("p-7", exit_line), line("p-7", "sys_enter: NR 39 (0, 0, 0, 0, 0, 0)"), line("p-7", "sys_exit: NR 39 = 7")]
    )
    assert parse_syscalls(text, {7}) == {7: [(39, (0,) * 6, 7)]}


def test_a_line_that_is_not_a_raw_syscall_line_is_ignored():
    text = "\n".join(
        [
            line("p-7", "sys_enter: NR 39 (0, 0, 0)"),  # 3 args: not the format
            line("p-7", "sys_enterx: NR 39 (0, 0, 0, 0, 0, 0)"),
            "# tracer: nop",
            "",
        ]
    )
    assert parse_syscalls(text, {7}) == {}


def _rec(calls_by_tid, status="exit 0", out=b"", err=b"", lost=0):
    return RunRecord(status, out, [], err, calls_by_tid, lost)


def test_native_digest_numbers_tasks_in_creation_order_and_leaves_out_the_kernels_syscalls():
    rec = _rec(
        {
            905: [(WRITE, (1, 2, 3, 0, 0, 0), 3)],
            901: [(BRK, (0,) * 6, 0x1000), (335, (0,) * 6, 0), (336, (0,) * 6, 0), (EXIT_GROUP, (0,) * 6, None)],
        },
        err=b"e",
        lost=0,
    )
    digest, complete = native_digest(rec)
    assert digest.syscalls == {
        1: [(BRK, (0,) * 6, 0x1000), (EXIT_GROUP, (0,) * 6, None)],
        2: [(WRITE, (1, 2, 3, 0, 0, 0), 3)],
    }, digest.syscalls
    assert (digest.stderr, complete) == (b"e", True)
    assert native_digest(_rec({}, lost=3))[1] is False


def _digest(calls, err=b"", out=b"", status="exit 0"):
    return RunDigest(status, out, err, {1: calls})


A = [(BRK, (0, 0, 0, 0, 0, 0), 0x555000), (WRITE, (2, 0x7FFE10, 2, 0, 0, 0), 2), (EXIT_GROUP, (3, 0, 0, 0, 0, 0), None)]


def test_two_native_runs_disagreeing_on_a_field_leave_only_that_field_out():
    b = [A[0], (WRITE, (2, 0x7FFE10, 2, 0x99, 0, 0), 2), A[2]]
    noise = native_noise(_digest(A), _digest(b), randomized=False)
    assert noise == NativeNoise(False, frozenset(), frozenset({(1, 1, 3)})), noise
    assert noise.compared == "numbers, arguments and return values but 1 field(s) that differ between two unprobed runs"


def test_two_native_runs_making_other_syscalls_leave_the_syscalls_out():
    noise = native_noise(_digest(A), _digest(A[:1] + A[2:], err=b"x"), randomized=False)
    assert noise.parts == {"syscalls", "stderr"}, noise
    assert noise.compared == "not compared: two unprobed runs make different ones"


STDERR_AB = "stderr at byte 1: reference b'ab', probed b'a'"


@pytest.mark.parametrize(
    "randomized,got,first,parts",
    [
        (
            False,
            [A[0], (WRITE, (2, 0x7FFE10, 1, 0, 0, 0), 1), A[2]],
            "syscall #2: reference write(0x2, 0x7ffe10, 0x2, 0x0, 0x0, 0x0) = 2, "
            "probed write(0x2, 0x7ffe10, 0x1, 0x0, 0x0, 0x0) = 1",
            ["syscalls", "stderr"],
        ),
        (True, [A[0], (WRITE, (2, 0x7FFE10, 1, 0, 0, 0), 1), A[2]], STDERR_AB, ["stderr"]),
        (
            True,
            [A[0], (GETPPID, (0,) * 6, 7)] + A[1:],
            "syscall #2: reference write(*, *, *, *, *, *) = *, probed getppid(*, *, *, *, *, *) = *",
            ["syscalls", "stderr"],
        ),
    ],
    ids=["without-aslr-arguments-compare", "aslr-arguments-do-not", "aslr-numbers-do"],
)
def test_a_native_divergence_says_which_part_and_the_syscalls_index(randomized, got, first, parts):
    noise = NativeNoise(randomized)
    d = compare_native(_digest(A, err=b"ab"), _digest(got, err=b"a"), noise)
    assert d is not None and (d.parts, d.first) == (parts, first), (
        f"expected {parts} {first!r}\n     got {d and d.parts} {d and d.first!r}"
    )


def test_a_field_two_unprobed_runs_disagree_on_is_not_compared():
    got = [(BRK, (0, 0, 0, 0, 0, 0), 0x777000)] + A[1:]
    assert compare_native(_digest(A), _digest(got), NativeNoise(False)) is not None
    assert compare_native(_digest(A), _digest(got), NativeNoise(False, fields=frozenset({(1, 0, "ret")}))) is None


def test_a_trace_that_lost_events_has_its_syscalls_left_out():
    got = [A[0], A[2]]
    d = compare_native(_digest(A), _digest(got), NativeNoise(False), complete=False)
    assert d is None, d
    assert compare_native(_digest(A), _digest(got), NativeNoise(False)).parts == ["syscalls"]


@pytest.mark.parametrize(
    "d,unseen,numbers_only,parts",
    [
        (Divergence(["syscalls", "regs"], "s", ["s", "r"], nrs=False), frozenset(), True, None),
        (Divergence(["syscalls", "regs"], "s", ["s", "r"], nrs=False), frozenset(), False, ["syscalls"]),
        (Divergence(["syscalls", "stderr"], "s", ["s", "e"], nrs=True), frozenset(), True, ["syscalls", "stderr"]),
        (Divergence(["stdout", "stderr"], "o", ["o", "e"]), frozenset({"stdout"}), False, ["stderr"]),
        (Divergence(["regs", "memory"], "r", ["r", "m"]), frozenset(), False, None),
    ],
)
def test_the_model_is_projected_on_what_the_host_compares(d, unseen, numbers_only, parts):
    got = host_view(d, unseen, numbers_only)
    assert (got.parts if got else None) == parts, f"expected {parts}, got {got}"


# --------------------------------------------------------------------------- the host


@pytest.fixture
def stderr_exes(build_c):
    """sweep_stderr.c static (run with ASLR) and dynamic (run without)."""
    return {"static": build_c("sweep_stderr.c", "-static"), "dynamic": build_c("sweep_stderr.c")}


def _instance_left() -> bool:
    return os.path.exists(os.path.join(hostdiff.find_tracefs(), "instances", hostdiff.run_tag()))


def _prog(exe, arg):
    return Program.of(exe, [exe, arg])


@needs_tracefs
@pytest.mark.parametrize("flavour", ["static", "dynamic"])
def test_run_native_records_stderr_and_the_childs_syscalls(stderr_exes, flavour):
    exe = stderr_exes[flavour]
    rec = run_native(exe, [exe, "xb"], [], b"", 30, syscalls=True)
    assert (rec.status, rec.stdout, rec.stderr, rec.lost_events) == ("exit 3", b"out\n", b"xb", 0)
    ((tid, calls),) = rec.syscalls.items()
    w1, gp, w2, ex = calls[-4:]  # the program's own calls end the trace
    got = [
        (w1[0], w1[1][0], w1[1][2], w1[2]),
        (gp[0], gp[2]),
        (w2[0], w2[1][0], w2[1][2], w2[2]),
        (ex[0], ex[1][0], ex[2]),
    ]
    expected = [(WRITE, 1, 4, 4), (GETPPID, os.getpid()), (WRITE, 2, 2, 2), (EXIT_GROUP, 3, None)]
    assert got == expected, f"expected {expected}, got {got}"
    assert not _instance_left() and our_probes_left() == []


@needs_tracefs
def test_run_native_without_syscalls_gives_what_it_gave_plus_stderr(stderr_exes):
    exe = stderr_exes["dynamic"]
    rec = run_native(exe, [exe, "ab"], [], b"", 30)
    assert (rec.status, rec.stdout, rec.stderr, rec.syscalls, rec.events) == ("exit 3", b"out\n", b"ab", None, [])


@needs_tracefs
def test_a_native_run_that_times_out_leaves_no_instance_behind(build_c):
    exe = build_c("block_read.c", "-static", name="block_read")
    # stdin is a pipe it never reads: it blocks in read() on its own pipe
    with pytest.raises(HostKernelError, match="did not finish in 0.5 s"):
        run_native(exe, [exe], [], b"", 0.5, syscalls=True)
    assert not _instance_left() and our_probes_left() == []


@needs_tracefs
@pytest.mark.parametrize(
    "flavour,arg,parts,first",
    [
        ("dynamic", "ac", ["syscalls", "stderr"], "reference write(0x2, {p:#x}, 0x2, "),
        ("dynamic", "xb", ["syscalls", "stderr"], "reference write(0x2, {p:#x}, 0x2, "),
        ("static", "ac", ["stderr"], None),
        ("static", "xb", ["syscalls", "stderr"], "reference write(*, *, *, *, *, *) = *, probed getppid("),
    ],
)
def test_a_native_run_that_writes_otherwise_is_a_stderr_and_syscall_divergence(stderr_exes, flavour, arg, parts, first):
    exe = stderr_exes[flavour]
    ref, noise = native_reference(exe, _prog(exe, "ab"), 30)
    assert noise.randomized == (flavour == "static")
    got, complete, _ = native_run(exe, _prog(exe, arg), [], 30)
    d = compare_native(ref, got, noise, complete)
    assert d is not None and d.parts == parts, f"expected {parts}, got {d}"
    k, call = next((i, c) for i, c in enumerate(ref.syscalls[1]) if c[0] == WRITE and c[1][0] == 2)
    if first is None:
        assert d.first.startswith("stderr at byte 1: reference b'ab', probed b'a'"), d.first
    else:
        want = f"syscall #{k + 1}: " + first.format(p=call[1][1])
        assert d.first.startswith(want), f"expected {want!r}...\n     got {d.first!r}"


def _main_sites(exe) -> list[str]:
    return [s.key for s in insn_sites(exe, load_elf_file(exe)) if s.symbol.split("+")[0] == "main"]


@needs_tracefs
@pytest.mark.parametrize(
    "flavour,compared",
    [
        ("static", "numbers only: the run is laid out with ASLR"),
        # set_tid_address() returns the tid: a field two unprobed runs disagree on
        ("dynamic", "numbers, arguments and return values but 1 field(s) that differ between two unprobed runs"),
    ],
)
def test_host_sweep_compares_stderr_and_syscalls_and_agrees_with_the_model(stderr_exes, flavour, compared):
    exe = stderr_exes[flavour]
    prog = _prog(exe, "xb")
    model = sweep(prog, hostdiff.host_profile_name(), site_specs=_main_sites(exe))
    host = host_sweep(prog, model)
    text = "\n".join(host.lines())
    assert (host.reference, host.compared, host.incomplete) == ("exit 3", compared, 0), text
    assert host.disagreements == [] and not host.unclassified, text
    assert host.sites == len(model.sites) >= 8, text
    assert f"host compares: exit status or signal, stdout, stderr, syscalls ({compared})" in text
    assert not _instance_left() and our_probes_left() == []


@needs_tracefs
def test_model_and_kernel_are_put_side_by_side_where_they_disagree(stderr_exes):
    exe = stderr_exes["dynamic"]
    prog = _prog(exe, "ab")
    model = sweep(prog, hostdiff.host_profile_name(), site_specs=_main_sites(exe)[:3])
    a, b = model.sites[1], model.sites[2]
    first = "syscall #30: reference write(0x2, ...) = 2, probed getppid(...) = 7"
    seen = Divergence(["syscalls"], first, [first], nrs=True)
    unseen = Divergence(
        ["regs"], "registers: rbx reference 0x0 probed 0x1", ["registers: rbx reference 0x0 probed 0x1"]
    )
    model.divergences += [
        SiteDivergence([a], "unclassified", seen, ""),
        SiteDivergence([b], "unclassified", unseen, ""),
    ]
    host = host_sweep(prog, model)
    assert host.disagreements == [(a, None, seen)], host.disagreements
    text = "\n".join(host.lines())
    for want in (
        f"  DISAGREE {a.describe()}",
        "      host : transparent",
        "      model: syscall #30: reference write(0x2, ...) = 2, probed getppid(...) = 7",
    ):
        assert want in text, f"expected {want!r} in\n{text}"
    assert host.unclassified, "a disagreement fails the sweep"


@needs_tracefs
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_signal_during_a_syscall_traced_run_leaves_no_instance(build_c, sig):
    """SIGTERM: the run's own cleanup; SIGKILL: the next run's (its instance still
    traces raw_syscalls: they are disabled with it)."""
    exe = build_c("block_read.c", "-static", name="block_read")
    code = (
        "import sys; from emu.frontends.hostdiff import run_native; "
        "run_native(sys.argv[1], [sys.argv[1]], [], b'', 60, syscalls=True)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, exe])
    inst = os.path.join(hostdiff.find_tracefs(), "instances", hostdiff.run_tag(proc.pid))
    try:
        deadline = time.monotonic() + 30
        while not (os.path.exists(inst) and _pids_in(os.path.join(inst, "set_event_pid")) > 1):
            assert time.monotonic() < deadline and proc.poll() is None, "the traced run never started"
            time.sleep(0.05)
        with open(os.path.join(inst, "events/raw_syscalls/sys_enter/enable")) as f:
            assert f.read().strip() == "1"
        with open(os.path.join(inst, "set_event_pid")) as f:
            child = next(int(p) for p in f.read().split() if int(p) != proc.pid)
        proc.send_signal(sig)
        assert proc.wait(30) == -sig, f"expected death by {sig.name}, got {proc.returncode}"
        if sig == signal.SIGKILL:
            assert os.path.exists(inst), "SIGKILL cannot be caught: expected the instance left"
            os.kill(child, signal.SIGKILL)
            _next_run(exe)
        else:
            assert not os.path.exists(f"/proc/{child}"), "the native run was left running"
        assert not os.path.exists(inst), f"{inst} left after {sig.name}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _pids_in(path: str) -> int:
    with open(path) as f:
        return len(f.read().split())


def _next_run(exe):
    """A later run (its start removes the leftovers of runs that are gone)."""
    with pytest.raises(HostKernelError, match="did not finish"):
        run_native(exe, [exe], [], b"", 0.2, syscalls=True)


@pytest.mark.parametrize(
    "raw,refused",
    [(b"\xf0\xff\x0f", "bad prefix 0xf0"), (b"\x55", None), (b"\xcc", "already has int3")],
    ids=["lock-dec", "push-rbp", "int3"],
)
def test_kernel_refusal_is_arch_uprobe_analyze_insn_on_the_sites_bytes(raw, refused):
    site = Site("guest:none", 0x10, "p", 0x401010, raw, "", "")
    why = kernel_refusal(site, KernelProfile.get("6.18"))
    assert (why is None) if refused is None else (why is not None and refused in why), why


@needs_tracefs
def test_a_library_site_the_kernel_refuses_is_left_out_not_fatal(stderr_exes):
    """libc's pthread_spin_lock starts with ``lock dec``: the model never installs it
    (libc is mapped after the registration: a silent refusal), the kernel refuses it at
    once (libc is mapped by other processes) - which failed the whole batch's enable."""
    exe = stderr_exes["dynamic"]
    prog = _prog(exe, "ab")
    model = sweep(prog, hostdiff.host_profile_name(), site_specs=["libc:pthread_spin_lock", *_main_sites(exe)[:2]])
    lock = model.sites[0]
    assert lock.raw[:1] == b"\xf0", f"expected a lock-prefixed entry, got {lock.describe()}"
    assert model.refused == {}, model.refused
    host = host_sweep(prog, model)
    assert list(host.refused) == [lock.key] and host.sites == 2, host.refused
    assert not host.unclassified, "\n".join(host.lines())
    assert (
        f"  1 site(s) not probed natively: the kernel's arch_uprobe_analyze_insn() refuses them "
        f"(first: {lock.key}: " in "\n".join(host.lines())
    )


@needs_tracefs
def test_the_host_sees_the_xol_areas_page_where_the_model_does(stderr_exes):
    """A probe hit in ld.so before libc is mapped: the XOL area takes a page of the
    mmap area (no ASLR), so the next mmap lands a page lower - natively at the very
    syscall and address the model says (xol-area-layout, kernel-faithful)."""
    exe = stderr_exes["dynamic"]
    prog = _prog(exe, "ab")
    interp = load_elf_file(exe).interp
    model = sweep(prog, hostdiff.host_profile_name(), site_specs=[f"{interp}:_dl_debug_state"])
    (m,) = model.divergences
    assert m.cls == "xol-area-layout" and m.divergence.first.startswith("syscall #"), m
    host = host_sweep(prog, model)
    assert [(s.key, cls, d.first) for s, cls, d in host.found] == [
        (m.sites[0].key, "xol-area-layout", m.divergence.first)
    ], "\n".join(host.lines())
    assert host.disagreements == [] and not host.unclassified, "\n".join(host.lines())
