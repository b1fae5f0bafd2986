"""The modeled /proc (kernel_model.fs.proc.procfs) node by node on real Machine objects: exact texts,
modes, inode attributes and errnos."""

from __future__ import annotations

import errno as E
import os
import re
import stat as S
import struct

import pytest

from emu.machine import Machine
from kernel_model.fs.pipe import Pipe, PipeEnd
from kernel_model.fs.proc.array import max_fds
from kernel_model.fs.proc.procfs import PROC_DEV, TOP_INOS, ProcFs

O_RDONLY, O_WRONLY, O_RDWR = 0, 1, 2
GUEST = dict(uid=1000, gid=1000, groups=[4, 27])


def machine(argv=("prog", "a b", "c"), env=("A=1",), **kw) -> Machine:
    kw = {**GUEST, **kw}
    return Machine.from_asm("_start:\n    hlt", path="/opt/prog", argv=list(argv), env=list(env), **kw)


@pytest.fixture
def m():
    return machine()


def walk(m, path, task=None):
    """Resolve ``path`` below /proc the way the path walk does (symlinks relative to
    their directory)."""
    task = task or m.task
    fs = getattr(m, "_test_procfs", None) or ProcFs(m)
    m._test_procfs = fs
    n = fs.root
    parts = [p for p in path.split("/") if p]
    while parts:
        name = parts.pop(0)
        n = n.lookup(task, name)
        if isinstance(n, int):
            return n
        if S.S_ISLNK(n.attrs(task).mode) and (parts or name in ("self", "thread-self")):
            target = n.readlink(task)
            n = fs.root
            parts = [p for p in target.split("/") if p] + parts
    return n


def text(m, path, task=None) -> str:
    n = walk(m, path, task)
    assert not isinstance(n, int), f"{path}: errno {-n}"
    f = n.open(task or m.task, O_RDONLY)
    assert not isinstance(f, int), f"open {path}: errno {-f}"
    return f.read(1 << 20, None).decode("latin-1")


def field(status: str, name: str) -> str:
    found = re.search(rf"^{name}:\t(.*)$", status, re.M)
    assert found, f"{name} missing from status:\n{status}"
    return found.group(1)


# ------------------------------------------------------------------ /proc/<pid>/status


def test_status_text_of_a_fresh_guest(m):
    want = (
        "Name:\tprog\nUmask:\t0022\nState:\tR (running)\nTgid:\t1000\nNgid:\t0\nPid:\t1000\n"
        "PPid:\t1\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\n"
        "FDSize:\t64\nGroups:\t4 27 \nNStgid:\t1000\nNSpid:\t1000\nNSpgid:\t1000\nKthread:\t0\n"
        "VmSize:\t     140 kB\nVmLck:\t       0 kB\nVmPin:\t       0 kB\nVmData:\t       0 kB\n"
        "VmStk:\t     132 kB\nVmExe:\t       8 kB\nVmLib:\t       0 kB\nVmSwap:\t       0 kB\n"
        "HugetlbPages:\t       0 kB\nCoreDumping:\t0\nuntag_mask:\t0xffffffffffffffff\n"
        "Threads:\t1\nSigQ:\t0/16384\nSigPnd:\t0000000000000000\n"
        "ShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
        "SigCgt:\t0000000000000000\nCpus_allowed:\t1\nCpus_allowed_list:\t0\n"
    )
    got = text(m, "self/status")
    assert got == want, f"want:\n{want}\ngot:\n{got}"


def test_status_fields_come_in_the_hosts_order(m):
    """Every line the model writes is one the host writes, in the host's order."""
    with open("/proc/self/status") as f:
        host = [line.split(":")[0] for line in f]
    ours = [line.split(":")[0] for line in text(m, "self/status").splitlines()]
    positions = [host.index(name) if name in host else -1 for name in ours]
    assert -1 not in positions, f"not on the host: {[n for n, p in zip(ours, positions) if p < 0]}"
    assert positions == sorted(positions), f"host order {host}, model order {ours}"


