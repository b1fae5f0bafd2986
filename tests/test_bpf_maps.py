"""BPF maps: creation errnos, hash/array/per-CPU/LRU semantics with exact addresses and
bytes, fd arrays, and the ring buffer's records byte for byte.

Orders marked "Linux 6.18" were read from the host kernel (maps created with
``BPF_F_ZERO_SEED`` and filled through ``bpf(2)`` on CPU 0 of a 2-CPU machine)."""

from __future__ import annotations

import errno
import hashlib
import struct

import pytest

from kernel_model.bpf.arraymap import BPF_F_CURRENT_CPU
from kernel_model.bpf.bpf_map import BPF_F_NO_COMMON_LRU, BPF_F_NO_PREALLOC, BPF_F_ZERO_SEED, ENOTSUPP
from kernel_model.bpf.bpf_types import (
    BPF_ANY,
    BPF_EXIST,
    BPF_F_LOCK,
    BPF_MAP_TYPE_ARRAY,
    BPF_MAP_TYPE_HASH,
    BPF_MAP_TYPE_LRU_HASH,
    BPF_MAP_TYPE_LRU_PERCPU_HASH,
    BPF_MAP_TYPE_PERCPU_ARRAY,
    BPF_MAP_TYPE_PERCPU_HASH,
    BPF_MAP_TYPE_PERF_EVENT_ARRAY,
    BPF_MAP_TYPE_PROG_ARRAY,
    BPF_MAP_TYPE_RINGBUF,
    BPF_NOEXIST,
)
from kernel_model.bpf.hashtab import HTAB_ELEM_SIZE, jhash
from kernel_model.bpf.maps import MapError, create_map
from kernel_model.bpf.memory import KernelMemory
from kernel_model.bpf.ringbuf import (
    BPF_RB_AVAIL_DATA,
    BPF_RB_CONS_POS,
    BPF_RB_FORCE_WAKEUP,
    BPF_RB_NO_WAKEUP,
    BPF_RB_PROD_POS,
    BPF_RB_RING_SIZE,
    BPF_RINGBUF_BUSY_BIT,
    BPF_RINGBUF_DISCARD_BIT,
)


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def new(map_type, ks, vs, n, flags=0, nr_cpus=2, name="m"):
    mem = KernelMemory()
    return mem, create_map(mem, map_type, ks, vs, n, flags, name, nr_cpus)


# ----------------------------------------------------------------------------- creation


@pytest.mark.parametrize(
    ("map_type", "ks", "vs", "n", "flags", "err"),
    [
        (BPF_MAP_TYPE_HASH, 4, 0, 4, 0, errno.EINVAL),
        (BPF_MAP_TYPE_HASH, 0, 4, 4, 0, errno.EINVAL),
        (BPF_MAP_TYPE_HASH, 4, 4, 0, 0, errno.EINVAL),
        (BPF_MAP_TYPE_HASH, 4, 4, 4, 0x10000, errno.EINVAL),
        (BPF_MAP_TYPE_HASH, 4, 4, 4, BPF_F_NO_COMMON_LRU, errno.EINVAL),
        (BPF_MAP_TYPE_HASH, 4, 1 << 22, 4, 0, errno.E2BIG),
        (BPF_MAP_TYPE_PERCPU_HASH, 4, 32769, 4, 0, errno.E2BIG),
        (BPF_MAP_TYPE_LRU_HASH, 4, 4, 4, BPF_F_NO_PREALLOC, ENOTSUPP),
        (BPF_MAP_TYPE_ARRAY, 8, 4, 4, 0, errno.EINVAL),
        (BPF_MAP_TYPE_ARRAY, 4, 0, 4, 0, errno.EINVAL),
        (BPF_MAP_TYPE_PERCPU_ARRAY, 4, 4, 4, 1 << 10, errno.EINVAL),
        (BPF_MAP_TYPE_PROG_ARRAY, 4, 8, 4, 0, errno.EINVAL),
        (BPF_MAP_TYPE_RINGBUF, 0, 0, 3000, 0, errno.EINVAL),
        (BPF_MAP_TYPE_RINGBUF, 0, 0, 4096 * 3, 0, errno.EINVAL),
        (BPF_MAP_TYPE_RINGBUF, 4, 0, 4096, 0, errno.EINVAL),
        (BPF_MAP_TYPE_HASH, 4, 8, 100_000_000, 0, errno.ENOMEM),
        (99, 4, 4, 4, 0, errno.EINVAL),
    ],
)
def test_create_refuses_bad_attributes_with_the_kernel_errno(map_type, ks, vs, n, flags, err):
    with pytest.raises(MapError) as info:
        new(map_type, ks, vs, n, flags)
    assert info.value.errno == err, f"expected errno {err}, got {info.value.errno} ({info.value})"


