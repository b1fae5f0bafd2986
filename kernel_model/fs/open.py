"""The syscalls of fs/open.c: open/openat/openat2/creat and close, access/faccessat,
chdir/fchdir, truncate/ftruncate/fallocate, chmod and chown in all their forms; and
``open_guest_path``, the kernel-internal open (filp_open) exec, the ELF loader and
uprobes use.
"""

from __future__ import annotations

import ctypes
import errno as E
import os
import stat as S
import struct
from enum import Enum

from kernel_model.fs.file import O_LARGEFILE, HostFile, OpenFile, SpecialDir, fdget, host_syscall
from kernel_model.fs.namei import (
    MAY_EXEC,
    MAY_READ,
    MAY_WRITE,
    RESOLVE_BENEATH,
    RESOLVE_CACHED,
    RESOLVE_IN_ROOT,
    RESOLVE_NO_SYMLINKS,
    Loc,
    fs_capable,
    in_group,
)
from kernel_model.fs.namei_syscalls import host_call, proc_fd
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import fd_arg, int_arg, loff_t, syscall
from kernel_model.include.uapi.linux.fcntl import (
    AT_EACCESS,
    AT_EMPTY_PATH,
    AT_FDCWD,
    AT_SYMLINK_NOFOLLOW,
    FASYNC,
    O_ACCMODE,
    O_APPEND,
    O_CLOEXEC,
    O_CREAT,
    O_DIRECT,
    O_DIRECTORY,
    O_DSYNC,
    O_EXCL,
    O_NOATIME,
    O_NOCTTY,
    O_NOFOLLOW,
    O_NONBLOCK,
    O_PATH,
    O_SYNC,
    O_TMPFILE,
    O_TRUNC,
)

VALID_OPEN_FLAGS = (
    O_ACCMODE
    | O_CREAT
    | O_EXCL
    | O_NOCTTY
    | O_TRUNC
    | O_APPEND
    | O_NONBLOCK
    | O_DSYNC
    | FASYNC
    | O_DIRECT
    | O_LARGEFILE
    | O_DIRECTORY
    | O_NOFOLLOW
    | O_NOATIME
    | O_CLOEXEC
    | O_SYNC
    | O_PATH
    | O_TMPFILE
)
O_PATH_FLAGS = O_DIRECTORY | O_NOFOLLOW | O_PATH | O_CLOEXEC
SETFL_FLAGS = O_APPEND | O_NONBLOCK | FASYNC | O_DIRECT | O_NOATIME
RESOLVE_ALL = 0x3F
SYS_renameat2, SYS_fchmodat2, SYS_fchownat, SYS_linkat = 316, 452, 260, 265
SYS_fallocate = 285
NO_ID = 0xFFFFFFFF
OPEN_RETRIES = 16  # walks of one open that another host process's swap may restart


class _Retry(Enum):
    """What an open answers when the inode changed between the walk and the open (another
    host process swapped it): the walk is made again."""

    RETRY = "retry"


RETRY = _Retry.RETRY