def test_status_groups_line_of_a_guest_without_groups():
    m = machine(groups=[])
    assert field(text(m, "self/status"), "Groups") == " ", "an empty list still ends in a space"


@pytest.mark.parametrize("umask,want", [(0o022, "0022"), (0, "0000"), (0o777, "0777"), (0o7, "0007")])
def test_status_umask_is_four_octal_digits(m, umask, want):
    m.process.fs.umask = umask
    assert field(text(m, "self/status"), "Umask") == want


def test_status_name_escapes_newline_and_backslash(m):
    m.task.comm = "a\nb\\c"
    assert field(text(m, "self/status"), "Name") == "a\\nb\\\\c"


def test_status_signal_sets(m):
    m.task.sigmask = (1 << 9) | (1 << 63)  # SIGUSR1 (10) and signal 64
    raw = lambda handler: struct.pack("<QQQQ", handler, 0, 0, 0)  # noqa: E731
    m.process.sighand.action = {2: raw(1), 15: raw(0x401000), 3: raw(0)}  # SIGINT ignored, SIGTERM caught
    m.send_sig(m.task, 10, force=False)
    status = text(m, "self/status")
    got = [field(status, n) for n in ("SigPnd", "SigBlk", "SigIgn", "SigCgt", "SigQ")]
    assert got == ["0000000000000200", "8000000000000200", "0000000000000002", "0000000000004000", "1/16384"], got


@pytest.mark.parametrize(
    "top,want", [(2, 64), (63, 64), (64, 128), (127, 128), (128, 256), (255, 256), (256, 512), (1023, 1024)]
)
def test_fdsize_follows_alloc_fdtable(m, top, want):
    m.process.files.install(m.process.files.get(1), lowest=top)
    assert (max_fds(m.process.files), field(text(m, "self/status"), "FDSize")) == (want, str(want))


def test_status_vm_lines_count_the_mappings(m):
    m.mem.map(0x10000000, 5 * 4096, 3, "")  # rw anonymous: data
    m.mem.map(0x20000000, 3 * 4096, 5, "")  # r-x anonymous: exec, not the program's
    status = text(m, "self/status")
    got = [field(status, n) for n in ("VmSize", "VmData", "VmExe", "VmLib", "VmStk")]
    assert got == ["     172 kB", "      20 kB", "       8 kB", "      12 kB", "     132 kB"], got


def test_thread_counts_and_pids_of_a_second_thread(m):
    t2 = m.new_task(m.process, cred=m.task.cred)
    status = text(m, f"1000/task/{t2.tid}/status", t2)
    got = [field(status, n) for n in ("Tgid", "Pid", "Threads", "NStgid", "NSpid")]
    assert got == ["1000", str(t2.tid), "2", "1000", str(t2.tid)], got
    assert walk(m, "thread-self", t2).path == f"/proc/1000/task/{t2.tid}"


@pytest.mark.parametrize(
    "reason,want", [("pipe_read", "S (sleeping)"), ("wait4", "S (sleeping)"), ("vfork", "D (disk sleep)")]
)
def test_state_of_a_sleeping_task(m, reason, want):
    m.block(m.task, reason)
    assert field(text(m, "self/status"), "State") == want


# ------------------------------------------------------------------ /proc/<pid>/stat


def test_stat_line_of_a_fresh_guest(m):
    p = m.process
    want = (
        f"1000 (prog) R 1 1000 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 0 {140 * 1024} 0 "
        f"18446744073709551615 4194304 4198401 {p.start_stack} 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 "
        f"4194304 4198401 {p.brk_start} {p.arg_start} {p.arg_end} {p.env_start} {p.env_end} 0\n"
    )
    got = text(m, "self/stat")
    assert got == want, f"want {want!r}\ngot  {got!r}"


def test_stat_has_the_hosts_number_of_fields(m):
    with open("/proc/self/stat") as f:
        host = f.read().rsplit(")", 1)[1].split()
    ours = text(m, "self/stat").rsplit(")", 1)[1].split()
    assert len(ours) == len(host) == 50, (len(ours), len(host))


