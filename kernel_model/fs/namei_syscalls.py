"""The path syscalls of fs/namei.c - mkdir, mknod, symlink, link, unlink, rmdir,
rename and their ``*at`` forms - and the user-path helpers every path syscall shares
(getname, the walk's start at a directory descriptor or the working directory,
may_create/may_delete, inode_init_owner).

Each path syscall walks the guest's namespace (``path_lookupat``/``filename_parentat``
of :mod:`kernel_model.fs.namei`), checks what the kernel checks in the kernel's order
(``may_open``, ``may_create``, ``may_delete``, ``mnt_want_write``'s ``EROFS``,
``generic_permission`` with the task's credentials), then asks the host to do the one
operation on the descriptor or name the walk reached - never on a full host path.
Every bad argument is an errno; nothing here raises for a guest's mistake.
"""

from __future__ import annotations

import ctypes
import errno as E
import os
import stat as S
from dataclasses import replace

from kernel_model.fs.file import HostFile, SpecialDir, fdget, host_syscall
from kernel_model.fs.fs_types import Attrs
from kernel_model.fs.namei import MAY_EXEC, MAY_READ, MAY_WRITE, PATH_MAX, Loc, fs_capable
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import fd_arg, syscall
from kernel_model.include.uapi.linux.fcntl import AT_EMPTY_PATH, AT_FDCWD, AT_REMOVEDIR, AT_SYMLINK_FOLLOW

RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT = 1, 2, 4
SYS_renameat2, SYS_fchmodat2, SYS_fchownat, SYS_linkat = 316, 452, 260, 265


def host_call(fn, *args, **kw) -> int:
    """One host call on what the walk reached: 0 or its -errno."""
    try:
        fn(*args, **kw)
    except OSError as e:
        return -(e.errno or E.EIO)
    return 0


def proc_fd(fd: int) -> str:
    """The host's own magic link to a descriptor: the exact inode the walk opened."""
    return f"/proc/self/fd/{fd}"


def join_path(parent: str, name: str) -> str:
    return parent.rstrip("/") + "/" + name


