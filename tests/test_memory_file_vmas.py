"""``Memory.file_vmas``: the mappings of one file (the inode's i_mmap that uprobes walks
to install and remove breakpoints), kept per change of the VMA list.  After every kind
of change it is exactly the file's VMAs in address order, and a probe registered then
lands where the file is mapped now."""

from __future__ import annotations

import pytest

from emu import Machine
from kernel_model.mm.mm_types import PROT_READ, PROT_WRITE


def _walk(mem, file):
    return [v for v in mem.vmas if v.file is file]


def _text(m):
    exe = m.process.exe
    return exe, next(v for v in m.mem.vmas if v.file is exe and v.prot & 4)


CHANGES = {
    "none": lambda mem, v: None,
    "mprotect splits the text": lambda mem, v: mem.protect(v.start, 0x1000, PROT_READ),
    "munmap of its first page": lambda mem, v: mem.unmap(v.start, 0x1000),
    "an anonymous mapping": lambda mem, v: mem.map(0x5000_0000, 0x1000, PROT_READ | PROT_WRITE, "anon"),
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_the_file_index_is_the_file_vmas_after_each_change(change):
    m = Machine.from_guest("hello")
    exe, text = _text(m)
    mem = m.mem
    assert list(mem.file_vmas(exe)) == _walk(mem, exe)  # built before the change
    CHANGES[change](mem, text)
    got = list(mem.file_vmas(exe))
    assert got == _walk(mem, exe), (got, _walk(mem, exe))


def test_a_file_not_mapped_has_no_vmas():
    m = Machine.from_guest("hello")
    other = Machine.from_guest("hello").process.exe
    assert list(m.mem.file_vmas(other)) == []


def test_a_probe_registered_after_a_split_is_written_in_the_piece_that_holds_it():
    m = Machine.from_guest("hello")
    exe, text = _text(m)
    entry = m.resolve("_start")
    page = entry & ~0xFFF
    assert m.mem.protect(page, 0x1000, text.prot)  # its own VMA now, same file
    assert len(m.mem.file_vmas(exe)) == 3, m.mem.maps()  # two text pieces and the data
    m.uprobes.register("_start", handler=lambda ctx: 0)
    assert m.mem.read(entry, 1) == b"\xcc", m.mem.read(entry, 1).hex()
