"""A restore that changes the address space's layout leaves no host pointer behind:
reads after it go to the restored pages, never to host memory the layout in between
freed (the read fast path caches the host block it found last)."""

from __future__ import annotations

import struct

from emu import Machine

MMAP_STORE_UNMAP = """
_start:
    mov eax, 9
    xor edi, edi
    mov esi, 4096
    mov edx, 3
    mov r10d, 0x22
    mov r8, -1
    xor r9d, r9d
    syscall
    mov rbx, rax
    mov rcx, 0x1234
    mov qword ptr [rbx], rcx
stored:
    mov eax, 11
    mov rdi, rbx
    mov esi, 4096
    syscall
    mov eax, 9
    xor edi, edi
    mov esi, 0x40000
    mov edx, 3
    mov r10d, 0x22
    mov r8, -1
    xor r9d, r9d
    syscall
    mov qword ptr [rax], rcx
remapped:
    mov eax, 60
    xor edi, edi
    syscall
"""


def test_a_restore_over_a_changed_layout_reads_the_restored_page():
    m = Machine.from_asm(MMAP_STORE_UNMAP)
    m.run(max_insns=11)
    assert m.pc == m.resolve("stored"), hex(m.pc)
    addr = m.reg_read("rbx")
    assert m.mem.read(addr, 8) == struct.pack("<Q", 0x1234)  # caches the host block
    cp = m.checkpoint()
    m.run(max_insns=13)
    assert m.pc == m.resolve("remapped"), hex(m.pc)
    m.restore(cp)
    lo, hi, _, _ = m.mem._rpage  # white box: the read fast path's page window
    assert lo >= hi, f"the restore left a read window {lo:#x}-{hi:#x} on a frame it may have replaced"
    for _ in range(3):
        assert m.mem.read(addr, 8) == struct.pack("<Q", 0x1234), "the restored page"
        m.mem.read(addr + 4088, 8)  # the whole restored page reads
    assert m.run().exit_code == 0