@pytest.mark.parametrize("name", ["sixteen_chars_xx", "bad-name", "spa ce"])
def test_create_refuses_names_the_kernel_refuses(name):
    with pytest.raises(MapError) as info:
        new(BPF_MAP_TYPE_ARRAY, 4, 4, 1, name=name)
    assert info.value.errno == errno.EINVAL


# ----------------------------------------------------------------------------- hash maps


@pytest.mark.parametrize(
    ("key_size", "order"),
    [
        (4, [10, 4, 5, 0, 7, 2, 1, 8, 11, 9, 6, 3]),
        (8, [7, 4, 3, 8, 11, 9, 2, 10, 6, 5, 1, 0]),
        (3, [4, 11, 7, 8, 6, 5, 2, 9, 3, 1, 10, 0]),
    ],
)
def test_hash_iteration_follows_the_zero_seed_buckets_of_linux(key_size, order):
    """Linux 6.18: 16-entry hash, keys 0..11 inserted in order, BPF_F_ZERO_SEED."""
    _, m = new(BPF_MAP_TYPE_HASH, key_size, 8, 16, BPF_F_ZERO_SEED)
    for i in range(12):
        assert m.update_elem(i.to_bytes(key_size, "little"), u64(i), BPF_ANY) == 0
    got = [int.from_bytes(k, "little") for k, _ in m.items()]
    assert got == order


@pytest.mark.parametrize(
    ("key", "seed", "expected"),
    [
        (b"", 0, 0xDEADBEEF),
        (b"", 0xDEADBEEF, 0xBD5B7DDE),
        (b"Four score and seven years ago", 0, 0x17770551),
        (b"Four score and seven years ago", 1, 0xCD628161),
    ],
)
def test_jhash_matches_the_lookup3_reference_vectors(key, seed, expected):
    """The values lookup3.c's driver prints for hashlittle()."""
    got = jhash(key, seed)
    assert got == expected, f"jhash({key!r}, {seed:#x}) = {got:#x}, expected {expected:#x}"


def test_hash_value_lives_in_the_preallocated_element():
    mem, m = new(BPF_MAP_TYPE_HASH, 4, 8, 4)
    assert m.update_elem(u32(1), u64(0x1122), BPF_ANY) == 0
    addr = m.lookup_elem(u32(1))
    # 4 + 2 spare elements, CPU 0's list holds 0..2: spares 2 and 1 go first, then 0
    assert addr == m.elems.base + 0 * m.elem_size + HTAB_ELEM_SIZE + 8
    assert mem.read(addr, 8) == u64(0x1122)


def test_program_store_through_the_value_pointer_is_seen_by_the_syscall():
    mem, m = new(BPF_MAP_TYPE_HASH, 4, 8, 4)
    m.update_elem(u32(5), u64(1), BPF_ANY)
    mem.store(m.lookup_elem(u32(5)), 8, 41)
    assert m.lookup_value(u32(5)) == u64(41)


def test_hash_update_of_an_existing_key_swaps_in_the_cpu_spare_element():
    _, m = new(BPF_MAP_TYPE_HASH, 4, 8, 4)
    m.update_elem(u32(1), u64(1), BPF_ANY)
    before = m.lookup_elem(u32(1))
    m.update_elem(u32(1), u64(2), BPF_ANY, cpu=0)
    after = m.lookup_elem(u32(1))
    assert after == m.elems.base + 2 * m.elem_size + HTAB_ELEM_SIZE + 8, f"{after:#x}"
    assert before != after
    assert m.lookup_value(u32(1)) == u64(2)


