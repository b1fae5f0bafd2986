"""Open files: descriptions (``struct file``), per-process descriptor tables
(``struct files_struct``) and the kinds of file a guest can hold.

The kernel's split is kept: a descriptor is a slot in a table, an open file description
is a refcounted object behind it (``fget``/``fput``).  ``fork`` copies the table and
shares every description (``dup_fd``); ``close`` drops a reference (``close_fd`` ->
``filp_close``) and only the last one releases what the description holds (``__fput``:
a host descriptor is closed then and not before).  Threads share the table.

Kinds of file:

* :class:`PipeInput`, :class:`OutputSink` - the guest's stdio as the API machine sees
  it: pipes (deterministic; the same as ``uprobe-emu diff``'s native run, whose stdio is
  captured through pipes).
* :class:`HostInput` - fd 0 read lazily from a host descriptor (the CLI's stdin or the
  ``--stdin`` file); reads are bounded and give up when the run's timeout or Ctrl-C
  comes, so a FIFO or ``/dev/zero`` can neither hang the emulator nor fill its memory.
* :class:`HostFile` - a host file or directory of the guest's view (:mod:`kernel_model.fs.namei`);
  :class:`SpecialDir` - a directory of a modeled filesystem.
* :class:`SeqFile` - a ``/proc`` file: an in-memory snapshot read like ``seq_file``.

Every operation returns a result or a negative errno; none raises for a guest's mistake.
"""

from __future__ import annotations

import ctypes
import errno as E
import fcntl
import os
import select
import stat as S
import struct
import weakref

from kernel_model.fs.fs_types import Attrs
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import fd_arg, syscall
from kernel_model.include.uapi.linux.fcntl import O_CLOEXEC
from kernel_model.mm.mm_types import GuestFault

SEEK_SET, SEEK_CUR, SEEK_END = 0, 1, 2
TCGETS, TCSETS, TCSETSW, TCSETSF, TIOCGWINSZ = 0x5401, 0x5402, 0x5403, 0x5404, 0x5413
TERMIOS_SIZE, WINSIZE_SIZE = 36, 8  # struct termios (asm-generic), struct winsize
READ_CHUNK = 1 << 20  # most bytes one read() copies from the host
NR_OPEN_DEFAULT = 1024  # RLIMIT_NOFILE's soft limit (see prlimit64)
POLL_SLICE_MS = 50  # how often a waiting read looks at the clock
PIPE_DEV, PROC_DEV = 0xC, 0x17  # st_dev of pipefs and of procfs
GUEST_UID, GUEST_GID = 1000, 1000
DEFAULT_POLLMASK = 0x1 | 0x4 | 0x40 | 0x100  # POLLIN POLLOUT POLLRDNORM POLLWRNORM
O_LARGEFILE = 0o100000


def stat_bytes(
    mode: int,
    *,
    size: int = 0,
    rdev: int = 0,
    ino: int = 1,
    dev: int = 0x16,
    blksize: int = 4096,
    nlink: int = 1,
    uid: int = GUEST_UID,
    gid: int = GUEST_GID,
) -> bytes:
    """struct stat (x86_64, 144 bytes): dev ino nlink mode uid gid pad rdev size blksize
    blocks, then the times (the clock's epoch is not modeled for files: zero)."""
    return struct.pack(
        "<QQQIIIiQqqq", dev, ino, nlink, mode, uid, gid, 0, rdev, size, blksize, (size + 511) // 512
    ) + b"\0" * (144 - 72)


def host_stat_bytes(st: os.stat_result) -> bytes:
    """What the host says about one of its files, as the guest's struct stat: the type,
    permission bits, size, block size and inode; the device numbers only for device
    files (a tty's st_rdev is what glibc's DEV_TTY_P looks at, its st_dev and st_ino
    what ttyname compares with /dev/pts/N)."""
    device = S.S_ISCHR(st.st_mode) or S.S_ISBLK(st.st_mode)
    extra = {"rdev": st.st_rdev, "dev": st.st_dev} if device else {}
    return stat_bytes(
        st.st_mode, size=st.st_size, ino=st.st_ino, blksize=st.st_blksize or 4096, nlink=st.st_nlink, **extra
    )


def seq_lseek(f, offset: int, whence: int) -> int:
    """seq_lseek / dcache_dir_lseek: SEEK_SET and SEEK_CUR over ``f.pos``, never below 0."""
    if whence == SEEK_CUR:
        offset += f.pos
    elif whence != SEEK_SET:
        return -E.EINVAL
    if offset < 0:
        return -E.EINVAL
    f.pos = offset
    return offset


