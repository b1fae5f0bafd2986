"""Probes in shared libraries, as the kernel keeps them: a uprobe is (inode, file
offset), registered before or after any process maps the file, installed in every mm
that maps it - at registration (register_for_each_vma) or when the file is mapped later
(uprobe_mmap: ld.so's mmaps, dlopen) - in forked children too; a USDT semaphore in a
library whose data is not mapped yet is queued (delayed_uprobe_add) and incremented
when it appears.  Counts are checked against what the programs report themselves, and
against the host kernel's tracefs where it can be used (test_hostdiff's skip rule)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from cli_helpers import cli
from conftest import C_DIR
from layout_helpers import _no_randomize
from test_hostdiff import needs_tracefs

from emu import Machine
from emu.frontends.host_tracefs import HostProbes, Tracefs
from emu.frontends.hostdiff import ResolvedProbe

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
LIBM = "/lib/x86_64-linux-gnu/libm.so.6"
USDT_H_DIR = Path(__file__).resolve().parent.parent / "guest_programs" / "c"


def _counter(m, target, *, ret=False, per_pid=None):
    """Register a consumer on ``target`` counting hits (per pid into ``per_pid``)."""
    hits = []

    def count(ctx):
        hits.append(ctx.task.process.pid if not ret else ctx.regs.rax)
        if per_pid is not None:
            per_pid[ctx.task.process.pid] = per_pid.get(ctx.task.process.pid, 0) + 1

    if ret:
        m.uprobes.register(target, ret_handler=count)
    else:
        m.uprobes.register(target, handler=count)
    return hits


def _run(m):
    r = m.run(timeout=120)
    assert r.reason == "exit" and r.exit_code == 0, r.describe()
    return r.stdout.decode()


@pytest.fixture(scope="module")
def usdt_lib(tmp_path_factory):
    """(main program, its library) with the library's semaphore-guarded USDT probe."""
    d = tmp_path_factory.mktemp("usdtlib")
    lib, exe = d / "libusdtdemo.so", d / "usdt_lib_main"
    for cmd in (
        ["gcc", "-O1", "-g", "-shared", "-fPIC", f"-I{USDT_H_DIR}", "-o", str(lib), str(C_DIR / "usdt_lib.c")],
        ["gcc", "-O1", "-g", "-o", str(exe), str(C_DIR / "usdt_lib_main.c"), f"-L{d}", "-lusdtdemo", f"-Wl,-rpath,{d}"],
    ):
        res = subprocess.run(cmd, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
    return str(exe), str(lib)


# --- libc malloc/free, registered before libc is mapped ----------------------------------


@pytest.mark.parametrize("n", [1, 4, 9])
def test_libc_malloc_hits_equal_the_programs_own_count(build_c, n):
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe, argv=[exe, str(n)])
    assert all(not f.path.endswith("libc.so.6") for f in m.process.mapped_files), "libc mapped too early"
    mallocs = _counter(m, f"{LIBC}:malloc")
    frees = _counter(m, f"{LIBC}:free")
    out = _run(m)
    said = re.search(r"mallocs=(\d+) frees=(\d+)", out)
    assert (len(mallocs), len(frees)) == (int(said[1]), int(said[2])) == (n, n), (
        f"expected {n} mallocs and frees (program: {said.groups()}), got {len(mallocs)}, {len(frees)}"
    )


def test_malloc_retval_is_the_pointer_the_program_prints(build_c):
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe, argv=[exe, "6"])
    rets = _counter(m, f"{LIBC}:malloc", ret=True)
    out = _run(m)
    printed = [int(p, 16) for p in re.findall(r"ptr=(0x[0-9a-f]+)", out)]
    assert rets == printed and len(printed) == 6, f"expected {printed!r}, got {rets!r}"


def test_trace_event_retval_is_the_pointer_the_program_prints(build_c):
    exe = build_c("lib_malloc.c", name="lib_malloc")
    proc = cli("run", "-e", "r:lib/m libc:malloc ret=$retval", exe, "3")
    printed = re.findall(rb"ptr=(0x[0-9a-f]+)", proc.stdout)
    fetched = re.findall(rb" m: \(.*\) ret=(0x[0-9a-f]+)", proc.stderr)
    assert proc.returncode == 0 and fetched == printed and len(printed) == 3, (
        f"expected {printed!r}, got {fetched!r} ({proc.stderr.decode()[-400:]})"
    )


