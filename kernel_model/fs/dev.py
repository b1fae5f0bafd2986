"""The guest's ``/dev``: a devtmpfs holding the memory devices (drivers/char/mem.c),
the random devices (drivers/char/random.c), ``/dev/tty`` (drivers/tty/tty_io.c) and
the links udev/systemd create to ``/proc/self/fd``.

Modes, device numbers, inode numbers and ``st_dev`` are the ones this machine's
devtmpfs shows (``stat /dev/null`` ...): the inodes devtmpfs creates at boot in a fixed
order.  Times are the modeled boot time (the virtual clock's epoch).

* ``null``: reads end of file, writes are swallowed; ``zero``: reads zeros (at most
  ``READ_CHUNK`` bytes per read), writes swallowed; ``full``: reads zeros, writes are
  ENOSPC.  All three seek to 0 whatever is asked (``null_lseek``).
* ``random``, ``urandom``: bytes of the machine's generator (the one behind getrandom
  and AT_RANDOM, seeded by ``Machine(seed=...)``: the same seed gives the same bytes);
  writes are accepted (``write_pool``) and change nothing.  ``noop_llseek``.
* ``tty``: the controlling terminal.  The guest has one when a descriptor 0-2 it was
  started with is a host terminal (``stdio="host"`` or a terminal as stdin); opening
  ``/dev/tty`` then reads and writes that terminal, as tty_open's redirection to
  ``current->signal->tty`` does.  Without one, open is ENXIO.
* ``pts/N``: the controlling terminal again, when it is a pseudo-terminal (what
  ttyname() looks for).
* ``stdin``/``stdout``/``stderr``/``fd``: symlinks to ``/proc/self/fd/0..2`` and
  ``/proc/self/fd``.
"""

from __future__ import annotations

import errno as E
import os
import select
import stat as S
from types import MappingProxyType

from kernel_model.fs.file import READ_CHUNK, HostInput, OpenFile, OutputSink, OwnsHostFd, attrs_stat_bytes, tty_ioctl
from kernel_model.fs.fs_types import Attrs, SpecialNode
from kernel_model.fs.libfs import DirNode, LinkNode, access_mode, keep_open_flags, may_open

DEVTMPFS_DEV = os.makedev(0, 6)  # st_dev of the host's devtmpfs (0:6)
DEVPTS_DEV = os.makedev(0, 24)  # and of its devpts (0:24), when no terminal tells
BOGO_DIRENT_SIZE = 20  # shmem: a directory's size grows by this per entry
POLL_SLICE_MS = 50
O_NONBLOCK = 0o4000
CHR_MODE = S.S_IFCHR | 0o666
# name: (major, minor, inode) as devtmpfs numbers them on this kernel
CHAR_DEVICES = MappingProxyType(
    {
        "null": (1, 3, 3),
        "zero": (1, 5, 4),
        "full": (1, 7, 5),
        "random": (1, 8, 6),
        "urandom": (1, 9, 7),
        "tty": (5, 0, 9),
    }
)
LINKS = MappingProxyType(
    {
        "fd": ("/proc/self/fd", 111),
        "stdin": ("/proc/self/fd/0", 112),
        "stdout": ("/proc/self/fd/1", 113),
        "stderr": ("/proc/self/fd/2", 114),
    }
)
# readdir order: the host's (newest entry first), restricted to the modeled nodes
ORDER = ("stderr", "stdout", "stdin", "fd", "tty", "urandom", "random", "full", "zero", "null")


class DevFs:
    """The /dev mount of one machine.  ``root`` is its directory node."""

    def __init__(self, machine):
        self.m = machine
        self.ctty = ControllingTerminal.of(machine)
        self.nodes = {name: CharDevNode(self, name, *CHAR_DEVICES[name]) for name in CHAR_DEVICES}
        for name, (target, ino) in LINKS.items():
            self.nodes[name] = DevLink(self, target, ino)
        self.pts = PtsDir(self)
        self.root = DevDir(self)

    def boot_ns(self) -> int:
        """The modeled boot (devtmpfs' creation): the virtual clock's epoch."""
        sc = self.m.syscalls
        return sc.clock_ns - sc.boot_clock_ns()

    def attrs(self, mode: int, ino: int, *, rdev: int = 0, size: int = 0, nlink: int = 1) -> Attrs:
        t = self.boot_ns()
        return Attrs(
            mode=mode,
            ino=ino,
            dev=DEVTMPFS_DEV,
            nlink=nlink,
            uid=0,
            gid=0,
            rdev=rdev,
            size=size,
            blksize=4096,
            blocks=0,
            atime_ns=t,
            mtime_ns=t,
            ctime_ns=t,
        )