def test_deleted_slot_is_reused_by_the_next_insert_on_that_cpu():
    _, m = new(BPF_MAP_TYPE_HASH, 4, 8, 4)
    m.update_elem(u32(1), u64(1), BPF_ANY)
    m.update_elem(u32(2), u64(2), BPF_ANY)
    freed = m.lookup_elem(u32(2))
    assert m.delete_elem(u32(2)) == 0
    m.update_elem(u32(3), u64(3), BPF_ANY)
    assert m.lookup_elem(u32(3)) == freed


@pytest.mark.parametrize(
    ("present", "flags", "expected"),
    [
        (True, BPF_NOEXIST, -errno.EEXIST),
        (False, BPF_EXIST, -errno.ENOENT),
        (True, BPF_EXIST, 0),
        (False, BPF_NOEXIST, 0),
        (False, 3, -errno.EINVAL),
        (False, BPF_F_LOCK, -errno.EINVAL),
    ],
)
def test_hash_update_flags(present, flags, expected):
    _, m = new(BPF_MAP_TYPE_HASH, 4, 8, 4)
    if present:
        m.update_elem(u32(1), u64(1), BPF_ANY)
    assert m.update_elem(u32(1), u64(9), flags) == expected


def test_full_hash_map_refuses_a_new_key_with_e2big():
    _, m = new(BPF_MAP_TYPE_HASH, 4, 8, 2)
    assert [m.update_elem(u32(i), u64(i), BPF_ANY) for i in range(4)] == [0, 0, -errno.E2BIG, -errno.E2BIG]


def test_full_hash_map_still_updates_an_existing_key():
    _, m = new(BPF_MAP_TYPE_HASH, 4, 8, 2)
    m.update_elem(u32(0), u64(0), BPF_ANY)
    m.update_elem(u32(1), u64(1), BPF_ANY)
    assert m.update_elem(u32(1), u64(7), BPF_ANY) == 0
    assert m.lookup_value(u32(1)) == u64(7)


def test_no_prealloc_hash_counts_entries_for_e2big():
    _, m = new(BPF_MAP_TYPE_HASH, 4, 8, 2, BPF_F_NO_PREALLOC)
    assert [m.update_elem(u32(i), u64(i), BPF_ANY) for i in range(3)] == [0, 0, -errno.E2BIG]


def test_hash_delete_of_missing_key_is_enoent():
    _, m = new(BPF_MAP_TYPE_HASH, 4, 8, 2)
    assert m.delete_elem(u32(3)) == -errno.ENOENT


def test_get_next_key_of_a_missing_key_restarts_from_the_first():
    _, m = new(BPF_MAP_TYPE_HASH, 4, 8, 16)
    for i in range(3):
        m.update_elem(u32(i), u64(i), BPF_ANY)
    first = m.get_next_key(None)
    assert m.get_next_key(u32(99)) == first


def test_as_dict_gives_every_element():
    _, m = new(BPF_MAP_TYPE_HASH, 4, 8, 16)
    for i in range(3):
        m.update_elem(u32(i), u64(i * 10), BPF_ANY)
    assert m.as_dict() == {u32(0): u64(0), u32(1): u64(10), u32(2): u64(20)}


# ----------------------------------------------------------------------------- LRU


@pytest.mark.parametrize(("n", "survivors"), [(4, [4, 5, 6, 7]), (8, list(range(4, 12))), (300, list(range(75, 304)))])
def test_lru_evicts_as_linux_does(n, survivors):
    """Linux 6.18: keys 0..n+3 inserted on CPU 0; a 300-entry map frees 75 elements at
    once (target_free = entries / CPUs / 2)."""
    _, m = new(BPF_MAP_TYPE_LRU_HASH, 4, 8, n)
    for i in range(n + 4):
        assert m.update_elem(u32(i), u64(i), BPF_ANY) == 0
    got = sorted(int.from_bytes(k, "little") for k, _ in m.items())
    assert got == survivors