def test_a_forked_dynamic_child_hits_the_library_probe_too(build_c):
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe, argv=[exe, "3", "fork"])
    per_pid: dict = {}
    _counter(m, f"{LIBC}:malloc", per_pid=per_pid)
    out = _run(m)
    said = {int(p): int(c) for p, c in re.findall(r"pid=(\d+) mallocs=(\d+)", out)}
    assert len(said) == 2 and per_pid == said, f"expected {said}, got {per_pid}"


def test_two_paths_to_libc_are_one_uprobe(build_c):
    """/lib is a symlink to /usr/lib on this system: one inode, one (inode, offset) key."""
    exe = build_c("lib_malloc.c", name="lib_malloc")
    real = os.path.realpath(LIBC)
    assert real != LIBC, "expected libc's path to go through a symlink"
    m = Machine.from_elf(exe, argv=[exe, "2"])
    a = m.uprobes.register(f"{LIBC}:malloc", handler=lambda ctx: None)
    b = m.uprobes.register(f"{real}:malloc", handler=lambda ctx: None)
    _run(m)
    assert a.uprobe is b.uprobe and (a.hits, b.hits) == (2, 2), (a.uprobe, b.uprobe, a.hits, b.hits)


def test_a_hard_link_to_a_library_is_the_same_probe(usdt_lib, tmp_path):
    exe, lib = usdt_lib
    link = tmp_path / "hardlink.so"
    os.link(lib, link)
    m = Machine.from_elf(exe, argv=[exe, "4"])
    uc = m.uprobes.register(f"{link}:libdemo_tick", handler=lambda ctx: None)
    _run(m)
    assert uc.hits == 4, f"expected 4 hits through the hard link, got {uc.hits}"


def test_probe_registered_after_the_library_is_mapped(build_c):
    """register_for_each_vma installs in the existing mapping of the inode."""
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe, argv=[exe, "5"])
    entry = m.uprobes.register(f"{exe}:main", handler=lambda ctx: None)
    late = []

    def at_main(ctx):
        late.append(ctx.machine.uprobes.register(f"{LIBC}:malloc", handler=lambda c: None))
        return 1  # UPROBE_HANDLER_REMOVE

    m.uprobes.unregister(entry)
    m.uprobes.register(f"{exe}:main", handler=at_main)
    _run(m)
    assert len(late) == 1 and late[0].hits == 5, f"expected 5 hits, got {late and late[0].hits}"


def test_a_probe_registered_with_two_processes_running_is_installed_in_both(build_c):
    """register_for_each_vma walks every mm mapping the inode: registered in the child
    (its parent waits in waitpid), the libc probe is in the parent's mapping too."""
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe, argv=[exe, "3", "fork"])
    per_pid: dict = {}
    state = {}

    def first_loop(ctx):
        if not state:
            state["pids"] = sorted(p.pid for p in ctx.machine.processes if p.exit_result is None)
            _counter(ctx.machine, f"{LIBC}:malloc", per_pid=per_pid)
        return 1  # UPROBE_HANDLER_REMOVE

    m.uprobes.register(f"{exe}:loop", handler=first_loop)
    out = _run(m)
    said = {int(p): int(c) for p, c in re.findall(r"pid=(\d+) mallocs=(\d+)", out)}
    assert len(state["pids"]) == 2 and per_pid == said, f"processes {state}, expected {said}, got {per_pid}"


# --- dlopen ---------------------------------------------------------------------------


def test_probe_on_libm_before_dlopen_fires_after_dlopen(build_c):
    exe = build_c("dlopen_libm.c", "-ldl", name="dlopen_libm")
    m = Machine.from_elf(exe, argv=[exe, "7"])
    hits = _counter(m, f"{LIBM}:frexp")
    out = _run(m)
    calls = int(re.search(r"frexp_calls=(\d+)", out)[1])
    assert len(hits) == calls == 7, f"expected {calls} frexp hits, got {len(hits)}"


