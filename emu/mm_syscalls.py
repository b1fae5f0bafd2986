"""The memory-mapping syscalls: mmap (anonymous and file-backed), munmap, mprotect.

``sys_mmap`` follows ``ksys_mmap_pgoff`` -> ``do_mmap``: the same checks in the same
order, so a bad call gets the errno the kernel gives.  A file mapping shows a guest-opened
host file (:class:`emu.files.HostFile`) from a page-aligned offset, its pages read into
the mapping at mmap time (the zero tail of the last page and pages past EOF read as
zeros); MAP_PRIVATE and read-only MAP_SHARED mappings are modeled, a writable shared one
is not (ENODEV: no write-back to the host file).  Each file mapping's VMA carries the
page cache's :class:`~emu.mm_types.MappedFile` for the file's (st_dev, st_ino), the key
uprobes use.
"""

from __future__ import annotations

import errno as E
import os

from .files import HostFile
from .memory import (MMAP_MIN_ADDR, PAGE_SIZE, PROT_EXEC, PROT_READ, PROT_WRITE, TASK_SIZE,
                     MemoryLimitExceeded, page_up)

MAP_SHARED, MAP_PRIVATE, MAP_SHARED_VALIDATE, MAP_TYPE = 0x01, 0x02, 0x03, 0x0F
MAP_FIXED, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE = 0x10, 0x20, 0x100000
# LEGACY_MAP_MASK: the flags MAP_SHARED_VALIDATE accepts on a file without mmap_supported_flags
LEGACY_MAP_MASK = 0x01 | 0x02 | 0x10 | 0x20 | 0x0100 | 0x0800 | 0x1000 | 0x2000 | 0x4000 | \
    0x8000 | 0x10000 | 0x20000 | 0x40000
PROT_GROWSDOWN, PROT_GROWSUP = 0x01000000, 0x02000000


def _neg(err: int) -> int:
    return -err


def _fd(value: int) -> int:
    return value & 0xFFFFFFFF


