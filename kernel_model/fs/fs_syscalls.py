"""File and path syscalls over the guest's filesystem view (:mod:`kernel_model.fs.namei`).

A mixin of :class:`kernel_model.kernel.syscalls.Syscalls`.  Each path syscall walks the guest's
namespace (``path_lookupat``/``filename_parentat``), checks what the kernel checks in
the kernel's order (``may_open``, ``may_create``, ``may_delete``, ``mnt_want_write``'s
``EROFS``, ``generic_permission`` with the task's credentials), then asks the host to
do the one operation on the descriptor or name the walk reached - never on a full host
path.  Every bad argument is an errno; nothing here raises for a guest's mistake.
"""

from __future__ import annotations

import ctypes
import errno as E
import os
import stat as S
import struct
import time
from dataclasses import replace

from kernel_model.fs.file import (O_LARGEFILE, HostFile, HostInput, OpenFile, SpecialDir, attrs_stat_bytes,
                    host_statx, host_syscall)
from kernel_model.fs.namei import (MAY_EXEC, MAY_READ, MAY_WRITE, PATH_MAX, RESOLVE_BENEATH, RESOLVE_CACHED,
                  RESOLVE_IN_ROOT, RESOLVE_NO_SYMLINKS, Loc, fs_capable, in_group)
from kernel_model.fs.fs_types import Attrs

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW, AT_REMOVEDIR, AT_EACCESS, AT_SYMLINK_FOLLOW = 0x100, 0x200, 0x200, 0x400
AT_NO_AUTOMOUNT, AT_EMPTY_PATH = 0x800, 0x1000
AT_STATX_SYNC_TYPE = 0x6000
O_ACCMODE, O_CREAT, O_EXCL, O_NOCTTY, O_TRUNC, O_APPEND, O_NONBLOCK = 3, 0o100, 0o200, 0o400, 0o1000, 0o2000, 0o4000
O_DSYNC, FASYNC, O_DIRECT, O_DIRECTORY, O_NOFOLLOW, O_NOATIME = 0o10000, 0o20000, 0o40000, 0o200000, 0o400000, 0o1000000
O_CLOEXEC, O_SYNC, O_PATH, O_TMPFILE = 0o2000000, 0o4010000, 0o10000000, 0o20200000
VALID_OPEN_FLAGS = (O_ACCMODE | O_CREAT | O_EXCL | O_NOCTTY | O_TRUNC | O_APPEND | O_NONBLOCK | O_DSYNC |
                    FASYNC | O_DIRECT | O_LARGEFILE | O_DIRECTORY | O_NOFOLLOW | O_NOATIME | O_CLOEXEC |
                    O_SYNC | O_PATH | O_TMPFILE)
O_PATH_FLAGS = O_DIRECTORY | O_NOFOLLOW | O_PATH | O_CLOEXEC
SETFL_FLAGS = O_APPEND | O_NONBLOCK | FASYNC | O_DIRECT | O_NOATIME
RESOLVE_ALL = 0x3F
RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT = 1, 2, 4
UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2
STATX_BASIC_STATS, STATX_MNT_ID, STATX__RESERVED = 0x7FF, 0x1000, 0x80000000
SYS_renameat2, SYS_fchmodat2, SYS_fchownat, SYS_linkat = 316, 452, 260, 265
SYS_fallocate = 285
NO_ID = 0xFFFFFFFF
MAX_RW_COUNT = 1 << 24
OPEN_RETRIES = 16          # walks of one open that another host process's swap may restart
RETRY = object()           # _reopen: the inode changed between the walk and the open
UIO_MAXIOV = 1024


def _neg(err: int) -> int:
    return -err


def _fd(value: int) -> int:
    return value & 0xFFFFFFFF


