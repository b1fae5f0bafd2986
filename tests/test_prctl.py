"""prctl(PR_SET_NAME/PR_GET_NAME) on the thread's comm (TASK_COMM_LEN 16), which the
ftrace lines show; sched_getaffinity's buffer rules on the one-CPU machine; getrusage
and times, which report no CPU time (the model keeps none) and the virtual clock's
jiffies."""

from __future__ import annotations

import re
import subprocess

import pytest

from emu.machine import Machine


@pytest.fixture(scope="module")
def prctl_exe(build_c):
    return build_c("prctl_name.c", "-static", "-pthread")


@pytest.fixture(scope="module")
def limits_exe(build_c):
    return build_c("limits.c", "-static")


def native(argv) -> str:
    p = subprocess.run(argv, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    return p.stdout.decode()


def model(argv, **kw) -> tuple[Machine, str]:
    m = Machine.from_elf(argv[0], argv=argv, **kw)
    r = m.run()
    assert r.exit_code == 0, r
    return m, r.stdout.decode()


@pytest.mark.parametrize("name", ["renamed", "exactly15chars!", "a-very-long-thread-name", ""])
def test_names_match_native(prctl_exe, name):
    """The start name, a rename (15 bytes kept), a thread's own name, EFAULT."""
    want = native([prctl_exe, name])
    got = model([prctl_exe, name])[1]
    assert got == want, f"native:\n{want}\nmodel:\n{got}"


def test_get_name_writes_16_bytes_nul_padded(prctl_exe):
    got = model([prctl_exe, "abc"])[1].splitlines()[2]
    assert got == "main rc=0 name=abc len=3 pad=0,X", got


def test_trace_lines_show_the_thread_names(prctl_exe):
    m = Machine.from_elf(prctl_exe, argv=[prctl_exe, "a-very-long-thread-name"])
    ev = m.uprobes.add_event(f"p:named {prctl_exe}:named x=%di comm=$comm", ftrace=True)
    assert m.run().exit_code == 0
    got = [re.match(r"\s*(.*)-\d+ +\[.*comm=(.*)$", ln).groups() for ln in ev.lines]
    want = [("a-very-long-thr", '"a-very-long-thr"'), ("worker", '"worker"'), ("a-very-long-thr", '"a-very-long-thr"')]
    assert got == want, "\n".join(ev.lines)


def test_unmodeled_option_is_enosys_and_counted():
    m = Machine.from_asm("""
_start:
    mov edi, 38            # PR_SET_NO_NEW_PRIVS
    mov esi, 1
    mov eax, 157
    syscall
    neg eax
    mov edi, eax
    mov eax, 60
    syscall
""")
    r = m.run()
    assert r.exit_code == 38, f"ENOSYS (38) expected, got {r.exit_code}"
    assert dict(m.counters.unknown_syscalls) == {"157:prctl(38)": 1}, m.counters.unknown_syscalls


# -------------------------------------------------------------------- affinity and usage
@pytest.fixture(scope="module")
def limits_runs(limits_exe) -> tuple[dict, dict]:
    """{first word: line} of a native and a model run (each sleeps 3 s: run once)."""

    def rows(out: str) -> dict[str, str]:
        return {ln.split("=")[0].split()[0]: ln for ln in out.splitlines()}

    return rows(native([limits_exe])), rows(model([limits_exe])[1])


@pytest.mark.parametrize(
    "call",
    [
        "sched_getaffinity(0,0)",
        "sched_getaffinity(0,4)",
        "sched_getaffinity(0,12)",
        "sched_getaffinity(0,8)",
        "sched_getaffinity(-1,8)",
        "sched_getaffinity(0,8,NULL)",
        "getrusage(2)",
        "getrusage(SELF,NULL)",
        "getrusage(SELF)",
        "times(bad)",
    ],
)
def test_limits_errors_match_native(limits_runs, call):
    want, got = limits_runs[0][call], limits_runs[1][call]
    assert got == want, f"native {want!r}, model {got!r}"


def test_sleep_advances_times_as_natively(limits_runs):
    """times() after sleep(3): 300 USER_HZ ticks later, exactly on the virtual clock.
    Natively the sleep may overrun a little on a loaded host (seen: +301)."""
    want, got = limits_runs[0]["elapsed"], limits_runs[1]["elapsed"]
    native_ticks = int(want.rpartition("+")[2])
    assert 300 <= native_ticks <= 305, f"native {want!r}: sleep(3) should take 300 ticks"
    assert got == "elapsed ticks over sleep(3): +300", f"native {want!r}, model {got!r}"


def test_affinity_copies_the_one_cpu_mask_of_cpumask_size_8(limits_runs):
    out = limits_runs[1]
    assert out["sched_getaffinity(0,128)"].split()[1] == "rc=8", out["sched_getaffinity(0,128)"]
    assert out["mask"] == "mask 01 00 00 00 00 00 00 00 ee ee", out["mask"]


def test_rusage_reports_no_cpu_time(limits_runs):
    got = limits_runs[1]["utime"]
    assert got == "utime=0.000000 stime=0.000000 maxrss=0 minflt=0 nvcsw=0", got


def test_times_counts_jiffies_of_the_virtual_clock(limits_runs):
    """INITIAL_JIFFIES (2^32 - 300 * HZ, HZ 250) in USER_HZ ticks at uptime 0; no
    process or child CPU time."""
    got = limits_runs[1]["times"]
    assert got == "times=1717956918 utime=0 stime=0 cutime=0 cstime=0", got
