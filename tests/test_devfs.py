"""The modeled /dev (kernel_model.fs.dev): its nodes as this machine's devtmpfs shows them, and
what the devices do when opened, on real Machine objects."""

from __future__ import annotations

import errno as E
import os
import select
import stat as S
import struct
import termios

import pytest

from emu.machine import Machine
from kernel_model.fs.dev import DEVTMPFS_DEV, DevFs
from kernel_model.fs.file import TCGETS

O_RDONLY, O_WRONLY, O_RDWR, O_DIRECTORY = 0, 1, 2, 0o200000


def machine(**kw) -> Machine:
    return Machine.from_asm("_start:\n    hlt", **kw)


@pytest.fixture
def dev():
    m = machine()
    return DevFs(m), m.task


def node(dev, name):
    fs, task = dev
    n = fs.root.lookup(task, name)
    assert not isinstance(n, int), f"/dev/{name}: lookup gave errno {n}"
    return n


def opened(dev, name, flags=O_RDONLY):
    f = node(dev, name).open(dev[1], flags)
    assert not isinstance(f, int), f"open /dev/{name}: errno {-f}"
    return f


# ------------------------------------------------------------------ the nodes


@pytest.mark.parametrize(
    "name,major,minor,ino",
    [
        ("null", 1, 3, 3),
        ("zero", 1, 5, 4),
        ("full", 1, 7, 5),
        ("random", 1, 8, 6),
        ("urandom", 1, 9, 7),
        ("tty", 5, 0, 9),
    ],
)
def test_char_device_attrs_are_devtmpfs_ones(dev, name, major, minor, ino):
    a = node(dev, name).attrs(dev[1])
    got = (oct(a.mode), os.major(a.rdev), os.minor(a.rdev), a.ino, a.dev, a.uid, a.gid, a.size, a.nlink)
    want = (oct(S.S_IFCHR | 0o666), major, minor, ino, DEVTMPFS_DEV, 0, 0, 0, 1)
    assert got == want, f"/dev/{name}: want {want}, got {got}"


@pytest.mark.parametrize("name", ["null", "zero", "full", "random", "urandom", "tty"])
def test_char_device_attrs_match_the_host(dev, name):
    """Mode, rdev, inode and st_dev as `stat /dev/NAME` shows them on this machine."""
    host = os.stat(f"/dev/{name}")
    a = node(dev, name).attrs(dev[1])
    got = (a.mode, a.rdev, a.ino, a.dev)
    want = (host.st_mode, host.st_rdev, host.st_ino, host.st_dev)
    assert got == want, f"/dev/{name}: host {want}, model {got}"


@pytest.mark.parametrize(
    "name,target",
    [
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("fd", "/proc/self/fd"),
    ],
)
def test_stdio_links_point_into_proc_self_fd(dev, name, target):
    n = node(dev, name)
    a = n.attrs(dev[1])
    assert (n.readlink(dev[1]), n.follow(dev[1])) == (target, target)
    assert (S.S_ISLNK(a.mode), a.mode & 0o777, a.size) == (True, 0o777, len(target)), a


def test_directory_lists_every_node_with_its_type(dev):
    fs, task = dev
    got = fs.root.children(task)
    want = [
        ("stderr", 114, 10),
        ("stdout", 113, 10),
        ("stdin", 112, 10),
        ("fd", 111, 10),
        ("pts", 1, 4),
        ("tty", 9, 2),
        ("urandom", 7, 2),
        ("random", 6, 2),
        ("full", 5, 2),
        ("zero", 4, 2),
        ("null", 3, 2),
    ]
    assert got == want, got


def test_directory_order_is_the_hosts_for_these_names(dev):
    fs, task = dev
    ours = [name for name, _, _ in fs.root.children(task)]
    host = [name for name in os.listdir("/dev") if name in ours]
    assert ours == host, f"host readdir order {host}, model {ours}"
    a = fs.root.attrs(task)
    assert (oct(a.mode), a.ino, a.dev, a.nlink, a.size) == (oct(S.S_IFDIR | 0o755), 1, DEVTMPFS_DEV, 3, 260), a


