"""The extended attribute syscalls of fs/xattr.c: getxattr, lgetxattr, fgetxattr,
listxattr, llistxattr, flistxattr, and the writing ones (setxattr, removexattr and their
``l``/``f`` forms).

Reading follows the kernel's order: the name is imported first (``import_xattr_name``:
ERANGE for an empty name or one past XATTR_NAME_MAX, EFAULT), then the path walk of the
guest's view, then ``xattr_permission`` with the guest's credentials (trusted.* is
ENODATA without CAP_SYS_ADMIN, user.* is ENODATA on anything but a regular file or a
directory, user.* and unknown prefixes need read permission), and then the inode's
filesystem answers.  A host inode's answer is the host's own, asked on the descriptor the
walk opened (``/proc/self/fd/N`` of the ``O_PATH`` descriptor, which reaches the inode
itself, a symlink included); trusted.* names are left out of a list the guest may not
see.  A modeled inode answers as its filesystem does when it holds no attribute: procfs,
pipefs and devpts have no xattr handlers (EOPNOTSUPP), devtmpfs (shmem) and sysfs
(kernfs) have the security/trusted/user handlers (ENODATA), and only shmem supports POSIX
ACLs; every list is empty (``security_inode_listsecurity`` with no LSM).

Writing: EROFS on the read-only sysroot (``mnt_want_write``).  In a granted directory
only user.* attributes reach the host file, after the kernel's checks; the other
namespaces (security.*, trusted.*, system.* - file capabilities, ACLs) would change what
the host grants, so the model refuses them with EPERM, as the kernel refuses a caller
without the capability.  The model keeps no attributes on its own inodes: EOPNOTSUPP.
"""

from __future__ import annotations

import errno as E
import os
import stat as S
import struct

from kernel_model.fs.file import HostDescriptor, HostFile, fdget
from kernel_model.fs.fs_types import Attrs
from kernel_model.fs.namei import MAY_READ, MAY_WRITE, Loc, generic_permission
from kernel_model.fs.namei_syscalls import proc_fd
from kernel_model.fs.statfs import DEVTMPFS, SYSFS, modeled_fs
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall
from kernel_model.include.uapi.linux.fcntl import AT_FDCWD

WRITE_NOTE = (
    "only user.* attributes of granted host files are written; other namespaces EPERM, modeled inodes EOPNOTSUPP"
)
XATTR_NAME_MAX, XATTR_SIZE_MAX, XATTR_LIST_MAX = 255, 65536, 65536
XATTR_CREATE, XATTR_REPLACE = 1, 2
POSIX_ACL_NAMES = ("system.posix_acl_access", "system.posix_acl_default")
HANDLED_PREFIXES = ("security.", "trusted.", "user.")
# how a modeled filesystem answers: no xattr handlers, or shmem's/kernfs' in-memory ones
NO_XATTR, SHMEM, KERNFS = "none", "shmem", "kernfs"


def _capable(cred) -> bool:
    """capable(CAP_SYS_ADMIN) under the root model: effective uid 0."""
    return cred.euid == 0


def xattr_permission(cred, attrs: Attrs, name: str, mask: int) -> int:
    """fs/xattr.c's xattr_permission: no VFS check for security.* and system.*;
    trusted.* needs CAP_SYS_ADMIN (else ENODATA to read, EPERM to write); user.* only on
    regular files and directories (same errnos), not written by others in a sticky
    directory; then inode_permission for ``mask``."""
    if name.startswith(("security.", "system.")):
        return 0
    if name.startswith("trusted."):
        if not _capable(cred):
            return neg(E.EPERM if mask & MAY_WRITE else E.ENODATA)
        return 0
    if name.startswith("user."):
        if not S.S_ISREG(attrs.mode) and not S.S_ISDIR(attrs.mode):
            return neg(E.EPERM if mask & MAY_WRITE else E.ENODATA)
        if S.S_ISDIR(attrs.mode) and attrs.mode & S.S_ISVTX and mask & MAY_WRITE:
            if cred.fsuid != attrs.uid and not (cred.euid == 0 and cred.fsuid == 0):
                return neg(E.EPERM)
    return generic_permission(cred, attrs, mask)


def modeled_kind(fs: str) -> str:
    """Which xattr handlers one of the model's filesystems has (see
    :func:`kernel_model.fs.statfs.modeled_fs`): shmem's, kernfs', or none."""
    return {DEVTMPFS: SHMEM, SYSFS: KERNFS}.get(fs, NO_XATTR)


def modeled_getxattr(kind: str, attrs: Attrs, name: str) -> int:
    """The answer of a modeled inode holding no attribute, once xattr_permission passed
    (or, for an ACL, without it: vfs_get_acl): ENODATA where a handler exists, else
    EOPNOTSUPP."""
    if name in POSIX_ACL_NAMES:
        ok = kind == SHMEM and not S.S_ISLNK(attrs.mode)
        return neg(E.ENODATA if ok else E.EOPNOTSUPP)
    if kind != NO_XATTR and name.startswith(HANDLED_PREFIXES):
        return neg(E.ENODATA)
    return neg(E.EOPNOTSUPP)


