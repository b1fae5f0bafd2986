"""The memory-mapping syscalls: mmap (anonymous and file-backed), munmap, mprotect, mremap.

``sys_mmap`` follows ``ksys_mmap_pgoff`` -> ``do_mmap``: the same checks in the same
order, so a bad call gets the errno the kernel gives.  A file mapping shows a guest-opened
host file (:class:`kernel_model.fs.file.HostFile`) from a page-aligned offset, its pages read into
the mapping at mmap time (the zero tail of the last page and pages past EOF read as
zeros); MAP_PRIVATE and read-only MAP_SHARED mappings are modeled, a writable shared one
is not (ENODEV: no write-back to the host file; a read-only shared mapping of a writable
descriptor cannot be mprotect'ed writable either, EACCES).  Each file mapping's VMA carries the
page cache's :class:`~kernel_model.mm.mm_types.MappedFile` for the file's (st_dev, st_ino), the key
uprobes use.
"""

from __future__ import annotations

import errno as E
import os

from kernel_model.fs.file import HostFile
from kernel_model.mm.mm_types import MMAP_MIN_ADDR, PAGE_SIZE, PROT_EXEC, PROT_READ, PROT_WRITE, TASK_SIZE, MemoryLimitExceeded, page_up

MAP_SHARED, MAP_PRIVATE, MAP_SHARED_VALIDATE, MAP_TYPE = 0x01, 0x02, 0x03, 0x0F
MAP_FIXED, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE = 0x10, 0x20, 0x100000
# LEGACY_MAP_MASK: the flags MAP_SHARED_VALIDATE accepts on a file without mmap_supported_flags
LEGACY_MAP_MASK = 0x01 | 0x02 | 0x10 | 0x20 | 0x0100 | 0x0800 | 0x1000 | 0x2000 | 0x4000 | \
    0x8000 | 0x10000 | 0x20000 | 0x40000
PROT_GROWSDOWN, PROT_GROWSUP = 0x01000000, 0x02000000
MREMAP_MAYMOVE, MREMAP_FIXED, MREMAP_DONTUNMAP = 1, 2, 4
MAX_LFS_FILESIZE = (1 << 63) - 1


def _neg(err: int) -> int:
    return -err


def _fd(value: int) -> int:
    return value & 0xFFFFFFFF