def test_unknown_name_is_enoent(dev):
    fs, task = dev
    assert fs.root.lookup(task, "sda") == -E.ENOENT


# ------------------------------------------------------------------ the devices


def test_null_reads_end_of_file_and_swallows_writes(dev):
    f = opened(dev, "null", O_RDWR)
    assert (f.read(100, None), f.write(b"x" * 5000), f.pread(10, 5)) == (b"", 5000, b"")


def test_zero_reads_zeros_bounded_per_read(dev):
    f = opened(dev, "zero")
    assert f.read(7, None) == bytes(7)
    big = f.read(1 << 40, None)
    assert len(big) == 1 << 20 and not any(big), f"one read copies at most 1 MiB, got {len(big)}"


def test_full_write_is_enospc_and_reads_zeros(dev):
    f = opened(dev, "full", O_RDWR)
    assert (f.write(b"a"), f.read(3, None)) == (-E.ENOSPC, bytes(3))


@pytest.mark.parametrize("name", ["null", "zero", "full"])
def test_memory_devices_seek_to_zero(dev, name):
    assert opened(dev, name).lseek(100, 0) == 0


def test_read_on_a_write_only_device_is_ebadf(dev):
    assert opened(dev, "zero", O_WRONLY).read(4, None) == -E.EBADF


def test_open_with_o_directory_is_enotdir(dev):
    assert node(dev, "null").open(dev[1], O_DIRECTORY) == -E.ENOTDIR


@pytest.mark.parametrize("name", ["urandom", "random"])
def test_random_bytes_are_the_seeds(name):
    def first_bytes(seed):
        m = machine(seed=seed)
        return DevFs(m).root.lookup(m.task, name).open(m.task, O_RDONLY).read(32, None)

    a, b, c = first_bytes(7), first_bytes(7), first_bytes(8)
    assert a == b, "the same seed gives the same bytes"
    assert a != c and len(a) == 32, "another seed gives other bytes"


def test_urandom_accepts_writes(dev):
    assert opened(dev, "urandom", O_WRONLY).write(b"entropy") == 7


def test_fstat_of_an_open_device_matches_its_attrs(dev):
    f = opened(dev, "null")
    st = f.fstat()
    dev_, ino, nlink, mode, uid, gid, _, rdev = struct.unpack_from("<QQQIIIiQ", st)
    a = node(dev, "null").attrs(dev[1])
    assert (dev_, ino, nlink, mode, uid, gid, rdev) == (a.dev, a.ino, a.nlink, a.mode, a.uid, a.gid, a.rdev)
    assert struct.unpack_from("<q", st, 72)[0] == a.atime_ns // 10**9, "st_atime is the inode's"
    assert f.proc_link() == "/dev/null"


def test_tcgets_on_null_is_enotty(dev):
    assert opened(dev, "null").ioctl(TCGETS, 0x400000, dev[1].process.mem) == -E.ENOTTY


# ------------------------------------------------------------------ /dev/tty


def test_tty_without_a_terminal_is_enxio(dev):
    assert node(dev, "tty").open(dev[1], O_RDWR) == -E.ENXIO


def test_tty_with_a_terminal_stdin_is_that_terminal():
    master, slave = os.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[3] &= ~termios.ECHO  # only what the guest writes comes back
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    try:
        m = machine(stdin=slave)
        fs = DevFs(m)
        f = fs.root.lookup(m.task, "tty").open(m.task, O_RDWR)
        assert not isinstance(f, int), f"open /dev/tty with a terminal stdin: errno {-f}"
        os.write(master, b"typed\n")
        assert f.read(100, lambda: False) == b"typed\n"
        assert f.write(b"shown") == 5
        assert select.select([master], [], [], 10)[0], "the terminal never got the write"
        assert os.read(master, 100) == b"shown"
        assert f.ioctl(TCGETS, m.mem.vmas[-1].start, m.mem) == 0, "TCGETS answers from the terminal"
        assert f.lseek(0, 0) == -E.ESPIPE
        f.release()
    finally:
        os.close(master)
        os.close(slave)


