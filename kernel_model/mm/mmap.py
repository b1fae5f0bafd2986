"""mmap, munmap and brk (mm/mmap.c): anonymous and file mappings on the task's address
space (:class:`kernel_model.mm.mm_types`), the heap's break.
"""

from __future__ import annotations

import errno as E
import os

from kernel_model.fs.file import HostFile
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import fd_arg, syscall
from kernel_model.mm.mm_types import (
    MMAP_MIN_ADDR,
    PAGE_SIZE,
    PROT_EXEC,
    PROT_READ,
    PROT_WRITE,
    TASK_SIZE,
    MemoryLimitExceeded,
    page_up,
)

MAP_SHARED, MAP_PRIVATE, MAP_SHARED_VALIDATE, MAP_TYPE = 0x01, 0x02, 0x03, 0x0F
MAP_FIXED, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE = 0x10, 0x20, 0x100000
# LEGACY_MAP_MASK: the flags MAP_SHARED_VALIDATE accepts on a file without mmap_supported_flags
LEGACY_MAP_MASK = (
    0x01 | 0x02 | 0x10 | 0x20 | 0x0100 | 0x0800 | 0x1000 | 0x2000 | 0x4000 | 0x8000 | 0x10000 | 0x20000 | 0x40000
)
MAX_LFS_FILESIZE = (1 << 63) - 1


class MmapSyscalls:
    """Mapping and unmapping memory; the program break."""

    def __init__(self, sc):
        self.m = sc.m
        self.vfs = sc.vfs

    @syscall(9, "mmap", partial="shared anonymous memory and writable MAP_SHARED file mappings are not modeled")
    def sys_mmap(self, task, regs, addr, length, prot, flags, fd, off):
        """do_mmap's checks in the kernel's order."""
        if off & (PAGE_SIZE - 1):
            return neg(E.EINVAL)  # sys_mmap: off must be page aligned
        file = None
        if not flags & MAP_ANONYMOUS:
            file = task.process.files.get(fd_arg(fd))  # fget
            if file is None:
                return neg(E.EBADF)
        if length == 0:
            return neg(E.EINVAL)
        length = page_up(length)
        if length > TASK_SIZE:
            return neg(E.ENOMEM)  # PAGE_ALIGN wrapped, or larger than user space
        if file is not None and off + length > MAX_LFS_FILESIZE:
            return neg(E.EOVERFLOW)  # file_mmap_ok: past the largest file offset
        if prot & ~(PROT_READ | PROT_WRITE | PROT_EXEC):
            return neg(E.EINVAL)
        where = self._mmap_address(addr, length, flags)
        if where < 0:
            return where
        if file is not None:
            return self._mmap_file(task, file, where, length, prot, flags, off)
        if flags & MAP_TYPE != MAP_PRIVATE:
            return neg(E.EINVAL)  # shared anonymous memory is not modeled
        try:
            self.m.mem.map(where, length, prot, "")
        except MemoryLimitExceeded:
            return neg(E.ENOMEM)
        return where

    def _mmap_address(self, addr: int, length: int, flags: int) -> int:
        """__get_unmapped_area (the hint or the top-down search), or MAP_FIXED's address."""
        if flags & (MAP_FIXED | MAP_FIXED_NOREPLACE):
            if addr & (PAGE_SIZE - 1):
                return neg(E.EINVAL)
            if addr > TASK_SIZE - length:
                return neg(E.ENOMEM)
            if addr < MMAP_MIN_ADDR:
                return neg(E.EPERM)  # security_mmap_addr: below vm.mmap_min_addr
            if flags & MAP_FIXED_NOREPLACE and not self.m.mem.is_free(addr, addr + length):
                return neg(E.EEXIST)
            return addr
        where = self.m.mem.get_unmapped_area(length, hint=addr or None)
        return neg(E.ENOMEM) if where is None else where

    def _mmap_file(self, task, file, where: int, length: int, prot: int, flags: int, off: int) -> int:
        """do_mmap's file branch: the map type, then what the open file allows."""
        kind = flags & MAP_TYPE
        if kind not in (MAP_SHARED, MAP_SHARED_VALIDATE, MAP_PRIVATE):
            return neg(E.EINVAL)
        shared = kind != MAP_PRIVATE
        if kind == MAP_SHARED_VALIDATE and flags & ~LEGACY_MAP_MASK:
            return neg(E.EOPNOTSUPP)
        if shared and prot & PROT_WRITE and not file.writable:
            return neg(E.EACCES)
        if not file.readable:
            return neg(E.EACCES)
        if not isinstance(file, HostFile) or file.is_dir:
            return neg(E.ENODEV)  # no ->mmap: pipes, /proc files, directories
        if shared and prot & PROT_WRITE:
            return neg(E.ENODEV)  # a shared writable mapping would write back
        d_path = self._d_path(file)
        mfile = self.m.page_cache.file_of(file.fd, file.proc_link(), d_path)
        if mfile not in task.process.mapped_files:
            task.process.mapped_files.append(mfile)
        try:
            # a read-only descriptor's shared mapping loses VM_MAYWRITE
            vma = self.m.mem.map_file(where, length, prot, mfile, off, file.fd, shared=shared, name=d_path)
        except MemoryLimitExceeded:
            return neg(E.ENOMEM)
        if shared:
            vma.mayprot &= ~PROT_WRITE  # read-only descriptor: no VM_MAYWRITE; else not modeled
        self.m.kernel.uprobe_mmap(task.process, vma)  # mmap_region -> __mmap_complete
        return where

    def _d_path(self, file: HostFile) -> str:
        """The file's path as /proc/PID/maps prints it (d_path): where the file is now
        in the guest's view (symlinks resolved, a rename seen), else the path it was
        opened at."""
        try:
            host = os.readlink(f"/proc/self/fd/{file.fd}")
        except OSError:
            return file.proc_link()
        return self.vfs.guest_path_of_host(host) or file.proc_link()

    @syscall(11, "munmap")
    def sys_munmap(self, task, regs, addr, length, *_):
        """do_vmi_munmap: special mappings ([uprobes], the trampoline) can be unmapped
        too, as on the host kernel (they are not sealed without
        CONFIG_MSEAL_SYSTEM_MAPPINGS)."""
        if addr & (PAGE_SIZE - 1) or addr > TASK_SIZE or length > TASK_SIZE - addr:
            return neg(E.EINVAL)
        length = page_up(length)
        if length == 0:
            return neg(E.EINVAL)
        for vma in [v for v in self.m.mem.vmas if v.file is not None and v.start < addr + length and addr < v.end]:
            self.m.kernel.uprobe_munmap(task.process, vma, addr, addr + length)  # unmap_single_vma
        self.m.mem.unmap(addr, length)
        return 0

    @syscall(12, "brk")
    def sys_brk(self, task, regs, addr, *_):
        """brk(): grow or shrink [heap]; any failure (a mapping in the way, past
        TASK_SIZE, the memory limit) leaves the break where it was (mm/mmap.c)."""
        proc = task.process
        if addr < proc.brk_start:
            return proc.brk
        old_top, new_top = page_up(proc.brk), page_up(addr)
        if new_top > TASK_SIZE:
            return proc.brk
        if new_top > old_top:
            if not self.m.mem.is_free(old_top, new_top):
                return proc.brk
            try:
                self.m.mem.map(old_top, new_top - old_top, PROT_READ | PROT_WRITE, "[heap]")
            except MemoryLimitExceeded:
                return proc.brk
        elif new_top < old_top:
            self.m.mem.unmap(new_top, old_top - new_top)
        proc.brk = addr
        return addr
