"""statfs and fstatfs (fs/statfs.c): what the filesystem holding an inode says of itself.

A host inode's filesystem is the host's: the host's own fstatfs on the descriptor the
walk opened (or the guest's descriptor's host file), so ``df`` in the guest shows the
host disk's numbers.  Its ``f_flags`` are the mount's as the guest sees it
(``calculate_f_flags``): ST_RDONLY added on the read-only sysroot.  The model's own
filesystems answer as the kernel's do: procfs, sysfs, devpts and pipefs
(``simple_statfs``: no blocks, no inodes), and devtmpfs (``shmem_statfs``: half the
modeled RAM in pages as blocks and inodes, none of the blocks used, one inode per node).
``f_fsid`` of these is the superblock's device number (``huge_encode_dev``); shmem and
kernfs take it from a per-boot random uuid, which the model replaces by the device number
so that runs repeat.
"""

from __future__ import annotations

import ctypes
import errno as E
import os
import stat as S
import struct

from kernel_model.fs.dev import DEVTMPFS_DEV
from kernel_model.fs.file import PIPE_DEV, fdget, host_syscall
from kernel_model.fs.namei import NAME_MAX, Loc
from kernel_model.fs.proc.procfs import PROC_DEV
from kernel_model.fs.sysfs import SYSFS_DEV
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall
from kernel_model.include.uapi.linux.fcntl import AT_FDCWD
from kernel_model.mm.mm_types import PAGE_SIZE

SYS_fstatfs = 138
STATFS_SIZE = 120  # struct statfs on x86_64
STATFS_FORMAT = "<qqQQQQQiiqqq32x"
ST_RDONLY, ST_VALID, ST_RELATIME = 0x1, 0x20, 0x1000
PROC_SUPER_MAGIC, SYSFS_MAGIC, DEVPTS_SUPER_MAGIC = 0x9FA0, 0x62656572, 0x1CD1
TMPFS_MAGIC, PIPEFS_MAGIC, ANON_INODE_FS_MAGIC = 0x01021994, 0x50495045, 0x09041934
DEVTMPFS_FIXED_INODES = 2  # the root and the /dev/pts mount point, besides the nodes


PROC, SYSFS, DEVTMPFS, DEVPTS, PIPEFS, ANON = "proc", "sysfs", "devtmpfs", "devpts", "pipefs", "anon_inodefs"
SIMPLE_MAGIC = {PROC: PROC_SUPER_MAGIC, SYSFS: SYSFS_MAGIC, DEVPTS: DEVPTS_SUPER_MAGIC}


def modeled_fs(point: str, path: str, dev: int, mode: int) -> str:
    """Which of the model's filesystems holds a modeled inode: its mount's (/dev/pts
    is devpts under /dev), else, for an open file known by no path, its device number
    or its kind (a pipe: pipefs, a pseudo-terminal: devpts)."""
    if point == "/dev":
        return DEVPTS if path == "/dev/pts" or path.startswith("/dev/pts/") else DEVTMPFS
    if point in ("/proc", "/sys"):
        return PROC if point == "/proc" else SYSFS
    if S.S_ISFIFO(mode) or dev == PIPE_DEV:
        return PIPEFS
    if dev == DEVTMPFS_DEV:
        return DEVTMPFS
    if dev == PROC_DEV:
        return PROC
    if dev == SYSFS_DEV:
        return SYSFS
    return DEVPTS if S.S_ISCHR(mode) else ANON


def huge_encode_dev(dev: int) -> int:
    major, minor = os.major(dev), os.minor(dev)
    return (minor & 0xFF) | (major << 8) | ((minor & ~0xFF) << 12)


def pack_statfs(
    f_type: int,
    dev: int,
    *,
    blocks: int = 0,
    bfree: int = 0,
    files: int = 0,
    ffree: int = 0,
    flags: int = ST_VALID | ST_RELATIME,
) -> bytes:
    """struct statfs of a modeled filesystem (4096-byte blocks, NAME_MAX names)."""
    fsid = huge_encode_dev(dev)
    return struct.pack(
        STATFS_FORMAT,
        f_type,
        PAGE_SIZE,
        blocks,
        bfree,
        bfree,
        files,
        ffree,
        fsid & 0xFFFFFFFF,
        fsid >> 32,
        NAME_MAX,
        PAGE_SIZE,
        flags,
    )