class DevLink(LinkNode):
    """A devtmpfs symlink (mode 0777, its size the target's length)."""

    def __init__(self, fs: DevFs, target: str, ino: int):
        super().__init__(target)
        self.fs, self.ino = fs, ino

    def attrs(self, task):
        return self.fs.attrs(S.S_IFLNK | 0o777, self.ino, size=len(self.target))


class DevDir(DirNode):
    """devtmpfs' root: mode 0755, the size shmem gives a directory of these entries."""

    path = "/dev"

    def __init__(self, fs: DevFs):
        self.fs = fs

    def attrs(self, task):
        size = (3 + len(ORDER)) * BOGO_DIRENT_SIZE
        return self.fs.attrs(S.S_IFDIR | 0o755, 1, size=size, nlink=3)

    def entries(self, task):
        out = [(name, self.fs.nodes[name]) for name in ORDER]
        return out[:4] + [("pts", self.fs.pts)] + out[4:]  # the host's place for it


class PtsDir(DirNode):
    """/dev/pts (a devpts mount): the controlling terminal's pseudo-terminal, when it is
    one, so that ttyname() finds the name /proc/self/fd gives (no ptmx: opening new
    pseudo-terminals is not modeled).  Its st_dev is the terminal's."""

    path = "/dev/pts"

    def __init__(self, fs: DevFs):
        self.fs = fs

    def attrs(self, task):
        st = self.fs.ctty.host_stat()
        dev = st.st_dev if st is not None else DEVPTS_DEV
        t = self.fs.boot_ns()
        return Attrs(
            mode=S.S_IFDIR | 0o755,
            ino=1,
            dev=dev,
            nlink=2,
            uid=0,
            gid=0,
            size=0,
            blksize=1024,
            atime_ns=t,
            mtime_ns=t,
            ctime_ns=t,
        )

    def entries(self, task):
        number = self.fs.ctty.pts_number()
        return [(number, PtsNode(self.fs, number))] if number is not None else []


class PtsNode(SpecialNode):
    """/dev/pts/N of the controlling terminal: the terminal's own inode as the host
    shows it (mode, owner, rdev, inode, st_dev, the same fstat of the guest's stdio
    reports); opening it opens the terminal, as /dev/tty does."""

    def __init__(self, fs: DevFs, number: str):
        self.fs = fs
        self.path = "/dev/pts/" + number

    def attrs(self, task):
        st = self.fs.ctty.host_stat()
        if st is None:
            return self.fs.attrs(CHR_MODE, 0)
        return Attrs(
            mode=st.st_mode,
            ino=st.st_ino,
            dev=st.st_dev,
            nlink=st.st_nlink,
            uid=st.st_uid,
            gid=st.st_gid,
            rdev=st.st_rdev,
            size=0,
            blksize=1024,
            atime_ns=st.st_atime_ns,
            mtime_ns=st.st_mtime_ns,
            ctime_ns=st.st_ctime_ns,
        )

    def open(self, task, flags):
        a = self.attrs(task)
        err = may_open(a.mode, flags, getattr(task, "cred", None), a.uid, a.gid)
        if err:
            return err
        readable, writable = access_mode(flags)
        f = self.fs.ctty.open(self, readable, writable)
        return f if isinstance(f, int) else keep_open_flags(f, flags)


class CharDevNode(SpecialNode):
    """One character device inode (``init_special_inode``: open goes to the driver's
    file_operations for its major:minor)."""

    def __init__(self, fs: DevFs, name: str, major: int, minor: int, ino: int):
        self.fs = fs
        self.name = name
        self.path = "/dev/" + name
        self.rdev = os.makedev(major, minor)
        self.ino = ino

    def attrs(self, task):
        return self.fs.attrs(CHR_MODE, self.ino, rdev=self.rdev)

    def open(self, task, flags):
        err = may_open(CHR_MODE, flags, getattr(task, "cred", None))
        if err:
            return err
        readable, writable = access_mode(flags)
        if self.name == "tty":
            f = self.fs.ctty.open(self, readable, writable)
        else:
            kind = {"null": NullFile, "zero": ZeroFile, "full": FullFile}.get(self.name, RandomFile)
            f = kind(self, readable, writable)
        return f if isinstance(f, int) else keep_open_flags(f, flags)


class DeviceFile(OpenFile):
    """An open character device: access mode from the open, fstat the inode's."""

    def __init__(self, node: CharDevNode, readable: bool, writable: bool):
        super().__init__()
        self.node = node
        self.readable, self.writable = readable, writable

    def attrs(self):
        return self.node.attrs(None)

    def fstat(self):
        return attrs_stat_bytes(self.attrs())

    def proc_link(self):
        return self.node.path

    def pread(self, count, offset):
        return self.read(count, None) if self.readable else -E.EBADF

    def lseek(self, offset, whence):
        return 0  # null_lseek