class MmSyscalls:
    """mmap/munmap/mprotect of :class:`kernel_model.kernel.syscalls.Syscalls` (needs ``self.m``, ``self.mem``)."""

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
        if file is not None and off + length > MAX_LFS_FILESIZE:
            return _neg(E.EOVERFLOW)             # file_mmap_ok: past the largest file offset
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
        if shared and prot & PROT_WRITE:
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
            vma.mayprot &= ~PROT_WRITE           # read-only descriptor: no VM_MAYWRITE; else not modeled
        self.m.kernel.uprobe_mmap(task.process, vma)     # mmap_region -> __mmap_complete
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

    # ------------------------------------------------------------------ mremap
    def sys_mremap(self, task, regs, addr, old_len, new_len, flags, new_addr, *_):
        """mremap(): check_mremap_params, check_prep_vma, then mremap_at (shrink in
        place, grow in place, or move with MREMAP_MAYMOVE) or mremap_to (a given
        address).  A moved mapping keeps its file, offset and protection; its bytes
        move with it."""
        fixed = flags & (MREMAP_FIXED | MREMAP_DONTUNMAP)
        old_len, new_len = page_up(old_len), page_up(new_len)
        if flags & ~(MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP) or addr & (PAGE_SIZE - 1):
            return _neg(E.EINVAL)
        if not new_len or new_len > TASK_SIZE:
            return _neg(E.EINVAL)
        if flags & MREMAP_FIXED:
            if new_addr > TASK_SIZE - new_len or new_addr & (PAGE_SIZE - 1):
                return _neg(E.EINVAL)
        if fixed and not flags & MREMAP_MAYMOVE:
            return _neg(E.EINVAL)
        if flags & MREMAP_DONTUNMAP and old_len != new_len:
            return _neg(E.EINVAL)
        if flags & MREMAP_FIXED and new_addr < addr + old_len and addr < new_addr + new_len:
            return _neg(E.EINVAL)                       # the target overlaps the source
        vma = self.mem.find_vma(addr)
        if vma is None:
            return _neg(E.EFAULT)
        if not old_len and not vma.shared:
            return _neg(E.EINVAL)                       # "duplicating" a private mapping
        if min(old_len, new_len) > vma.end - addr:
            return _neg(E.EFAULT)                       # the old range spans VMAs
        if vma.special and new_len > old_len:
            return _neg(E.EFAULT)                       # VM_DONTEXPAND: special mappings
        if flags & MREMAP_FIXED:
            self.mem.unmap(new_addr, new_len)
        if new_len < old_len:
            self.mem.unmap(addr + new_len, old_len - new_len)        # shrink_vma
            if not fixed:
                return addr
            old_len = new_len
        elif new_len == old_len and not fixed:
            return addr
        try:
            return self._mremap_grow_or_move(vma, addr, old_len, new_len, flags, new_addr)
        except MemoryLimitExceeded:
            return _neg(E.ENOMEM)

    def _mremap_grow_or_move(self, vma, addr: int, old_len: int, new_len: int, flags: int,
                             new_addr: int) -> int:
        mem = self.mem
        end = addr + old_len
        if not flags & (MREMAP_FIXED | MREMAP_DONTUNMAP) and end == vma.end and \
                end + new_len - old_len <= TASK_SIZE and mem.is_free(end, addr + new_len):
            self._remap_piece(vma, end, addr + new_len, end, 0)       # expand in place
            return addr
        if not flags & MREMAP_MAYMOVE:
            return _neg(E.ENOMEM)
        if not flags & MREMAP_FIXED:
            new_addr = mem.get_unmapped_area(new_len)
            if new_addr is None:
                return _neg(E.ENOMEM)
        self._remap_piece(vma, new_addr, new_addr + new_len, addr, old_len)   # move_vma
        mem.copy_within(addr, new_addr, old_len)
        if flags & MREMAP_DONTUNMAP:
            if vma.file is not None:                    # the old range faults in afresh
                mem.fill_from_file(addr, addr + old_len, vma.file, vma.offset_of(addr))
            else:
                mem.discard(addr, old_len)
        else:
            mem.unmap(addr, old_len)
        return new_addr

    def _remap_piece(self, vma, start: int, end: int, src: int, copied: int) -> None:
        """A mapping [start, end) like ``vma``, showing what ``vma`` shows from ``src``
        on; past the ``copied`` bytes that move with it, a file mapping reads the file.
        Grown in place it stays one VMA (vma_expand)."""
        mem = self.mem
        new = mem.map(start, end - start, vma.prot, vma.name, file=vma.file,
                      pgoff=vma.offset_of(src) if vma.file else 0, special=vma.special,
                      mayprot=vma.mayprot)
        new.flags, new.shared = set(vma.flags), vma.shared
        if vma.file is not None:
            mem.fill_from_file(start + copied, end, vma.file, vma.offset_of(src) + copied)
            if start == vma.end:
                mem.join(vma, new)
                # vma_expand -> vma_complete: uprobe_mmap sees the grown VMA (a moved one
                # keeps its pages, int3s included: copy_vma skips it)
                self.m.kernel.uprobe_mmap(self.m.task.process, vma)

    def sys_munmap(self, task, regs, addr, length, *_):
        """do_vmi_munmap: special mappings ([uprobes], the trampoline) can be unmapped
        too, as on the host kernel (they are not sealed without
        CONFIG_MSEAL_SYSTEM_MAPPINGS)."""
        if addr & (PAGE_SIZE - 1) or addr > TASK_SIZE or length > TASK_SIZE - addr:
            return _neg(E.EINVAL)
        length = page_up(length)
        if length == 0:
            return _neg(E.EINVAL)
        for vma in [v for v in self.mem.vmas if v.file is not None and v.start < addr + length
                    and addr < v.end]:
            self.m.kernel.uprobe_munmap(task.process, vma, addr, addr + length)   # unmap_single_vma
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