def _int(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >> 31 else value


def _off(value: int) -> int:
    return value - (1 << 64) if value >> 63 else value


def _host(fn, *args, **kw) -> int:
    """One host call on what the walk reached: 0 or its -errno."""
    try:
        fn(*args, **kw)
    except OSError as e:
        return -(e.errno or E.EIO)
    return 0


def _proc_fd(fd: int) -> str:
    """The host's own magic link to a descriptor: the exact inode the walk opened."""
    return f"/proc/self/fd/{fd}"


class FsSyscalls:
    """Path and file syscalls.  Needs ``self.vfs`` (an :class:`kernel_model.fs.namei.Vfs`)."""

    # ================================================================== helpers
    def _pathname(self, ptr: int, *, empty_ok: bool = False) -> str | int:
        """getname: EFAULT (raised), ENAMETOOLONG past PATH_MAX, ENOENT for ""."""
        raw = self.mem.read_cstring(ptr, PATH_MAX)
        if len(raw) >= PATH_MAX:
            return _neg(E.ENAMETOOLONG)
        if not raw and not empty_ok:
            return _neg(E.ENOENT)
        return os.fsdecode(raw)

    def _start(self, nd, task, dirfd: int, name: str):
        """The walk's starting stack: the root for an absolute name, else the working
        directory or the directory descriptor's own inode (EBADF, ENOTDIR)."""
        if name.startswith("/"):
            return nd.root()
        if _fd(dirfd) == _fd(AT_FDCWD):
            return self._cwd_stack(nd, task)
        f = self._file(task, dirfd)
        if f is None:
            return _neg(E.EBADF)
        if not f.is_dir or getattr(f, "guest_path", None) is None:
            return _neg(E.ENOTDIR)
        if isinstance(f, HostFile):
            return nd.adopt(Loc(self._mount_of(f.guest_path), f.guest_path, fd=f.fd, st=os.fstat(f.fd)))
        if isinstance(f, SpecialDir):
            return nd.adopt(Loc(self._mount_of(f.guest_path), f.guest_path, node=f.node))
        return nd.start(f.guest_path)

    def _cwd_stack(self, nd, task):
        """The working directory's stack: the held inode, or (first use, or after a
        rename) a walk of its path, which is then held."""
        proc = task.process
        held = self.vfs.cwd_loc(proc)
        if held is not None:
            return nd.adopt(held)
        stack = nd.start(proc.cwd)
        if not isinstance(stack, int):
            self.vfs.hold_cwd(proc, stack[-1])
        return stack

    def _lookup(self, nd, task, dirfd: int, name: str, follow: bool):
        start = self._start(nd, task, dirfd, name)
        if isinstance(start, int):
            return start
        return nd.lookup(start, name, follow=follow)

    def _parent(self, nd, task, dirfd: int, name: str):
        start = self._start(nd, task, dirfd, name)
        if isinstance(start, int):
            return start
        return nd.parent(start, name)

    def _fd_loc(self, task, dirfd: int) -> Loc | int:
        """AT_EMPTY_PATH: the descriptor itself, as a location."""
        f = self._file(task, dirfd)
        if f is None:
            return _neg(E.EBADF)
        if isinstance(f, HostFile):
            mount = self._mount_of(f.guest_path)
            return Loc(mount, f.guest_path, fd=f.fd, st=os.fstat(f.fd))
        return Loc(self.vfs.root, getattr(f, "guest_path", ""), file=f)

    def _mount_of(self, path: str):
        best = self.vfs.root
        for point, m in self.vfs.mounts.items():
            if (path == point or path.startswith(point + "/")) and len(point) > len(best.point):
                best = m
        return best

    @staticmethod
    def _access_cred(cred):
        """access_override_creds: the real ids, root's rights only for a real uid 0."""
        return replace(cred, fsuid=cred.uid, fsgid=cred.gid, euid=cred.uid)

    def _perm(self, nd, loc: Loc, mask: int) -> int:
        return self.vfs.permission(nd.cred, loc, mask, nd.task)

    def _owner_or_capable(self, cred, attrs: Attrs) -> bool:
        """inode_owner_or_capable: the file's owner, or CAP_FOWNER."""
        return cred.fsuid == attrs.uid or fs_capable(cred)

    def _may_delete(self, nd, parent: Loc, child: Loc) -> int:
        """may_delete: write and search on the directory, then the sticky bit."""
        err = self._perm(nd, parent, MAY_WRITE | MAY_EXEC)
        if err:
            return err
        pa, ca = parent.attrs(nd.task), child.attrs(nd.task)
        cred = nd.cred
        if pa.mode & S.S_ISVTX and cred.fsuid not in (pa.uid, ca.uid) and not fs_capable(cred):
            return _neg(E.EPERM)
        return 0

    def _may_create(self, nd, parent: Loc) -> int:
        """may_create: write and search on the directory; a modeled directory has no
        create operation (EPERM, or EACCES through its 0555 mode)."""
        err = self._perm(nd, parent, MAY_WRITE | MAY_EXEC)
        if err:
            return err
        return _neg(E.EPERM) if parent.fd is None else 0

    def _init_owner(self, nd, parent: Loc, how) -> None:
        """inode_init_owner: a new inode belongs to the creator's fsuid and fsgid (the
        directory's gid under a setgid directory).  The host made it as this process's
        user; when that differs and the host allows it, the owner is corrected."""
        cred = nd.cred
        gid = parent.st.st_gid if parent.st.st_mode & S.S_ISGID else cred.fsgid
        if os.geteuid() == 0 and (cred.fsuid, gid) != (0, os.getegid()):
            try:
                how(cred.fsuid, gid)
            except OSError:
                pass

    # ================================================================== open
    def sys_open(self, task, regs, path, flags, mode, *_):
        return self.sys_openat(task, regs, AT_FDCWD, path, flags, mode)

    def sys_creat(self, task, regs, path, mode, *_):
        return self.sys_openat(task, regs, AT_FDCWD, path, O_CREAT | 1 | O_TRUNC, mode)

    def sys_openat(self, task, regs, dirfd, path, flags, mode, *_):
        """do_sys_open: unknown flags are ignored (only openat2 refuses them)."""
        flags &= VALID_OPEN_FLAGS & 0xFFFFFFFF
        return self._do_open(task, dirfd, path, flags, mode & 0o7777)

    def sys_openat2(self, task, regs, dirfd, path, how, size, *_):
        """openat2: struct open_how {flags, mode, resolve}; unknown flags, a mode
        without O_CREAT/O_TMPFILE and RESOLVE_* bits (not modeled) are EINVAL/E2BIG."""
        if size < 24:
            return _neg(E.EINVAL)
        if size > 4096:
            return _neg(E.E2BIG)
        flags, mode, resolve = struct.unpack("<QQQ", self.mem.read_user(how, 24))
        if size > 24 and any(self.mem.read_user(how + 24, size - 24)):
            return _neg(E.E2BIG)
        if flags & ~VALID_OPEN_FLAGS or resolve & ~RESOLVE_ALL or mode & ~0o7777:
            return _neg(E.EINVAL)
        if mode and not flags & (O_CREAT | O_TMPFILE & ~O_DIRECTORY):
            return _neg(E.EINVAL)
        if resolve & RESOLVE_BENEATH and resolve & RESOLVE_IN_ROOT:
            return _neg(E.EINVAL)
        if resolve & RESOLVE_CACHED and flags & (O_TRUNC | O_CREAT | O_TMPFILE):
            return _neg(E.EAGAIN)
        return self._do_open(task, dirfd, path, flags, mode, resolve)

    def _do_open(self, task, dirfd, path, flags, mode, resolve: int = 0) -> int:
        """build_open_flags + do_filp_open, then fd_install."""
        if flags & O_TMPFILE == O_TMPFILE:
            return _neg(E.EOPNOTSUPP)      # no O_TMPFILE in the modeled filesystems
        if flags & O_PATH:
            flags &= O_PATH_FLAGS
        elif flags & O_CREAT and flags & O_DIRECTORY:
            return _neg(E.EINVAL)
        name = self._pathname(path)
        if isinstance(name, int):
            return name
        for _ in range(OPEN_RETRIES):
            with self.vfs.nameidata(task) as nd:
                f = self._open_walk(nd, task, dirfd, name, flags, mode, resolve)
            if f is not RETRY:
                break
        else:
            return _neg(E.EAGAIN)
        if isinstance(f, int):
            return f
        return task.process.fds.install(f, 0, cloexec=bool(flags & O_CLOEXEC))

    def open_guest_path(self, task, path: str, flags: int) -> OpenFile | int:
        """A new open file description for the guest path ``path`` (absolute or relative
        to the task's working directory), as ``open`` would make it; not installed.
        /proc reopens a descriptor's file by its path through this."""
        for _ in range(OPEN_RETRIES):
            with self.vfs.nameidata(task) as nd:
                f = self._open_walk(nd, task, AT_FDCWD, path, flags, 0)
            if f is not RETRY:
                return f
        return _neg(E.EAGAIN)

    def _open_walk(self, nd, task, dirfd, name, flags, mode, resolve: int = 0) -> OpenFile | int:
        if resolve:
            start = self._start(nd, task, dirfd, "." if name.startswith("/") else name)
            if isinstance(start, int):
                return start
            nd.restrict(resolve, start)
        r = self._parent(nd, task, dirfd, name)
        if isinstance(r, int):
            return r
        return self._open_last(nd, *r, flags, mode)

    def _open_last(self, nd, stack, last, trailing, flags, mode) -> OpenFile | int:
        """open_last_lookups + do_open: the last component, created if O_CREAT asks,
        its symlink followed unless O_NOFOLLOW or O_CREAT|O_EXCL."""
        creat = bool(flags & O_CREAT)
        follow = not flags & O_NOFOLLOW and not (creat and flags & O_EXCL)
        if last is None or last in (".", ".."):
            if creat and flags & O_EXCL:
                return _neg(E.EEXIST)
            stack = nd.component(stack, last, follow=True) if last else stack
            if isinstance(stack, int):
                return stack
            return self._open_existing(nd, stack, flags)
        if creat and trailing:
            return _neg(E.EISDIR)
        parent = stack[-1]
        child = nd.step(parent, last) if len(os.fsencode(last)) <= 255 else _neg(E.ENAMETOOLONG)
        if child == -E.ENOENT and creat:
            return self._create(nd, stack, last, flags, mode)
        if isinstance(child, int):
            return child
        if creat and flags & O_EXCL:
            return _neg(E.EEXIST)
        if child.is_link(nd.task) and (follow or trailing):
            target = child.node.follow(nd.task) if child.node is not None else ""
            if not isinstance(target, (str, int)):       # a /proc magic link: nd_jump_link
                res = nd.follow_link(stack, child)
                return res if isinstance(res, int) else self._open_existing(nd, res, flags)
            nd.links += 1
            if nd.links > 40 or nd.resolve & RESOLVE_NO_SYMLINKS:
                return _neg(E.ELOOP)
            target = self._link_target(nd, child)
            if isinstance(target, int):
                return target
            if target == "":
                return _neg(E.ENOENT)
            r = nd.parent(stack, target + ("/" if trailing else ""))
            if isinstance(r, int):
                return r
            return self._open_last(nd, *r, flags, mode)
        stack = stack + [child]
        if trailing and not child.is_dir(nd.task):
            return _neg(E.ENOTDIR)
        return self._open_existing(nd, stack, flags)

    @staticmethod
    def _link_target(nd, link: Loc):
        if link.node is not None:
            return link.node.follow(nd.task)
        try:
            return os.fsdecode(os.readlink("", dir_fd=link.fd))
        except OSError as e:
            return -(e.errno or E.EIO)

    def _create(self, nd, stack, last, flags, mode) -> OpenFile | int:
        """lookup_open's O_CREAT of a missing name: EROFS on a read-only mount (before
        any permission), may_o_create, then the new regular file with the mode less
        the umask, owned by the task's fsuid."""
        parent = stack[-1]
        if not parent.mount.writable:
            return _neg(E.EROFS)
        err = self._may_create(nd, parent)
        if err:
            return _neg(E.EACCES) if err == -E.EPERM else err     # no ->create: EACCES
        acc = flags & O_ACCMODE
        hflags = (acc if acc != 3 else os.O_RDWR) | O_CREAT | O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | \
            (flags & (O_APPEND | O_NONBLOCK | O_SYNC | O_DSYNC))
        try:
            hfd = os.open(last, hflags, 0o600, dir_fd=parent.fd)
        except FileExistsError:
            return _neg(E.EEXIST) if flags & O_EXCL else RETRY    # another host process made it
        except OSError as e:
            return -(e.errno or E.EIO)
        try:
            os.fchmod(hfd, mode & ~nd.task.process.umask & 0o7777)
            self._init_owner(nd, parent, lambda u, g: os.fchown(hfd, u, g))
        except OSError:
            pass
        return self._host_file(hfd, stack[-1].path.rstrip("/") + "/" + last, flags)

    def _open_existing(self, nd, stack, flags) -> OpenFile | int:
        """do_open + may_open for an inode that exists."""
        loc = stack[-1]
        task = nd.task
        acc = flags & O_ACCMODE
        mode = loc.mode(task)
        if flags & O_CREAT and S.S_ISDIR(mode):
            return _neg(E.EISDIR)
        if flags & O_DIRECTORY and not S.S_ISDIR(mode):
            return _neg(E.ENOTDIR)
        if flags & O_PATH:
            return self._open_path(task, loc, flags)
        if loc.file is not None:                 # a magic link to a descriptor: opened again
            from kernel_model.fs.proc.procfs import reopen
            return reopen(self.m, task, loc.file, flags)
        may = {0: MAY_READ, 1: MAY_WRITE, 2: MAY_READ | MAY_WRITE, 3: MAY_READ | MAY_WRITE}[acc]
        if flags & O_TRUNC:
            may |= MAY_WRITE
            if S.S_ISREG(mode) and not loc.mount.writable:
                return _neg(E.EROFS)
        if S.S_ISLNK(mode):
            return _neg(E.ELOOP)
        if S.S_ISDIR(mode) and may & MAY_WRITE:
            return _neg(E.EISDIR)
        err = self._perm(nd, loc, may)
        if err:
            return err
        if flags & O_NOATIME and not self._owner_or_capable(nd.cred, loc.attrs(task)):
            return _neg(E.EPERM)
        if loc.node is not None:
            if S.S_ISDIR(mode):
                parent = stack[-2].attrs(task).ino if len(stack) > 1 else loc.attrs(task).ino
                d = SpecialDir(task, loc.node, loc.path, parent)
                d.open_flags = (flags & (O_DIRECTORY | O_NOFOLLOW | O_NOATIME)) | O_LARGEFILE
                return d
            return loc.node.open(task, flags)
        if not (S.S_ISREG(mode) or S.S_ISDIR(mode)):
            return _neg(E.EACCES)                 # host FIFOs, sockets, devices: not opened
        return self._reopen(nd, stack, flags, may)

    def _reopen(self, nd, stack, flags, may) -> OpenFile | int:
        """The host descriptor for what the walk's O_PATH descriptor names: a directory
        through ``.`` of itself, a file by its name in its parent's descriptor with
        O_NOFOLLOW (checked again: another host process may have swapped it)."""
        loc = stack[-1]
        acc = flags & O_ACCMODE
        extra = flags & (O_APPEND | O_NONBLOCK | O_SYNC | O_DSYNC | O_TRUNC)
        try:
            if S.S_ISDIR(loc.st.st_mode):
                hfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=loc.fd)
            else:
                name = loc.path.rsplit("/", 1)[1]
                hflags = (acc if acc != 3 else os.O_RDWR) | os.O_NOFOLLOW | os.O_CLOEXEC | \
                    os.O_NOCTTY | os.O_NONBLOCK | (extra & ~O_TRUNC)
                hfd = os.open(name, hflags, dir_fd=stack[-2].fd)
        except OSError as e:
            if e.errno in (E.ELOOP, E.ENOENT, E.ENOTDIR, E.EISDIR):
                return RETRY                      # swapped mid-open by another host process
            return -(e.errno or E.EIO)
        st = os.fstat(hfd)
        if (st.st_dev, st.st_ino) != (loc.st.st_dev, loc.st.st_ino):
            os.close(hfd)
            return RETRY
        if extra & O_TRUNC and S.S_ISREG(st.st_mode):
            try:                                  # this very inode, even if opened O_RDONLY
                os.truncate(_proc_fd(hfd), 0)
            except OSError as e:
                os.close(hfd)
                return -(e.errno or E.EIO)
        if not extra & O_NONBLOCK:
            os.set_blocking(hfd, True)
        return self._host_file(hfd, loc.path, flags)

    @staticmethod
    def _host_file(hfd: int, guest_path: str, flags: int) -> HostFile:
        f = HostFile(hfd, guest_path, flags & O_ACCMODE, status_flags=flags & SETFL_FLAGS)
        f.open_flags = (flags & ~(O_ACCMODE | O_CREAT | O_EXCL | O_NOCTTY | O_TRUNC | SETFL_FLAGS |
                                  O_CLOEXEC)) | O_LARGEFILE
        return f

    def _open_path(self, task, loc: Loc, flags: int) -> OpenFile | int:
        """O_PATH: a descriptor naming the inode (usable as a dirfd, for fstat and
        AT_EMPTY_PATH), no permission needed."""
        if loc.fd is None:
            if loc.node is not None and S.S_ISDIR(loc.attrs(task).mode):
                d = SpecialDir(task, loc.node, loc.path, 0)
                d.readable = False
                return d
            return loc.file if loc.file is not None else _neg(E.EACCES)
        f = HostFile(os.dup(loc.fd), loc.path, 0, path_only=True)
        f.open_flags = flags & (O_PATH | O_DIRECTORY | O_NOFOLLOW)
        return f

    # ================================================================== read / write
    def sys_read(self, task, regs, fd, buf, count, *_):
        f = self._file(task, fd)
        if f is None or not f.readable:
            return _neg(E.EBADF)
        if f.is_pipe:
            return self.pipe_read(task, f, buf, min(count, MAX_RW_COUNT))
        if isinstance(f, HostInput):
            return self.host_read(task, f, buf, min(count, MAX_RW_COUNT))     # may sleep
        data = f.read(min(count, MAX_RW_COUNT), self.interrupted)
        if isinstance(data, int):
            return data
        if data:
            self.mem.write_user(buf, data)
        return len(data)

    def sys_write(self, task, regs, fd, buf, count, *_):
        f = self._file(task, fd)
        if f is None or not f.writable:
            return _neg(E.EBADF)
        if count == 0:
            return 0
        data = self.mem.read_user(buf, min(count, MAX_RW_COUNT))
        return self.pipe_write(task, f, data) if f.is_pipe else f.write(data)

    def _iovecs(self, iov: int, iovcnt: int) -> list[tuple[int, int]] | int:
        """import_iovec: at most UIO_MAXIOV entries, none negative, the total capped at
        MAX_RW_COUNT."""
        if _int(iovcnt) < 0 or _int(iovcnt) > UIO_MAXIOV:
            return _neg(E.EINVAL)
        out, total = [], 0
        for i in range(_int(iovcnt)):
            base, ln = struct.unpack("<QQ", self.mem.read_user(iov + 16 * i, 16))
            if ln >> 63:
                return _neg(E.EINVAL)
            ln = min(ln, MAX_RW_COUNT - total)
            total += ln
            out.append((base, ln))
        return out

    def _gather(self, vecs) -> bytes:
        return b"".join(self.mem.read_user(b, n) for b, n in vecs if n)

    def _scatter(self, vecs, data: bytes) -> int:
        done = 0
        for base, ln in vecs:
            if done >= len(data):
                break
            piece = data[done:done + ln]
            self.mem.write_user(base, piece)
            done += len(piece)
        return done

    def sys_writev(self, task, regs, fd, iov, iovcnt, *_):
        f = self._file(task, fd)
        if f is None or not f.writable:
            return _neg(E.EBADF)
        vecs = self._iovecs(iov, iovcnt)
        if isinstance(vecs, int):
            return vecs
        data = self._gather(vecs)
        if not data:
            return 0
        return self.pipe_write(task, f, data) if f.is_pipe else f.write(data)

    def sys_readv(self, task, regs, fd, iov, iovcnt, *_):
        f = self._file(task, fd)
        if f is None or not f.readable:
            return _neg(E.EBADF)
        vecs = self._iovecs(iov, iovcnt)
        if isinstance(vecs, int):
            return vecs
        total = sum(n for _, n in vecs)
        if f.is_pipe:                              # a short read of the first buffer
            first = next(((b, n) for b, n in vecs if n), None)
            return 0 if first is None else self.pipe_read(task, f, first[0], first[1])
        if isinstance(f, HostInput):                # the same short read, sleeping as read does
            first = next(((b, n) for b, n in vecs if n), None)
            return 0 if first is None else self.host_read(task, f, first[0], first[1])
        data = f.read(total, self.interrupted) if total else b""
        return data if isinstance(data, int) else self._scatter(vecs, data)

    def sys_pread64(self, task, regs, fd, buf, count, off, *_):
        f = self._file(task, fd)
        if f is None or not f.readable:
            return _neg(E.EBADF)
        if _off(off) < 0:
            return _neg(E.EINVAL)
        data = f.pread(min(count, MAX_RW_COUNT), _off(off))
        if isinstance(data, int):
            return data
        if data:
            self.mem.write_user(buf, data)
        return len(data)

    def sys_pwrite64(self, task, regs, fd, buf, count, off, *_):
        f = self._file(task, fd)
        if f is None or not f.writable:
            return _neg(E.EBADF)
        if _off(off) < 0:
            return _neg(E.EINVAL)
        if f.is_pipe:
            return _neg(E.ESPIPE)
        if count == 0:
            return 0
        return f.pwrite(self.mem.read_user(buf, min(count, MAX_RW_COUNT)), _off(off))

    def sys_preadv(self, task, regs, fd, iov, iovcnt, pos_l, pos_h, *_):
        f = self._file(task, fd)
        if f is None or not f.readable:
            return _neg(E.EBADF)
        if _off(pos_l) < 0:
            return _neg(E.EINVAL)
        vecs = self._iovecs(iov, iovcnt)
        if isinstance(vecs, int):
            return vecs
        data = f.pread(sum(n for _, n in vecs), _off(pos_l))
        return data if isinstance(data, int) else self._scatter(vecs, data)

    def sys_pwritev(self, task, regs, fd, iov, iovcnt, pos_l, pos_h, *_):
        f = self._file(task, fd)
        if f is None or not f.writable:
            return _neg(E.EBADF)
        if _off(pos_l) < 0:
            return _neg(E.EINVAL)
        vecs = self._iovecs(iov, iovcnt)
        if isinstance(vecs, int):
            return vecs
        if f.is_pipe:
            return _neg(E.ESPIPE)
        data = self._gather(vecs)
        return f.pwrite(data, _off(pos_l)) if data else 0

    def sys_lseek(self, task, regs, fd, off, whence, *_):
        f = self._file(task, fd)
        if f is None:
            return _neg(E.EBADF)
        if whence & 0xFFFFFFFF > 4:                # SEEK_MAX = SEEK_HOLE
            return _neg(E.EINVAL)
        return f.lseek(_off(off), whence & 0xFFFFFFFF)

    def sys_getdents64(self, task, regs, fd, dirp, count, *_):
        f = self._file(task, fd)
        if f is None:
            return _neg(E.EBADF)
        data = f.getdents64(count & 0xFFFFFFFF)
        if isinstance(data, int):
            return data
        if data:
            self.mem.write_user(dirp, data)
        return len(data)

    def sys_fsync(self, task, regs, fd, *_):
        """vfs_fsync_range: the host file's own fsync; EINVAL for a file without one
        (pipes, terminals, modeled files)."""
        f = self._file(task, fd)
        if f is None or getattr(f, "path_only", False):
            return _neg(E.EBADF)
        if not isinstance(f, HostFile):
            return _neg(E.EINVAL)
        return _host(os.fsync, f.fd)

    def sys_fdatasync(self, task, regs, fd, *_):
        return self.sys_fsync(task, regs, fd)

    def sys_ftruncate(self, task, regs, fd, length, *_):
        if _off(length) < 0:
            return _neg(E.EINVAL)
        f = self._file(task, fd)
        if f is None:
            return _neg(E.EBADF)
        return f.truncate(_off(length))

    def sys_fallocate(self, task, regs, fd, mode, offset, length, *_):
        """vfs_fallocate.  A regular host file goes to the host's fallocate, whose
        checks are the same kernel's (its descriptor has the guest's access mode, and
        only a granted file is writable); other files answer in vfs_fallocate's order."""
        f = self._file(task, fd)
        if f is None or getattr(f, "path_only", False):      # fdget skips O_PATH files
            return _neg(E.EBADF)
        mode, off, ln = mode & 0xFFFFFFFF, _off(offset), _off(length)
        if isinstance(f, HostFile) and f.is_regular:
            return host_syscall(SYS_fallocate, ctypes.c_int(f.fd), ctypes.c_int(mode),
                                ctypes.c_long(off), ctypes.c_long(ln))
        if off < 0 or ln <= 0:
            return _neg(E.EINVAL)
        if mode & ~0xFF:
            return _neg(E.EOPNOTSUPP)
        if not f.writable:
            return _neg(E.EBADF)
        if f.is_pipe:
            return _neg(E.ESPIPE)
        return _neg(E.EISDIR) if f.is_dir else _neg(E.ENODEV)

    # ================================================================== stat
    def _stat_bytes(self, task, loc: Loc) -> bytes | int:
        if loc.file is not None and loc.st is None:
            return loc.file.fstat()
        return attrs_stat_bytes(loc.attrs(task))

    def _statat(self, task, dirfd, path, statbuf, flags) -> int:
        if flags & ~(AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_EMPTY_PATH):
            return _neg(E.EINVAL)
        if not path and not flags & AT_EMPTY_PATH:
            return _neg(E.EFAULT)                     # getname(NULL)
        name = self._pathname(path, empty_ok=True) if path else ""
        if isinstance(name, int):
            return name
        if name == "":
            if not flags & AT_EMPTY_PATH:
                return _neg(E.ENOENT)
            if _fd(dirfd) != _fd(AT_FDCWD):
                return self.sys_fstat(task, None, dirfd, statbuf)
            with self.vfs.nameidata(task) as nd:           # the working directory itself
                loc = self._cwd_loc(nd, task)
                st = loc if isinstance(loc, int) else self._stat_bytes(task, loc)
            if isinstance(st, int):
                return st
            self.mem.write_user(statbuf, st)
            return 0
        with self.vfs.nameidata(task) as nd:
            stack = self._lookup(nd, task, dirfd, name, not flags & AT_SYMLINK_NOFOLLOW)
            if isinstance(stack, int):
                return stack
            st = self._stat_bytes(task, stack[-1])
        if isinstance(st, int):
            return st
        self.mem.write_user(statbuf, st)
        return 0

    def sys_fstat(self, task, regs, fd, statbuf, *_):
        f = self._file(task, fd)
        if f is None:
            return _neg(E.EBADF)
        st = f.fstat()
        if isinstance(st, int):
            return st
        self.mem.write_user(statbuf, st)
        return 0

    def sys_stat(self, task, regs, path, statbuf, *_):
        return self._statat(task, AT_FDCWD, path, statbuf, 0)

    def sys_lstat(self, task, regs, path, statbuf, *_):
        return self._statat(task, AT_FDCWD, path, statbuf, AT_SYMLINK_NOFOLLOW)

    def sys_newfstatat(self, task, regs, dirfd, path, statbuf, flags, *_):
        return self._statat(task, dirfd, path, statbuf, flags & 0xFFFFFFFF)

    def sys_statx(self, task, regs, dirfd, path, flags, mask, buf, *_):
        """statx: a host inode's answer is the host's own (the mask and fields the
        running kernel fills); a modeled inode's is the basic set and the mount id."""
        flags &= 0xFFFFFFFF
        if flags & ~(AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_EMPTY_PATH | AT_STATX_SYNC_TYPE):
            return _neg(E.EINVAL)
        if flags & AT_STATX_SYNC_TYPE == AT_STATX_SYNC_TYPE or mask & STATX__RESERVED:
            return _neg(E.EINVAL)
        if not path and not flags & AT_EMPTY_PATH:
            return _neg(E.EFAULT)
        name = self._pathname(path, empty_ok=True) if path else ""
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            if name == "":
                if not flags & AT_EMPTY_PATH:
                    return _neg(E.ENOENT)
                loc = self._fd_loc(task, dirfd) if _fd(dirfd) != _fd(AT_FDCWD) else \
                    self._cwd_loc(nd, task)
            else:
                stack = self._lookup(nd, task, dirfd, name, not flags & AT_SYMLINK_NOFOLLOW)
                loc = stack if isinstance(stack, int) else stack[-1]
            if isinstance(loc, int):
                return loc
            if loc.fd is not None:
                data = host_statx(loc.fd, mask, flags & AT_STATX_SYNC_TYPE)
            else:
                data = self._statx_of(task, loc)
        if isinstance(data, int):
            return data
        self.mem.write_user(buf, data)
        return 0

    def _cwd_loc(self, nd, task):
        stack = self._cwd_stack(nd, task)
        return stack if isinstance(stack, int) else stack[-1]

    def _statx_of(self, task, loc: Loc) -> bytes | int:
        """struct statx (256 bytes) from a struct stat: the basic set and STATX_MNT_ID."""
        st = self._stat_bytes(task, loc)
        if isinstance(st, int):
            return st
        dev, ino, nlink, mode, uid, gid, _, rdev, size, blksize, blocks = \
            struct.unpack_from("<QQQIIIiQqqq", st)
        times = struct.unpack_from("<qqqqqq", st, 72)

        def ts(i):
            return struct.pack("<qIi", times[2 * i], times[2 * i + 1], 0)
        out = struct.pack("<IIQIIIHHQQQQ", STATX_BASIC_STATS | STATX_MNT_ID, blksize, 0, nlink, uid, gid,
                          mode, 0, ino, size, blocks, 0)
        out += ts(0) + b"\0" * 16 + ts(2) + ts(1)
        out += struct.pack("<IIIIQ", os.major(rdev), os.minor(rdev), os.major(dev), os.minor(dev),
                           loc.mount.mnt_id)
        return out + b"\0" * (256 - len(out))

    # ================================================================== access / readlink
    def sys_access(self, task, regs, path, mode, *_):
        return self.sys_faccessat2(task, regs, AT_FDCWD, path, mode, 0)

    def sys_faccessat(self, task, regs, dirfd, path, mode, *_):
        return self.sys_faccessat2(task, regs, dirfd, path, mode, 0)

    def sys_faccessat2(self, task, regs, dirfd, path, mode, flags, *_):
        """do_faccessat: the real ids unless AT_EACCESS; W_OK on a read-only mount is
        EROFS; X_OK needs an x bit even for root."""
        mode, flags = mode & 0xFFFFFFFF, flags & 0xFFFFFFFF
        if mode & ~7:
            return _neg(E.EINVAL)
        if flags & ~(AT_EACCESS | AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH):
            return _neg(E.EINVAL)
        name = self._pathname(path, empty_ok=bool(flags & AT_EMPTY_PATH))
        if isinstance(name, int):
            return name
        cred = task.cred if flags & AT_EACCESS else self._access_cred(task.cred)
        with self.vfs.nameidata(task, cred) as nd:
            if name == "":
                loc = self._fd_loc(task, dirfd) if _fd(dirfd) != _fd(AT_FDCWD) else self._cwd_loc(nd, task)
            else:
                stack = self._lookup(nd, task, dirfd, name, not flags & AT_SYMLINK_NOFOLLOW)
                loc = stack if isinstance(stack, int) else stack[-1]
            if isinstance(loc, int):
                return loc
            if not mode:
                return 0
            return self._perm(nd, loc, mode)

    def sys_readlink(self, task, regs, path, buf, size, *_):
        return self.sys_readlinkat(task, regs, AT_FDCWD, path, buf, size)

    def sys_readlinkat(self, task, regs, dirfd, path, buf, size, *_):
        """do_readlinkat: EINVAL for a size <= 0 and for anything not a symlink."""
        if _int(size) <= 0:
            return _neg(E.EINVAL)
        name = self._pathname(path, empty_ok=True)
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            if name == "":
                loc = self._fd_loc(task, dirfd)
                if isinstance(loc, int):
                    return loc if loc != -E.EBADF or _fd(dirfd) != _fd(AT_FDCWD) else _neg(E.ENOENT)
            else:
                stack = self._lookup(nd, task, dirfd, name, False)
                if isinstance(stack, int):
                    return stack
                loc = stack[-1]
            if not loc.is_link(task):
                return _neg(E.ENOENT if name == "" else E.EINVAL)
            if loc.node is not None:
                text = loc.node.readlink(task)
            else:
                try:
                    text = os.fsdecode(os.readlink("", dir_fd=loc.fd))
                except OSError as e:
                    return -(e.errno or E.EIO)
        if isinstance(text, int):
            return text
        data = os.fsencode(text)[:_int(size)]
        self.mem.write_user(buf, data)
        return len(data)

    # ================================================================== cwd / umask
    def sys_umask(self, task, regs, mask, *_):
        old, task.process.umask = task.process.umask, mask & 0o777
        return old

    def sys_getcwd(self, task, regs, buf, size, *_):
        """getcwd: ENOENT once the directory is removed, ERANGE when the path and its
        NUL do not fit; the length with the NUL."""
        with self.vfs.nameidata(task) as nd:
            loc = self._cwd_loc(nd, task)
            if isinstance(loc, int) or (loc.fd is not None and os.fstat(loc.fd).st_nlink == 0):
                return _neg(E.ENOENT)
        data = os.fsencode(task.process.cwd) + b"\0"
        if len(data) > size & 0xFFFFFFFFFFFFFFFF:
            return _neg(E.ERANGE)
        self.mem.write_user(buf, data)
        return len(data)

    def sys_chdir(self, task, regs, path, *_):
        name = self._pathname(path)
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            stack = self._lookup(nd, task, AT_FDCWD, name, True)
            if isinstance(stack, int):
                return stack
            return self._set_cwd(nd, task, stack[-1])

    def sys_fchdir(self, task, regs, fd, *_):
        f = self._file(task, fd)
        if f is None:
            return _neg(E.EBADF)
        if not f.is_dir or getattr(f, "guest_path", None) is None:
            return _neg(E.ENOTDIR)
        with self.vfs.nameidata(task) as nd:
            stack = self._start(nd, task, fd, "")
            if isinstance(stack, int):
                return stack
            return self._set_cwd(nd, task, stack[-1])

    def _set_cwd(self, nd, task, loc: Loc) -> int:
        if not loc.is_dir(task):
            return _neg(E.ENOTDIR)
        err = self._perm(nd, loc, MAY_EXEC)
        if err:
            return err
        task.process.cwd = loc.path
        self.vfs.hold_cwd(task.process, loc)
        return 0

    # ================================================================== create / delete
    def _create_at(self, task, dirfd, path, make) -> int:
        """filename_create + vfs_*: EEXIST for an existing name or ``.``/``..``/``/``
        (before EROFS), EROFS on a read-only mount, then may_create; ``make(nd,
        parent, name)`` does the host's part."""
        name = self._pathname(path)
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            r = self._parent(nd, task, dirfd, name)
            if isinstance(r, int):
                return r
            stack, last, trailing = r
            return self._create_last(nd, stack, last, trailing, make)

    def _create_last(self, nd, stack, last, trailing, make, *, allow_slash=False) -> int:
        if last is None or last in (".", ".."):
            return _neg(E.EEXIST)
        if len(os.fsencode(last)) > 255:
            return _neg(E.ENAMETOOLONG)
        parent = stack[-1]
        child = nd.step(parent, last)
        if not isinstance(child, int):
            return _neg(E.EEXIST)
        if child != -E.ENOENT:
            return child
        if trailing and not allow_slash:
            return _neg(E.ENOENT)                 # only mkdir may name its new entry "x/"
        if not parent.mount.writable:
            return _neg(E.EROFS)
        err = self._may_create(nd, parent)
        return err or make(nd, parent, last)

    def sys_mkdir(self, task, regs, path, mode, *_):
        return self.sys_mkdirat(task, regs, AT_FDCWD, path, mode)

    def sys_mkdirat(self, task, regs, dirfd, path, mode, *_):
        umask = task.process.umask

        def make(nd, parent, name):
            err = _host(os.mkdir, name, 0o700, dir_fd=parent.fd)
            if err:
                return err
            try:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent.fd)
            except OSError:
                return 0
            try:
                keep = os.fstat(fd).st_mode & S.S_ISGID
                os.fchmod(fd, (mode & 0o1777 & ~umask) | keep)
                self._init_owner(nd, parent, lambda u, g: os.fchown(fd, u, g))
            finally:
                os.close(fd)
            return 0

        name = self._pathname(path)
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            r = self._parent(nd, task, dirfd, name)
            if isinstance(r, int):
                return r
            return self._create_last(nd, *r, make, allow_slash=True)

    def sys_mknod(self, task, regs, path, mode, dev, *_):
        return self.sys_mknodat(task, regs, AT_FDCWD, path, mode, dev)

    def sys_mknodat(self, task, regs, dirfd, path, mode, dev, *_):
        """do_mknodat: a regular file, FIFO or socket node with the mode less the umask;
        EINVAL for an unknown type.  Device nodes are EPERM even for root: the model
        never creates host device nodes (a guest's would name the host's hardware)."""
        mode &= 0xFFFFFFFF
        kind = mode & 0o170000 or S.S_IFREG
        if kind not in (S.S_IFREG, S.S_IFIFO, S.S_IFSOCK, S.S_IFCHR, S.S_IFBLK):
            return _neg(E.EINVAL)
        umask = task.process.umask

        def make(nd, parent, name):
            if kind in (S.S_IFCHR, S.S_IFBLK):
                return _neg(E.EPERM)
            err = _host(os.mknod, name, kind | 0o600, 0, dir_fd=parent.fd)
            if err:
                return err
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent.fd)
            except OSError:
                return 0
            try:
                host_syscall(SYS_fchmodat2, ctypes.c_int(fd), ctypes.c_char_p(b""),
                             ctypes.c_uint(mode & 0o7777 & ~umask), ctypes.c_int(AT_EMPTY_PATH))
                self._init_owner(nd, parent, lambda u, g: host_syscall(
                    SYS_fchownat, ctypes.c_int(fd), ctypes.c_char_p(b""), ctypes.c_int(u), ctypes.c_int(g),
                    ctypes.c_int(AT_EMPTY_PATH)))
            finally:
                os.close(fd)
            return 0
        return self._create_at(task, dirfd, path, make)

    def sys_symlink(self, task, regs, target, path, *_):
        return self.sys_symlinkat(task, regs, target, AT_FDCWD, path)

    def sys_symlinkat(self, task, regs, target, dirfd, path, *_):
        text = self._pathname(target)
        if isinstance(text, int):
            return text

        def make(nd, parent, name):
            err = _host(os.symlink, text, name, dir_fd=parent.fd)
            if not err:
                self._init_owner(nd, parent, lambda u, g: os.chown(name, u, g, dir_fd=parent.fd,
                                                                   follow_symlinks=False))
            return err
        return self._create_at(task, dirfd, path, make)

    def sys_link(self, task, regs, old, new, *_):
        return self.sys_linkat(task, regs, AT_FDCWD, old, AT_FDCWD, new, 0)

    def sys_linkat(self, task, regs, olddfd, old, newdfd, new, flags, *_):
        """do_linkat: the old name (followed with AT_SYMLINK_FOLLOW), the new one as
        filename_create, EXDEV across mounts, EPERM for a directory."""
        flags &= 0xFFFFFFFF
        if flags & ~(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH):
            return _neg(E.EINVAL)
        oldname = self._pathname(old, empty_ok=bool(flags & AT_EMPTY_PATH))
        if isinstance(oldname, int):
            return oldname
        if oldname == "" and not fs_capable(task.cred):
            return _neg(E.ENOENT)                 # AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH
        with self.vfs.nameidata(task) as nd:
            if oldname == "":
                src = self._fd_loc(task, olddfd)
                src = src if isinstance(src, int) else [src]
            else:
                src = self._lookup(nd, task, olddfd, oldname, bool(flags & AT_SYMLINK_FOLLOW))
            if isinstance(src, int):
                return src

            def make(nd, parent, name):
                loc = src[-1]
                if loc.mount is not parent.mount:
                    return _neg(E.EXDEV)
                if loc.is_dir(task):
                    return _neg(E.EPERM)
                if loc.fd is None:
                    return _neg(E.EPERM)
                if not self._may_linkat(nd, loc):
                    return _neg(E.EPERM)
                return host_syscall(SYS_linkat, ctypes.c_int(loc.fd), ctypes.c_char_p(b""),
                                    ctypes.c_int(parent.fd), ctypes.c_char_p(os.fsencode(name)),
                                    ctypes.c_int(AT_EMPTY_PATH))
            newname = self._pathname(new)
            if isinstance(newname, int):
                return newname
            r = self._parent(nd, task, newdfd, newname)
            if isinstance(r, int):
                return r
            return self._create_last(nd, *r, make)

    def _may_linkat(self, nd, loc: Loc) -> bool:
        """may_linkat under fs.protected_hardlinks=1 (Debian's default): the owner or
        root, or a "safe" source - a regular file, neither setuid nor setgid-executable,
        that the task may read and write."""
        a = loc.attrs(nd.task)
        if self._owner_or_capable(nd.cred, a):
            return True
        if not S.S_ISREG(a.mode) or a.mode & S.S_ISUID:
            return False
        if a.mode & (S.S_ISGID | S.S_IXGRP) == S.S_ISGID | S.S_IXGRP:
            return False
        return self._perm(nd, loc, MAY_READ | MAY_WRITE) == 0

    def sys_unlink(self, task, regs, path, *_):
        return self.sys_unlinkat(task, regs, AT_FDCWD, path, 0)

    def sys_rmdir(self, task, regs, path, *_):
        return self.sys_unlinkat(task, regs, AT_FDCWD, path, AT_REMOVEDIR)

    def sys_unlinkat(self, task, regs, dirfd, path, flags, *_):
        """do_unlinkat / do_rmdir: the name's type (``.`` EISDIR or EINVAL, ``..``
        EISDIR or ENOTEMPTY, ``/`` EBUSY), then EROFS on a read-only mount before the
        name is even looked up, then ENOENT, the type, may_delete, mount points EBUSY."""
        flags &= 0xFFFFFFFF
        if flags & ~AT_REMOVEDIR:
            return _neg(E.EINVAL)
        rmdir = bool(flags & AT_REMOVEDIR)
        name = self._pathname(path)
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            r = self._parent(nd, task, dirfd, name)
            if isinstance(r, int):
                return r
            stack, last, trailing = r
            if last in (None, ".", ".."):
                if not rmdir:
                    return _neg(E.EISDIR)
                return _neg({None: E.EBUSY, ".": E.EINVAL, "..": E.ENOTEMPTY}[last])
            parent = stack[-1]
            if not parent.mount.writable:
                return _neg(E.EROFS)
            child = nd.step(parent, last)
            if isinstance(child, int):
                return child
            if child.mount is not parent.mount:
                return _neg(E.EBUSY)                  # a mount point
            is_dir = child.is_dir(task)
            if not rmdir and trailing:
                return _neg(E.EISDIR if is_dir else E.ENOTDIR)
            if not rmdir and is_dir:
                return _neg(E.EISDIR)
            if rmdir and not is_dir:
                return _neg(E.ENOTDIR)
            err = self._may_delete(nd, parent, child)
            if err:
                return err
            if parent.fd is None:
                return _neg(E.EPERM)
            if rmdir:
                return _host(os.rmdir, last, dir_fd=parent.fd)
            return _host(os.unlink, last, dir_fd=parent.fd)

    def sys_rename(self, task, regs, old, new, *_):
        return self.sys_renameat2(task, regs, AT_FDCWD, old, AT_FDCWD, new, 0)

    def sys_renameat(self, task, regs, olddfd, old, newdfd, new, *_):
        return self.sys_renameat2(task, regs, olddfd, old, newdfd, new, 0)

    def sys_renameat2(self, task, regs, olddfd, old, newdfd, new, flags, *_):
        """do_renameat2: flag checks, both parents, EBUSY/EEXIST for ``.``/``..``,
        EXDEV across mounts (before EROFS), EROFS, then the host's renameat2 on the
        two parents' descriptors (ENOENT, ENOTDIR, EISDIR, ENOTEMPTY, EINVAL for a
        directory moved beneath itself, EEXIST under RENAME_NOREPLACE)."""
        flags &= 0xFFFFFFFF
        if flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT):
            return _neg(E.EINVAL)
        if flags & RENAME_EXCHANGE and flags & (RENAME_NOREPLACE | RENAME_WHITEOUT):
            return _neg(E.EINVAL)
        if flags & RENAME_WHITEOUT:
            return _neg(E.EPERM)                      # needs CAP_MKNOD and a whiteout-capable fs
        oldname = self._pathname(old)
        if isinstance(oldname, int):
            return oldname
        newname = self._pathname(new)
        if isinstance(newname, int):
            return newname
        with self.vfs.nameidata(task) as nd:
            a = self._parent(nd, task, olddfd, oldname)
            if isinstance(a, int):
                return a
            b = self._parent(nd, task, newdfd, newname)
            if isinstance(b, int):
                return b
            (ostack, olast, otrail), (nstack, nlast, ntrail) = a, b
            if olast in (None, ".", ".."):
                return _neg(E.EBUSY)
            if nlast in (None, ".", ".."):
                return _neg(E.EEXIST if flags & RENAME_NOREPLACE else E.EBUSY)
            op, np_ = ostack[-1], nstack[-1]
            if op.mount is not np_.mount:
                return _neg(E.EXDEV)
            if not op.mount.writable:
                return _neg(E.EROFS)
            src = nd.step(op, olast)
            if isinstance(src, int):
                return src
            dst = nd.step(np_, nlast)
            if not isinstance(dst, int) and flags & RENAME_NOREPLACE:
                return _neg(E.EEXIST)
            if src.mount is not op.mount or (not isinstance(dst, int) and dst.mount is not np_.mount):
                return _neg(E.EBUSY)
            if op.fd is None:
                return _neg(E.EPERM)
            if not src.is_dir(task) and (otrail or ntrail) and (isinstance(dst, int) or not flags & RENAME_EXCHANGE):
                return _neg(E.ENOTDIR)
            err = self._may_delete(nd, op, src)
            if not err and src.is_dir(task) and (op.st.st_dev, op.st.st_ino) != (np_.st.st_dev, np_.st.st_ino):
                err = self._perm(nd, src, MAY_WRITE)      # vfs_rename: its ".." changes
            if not err and not isinstance(dst, int):
                err = self._may_delete(nd, np_, dst)
            elif not err:
                err = self._perm(nd, np_, MAY_WRITE | MAY_EXEC)
            if err:
                return err
            ret = host_syscall(SYS_renameat2, ctypes.c_int(op.fd), ctypes.c_char_p(os.fsencode(olast)),
                               ctypes.c_int(np_.fd), ctypes.c_char_p(os.fsencode(nlast)), ctypes.c_uint(flags))
            if ret == 0:
                self._renamed(src.path, join_path(np_.path, nlast))
            return ret

    def _renamed(self, old: str, new: str) -> None:
        """What the guest renamed stays the working directory, or the open file, of
        whoever holds it (the kernel holds the inode; this model holds the path, so
        the path follows)."""
        def moved(path: str) -> str | None:
            if path == old or path.startswith(old.rstrip("/") + "/"):
                return new + path[len(old):]
            return None
        for proc in self.m.processes:
            held = self.vfs.cwd_loc(proc)
            proc.cwd = moved(proc.cwd) or proc.cwd
            if held is not None:
                held.path = proc.cwd
            for f in proc.fds.fds.values() if hasattr(proc.fds, "fds") else ():
                path = getattr(f, "guest_path", None)
                if path and moved(path):
                    f.guest_path = moved(path)

    def sys_truncate(self, task, regs, path, length, *_):
        """do_sys_truncate / vfs_truncate: EINVAL for a negative length, EISDIR,
        EINVAL for a non-regular file, EROFS, then write permission."""
        name = self._pathname(path)
        if isinstance(name, int):
            return name
        if _off(length) < 0:
            return _neg(E.EINVAL)
        with self.vfs.nameidata(task) as nd:
            stack = self._lookup(nd, task, AT_FDCWD, name, True)
            if isinstance(stack, int):
                return stack
            loc = stack[-1]
            mode = loc.mode(task)
            if S.S_ISDIR(mode):
                return _neg(E.EISDIR)
            if not S.S_ISREG(mode):
                return _neg(E.EINVAL)
            if not loc.mount.writable:
                return _neg(E.EROFS)
            err = self._perm(nd, loc, MAY_WRITE)
            if err:
                return err
            if loc.fd is None:
                return _neg(E.EINVAL)
            f = self._reopen(nd, stack, 1, MAY_WRITE)
            if f is RETRY:
                return _neg(E.EAGAIN)
            if isinstance(f, int):
                return f
            try:
                return f.truncate(_off(length))
            finally:
                f.release()

    # ================================================================== attributes
    def _setattr_at(self, task, dirfd, path, flags, change, *, empty_ok=True, pre=None) -> int:
        """The path (or, with AT_EMPTY_PATH, the descriptor) whose attributes change:
        EROFS on a read-only mount (mnt_want_write), then ``change(nd, loc)``."""
        name = self._pathname(path, empty_ok=empty_ok and bool(flags & AT_EMPTY_PATH)) if path else ""
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            if name == "":
                loc = self._fd_loc(task, dirfd)
            else:
                stack = self._lookup(nd, task, dirfd, name, not flags & AT_SYMLINK_NOFOLLOW)
                loc = stack if isinstance(stack, int) else stack[-1]
            if isinstance(loc, int):
                return loc
            err = pre(loc) if pre else 0
            if err:
                return err
            if loc.fd is None:
                return _neg(E.EPERM)              # a modeled inode: no setattr
            if not loc.mount.writable:
                return _neg(E.EROFS)
            return change(nd, loc)

    def _chmod(self, nd, loc: Loc, mode: int) -> int:
        """chmod_common + setattr_prepare: the owner or root; S_ISGID dropped for a
        file whose group the task is not in (unless root)."""
        a = loc.attrs(nd.task)
        if not self._owner_or_capable(nd.cred, a):
            return _neg(E.EPERM)
        mode &= 0o7777
        if not fs_capable(nd.cred) and not in_group(nd.cred, a.gid):
            mode &= ~S.S_ISGID
        ret = host_syscall(SYS_fchmodat2, ctypes.c_int(loc.fd), ctypes.c_char_p(b""),
                           ctypes.c_uint(mode), ctypes.c_int(AT_EMPTY_PATH))
        if ret == -E.ENOSYS:
            return _host(os.chmod, _proc_fd(loc.fd), mode)
        return ret

    def sys_chmod(self, task, regs, path, mode, *_):
        return self.sys_fchmodat2(task, regs, AT_FDCWD, path, mode, 0)

    def sys_fchmodat(self, task, regs, dirfd, path, mode, *_):
        return self.sys_fchmodat2(task, regs, dirfd, path, mode, 0)

    def sys_fchmodat2(self, task, regs, dirfd, path, mode, flags, *_):
        flags &= 0xFFFFFFFF
        if flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH):
            return _neg(E.EINVAL)
        if not path and not flags & AT_EMPTY_PATH:
            return _neg(E.EFAULT)
        return self._setattr_at(task, dirfd, path, flags,
                                lambda nd, loc: self._chmod(nd, loc, mode) if not loc.is_link(task)
                                else _neg(E.EOPNOTSUPP))

    def sys_fchmod(self, task, regs, fd, mode, *_):
        f = self._file(task, fd)
        if f is None or getattr(f, "path_only", False):
            return _neg(E.EBADF)
        return self._setattr_at(task, fd, 0, AT_EMPTY_PATH, lambda nd, loc: self._chmod(nd, loc, mode))

    def _chown(self, nd, loc: Loc, uid: int, gid: int) -> int:
        """chown_common + setattr_prepare (chown_ok/chgrp_ok): only root changes the
        owner; the owner may change the group to one of its own."""
        a = loc.attrs(nd.task)
        cred = nd.cred
        uid, gid = uid & 0xFFFFFFFF, gid & 0xFFFFFFFF
        if not fs_capable(cred):
            if uid != NO_ID and (cred.fsuid != a.uid or uid != a.uid):
                return _neg(E.EPERM)
            if gid != NO_ID and (cred.fsuid != a.uid or (gid != a.gid and not in_group(cred, gid))):
                return _neg(E.EPERM)
        return host_syscall(SYS_fchownat, ctypes.c_int(loc.fd), ctypes.c_char_p(b""),
                            ctypes.c_int(_int(uid)), ctypes.c_int(_int(gid)), ctypes.c_int(AT_EMPTY_PATH))

    def sys_chown(self, task, regs, path, uid, gid, *_):
        return self.sys_fchownat(task, regs, AT_FDCWD, path, uid, gid, 0)

    def sys_lchown(self, task, regs, path, uid, gid, *_):
        return self.sys_fchownat(task, regs, AT_FDCWD, path, uid, gid, AT_SYMLINK_NOFOLLOW)

    def sys_fchownat(self, task, regs, dirfd, path, uid, gid, flags, *_):
        flags &= 0xFFFFFFFF
        if flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH):
            return _neg(E.EINVAL)
        if not path:
            return _neg(E.EFAULT)
        return self._setattr_at(task, dirfd, path, flags, lambda nd, loc: self._chown(nd, loc, uid, gid))

    def sys_fchown(self, task, regs, fd, uid, gid, *_):
        f = self._file(task, fd)
        if f is None or getattr(f, "path_only", False):
            return _neg(E.EBADF)
        return self._setattr_at(task, fd, 0, AT_EMPTY_PATH, lambda nd, loc: self._chown(nd, loc, uid, gid))

    def sys_utimensat(self, task, regs, dirfd, path, times, flags, *_):
        """sys_utimensat/do_utimes/vfs_utimes in order: both UTIME_OMIT does nothing
        (not even the lookup); the flags; NULL path: the descriptor itself (no flags);
        the lookup; EINVAL for a bad tv_nsec; EROFS; then "now" needs ownership or write
        permission (EACCES), explicit times ownership (EPERM)."""
        flags &= 0xFFFFFFFF
        spec = [(0, UTIME_NOW), (0, UTIME_NOW)]
        if times:
            spec = [struct.unpack("<qq", self.mem.read_user(times + 16 * i, 16)) for i in (0, 1)]
            if all(ns == UTIME_OMIT for _, ns in spec):
                return 0
        if not path:
            if _fd(dirfd) == _fd(AT_FDCWD):
                return _neg(E.EFAULT)
            if flags:
                return _neg(E.EINVAL)
            f = self._file(task, dirfd)
            if f is None or getattr(f, "path_only", False):
                return _neg(E.EBADF)
            flags = AT_EMPTY_PATH
        elif flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH):
            return _neg(E.EINVAL)

        def valid(loc):
            bad = any(ns not in (UTIME_NOW, UTIME_OMIT) and not 0 <= ns < 1_000_000_000 for _, ns in spec)
            return _neg(E.EINVAL) if bad else 0

        def change(nd, loc):
            a = loc.attrs(task)
            now = all(ns == UTIME_NOW for _, ns in spec)
            if not self._owner_or_capable(nd.cred, a):
                if not now:
                    return _neg(E.EPERM)
                err = self._perm(nd, loc, MAY_WRITE)
                if err:
                    return err
            cur = os.stat(_proc_fd(loc.fd))
            t = time.time_ns()
            vals = tuple(old if ns == UTIME_OMIT else t if ns == UTIME_NOW else sec * 1_000_000_000 + ns
                         for (sec, ns), old in zip(spec, (cur.st_atime_ns, cur.st_mtime_ns)))
            return _host(os.utime, _proc_fd(loc.fd), ns=vals)
        return self._setattr_at(task, dirfd, path, flags, change, pre=valid)


def join_path(parent: str, name: str) -> str:
    return parent.rstrip("/") + "/" + name