class OpenSyscalls:
    """Opening, closing and the attribute changes of fs/open.c."""

    def __init__(self, sc):
        self.m = sc.m
        self.vfs = sc.vfs
        self.namei = sc.namei

    @syscall(2, "open", partial="O_TMPFILE is EOPNOTSUPP")
    def sys_open(self, task, regs, path, flags, mode, *_):
        return self.sys_openat(task, regs, AT_FDCWD, path, flags, mode)

    @syscall(85, "creat")
    def sys_creat(self, task, regs, path, mode, *_):
        return self.sys_openat(task, regs, AT_FDCWD, path, O_CREAT | 1 | O_TRUNC, mode)

    @syscall(257, "openat", partial="O_TMPFILE is EOPNOTSUPP")
    def sys_openat(self, task, regs, dirfd, path, flags, mode, *_):
        """do_sys_open: unknown flags are ignored (only openat2 refuses them)."""
        flags &= VALID_OPEN_FLAGS & 0xFFFFFFFF
        return self._do_open(task, dirfd, path, flags, mode & 0o7777)

    @syscall(437, "openat2", partial="O_TMPFILE is EOPNOTSUPP")
    def sys_openat2(self, task, regs, dirfd, path, how, size, *_):
        """openat2: struct open_how {flags, mode, resolve}; unknown flags, a mode
        without O_CREAT/O_TMPFILE and RESOLVE_* bits (not modeled) are EINVAL/E2BIG."""
        if size < 24:
            return neg(E.EINVAL)
        if size > 4096:
            return neg(E.E2BIG)
        flags, mode, resolve = struct.unpack("<QQQ", self.m.mem.read_user(how, 24))
        if size > 24 and any(self.m.mem.read_user(how + 24, size - 24)):
            return neg(E.E2BIG)
        if flags & ~VALID_OPEN_FLAGS or resolve & ~RESOLVE_ALL or mode & ~0o7777:
            return neg(E.EINVAL)
        if mode and not flags & (O_CREAT | O_TMPFILE & ~O_DIRECTORY):
            return neg(E.EINVAL)
        if resolve & RESOLVE_BENEATH and resolve & RESOLVE_IN_ROOT:
            return neg(E.EINVAL)
        if resolve & RESOLVE_CACHED and flags & (O_TRUNC | O_CREAT | O_TMPFILE):
            return neg(E.EAGAIN)
        return self._do_open(task, dirfd, path, flags, mode, resolve)

    def _do_open(self, task, dirfd, path, flags, mode, resolve: int = 0) -> int:
        """build_open_flags + do_filp_open, then fd_install."""
        if flags & O_TMPFILE == O_TMPFILE:
            return neg(E.EOPNOTSUPP)  # no O_TMPFILE in the modeled filesystems
        if flags & O_PATH:
            flags &= O_PATH_FLAGS
        elif flags & O_CREAT and flags & O_DIRECTORY:
            return neg(E.EINVAL)
        name = self.namei.pathname(path)
        if isinstance(name, int):
            return name
        for _ in range(OPEN_RETRIES):
            with self.vfs.nameidata(task) as nd:
                f = self._open_walk(nd, task, dirfd, name, flags, mode, resolve)
            if f is not RETRY:
                break
        else:
            return neg(E.EAGAIN)
        if isinstance(f, int):
            return f
        return task.process.files.install(f, 0, cloexec=bool(flags & O_CLOEXEC))

    def open_guest_path(self, task, path: str, flags: int) -> OpenFile | int:
        """A new open file description for the guest path ``path`` (absolute or relative
        to the task's working directory), as ``open`` would make it; not installed.
        /proc reopens a descriptor's file by its path through this."""
        for _ in range(OPEN_RETRIES):
            with self.vfs.nameidata(task) as nd:
                f = self._open_walk(nd, task, AT_FDCWD, path, flags, 0)
            if f is not RETRY:
                return f
        return neg(E.EAGAIN)

    def _open_walk(self, nd, task, dirfd, name, flags, mode, resolve: int = 0) -> OpenFile | int | _Retry:
        if resolve:
            start = self.namei.start(nd, task, dirfd, "." if name.startswith("/") else name)
            if isinstance(start, int):
                return start
            nd.restrict(resolve, start)
        r = self.namei.parent(nd, task, dirfd, name)
        if isinstance(r, int):
            return r
        stack, last, trailing = r
        return self._open_last(nd, stack, last, trailing, flags, mode)

    def _open_last(self, nd, stack, last, trailing, flags, mode) -> OpenFile | int | _Retry:
        """open_last_lookups + do_open: the last component, created if O_CREAT asks,
        its symlink followed unless O_NOFOLLOW or O_CREAT|O_EXCL."""
        creat = bool(flags & O_CREAT)
        follow = not flags & O_NOFOLLOW and not (creat and flags & O_EXCL)
        if last is None or last in (".", ".."):
            if creat and flags & O_EXCL:
                return neg(E.EEXIST)
            stack = nd.component(stack, last, follow=True) if last else stack
            if isinstance(stack, int):
                return stack
            return self._open_existing(nd, stack, flags)
        if creat and trailing:
            return neg(E.EISDIR)
        parent = stack[-1]
        child = nd.step(parent, last) if len(os.fsencode(last)) <= 255 else neg(E.ENAMETOOLONG)
        if child == -E.ENOENT and creat:
            return self._create(nd, stack, last, flags, mode)
        if isinstance(child, int):
            return child
        if creat and flags & O_EXCL:
            return neg(E.EEXIST)
        if child.is_link(nd.task) and (follow or trailing):
            target = child.node.follow(nd.task) if child.node is not None else ""
            if not isinstance(target, (str, int)):  # a /proc magic link: nd_jump_link
                res = nd.follow_link(stack, child)
                return res if isinstance(res, int) else self._open_existing(nd, res, flags)
            nd.links += 1
            if nd.links > 40 or nd.resolve & RESOLVE_NO_SYMLINKS:
                return neg(E.ELOOP)
            target = self._link_target(nd, child)
            if isinstance(target, int):
                return target
            if target == "":
                return neg(E.ENOENT)
            r = nd.parent(stack, target + ("/" if trailing else ""))
            if isinstance(r, int):
                return r
            stack, last, trailing = r
            return self._open_last(nd, stack, last, trailing, flags, mode)
        stack = stack + [child]
        if trailing and not child.is_dir(nd.task):
            return neg(E.ENOTDIR)
        return self._open_existing(nd, stack, flags)

    @staticmethod
    def _link_target(nd, link: Loc):
        if link.node is not None:
            return link.node.follow(nd.task)
        try:
            return os.fsdecode(os.readlink("", dir_fd=link.fd))
        except OSError as e:
            return -(e.errno or E.EIO)

    def _create(self, nd, stack, last, flags, mode) -> OpenFile | int | _Retry:
        """lookup_open's O_CREAT of a missing name: EROFS on a read-only mount (before
        any permission), may_o_create, then the new regular file with the mode less
        the umask, owned by the task's fsuid."""
        parent = stack[-1]
        if not parent.mount.writable:
            return neg(E.EROFS)
        err = self.namei.may_create(nd, parent)
        if err:
            return neg(E.EACCES) if err == -E.EPERM else err  # no ->create: EACCES
        acc = flags & O_ACCMODE
        hflags = (
            (acc if acc != 3 else os.O_RDWR)
            | O_CREAT
            | O_EXCL
            | os.O_NOFOLLOW
            | os.O_CLOEXEC
            | (flags & (O_APPEND | O_NONBLOCK | O_SYNC | O_DSYNC))
        )
        try:
            hfd = os.open(last, hflags, 0o600, dir_fd=parent.fd)
        except FileExistsError:
            return neg(E.EEXIST) if flags & O_EXCL else RETRY  # another host process made it
        except OSError as e:
            return -(e.errno or E.EIO)
        try:
            os.fchmod(hfd, mode & ~nd.task.process.fs.umask & 0o7777)
            self.namei.init_owner(nd, parent, lambda u, g: os.fchown(hfd, u, g))
        except OSError:
            pass
        return self._host_file(hfd, stack[-1].path.rstrip("/") + "/" + last, flags)

    def _open_existing(self, nd, stack, flags) -> OpenFile | int | _Retry:
        """do_open + may_open for an inode that exists."""
        loc = stack[-1]
        task = nd.task
        acc = flags & O_ACCMODE
        mode = loc.mode(task)
        if flags & O_CREAT and S.S_ISDIR(mode):
            return neg(E.EISDIR)
        if flags & O_DIRECTORY and not S.S_ISDIR(mode):
            return neg(E.ENOTDIR)
        if flags & O_PATH:
            return self._open_path(task, loc, flags)
        if loc.file is not None:  # a magic link to a descriptor: opened again
            from kernel_model.fs.proc.procfs import reopen

            return reopen(self.m, task, loc.file, flags)
        may = {0: MAY_READ, 1: MAY_WRITE, 2: MAY_READ | MAY_WRITE, 3: MAY_READ | MAY_WRITE}[acc]
        if flags & O_TRUNC:
            may |= MAY_WRITE
            if S.S_ISREG(mode) and not loc.mount.writable:
                return neg(E.EROFS)
        if S.S_ISLNK(mode):
            return neg(E.ELOOP)
        if S.S_ISDIR(mode) and may & MAY_WRITE:
            return neg(E.EISDIR)
        err = self.namei.perm(nd, loc, may)
        if err:
            return err
        if flags & O_NOATIME and not self.namei.owner_or_capable(nd.cred, loc.attrs(task)):
            return neg(E.EPERM)
        if loc.node is not None:
            if S.S_ISDIR(mode):
                parent = stack[-2].attrs(task).ino if len(stack) > 1 else loc.attrs(task).ino
                d = SpecialDir(task, loc.node, loc.path, parent)
                d.open_flags = (flags & (O_DIRECTORY | O_NOFOLLOW | O_NOATIME)) | O_LARGEFILE
                return d
            return loc.node.open(task, flags)
        if not (S.S_ISREG(mode) or S.S_ISDIR(mode)):
            return neg(E.EACCES)  # host FIFOs, sockets, devices: not opened
        return self._reopen(nd, stack, flags, may)

    def _reopen(self, nd, stack, flags, may) -> OpenFile | int | _Retry:
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
                hflags = (
                    (acc if acc != 3 else os.O_RDWR)
                    | os.O_NOFOLLOW
                    | os.O_CLOEXEC
                    | os.O_NOCTTY
                    | os.O_NONBLOCK
                    | (extra & ~O_TRUNC)
                )
                hfd = os.open(name, hflags, dir_fd=stack[-2].fd)
        except OSError as e:
            if e.errno in (E.ELOOP, E.ENOENT, E.ENOTDIR, E.EISDIR):
                return RETRY  # swapped mid-open by another host process
            return -(e.errno or E.EIO)
        st = os.fstat(hfd)
        if (st.st_dev, st.st_ino) != (loc.st.st_dev, loc.st.st_ino):
            os.close(hfd)
            return RETRY
        if extra & O_TRUNC and S.S_ISREG(st.st_mode):
            try:  # this very inode, even if opened O_RDONLY
                os.truncate(proc_fd(hfd), 0)
            except OSError as e:
                os.close(hfd)
                return -(e.errno or E.EIO)
        if not extra & O_NONBLOCK:
            os.set_blocking(hfd, True)
        return self._host_file(hfd, loc.path, flags)

    @staticmethod
    def _host_file(hfd: int, guest_path: str, flags: int) -> HostFile:
        f = HostFile(hfd, guest_path, flags & O_ACCMODE, status_flags=flags & SETFL_FLAGS)
        f.open_flags = (
            flags & ~(O_ACCMODE | O_CREAT | O_EXCL | O_NOCTTY | O_TRUNC | SETFL_FLAGS | O_CLOEXEC)
        ) | O_LARGEFILE
        return f

    def _open_path(self, task, loc: Loc, flags: int) -> OpenFile | int:
        """O_PATH: a descriptor naming the inode (usable as a dirfd, for fstat and
        AT_EMPTY_PATH), no permission needed."""
        if loc.fd is None:
            if loc.node is not None and S.S_ISDIR(loc.attrs(task).mode):
                d = SpecialDir(task, loc.node, loc.path, 0)
                d.readable = False
                return d
            return loc.file if loc.file is not None else neg(E.EACCES)
        f = HostFile(os.dup(loc.fd), loc.path, 0, path_only=True)
        f.open_flags = flags & (O_PATH | O_DIRECTORY | O_NOFOLLOW)
        return f

    @syscall(3, "close")
    def sys_close(self, task, regs, fd, *_):
        return task.process.files.close(fd_arg(fd))

    @syscall(21, "access")
    def sys_access(self, task, regs, path, mode, *_):
        return self.sys_faccessat2(task, regs, AT_FDCWD, path, mode, 0)

    @syscall(269, "faccessat")
    def sys_faccessat(self, task, regs, dirfd, path, mode, *_):
        return self.sys_faccessat2(task, regs, dirfd, path, mode, 0)

    @syscall(439, "faccessat2")
    def sys_faccessat2(self, task, regs, dirfd, path, mode, flags, *_):
        """do_faccessat: the real ids unless AT_EACCESS; W_OK on a read-only mount is
        EROFS; X_OK needs an x bit even for root."""
        mode, flags = mode & 0xFFFFFFFF, flags & 0xFFFFFFFF
        if mode & ~7:
            return neg(E.EINVAL)
        if flags & ~(AT_EACCESS | AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH):
            return neg(E.EINVAL)
        name = self.namei.pathname(path, empty_ok=bool(flags & AT_EMPTY_PATH))
        if isinstance(name, int):
            return name
        cred = task.cred if flags & AT_EACCESS else self.namei.access_cred(task.cred)
        with self.vfs.nameidata(task, cred) as nd:
            if name == "":
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
            if not mode:
                return 0
            return self.namei.perm(nd, loc, mode)

    @syscall(80, "chdir")
    def sys_chdir(self, task, regs, path, *_):
        name = self.namei.pathname(path)
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            stack = self.namei.lookup(nd, task, AT_FDCWD, name, True)
            if isinstance(stack, int):
                return stack
            return self._set_cwd(nd, task, stack[-1])

    @syscall(81, "fchdir")
    def sys_fchdir(self, task, regs, fd, *_):
        f = fdget(task, fd)
        if f is None:
            return neg(E.EBADF)
        if not f.is_dir or getattr(f, "guest_path", None) is None:
            return neg(E.ENOTDIR)
        with self.vfs.nameidata(task) as nd:
            stack = self.namei.start(nd, task, fd, "")
            if isinstance(stack, int):
                return stack
            return self._set_cwd(nd, task, stack[-1])

    def _set_cwd(self, nd, task, loc: Loc) -> int:
        if not loc.is_dir(task):
            return neg(E.ENOTDIR)
        err = self.namei.perm(nd, loc, MAY_EXEC)
        if err:
            return err
        task.process.fs.pwd = loc.path
        self.vfs.hold_cwd(task.process, loc)
        return 0

    @syscall(76, "truncate")
    def sys_truncate(self, task, regs, path, length, *_):
        """do_sys_truncate / vfs_truncate: EINVAL for a negative length, EISDIR,
        EINVAL for a non-regular file, EROFS, then write permission."""
        name = self.namei.pathname(path)
        if isinstance(name, int):
            return name
        if loff_t(length) < 0:
            return neg(E.EINVAL)
        with self.vfs.nameidata(task) as nd:
            stack = self.namei.lookup(nd, task, AT_FDCWD, name, True)
            if isinstance(stack, int):
                return stack
            loc = stack[-1]
            mode = loc.mode(task)
            if S.S_ISDIR(mode):
                return neg(E.EISDIR)
            if not S.S_ISREG(mode):
                return neg(E.EINVAL)
            if not loc.mount.writable:
                return neg(E.EROFS)
            err = self.namei.perm(nd, loc, MAY_WRITE)
            if err:
                return err
            if loc.fd is None:
                return neg(E.EINVAL)
            f = self._reopen(nd, stack, 1, MAY_WRITE)
            if f is RETRY:
                return neg(E.EAGAIN)
            if isinstance(f, int):
                return f
            try:
                return f.truncate(loff_t(length))
            finally:
                f.release()

    @syscall(77, "ftruncate")
    def sys_ftruncate(self, task, regs, fd, length, *_):
        if loff_t(length) < 0:
            return neg(E.EINVAL)
        f = fdget(task, fd)
        if f is None:
            return neg(E.EBADF)
        return f.truncate(loff_t(length))

    @syscall(285, "fallocate", partial="host regular files only; others answer vfs_fallocate's errors")
    def sys_fallocate(self, task, regs, fd, mode, offset, length, *_):
        """vfs_fallocate.  A regular host file goes to the host's fallocate, whose
        checks are the same kernel's (its descriptor has the guest's access mode, and
        only a granted file is writable); other files answer in vfs_fallocate's order."""
        f = fdget(task, fd)
        if f is None or getattr(f, "path_only", False):  # fdget skips O_PATH files
            return neg(E.EBADF)
        mode, off, ln = mode & 0xFFFFFFFF, loff_t(offset), loff_t(length)
        if isinstance(f, HostFile) and f.is_regular:
            return host_syscall(
                SYS_fallocate, ctypes.c_int(f.fd), ctypes.c_int(mode), ctypes.c_long(off), ctypes.c_long(ln)
            )
        if off < 0 or ln <= 0:
            return neg(E.EINVAL)
        if mode & ~0xFF:
            return neg(E.EOPNOTSUPP)
        if not f.writable:
            return neg(E.EBADF)
        if f.is_pipe:
            return neg(E.ESPIPE)
        return neg(E.EISDIR) if f.is_dir else neg(E.ENODEV)

    def setattr_at(self, task, dirfd, path, flags, change, *, empty_ok=True, pre=None) -> int:
        """The path (or, with AT_EMPTY_PATH, the descriptor) whose attributes change:
        EROFS on a read-only mount (mnt_want_write), then ``change(nd, loc)``."""
        name = self.namei.pathname(path, empty_ok=empty_ok and bool(flags & AT_EMPTY_PATH)) if path else ""
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            if name == "":
                loc = self.namei.fd_loc(task, dirfd)
            else:
                stack = self.namei.lookup(nd, task, dirfd, name, not flags & AT_SYMLINK_NOFOLLOW)
                loc = stack if isinstance(stack, int) else stack[-1]
            if isinstance(loc, int):
                return loc
            err = pre(loc) if pre else 0
            if err:
                return err
            if loc.fd is None:
                return neg(E.EPERM)  # a modeled inode: no setattr
            if not loc.mount.writable:
                return neg(E.EROFS)
            return change(nd, loc)

    def _chmod(self, nd, loc: Loc, mode: int) -> int:
        """chmod_common + setattr_prepare: the owner or root; S_ISGID dropped for a
        file whose group the task is not in (unless root)."""
        a = loc.attrs(nd.task)
        if not self.namei.owner_or_capable(nd.cred, a):
            return neg(E.EPERM)
        mode &= 0o7777
        if not fs_capable(nd.cred) and not in_group(nd.cred, a.gid):
            mode &= ~S.S_ISGID
        fd: int = loc.fd  # type: ignore[assignment]  # setattr_at changes only a host inode
        ret = host_syscall(
            SYS_fchmodat2, ctypes.c_int(fd), ctypes.c_char_p(b""), ctypes.c_uint(mode), ctypes.c_int(AT_EMPTY_PATH)
        )
        if ret == -E.ENOSYS:
            return host_call(os.chmod, proc_fd(fd), mode)
        return ret

    @syscall(90, "chmod")
    def sys_chmod(self, task, regs, path, mode, *_):
        return self.sys_fchmodat2(task, regs, AT_FDCWD, path, mode, 0)

    @syscall(268, "fchmodat")
    def sys_fchmodat(self, task, regs, dirfd, path, mode, *_):
        return self.sys_fchmodat2(task, regs, dirfd, path, mode, 0)

    @syscall(452, "fchmodat2")
    def sys_fchmodat2(self, task, regs, dirfd, path, mode, flags, *_):
        flags &= 0xFFFFFFFF
        if flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH):
            return neg(E.EINVAL)
        if not path and not flags & AT_EMPTY_PATH:
            return neg(E.EFAULT)
        return self.setattr_at(
            task,
            dirfd,
            path,
            flags,
            lambda nd, loc: self._chmod(nd, loc, mode) if not loc.is_link(task) else neg(E.EOPNOTSUPP),
        )

    @syscall(91, "fchmod")
    def sys_fchmod(self, task, regs, fd, mode, *_):
        f = fdget(task, fd)
        if f is None or getattr(f, "path_only", False):
            return neg(E.EBADF)
        return self.setattr_at(task, fd, 0, AT_EMPTY_PATH, lambda nd, loc: self._chmod(nd, loc, mode))

    def _chown(self, nd, loc: Loc, uid: int, gid: int) -> int:
        """chown_common + setattr_prepare (chown_ok/chgrp_ok): only root changes the
        owner; the owner may change the group to one of its own."""
        a = loc.attrs(nd.task)
        cred = nd.cred
        uid, gid = uid & 0xFFFFFFFF, gid & 0xFFFFFFFF
        if not fs_capable(cred):
            if uid != NO_ID and (cred.fsuid != a.uid or uid != a.uid):
                return neg(E.EPERM)
            if gid != NO_ID and (cred.fsuid != a.uid or (gid != a.gid and not in_group(cred, gid))):
                return neg(E.EPERM)
        fd: int = loc.fd  # type: ignore[assignment]  # setattr_at changes only a host inode
        return host_syscall(
            SYS_fchownat,
            ctypes.c_int(fd),
            ctypes.c_char_p(b""),
            ctypes.c_int(int_arg(uid)),
            ctypes.c_int(int_arg(gid)),
            ctypes.c_int(AT_EMPTY_PATH),
        )

    @syscall(92, "chown")
    def sys_chown(self, task, regs, path, uid, gid, *_):
        return self.sys_fchownat(task, regs, AT_FDCWD, path, uid, gid, 0)

    @syscall(94, "lchown")
    def sys_lchown(self, task, regs, path, uid, gid, *_):
        return self.sys_fchownat(task, regs, AT_FDCWD, path, uid, gid, AT_SYMLINK_NOFOLLOW)

    @syscall(260, "fchownat")
    def sys_fchownat(self, task, regs, dirfd, path, uid, gid, flags, *_):
        flags &= 0xFFFFFFFF
        if flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH):
            return neg(E.EINVAL)
        if not path:
            return neg(E.EFAULT)
        return self.setattr_at(task, dirfd, path, flags, lambda nd, loc: self._chown(nd, loc, uid, gid))

    @syscall(93, "fchown")
    def sys_fchown(self, task, regs, fd, uid, gid, *_):
        f = fdget(task, fd)
        if f is None or getattr(f, "path_only", False):
            return neg(E.EBADF)
        return self.setattr_at(task, fd, 0, AT_EMPTY_PATH, lambda nd, loc: self._chown(nd, loc, uid, gid))