def test_lru_lookup_from_a_program_keeps_the_element():
    """The reference bit a program's lookup sets moves the element to the active list."""
    _, m = new(BPF_MAP_TYPE_LRU_HASH, 4, 8, 4)
    for i in range(8):
        m.update_elem(u32(i), u64(i), BPF_ANY)
        if i == 1:
            m.lookup_elem(u32(0))
    assert sorted(int.from_bytes(k, "little") for k, _ in m.items()) == [0, 5, 6, 7]


def test_lru_exist_on_missing_key_is_enoent_and_keeps_the_count():
    _, m = new(BPF_MAP_TYPE_LRU_HASH, 4, 8, 4)
    m.update_elem(u32(1), u64(1), BPF_ANY)
    assert m.update_elem(u32(2), u64(2), BPF_EXIST) == -errno.ENOENT
    assert (m.count, list(m.as_dict())) == (1, [u32(1)])


def test_percpu_lru_evicts_within_the_cpu_list():
    _, m = new(BPF_MAP_TYPE_LRU_PERCPU_HASH, 4, 8, 4, BPF_F_NO_COMMON_LRU)
    for i in range(4):
        assert m.update_elem(u32(i), u64(i), BPF_ANY, cpu=0) == 0
    # 2 elements per CPU: CPU 0 evicts its oldest
    assert sorted(int.from_bytes(k, "little") for k, _ in m.items()) == [2, 3]


# ----------------------------------------------------------------------------- per-CPU


def test_percpu_hash_program_update_zeroes_the_other_cpus():
    _, m = new(BPF_MAP_TYPE_PERCPU_HASH, 4, 12, 4)
    assert m.update_elem(u32(1), bytes(range(1, 13)), BPF_ANY, cpu=1) == 0
    assert m.lookup_value(u32(1)) == bytes(16) + bytes(range(1, 13)) + bytes(4)


def test_percpu_hash_program_update_of_existing_changes_only_its_cpu():
    _, m = new(BPF_MAP_TYPE_PERCPU_HASH, 4, 8, 4)
    m.update_value(u32(1), u64(5) + u64(6))
    m.update_elem(u32(1), u64(9), BPF_ANY, cpu=0)
    assert m.lookup_value(u32(1)) == u64(9) + u64(6)


def test_percpu_hash_lookup_gives_the_cpu_copy_address():
    mem, m = new(BPF_MAP_TYPE_PERCPU_HASH, 4, 8, 4)
    m.update_value(u32(1), u64(5) + u64(6))
    assert (mem.read(m.lookup_elem(u32(1), cpu=0), 8), mem.read(m.lookup_elem(u32(1), cpu=1), 8)) == (u64(5), u64(6))


def test_percpu_lookup_of_a_cpu_that_does_not_exist_is_null():
    _, m = new(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, 4)
    assert m.lookup_percpu_elem(u32(0), 2) == 0


def test_percpu_array_syscall_value_is_every_cpu_rounded_up_to_8():
    _, m = new(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 4, 2)
    m.update_elem(u32(1), u32(0xAABBCCDD), BPF_ANY, cpu=1)
    assert m.lookup_value(u32(1)) == bytes(8) + u32(0xAABBCCDD) + bytes(4)


# ----------------------------------------------------------------------------- arrays


def test_array_elements_are_contiguous_with_values_rounded_up_to_8():
    _, m = new(BPF_MAP_TYPE_ARRAY, 4, 12, 4)
    assert [m.lookup_elem(u32(i)) - m.values.base for i in range(4)] == [0, 16, 32, 48]


def test_array_lookup_past_the_end_is_null():
    _, m = new(BPF_MAP_TYPE_ARRAY, 4, 4, 4)
    assert m.lookup_elem(u32(4)) == 0


@pytest.mark.parametrize(
    ("index", "flags", "expected"),
    [(0, BPF_NOEXIST, -errno.EEXIST), (4, BPF_ANY, -errno.E2BIG), (0, 3, -errno.EINVAL), (3, BPF_EXIST, 0)],
)
def test_array_update_errnos(index, flags, expected):
    _, m = new(BPF_MAP_TYPE_ARRAY, 4, 4, 4)
    assert m.update_elem(u32(index), u32(1), flags) == expected


def test_array_delete_is_einval():
    _, m = new(BPF_MAP_TYPE_ARRAY, 4, 4, 4)
    assert m.delete_elem(u32(0)) == -errno.EINVAL


