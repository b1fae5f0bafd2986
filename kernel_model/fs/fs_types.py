"""The types the guest's filesystem view is made of, shared by the path walk
(:mod:`kernel_model.fs.namei`) and the modeled filesystems mounted in it (``/proc``, ``/dev``).

:class:`Attrs` is what ``stat``/``statx`` report about one inode, whichever filesystem
holds it (a host file of the sysroot or of a granted directory, or a modeled node).
:class:`SpecialNode` is one inode of a modeled filesystem (the kernel's ``proc_dir_entry``
/ a devtmpfs node): the walk asks it for its attributes, its children, its link target,
or to open it.
"""

from __future__ import annotations

import errno as E
import os
import stat as S
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernel_model.fs.file import OpenFile

DT_UNKNOWN, DT_FIFO, DT_CHR, DT_DIR, DT_BLK, DT_REG, DT_LNK, DT_SOCK = 0, 1, 2, 4, 6, 8, 10, 12


def dtype_of(mode: int) -> int:
    """The d_type getdents64 reports for an inode mode (fs_umode_to_dtype)."""
    return S.S_IFMT(mode) >> 12


@dataclass(frozen=True)
class Attrs:
    """One inode's attributes as ``struct stat`` carries them (times in ns since the
    epoch).  ``dev``/``rdev`` are the kernel's encoded device numbers, as ``os.stat``
    returns them."""

    mode: int
    ino: int
    dev: int
    nlink: int = 1
    uid: int = 0
    gid: int = 0
    rdev: int = 0
    size: int = 0
    blksize: int = 4096
    blocks: int = 0
    atime_ns: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0

    @classmethod
    def from_host(cls, st: os.stat_result) -> "Attrs":
        return cls(
            mode=st.st_mode,
            ino=st.st_ino,
            dev=st.st_dev,
            nlink=st.st_nlink,
            uid=st.st_uid,
            gid=st.st_gid,
            rdev=st.st_rdev,
            size=st.st_size,
            blksize=st.st_blksize,
            blocks=st.st_blocks,
            atime_ns=st.st_atime_ns,
            mtime_ns=st.st_mtime_ns,
            ctime_ns=st.st_ctime_ns,
        )


class SpecialNode:
    """One inode of a modeled filesystem.  Subclasses set :meth:`attrs` and override
    what their kind supports; every method returns a value or a negative errno."""

    def attrs(self, task) -> Attrs:
        raise NotImplementedError

    def lookup(self, task, name: str) -> "SpecialNode | int":
        """A child of this directory by name (``..`` and ``.`` never reach here)."""
        return -E.ENOTDIR

    def children(self, task) -> "list[tuple[str, int, int]] | int":
        """A directory's entries as (name, ino, d_type), without ``.`` and ``..``."""
        return -E.ENOTDIR

    def readlink(self, task) -> "str | int":
        """A symlink's text, as readlink(2) returns it."""
        return -E.EINVAL

    def follow(self, task) -> str | OpenFile | int:
        """Where a walk through this symlink goes: a guest path to continue at (an
        ordinary link, /proc/self -> "<pid>" is relative to the link's directory), or,
        for a /proc magic link (``nd_jump_link``), an :class:`kernel_model.fs.file.OpenFile` to
        open again.  Default: the link's text."""
        return self.readlink(task)

    def open(self, task, flags: int) -> OpenFile | int:
        """An :class:`kernel_model.fs.file.OpenFile` for this inode opened with ``flags``."""
        return -E.EACCES
