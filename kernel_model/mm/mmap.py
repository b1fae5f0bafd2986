"""mmap, munmap and brk (mm/mmap.c): anonymous and file mappings on the task's address
space (:class:`kernel_model.mm.mm_types`), the heap's break.

Shared anonymous memory is memory of its own (shmem_zero_setup): its pages are made at
mmap time and stay one set of frames for every process that maps them (a fork's child
too).  A BPF ring buffer's descriptor maps the ring's own pages (bpf_map_mmap ->
ringbuf_map_mmap_kern); see :func:`ringbuf_frames` for why the ring lives in guest RAM.
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
SHMEM_ANON_NAME = "/dev/zero (deleted)"  # what maps shows for shared anonymous memory
FAULT_AROUND = 16  # pages one fault populates (emu.engine.memory's FAULT_AROUND_PAGES)
RINGBUF_PGOFF = 1  # the ring's kernel-only first page, never mapped (kernel/bpf/ringbuf.c)
ENOTSUPP = 524


def ringbuf_frames(ring, ram) -> list[int]:
    """The guest-physical frames of a ring buffer's pages, in order.  On the first call
    the ring's bytes move into contiguous frames of the machine's RAM and its region's
    data becomes a view of them: the kernel side (the programs, poll) and every mapping
    then share one copy, and the ring holds a reference to each frame (for as long as
    the machine lives: the ring outlives its descriptors while programs use it).

    Why guest RAM rather than mapping the region's own host buffer into the CPU
    (Unicorn's mem_map_ptr) or copying between the two: every CPU instance already maps
    the RAM zones, a fork's too, so the ring needs no engine region per instance; the
    kernel's own accesses to guest addresses (a write(2) from the mapped ring, ptrace,
    /proc/PID/mem) walk the page tables to RAM frames and work unchanged; and nothing
    must be copied at the right moments (after every program run for the records,
    before every reservation for ``consumer_pos``).  The guest sees the data twice in a
    row as the kernel maps it; here the second half is the region's second copy of the
    data, which the ring keeps in step with the first.  The cost: the frames must be
    contiguous in one 64 MiB zone, so a ring of 32 MiB or more cannot be mapped
    (ENOMEM); and a checkpoint (reverse execution) keeps the view by reference, so the
    ring's bytes roll back with the pages of the address spaces that map them."""
    frames = getattr(ring, "guest_frames", None)
    if frames is None:
        region = ring.rb
        size = len(region.data)
        frames = ram.alloc_contiguous(size // PAGE_SIZE)
        view, base = ram.page_view(frames[0])
        window = view[base : base + size]
        window[:] = region.data
        ring.move_data(window)
        ring.guest_frames = frames
    return frames


class MmapSyscalls:
    """Mapping and unmapping memory; the program break."""

    def __init__(self, sc):
        self.m = sc.m
        self.vfs = sc.vfs

    @syscall(9, "mmap", partial="writable MAP_SHARED mappings of files are not modeled")
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
            if getattr(file, "anon_name", None) == "bpf-map":  # bpf_map_fops' mmap
                return self._mmap_bpf_map(task, file, where, length, prot, flags, off)
            return self._mmap_file(task, file, where, length, prot, flags, off)
        kind = flags & MAP_TYPE
        if kind == MAP_SHARED:
            return self._mmap_shared_anon(where, length, prot)
        if kind != MAP_PRIVATE:
            return neg(E.EINVAL)  # do_mmap: anonymous memory is MAP_SHARED or MAP_PRIVATE
        try:
            self.m.mem.map(where, length, prot, "")
        except MemoryLimitExceeded:
            return neg(E.ENOMEM)
        return where

    def _mmap_shared_anon(self, where: int, length: int, prot: int) -> int:
        """shmem_zero_setup: MAP_SHARED | MAP_ANONYMOUS memory is a deleted /dev/zero
        file of its own (shown so in /proc/PID/maps).  Its pages are allocated at once
        and the mapping is VM_SHARED, so writes never copy a page: a fork's child maps
        the same pages, and what either process writes the other reads, as on Linux."""
        mem = self.m.mem
        try:
            vma = mem.map(where, length, prot, SHMEM_ANON_NAME)
        except MemoryLimitExceeded:
            return neg(E.ENOMEM)
        vma.shared = True
        for page in range(where, where + length, PAGE_SIZE * FAULT_AROUND):
            mem.handle_mm_fault(page, False)  # the fault-around window populates the rest
        return where

    def _mmap_bpf_map(self, task, file, where: int, length: int, prot: int, flags: int, off: int) -> int:
        """bpf_map_mmap -> ringbuf_map_mmap_kern: only a ring buffer maps here; the
        mapping must be shared, only the consumer page (offset 0, one page) may be
        writable, and it must fit the ring's pages (the consumer page, the producer page,
        the data pages twice).  The guest's pages are the ring's own frames (the ring
        moves into guest RAM on its first mmap), so the kernel reads the consumer
        position the guest writes and the guest reads records as the kernel commits
        them, with nothing copied."""
        from kernel_model.bpf.bpf_types import BPF_MAP_TYPE_RINGBUF  # a guest with a BPF map has it loaded

        bpf_map = file.map
        if bpf_map.map_type != BPF_MAP_TYPE_RINGBUF:
            return neg(ENOTSUPP)  # no map_mmap for other types here (mmapable arrays are not modeled)
        if flags & MAP_TYPE == MAP_PRIVATE:
            return neg(E.EINVAL)
        if prot & PROT_WRITE:
            if bpf_map.frozen:
                return neg(E.EPERM)
            if off != 0 or length != PAGE_SIZE:
                return neg(E.EPERM)  # only consumer_pos is writable
        try:
            frames = ringbuf_frames(bpf_map, self.m.mem.ram)
        except MemoryLimitExceeded:
            return neg(E.ENOMEM)  # a ring larger than one zone of RAM (64 MiB) cannot move there
        first = off // PAGE_SIZE + RINGBUF_PGOFF
        if first + length // PAGE_SIZE > len(frames):
            return neg(E.EINVAL)  # remap_vmalloc_range: past the ring's pages
        mayprot = PROT_READ | (PROT_WRITE if prot & PROT_WRITE else 0)
        try:
            vma = self.m.mem.map_frames(
                where, prot, frames[first : first + length // PAGE_SIZE], "anon_inode:bpf-map", mayprot=mayprot
            )
        except MemoryLimitExceeded:
            return neg(E.ENOMEM)
        vma.pgoff = off  # the mmap offset, as /proc/PID/maps shows it
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