@pytest.mark.parametrize(("key", "expected"), [(None, u32(0)), (u32(1), u32(2)), (u32(3), None), (u32(77), u32(0))])
def test_array_get_next_key(key, expected):
    _, m = new(BPF_MAP_TYPE_ARRAY, 4, 4, 4)
    assert m.get_next_key(key) == expected


def test_array_value_addr_is_base_plus_offset():
    _, m = new(BPF_MAP_TYPE_ARRAY, 4, 16, 1)
    assert m.value_addr(12) == m.values.base + 12


@pytest.mark.parametrize(("entries", "off", "err"), [(2, 0, ENOTSUPP), (1, 16, errno.EINVAL)])
def test_array_value_addr_refusals(entries, off, err):
    _, m = new(BPF_MAP_TYPE_ARRAY, 4, 16, entries)
    with pytest.raises(MapError) as info:
        m.value_addr(off)
    assert info.value.errno == err


def test_frozen_map_refuses_syscall_writes_with_eperm():
    _, m = new(BPF_MAP_TYPE_ARRAY, 4, 4, 1)
    assert m.freeze() == 0
    assert m.update_value(u32(0), u32(1)) == -errno.EPERM


def test_freezing_twice_is_ebusy():
    _, m = new(BPF_MAP_TYPE_ARRAY, 4, 4, 1)
    m.freeze()
    assert m.freeze() == -errno.EBUSY


# ----------------------------------------------------------------------------- fd arrays


class Sink:
    def __init__(self, cpu=None):
        self.records: list[tuple[bytes, int]] = []
        if cpu is not None:
            self.cpu = cpu

    def write(self, record: bytes, cpu: int) -> None:
        self.records.append((record, cpu))


def test_prog_array_holds_programs_by_index():
    _, m = new(BPF_MAP_TYPE_PROG_ARRAY, 4, 4, 4)
    prog = object()
    assert m.set_prog(2, prog) == 0
    assert (m.prog_at(2), m.prog_at(1), m.prog_at(9)) == (prog, None, None)


@pytest.mark.parametrize(("index", "expected"), [(1, -errno.ENOENT), (4, -errno.E2BIG)])
def test_prog_array_delete_errnos(index, expected):
    _, m = new(BPF_MAP_TYPE_PROG_ARRAY, 4, 4, 4)
    assert m.delete_elem(u32(index)) == expected


def test_perf_event_output_to_the_current_cpu_pads_the_raw_sample():
    """perf stores a u32 size then the data, padded so both end on 8 bytes: 4 + 6 -> 16."""
    _, m = new(BPF_MAP_TYPE_PERF_EVENT_ARRAY, 4, 4, 2)
    sinks = [Sink(), Sink()]
    for i, s in enumerate(sinks):
        m.set_sink(i, s)
    assert m.perf_event_output(BPF_F_CURRENT_CPU, b"abcdef", cpu=1) == 0
    assert (sinks[0].records, sinks[1].records) == ([], [(b"abcdef" + bytes(6), 1)])


@pytest.mark.parametrize(
    ("flags", "cpu", "expected"),
    [(5, 0, -errno.E2BIG), (1, 0, -errno.ENOENT), (1 << 32, 0, -errno.EINVAL), (0, 1, -errno.EOPNOTSUPP)],
)
def test_perf_event_output_errnos(flags, cpu, expected):
    _, m = new(BPF_MAP_TYPE_PERF_EVENT_ARRAY, 4, 4, 2)
    m.set_sink(0, Sink(cpu=0))
    assert m.perf_event_output(flags, b"x", cpu=cpu) == expected


# ----------------------------------------------------------------------------- ring buffer


def ring(size=4096):
    mem, rb = new(BPF_MAP_TYPE_RINGBUF, 0, 0, size)
    return mem, rb


def test_reserve_writes_a_busy_header_with_the_page_offset():
    mem, rb = ring()
    rec = rb.reserve(12)
    assert rec == rb.data_addr + 8
    assert mem.read(rb.data_addr, 8) == struct.pack("<II", 12 | BPF_RINGBUF_BUSY_BIT, 3)


