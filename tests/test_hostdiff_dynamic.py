"""``uprobe-emu diff`` on dynamic programs: probes in libc resolved as ``run -e`` resolves
them, the native side without ASLR, only the native child's events, per-thread streams.

The host comparisons follow test_hostdiff.py's rule: skipped only when tracefs cannot
be used on the machine, and they say so.
"""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest
from cli_helpers import cli, one_line_error
from test_hostdiff import diff, needs_tracefs, our_probes_left

from emu.frontends import hostdiff
from emu.frontends.hostdiff import Event, RunRecord

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"

MALLOC_C = r"""
/* argv[1]: mallocs (default 5); argv[2] "spin": malloc/free forever (a bystander);
 * "threads": two threads, one after the other, malloc too; "fork": a child does. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int n = 5;

static void *loop(void *arg)
{
    char line[64];
    for (int i = 0; i < n; i++) {
        void *p = malloc(48 + 32 * i);
        int len = snprintf(line, sizeof line, "%s %p\n", (const char *)arg, p);
        if (write(1, line, len) != len)
            exit(3);
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 2 ? argv[2] : "";
    n = argc > 1 ? atoi(argv[1]) : 5;
    if (strcmp(mode, "spin") == 0)
        for (;;)
            free(malloc(64));
    loop("main");
    if (strcmp(mode, "threads") == 0) {
        pthread_t t;
        pthread_create(&t, NULL, loop, "t1");
        pthread_join(t, NULL);
        pthread_create(&t, NULL, loop, "t2");
        pthread_join(t, NULL);
    }
    if (strcmp(mode, "fork") == 0) {
        pid_t child = fork();
        if (child == 0) {
            loop("child");
            _exit(0);
        }
        waitpid(child, NULL, 0);
    }
    return 0;
}
"""

MALLOC_SPECS = ["uprobe:libc:malloc", "r:g/mr libc:malloc ret=$retval", "uprobe:libc:free"]