def test_an_ifunc_probe_fires_at_binding_not_per_call(build_c):
    """cos is an IFUNC in libm: its symbol is the resolver, which runs when dlsym binds
    it; the number of cos() calls changes nothing."""
    exe = build_c("dlopen_libm.c", "-ldl", name="dlopen_libm")
    counts = []
    for n in ("1", "12"):
        m = Machine.from_elf(exe, argv=[exe, n])
        hits = _counter(m, f"{LIBM}:cos")
        assert any("IFUNC" in note and "cos" in note for note in m.uprobes.notes), m.uprobes.notes
        _run(m)
        counts.append(len(hits))
    assert counts[0] == counts[1] and counts[0] >= 2, f"expected equal counts >= 2, got {counts}"


def test_cli_prints_a_note_for_an_ifunc_probe(build_c):
    exe = build_c("dlopen_libm.c", "-ldl", name="dlopen_libm")
    proc = cli("run", "-e", "uprobe:libm:cos", exe, "1")
    notes = [ln for ln in proc.stderr.decode().splitlines() if ln.startswith("uprobe-emu: note:")]
    assert proc.returncode == 0 and len(notes) == 1 and "IFUNC" in notes[0] and "resolver" in notes[0], (
        proc.stderr.decode()
    )


@pytest.mark.parametrize(
    "program,lib,symbol,recalc",
    [
        ("dlopen_libm", LIBM, "frexp", True),
        ("lib_malloc", LIBC, "malloc", False),
    ],
    ids=["dlclose-probed-lib", "munmap-unprobed-file"],
)
def test_unmapping_probed_pages_marks_the_mm_for_recount(build_c, program, lib, symbol, recalc):
    """uprobe_munmap: unmapping a range of a probed inode that holds a probe sets
    MMF_RECALC_UPROBES; unmapping other files (ld.so.cache) does not."""
    exe = build_c(program + ".c", *(("-ldl",) if program == "dlopen_libm" else ()), name=program)
    m = Machine.from_elf(exe, argv=[exe, "2"])
    uc = m.uprobes.register(f"{lib}:{symbol}", handler=lambda ctx: None)
    _run(m)
    mapped = any(v.file is uc.uprobe.file for v in m.mem.vmas)
    assert (m.process.mm_uprobes.recalc, mapped, uc.hits) == (recalc, not recalc, 2), (
        m.process.mm_uprobes.recalc,
        mapped,
        uc.hits,
    )


def _mremap_case(build_c, usdt_lib):
    exe = build_c("mremap_probed.c", name="mremap_probed")
    _, lib = usdt_lib
    m = Machine.from_elf(exe, argv=[exe])
    _, off = m.uprobes.resolve_target(f"{lib}:libdemo_tick")
    assert off >= 4096, f"the probe must lie past the first page, is at {off:#x}"
    return exe, lib, off


def test_a_mapping_grown_by_mremap_gets_the_breakpoint(build_c, usdt_lib):
    """mremap growing a file mapping in place: vma_expand -> vma_complete -> uprobe_mmap
    installs the probe in the grown part (the guest reads its own int3 there)."""
    exe, lib, off = _mremap_case(build_c, usdt_lib)
    plain = subprocess.run([exe, lib, hex(off)], capture_output=True, text=True, timeout=60).stdout
    runs = {}
    for probed in (False, True):
        m = Machine.from_elf(exe, argv=[exe, lib, hex(off)])
        if probed:
            m.uprobes.register((lib, off), handler=lambda ctx: None)
        runs[probed] = _run(m)
    assert (runs[False], runs[True]) == (plain, "cc\n") and plain != "cc\n", (plain, runs)


@needs_tracefs
@pytest.mark.parametrize(
    "program,mode",
    [("mremap_probed", None), ("mprotect_probed", "whole"), ("mprotect_probed", "part")],
    ids=["mremap-grow", "mprotect-whole", "mprotect-split"],
)
def test_remapped_and_reprotected_file_pages_show_what_the_host_shows(build_c, usdt_lib, program, mode):
    """A writable private mapping gets no breakpoint; mprotect making it r-x does not
    install one either (a split's vma_complete sees the old flags; no split, no
    uprobe_mmap); mremap growth does (vma_expand)."""
    _, lib, off = _mremap_case(build_c, usdt_lib)
    exe = build_c(program + ".c", name=program)
    argv = [exe, lib, hex(off)] + ([mode] if mode else [])
    t = Tracefs()
    try:
        with HostProbes(t, [ResolvedProbe(f"{lib}:{off:#x}", "t", "p", off, 0, "")], lib):
            native = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
    finally:
        t.close()
    m = Machine.from_elf(exe, argv=argv)
    m.uprobes.register((lib, off), handler=lambda ctx: None)
    assert _run(m) == native, native