def test_reserve_advances_the_producer_by_the_rounded_record():
    _, rb = ring()
    rb.reserve(12)
    assert rb.query(BPF_RB_PROD_POS) == 24


@pytest.mark.parametrize(("discard", "header"), [(False, 12), (True, 12 | BPF_RINGBUF_DISCARD_BIT)])
def test_commit_clears_the_busy_bit(discard, header):
    mem, rb = ring()
    rec = rb.reserve(12)
    (rb.discard if discard else rb.submit)(rec, 0)
    assert mem.read(rb.data_addr, 4) == u32(header)


def test_consume_skips_discarded_records_and_advances_past_them():
    mem, rb = ring()
    a, b, c = rb.reserve(4), rb.reserve(4), rb.reserve(4)
    mem.write(a, b"AAAA")
    mem.write(c, b"CCCC")
    rb.submit(a)
    rb.discard(b)
    rb.submit(c)
    assert rb.consume() == [b"AAAA", b"CCCC"]
    assert rb.consumer_pos == 48


def test_consume_stops_at_a_record_still_reserved():
    mem, rb = ring()
    a, b = rb.reserve(4), rb.reserve(4)
    rb.submit(b)
    assert (rb.consume(), rb.consumer_pos) == ([], 0)
    rb.submit(a)
    assert len(rb.consume()) == 2


def test_reserve_fails_when_the_ring_is_full():
    _, rb = ring()
    assert rb.reserve(4096 - 8) == 0  # a record may not fill the whole ring
    assert rb.reserve(4096 - 16) != 0
    assert rb.reserve(1) == 0


def test_output_when_full_is_eagain():
    _, rb = ring()
    rb.reserve(4000)
    assert rb.output(b"x" * 200) == -errno.EAGAIN


def test_reserve_with_flags_fails():
    _, rb = ring()
    assert rb.reserve(8, 1) == 0


def test_output_with_unknown_flags_is_einval():
    _, rb = ring()
    assert rb.output(b"x", 4) == -errno.EINVAL


def test_record_wrapping_past_the_end_reads_back_whole():
    """A record across the end of the data area: the program writes it through the
    kernel's double mapping, the consumer reads it back in one piece."""
    mem, rb = ring()
    for _ in range(2):
        rb.output(b"z" * 2000)
    rb.consume()
    rec = rb.reserve(200)  # starts at 4016: 8-byte header, then 72 bytes before the end
    data = bytes(range(200))
    mem.write(rec, data)
    rb.submit(rec)
    assert rb.consume() == [data]


def test_wrapped_record_lands_at_the_start_of_the_data_area():
    mem, rb = ring()
    for _ in range(2):
        rb.output(b"z" * 2000)
    rb.consume()
    rb.output(bytes(range(200)))
    assert mem.read(rb.data_addr, 128) == bytes(range(72, 200))


def test_query_values():
    _, rb = ring(8192)
    rb.output(b"12345678")
    rb.output(b"1234")
    rb.consume()
    rb.output(b"1")
    assert [rb.query(f) for f in (BPF_RB_AVAIL_DATA, BPF_RB_RING_SIZE, BPF_RB_CONS_POS, BPF_RB_PROD_POS, 9)] == [
        16,
        8192,
        32,
        48,
        0,
    ]


@pytest.mark.parametrize(("flags", "wakeups"), [(0, 1), (BPF_RB_NO_WAKEUP, 0), (BPF_RB_FORCE_WAKEUP, 1)])
def test_submit_wakes_a_reader_waiting_for_that_record(flags, wakeups):
    _, rb = ring()
    rb.submit(rb.reserve(8), flags)
    assert rb.wakeups == wakeups


def test_submit_of_a_later_record_does_not_wake_the_reader():
    _, rb = ring()
    rb.reserve(8)
    rb.submit(rb.reserve(8), 0)
    assert rb.wakeups == 0


def test_mmap_pages_show_the_positions():
    _, rb = ring()
    rb.output(b"abcd")
    rb.consume()
    assert (rb.consumer_page()[:8], rb.producer_pages()[:8], len(rb.producer_pages())) == (u64(16), u64(16), 4096 * 3)