def test_stat_of_a_thread_and_of_a_forked_child(m):
    t2 = m.new_task(m.process, cred=m.task.cred)
    thread = text(m, f"1000/task/{t2.tid}/stat").rsplit(")", 1)[1].split()
    assert (thread[6], thread[35]) == ("64", "-1"), "PF_FORKNOEXEC; a thread's exit_signal is -1"
    assert text(m, "1000/stat").rsplit(")", 1)[1].split()[17] == "2", "num_threads"


@pytest.mark.parametrize(
    "state,threads,whole,want",
    [("running", 1, True, "0"), ("blocked", 1, True, "1"), ("blocked", 2, True, "0"), ("blocked", 2, False, "1")],
)
def test_stat_wchan_says_not_running(m, state, threads, whole, want):
    """Field 35 is !task_is_running, shown for a thread or a single-threaded process."""
    if threads == 2:
        m.new_task(m.process, cred=m.task.cred)
    m.task.state = state
    path = "1000/stat" if whole else "1000/task/1000/stat"
    assert text(m, path).rsplit(")", 1)[1].split()[32] == want


def test_stat_comm_is_not_escaped_and_may_hold_parens(m):
    m.task.comm = "a) b"
    assert text(m, "self/stat").startswith("1000 (a) b) R ")


def test_stat_start_time_is_in_clock_ticks_since_boot(m):
    m.syscalls.clock_ns += 2_345_000_000
    t2 = m.new_task(m.process, cred=m.task.cred)
    assert text(m, f"1000/task/{t2.tid}/stat").rsplit(")", 1)[1].split()[19] == "234"


# ------------------------------------------------------------------ cmdline, comm, exe, maps


def test_cmdline_is_the_argv_strings(m):
    assert text(m, "self/cmdline") == "prog\0a b\0c\0"


def test_cmdline_follows_the_argv_bytes_in_guest_memory(m):
    m.mem.write(m.process.arg_start, b"XY")
    assert text(m, "self/cmdline") == "XYog\0a b\0c\0"


def test_cmdline_after_setproctitle_stops_at_the_first_nul(m):
    """The NUL ending the arguments overwritten: the title runs on into the
    environment up to its first NUL, which it includes (get_mm_proctitle)."""
    p = m.process
    n = p.arg_end - p.arg_start
    m.mem.write(p.arg_start, b"t" * n)
    assert text(m, "self/cmdline") == "t" * n + "A=1\0"


def test_setproctitle_text_is_at_most_a_page():
    m = machine(env=["E=" + "e" * 5000])
    p = m.process
    m.mem.write(p.arg_start, b"t" * (p.arg_end - p.arg_start))
    got = text(m, "self/cmdline")
    assert (len(got), got[-1]) == (4096, "e"), "no NUL within the page: the whole page"


def test_comm_reads_the_name_and_a_newline(m):
    assert text(m, "self/comm") == "prog\n"


def test_comm_write_renames_the_thread_to_15_bytes(m):
    f = walk(m, "self/comm").open(m.task, O_WRONLY)
    assert f.write(b"abc\ndefghijklmnopqrstu") == 22, "the whole count is consumed"
    assert m.task.comm == "abc\ndefghijklmn"
    assert text(m, "self/comm") == "abc\ndefghijklmn\n"


def test_comm_write_of_another_process_is_einval(m):
    child = m.new_process(comm="kid", parent=m.process)
    child.files = m.process.files.fork()
    kid = m.new_task(child, cred=m.task.cred)
    f = walk(m, f"{kid.tid}/comm").open(m.task, O_WRONLY)
    assert f.write(b"x") == -E.EINVAL


def test_exe_readlink_is_the_guests_path(m):
    assert walk(m, "self/exe").readlink(m.task) == "/opt/prog"


def test_maps_is_the_target_processs_maps(m):
    child = m.new_process(comm="kid", parent=m.process)
    child.files = m.process.files.fork()
    kid = m.new_task(child, cred=m.task.cred)
    child.mem.map(0x30000000, 4096, 1, "[kid]")
    vsyscall = "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n"
    assert text(m, f"{kid.tid}/maps") == child.mem.maps() + vsyscall != m.mem.maps() + vsyscall
    assert text(m, "self/maps") == m.mem.maps() + vsyscall


