"""What the modeled filesystems (``/proc``, ``/dev``) are built from: a directory whose
entries are computed for the asking task, a symlink with a fixed or computed text, and
the open-time checks they share (``may_open``).  An open directory is an
:class:`kernel_model.fs.file.SpecialDir`, a stat buffer :func:`kernel_model.fs.file.attrs_stat_bytes`.

The kernel's counterparts: ``proc_dir_entry``/``pid_entry`` tables and
``proc_pident_lookup``/``proc_pident_readdir`` for the directories, ``page_get_link``
for the symlinks.
"""

from __future__ import annotations

import errno as E
import stat as S

from kernel_model.fs.file import SpecialDir
from kernel_model.fs.fs_types import Attrs, SpecialNode, dtype_of

O_ACCMODE, O_WRONLY, O_RDWR, O_DIRECTORY = 3, 1, 2, 0o200000
O_CREAT, O_EXCL, O_NOCTTY, O_TRUNC, O_CLOEXEC, O_LARGEFILE = 0o100, 0o200, 0o400, 0o1000, 0o2000000, 0o100000
SETFL_FLAGS = 0o2000 | 0o4000 | 0o20000 | 0o40000 | 0o1000000  # O_APPEND O_NONBLOCK FASYNC O_DIRECT O_NOATIME


def access_mode(flags: int) -> tuple[bool, bool] | int:
    """(readable, writable) of an open's O_ACCMODE; EINVAL for the value 3."""
    acc = flags & O_ACCMODE
    if acc == O_ACCMODE:
        return -E.EINVAL
    return acc != O_WRONLY, acc in (O_WRONLY, O_RDWR)


def keep_open_flags(f, flags: int):
    """What an open leaves in f_flags (F_GETFL): the fcntl-settable status flags and
    the lasting open flags; O_CREAT, O_EXCL, O_NOCTTY, O_TRUNC and O_CLOEXEC are the
    open's alone.  O_LARGEFILE is forced on 64-bit."""
    f.status_flags = flags & SETFL_FLAGS
    f.open_flags = (
        flags & ~(O_ACCMODE | O_CREAT | O_EXCL | O_NOCTTY | O_TRUNC | O_CLOEXEC | SETFL_FLAGS)
    ) | O_LARGEFILE
    return f


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
    parent_ino = 0  # the ``..`` getdents reports (0: this directory's own)

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
            out.append((name, a.ino, dtype_of(a.mode)))
        return out

    def open(self, task, flags):
        a = self.attrs(task)
        err = may_open(a.mode, flags, getattr(task, "cred", None), a.uid, a.gid)
        if err:
            return err
        return SpecialDir(task, self, self.path, self.parent_ino or a.ino)


class LinkNode(SpecialNode):
    """A symlink whose text is fixed (``target``) or computed by a subclass."""

    def __init__(self, target: str = "", attrs: Attrs | None = None):
        self.target = target
        self._attrs = attrs

    def attrs(self, task):
        return self._attrs

    def readlink(self, task):
        return self.target