@pytest.fixture(scope="module")
def malloc_exe(tmp_path_factory):
    d = tmp_path_factory.mktemp("dyn")
    src, exe = d / "dyn_malloc.c", d / "dyn_malloc"
    src.write_text(MALLOC_C)
    res = subprocess.run(["gcc", "-O1", "-pthread", "-o", str(exe), str(src)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return str(exe)


def _names(events):
    return [(e.name, e.kind) for e in events]


def _retvals(events):
    return [e.args for e in events if e.kind == "return"]


# ----------------------------------------------------------------------- resolution


def test_a_short_library_name_resolves_to_the_library_file_and_offset(malloc_exe):
    """uprobe:libc:malloc goes on libc's host path at malloc's file offset, as run -e
    puts it (Uprobes.find_file + symbol_offset)."""
    from kernel_model.fs.elf import load_elf_file

    (probe,), _ = hostdiff.resolve_specs(malloc_exe, ["uprobe:libc:malloc"])
    lib = load_elf_file(os.path.realpath(LIBC))
    want = lib.vaddr_to_offset(lib.resolve("malloc").value)
    assert os.stat(probe.host_path).st_ino == os.stat(LIBC).st_ino, probe.host_path
    assert (probe.kind, probe.offset) == ("p", want), (probe.kind, hex(probe.offset), hex(want))
    line = hostdiff.probe_command(probe.kind, "g", "e", probe.host_path, probe.offset)
    assert line == f"p:g/e {probe.host_path}:{want:#x}", line


def test_a_tracefs_spec_on_a_library_path_keeps_its_offset(malloc_exe):
    (probe,), _ = hostdiff.resolve_specs(malloc_exe, [f"p:g/e {LIBC}:0x1234 a=%di"])
    assert (probe.offset, probe.args) == (0x1234, "a=%di"), probe
    assert os.path.samefile(probe.host_path, LIBC), probe.host_path


def test_a_probe_on_the_program_names_the_program(malloc_exe):
    (probe,), _ = hostdiff.resolve_specs(malloc_exe, [f"{malloc_exe}:main"])
    assert probe.host_path is None and probe.model_path is None, probe


def test_an_unknown_library_is_one_line_and_exit_2(malloc_exe):
    line = one_line_error(cli("diff", "-e", "uprobe:libnosuchlib:f", malloc_exe))
    assert "libnosuchlib" in line and "ld.so cache" in line, line


def test_a_usdt_spec_naming_no_site_is_one_line(malloc_exe):
    line = one_line_error(cli("diff", "-e", "usdt:libc:p:n", malloc_exe))
    assert line.startswith(f"uprobe-emu: error: no USDT probe p:n in {LIBC} (has: "), line


# ----------------------------------------------------------------------- host runs


@needs_tracefs
def test_malloc_counts_and_retvals_equal_the_host_kernels(malloc_exe):
    native, model, problems = diff(malloc_exe, MALLOC_SPECS, ["5"])
    assert not problems, "\n".join(problems)
    assert _names(native.events).count(("uprobe:libc:malloc", "entry")) >= 5, _names(native.events)
    assert _retvals(native.events) == _retvals(model.events), (
        f"host {_retvals(native.events)} != model {_retvals(model.events)}"
    )
    printed = [f" ret={p.decode()}" for p in re.findall(rb"main (0x[0-9a-f]+)", native.stdout)]
    missing = [p for p in printed if p not in _retvals(native.events)]
    assert len(printed) == 5 and not missing, f"printed {printed}, not among $retvals: {missing}"


@needs_tracefs
def test_the_native_side_runs_without_aslr(malloc_exe):
    """The pointers malloc returns natively are the model's (ADDR_NO_RANDOMIZE)."""
    native, model, _ = diff(malloc_exe, ["uprobe:libc:free"], ["3"])
    assert native.stdout == model.stdout, f"host {native.stdout!r} != model {model.stdout!r}"
    assert native.stdout.startswith(b"main 0x5555555"), native.stdout


@needs_tracefs
def test_diff_cli_agrees_on_libc_malloc_entry_and_return(malloc_exe):
    p = cli("diff", "-e", "uprobe:libc:malloc", "-e", "uretprobe:libc:malloc", malloc_exe, "4")
    out = p.stdout.decode()
    assert p.returncode == 0 and out.startswith("agree: host "), out + p.stderr.decode()
    assert our_probes_left() == []


@needs_tracefs
def test_another_process_hitting_libc_is_not_counted(malloc_exe):
    """A bystander with the same comm calls malloc all the time: only the native child's
    events count (its pid and its descendants'), not every line of that comm."""
    bystander = subprocess.Popen([malloc_exe, "0", "spin"])
    try:
        time.sleep(0.05)
        native, model, problems = diff(malloc_exe, ["uprobe:libc:malloc"], ["3"])
    finally:
        bystander.kill()
        bystander.wait()
    assert not problems, "\n".join(problems)
    assert len(native.events) == len(model.events), (len(native.events), len(model.events))


@needs_tracefs
@pytest.mark.parametrize("mode, streams", [("threads", 3), ("fork", 2)])
def test_threads_and_children_are_compared_stream_by_stream(malloc_exe, mode, streams):
    native, model, problems = diff(malloc_exe, ["uprobe:libc:malloc", "r:g/mr libc:malloc ret=$retval"], ["3", mode])
    assert not problems, "\n".join(problems)
    got = len(hostdiff.per_thread(native.events))
    assert got == streams, f"expected {streams} event streams on the host, got {got}"


@needs_tracefs
def test_a_differing_library_probe_is_reported(malloc_exe):
    """%sp at malloc differs when the stack differs: the native environment is made
    longer than the model's, so the same probe must be reported as a divergence."""
    probes, _ = hostdiff.resolve_specs(malloc_exe, ["p:g/e libc:malloc sp=%sp"])
    argv = [malloc_exe, "2"]
    native = hostdiff.run_native(malloc_exe, argv, probes, b"", 60, env_extra=("PAD=" + "x" * 300,))
    model = hostdiff.run_model(malloc_exe, argv, probes, b"", hostdiff.host_profile_name(), 10**9)
    problems = hostdiff.compare(native, model)
    assert problems and problems[0] == "event stream differs at event #1:", problems
    assert native.events[0].args != model.events[0].args, (native.events[0], model.events[0])
    assert our_probes_left() == []


# ----------------------------------------------------------------------- pure helpers

FORKS = """\
          python-100   [000] DBZff 1.000: ev0: (0x7f0000000930)
          python-100   [000] ..... 1.100: sched_process_fork: comm=python pid=100 child_comm=python child_pid=200
          python-200   [001] DBZff 1.150: ev0: (0x7f0000000930)
         dyn_mal-200   [001] ..... 1.200: sched_process_exec: filename=/t/dyn_malloc pid=200 old_pid=200
         dyn_mal-200   [001] DBZff 1.300: ev0: (0x7ffff7e6d930)
         dyn_mal-200   [001] ..... 1.400: sched_process_fork: comm=dyn_mal pid=200 child_comm=dyn_mal child_pid=201
         dyn_mal-201   [000] ..... 1.500: sched_process_fork: comm=dyn_mal pid=201 child_comm=dyn_mal child_pid=202
         dyn_mal-300   [000] DBZff 1.600: ev0: (0x7ffff7e6d930)
"""


def test_descendants_follow_forks_and_clones_from_the_child():
    got = hostdiff.descendants(FORKS, 200)
    assert got == {200, 201, 202}, got


def test_lines_before_the_childs_exec_are_dropped():
    """Between fork and exec the child still runs our Python (which calls malloc)."""
    kept = [r["pid"] for r in hostdiff.parse_trace(hostdiff.since_exec(FORKS, 200))]
    assert kept == ["200", "300"], kept


def _ev(tid, n):
    return Event("uprobe:libc:malloc", "entry", 0x98930, None, f" n={n}", tid)


def test_interleaving_across_threads_is_not_a_divergence():
    host = RunRecord("exit 0", b"", [_ev(10, 1), _ev(11, 1), _ev(10, 2), _ev(11, 2)])
    model = RunRecord("exit 0", b"", [_ev(1000, 1), _ev(1000, 2), _ev(1001, 1), _ev(1001, 2)])
    assert hostdiff.compare(host, model) == []


def test_a_thread_whose_stream_differs_is_named():
    host = RunRecord("exit 0", b"", [_ev(10, 1), _ev(11, 1), _ev(11, 2)])
    model = RunRecord("exit 0", b"", [_ev(1000, 1), _ev(1001, 1), _ev(1001, 3)])
    got = hostdiff.compare(host, model)
    assert got[0] == "event stream of thread #2 (host tid 11, model tid 1001) differs at event #2:", got
    assert got[-1] == "  > model: uprobe:libc:malloc entry (0x98930) n=3", got


def test_threads_are_paired_in_creation_order_not_first_event_order():
    """Two children whose first events come in opposite orders on the two sides are
    still compared child with child: the n-th created meets the n-th created."""
    from emu.frontends.hostdiff import Event as HEvent
    from emu.frontends.hostdiff import RunRecord, compare

    def ev(tid, name):
        return HEvent(name=name, kind="entry", ip=0x1000, func=None, args="", tid=tid)

    host = RunRecord("exit 0", b"", [ev(501, "a"), ev(500, "b"), ev(501, "a2"), ev(500, "b2")])
    model = RunRecord("exit 0", b"", [ev(1000, "b"), ev(1001, "a"), ev(1000, "b2"), ev(1001, "a2")])
    assert compare(host, model) == [], compare(host, model)