def _errno(e: OSError) -> int:
    return -(e.errno or E.EIO)


class OpenFile:
    """One open file description.  ``refs`` is f_count: the descriptors (in any
    process's table) that point here.  Subclasses override what their kind supports;
    the defaults are the kernel's answers for a file without that operation."""

    readable = False
    writable = False
    is_pipe = False
    status_flags = 0  # the f_flags fcntl(F_SETFL) may change (O_APPEND, O_NONBLOCK...)
    open_flags = 0  # what open() added for good (O_LARGEFILE on a regular file)

    def __init__(self):
        self.refs = 0

    # -- lifetime (fget / fput) ------------------------------------------------------
    def get(self) -> "OpenFile":
        self.refs += 1
        return self

    def put(self) -> None:
        self.refs -= 1
        if self.refs == 0:
            self.release()

    def release(self) -> None:
        """__fput: the last reference went."""

    # -- operations (each returns a value or a negative errno) ------------------------
    def read(self, count: int, interrupted) -> bytes | int:
        return -E.EBADF if not self.readable else -E.EINVAL

    def write(self, data: bytes) -> int:
        return -E.EBADF if not self.writable else -E.EINVAL

    def pread(self, count: int, offset: int) -> bytes | int:
        return -E.ESPIPE

    def lseek(self, offset: int, whence: int) -> int:
        return -E.ESPIPE

    def pwrite(self, data: bytes, offset: int) -> int:
        return -E.EBADF if not self.writable else -E.ESPIPE

    def truncate(self, length: int) -> int:
        """do_ftruncate on a file that is not a writable regular file."""
        return -E.EINVAL

    def getdents64(self, count: int) -> bytes | int:
        return -E.ENOTDIR

    def fstat(self) -> bytes | int:
        return stat_bytes(S.S_IFREG | 0o600)

    def ioctl(self, cmd: int, arg: int, mem) -> int:
        return -E.ENOTTY

    def poll(self) -> int:
        """f_op->poll; DEFAULT_POLLMASK (always ready) for a file without one."""
        return DEFAULT_POLLMASK

    @property
    def f_flags(self) -> int:
        """What F_GETFL answers: the access mode and the status flags."""
        acc = 2 if self.readable and self.writable else 1 if self.writable else 0
        return acc | self.open_flags | self.status_flags

    @property
    def is_dir(self) -> bool:
        return False

    def proc_link(self) -> str:
        """What readlink("/proc/self/fd/N") says about this description (d_path, or a
        pseudo filesystem's dname such as ``pipe:[INO]``)."""
        return "anon_inode:[unknown]"


# ---------------------------------------------------------------------------- stdio
class PipeInput(OpenFile):
    """The read end of a pipe whose writer has written ``data`` and closed: reads
    drain it, then return 0 (end of file)."""

    readable = True

    def __init__(self, data: bytes = b"", ino: int = 3):
        super().__init__()
        self.data = bytearray(data)
        self.ino = ino

    def read(self, count, interrupted):
        chunk = bytes(self.data[: min(count, READ_CHUNK)])
        del self.data[: len(chunk)]
        return chunk

    def poll(self):
        """A pipe whose writer is gone: readable while data remains, hung up."""
        return (0x1 | 0x40 if self.data else 0) | 0x10

    def proc_link(self):
        return f"pipe:[{self.ino}]"

    def fstat(self):
        return stat_bytes(S.S_IFIFO | 0o600, dev=PIPE_DEV, ino=self.ino)


class OutputSink(OpenFile):
    """fd 1 or 2: what the guest writes goes to ``Machine.guest_output`` (kept, bounded,
    in ``machine.stdout``/``stderr`` when captured; copied to the host's fd 1/2 in
    passthrough mode).  ``host_fd`` set: the
    guest is told what that host descriptor is (a tty, a file or a pipe), as a program
    run natively from the same shell would be; unset: a pipe."""

    writable = True

    def __init__(self, machine, which: int, host_fd: int | None = None, ino: int = 4):
        super().__init__()
        self.m = machine
        self.which = which
        self.host_fd = host_fd
        self.ino = ino

    def write(self, data):
        self.m.guest_output(self.which, data)
        return len(data)

    def fstat(self):
        if self.host_fd is None:
            return stat_bytes(S.S_IFIFO | 0o600, dev=PIPE_DEV, ino=self.ino)
        try:
            return host_stat_bytes(os.fstat(self.host_fd))
        except OSError as e:
            return _errno(e)

    def ioctl(self, cmd, arg, mem):
        return tty_ioctl(self.host_fd, cmd, arg, mem)

    def proc_link(self):
        return host_proc_link(self.host_fd, self.ino)