_MIXED_OPS = [("u", k, BPF_ANY) for k in range(12)] + [
    ("d", 9, 0),
    ("u", 3, BPF_EXIST),
    ("u", 20, BPF_NOEXIST),
    ("u", 21, BPF_ANY),
    ("d", 0, 0),
    ("u", 5, BPF_NOEXIST),
    ("d", 30, 0),
    ("u", 22, BPF_ANY),
]


@pytest.mark.parametrize(
    ("map_type", "flags", "results", "order"),
    [
        (BPF_MAP_TYPE_HASH, 0, [-2, 0, -7, -7, 0, -17, -2, 0], [4, 7, 2, 1, 6, 5, 22, 3]),
        (BPF_MAP_TYPE_HASH, BPF_F_NO_PREALLOC, [-2, 0, -7, -7, 0, -17, -2, 0], [4, 7, 2, 1, 6, 5, 22, 3]),
        (BPF_MAP_TYPE_LRU_HASH, 0, [0, -2, 0, 0, -2, 0, -2, 0], [10, 7, 21, 8, 20, 11, 5, 22]),
        (BPF_MAP_TYPE_LRU_HASH, BPF_F_NO_COMMON_LRU, [0, -2, 0, 0, -2, 0, -2, 0], [21, 5, 22]),
    ],
)
def test_mixed_syscall_updates_and_deletes_match_linux(map_type, flags, results, order):
    """Linux 6.18, 8 entries, zero seed, CPU 0: the errno of each call after the first
    twelve inserts, and the final iteration order (bucket order, newest first in a bucket)."""
    _, m = new(map_type, 4, 8, 8, flags | BPF_F_ZERO_SEED)
    got = [m.update_value(u32(k), u64(k), f) if op == "u" else m.delete_value(u32(k)) for op, k, f in _MIXED_OPS]
    assert (got[12:], [int.from_bytes(k, "little") for k, _ in m.items()]) == (results, order)


def _host_scenario():
    """What a syscall program did to a 4096-byte ring on Linux 6.18 (run twice with
    BPF_PROG_TEST_RUN, the consumer caught up in between): a 2000-byte record of
    ``i & 0xff``, a 1800-byte record discarded after writing 0xee to its first byte,
    a 5-byte output, a 4000-byte reservation that must fail; then a 500-byte record of
    ``255 - (i & 0xff)`` that wraps around the end."""
    mem, rb = ring()
    a = rb.reserve(2000)
    mem.write(a, bytes(i & 0xFF for i in range(2000)))
    rb.submit(a)
    b = rb.reserve(1800)
    mem.write(b, b"\xee")
    rb.discard(b)
    rb.output(u64(0x1122334455667788)[:5])
    first = [rb.query(f) for f in range(4)] + [rb.reserve(4000)]
    data0 = rb.producer_pages()[4096:8192]
    rb.consumer_pos = rb.producer_pos
    c = rb.reserve(500)
    mem.write(c, bytes(255 - (i & 0xFF) for i in range(500)))
    rb.submit(c)
    second = [rb.query(BPF_RB_AVAIL_DATA), rb.query(BPF_RB_PROD_POS)]
    return first, data0, second, rb.producer_pages()[4096:8192]


def test_ring_positions_and_queries_match_linux():
    first, _, second, _ = _host_scenario()
    assert (first, second) == ([3832, 4096, 0, 3832, 0], [512, 4344])


@pytest.mark.parametrize(
    ("which", "sha256"),
    [
        (1, "ccea6bb0bcca9f80312621ba7cddf38b7185daee954da3d47ebceb5ae05793c4"),
        (3, "5fca618aa2e0c8751292f351fc4d6b24b530eebed2604116671915092fed236f"),
    ],
)
def test_ring_data_pages_are_byte_identical_to_linux(which, sha256):
    """The data area as the host's mmap showed it, before and after the wrapped record."""
    assert hashlib.sha256(_host_scenario()[which]).hexdigest() == sha256


def test_discarded_record_header_in_the_linux_scenario():
    data0 = _host_scenario()[1]
    assert data0[2008:2016] == struct.pack("<II", 1800 | BPF_RINGBUF_DISCARD_BIT, 3)