class NullFile(DeviceFile):
    """read_null / write_null."""

    def read(self, count, interrupted):
        return b"" if self.readable else -E.EBADF

    def write(self, data):
        return len(data) if self.writable else -E.EBADF


class ZeroFile(NullFile):
    """read_iter_zero: zeros, bounded per read; writes as /dev/null."""

    def read(self, count, interrupted):
        return bytes(min(count, READ_CHUNK)) if self.readable else -E.EBADF


class FullFile(ZeroFile):
    """write_full: ENOSPC."""

    def write(self, data):
        return -E.ENOSPC if self.writable else -E.EBADF


class RandomFile(NullFile):
    """random_read_iter / urandom_read_iter from the machine's seeded generator."""

    def read(self, count, interrupted):
        if not self.readable:
            return -E.EBADF
        return self.node.fs.m.syscalls.rng.randbytes(min(count, READ_CHUNK))

    def lseek(self, offset, whence):
        return 0  # noop_llseek: f_pos stays 0


class ControllingTerminal(OwnsHostFd):
    """The guest session's terminal (``signal->tty``): a host terminal among the
    descriptors 0-2 the machine was built with, or none.  Kept as a duplicate of that
    host descriptor for the machine's lifetime."""

    def __init__(self, host_fd: int | None, sink_fd: int | None):
        self.own_host_fd(host_fd)
        self.sink_fd = sink_fd  # 1 or 2 when a stdio sink is that terminal

    def pts_number(self) -> str | None:
        """N when the terminal is /dev/pts/N (a pseudo-terminal), else None."""
        if self.fd is None:
            return None
        try:
            name = os.ttyname(self.fd)
        except OSError:
            return None
        head, _, number = name.rpartition("/")
        return number if head == "/dev/pts" and number.isdigit() else None

    def host_stat(self) -> os.stat_result | None:
        try:
            return os.fstat(self.fd) if self.fd is not None else None
        except OSError:
            return None

    @classmethod
    def of(cls, machine) -> "ControllingTerminal":
        table = machine.main_process.files
        for fd in (0, 1, 2):
            f = table.get(fd)
            host = f.fd if isinstance(f, HostInput) else f.host_fd if isinstance(f, OutputSink) else None
            try:
                if host is not None and os.isatty(host):
                    return cls(os.dup(host), fd if isinstance(f, OutputSink) else None)
            except OSError:
                continue
        return cls(None, None)

    def open(self, node, readable: bool, writable: bool):
        if self.fd is None:
            return -E.ENXIO
        try:
            dup = os.dup(self.fd)
        except OSError as e:
            return -(e.errno or E.EIO)
        return TtyFile(node, readable, writable, dup, self.sink_fd)


class TtyFile(DeviceFile, OwnsHostFd):
    """/dev/tty opened with a controlling terminal: reads wait for the terminal (in
    slices, giving up with EINTR when the run must end), writes go where the guest's
    stdio sink for that terminal goes (so capture and passthrough apply), else to the
    terminal itself; the termios ioctls are the terminal's."""

    def __init__(self, node, readable, writable, host_fd: int, sink_fd: int | None):
        super().__init__(node, readable, writable)
        self.own_host_fd(host_fd)
        self.sink_fd = sink_fd

    def release(self):
        self.close_host_fd()

    def read(self, count, interrupted):
        if not self.readable:
            return -E.EBADF
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        nonblock = bool(self.status_flags & O_NONBLOCK)
        while True:
            if poller.poll(0 if nonblock else POLL_SLICE_MS):
                try:
                    return os.read(self.fd, min(count, READ_CHUNK))
                except BlockingIOError:
                    pass
                except OSError as e:
                    return -(e.errno or E.EIO)
            if nonblock:
                return -E.EAGAIN
            if interrupted is None or interrupted():
                return -E.EINTR

    def write(self, data):
        if not self.writable:
            return -E.EBADF
        if self.sink_fd is not None:
            self.node.fs.m.guest_output(self.sink_fd, data)
            return len(data)
        try:
            return os.write(self.fd, data)
        except OSError as e:
            return -(e.errno or E.EIO)

    def pread(self, count, offset):
        return -E.ESPIPE

    def lseek(self, offset, whence):
        return -E.ESPIPE  # tty_fops: no_llseek

    def poll(self):
        """tty_poll: readable when the terminal has input; always writable."""
        ready = select.select([self.fd], [], [], 0)[0]
        return (0x1 | 0x40 if ready else 0) | 0x4 | 0x100

    def ioctl(self, cmd, arg, mem):
        return tty_ioctl(self.fd, cmd, arg, mem)