def _attrs_of_stat(st: bytes) -> Attrs:
    dev, ino, nlink, mode, uid, gid = struct.unpack_from("<QQQIII", st)
    return Attrs(mode=mode, ino=ino, dev=dev, nlink=nlink, uid=uid, gid=gid)


class Target:
    """What an xattr call acts on: a host inode (``host``: a descriptor or the magic
    path of one, for os.*xattr) or a modeled inode, with its attributes and whether its
    mount may be written."""

    def __init__(self, attrs: Attrs, *, host: int | str | None = None, writable: bool = True, fs: str = ""):
        self.attrs, self.host, self.writable, self.fs = attrs, host, writable, fs


class XattrSyscalls:
    """Extended attributes: the host's, read through the guest's view."""

    def __init__(self, sc):
        self.m = sc.m
        self.vfs = sc.vfs
        self.namei = sc.namei

    # -- arguments ---------------------------------------------------------------------
    def _name(self, ptr: int) -> str | int:
        """import_xattr_name: ERANGE for "" or a name longer than XATTR_NAME_MAX; a bad
        pointer faults (EFAULT)."""
        raw = self.m.mem.read_cstring(ptr, XATTR_NAME_MAX + 1)
        if not raw or len(raw) > XATTR_NAME_MAX:
            return neg(E.ERANGE)
        return os.fsdecode(raw)

    def _loc_target(self, task, loc: Loc) -> Target | int:
        if loc.fd is not None:
            return Target(loc.attrs(task), host=proc_fd(loc.fd), writable=loc.mount.writable)
        if loc.file is not None and loc.node is None:
            return self._file_target(loc.file)  # a /proc magic link to a descriptor without a path
        a = loc.attrs(task)
        return Target(a, fs=modeled_fs(loc.mount.point, loc.path, a.dev, a.mode))

    def _file_target(self, f) -> Target | int:
        """fdget (O_PATH descriptors are EBADF) and the open file's inode."""
        if f is None or getattr(f, "path_only", False):
            return neg(E.EBADF)
        if isinstance(f, HostDescriptor):
            st = os.fstat(f.fd)
            writable = self.namei.mount_of(f.guest_path).writable if isinstance(f, HostFile) else False
            return Target(Attrs.from_host(st), host=f.fd, writable=writable)
        st = f.fstat()
        if isinstance(st, int):
            return st
        a = _attrs_of_stat(st)
        path = getattr(f, "guest_path", None) or ""
        point = self.namei.mount_of(path).point if path else ""
        return Target(a, fs=modeled_fs(point, path, a.dev, a.mode))

    def _path_target(self, task, path: int, follow: bool, act) -> int:
        """user_path_at (following the last symlink or not), then ``act(target)``."""
        name = self.namei.pathname(path)
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            stack = self.namei.lookup(nd, task, AT_FDCWD, name, follow)
            if isinstance(stack, int):
                return stack
            t = self._loc_target(task, stack[-1])
            return t if isinstance(t, int) else act(t)

    def _fd_target(self, task, fd: int, act) -> int:
        t = self._file_target(fdget(task, fd))
        return t if isinstance(t, int) else act(t)

    # -- getxattr ----------------------------------------------------------------------
    def _get(self, task, t: Target, name: str, value: int, size: int) -> int:
        """do_getxattr: the size clamped to XATTR_SIZE_MAX, size 0 asks for the
        length, ERANGE when the value does not fit (E2BIG at the clamp), EFAULT only when
        the value is copied out."""
        size = min(size, XATTR_SIZE_MAX)
        if name not in POSIX_ACL_NAMES:
            err = xattr_permission(task.cred, t.attrs, name, MAY_READ)
            if err:
                return err
        if t.host is None:
            return modeled_getxattr(modeled_kind(t.fs), t.attrs, name)
        try:
            data = os.getxattr(t.host, name)
        except OSError as e:
            return -(e.errno or E.EIO)
        if size == 0:
            return len(data)
        if len(data) > size:
            return neg(E.E2BIG if size >= XATTR_SIZE_MAX else E.ERANGE)
        self.m.mem.write_user(value, data)
        return len(data)

    @syscall(191, "getxattr")
    def sys_getxattr(self, task, regs, path, name, value, size, *_):
        return self._getxattr(task, path, name, value, size, True)

    @syscall(192, "lgetxattr")
    def sys_lgetxattr(self, task, regs, path, name, value, size, *_):
        return self._getxattr(task, path, name, value, size, False)

    def _getxattr(self, task, path, name, value, size, follow: bool) -> int:
        key = self._name(name)
        if isinstance(key, int):
            return key
        return self._path_target(task, path, follow, lambda t: self._get(task, t, key, value, size))

    @syscall(193, "fgetxattr")
    def sys_fgetxattr(self, task, regs, fd, name, value, size, *_):
        key = self._name(name)
        if isinstance(key, int):
            return key
        return self._fd_target(task, fd, lambda t: self._get(task, t, key, value, size))

    # -- listxattr ---------------------------------------------------------------------
    def _list(self, task, t: Target, buf: int, size: int) -> int:
        """listxattr: the names, each NUL-terminated, in the filesystem's order (trusted.*
        only for CAP_SYS_ADMIN); size 0 asks for the length, ERANGE when they do not fit
        (E2BIG at XATTR_LIST_MAX)."""
        size = min(size, XATTR_LIST_MAX)
        if t.host is None:
            return 0
        try:
            names = os.listxattr(t.host)
        except OSError as e:
            return -(e.errno or E.EIO)
        if not _capable(task.cred):
            names = [n for n in names if not n.startswith("trusted.")]
        data = b"".join(os.fsencode(n) + b"\0" for n in names)
        if size == 0 or not data:
            return len(data)
        if len(data) > size:
            return neg(E.E2BIG if size >= XATTR_LIST_MAX else E.ERANGE)
        self.m.mem.write_user(buf, data)
        return len(data)

    @syscall(194, "listxattr")
    def sys_listxattr(self, task, regs, path, buf, size, *_):
        return self._path_target(task, path, True, lambda t: self._list(task, t, buf, size))

    @syscall(195, "llistxattr")
    def sys_llistxattr(self, task, regs, path, buf, size, *_):
        return self._path_target(task, path, False, lambda t: self._list(task, t, buf, size))

    @syscall(196, "flistxattr")
    def sys_flistxattr(self, task, regs, fd, buf, size, *_):
        return self._fd_target(task, fd, lambda t: self._list(task, t, buf, size))

    # -- setxattr / removexattr ----------------------------------------------------------
    def _write(self, task, t: Target, name: str, do) -> int:
        """mnt_want_write (EROFS), xattr_permission for writing, then ``do(host)`` for a
        user.* attribute of a host inode; EPERM for the other namespaces of a host inode,
        EOPNOTSUPP for a modeled one."""
        if not t.writable and t.host is not None:
            return neg(E.EROFS)
        if name not in POSIX_ACL_NAMES:
            err = xattr_permission(task.cred, t.attrs, name, MAY_WRITE)
            if err:
                return err
        if t.host is None:
            return neg(E.EOPNOTSUPP)
        if not name.startswith("user."):
            return neg(E.EPERM)
        try:
            do(t.host)
        except OSError as e:
            return -(e.errno or E.EIO)
        return 0

    def _set_args(self, name: int, value: int, size: int, flags: int) -> tuple[str, bytes, int] | int:
        """setxattr_copy: EINVAL for unknown flags, the name, E2BIG past XATTR_SIZE_MAX,
        the value copied in (EFAULT)."""
        flags &= 0xFFFFFFFF
        if flags & ~(XATTR_CREATE | XATTR_REPLACE):
            return neg(E.EINVAL)
        key = self._name(name)
        if isinstance(key, int):
            return key
        if size > XATTR_SIZE_MAX:
            return neg(E.E2BIG)
        data = self.m.mem.read_user(value, size) if size else b""
        return key, data, flags

    def _setter(self, task, key: str, data: bytes, flags: int):
        return lambda t: self._write(task, t, key, lambda h: os.setxattr(h, key, data, flags))

    @syscall(188, "setxattr", partial=WRITE_NOTE)
    def sys_setxattr(self, task, regs, path, name, value, size, flags, *_):
        args = self._set_args(name, value, size, flags)
        return args if isinstance(args, int) else self._path_target(task, path, True, self._setter(task, *args))

    @syscall(189, "lsetxattr", partial=WRITE_NOTE)
    def sys_lsetxattr(self, task, regs, path, name, value, size, flags, *_):
        args = self._set_args(name, value, size, flags)
        return args if isinstance(args, int) else self._path_target(task, path, False, self._setter(task, *args))

    @syscall(190, "fsetxattr", partial=WRITE_NOTE)
    def sys_fsetxattr(self, task, regs, fd, name, value, size, flags, *_):
        args = self._set_args(name, value, size, flags)
        return args if isinstance(args, int) else self._fd_target(task, fd, self._setter(task, *args))

    def _remover(self, task, key: str):
        return lambda t: self._write(task, t, key, lambda h: os.removexattr(h, key))

    @syscall(197, "removexattr", partial=WRITE_NOTE)
    def sys_removexattr(self, task, regs, path, name, *_):
        key = self._name(name)
        return key if isinstance(key, int) else self._path_target(task, path, True, self._remover(task, key))

    @syscall(198, "lremovexattr", partial=WRITE_NOTE)
    def sys_lremovexattr(self, task, regs, path, name, *_):
        key = self._name(name)
        return key if isinstance(key, int) else self._path_target(task, path, False, self._remover(task, key))

    @syscall(199, "fremovexattr", partial=WRITE_NOTE)
    def sys_fremovexattr(self, task, regs, fd, name, *_):
        key = self._name(name)
        return key if isinstance(key, int) else self._fd_target(task, fd, self._remover(task, key))
