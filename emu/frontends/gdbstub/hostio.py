"""The remote protocol's host I/O packets (``vFile:``), serving the files as the guest
sees them, so gdb's default ``target:`` sysroot loads the program and its libraries
from the target.

Every path is opened through the model's file system (:meth:`Machine.open_guest_file`:
the guest's root - ``--sysroot`` when given - its mounts and its permissions), never as a
host path, so nothing outside the guest's view is reachable: ``..`` at the guest's root
stays there, as in a chroot.  Guest files are read-only to the debugger: an open for
writing, ``pwrite`` and ``unlink`` answer ``EACCES``.

Replies follow gdbserver's hostio.c: ``F<result>`` in hex, ``F-1,<errno>`` with gdb's
File-I/O errno values, binary data after a ``;``, escaped; a malformed request is
``F-1,EINVAL``, and so is an unknown ``vFile:`` operation (gdb 13 sends none other than
these).
"""

from __future__ import annotations

import errno
import os
import struct
from typing import TYPE_CHECKING

from emu.frontends.gdbstub.packets import PACKET_SIZE, Malformed, escape_binary, hex_bytes, hex_int

if TYPE_CHECKING:
    from kernel_model.fs.file import OpenFile

# gdb's File-I/O errno values (gdb/gdbsupport/fileio.h)
FILEIO_EPERM, FILEIO_ENOENT, FILEIO_EBADF, FILEIO_EACCES = 1, 2, 9, 13
FILEIO_EINVAL, FILEIO_EMFILE, FILEIO_EUNKNOWN = 22, 24, 9999
_FILEIO_ERRNO = {
    errno.EPERM: 1,
    errno.ENOENT: 2,
    errno.EINTR: 4,
    errno.EBADF: 9,
    errno.EACCES: 13,
    errno.EFAULT: 14,
    errno.EBUSY: 16,
    errno.EEXIST: 17,
    errno.ENODEV: 19,
    errno.ENOTDIR: 20,
    errno.EISDIR: 21,
    errno.EINVAL: 22,
    errno.ENFILE: 23,
    errno.EMFILE: 24,
    errno.EFBIG: 27,
    errno.ENOSPC: 28,
    errno.ESPIPE: 29,
    errno.EROFS: 30,
    errno.ENAMETOOLONG: 91,
}
_FILEIO_ACCMODE, _FILEIO_O_RDONLY = 3, 0
MAX_OPEN = 64  # descriptors a debugger may hold at once (EMFILE past it)
# the most file bytes one reply carries: every byte may need an escape, plus "F<len>;"
MAX_PREAD = (PACKET_SIZE - 32) // 2
_STAT = struct.Struct("<QQQIIIiQqqqqqqqqq")  # x86_64 struct stat (144 bytes)


def fileio_errno(err: int) -> int:
    """gdb's File-I/O value of a (positive) Linux errno; EUNKNOWN when it has none."""
    return _FILEIO_ERRNO.get(err, FILEIO_EUNKNOWN)


def fio_stat(stat: bytes) -> bytes:
    """gdb's ``struct fio_stat`` (big-endian, 64 bytes) of an x86_64 ``struct stat``:
    32-bit device, inode, mode, link count, ids and times, 64-bit sizes."""
    (dev, ino, nlink, mode, uid, gid, _pad, rdev, size, blksize, blocks, atime, _ans, mtime, _mns, ctime, _cns) = (
        _STAT.unpack_from(stat.ljust(_STAT.size, b"\0"))
    )
    m32 = 0xFFFFFFFF
    return struct.pack(
        ">IIIIIIIQQQIII",
        dev & m32,
        ino & m32,
        mode,
        nlink & m32,
        uid,
        gid,
        rdev & m32,
        size,
        blksize,
        blocks,
        atime & m32,
        mtime & m32,
        ctime & m32,
    )