def test_tty_writes_follow_the_stdio_sink_of_that_terminal():
    """With stdio="host" and fd 1 a terminal, /dev/tty writes go where the guest's
    stdout goes (captured here), not around it."""
    master, slave = os.openpty()
    saved = os.dup(1)
    try:
        os.dup2(slave, 1)
        m = machine(stdio="host", capture_output=True)
        f = DevFs(m).root.lookup(m.task, "tty").open(m.task, O_WRONLY)
        assert not isinstance(f, int), f
        assert f.write(b"hi") == 2
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(master)
        os.close(slave)
    assert bytes(m.stdout) == b"hi", f"stdout captured {bytes(m.stdout)!r}"


@pytest.mark.parametrize(
    "flags,want",
    [
        (O_WRONLY | 0o2000 | 0o4000 | 0o100 | 0o1000 | 0o2000000, 0o106001),  # APPEND NONBLOCK CREAT TRUNC CLOEXEC
        (O_RDWR | 0o10000 | 0o1000000, 0o1110002),  # DSYNC NOATIME
        (O_RDONLY, 0o100000),
    ],
)
def test_f_flags_keep_what_the_kernel_keeps(dev, flags, want):
    """F_GETFL of /dev/null as the host answers for the same open flags."""
    assert oct(opened(dev, "null", flags).f_flags) == oct(want)


def test_tty_nonblocking_read_without_input_is_eagain():
    master, slave = os.openpty()
    try:
        m = machine(stdin=slave)
        f = DevFs(m).root.lookup(m.task, "tty").open(m.task, O_RDONLY | 0o4000)
        assert (f.read(10, lambda: False), f.poll() & 1) == (-E.EAGAIN, 0)
        os.write(master, b"k\n")
        assert select.select([slave], [], [], 10)[0]
        assert (f.poll() & 1, f.read(10, lambda: False)) == (1, b"k\n")
        f.release()
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.parametrize(
    "mode,want",
    [
        (S.S_IFCHR | 0o666, 2),
        (S.S_IFLNK | 0o777, 10),
        (S.S_IFDIR | 0o755, 4),
        (S.S_IFREG | 0o444, 8),
        (S.S_IFIFO | 0o600, 1),
    ],
)
def test_dtype_of_a_mode(mode, want):
    from kernel_model.fs.fs_types import dtype_of

    assert dtype_of(mode) == want


def test_pts_is_empty_without_a_terminal(dev):
    assert node(dev, "pts").children(dev[1]) == []


def test_pts_holds_the_terminal_ttyname_looks_for():
    """/dev/pts/N is the terminal's inode: what ttyname() compares with fstat(0)."""
    master, slave = os.openpty()
    try:
        m = machine(stdin=slave)
        number = os.ttyname(slave).rsplit("/", 1)[1]
        pts = DevFs(m).root.lookup(m.task, "pts")
        assert [n for n, _, t in pts.children(m.task) if t == 2] == [number]
        a = pts.lookup(m.task, number).attrs(m.task)
        fd0 = struct.unpack_from("<QQQIIIiQ", m.process.files.get(0).fstat())
        assert (a.dev, a.ino, a.mode, a.rdev) == (fd0[0], fd0[1], fd0[3], fd0[7]), (a, fd0)
        assert m.process.files.get(0).proc_link() == f"/dev/pts/{number}"
        f = pts.lookup(m.task, number).open(m.task, O_RDWR)
        assert f.write(b"x") == 1 and os.read(master, 10).endswith(b"x")
        f.release()
    finally:
        os.close(master)
        os.close(slave)