# --- USDT semaphore in a shared library ----------------------------------------------------


def test_usdt_semaphore_in_a_library_mapped_later_is_incremented(usdt_lib):
    """ld.so maps the library's text before its data: the semaphore is queued
    (delayed_uprobe_add) and incremented when the data mapping appears."""
    exe, lib = usdt_lib
    m = Machine.from_elf(exe, argv=[exe, "3"])
    (uc,) = m.uprobes.register_usdt(f"usdt:{lib}:libdemo:tick", handler=lambda ctx: None)
    out = _run(m)
    assert "ticks=3 enabled=3" in out and uc.hits == 3, f"expected enabled=3 and 3 hits: {out!r}, {uc.hits}"
    assert m.uprobes.delayed == [], m.uprobes.delayed


def test_usdt_semaphore_stays_zero_without_a_probe(usdt_lib):
    exe, _ = usdt_lib
    out = _run(Machine.from_elf(exe, argv=[exe, "3"]))
    assert "ticks=3 enabled=0" in out, out


def test_usdt_spec_in_a_library_through_the_cli(usdt_lib):
    exe, lib = usdt_lib
    proc = cli("run", "-e", f"usdt:{lib}:libdemo:tick", exe, "2")
    events = [ln for ln in proc.stderr.decode().splitlines() if "libdemo_tick:" in ln]
    assert proc.returncode == 0 and b"ticks=2 enabled=2" in proc.stdout and len(events) == 2, (
        proc.stdout,
        proc.stderr.decode(),
    )


# --- per-process filter ------------------------------------------------------------------


def test_cli_pid_filter_keeps_one_process(build_c):
    """--pid N: only N's events, although its forked child inherits the int3 (the
    event's filter refuses the child's hit and removes the breakpoint there, as
    uprobe_perf_func does)."""
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe, argv=[exe])
    parent = m.process.pid
    proc = cli("run", "--pid", str(parent), "-e", "uprobe:libc:malloc", exe, "2", "fork")
    pids = re.findall(r"-(\d+)\s+\[\d+\].*malloc:", proc.stderr.decode())
    children = set(re.findall(rb"pid=(\d+) mallocs", proc.stdout)) - {str(parent).encode()}
    assert proc.returncode == 0 and len(children) == 1 and pids == [str(parent)] * 2, (
        f"expected 2 events of {parent}, got {pids}"
    )


def test_api_filter_is_consulted_when_installing(build_c):
    """A consumer's filter decides where the breakpoint goes (register_for_each_vma,
    uprobe_mmap): refusing the parent leaves its forked child without one too."""
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe, argv=[exe, "3", "fork"])
    main = m.process.pid
    seen = []
    m.uprobes.register(
        f"{LIBC}:malloc", handler=lambda ctx: seen.append(ctx.task.process.pid), filter=lambda proc: proc.pid != main
    )
    _run(m)
    assert seen == [], f"expected no hits, got {seen}"


# --- the host kernel ----------------------------------------------------------------------


def _host_hits(exe: str, argv: list[str], lib: str, offsets: dict[str, int]) -> dict[str, list[str]]:
    """Run ``argv`` natively (ASLR off) under host probes on ``lib``; the trace lines of
    the exec'ed program per event (lines before the exec - the forking Python's own
    malloc calls, at other addresses - are left out by the probe address)."""
    probes = [ResolvedProbe(f"{lib}:{name}", name, "p", off, 0, "") for name, off in offsets.items()]
    t = Tracefs()
    try:
        with HostProbes(t, probes, lib) as hp:
            subprocess.run(argv, capture_output=True, timeout=60, preexec_fn=_no_randomize, check=True)
            text = hp.trace()
    finally:
        t.close()
    out = {name: [] for name in offsets}
    comm = os.path.basename(exe)[:15]
    for line in text.splitlines():
        hit = re.match(rf"\s*{re.escape(comm)}-\d+\s.*?: (\w+): \((0x[0-9a-f]+)\)", line)
        if hit and hit[1] in out:
            out[hit[1]].append(hit[2])
    return out


