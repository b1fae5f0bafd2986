"""The granted directory: the only host files a guest can reach.

A guest path is resolved and opened in one step beneath the granted directory, never
by name twice, so another host process swapping a file for a symlink between a check
and the open cannot lead the guest outside (a time-of-check/time-of-use race).

The kernel does it for us: ``openat2(rootfd, path, RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`` (fs/namei.c refuses any symlink and any
``..`` above the root during the walk itself).  Where openat2 is missing (ENOSYS before
Linux 5.6, EPERM under some seccomp filters) the same walk is done by hand: one
``openat(O_NOFOLLOW)`` per component from the previous component's descriptor.

Guest paths: the granted directory is the guest's ``/`` and its working directory, so
``/a/b`` and ``a/b`` name the same file; a symlink anywhere gives ELOOP (what
RESOLVE_NO_SYMLINKS answers); ``..`` above the root and any host path outside the
grant give EACCES.  Only regular files and directories can be opened (a FIFO or device
in the grant would block or reach hardware): anything else is EACCES.
"""

from __future__ import annotations

import ctypes
import errno as E
import os
import stat as S

SYS_openat2 = 437
RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH = 0x02, 0x04, 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def openat2(dirfd: int, path: str, flags: int, mode: int = 0) -> int:
    """The openat2 syscall with RESOLVE; raises OSError like ``os.open``."""
    libc = _libc()
    if libc is None:
        raise OSError(E.ENOSYS, "no libc")
    how = _OpenHow(flags, mode if flags & (os.O_CREAT | getattr(os, "O_TMPFILE", 0)) else 0, RESOLVE)
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(ctypes.c_long(SYS_openat2), ctypes.c_int(dirfd), ctypes.c_char_p(os.fsencode(path)),
                      ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return fd


def walk_beneath(rootfd: int, path: str, flags: int, mode: int = 0) -> int:
    """The same resolution as :func:`openat2` with RESOLVE, one component at a time:
    each directory is opened O_NOFOLLOW from its parent's descriptor, so nothing is
    ever looked up by a full name."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    stack = [os.dup(rootfd)]
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if part == "..":
                if len(stack) == 1:
                    raise OSError(E.EXDEV, "escapes the granted directory", path)
                os.close(stack.pop())
                if not last:
                    continue
                part = "."
            if last:
                return os.open(part, flags | os.O_NOFOLLOW, mode, dir_fd=stack[-1])
            stack.append(_open_dir(part, stack[-1]))
        return os.open(".", flags | os.O_NOFOLLOW, mode, dir_fd=stack[-1])
    finally:
        for fd in stack:
            os.close(fd)


def _open_dir(part: str, dirfd: int) -> int:
    """One directory component, never through a symlink (O_NOFOLLOW|O_DIRECTORY says
    ENOTDIR for a link: told apart so the errno is openat2's ELOOP)."""
    try:
        return os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
    except NotADirectoryError:
        if S.S_ISLNK(os.stat(part, dir_fd=dirfd, follow_symlinks=False).st_mode):
            raise OSError(E.ELOOP, os.strerror(E.ELOOP), part) from None
        raise


class GrantedDir:
    """The guest's view of one host directory.  ``use_openat2`` False forces the
    per-component walk (tests run both)."""

    def __init__(self, root: str, *, use_openat2: bool = True):
        self.root = os.path.realpath(root)
        self.use_openat2 = use_openat2

    def _open_beneath(self, rel: str, flags: int, mode: int) -> int:
        rootfd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if self.use_openat2:
                try:
                    return openat2(rootfd, rel or ".", flags, mode)
                except OSError as e:
                    if e.errno not in (E.ENOSYS, E.EPERM):
                        raise
                    self.use_openat2 = False      # not on this host: walk from now on
            return walk_beneath(rootfd, rel, flags, mode)
        finally:
            os.close(rootfd)

    @staticmethod
    def guest_relative(name: str, base: str = "") -> str:
        """The path relative to the granted root: absolute names start at the root,
        relative ones at ``base`` (a directory descriptor's path, or the root)."""
        return name.lstrip("/") if name.startswith("/") else (f"{base}/{name}" if base else name)

    def open(self, rel: str, flags: int, mode: int = 0) -> int:
        """A host descriptor for ``rel``, or a negative errno.  O_NONBLOCK keeps an
        open of a FIFO from waiting for a writer; the type check then refuses it."""
        try:
            fd = self._open_beneath(rel, flags | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK, mode)
        except OSError as e:
            return -(E.EACCES if e.errno == E.EXDEV else e.errno or E.EIO)
        st = os.fstat(fd)
        if not (S.S_ISREG(st.st_mode) or S.S_ISDIR(st.st_mode)):
            os.close(fd)
            return -E.EACCES
        os.set_blocking(fd, True)
        return fd

    def stat(self, rel: str) -> os.stat_result | int:
        try:
            fd = self._open_beneath(rel, os.O_PATH | os.O_CLOEXEC, 0)
        except OSError as e:
            return -(E.EACCES if e.errno == E.EXDEV else e.errno or E.EIO)
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if S.S_ISLNK(st.st_mode):          # the walk's O_PATH|O_NOFOLLOW opened the link
            return -E.ELOOP
        return st