class MmSyscalls:
    """mmap/munmap/mprotect of :class:`emu.syscalls.Syscalls` (needs ``self.m``, ``self.mem``)."""

    def sys_mmap(self, task, regs, addr, length, prot, flags, fd, off):
        """do_mmap's checks in the kernel's order."""
        if off & (PAGE_SIZE - 1):
            return _neg(E.EINVAL)                  # sys_mmap: off must be page aligned
        file = None
        if not flags & MAP_ANONYMOUS:
            file = task.process.fds.get(_fd(fd))   # fget
            if file is None:
                return _neg(E.EBADF)
        if length == 0:
            return _neg(E.EINVAL)
        length = page_up(length)
        if length > TASK_SIZE:
            return _neg(E.ENOMEM)                # PAGE_ALIGN wrapped, or larger than user space
        if file is not None and (off >> 12) + (length >> 12) >= 1 << 52:
            return _neg(E.EOVERFLOW)             # pgoff + pages wraps
        if prot & ~(PROT_READ | PROT_WRITE | PROT_EXEC):
            return _neg(E.EINVAL)
        where = self._mmap_address(addr, length, flags)
        if where < 0:
            return where
        if file is not None:
            return self._mmap_file(task, file, where, length, prot, flags, off)
        if flags & MAP_TYPE != MAP_PRIVATE:
            return _neg(E.EINVAL)   # shared anonymous memory is not modeled
        try:
            self.mem.map(where, length, prot, "")
        except MemoryLimitExceeded:
            return _neg(E.ENOMEM)
        return where

    def _mmap_address(self, addr: int, length: int, flags: int) -> int:
        """__get_unmapped_area (the hint or the top-down search), or MAP_FIXED's address."""
        if flags & (MAP_FIXED | MAP_FIXED_NOREPLACE):
            if addr & (PAGE_SIZE - 1):
                return _neg(E.EINVAL)
            if addr > TASK_SIZE - length:
                return _neg(E.ENOMEM)
            if addr < MMAP_MIN_ADDR:
                return _neg(E.EPERM)             # security_mmap_addr: below vm.mmap_min_addr
            if flags & MAP_FIXED_NOREPLACE and not self.mem.is_free(addr, addr + length):
                return _neg(E.EEXIST)
            return addr
        where = self.mem.get_unmapped_area(length, hint=addr or None)
        return _neg(E.ENOMEM) if where is None else where

    def _mmap_file(self, task, file, where: int, length: int, prot: int, flags: int, off: int) -> int:
        """do_mmap's file branch: the map type, then what the open file allows."""
        kind = flags & MAP_TYPE
        if kind not in (MAP_SHARED, MAP_SHARED_VALIDATE, MAP_PRIVATE):
            return _neg(E.EINVAL)
        shared = kind != MAP_PRIVATE
        if kind == MAP_SHARED_VALIDATE and flags & ~LEGACY_MAP_MASK:
            return _neg(E.EOPNOTSUPP)
        if shared and prot & PROT_WRITE and not file.writable:
            return _neg(E.EACCES)
        if not file.readable:
            return _neg(E.EACCES)
        if not isinstance(file, HostFile) or file.is_dir:
            return _neg(E.ENODEV)                # no ->mmap: pipes, /proc files, directories
        if shared and file.writable:
            return _neg(E.ENODEV)                # a shared writable mapping would write back
        d_path = self._d_path(file)
        mfile = self.m.page_cache.file_of(file.fd, file.proc_link(), d_path)
        if mfile not in task.process.files:
            task.process.files.append(mfile)
        try:
            # a read-only descriptor's shared mapping loses VM_MAYWRITE
            vma = self.mem.map_file(where, length, prot, mfile, off, file.fd, shared=shared,
                                    name=d_path)
        except MemoryLimitExceeded:
            return _neg(E.ENOMEM)
        if shared:
            vma.mayprot &= ~PROT_WRITE
        return where

    def _d_path(self, file: HostFile) -> str:
        """The file's path as /proc/PID/maps prints it: symlinks resolved, as the guest
        sees the host (beneath the granted directory)."""
        try:
            host = os.readlink(f"/proc/self/fd/{file.fd}")
        except OSError:
            return file.proc_link()
        root = self.grant_dir or "/"
        rel = os.path.relpath(host, root)
        return file.proc_link() if rel.startswith("..") else os.path.normpath("/" + rel)

    def sys_munmap(self, task, regs, addr, length, *_):
        """do_vmi_munmap: special mappings ([uprobes], the trampoline) can be unmapped
        too, as on the host kernel (they are not sealed without
        CONFIG_MSEAL_SYSTEM_MAPPINGS)."""
        if addr & (PAGE_SIZE - 1) or addr > TASK_SIZE or length > TASK_SIZE - addr:
            return _neg(E.EINVAL)
        length = page_up(length)
        if length == 0:
            return _neg(E.EINVAL)
        self.mem.unmap(addr, length)
        return 0

    def sys_mprotect(self, task, regs, addr, length, prot, *_):
        """do_mprotect_pkey: EACCES when a mapping would gain a permission outside its
        VM_MAY* bits (the kernel's answer for [uprobes] made readable or writable, for
        [uprobes-trampoline] made writable, and for a shared mapping of a read-only
        descriptor made writable).  The split VMAs keep their file and offsets."""
        if addr & (PAGE_SIZE - 1):
            return _neg(E.EINVAL)
        if prot & ~(PROT_READ | PROT_WRITE | PROT_EXEC | PROT_GROWSDOWN | PROT_GROWSUP):
            return _neg(E.EINVAL)
        prot &= PROT_READ | PROT_WRITE | PROT_EXEC
        if length == 0:
            return 0
        end = page_up(addr + length)
        if end <= addr or end > 1 << 64:
            return _neg(E.ENOMEM)
        if not self.mem.may_protect(addr, end - addr, prot):
            return _neg(E.EACCES)
        return 0 if self.mem.protect(addr, end - addr, prot) else _neg(E.ENOMEM)