# ------------------------------------------------------------------ links and listing


@pytest.mark.parametrize("path", ["/proc", "/proc/self", "/proc/self/status", "/proc/uptime"])
def test_st_dev_is_the_hosts_procfs(m, path):
    assert walk(m, path[len("/proc") :] or "/").attrs(m.task).dev == os.stat(path, follow_symlinks=False).st_dev


def _proc_ino(m, path: str) -> int:
    root = ProcFs(m).root
    return (root.lookup(m.task, path) if path else root).attrs(m.task).ino


@pytest.mark.parametrize(
    "path,ino", [("self", 0xF0000000), ("thread-self", 0xF0000001), ("mounts", 0xF0000002), ("", 1)]
)
def test_fixed_inodes_are_the_hosts(m, path, ino):
    host = os.stat("/proc/" + path, follow_symlinks=False).st_ino
    assert (_proc_ino(m, path), host) == (ino, ino)


def test_top_level_inodes_follow_the_hosts_creation_order(m):
    """proc_alloc_inum numbers them in initcall order: the values vary with the build,
    the order does not."""
    host = {p: os.stat("/proc/" + p).st_ino for p in TOP_INOS}
    model = {p: _proc_ino(m, p) for p in TOP_INOS}
    assert sorted(TOP_INOS, key=model.get) == sorted(TOP_INOS, key=host.get), (model, host)
    assert all(0xF0000002 < ino < 0xF0001000 for ino in [*model.values(), *host.values()]), (model, host)


def test_self_and_thread_self_links(m):
    fs = ProcFs(m)
    assert (
        fs.root.lookup(m.task, "self").readlink(m.task),
        fs.root.lookup(m.task, "thread-self").readlink(m.task),
    ) == ("1000", "1000/task/1000")
    a = fs.root.lookup(m.task, "self").attrs(m.task)
    assert (oct(a.mode), a.ino, a.dev) == (oct(S.S_IFLNK | 0o777), 0xF0000000, PROC_DEV)


def test_root_lists_the_guests_processes_only(m):
    child = m.new_process(comm="kid", parent=m.process)
    child.files = m.process.files.fork()
    m.new_task(child, cred=m.task.cred)
    names = [n for n, _, _ in ProcFs(m).root.children(m.task)]
    assert names == [
        "mounts",
        "uptime",
        "cpuinfo",
        "loadavg",
        "meminfo",
        "filesystems",
        "self",
        "thread-self",
        "1000",
        "1001",
    ]


@pytest.mark.parametrize("path", ["", "self", "self/task/1000"])
def test_readdir_order_is_the_hosts_for_these_names(m, path):
    ours = [n for n, _, _ in walk(m, path or "/").children(m.task) if not n.isdigit()]
    host_dir = "/proc/" + path.replace("1000", str(os.getpid()))
    host = [n for n in os.listdir(host_dir) if n in ours]
    assert ours == host, f"host order {host}, model {ours}"


def test_pid_directory_entries_in_kernel_order(m):
    names = [n for n, _, _ in walk(m, "self").children(m.task)]
    assert names == [
        "task",
        "fd",
        "environ",
        "auxv",
        "status",
        "personality",
        "limits",
        "comm",
        "cmdline",
        "stat",
        "maps",
        "cwd",
        "root",
        "exe",
        "mounts",
        "mountinfo",
        "loginuid",
        "sessionid",
    ]


def test_environ_is_the_envp_strings(m):
    assert text(m, "self/environ") == "A=1\0"
    assert oct(walk(m, "self/environ").attrs(m.task).mode) == oct(S.S_IFREG | 0o400)


def test_cwd_and_root_links(m):
    m.process.fs.pwd = "/tmp"
    assert (walk(m, "self/cwd").readlink(m.task), walk(m, "self/root").readlink(m.task)) == ("/tmp", "/")


