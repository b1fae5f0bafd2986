"""Virtual CPUs: ``Machine(cpus=N)`` / ``--cpus N``.  Tasks run on CPUs (``task.cpu``)
as their affinity (``task.cpus_mask``) allows, each CPU with its own virtual clock;
sched_setaffinity / sched_getaffinity / getcpu, /proc/cpuinfo and
/sys/devices/system/cpu report them, and ftrace lines show the hitting task's CPU.
One CPU is the default and behaves as before."""

from __future__ import annotations

import errno as E
import os
import struct
from types import SimpleNamespace

import pytest
from cli_helpers import cli, one_line_error

from emu import Machine
from emu.frontends.sweep.case import Case, CaseRunner, Program
from kernel_model.arch.x86.entry.syscall_64 import SYSCALL_NUMBERS
from kernel_model.errors import InputError
from kernel_model.fs.proc.procfs import ProcFs
from kernel_model.fs.sysfs import sysfs_root
from kernel_model.include.linux.cpumask import cpulist
from kernel_model.kernel.sched import Scheduler

BUF = 0x700000
O_RDONLY, O_WRONLY = 0, 1


@pytest.fixture(scope="module")
def cpus_static(build_c):
    return build_c("cpus.c", "-static", "-pthread", name="cpus_static")


@pytest.fixture(scope="module")
def cpus_dynamic(build_c):
    return build_c("cpus.c", "-pthread", name="cpus_dynamic")


@pytest.fixture(scope="module")
def threads_guest(build_c):
    return build_c("sched_threads.c", "-static", "-pthread", name="sched_threads")


def lines(stdout: bytes) -> dict[str, str]:
    """{key: value} of ``key=value`` lines (the first ``=`` splits)."""
    return dict(ln.split("=", 1) for ln in stdout.decode().splitlines() if "=" in ln)


def run(path, *argv, cpus=1, **kw):
    m = Machine.from_elf(path, argv=[os.path.basename(path), *argv], cpus=cpus, **kw)
    r = m.run(timeout=120)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return m, r


def asm_machine(cpus: int) -> Machine:
    m = Machine.from_asm("_start:\n    hlt\n", cpus=cpus)
    m.mem.map(BUF, 0x1000, 3, "buf")
    return m


def call(m, name, *args) -> int:
    """The syscall through the table's dispatch (a fault becomes EFAULT there)."""
    regs = m.read_regs()
    m.syscalls.dispatch(m.task, regs, SYSCALL_NUMBERS[name], (*args, 0, 0, 0)[:6])
    ret = regs.rax & ((1 << 64) - 1)
    return ret - (1 << 64) if ret >> 63 else ret


def read_node(root, path: str, task) -> str:
    node = root
    for part in [p for p in path.split("/") if p]:
        node = node.lookup(task, part)
        assert not isinstance(node, int), f"{path}: errno {-node} at {part!r}"
    f = node.open(task, O_RDONLY)
    assert not isinstance(f, int), f"open {path}: errno {-f}"
    return f.read(1 << 20, None).decode()


# ------------------------------------------------------------------ the option


@pytest.mark.parametrize("bad", [0, -1, 257, 1.5, "2", True, None])
def test_machine_refuses_a_bad_cpu_count(bad):
    with pytest.raises(InputError, match="cpus"):
        Machine.from_asm("_start:\n    hlt\n", cpus=bad)


@pytest.mark.parametrize("bad", ["0", "257", "x", "1.5"])
def test_cli_refuses_a_bad_cpu_count_in_one_line(bad):
    line = one_line_error(cli("run", "--cpus", bad, "guest:hello"))
    assert "--cpus" in line and "1-256" in line, line


@pytest.mark.parametrize("command", ["run", "trace", "step", "gdbserver", "sweep"])
def test_every_machine_command_takes_cpus(command):
    proc = cli(command, "--help")
    assert b"--cpus" in proc.stdout, f"{command} --help has no --cpus:\n{proc.stdout.decode()}"


def test_cli_run_passes_cpus_to_the_machine(cpus_static):
    proc = cli("run", "--cpus", "3", cpus_static)
    assert proc.returncode == 0, proc.stderr.decode()
    assert lines(proc.stdout)["get_nprocs"] == "3", proc.stdout.decode()


def test_sweep_cases_run_on_the_programs_cpus():
    one, two = (Case(Program.of("guest:hello", ["hello"], cpus=n), "latest") for n in (1, 2))
    m = CaseRunner().machine(two)
    assert m.scheduler.nr_cpu_ids == 2, m.scheduler.nr_cpu_ids
    assert one.id != two.id, "a case on two CPUs is not the one-CPU case"


