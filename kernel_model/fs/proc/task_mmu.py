"""fs/proc/task_mmu.c: /proc/PID/maps as the seq_file operations proc_pid_maps_op.

The position is an address: after each record it is the end of the mapping just
returned (proc_get_vma stores ``vma->vm_end``, keeping the one before as
``last_pos``), and a read that starts again (m_start) resumes from ``last_pos`` with
the first mapping ending above it.  So a mapping made between two reads shows when
it lies above the last line read, a mapping that grew (the stack) shows its extent at
the moment its line is printed, and one below is not seen.  After the last mapping
comes the gate area (get_gate_vma: x86-64's ``[vsyscall]`` page, which no mm holds),
then the end.

Each line is show_map_vma's: the header padded to column 73, then the name
(:meth:`kernel_model.mm.mm_types.Vma.maps_line`).
"""

from __future__ import annotations

from typing import Any

from kernel_model.mm.mm_types import PROT_EXEC, Vma

SENTINEL_VMA_END, SENTINEL_VMA_GATE = -1, -2  # the positions past the last mapping
VSYSCALL_ADDR = 0xFFFFFFFFFF600000  # VSYSCALL_ADDR, the fixed legacy page


def gate_vma() -> Vma:
    """arch/x86/entry/vsyscall/vsyscall_64.c's gate_vma under vsyscall=xonly (the
    default since 5.3, as the host's maps shows): VM_EXEC alone, ``--xp``, named by
    arch_vma_name.  Calling into it is not modeled; only /proc shows it."""
    return Vma(VSYSCALL_ADDR, VSYSCALL_ADDR + 0x1000, PROT_EXEC, "[vsyscall]", special=True)


class MapsOps:
    """proc_pid_maps_op over the mm of ``mem`` (None: the task has no mm, and the
    file reads empty, as m_start finds no mm)."""

    def __init__(self, mem_of):
        self._mem_of = mem_of
        self.last_pos = 0  # proc_maps_private.last_pos

    def _get_vma(self, pos: int) -> tuple[Any, int]:
        """proc_get_vma: the first mapping ending above ``pos``, or the gate area."""
        mem = self._mem_of()
        self.last_pos = pos
        found = next((v for v in (mem.vmas if mem is not None else ()) if v.end > pos), None)
        if found is not None:
            return found, found.end
        return gate_vma(), SENTINEL_VMA_GATE

    def start(self, index: int) -> tuple[Any, int]:
        """m_start: nothing past the end or without an mm; a restart goes back to
        ``last_pos``."""
        if index == SENTINEL_VMA_END or self._mem_of() is None:
            return None, index
        if index > 0:
            index = self.last_pos
        if index == SENTINEL_VMA_GATE:
            return gate_vma(), index
        return self._get_vma(index)

    def next(self, record: Any, index: int) -> tuple[Any, int]:
        """m_next: the gate area is the last record."""
        if index == SENTINEL_VMA_GATE:
            return None, SENTINEL_VMA_END
        return self._get_vma(index)

    def show(self, record: Any) -> bytes:
        """show_map: one line."""
        return (record.maps_line() + "\n").encode()