def test_auxv_is_the_exec_auxiliary_vector(m):
    raw = text(m, "self/auxv").encode("latin-1")
    pairs = list(struct.iter_unpack("<QQ", raw))
    assert pairs[-1] == (0, 0) and dict(pairs[:-1]) == {k: v for k, v in m.auxv.items() if k}, pairs
    assert pairs[:-1] == [(k, v) for k, v in m.auxv.items() if k], "in the order exec wrote them"


@pytest.mark.parametrize("path", ["99999", "01000", "self/statm", "self/fd/7", "self/task/99999", "sys"])
def test_what_is_not_modeled_is_enoent(m, path):
    assert walk(m, path) == -E.ENOENT


@pytest.mark.parametrize(
    "path,mode,uid",
    [
        ("self", S.S_IFDIR | 0o555, 1000),
        ("self/status", S.S_IFREG | 0o444, 1000),
        ("self/comm", S.S_IFREG | 0o644, 1000),
        ("self/fd", S.S_IFDIR | 0o500, 1000),
        ("self/exe", S.S_IFLNK | 0o777, 1000),
        ("uptime", S.S_IFREG | 0o444, 0),
        ("self/task", S.S_IFDIR | 0o555, 1000),
    ],
)
def test_modes_and_owners(m, path, mode, uid):
    a = walk(m, path).attrs(m.task)
    assert (oct(a.mode), a.uid, a.dev, a.blksize) == (oct(mode), uid, PROC_DEV, 1024), a


def test_fstat_of_an_open_proc_file_matches_stat(m):
    n = walk(m, "self/status")
    st = n.open(m.task, O_RDONLY).fstat()
    dev, ino, nlink, mode, uid, gid = struct.unpack_from("<QQQIII", st)
    a = n.attrs(m.task)
    assert (dev, ino, nlink, mode, uid, gid) == (a.dev, a.ino, a.nlink, a.mode, a.uid, a.gid)


# ------------------------------------------------------------------ write opens


@pytest.mark.parametrize(
    "path", ["self/status", "self/stat", "self/maps", "self/cmdline", "uptime", "meminfo", "self/mounts"]
)
def test_unprivileged_write_open_is_eacces(m, path):
    assert walk(m, path).open(m.task, O_WRONLY) == -E.EACCES


@pytest.mark.parametrize(
    "path,errno_", [("self/status", E.EINVAL), ("self/maps", E.EINVAL), ("uptime", E.EIO), ("meminfo", E.EIO)]
)
def test_root_write_open_succeeds_and_write_fails_as_linux(path, errno_):
    m = machine(uid=0, gid=0, groups=[])
    f = walk(m, path).open(m.task, O_RDWR)
    assert not isinstance(f, int), f"root opens {path} for writing: errno {-f}"
    assert f.write(b"x") == -errno_


@pytest.mark.parametrize("path", ["self", "self/fd"])
def test_write_open_of_a_directory_is_eisdir(path):
    m = machine(uid=0, gid=0, groups=[])
    assert walk(m, path).open(m.task, O_WRONLY) == -E.EISDIR


# ------------------------------------------------------------------ fd/


def test_fd_directory_lists_the_live_descriptors(m):
    m.process.files.close(2)
    m.process.files.install(m.process.files.get(1), lowest=9)
    d = walk(m, "self/fd")
    assert [n for n, _, t in d.children(m.task) if t == 10] == ["0", "1", "9"]
    assert d.attrs(m.task).size == 3, "proc_fd_getattr: the number of open descriptors"


def test_fd_links_name_the_descriptions_and_their_modes(m):
    got = [
        (walk(m, f"self/fd/{fd}").readlink(m.task), oct(walk(m, f"self/fd/{fd}").attrs(m.task).mode)) for fd in (0, 1)
    ]
    assert got == [("pipe:[3]", oct(S.S_IFLNK | 0o500)), ("pipe:[4]", oct(S.S_IFLNK | 0o300))], got
    assert walk(m, "self/fd/0").attrs(m.task).size == 64