def test_default_is_one_cpu_with_the_one_cpu_mask():
    m = Machine.from_asm("_start:\n    hlt\n")
    assert (m.scheduler.nr_cpu_ids, m.task.cpu, m.task.cpus_mask) == (1, 0, 1), (
        m.scheduler.nr_cpu_ids,
        m.task.cpu,
        m.task.cpus_mask,
    )


def test_first_task_may_run_on_every_cpu():
    m = Machine.from_asm("_start:\n    hlt\n", cpus=5)
    assert (m.task.cpu, m.task.cpus_mask, m.current_cpu()) == (0, 0b11111, 0), (
        m.task.cpu,
        bin(m.task.cpus_mask),
        m.current_cpu(),
    )


# ------------------------------------------------------------------ scheduling


def test_threads_spread_over_the_cpus(threads_guest):
    m, r = run(threads_guest, "work", "4", "200000", cpus=4, seed=3)
    assert {t.cpu for t in m.all_tasks} == {0, 1, 2, 3}, [(t.tid, t.cpu) for t in m.all_tasks]


def test_same_seed_same_interleaving_on_four_cpus(threads_guest):
    (m1, r1), (m2, r2) = (run(threads_guest, "work", "4", "200000", cpus=4, seed=5) for _ in range(2))
    assert m1.scheduler.history == m2.scheduler.history, (m1.scheduler.history, m2.scheduler.history)
    assert [t.cpu for t in m1.all_tasks] == [t.cpu for t in m2.all_tasks]
    assert r1.stdout == r2.stdout


def test_parallel_work_takes_less_virtual_time_on_more_cpus(threads_guest):
    """Four busy threads: on four CPUs the virtual clock moves about a quarter as far
    as on one, since the CPUs' slices overlap in time."""
    one = run(threads_guest, "work", "4", "200000", cpus=1)[0].syscalls.boot_clock_ns()
    four = run(threads_guest, "work", "4", "200000", cpus=4)[0].syscalls.boot_clock_ns()
    assert four < one * 0.6, f"1 CPU: {one} ns, 4 CPUs: {four} ns"


def test_monotonic_clock_never_goes_back_across_cpus(cpus_static):
    _, r = run(cpus_static, "mono", "4", cpus=4, sched_slice=(1, 40))
    assert lines(r.stdout)["violations"] == "0", r.stdout.decode()


def test_pinned_task_stays_on_its_cpu(threads_guest):
    m = Machine.from_elf(threads_guest, argv=["t", "work", "3", "100000"], cpus=3)
    m.task.cpus_mask = 0b100
    r = m.run(timeout=120)
    assert r.reason == "exit", r.describe()
    assert {t.cpu for t in m.all_tasks} == {2}, [(t.tid, t.cpu) for t in m.all_tasks]


def fake_task(tid, mask=0b11, cpu=0, state="running"):
    return SimpleNamespace(tid=tid, cpus_mask=mask, cpu=cpu, state=state)


def test_the_busy_cpu_with_the_smallest_clock_runs_next():
    s = Scheduler(cpus=2)
    a, b = fake_task(1000, cpu=0), fake_task(1001, cpu=1)
    s.curr, s.clock, s.this_cpu = [a, b], [300, 200], 0
    assert s.pick_smp([a, b], now=300) is b and s.this_cpu == 1, (s.curr, s.this_cpu)


def test_a_cpu_idle_while_every_task_slept_starts_at_the_machines_clock():
    s = Scheduler(cpus=2)
    a = fake_task(1000)
    s.curr, s.clock, s.this_cpu = [None, None], [100, 50], 0
    assert s.pick_smp([a], now=1000) is a
    assert s.clock[s.this_cpu] == 1000, s.clock


def test_a_waiting_task_goes_only_to_a_cpu_its_mask_allows():
    s = Scheduler(cpus=3)
    a, b = fake_task(1000, mask=0b111), fake_task(1001, mask=0b100)
    s.curr, s.clock, s.this_cpu = [a, None, None], [10, 0, 0], 0
    s.pick_smp([a, b], now=10)
    assert (s.curr[1], s.curr[2], b.cpu) == (None, b, 2), (s.curr, b.cpu)


# ------------------------------------------------------------------ syscalls


def test_setaffinity_efault_on_a_bad_pointer():
    m = asm_machine(4)
    assert call(m, "sched_setaffinity", 0, 8, 0x10) == -E.EFAULT


def test_setaffinity_einval_without_an_online_cpu():
    m = asm_machine(4)
    m.mem.write_user(BUF, (1 << 5).to_bytes(8, "little"))
    assert call(m, "sched_setaffinity", 0, 8, BUF) == -E.EINVAL
    assert m.task.cpus_mask == 0b1111, bin(m.task.cpus_mask)


