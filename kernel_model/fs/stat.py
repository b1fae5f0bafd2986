"""The syscalls of fs/stat.c: stat, lstat, fstat, newfstatat, statx, readlink and
readlinkat.  A host inode's statx answer is the host's own; a modeled inode's is the
basic set and the mount id.
"""

from __future__ import annotations

import errno as E
import os
import struct

from kernel_model.fs.file import attrs_stat_bytes, fdget, host_statx
from kernel_model.fs.namei import Loc
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import fd_arg, int_arg, syscall
from kernel_model.include.uapi.linux.fcntl import (
    AT_EMPTY_PATH,
    AT_FDCWD,
    AT_NO_AUTOMOUNT,
    AT_STATX_SYNC_TYPE,
    AT_SYMLINK_NOFOLLOW,
)

STATX_BASIC_STATS, STATX_MNT_ID, STATX__RESERVED = 0x7FF, 0x1000, 0x80000000


class StatSyscalls:
    """Inode attributes and symlink targets."""

    def __init__(self, sc):
        self.m = sc.m
        self.vfs = sc.vfs
        self.namei = sc.namei

    def _stat_bytes(self, task, loc: Loc) -> bytes | int:
        if loc.file is not None and loc.st is None:
            return loc.file.fstat()
        return attrs_stat_bytes(loc.attrs(task))

    def _statat(self, task, dirfd, path, statbuf, flags) -> int:
        if flags & ~(AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_EMPTY_PATH):
            return neg(E.EINVAL)
        if not path and not flags & AT_EMPTY_PATH:
            return neg(E.EFAULT)  # getname(NULL)
        name = self.namei.pathname(path, empty_ok=True) if path else ""
        if isinstance(name, int):
            return name
        if name == "":
            if not flags & AT_EMPTY_PATH:
                return neg(E.ENOENT)
            if fd_arg(dirfd) != fd_arg(AT_FDCWD):
                return self.sys_fstat(task, None, dirfd, statbuf)
            with self.vfs.nameidata(task) as nd:  # the working directory itself
                loc = self.namei.cwd_loc(nd, task)
                st = loc if isinstance(loc, int) else self._stat_bytes(task, loc)
            if isinstance(st, int):
                return st
            self.m.mem.write_user(statbuf, st)
            return 0
        with self.vfs.nameidata(task) as nd:
            stack = self.namei.lookup(nd, task, dirfd, name, not flags & AT_SYMLINK_NOFOLLOW)
            if isinstance(stack, int):
                return stack
            st = self._stat_bytes(task, stack[-1])
        if isinstance(st, int):
            return st
        self.m.mem.write_user(statbuf, st)
        return 0

    @syscall(5, "fstat")
    def sys_fstat(self, task, regs, fd, statbuf, *_):
        f = fdget(task, fd)
        if f is None:
            return neg(E.EBADF)
        st = f.fstat()
        if isinstance(st, int):
            return st
        self.m.mem.write_user(statbuf, st)
        return 0

    @syscall(4, "stat")
    def sys_stat(self, task, regs, path, statbuf, *_):
        return self._statat(task, AT_FDCWD, path, statbuf, 0)

    @syscall(6, "lstat")
    def sys_lstat(self, task, regs, path, statbuf, *_):
        return self._statat(task, AT_FDCWD, path, statbuf, AT_SYMLINK_NOFOLLOW)

    @syscall(262, "newfstatat")
    def sys_newfstatat(self, task, regs, dirfd, path, statbuf, flags, *_):
        return self._statat(task, dirfd, path, statbuf, flags & 0xFFFFFFFF)

    @syscall(332, "statx")
    def sys_statx(self, task, regs, dirfd, path, flags, mask, buf, *_):
        """statx: a host inode's answer is the host's own (the mask and fields the
        running kernel fills); a modeled inode's is the basic set and the mount id."""
        flags &= 0xFFFFFFFF
        if flags & ~(AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_EMPTY_PATH | AT_STATX_SYNC_TYPE):
            return neg(E.EINVAL)
        if flags & AT_STATX_SYNC_TYPE == AT_STATX_SYNC_TYPE or mask & STATX__RESERVED:
            return neg(E.EINVAL)
        if not path and not flags & AT_EMPTY_PATH:
            return neg(E.EFAULT)
        name = self.namei.pathname(path, empty_ok=True) if path else ""
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            if name == "":
                if not flags & AT_EMPTY_PATH:
                    return neg(E.ENOENT)
                loc = (
                    self.namei.fd_loc(task, dirfd)
                    if fd_arg(dirfd) != fd_arg(AT_FDCWD)
                    else self.namei.cwd_loc(nd, task)
                )
            else:
                stack = self.namei.lookup(nd, task, dirfd, name, not flags & AT_SYMLINK_NOFOLLOW)
                loc = stack if isinstance(stack, int) else stack[-1]
            if isinstance(loc, int):
                return loc
            if loc.fd is not None:
                data = host_statx(loc.fd, mask, flags & AT_STATX_SYNC_TYPE)
            else:
                data = self._statx_of(task, loc)
        if isinstance(data, int):
            return data
        self.m.mem.write_user(buf, data)
        return 0

    def _statx_of(self, task, loc: Loc) -> bytes | int:
        """struct statx (256 bytes) from a struct stat: the basic set and STATX_MNT_ID."""
        st = self._stat_bytes(task, loc)
        if isinstance(st, int):
            return st
        dev, ino, nlink, mode, uid, gid, _, rdev, size, blksize, blocks = struct.unpack_from("<QQQIIIiQqqq", st)
        times = struct.unpack_from("<qqqqqq", st, 72)

        def ts(i):
            return struct.pack("<qIi", times[2 * i], times[2 * i + 1], 0)

        out = struct.pack(
            "<IIQIIIHHQQQQ",
            STATX_BASIC_STATS | STATX_MNT_ID,
            blksize,
            0,
            nlink,
            uid,
            gid,
            mode,
            0,
            ino,
            size,
            blocks,
            0,
        )
        out += ts(0) + b"\0" * 16 + ts(2) + ts(1)
        out += struct.pack("<IIIIQ", os.major(rdev), os.minor(rdev), os.major(dev), os.minor(dev), loc.mount.mnt_id)
        return out + b"\0" * (256 - len(out))

    @syscall(89, "readlink")
    def sys_readlink(self, task, regs, path, buf, size, *_):
        return self.sys_readlinkat(task, regs, AT_FDCWD, path, buf, size)

    @syscall(267, "readlinkat")
    def sys_readlinkat(self, task, regs, dirfd, path, buf, size, *_):
        """do_readlinkat: EINVAL for a size <= 0 and for anything not a symlink."""
        if int_arg(size) <= 0:
            return neg(E.EINVAL)
        name = self.namei.pathname(path, empty_ok=True)
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            if name == "":
                loc = self.namei.fd_loc(task, dirfd)
                if isinstance(loc, int):
                    return loc if loc != -E.EBADF or fd_arg(dirfd) != fd_arg(AT_FDCWD) else neg(E.ENOENT)
            else:
                stack = self.namei.lookup(nd, task, dirfd, name, False)
                if isinstance(stack, int):
                    return stack
                loc = stack[-1]
            if not loc.is_link(task):
                return neg(E.ENOENT if name == "" else E.EINVAL)
            if loc.node is not None:
                text = loc.node.readlink(task)
            else:
                try:
                    text = os.fsdecode(os.readlink("", dir_fd=loc.fd))
                except OSError as e:
                    return -(e.errno or E.EIO)
        if isinstance(text, int):
            return text
        data = os.fsencode(text)[: int_arg(size)]
        self.m.mem.write_user(buf, data)
        return len(data)