def test_fd_link_follows_to_the_open_file(m):
    assert walk(m, "self/fd/1").follow(m.task) is m.process.files.get(1)


def test_reopening_a_pipe_end_gives_a_new_end_of_the_same_pipe(m):
    pipe = Pipe(ino=77)
    rd = PipeEnd(pipe, write=False)
    fd = m.process.files.install(rd)
    w = walk(m, f"self/fd/{fd}").open(m.task, O_WRONLY)
    assert (w.writable, w.readable, pipe.writers, w.proc_link()) == (True, False, 1, "pipe:[77]")
    assert w.write(b"via proc") == 8 and rd.read(100) == b"via proc"
    w.get().put()
    assert pipe.writers == 0, "closing the reopened end drops its writer"


def test_reopening_a_proc_file_gives_a_description_of_its_own(m):
    f = walk(m, "self/comm").open(m.task, O_RDONLY)
    fd = m.process.files.install(f)
    first = f.read(100, None)
    m.task.comm = "renamed"
    again = walk(m, f"self/fd/{fd}").open(m.task, O_RDONLY)
    got = (first, f.read(100, None), again.read(100, None))
    assert got == (b"prog\n", b"", b"renamed\n"), "the first open is at its end; the reopened one reads anew"


def test_reopening_a_host_stdin_file_reads_it_from_its_start(tmp_path):
    (tmp_path / "in").write_bytes(b"stdin file")
    hfd = os.open(tmp_path / "in", os.O_RDONLY)
    try:
        m = machine(stdin=hfd)
    finally:
        os.close(hfd)
    fd0 = m.process.files.get(0)
    assert fd0.read(5, lambda: False) == b"stdin"
    again = walk(m, "self/fd/0").open(m.task, O_RDONLY)
    assert again.read(100, lambda: False) == b"stdin file", "its own offset, at 0"
    assert fd0.read(100, lambda: False) == b" file"
    assert walk(m, "self/fd/0").open(m.task, O_WRONLY) == -E.ENXIO, "never written through /proc"
    again.release()


def test_reopening_the_stdin_pipe_for_writing_is_enxio(m):
    assert walk(m, "self/fd/0").open(m.task, O_WRONLY) == -E.ENXIO


# ------------------------------------------------------------------ system-wide files


def test_uptime_is_the_virtual_clock(m):
    m.syscalls.clock_ns += 12_345_678_901
    assert text(m, "uptime") == "12.34 0.00\n"


def test_meminfo_agrees_with_sysinfo(m):
    buf = m.mem.vmas[-1].start
    assert m.syscalls.sys_sysinfo(m.task, None, buf) == 0
    total, free = struct.unpack_from("<QQ", m.mem.read(buf + 32, 16))
    lines = text(m, "meminfo").splitlines()
    assert lines[:3] == [
        f"MemTotal:       {total >> 10:>8} kB",
        f"MemFree:        {free >> 10:>8} kB",
        f"MemAvailable:   {free >> 10:>8} kB",
    ], (lines, total, free)
    assert total == 4 << 30


def test_loadavg_counts_tasks_and_the_last_pid(m):
    t2 = m.new_task(m.process, cred=m.task.cred)
    t2.state = "blocked"
    assert text(m, "loadavg") == f"0.00 0.00 0.00 1/2 {t2.tid}\n"


def test_mounts_are_the_guests_view(tmp_path):
    m = machine(grant_dirs=[str(tmp_path)])
    lines = text(m, "self/mounts").splitlines()
    got = [line.split()[1:4:2] for line in lines]
    assert got == [
        ["/", "ro,relatime"],
        [str(tmp_path), "rw,relatime"],
        ["/proc", "rw,relatime"],
        ["/dev", "rw,relatime,mode=755"],
    ], lines
    assert lines[-2:] == ["proc /proc proc rw,relatime 0 0", "devtmpfs /dev devtmpfs rw,relatime,mode=755 0 0"]
    assert walk(m, "mounts").readlink(m.task) == "self/mounts"


