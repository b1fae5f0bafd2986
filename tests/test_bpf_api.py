"""``m.bpf``: BPF objects loaded into a machine as a libbpf tool loads them.

The object is guest_programs/bpf/malloc_sizes.bpf.c (a hash map of malloc size classes,
a ring buffer of free() records, a ``const volatile`` pid filter in ``.rodata``, a
counter in ``.bss``) and the target guest_programs/bpf/malloc_target.c, whose twelve
malloc sizes fall in the classes below (class i holds [2^(i-1), 2^i))."""

from __future__ import annotations

import errno
import struct

import pytest

from emu import Machine
from emu.probes.bpf_api import BpfLoadError
from kernel_model.errors import InputError

# the target's sizes: 1, 7, 8, 24, 100, 200, 1000, 5000, 70000, 3, 64, 65
CLASSES = {1: 1, 3: 1, 4: 1, 5: 1, 7: 3, 8: 1, 10: 1, 13: 1, 17: 1, 2: 1}
ATTACH = {"on_malloc": "libc:malloc", "on_free": "libc:free"}


@pytest.fixture(scope="module")
def obj_path(build_bpf):
    return build_bpf("malloc_sizes.bpf.c")


def _run(malloc_target, obj_path, **load):
    m = Machine.from_elf(malloc_target, argv=[malloc_target])
    obj = m.bpf.load(obj_path, **load)
    records: list[bytes] = []
    if "frees" in obj.maps:
        obj.on_ringbuf("frees", records.append)
    r = m.run(timeout=60)
    assert r.reason == "exit" and r.exit_code == 0, r.describe()
    return m, obj, records


@pytest.fixture(scope="module")
def counted(malloc_target, obj_path):
    return _run(malloc_target, obj_path, attach=ATTACH)


def test_the_hash_map_reads_as_a_dict_of_size_classes(counted):
    _, obj, _ = counted
    assert dict(obj.maps["sizes"]) == CLASSES


def test_each_free_is_one_ring_buffer_record_in_order(counted):
    m, _, records = counted
    decoded = [struct.unpack("<IIQ", r) for r in records]
    assert [(pid, seq) for pid, seq, _ in decoded] == [(m.main_process.pid, i) for i in range(12)]


def test_the_records_carry_the_addresses_malloc_returned(counted):
    """Each freed address lies in the heap the target's brk made."""
    m, _, records = counted
    heap = next(v for v in m.main_process.mem.vmas if v.name == "[heap]")
    addrs = [struct.unpack("<IIQ", r)[2] for r in records]
    assert all(heap.start <= a < heap.end for a in addrs), [hex(a) for a in addrs]
    assert len(set(addrs)) == 12


def test_a_global_variable_reads_back_its_bytes(counted):
    _, obj, _ = counted
    assert obj.variable("free_seq") == (12).to_bytes(4, "little")


def test_the_map_dumps_as_bpftool_prints_it(counted):
    """In the order of the kernel's buckets for a zero hash seed (jhash of each key)."""
    _, obj, _ = counted
    order = [2, 8, 3, 7, 13, 1, 17, 10, 4, 5]
    body = "},{".join(f'\n        "key": {k},\n        "value": {CLASSES[k]}\n    ' for k in order)
    assert obj.maps["sizes"].dump() == "[{" + body + "}\n]\n"


def test_the_programs_ran_once_per_call(counted):
    _, obj, _ = counted
    assert (obj.programs["on_malloc"].run_cnt, obj.programs["on_free"].run_cnt) == (12, 12)


@pytest.mark.parametrize("tgid,expected", [(1000, CLASSES), (4242, {})])
def test_a_rodata_variable_set_before_the_load_filters_by_tgid(malloc_target, obj_path, tgid, expected):
    _, obj, records = _run(malloc_target, obj_path, attach=ATTACH, rodata={"target_tgid": tgid})
    assert (dict(obj.maps["sizes"]), len(records)) == (expected, 12 if expected else 0)


def test_a_pid_filter_for_another_process_counts_nothing(malloc_target, obj_path):
    m = Machine.from_elf(malloc_target, argv=[malloc_target])
    obj = m.bpf.load(obj_path, attach=ATTACH, pid=m.main_process.pid)
    m.run(timeout=60)
    assert dict(obj.maps["sizes"]) == CLASSES
    m2 = Machine.from_elf(malloc_target, argv=[malloc_target])
    with pytest.raises(Exception, match="no process 4242"):
        m2.bpf.load(obj_path, attach=ATTACH, pid=4242)


def test_programs_without_a_target_stay_detached(malloc_target, obj_path):
    _, obj, records = _run(malloc_target, obj_path)
    assert (dict(obj.maps["sizes"]), records, obj.links) == ({}, [], [])


def test_detach_stops_the_counting(malloc_target, obj_path):
    m = Machine.from_elf(malloc_target, argv=[malloc_target])
    obj = m.bpf.load(obj_path, attach=ATTACH)
    obj.detach()
    m.run(timeout=60)
    assert dict(obj.maps["sizes"]) == {}


@pytest.mark.parametrize(
    "load,message",
    [
        ({"attach": {"on_mmap": "libc:mmap"}}, "no program 'on_mmap' to attach (programs: on_free, on_malloc)"),
        ({"rodata": {"nope": 1}}, "no global variable 'nope'"),
        ({"rodata": {"target_tgid": 1 << 40}}, "cannot hold"),
        ({"attach": {"on_malloc": "libc:no_such_function"}}, "no_such_function"),
    ],
)
def test_bad_load_arguments_are_one_line_errors(malloc_target, obj_path, load, message):
    m = Machine.from_elf(malloc_target, argv=[malloc_target])
    with pytest.raises(InputError) as err:
        m.bpf.load(obj_path, **load)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("content", [b"", b"not an ELF file at all", b"\x7fELF" + bytes(60)])
def test_a_file_that_is_no_bpf_object_is_a_one_line_error(tmp_path, malloc_target, content):
    bad = tmp_path / "bad.o"
    bad.write_bytes(content)
    m = Machine.from_elf(malloc_target, argv=[malloc_target])
    with pytest.raises(InputError) as err:
        m.bpf.load(str(bad))
    assert str(bad) in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_program_the_verifier_rejects_is_a_load_error_with_its_errno(build_bpf, malloc_target):
    """test_rejected.bpf.c reads a map value without the NULL check."""
    path = build_bpf("test_rejected.bpf.c")
    m = Machine.from_elf(malloc_target, argv=[malloc_target])
    with pytest.raises(BpfLoadError) as err:
        m.bpf.load(path)
    assert err.value.errno == errno.EACCES, err.value
    assert "invalid mem access 'map_value_or_null'" in str(err.value), str(err.value)