def host_proc_link(host_fd: int | None, ino: int) -> str:
    """A stdio descriptor's /proc/self/fd link: the host's terminal name for a tty
    (``/dev/pts/N``), else the pipe the guest is told it is."""
    if host_fd is not None:
        try:
            if os.isatty(host_fd):
                return os.ttyname(host_fd)
        except OSError:
            pass
    return f"pipe:[{ino}]"


def tty_ioctl(host_fd: int | None, cmd: int, arg: int, mem) -> int:
    """The terminal ioctls a guest's libc uses, answered from the host's tty when the
    descriptor is one (tty_ioctl); anything else is ENOTTY, as for a pipe or a file.
    Setting the terminal's modes is accepted but not applied: the guest must not
    change the user's terminal."""
    if host_fd is None or not os.isatty(host_fd):
        return -E.ENOTTY
    if cmd in (TCGETS, TIOCGWINSZ):
        size = TERMIOS_SIZE if cmd == TCGETS else WINSIZE_SIZE
        try:
            data = fcntl.ioctl(host_fd, cmd, bytes(size))
        except OSError as e:
            return _errno(e)
        mem.write_user(arg, data)
        return 0
    if cmd in (TCSETS, TCSETSW, TCSETSF):
        mem.read_user(arg, TERMIOS_SIZE)  # EFAULT for a bad pointer, as the kernel
        return 0
    return -E.ENOTTY


class OwnsHostFd:
    """A modeled object that owns a host descriptor ``fd``, closed with its last
    reference (or at :meth:`close_host_fd`).  A checkpoint keeps a duplicate of what
    :meth:`held_host_fd` reports and, at restore, gives an object whose descriptor the
    guest has closed since its own back through :meth:`own_host_fd`."""

    fd: int | None
    _close: weakref.finalize | None = None

    def own_host_fd(self, fd: int | None) -> None:
        self.fd = fd
        self._close = weakref.finalize(self, os.close, fd) if fd is not None else None

    def close_host_fd(self) -> None:
        if self._close is not None:
            self._close()

    def held_host_fd(self) -> int | None:
        """The host descriptor while this object still holds it open, else None."""
        return self.fd if self._close is not None and self._close.alive else None


class HostDescriptor(OpenFile, OwnsHostFd):
    """An open file description backed by a host descriptor this object owns (closed
    with the last reference): positioned reads and seeks go to the host file."""

    fd: int  # held while the guest can reach it (given back at a checkpoint's restore)

    def __init__(self, host_fd: int):
        super().__init__()
        self.own_host_fd(host_fd)

    def release(self):
        self.close_host_fd()

    def pread(self, count, offset):
        if not self.readable:
            return -E.EBADF
        try:
            return os.pread(self.fd, min(count, READ_CHUNK), offset)
        except OSError as e:
            return _errno(e)

    def lseek(self, offset, whence):
        try:
            return os.lseek(self.fd, offset, whence)
        except OSError as e:
            return _errno(e)


class HostInput(HostDescriptor):
    """fd 0 backed by a host descriptor this object owns (closed on release).

    Reads happen only when the guest reads, at most READ_CHUNK bytes at a time.  A read
    that would block (a FIFO without a writer yet, an idle pipe or tty) polls in short
    slices and gives up with EINTR as soon as ``interrupted()`` says the run must end
    (timeout, Ctrl-C, stop request)."""

    readable = True

    def read(self, count, interrupted):
        count = min(count, READ_CHUNK)
        poller = select.poll()
        poller.register(self.fd, select.POLLIN | select.POLLPRI)
        while True:
            if poller.poll(POLL_SLICE_MS):
                try:
                    return os.read(self.fd, count)
                except BlockingIOError:
                    pass  # another reader took it: wait again
                except OSError as e:
                    return _errno(e)
            if interrupted():
                return -E.EINTR

    def fstat(self):
        try:
            return host_stat_bytes(os.fstat(self.fd))
        except OSError as e:
            return _errno(e)

    def ioctl(self, cmd, arg, mem):
        return tty_ioctl(self.fd, cmd, arg, mem)

    def proc_link(self):
        return host_proc_link(self.fd, 3)