def test_mounts_show_a_granted_root_read_write():
    m = machine(grant_dirs=["/"])
    assert text(m, "self/mounts").splitlines()[0].split()[1:4:2] == ["/", "rw,relatime"]


def test_a_zombie_keeps_its_directory_without_an_mm(m):
    from kernel_model.kernel.signals import RunResult

    child = m.new_process(comm="kid", parent=m.process)
    child.files = m.process.files.fork()
    kid = m.new_task(child, cred=m.task.cred)
    child.exit_result = RunResult("exit", exit_code=3)
    kid.state, kid.exit_code = "dead", 3
    status = text(m, f"{kid.tid}/status")
    got = (field(status, "State"), field(status, "FDSize"), "VmSize" in status, "Umask" in status)
    assert got == ("Z (zombie)", "0", False, False), "no mm, no files, no fs_struct"
    stat = text(m, f"{kid.tid}/stat").rsplit(")", 1)[1].split()
    got = (stat[0], stat[-1], stat[20], stat[6], stat[32])
    assert got == ("Z", "768", "0", str(0x804C), "1"), (
        "exit_code is the wait status; no vsize; do_exit's flags; not running"
    )
    assert (text(m, f"{kid.tid}/cmdline"), walk(m, f"{kid.tid}/exe").readlink(m.task)) == ("", -E.ENOENT)


def test_f_flags_of_an_open_proc_file(m):
    """F_GETFL as the host answers for open("/proc/self/status", O_RDONLY|O_NONBLOCK)."""
    assert oct(walk(m, "self/status").open(m.task, O_RDONLY | 0o4000).f_flags) == oct(0o104000)


def test_reopening_a_pipe_read_write_counts_a_reader_and_a_writer(m):
    """fifo_open with O_RDWR: one description that reads and writes, never waiting."""
    pipe = Pipe(ino=78)
    fd = m.process.files.install(PipeEnd(pipe, write=True))
    both = walk(m, f"self/fd/{fd}").open(m.task, O_RDWR)
    assert (both.readable, both.writable, pipe.readers, pipe.writers) == (True, True, 1, 2)
    assert both.write(b"loop") == 4 and both.read(10) == b"loop"
    both.get().put()
    assert (pipe.readers, pipe.writers) == (0, 1)


def test_reopening_with_o_nonblock_keeps_it_on_the_new_end(m):
    pipe = Pipe(ino=79)
    fd = m.process.files.install(PipeEnd(pipe, write=True))
    rd = walk(m, f"self/fd/{fd}").open(m.task, O_RDONLY | 0o4000)
    assert (rd.nonblock, m.process.files.get(fd).nonblock) == (True, False)


def test_stat_names_the_controlling_terminal():
    master, slave = os.openpty()
    try:
        m = machine(stdin=slave)
        rdev = os.fstat(slave).st_rdev
        want = (os.minor(rdev) & 0xFF) | (os.major(rdev) << 8) | ((os.minor(rdev) & ~0xFF) << 12)
        fields = text(m, "self/stat").rsplit(")", 1)[1].split()
        assert (fields[4], fields[5]) == (str(want), "1000"), "tty_nr (new_encode_dev) and tpgid"
    finally:
        os.close(master)
        os.close(slave)


def test_stat_without_a_terminal_has_no_tty(m):
    fields = text(m, "self/stat").rsplit(")", 1)[1].split()
    assert (fields[4], fields[5]) == ("0", "-1")


def test_reopening_a_file_with_a_path_opens_it_by_that_path(tmp_path):
    (tmp_path / "f").write_bytes(b"0123456789")
    m = machine(grant_dirs=[str(tmp_path)], uid=0, gid=0, groups=[])  # pytest's tmp is 0700 root's
    first = m.syscalls.open_guest_path(m.task, str(tmp_path / "f"), O_RDONLY)
    fd = m.process.files.install(first)
    assert first.read(4, None) == b"0123"
    again = walk(m, f"self/fd/{fd}").open(m.task, O_RDWR)
    assert again is not first and again.read(3, None) == b"012", "a description of its own"
    assert again.write(b"X") == 1 and (tmp_path / "f").read_bytes() == b"012X456789"


