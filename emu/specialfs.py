"""What the modeled filesystems (``/proc``, ``/dev``) are built from: a directory whose
entries are computed for the asking task, a symlink with a fixed or computed text, the
open file of such a directory, and ``struct stat`` written from :class:`Attrs`.

The kernel's counterparts: ``proc_dir_entry``/``pid_entry`` tables and
``proc_pident_lookup``/``proc_pident_readdir`` for the directories, ``page_get_link``
for the symlinks, and ``cp_new_stat`` for the stat buffer.
"""

from __future__ import annotations

import errno as E
import stat as S
import struct

from .files import OpenFile
from .vfs_types import Attrs, SpecialNode

O_ACCMODE, O_WRONLY, O_RDWR, O_DIRECTORY = 3, 1, 2, 0o200000
NSEC = 1_000_000_000


def stat_of(a: Attrs) -> bytes:
    """cp_new_stat: the x86_64 ``struct stat`` (144 bytes) of ``a``."""
    times = []
    for ns in (a.atime_ns, a.mtime_ns, a.ctime_ns):
        times += [ns // NSEC, ns % NSEC]
    return struct.pack("<QQQIIIiQqqq6q3q", a.dev, a.ino, a.nlink, a.mode, a.uid, a.gid, 0, a.rdev,
                       a.size, a.blksize, a.blocks, *times, 0, 0, 0)


def dtype(mode: int) -> int:
    """fs_umode_to_dtype: the d_type of an inode mode."""
    return (mode & 0o170000) >> 12


def access_mode(flags: int) -> tuple[bool, bool] | int:
    """(readable, writable) of an open's O_ACCMODE; EINVAL for the value 3."""
    acc = flags & O_ACCMODE
    if acc == O_ACCMODE:
        return -E.EINVAL
    return acc != O_WRONLY, acc in (O_WRONLY, O_RDWR)


def may_open(mode: int, flags: int, cred, owner: int = 0, group: int = 0) -> int:
    """may_open + generic_permission for a modeled inode: O_DIRECTORY on a
    non-directory is ENOTDIR, writing a directory EISDIR, and the permission bits
    decide for an unprivileged task (root's CAP_DAC_OVERRIDE reads and writes
    anything).  0 when the open may proceed."""
    rw = access_mode(flags)
    if isinstance(rw, int):
        return rw
    if flags & O_DIRECTORY and not S.S_ISDIR(mode):
        return -E.ENOTDIR
    if S.S_ISDIR(mode) and rw[1]:
        return -E.EISDIR
    if cred is None or cred.fsuid == 0:
        return 0
    if cred.fsuid == owner:
        bits = mode >> 6
    elif cred.fsgid == group or group in cred.groups:
        bits = mode >> 3
    else:
        bits = mode
    want = (4 if rw[0] else 0) | (2 if rw[1] else 0)
    return 0 if bits & want == want else -E.EACCES


class DirNode(SpecialNode):
    """A directory of a modeled filesystem.  Subclasses give :meth:`entries`: the
    (name, node) pairs the asking task sees, in readdir order."""

    path = "/"

    def entries(self, task) -> list[tuple[str, SpecialNode]]:
        return []

    def lookup(self, task, name):
        for entry, node in self.entries(task):
            if entry == name:
                return node
        return -E.ENOENT

    def children(self, task):
        out = []
        for name, node in self.entries(task):
            a = node.attrs(task)
            out.append((name, a.ino, dtype(a.mode)))
        return out

    def open(self, task, flags):
        a = self.attrs(task)
        err = may_open(a.mode, flags, getattr(task, "cred", None), a.uid, a.gid)
        return err if err else DirFile(self, task)


class LinkNode(SpecialNode):
    """A symlink whose text is fixed (``target``) or computed by a subclass."""

    def __init__(self, target: str = "", attrs: Attrs | None = None):
        self.target = target
        self._attrs = attrs

    def attrs(self, task):
        return self._attrs

    def readlink(self, task):
        return self.target


class DirFile(OpenFile):
    """An open modeled directory (O_RDONLY / O_DIRECTORY): usable as a dirfd and for
    getdents64 through ``node.children(task)``; read() is EISDIR as on any directory."""

    readable = True

    def __init__(self, node: DirNode, task):
        super().__init__()
        self.node = node
        self.task = task
        self.guest_path = node.path
        self.pos = 0

    @property
    def is_dir(self):
        return True

    def read(self, count, interrupted):
        return -E.EISDIR

    def lseek(self, offset, whence):
        if whence != 0 or offset < 0:
            return -E.EINVAL
        self.pos = offset
        return offset

    def fstat(self):
        return stat_of(self.node.attrs(self.task))

    def proc_link(self):
        return self.node.path
