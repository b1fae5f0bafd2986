"""8-byte user accesses (get_user/put_user of a stack word) from the host block behind
the mapping: the same bytes, permissions and faults as ``read_user``/``write_user``."""

from __future__ import annotations

import pytest

from emu import Machine
from kernel_model.mm.mm_types import PROT_EXEC, PROT_READ, PROT_WRITE, GuestFault

BASE = 0x5000_0000


def _mem(prot=PROT_READ | PROT_WRITE, size=0x2000):
    m = Machine.from_guest("hello")
    m.mem.map(BASE, size, prot, "test")
    return m.mem


@pytest.mark.parametrize("off", [0, 8, 0x7F8, 0x1003, 0x1FF8], ids=hex)
def test_a_word_written_is_the_bytes_read_back(off):
    mem = _mem()
    mem.write_user(BASE, b"\0" * 0x2000)  # the mapping has been checked and found
    mem.write_u64(BASE + off, 0x1122_3344_5566_7788)
    assert mem.read(BASE + off, 8) == bytes.fromhex("8877665544332211"), mem.read(BASE + off, 8).hex()
    assert mem.read_u64(BASE + off) == 0x1122_3344_5566_7788


def test_a_word_across_the_end_of_the_mapping_faults():
    mem = _mem()
    mem.read_u64(BASE)
    with pytest.raises(GuestFault):
        mem.read_u64(BASE + 0x1FFC)
    with pytest.raises(GuestFault):
        mem.write_u64(BASE + 0x1FFC, 1)


def test_a_word_is_not_written_into_a_read_only_mapping():
    mem = _mem(PROT_READ)
    assert mem.read_u64(BASE) == 0
    with pytest.raises(GuestFault) as e:
        mem.write_u64(BASE, 5)
    assert e.value.addr == BASE and mem.read_u64(BASE) == 0, "nothing written"


def test_a_word_is_not_read_from_an_unreadable_mapping():
    mem = _mem(PROT_WRITE)
    with pytest.raises(GuestFault):
        mem.read_u64(BASE)


def test_a_word_in_an_unmapped_range_faults_after_the_unmap():
    mem = _mem()
    mem.write_u64(BASE + 0x1000, 7)
    mem.unmap(BASE, 0x2000)
    with pytest.raises(GuestFault):
        mem.read_u64(BASE + 0x1000)
    with pytest.raises(GuestFault):
        mem.write_u64(BASE + 0x1000, 7)


def test_a_word_written_into_executable_memory_goes_through_unicorn(monkeypatch):
    """A store into an r-w-x mapping goes through Unicorn, which drops the translation
    of the page (a word written straight into host memory could leave it stale)."""
    m = Machine.from_guest("hello")
    mem = m.mem
    mem.map(BASE, 0x1000, PROT_READ | PROT_WRITE | PROT_EXEC, "jit")
    mem.write_user(BASE, bytes.fromhex("48c7c001000000c3"))  # mov rax, 1; ret
    through = []
    raw = mem._raw_write
    monkeypatch.setattr(mem, "_raw_write", lambda a, d: through.append((a, d)) or raw(a, d))
    mem.write_u64(BASE, int.from_bytes(bytes.fromhex("48c7c00200000090"), "little"))
    assert through == [(BASE, bytes.fromhex("48c7c00200000090"))], through
    assert mem.read(BASE, 8) == bytes.fromhex("48c7c00200000090")


@pytest.mark.parametrize("access", ["u64", "struct"])
def test_a_word_of_a_grown_heap_is_read_from_where_the_heap_is_now(access):
    """A growing anonymous mapping ([heap] after brk) is one host block moved larger:
    the words read from it afterwards, old and new, come from the block as it is now
    (a view kept from before would be the old size at the old, unmapped place)."""
    import struct as st

    two = st.Struct("<2Q")
    m = Machine.from_guest("hello")
    mem = m.mem
    mem.map(BASE, 0x1000, PROT_READ | PROT_WRITE, "[heap]")
    mem.write_user(BASE, b"\0" * 16)
    mem.write_u64(BASE + 8, 0x1122)
    assert mem.read_u64(BASE + 8) == 0x1122
    for page in range(1, 40):  # brk, one page at a time
        mem.map(BASE + page * 0x1000, 0x1000, PROT_READ | PROT_WRITE, "[heap]")
    far = BASE + 0x20000
    if access == "u64":
        mem.write_u64(far, 7)
        got = (mem.read_u64(BASE + 8), mem.read_u64(far))
    else:
        mem.write_user_struct(two, far, 7, 8)
        got = (mem.read_user_struct(two, BASE)[1], mem.read_user_struct(two, far)[0])
    assert got == (0x1122, 7), f"expected (0x1122, 7), got {tuple(map(hex, got))}"
    assert mem.read(far, 8) == (7).to_bytes(8, "little"), mem.read(far, 8).hex()


@pytest.mark.parametrize("access", ["u64", "struct"])
def test_a_word_past_a_mapping_restored_smaller_faults(access):
    """A checkpoint restored puts the mappings of then back: a word past the end of a
    mapping that has since grown (and was written there) faults again."""
    import struct as st

    one = st.Struct("<Q")
    m = Machine.from_guest("hello")
    mem = m.mem
    mem.map(BASE, 0x1000, PROT_READ | PROT_WRITE, "[heap]")
    mem.write_user(BASE, b"\0" * 8)
    cp = m.checkpoint()
    mem.map(BASE + 0x1000, 0x1000, PROT_READ | PROT_WRITE, "[heap]")
    far = BASE + 0x1800
    write = (lambda: mem.write_u64(far, 5)) if access == "u64" else (lambda: mem.write_user_struct(one, far, 5))
    read = (lambda: mem.read_u64(far)) if access == "u64" else (lambda: mem.read_user_struct(one, far))
    write()
    assert mem.read_u64(far) == 5
    m.restore(cp)
    for op in (write, read):
        with pytest.raises(GuestFault):
            op()