def test_setaffinity_esrch_for_an_unknown_pid():
    m = asm_machine(4)
    m.mem.write_user(BUF, (1).to_bytes(8, "little"))
    assert call(m, "sched_setaffinity", 4242, 8, BUF) == -E.ESRCH


def test_setaffinity_migrates_a_task_off_a_cpu_it_left():
    m = asm_machine(4)
    m.mem.write_user(BUF, (0b1100).to_bytes(8, "little"))
    assert call(m, "sched_setaffinity", 0, 8, BUF) == 0
    assert (m.task.cpus_mask, m.task.cpu) == (0b1100, 2), (bin(m.task.cpus_mask), m.task.cpu)


def test_setaffinity_keeps_only_online_cpus():
    m = asm_machine(2)
    m.mem.write_user(BUF, (0xFF).to_bytes(8, "little"))
    assert call(m, "sched_setaffinity", 0, 8, BUF) == 0
    assert m.task.cpus_mask == 0b11, bin(m.task.cpus_mask)


def test_getaffinity_returns_cpumask_size_bytes_of_the_mask():
    m = asm_machine(70)
    m.mem.write_user(BUF, b"\xee" * 32)
    assert call(m, "sched_getaffinity", 0, 32, BUF) == 16
    assert m.mem.read(BUF, 32) == ((1 << 70) - 1).to_bytes(16, "little") + b"\xee" * 16


def test_getaffinity_einval_when_the_buffer_is_shorter_than_nr_cpu_ids():
    m = asm_machine(70)
    assert call(m, "sched_getaffinity", 0, 8, BUF) == -E.EINVAL


def test_getcpu_reports_the_tasks_cpu_and_node_0():
    m = asm_machine(4)
    m.task.cpu = 3
    m.mem.write_user(BUF, b"\xff" * 8)
    assert call(m, "getcpu", BUF, BUF + 4) == 0
    assert struct.unpack("<II", m.mem.read(BUF, 8)) == (3, 0)


# ------------------------------------------------------------------ /proc and /sys


def test_cpuinfo_has_one_entry_per_cpu():
    m = asm_machine(3)
    text = read_node(ProcFs(m).root, "cpuinfo", m.task)
    entries = [
        {k.strip(): v for k, _, v in (ln.partition(": ") for ln in e.splitlines())}
        for e in text.strip("\n").split("\n\n")
    ]
    got = [
        (e["processor"], e["physical id"], e["core id"], e["cpu cores"], e["siblings"], e["apicid"]) for e in entries
    ]
    assert got == [(str(i), "0", str(i), "3", "3", str(i)) for i in range(3)], got


@pytest.mark.parametrize("cpus,want", [(1, "0\n"), (4, "0-3\n")])
@pytest.mark.parametrize("name", ["online", "possible", "present"])
def test_sysfs_cpu_lists(cpus, want, name):
    m = asm_machine(cpus)
    got = read_node(sysfs_root(m), f"devices/system/cpu/{name}", m.task)
    assert got == want, f"{name}: expected {want!r}, got {got!r}"


def test_sysfs_has_one_directory_per_cpu():
    m = asm_machine(3)
    node = sysfs_root(m)
    for part in ("devices", "system", "cpu"):
        node = node.lookup(m.task, part)
    dirs = sorted(n for n, _, _ in node.children(m.task) if n.startswith("cpu"))
    assert dirs == ["cpu0", "cpu1", "cpu2"], dirs


def test_sysfs_attribute_is_read_only():
    m = asm_machine(2)
    node = sysfs_root(m)
    for part in ("devices", "system", "cpu", "online"):
        node = node.lookup(m.task, part)
    assert node.open(m.task, O_WRONLY) == -E.EACCES


@pytest.mark.parametrize("mask,text", [(0b1, "0"), (0b1111, "0-3"), (0b101101, "0,2-3,5")])
def test_cpulist_format(mask, text):
    assert cpulist(mask) == text


# ------------------------------------------------------------------ trace


def test_ftrace_lines_show_the_cpu_of_the_hitting_task(cpus_static):
    m = Machine.from_elf(cpus_static, argv=["cpus", "threads", "3"], cpus=3)
    ev = m.uprobes.add_event(f"{cpus_static}:report")
    r = m.run(timeout=120)
    assert r.reason == "exit", r.describe()
    got = sorted((int(ln.split()[0].rpartition("-")[2]), ln.split()[1]) for ln in ev.lines)
    assert got == [(1001, "[000]"), (1002, "[001]"), (1003, "[002]")], ev.lines