class NameiSyscalls:
    """Path creation and removal, and the user-path helpers of the other path syscalls."""

    def __init__(self, sc):
        self.m = sc.m
        self.vfs = sc.vfs

    def pathname(self, ptr: int, *, empty_ok: bool = False) -> str | int:
        """getname: EFAULT (raised), ENAMETOOLONG past PATH_MAX, ENOENT for ""."""
        raw = self.m.mem.read_cstring(ptr, PATH_MAX)
        if len(raw) >= PATH_MAX:
            return neg(E.ENAMETOOLONG)
        if not raw and not empty_ok:
            return neg(E.ENOENT)
        return os.fsdecode(raw)

    def start(self, nd, task, dirfd: int, name: str):
        """The walk's starting stack: the root for an absolute name, else the working
        directory or the directory descriptor's own inode (EBADF, ENOTDIR)."""
        if name.startswith("/"):
            return nd.root()
        if fd_arg(dirfd) == fd_arg(AT_FDCWD):
            return self.cwd_stack(nd, task)
        f = fdget(task, dirfd)
        if f is None:
            return neg(E.EBADF)
        if not f.is_dir or getattr(f, "guest_path", None) is None:
            return neg(E.ENOTDIR)
        if isinstance(f, HostFile):
            return nd.adopt(Loc(self.mount_of(f.guest_path), f.guest_path, fd=f.fd, st=os.fstat(f.fd)))
        if isinstance(f, SpecialDir):
            return nd.adopt(Loc(self.mount_of(f.guest_path), f.guest_path, node=f.node))
        return nd.start(f.guest_path)

    def cwd_stack(self, nd, task):
        """The working directory's stack: the held inode, or (first use, or after a
        rename) a walk of its path, which is then held."""
        proc = task.process
        held = self.vfs.cwd_loc(proc)
        if held is not None:
            return nd.adopt(held)
        stack = nd.start(proc.fs.pwd)
        if not isinstance(stack, int):
            self.vfs.hold_cwd(proc, stack[-1])
        return stack

    def lookup(self, nd, task, dirfd: int, name: str, follow: bool):
        start = self.start(nd, task, dirfd, name)
        if isinstance(start, int):
            return start
        return nd.lookup(start, name, follow=follow)

    def parent(self, nd, task, dirfd: int, name: str) -> tuple[list[Loc], str | None, bool] | int:
        start = self.start(nd, task, dirfd, name)
        if isinstance(start, int):
            return start
        return nd.parent(start, name)

    def fd_loc(self, task, dirfd: int) -> Loc | int:
        """AT_EMPTY_PATH: the descriptor itself, as a location."""
        f = fdget(task, dirfd)
        if f is None:
            return neg(E.EBADF)
        if isinstance(f, HostFile):
            mount = self.mount_of(f.guest_path)
            return Loc(mount, f.guest_path, fd=f.fd, st=os.fstat(f.fd))
        return Loc(self.vfs.root, getattr(f, "guest_path", ""), file=f)

    def mount_of(self, path: str):
        best = self.vfs.root
        for point, m in self.vfs.mounts.items():
            if (path == point or path.startswith(point + "/")) and len(point) > len(best.point):
                best = m
        return best

    @staticmethod
    def access_cred(cred):
        """access_override_creds: the real ids, root's rights only for a real uid 0."""
        return replace(cred, fsuid=cred.uid, fsgid=cred.gid, euid=cred.uid)

    def perm(self, nd, loc: Loc, mask: int) -> int:
        return self.vfs.permission(nd.cred, loc, mask, nd.task)

    def owner_or_capable(self, cred, attrs: Attrs) -> bool:
        """inode_owner_or_capable: the file's owner, or CAP_FOWNER."""
        return cred.fsuid == attrs.uid or fs_capable(cred)

    def may_delete(self, nd, parent: Loc, child: Loc) -> int:
        """may_delete: write and search on the directory, then the sticky bit."""
        err = self.perm(nd, parent, MAY_WRITE | MAY_EXEC)
        if err:
            return err
        pa, ca = parent.attrs(nd.task), child.attrs(nd.task)
        cred = nd.cred
        if pa.mode & S.S_ISVTX and cred.fsuid not in (pa.uid, ca.uid) and not fs_capable(cred):
            return neg(E.EPERM)
        return 0

    def may_create(self, nd, parent: Loc) -> int:
        """may_create: write and search on the directory; a modeled directory has no
        create operation (EPERM, or EACCES through its 0555 mode)."""
        err = self.perm(nd, parent, MAY_WRITE | MAY_EXEC)
        if err:
            return err
        return neg(E.EPERM) if parent.fd is None else 0

    def init_owner(self, nd, parent: Loc, how) -> None:
        """inode_init_owner: a new inode belongs to the creator's fsuid and fsgid (the
        directory's gid under a setgid directory).  The host made it as this process's
        user; when that differs and the host allows it, the owner is corrected."""
        cred = nd.cred
        st: os.stat_result = parent.st  # type: ignore[assignment]  # a host directory (may_create)
        gid = st.st_gid if st.st_mode & S.S_ISGID else cred.fsgid
        if os.geteuid() == 0 and (cred.fsuid, gid) != (0, os.getegid()):
            try:
                how(cred.fsuid, gid)
            except OSError:
                pass

    def cwd_loc(self, nd, task):
        stack = self.cwd_stack(nd, task)
        return stack if isinstance(stack, int) else stack[-1]

    def _create_at(self, task, dirfd, path, make) -> int:
        """filename_create + vfs_*: EEXIST for an existing name or ``.``/``..``/``/``
        (before EROFS), EROFS on a read-only mount, then may_create; ``make(nd,
        parent, name)`` does the host's part."""
        name = self.pathname(path)
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            r = self.parent(nd, task, dirfd, name)
            if isinstance(r, int):
                return r
            stack, last, trailing = r
            return self._create_last(nd, stack, last, trailing, make)

    def _create_last(self, nd, stack, last, trailing, make, *, allow_slash=False) -> int:
        if last is None or last in (".", ".."):
            return neg(E.EEXIST)
        if len(os.fsencode(last)) > 255:
            return neg(E.ENAMETOOLONG)
        parent = stack[-1]
        child = nd.step(parent, last)
        if not isinstance(child, int):
            return neg(E.EEXIST)
        if child != -E.ENOENT:
            return child
        if trailing and not allow_slash:
            return neg(E.ENOENT)  # only mkdir may name its new entry "x/"
        if not parent.mount.writable:
            return neg(E.EROFS)
        err = self.may_create(nd, parent)
        return err or make(nd, parent, last)

    @syscall(83, "mkdir")
    def sys_mkdir(self, task, regs, path, mode, *_):
        return self.sys_mkdirat(task, regs, AT_FDCWD, path, mode)

    @syscall(258, "mkdirat")
    def sys_mkdirat(self, task, regs, dirfd, path, mode, *_):
        umask = task.process.fs.umask

        def make(nd, parent, name):
            err = host_call(os.mkdir, name, 0o700, dir_fd=parent.fd)
            if err:
                return err
            try:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent.fd)
            except OSError:
                return 0
            try:
                keep = os.fstat(fd).st_mode & S.S_ISGID
                os.fchmod(fd, (mode & 0o1777 & ~umask) | keep)
                self.init_owner(nd, parent, lambda u, g: os.fchown(fd, u, g))
            finally:
                os.close(fd)
            return 0

        name = self.pathname(path)
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            r = self.parent(nd, task, dirfd, name)
            if isinstance(r, int):
                return r
            return self._create_last(nd, *r, make, allow_slash=True)

    @syscall(133, "mknod")
    def sys_mknod(self, task, regs, path, mode, dev, *_):
        return self.sys_mknodat(task, regs, AT_FDCWD, path, mode, dev)

    @syscall(259, "mknodat")
    def sys_mknodat(self, task, regs, dirfd, path, mode, dev, *_):
        """do_mknodat: a regular file, FIFO or socket node with the mode less the umask;
        EINVAL for an unknown type.  Device nodes are EPERM even for root: the model
        never creates host device nodes (a guest's would name the host's hardware)."""
        mode &= 0xFFFFFFFF
        kind = mode & 0o170000 or S.S_IFREG
        if kind not in (S.S_IFREG, S.S_IFIFO, S.S_IFSOCK, S.S_IFCHR, S.S_IFBLK):
            return neg(E.EINVAL)
        umask = task.process.fs.umask

        def make(nd, parent, name):
            if kind in (S.S_IFCHR, S.S_IFBLK):
                return neg(E.EPERM)
            err = host_call(os.mknod, name, kind | 0o600, 0, dir_fd=parent.fd)
            if err:
                return err
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent.fd)
            except OSError:
                return 0
            try:
                host_syscall(
                    SYS_fchmodat2,
                    ctypes.c_int(fd),
                    ctypes.c_char_p(b""),
                    ctypes.c_uint(mode & 0o7777 & ~umask),
                    ctypes.c_int(AT_EMPTY_PATH),
                )
                self.init_owner(
                    nd,
                    parent,
                    lambda u, g: host_syscall(
                        SYS_fchownat,
                        ctypes.c_int(fd),
                        ctypes.c_char_p(b""),
                        ctypes.c_int(u),
                        ctypes.c_int(g),
                        ctypes.c_int(AT_EMPTY_PATH),
                    ),
                )
            finally:
                os.close(fd)
            return 0

        return self._create_at(task, dirfd, path, make)

    @syscall(88, "symlink")
    def sys_symlink(self, task, regs, target, path, *_):
        return self.sys_symlinkat(task, regs, target, AT_FDCWD, path)

    @syscall(266, "symlinkat")
    def sys_symlinkat(self, task, regs, target, dirfd, path, *_):
        text = self.pathname(target)
        if isinstance(text, int):
            return text

        def make(nd, parent, name):
            err = host_call(os.symlink, text, name, dir_fd=parent.fd)
            if not err:
                self.init_owner(nd, parent, lambda u, g: os.chown(name, u, g, dir_fd=parent.fd, follow_symlinks=False))
            return err

        return self._create_at(task, dirfd, path, make)

    @syscall(86, "link")
    def sys_link(self, task, regs, old, new, *_):
        return self.sys_linkat(task, regs, AT_FDCWD, old, AT_FDCWD, new, 0)

    @syscall(265, "linkat")
    def sys_linkat(self, task, regs, olddfd, old, newdfd, new, flags, *_):
        """do_linkat: the old name (followed with AT_SYMLINK_FOLLOW), the new one as
        filename_create, EXDEV across mounts, EPERM for a directory."""
        flags &= 0xFFFFFFFF
        if flags & ~(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH):
            return neg(E.EINVAL)
        oldname = self.pathname(old, empty_ok=bool(flags & AT_EMPTY_PATH))
        if isinstance(oldname, int):
            return oldname
        if oldname == "" and not fs_capable(task.cred):
            return neg(E.ENOENT)  # AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH
        with self.vfs.nameidata(task) as nd:
            if oldname == "":
                src = self.fd_loc(task, olddfd)
                src = src if isinstance(src, int) else [src]
            else:
                src = self.lookup(nd, task, olddfd, oldname, bool(flags & AT_SYMLINK_FOLLOW))
            if isinstance(src, int):
                return src

            def make(nd, parent, name):
                loc = src[-1]
                if loc.mount is not parent.mount:
                    return neg(E.EXDEV)
                if loc.is_dir(task):
                    return neg(E.EPERM)
                if loc.fd is None:
                    return neg(E.EPERM)
                if not self._may_linkat(nd, loc):
                    return neg(E.EPERM)
                return host_syscall(
                    SYS_linkat,
                    ctypes.c_int(loc.fd),
                    ctypes.c_char_p(b""),
                    ctypes.c_int(parent.fd),
                    ctypes.c_char_p(os.fsencode(name)),
                    ctypes.c_int(AT_EMPTY_PATH),
                )

            newname = self.pathname(new)
            if isinstance(newname, int):
                return newname
            r = self.parent(nd, task, newdfd, newname)
            if isinstance(r, int):
                return r
            return self._create_last(nd, *r, make)

    def _may_linkat(self, nd, loc: Loc) -> bool:
        """may_linkat under fs.protected_hardlinks=1 (Debian's default): the owner or
        root, or a "safe" source - a regular file, neither setuid nor setgid-executable,
        that the task may read and write."""
        a = loc.attrs(nd.task)
        if self.owner_or_capable(nd.cred, a):
            return True
        if not S.S_ISREG(a.mode) or a.mode & S.S_ISUID:
            return False
        if a.mode & (S.S_ISGID | S.S_IXGRP) == S.S_ISGID | S.S_IXGRP:
            return False
        return self.perm(nd, loc, MAY_READ | MAY_WRITE) == 0

    @syscall(87, "unlink")
    def sys_unlink(self, task, regs, path, *_):
        return self.sys_unlinkat(task, regs, AT_FDCWD, path, 0)

    @syscall(84, "rmdir")
    def sys_rmdir(self, task, regs, path, *_):
        return self.sys_unlinkat(task, regs, AT_FDCWD, path, AT_REMOVEDIR)

    @syscall(263, "unlinkat")
    def sys_unlinkat(self, task, regs, dirfd, path, flags, *_):
        """do_unlinkat / do_rmdir: the name's type (``.`` EISDIR or EINVAL, ``..``
        EISDIR or ENOTEMPTY, ``/`` EBUSY), then EROFS on a read-only mount before the
        name is even looked up, then ENOENT, the type, may_delete, mount points EBUSY."""
        flags &= 0xFFFFFFFF
        if flags & ~AT_REMOVEDIR:
            return neg(E.EINVAL)
        rmdir = bool(flags & AT_REMOVEDIR)
        name = self.pathname(path)
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            r = self.parent(nd, task, dirfd, name)
            if isinstance(r, int):
                return r
            stack, last, trailing = r
            if last in (None, ".", ".."):
                if not rmdir:
                    return neg(E.EISDIR)
                return neg({None: E.EBUSY, ".": E.EINVAL, "..": E.ENOTEMPTY}[last])
            parent = stack[-1]
            if not parent.mount.writable:
                return neg(E.EROFS)
            child = nd.step(parent, last)
            if isinstance(child, int):
                return child
            if child.mount is not parent.mount:
                return neg(E.EBUSY)  # a mount point
            is_dir = child.is_dir(task)
            if not rmdir and trailing:
                return neg(E.EISDIR if is_dir else E.ENOTDIR)
            if not rmdir and is_dir:
                return neg(E.EISDIR)
            if rmdir and not is_dir:
                return neg(E.ENOTDIR)
            err = self.may_delete(nd, parent, child)
            if err:
                return err
            if parent.fd is None:
                return neg(E.EPERM)
            if rmdir:
                return host_call(os.rmdir, last, dir_fd=parent.fd)
            return host_call(os.unlink, last, dir_fd=parent.fd)

    @syscall(82, "rename")
    def sys_rename(self, task, regs, old, new, *_):
        return self.sys_renameat2(task, regs, AT_FDCWD, old, AT_FDCWD, new, 0)

    @syscall(264, "renameat")
    def sys_renameat(self, task, regs, olddfd, old, newdfd, new, *_):
        return self.sys_renameat2(task, regs, olddfd, old, newdfd, new, 0)

    @syscall(316, "renameat2")
    def sys_renameat2(self, task, regs, olddfd, old, newdfd, new, flags, *_):
        """do_renameat2: flag checks, both parents, EBUSY/EEXIST for ``.``/``..``,
        EXDEV across mounts (before EROFS), EROFS, then the host's renameat2 on the
        two parents' descriptors (ENOENT, ENOTDIR, EISDIR, ENOTEMPTY, EINVAL for a
        directory moved beneath itself, EEXIST under RENAME_NOREPLACE)."""
        flags &= 0xFFFFFFFF
        if flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT):
            return neg(E.EINVAL)
        if flags & RENAME_EXCHANGE and flags & (RENAME_NOREPLACE | RENAME_WHITEOUT):
            return neg(E.EINVAL)
        if flags & RENAME_WHITEOUT:
            return neg(E.EPERM)  # needs CAP_MKNOD and a whiteout-capable fs
        oldname = self.pathname(old)
        if isinstance(oldname, int):
            return oldname
        newname = self.pathname(new)
        if isinstance(newname, int):
            return newname
        with self.vfs.nameidata(task) as nd:
            a = self.parent(nd, task, olddfd, oldname)
            if isinstance(a, int):
                return a
            b = self.parent(nd, task, newdfd, newname)
            if isinstance(b, int):
                return b
            (ostack, olast, otrail), (nstack, nlast, ntrail) = a, b
            if olast in (None, ".", ".."):
                return neg(E.EBUSY)
            if nlast in (None, ".", ".."):
                return neg(E.EEXIST if flags & RENAME_NOREPLACE else E.EBUSY)
            op, np_ = ostack[-1], nstack[-1]
            if op.mount is not np_.mount:
                return neg(E.EXDEV)
            if not op.mount.writable:
                return neg(E.EROFS)
            src = nd.step(op, olast)
            if isinstance(src, int):
                return src
            dst = nd.step(np_, nlast)
            if not isinstance(dst, int) and flags & RENAME_NOREPLACE:
                return neg(E.EEXIST)
            if src.mount is not op.mount or (not isinstance(dst, int) and dst.mount is not np_.mount):
                return neg(E.EBUSY)
            if op.fd is None:
                return neg(E.EPERM)
            if not src.is_dir(task) and (otrail or ntrail) and (isinstance(dst, int) or not flags & RENAME_EXCHANGE):
                return neg(E.ENOTDIR)
            err = self.may_delete(nd, op, src)
            if not err and src.is_dir(task) and (op.st.st_dev, op.st.st_ino) != (np_.st.st_dev, np_.st.st_ino):
                err = self.perm(nd, src, MAY_WRITE)  # vfs_rename: its ".." changes
            if not err and not isinstance(dst, int):
                err = self.may_delete(nd, np_, dst)
            elif not err:
                err = self.perm(nd, np_, MAY_WRITE | MAY_EXEC)
            if err:
                return err
            ret = host_syscall(
                SYS_renameat2,
                ctypes.c_int(op.fd),
                ctypes.c_char_p(os.fsencode(olast)),
                ctypes.c_int(np_.fd),
                ctypes.c_char_p(os.fsencode(nlast)),
                ctypes.c_uint(flags),
            )
            if ret == 0:
                self._renamed(src.path, join_path(np_.path, nlast))
            return ret

    def _renamed(self, old: str, new: str) -> None:
        """What the guest renamed stays the working directory, or the open file, of
        whoever holds it (the kernel holds the inode; this model holds the path, so
        the path follows)."""

        def moved(path: str) -> str | None:
            if path == old or path.startswith(old.rstrip("/") + "/"):
                return new + path[len(old) :]
            return None

        for proc in self.m.processes:
            held = self.vfs.cwd_loc(proc)
            proc.fs.pwd = moved(proc.fs.pwd) or proc.fs.pwd
            if held is not None:
                held.path = proc.fs.pwd
            for f in proc.files.fds.values() if hasattr(proc.files, "fds") else ():
                path = getattr(f, "guest_path", None)
                if path and moved(path):
                    f.guest_path = moved(path)