def test_reopening_a_read_only_sysroot_file_for_writing_is_erofs(build_c):
    exe = build_c("hello.c", "-static")
    m = machine(uid=0, gid=0, groups=[])
    fd = m.process.files.install(m.syscalls.open_guest_path(m.task, exe, O_RDONLY))
    assert walk(m, f"self/fd/{fd}").open(m.task, O_WRONLY) == -E.EROFS


def test_every_node_answers_for_live_zombie_and_threaded_processes(m):
    """The whole tree, walked without following links: every node gives attributes,
    every file opens and reads, every link reads - values or errnos, never an
    exception (a zombie, a second thread and a sleeping task included)."""
    from kernel_model.kernel.signals import RunResult

    t2 = m.new_task(m.process, cred=m.task.cred)
    t2.state = "blocked"
    child = m.new_process(comm="kid", parent=m.process)
    child.files = m.process.files.fork()
    kid = m.new_task(child, cred=m.task.cred)
    child.exit_result = RunResult("exit", exit_code=1)
    kid.state, kid.exit_code = "dead", 1
    seen = 0

    def visit(node, depth):
        nonlocal seen
        seen += 1
        a = node.attrs(m.task)
        if S.S_ISDIR(a.mode) and depth < 6:
            for name, _, _ in node.children(m.task):
                visit(node.lookup(m.task, name), depth + 1)
        elif S.S_ISREG(a.mode):
            f = node.open(m.task, O_RDONLY)
            assert isinstance(f, int) or isinstance(f.read(1 << 20, None), (bytes, int))
        elif S.S_ISLNK(a.mode):
            assert isinstance(node.readlink(m.task), (str, int))

    visit(ProcFs(m).root, 0)
    assert seen > 60, seen


def test_a_leader_that_exited_before_its_threads(m):
    """/proc/PID is the leader's view: a zombie without mm, files or fs_struct while
    the group lives; Threads and task/ still count it."""
    t2 = m.new_task(m.process, cred=m.task.cred)
    m.task.state, m.task.exit_code = "dead", 0
    m.process.tasks.remove(m.task)
    status = text(m, "1000/status", t2)
    got = [field(status, n) for n in ("State", "Threads", "FDSize")] + ["VmSize" in status, "Umask" in status]
    assert got == ["Z (zombie)", "2", "0", False, False], got
    assert (text(m, "1000/cmdline", t2), walk(m, "1000/fd", t2).children(t2)) == ("", [])
    assert [n for n, _, _ in walk(m, "1000/task", t2).children(t2)] == ["1000", str(t2.tid)]
    assert "VmSize" in text(m, f"1000/task/{t2.tid}/status", t2), "the live thread still has the mm"


@pytest.mark.parametrize("name, mode", [("loginuid", 0o644), ("sessionid", 0o444)])
def test_audit_ids_are_unset_as_without_a_login_session(m, name, mode):
    """AUDIT_UID_UNSET / AUDIT_SID_UNSET, printed "%u" without a newline: glibc's
    getlogin reads loginuid and answers ENXIO for it (busybox logname's message)."""
    assert text(m, f"self/{name}") == "4294967295", text(m, f"self/{name}")
    host = os.stat(f"/proc/self/{name}").st_mode & 0o777
    assert host == mode, f"the host's /proc/self/{name} is {host:o}"


def test_limits_text_is_the_kernels_for_the_same_limits(m):
    """/proc/self/limits of this test process, and the model's with the same limits."""
    import resource

    m.process.signal.rlim = [
        tuple(v if v != resource.RLIM_INFINITY else (1 << 64) - 1 for v in resource.getrlimit(r)) for r in range(16)
    ]
    with open("/proc/self/limits") as f:
        host = f.read()
    assert text(m, "self/limits") == host, f"host:\n{host}\nmodel:\n{text(m, 'self/limits')}"


def test_personality_file_follows_the_persona(m):
    m.process.personality = 0x0008
    assert text(m, "self/personality") == "00000008\n"