# ---------------------------------------------------------------------------- files
def attrs_stat_bytes(a) -> bytes:
    """struct stat (x86_64, 144 bytes) of an :class:`kernel_model.fs.fs_types.Attrs`, times
    included (cp_new_stat)."""

    def ts(ns):
        return struct.pack("<qq", ns // 1_000_000_000, ns % 1_000_000_000)

    return (
        struct.pack("<QQQIIIiQqqq", a.dev, a.ino, a.nlink, a.mode, a.uid, a.gid, 0, a.rdev, a.size, a.blksize, a.blocks)
        + ts(a.atime_ns)
        + ts(a.mtime_ns)
        + ts(a.ctime_ns)
        + b"\0" * 24
    )


def host_syscall(nr: int, *args) -> int:
    """A raw host syscall through libc (getdents64, statx, renameat2...): the result
    or -errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ret = libc.syscall(ctypes.c_long(nr), *args)
    return -ctypes.get_errno() if ret < 0 else ret


SYS_getdents64, SYS_statx = 217, 332
AT_EMPTY_PATH = 0x1000
STATX_SIZE = 256
GETDENTS_CHUNK = 1 << 16  # most bytes of entries one getdents64 copies


def host_statx(fd: int, mask: int, sync: int) -> bytes | int:
    """statx(fd, "", AT_EMPTY_PATH): the host's own answer for one of its inodes."""
    buf = ctypes.create_string_buffer(STATX_SIZE)
    ret = host_syscall(
        SYS_statx,
        ctypes.c_int(fd),
        ctypes.c_char_p(b""),
        ctypes.c_int(AT_EMPTY_PATH | sync),
        ctypes.c_uint(mask & 0xFFFFFFFF),
        buf,
    )
    return ret if ret < 0 else buf.raw


class HostFile(HostDescriptor):
    """A host regular file or directory the guest opened (or, ``path_only``, an
    ``O_PATH`` descriptor of any host inode).  ``guest_path`` is its path as the guest
    sees it, so an ``openat`` relative to a directory descriptor walks the guest's
    namespace (see :mod:`kernel_model.fs.namei`).  ``acc`` is the access mode (O_RDONLY..O_RDWR, or
    3: neither read nor write, as the kernel gives it)."""

    def __init__(self, host_fd: int, guest_path: str, acc: int, *, path_only: bool = False, status_flags: int = 0):
        super().__init__(host_fd)
        self.guest_path = "/" + guest_path.lstrip("/")
        self.path_only = path_only
        self.readable = not path_only and acc in (os.O_RDONLY, os.O_RDWR)
        self.writable = not path_only and acc in (os.O_WRONLY, os.O_RDWR)
        self.acc = acc
        st = os.fstat(host_fd)
        self._dir = S.S_ISDIR(st.st_mode)
        self._reg = S.S_ISREG(st.st_mode)
        self.status_flags = status_flags
        self.open_flags = 0o10000000 if path_only else O_LARGEFILE  # O_PATH / force_o_largefile

    @property
    def f_flags(self):
        if self.path_only:
            return self.open_flags
        acc = self.acc & 3
        return acc | self.open_flags | self.status_flags

    @property
    def is_dir(self):
        return self._dir

    @property
    def is_regular(self) -> bool:
        return self._reg and not self.path_only

    def proc_link(self):
        return self.guest_path

    def attrs(self):
        return Attrs.from_host(os.fstat(self.fd))

    def read(self, count, interrupted):
        if not self.readable:
            return -E.EBADF
        if self._dir:
            return -E.EISDIR
        try:
            return os.read(self.fd, min(count, READ_CHUNK))
        except OSError as e:
            return _errno(e)

    def pread(self, count, offset):
        if not self.readable:
            return -E.EBADF
        if self._dir:
            return -E.EISDIR
        return super().pread(count, offset)

    def _sync_append(self) -> None:
        """fcntl(F_SETFL, O_APPEND) changed the guest's flags: the host's follow."""
        want = bool(self.status_flags & os.O_APPEND)
        have = bool(fcntl.fcntl(self.fd, fcntl.F_GETFL) & os.O_APPEND)
        if want != have:
            fcntl.fcntl(self.fd, fcntl.F_SETFL, os.O_APPEND if want else 0)

    def write(self, data):
        if not self.writable:
            return -E.EBADF
        try:
            self._sync_append()
            return os.write(self.fd, data)
        except OSError as e:
            return _errno(e)

    def pwrite(self, data, offset):
        if not self.writable:
            return -E.EBADF
        try:
            self._sync_append()
            return os.pwrite(self.fd, data, offset)
        except OSError as e:
            return _errno(e)

    def lseek(self, offset, whence):
        if self.path_only:
            return -E.EBADF
        return super().lseek(offset, whence)

    def fstat(self):
        try:
            return attrs_stat_bytes(Attrs.from_host(os.fstat(self.fd)))
        except OSError as e:
            return _errno(e)

    def statx(self, mask: int, sync: int) -> bytes | int:
        return host_statx(self.fd, mask, sync)

    def truncate(self, length: int) -> int:
        """do_ftruncate: EINVAL unless a regular file open for writing."""
        if not self._reg or not self.writable:
            return -E.EINVAL
        try:
            os.ftruncate(self.fd, length)
        except OSError as e:
            return _errno(e)
        return 0

    def getdents64(self, count: int) -> bytes | int:
        """The host's getdents64 on the directory: its order, its d_off cookies (so an
        lseek back to one resumes there), its d_ino and d_type."""
        if self.path_only:
            return -E.EBADF
        if not self._dir:
            return -E.ENOTDIR
        size = min(count, GETDENTS_CHUNK)
        buf = ctypes.create_string_buffer(max(size, 1))
        n = host_syscall(SYS_getdents64, ctypes.c_int(self.fd), buf, ctypes.c_uint(size))
        return n if n < 0 else buf.raw[:n]


def dirent64(ino: int, off: int, dtype: int, name: bytes) -> bytes:
    """One struct linux_dirent64, 8-byte aligned."""
    reclen = (19 + len(name) + 1 + 7) & ~7
    return struct.pack("<QqHB", ino, off, reclen, dtype) + name + b"\0" * (reclen - 19 - len(name))


class SpecialDir(OpenFile):
    """An open directory of a modeled filesystem: getdents64 lists ``.``, ``..`` and
    the node's children, positions being entry indexes (dcache_readdir's cursor)."""

    readable = True

    def __init__(self, task, node, guest_path: str, parent_ino: int):
        super().__init__()
        self.node, self.guest_path, self.task = node, guest_path, task
        self.parent_ino = parent_ino
        self.pos = 0
        self.open_flags = O_LARGEFILE

    @property
    def is_dir(self):
        return True

    def attrs(self):
        return self.node.attrs(self.task)

    def proc_link(self):
        return self.guest_path

    def read(self, count, interrupted):
        return -E.EISDIR

    def pread(self, count, offset):
        return -E.EISDIR

    def fstat(self):
        return attrs_stat_bytes(self.attrs())

    def lseek(self, offset, whence):
        return seq_lseek(self, offset, whence)

    def getdents64(self, count: int) -> bytes | int:
        kids = self.node.children(self.task)
        if isinstance(kids, int):
            return kids
        entries = [(".", self.attrs().ino, 4), ("..", self.parent_ino, 4)] + list(kids)
        out = bytearray()
        while self.pos < len(entries):
            name, ino, dtype = entries[self.pos]
            rec = dirent64(ino, self.pos + 1, dtype, os.fsencode(name))
            if len(out) + len(rec) > count:
                if not out:
                    return -E.EINVAL
                break
            out += rec
            self.pos += 1
        return bytes(out)


class SeqFile(OpenFile):
    """A read-only /proc file (``seq_file``): the text is produced once, at open, and
    read, pread and lseek (``seq_lseek``: SEEK_SET and SEEK_CUR only) move over that
    snapshot.  Writing gives EBADF, as on a descriptor opened read-only."""

    readable = True

    def __init__(self, text: bytes, ino: int):
        super().__init__()
        self.text = bytes(text)
        self.pos = 0
        self.ino = ino

    def read(self, count, interrupted):
        chunk = self.text[self.pos : self.pos + min(count, READ_CHUNK)]
        self.pos += len(chunk)
        return chunk

    def pread(self, count, offset):
        if offset < 0:
            return -E.EINVAL
        return self.text[offset : offset + min(count, READ_CHUNK)]

    def lseek(self, offset, whence):
        return seq_lseek(self, offset, whence)

    def fstat(self):
        return stat_bytes(S.S_IFREG | 0o444, dev=PROC_DEV, ino=self.ino, blksize=1024)


# ---------------------------------------------------------------------------- tables
class FdTable:
    """A process's descriptor table (``files_struct``): descriptor -> description.

    ``users`` counts the processes sharing it (CLONE_FILES); :meth:`put` drops one and
    the last closes every descriptor (``put_files_struct`` at exit)."""

    def __init__(self, limit: int = NR_OPEN_DEFAULT):
        self.fds: dict[int, OpenFile] = {}
        self.cloexec: set[int] = set()  # close_on_exec bits (FD_CLOEXEC)
        self.limit = limit
        self.users = 1

    def __contains__(self, fd) -> bool:
        return fd in self.fds

    def __len__(self) -> int:
        return len(self.fds)

    def get(self, fd: int) -> OpenFile | None:
        return self.fds.get(fd)

    def install(self, file: OpenFile, lowest: int = 0, cloexec: bool = False) -> int:
        """alloc_fd + fd_install: the lowest free descriptor >= ``lowest``; -EMFILE
        when the table is full.  Takes a new reference on ``file``."""
        fd = lowest
        while fd in self.fds:
            fd += 1
        if fd >= self.limit:
            return -E.EMFILE
        self.fds[fd] = file.get()
        self.set_cloexec(fd, cloexec)
        return fd

    def replace(self, fd: int, file: OpenFile, cloexec: bool = False) -> int:
        """do_dup2: ``fd`` now points at ``file``; what it pointed at loses a reference
        (closed silently, as dup2 does)."""
        old = self.fds.get(fd)
        self.fds[fd] = file.get()
        self.set_cloexec(fd, cloexec)
        if old is not None:
            old.put()
        return fd

    def set_cloexec(self, fd: int, on: bool) -> None:
        if on:
            self.cloexec.add(fd)
        else:
            self.cloexec.discard(fd)

    def close(self, fd: int) -> int:
        """close_fd: the slot empties now, the description goes with its last reference."""
        file = self.fds.pop(fd, None)
        if file is None:
            return -E.EBADF
        self.cloexec.discard(fd)
        file.put()
        return 0

    def fork(self) -> "FdTable":
        """dup_fd: a new table pointing at the same descriptions, close-on-exec bits
        included."""
        child = FdTable(self.limit)
        for fd, file in self.fds.items():
            child.fds[fd] = file.get()
        child.cloexec = set(self.cloexec)
        return child

    def share(self) -> "FdTable":
        self.users += 1
        return self

    def put(self) -> None:
        self.users -= 1
        if self.users == 0:
            for fd in sorted(self.fds):
                self.close(fd)


def fdget(task, fd: int):
    """fdget: the open file behind descriptor ``fd`` of the task's process, or None."""
    return task.process.files.get(fd_arg(fd))


def copy_out(task, buf: int, data) -> int:
    """A read's result into the reader's buffer: an errno as it is, else the bytes
    copied and their count (EFAULT for a bad buffer)."""
    if isinstance(data, int):
        return data
    if data:
        try:
            task.process.mem.write_user(buf, data)
        except GuestFault:
            return neg(E.EFAULT)
    return len(data)


class FileSyscalls:
    """dup, dup2 and dup3 (fs/file.c)."""

    @syscall(32, "dup")
    def sys_dup(self, task, regs, fd, *_):
        f = task.process.files.get(fd & 0xFFFFFFFF)
        if f is None:
            return neg(E.EBADF)
        return task.process.files.install(f, 0)

    @syscall(33, "dup2")
    def sys_dup2(self, task, regs, old, new, *_):
        old, new = old & 0xFFFFFFFF, new & 0xFFFFFFFF
        if old == new:  # ksys_dup2: only checks that old is open
            return new if old in task.process.files else neg(E.EBADF)
        return self._dup3(task, old, new, 0)

    @syscall(292, "dup3")
    def sys_dup3(self, task, regs, old, new, flags, *_):
        old, new = old & 0xFFFFFFFF, new & 0xFFFFFFFF
        if flags & ~O_CLOEXEC & 0xFFFFFFFF:
            return neg(E.EINVAL)
        if old == new:
            return neg(E.EINVAL)
        return self._dup3(task, old, new, flags)

    def _dup3(self, task, old: int, new: int, flags: int) -> int:
        table = task.process.files
        if new >= table.limit:
            return neg(E.EBADF)
        f = table.get(old)
        if f is None:
            return neg(E.EBADF)
        return table.replace(new, f, bool(flags & O_CLOEXEC))