@needs_tracefs
@pytest.mark.parametrize(
    "program,argv,lib,symbols",
    [
        ("lib_malloc", ["4"], LIBC, ["malloc", "free"]),
        ("lib_malloc", ["3", "fork"], LIBC, ["malloc"]),
        ("dlopen_libm", ["5"], LIBM, ["frexp", "cos"]),
    ],
    ids=["malloc-free", "fork", "dlopen-ifunc"],
)
def test_library_probe_counts_equal_the_host_kernels(build_c, program, argv, lib, symbols):
    flags = ("-ldl",) if program == "dlopen_libm" else ()
    exe = build_c(program + ".c", *flags, name=program)
    m = Machine.from_elf(exe, argv=[exe, *argv])
    addrs: dict[str, list[int]] = {s: [] for s in symbols}
    offsets = {}
    for s in symbols:
        file, offsets[s] = m.uprobes.resolve_target(f"{lib}:{s}")
        m.uprobes.register((file.path, offsets[s]), handler=lambda ctx, s=s: addrs[s].append(ctx.vaddr))
    _run(m)
    host = _host_hits(exe, [exe, *argv], os.path.realpath(lib), offsets)
    model = {s: [hex(a) for a in addrs[s]] for s in symbols}
    # the host lines also hold pre-exec hits (the forking Python) at other addresses
    host = {s: [a for a in host[s] if a in set(model[s])] for s in symbols}
    assert host == model and all(model.values()), f"host {host} != model {model}"


# --- symbolization -----------------------------------------------------------------------


def test_library_addresses_symbolize_with_the_librarys_name(build_c):
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe, argv=[exe, "1"])
    seen = []
    m.uprobes.register(
        f"{LIBC}:malloc",
        handler=lambda ctx: seen.append((ctx.machine.symbolize(ctx.vaddr), ctx.machine.symbolize(ctx.vaddr + 0x14))),
    )
    m.uprobes.register(f"{exe}:main", handler=lambda ctx: seen.append((ctx.machine.symbolize(ctx.vaddr),)))
    _run(m)
    assert seen == [("main",), ("malloc in libc.so.6", "malloc+0x14 in libc.so.6")], seen


def test_stepper_labels_library_code_as_gdb_does(build_c):
    from emu.debug.format import gdb_label

    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe, argv=[exe, "1"])
    seen = []
    m.uprobes.register(f"{LIBC}:malloc", handler=lambda ctx: seen.append(gdb_label(ctx.machine, ctx.vaddr + 20)))
    _run(m)
    assert seen == ["malloc+20"], seen


def test_trace_names_library_code(build_c):
    exe = build_c("lib_malloc.c", name="lib_malloc")
    proc = cli("trace", "-e", "uprobe:libc:malloc", exe, "1")
    hit = [ln for ln in proc.stdout.decode().splitlines() if "uprobe hit at" in ln]
    assert proc.returncode == 0 and len(hit) == 1 and "<malloc in libc.so.6>" in hit[0], hit


@needs_tracefs
def test_malloc_retvals_equal_the_host_kernels(build_c):
    """The uretprobe's $retval on the host (ASLR off) and in the model: the same
    pointers, the ones the program prints."""
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe, argv=[exe, "4"])
    file, off = m.uprobes.resolve_target(f"{LIBC}:malloc")
    ev = m.uprobes.add_event(f"r:lib/m {file.path}:{off:#x} ret=$retval")
    out = _run(m)
    model = re.findall(r"<- (0x[0-9a-f]+)\) ret=(0x[0-9a-f]+)", "\n".join(ev.lines))
    probe = ResolvedProbe(f"{LIBC}:malloc", "m", "r", off, 0, "ret=$retval")
    t = Tracefs()
    try:
        with HostProbes(t, [probe], os.path.realpath(LIBC)) as hp:
            native = subprocess.run(
                [exe, "4"], capture_output=True, text=True, timeout=60, preexec_fn=_no_randomize, check=True
            ).stdout
            text = hp.trace()
    finally:
        t.close()
    funcs = {f for f, _ in model}
    host = [(f, r) for f, r in re.findall(r"lib_malloc-\d+ .*<- (0x[0-9a-f]+)\) ret=(0x[0-9a-f]+)", text) if f in funcs]
    printed = re.findall(r"ptr=(0x[0-9a-f]+)", out)
    assert host == model and [r for _, r in model] == printed == re.findall(r"ptr=(0x[0-9a-f]+)", native), (
        f"host {host}, model {model}, printed {printed}"
    )