def test_cli_event_lines_show_the_cpu_column(cpus_static):
    proc = cli("run", "--cpus", "3", "-e", f"{cpus_static}:report", cpus_static, "threads", "3")
    assert proc.returncode == 0, proc.stderr.decode()
    hits = [ln.split()[:2] for ln in proc.stderr.decode().splitlines() if ": report:" in ln]
    assert sorted(hits) == [
        ["cpus_static-1001", "[000]"],
        ["cpus_static-1002", "[001]"],
        ["cpus_static-1003", "[002]"],
    ], proc.stderr.decode()


# ------------------------------------------------------------------ real binaries


@pytest.mark.parametrize("cpus", [1, 4])
def test_glibc_counts_the_cpus_and_pins_to_the_last(cpus_static, cpus):
    _, r = run(cpus_static, cpus=cpus)
    out = lines(r.stdout)
    got = {
        k: out[k]
        for k in ("get_nprocs", "get_nprocs_conf", "sysconf_onln", "sched_getcpu", "setaffinity", "sched_getcpu_after")
    }
    want = {
        "get_nprocs": str(cpus),
        "get_nprocs_conf": str(cpus),
        "sysconf_onln": str(cpus),
        "sched_getcpu": "0",
        "setaffinity": "0",
        "sched_getcpu_after": str(cpus - 1),
    }
    assert got == want, r.stdout.decode()


@pytest.mark.parametrize("cpus", [2, 4])
def test_pthread_setaffinity_np_puts_thread_i_on_cpu_i(cpus_dynamic, cpus):
    _, r = run(cpus_dynamic, "threads", str(cpus), cpus=cpus)
    want = [f"thread {i} rc=0 cpu={i}" for i in range(cpus)]
    assert r.stdout.decode().splitlines() == want, r.stdout.decode()


def test_affinity_is_inherited_by_threads_and_fork_and_kept_by_exec(cpus_static):
    _, r = run(cpus_static, "inherit", cpus=2)
    assert r.stdout.decode().splitlines() == ["thread mask=0x2 cpu=1", "fork mask=0x2 cpu=1", "exec mask=0x2 cpu=1"], (
        r.stdout.decode()
    )


@pytest.mark.parametrize("args", [["nproc"], ["nproc", "--all"]])
def test_busybox_nproc(args):
    """busybox-static is part of the test corpus (.ci/run installs it)."""
    m = Machine.from_elf("/bin/busybox", argv=args, cpus=3)
    r = m.run(timeout=120)
    assert (r.exit_code, r.stdout) == (0, b"3\n"), (r.describe(), r.stdout, r.stderr)


def test_checkpoint_restores_the_cpus_and_their_clocks(threads_guest):
    """A restored checkpoint runs on as the first run did: same switches, same CPUs."""
    m = Machine.from_elf(threads_guest, argv=["t", "work", "4", "100000"], cpus=4, seed=2)
    m.run(max_insns=500_000)
    cp = m.checkpoint()
    at = len(m.scheduler.history)
    first = m.run(timeout=120)
    tail, cpus = m.scheduler.history[at:], [t.cpu for t in m.all_tasks]
    assert len(set(tail)) > 1, f"no switches after the checkpoint: {tail}"
    m.restore(cp)
    again = m.run(timeout=120)
    assert (again.exit_code, again.stdout) == (first.exit_code, first.stdout), again.describe()
    assert (m.scheduler.history[at:], [t.cpu for t in m.all_tasks]) == (tail, cpus)


@pytest.mark.parametrize(
    "cpus,mask,hexmask,listed",
    [(1, 0b1, "1", "0"), (4, 0b1010, "a", "1,3"), (70, (1 << 70) - 1, "3f,ffffffff,ffffffff", "0-69")],
)
def test_proc_status_shows_the_affinity(cpus, mask, hexmask, listed):
    m = asm_machine(cpus)
    m.task.cpus_mask = mask
    status = read_node(ProcFs(m).root, f"{m.task.tid}/status", m.task)
    want = f"Cpus_allowed:\t{hexmask}\nCpus_allowed_list:\t{listed}\n"
    assert status.endswith(want), f"expected {want!r} at the end of:\n{status}"


def test_proc_stat_processor_field_is_the_tasks_cpu():
    m = asm_machine(4)
    m.task.cpu = 3
    fields = read_node(ProcFs(m).root, f"{m.task.tid}/stat", m.task).rpartition(")")[2].split()
    assert fields[39 - 3] == "3", f"field 39 (processor): {fields[39 - 3]!r}"