class HostIO:
    """The ``vFile:`` operations over one machine: its own descriptor table of guest
    files (open file descriptions of the model, released at close or :meth:`close_all`)."""

    def __init__(self, machine):
        self.m = machine
        self.files: dict[int, OpenFile] = {}

    def handle(self, rest: bytes) -> str:
        """The reply to ``vFile:<rest>``."""
        op, _, args = rest.partition(b":")
        handler = {
            b"setfs": self._setfs,
            b"open": self._open,
            b"pread": self._pread,
            b"pwrite": self._pwrite,
            b"close": self._close,
            b"fstat": self._fstat,
            b"readlink": self._readlink,
            b"unlink": self._unlink,
        }.get(op)
        if handler is None:
            return f"F-1,{FILEIO_EINVAL:x}"
        try:
            return handler(args)
        except (Malformed, ValueError, UnicodeDecodeError):
            return f"F-1,{FILEIO_EINVAL:x}"

    @staticmethod
    def _error(err: int) -> str:
        return f"F-1,{fileio_errno(err):x}"

    @staticmethod
    def _fields(args: bytes, n: int) -> list[str]:
        fields = args.decode("latin-1").split(",")
        if len(fields) != n:
            raise Malformed(args.decode("latin-1"))
        return fields

    def _setfs(self, args: bytes) -> str:
        """``setfs:PID``: 0 (the stub's own view, the guest's here) or a live guest
        process (every process of the machine shares one view)."""
        pid = hex_int(self._fields(args, 1)[0])
        if pid and not any(t.process.pid == pid for t in self.m.tasks):
            return self._error(errno.EINVAL)
        return "F0"

    def _path(self, text: str) -> str:
        path = hex_bytes(text)
        if not path or b"\0" in path:
            raise Malformed(text)
        return os.fsdecode(path)

    def _open(self, args: bytes) -> str:
        """``open:PATH,FLAGS,MODE``: read-only only (EACCES for a write open)."""
        name, flags_text, mode_text = self._fields(args, 3)
        path, flags = self._path(name), hex_int(flags_text)
        hex_int(mode_text)
        if flags & _FILEIO_ACCMODE != _FILEIO_O_RDONLY or flags & ~_FILEIO_ACCMODE:
            return self._error(errno.EACCES)  # O_CREAT/O_TRUNC/O_APPEND/O_EXCL, or writing
        if len(self.files) >= MAX_OPEN:
            return self._error(errno.EMFILE)
        f = self.m.open_guest_file(path)
        if isinstance(f, int):
            return self._error(-f)
        fd = next(n for n in range(len(self.files) + 1) if n not in self.files)
        self.files[fd] = f
        return f"F{fd:x}"

    def _file(self, text: str) -> OpenFile | None:
        return self.files.get(hex_int(text))

    def _pread(self, args: bytes) -> str:
        """``pread:FD,COUNT,OFFSET``: up to COUNT bytes (as many as a reply holds)."""
        fd, count_text, offset_text = self._fields(args, 3)
        f, count, offset = self._file(fd), hex_int(count_text), hex_int(offset_text)
        if f is None:
            return self._error(errno.EBADF)
        if offset >= 1 << 63:
            return self._error(errno.EINVAL)
        data = f.pread(min(count, MAX_PREAD), offset)
        if isinstance(data, int):
            return self._error(-data)
        return f"F{len(data):x};" + escape_binary(data).decode("latin-1")

    def _pwrite(self, args: bytes) -> str:
        fd = args.split(b",", 1)[0].decode("latin-1")
        return self._error(errno.EBADF if self._file(fd) is None else errno.EACCES)

    def _close(self, args: bytes) -> str:
        f = self.files.pop(hex_int(self._fields(args, 1)[0]), None)
        if f is None:
            return self._error(errno.EBADF)
        f.put()
        return "F0"

    def _fstat(self, args: bytes) -> str:
        f = self._file(self._fields(args, 1)[0])
        if f is None:
            return self._error(errno.EBADF)
        st = f.fstat()
        if isinstance(st, int):
            return self._error(-st)
        data = fio_stat(st)
        return f"F{len(data):x};" + escape_binary(data).decode("latin-1")

    def _readlink(self, args: bytes) -> str:
        """``readlink:PATH``: the link's text as the guest reads it (EINVAL for a file
        that is no symbolic link)."""
        path = self._path(self._fields(args, 1)[0])
        f = self.m.open_guest_file(path, os.O_PATH | os.O_NOFOLLOW)
        if isinstance(f, int):
            return self._error(-f)
        try:
            fd = getattr(f, "fd", None)
            try:
                link = os.readlink("", dir_fd=fd) if fd is not None else None
            except OSError as e:
                return self._error(e.errno or errno.EINVAL)
        finally:
            f.put()
        if link is None:
            return self._error(errno.EINVAL)
        data = os.fsencode(link)
        return f"F{len(data):x};" + escape_binary(data).decode("latin-1")

    def _unlink(self, args: bytes) -> str:
        self._path(self._fields(args, 1)[0])
        return self._error(errno.EACCES)

    def close_all(self) -> None:
        for f in self.files.values():
            f.put()
        self.files.clear()
