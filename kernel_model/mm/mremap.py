"""mremap (mm/mremap.c): grow, shrink or move a mapping."""

from __future__ import annotations

import errno as E

from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall
from kernel_model.mm.mm_types import PAGE_SIZE, TASK_SIZE, MemoryLimitExceeded, page_up

MREMAP_MAYMOVE, MREMAP_FIXED, MREMAP_DONTUNMAP = 1, 2, 4


class MremapSyscalls:
    """Resizing and moving mappings."""

    def __init__(self, sc):
        self.m = sc.m

    @syscall(25, "mremap")
    def sys_mremap(self, task, regs, addr, old_len, new_len, flags, new_addr, *_):
        """mremap(): check_mremap_params, check_prep_vma, then mremap_at (shrink in
        place, grow in place, or move with MREMAP_MAYMOVE) or mremap_to (a given
        address).  A moved mapping keeps its file, offset and protection; its bytes
        move with it."""
        fixed = flags & (MREMAP_FIXED | MREMAP_DONTUNMAP)
        old_len, new_len = page_up(old_len), page_up(new_len)
        if flags & ~(MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP) or addr & (PAGE_SIZE - 1):
            return neg(E.EINVAL)
        if not new_len or new_len > TASK_SIZE:
            return neg(E.EINVAL)
        if flags & MREMAP_FIXED:
            if new_addr > TASK_SIZE - new_len or new_addr & (PAGE_SIZE - 1):
                return neg(E.EINVAL)
        if fixed and not flags & MREMAP_MAYMOVE:
            return neg(E.EINVAL)
        if flags & MREMAP_DONTUNMAP and old_len != new_len:
            return neg(E.EINVAL)
        if flags & MREMAP_FIXED and new_addr < addr + old_len and addr < new_addr + new_len:
            return neg(E.EINVAL)  # the target overlaps the source
        vma = self.m.mem.find_vma(addr)
        if vma is None:
            return neg(E.EFAULT)
        if not old_len and not vma.shared:
            return neg(E.EINVAL)  # "duplicating" a private mapping
        if min(old_len, new_len) > vma.end - addr:
            return neg(E.EFAULT)  # the old range spans VMAs
        if vma.special and new_len > old_len:
            return neg(E.EFAULT)  # VM_DONTEXPAND: special mappings
        if flags & MREMAP_FIXED:
            self.m.mem.unmap(new_addr, new_len)
        if new_len < old_len:
            self.m.mem.unmap(addr + new_len, old_len - new_len)  # shrink_vma
            if not fixed:
                return addr
            old_len = new_len
        elif new_len == old_len and not fixed:
            return addr
        try:
            return self._mremap_grow_or_move(vma, addr, old_len, new_len, flags, new_addr)
        except MemoryLimitExceeded:
            return neg(E.ENOMEM)

    def _mremap_grow_or_move(self, vma, addr: int, old_len: int, new_len: int, flags: int, new_addr: int) -> int:
        mem = self.m.mem
        end = addr + old_len
        if (
            not flags & (MREMAP_FIXED | MREMAP_DONTUNMAP)
            and end == vma.end
            and end + new_len - old_len <= TASK_SIZE
            and mem.is_free(end, addr + new_len)
        ):
            self._remap_piece(vma, end, addr + new_len, end, 0)  # expand in place
            return addr
        if not flags & MREMAP_MAYMOVE:
            return neg(E.ENOMEM)
        if not flags & MREMAP_FIXED:
            new_addr = mem.get_unmapped_area(new_len)
            if new_addr is None:
                return neg(E.ENOMEM)
        self._remap_piece(vma, new_addr, new_addr + new_len, addr, old_len)  # move_vma
        mem.copy_within(addr, new_addr, old_len)
        if flags & MREMAP_DONTUNMAP:
            if vma.file is not None:  # the old range faults in afresh
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
        mem = self.m.mem
        new = mem.map(
            start,
            end - start,
            vma.prot,
            vma.name,
            file=vma.file,
            pgoff=vma.offset_of(src) if vma.file else 0,
            special=vma.special,
            mayprot=vma.mayprot,
        )
        new.flags, new.shared = set(vma.flags), vma.shared
        if vma.file is not None:
            mem.fill_from_file(start + copied, end, vma.file, vma.offset_of(src) + copied)
            if start == vma.end:
                mem.join(vma, new)
                # vma_expand -> vma_complete: uprobe_mmap sees the grown VMA (a moved one
                # keeps its pages, int3s included: copy_vma skips it)
                self.m.kernel.uprobe_mmap(self.m.task.process, vma)