def host_fstatfs(fd: int, read_only: bool) -> bytes | int:
    """The host's fstatfs on one of its descriptors (O_PATH ones too, as fdget_raw
    allows); ST_RDONLY added when the guest's mount is read-only."""
    buf = ctypes.create_string_buffer(STATFS_SIZE)
    ret = host_syscall(SYS_fstatfs, ctypes.c_int(fd), buf)
    if ret < 0:
        return ret
    data = bytearray(buf.raw)
    if read_only:
        (flags,) = struct.unpack_from("<q", data, 80)
        struct.pack_into("<q", data, 80, flags | ST_RDONLY)
    return bytes(data)


class StatfsSyscalls:
    """Filesystem statistics."""

    def __init__(self, sc):
        self.sc = sc
        self.m = sc.m
        self.vfs = sc.vfs
        self.namei = sc.namei

    def modeled_statfs(self, fs: str, dev: int) -> bytes:
        """The answer of one of the model's filesystems (see :func:`modeled_fs`)."""
        if fs == DEVTMPFS:
            pages = self.sc.mem_total // PAGE_SIZE // 2  # shmem's default size and nr_inodes
            used = DEVTMPFS_FIXED_INODES + len(self.sc.devfs.nodes)
            return pack_statfs(TMPFS_MAGIC, dev, blocks=pages, bfree=pages, files=pages, ffree=pages - used)
        if fs in (PIPEFS, ANON):
            return pack_statfs(PIPEFS_MAGIC if fs == PIPEFS else ANON_INODE_FS_MAGIC, dev, flags=ST_VALID)
        return pack_statfs(SIMPLE_MAGIC[fs], dev)

    def _loc_statfs(self, task, loc: Loc) -> bytes | int:
        if loc.fd is not None:
            return host_fstatfs(loc.fd, not loc.mount.writable)
        if loc.file is not None and loc.node is None:
            return self._file_statfs(loc.file)
        a = loc.attrs(task)
        return self.modeled_statfs(modeled_fs(loc.mount.point, loc.path, a.dev, a.mode), a.dev)

    def _file_statfs(self, f) -> bytes | int:
        host = getattr(f, "host_fd", None)
        if host is None and hasattr(f, "held_host_fd"):
            host = f.held_host_fd()
        if host is not None:
            guest_path = getattr(f, "guest_path", None)
            read_only = guest_path is not None and not self.namei.mount_of(guest_path).writable
            return host_fstatfs(host, read_only)
        st = f.fstat()
        if isinstance(st, int):
            return st
        dev, _, _, mode = struct.unpack_from("<QQQI", st)
        return self.modeled_statfs(self.file_fs(f, dev, mode), dev)

    def file_fs(self, f, dev: int, mode: int) -> str:
        """The modeled filesystem of an open file: its mount when it has a guest path."""
        path = getattr(f, "guest_path", None) or ""
        point = self.namei.mount_of(path).point if path else ""
        return modeled_fs(point, path, dev, mode)

    @syscall(137, "statfs")
    def sys_statfs(self, task, regs, path, buf, *_):
        """user_statfs: the walk (following the last symlink), then the filesystem's
        answer copied out (EFAULT)."""
        name = self.namei.pathname(path)
        if isinstance(name, int):
            return name
        with self.vfs.nameidata(task) as nd:
            stack = self.namei.lookup(nd, task, AT_FDCWD, name, True)
            if isinstance(stack, int):
                return stack
            data = self._loc_statfs(task, stack[-1])
        if isinstance(data, int):
            return data
        self.m.mem.write_user(buf, data)
        return 0

    @syscall(138, "fstatfs")
    def sys_fstatfs(self, task, regs, fd, buf, *_):
        """fd_statfs: any descriptor, O_PATH ones too (fdget_raw); EBADF otherwise."""
        f = fdget(task, fd)
        if f is None:
            return neg(E.EBADF)
        data = self._file_statfs(f)
        if isinstance(data, int):
            return data
        self.m.mem.write_user(buf, data)
        return 0
