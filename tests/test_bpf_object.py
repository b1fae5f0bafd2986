"""Opening clang-built BPF objects as libbpf does: programs and their SEC() types, .text
subprograms, relocations, maps (BTF-defined and global data), map creation, errors."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_model.bpf.bpf_map import BPF_F_MMAPABLE, BPF_F_NO_PREALLOC, BPF_F_RDONLY_PROG
from kernel_model.bpf.bpf_types import (
    BPF_MAP_TYPE_ARRAY,
    BPF_MAP_TYPE_HASH,
    BPF_MAP_TYPE_PERCPU_HASH,
    BPF_MAP_TYPE_RINGBUF,
    BPF_PROG_TYPE_KPROBE,
    BPF_TRACE_KPROBE_MULTI,
    BPF_TRACE_UPROBE_MULTI,
    BPF_TRACE_UPROBE_SESSION,
)
from kernel_model.bpf.insn import (
    BPF_PSEUDO_CALL,
    BPF_PSEUDO_FUNC,
    BPF_PSEUDO_KFUNC_CALL,
    BPF_PSEUDO_MAP_FD,
    BPF_PSEUDO_MAP_VALUE,
)
from kernel_model.bpf.libbpf_sections import parse_section
from kernel_model.bpf.maps import MapError
from kernel_model.bpf.memory import KernelMemory
from kernel_model.bpf.object import BpfObject, ObjectError, map_by_fd
from kernel_model.bpf.ringbuf import RingBuf


@pytest.fixture(scope="module")
def malloc_sizes(build_bpf):
    return BpfObject.open(build_bpf("malloc_sizes.bpf.c"))


@pytest.fixture(scope="module")
def sections(build_bpf):
    return BpfObject.open(build_bpf("test_sections.bpf.c"))


# ----------------------------------------------------------------------------- malloc_sizes


def test_malloc_sizes_programs(malloc_sizes):
    got = [(p.name, p.section, p.prog_type, p.expected_attach_type) for p in malloc_sizes.programs]
    assert got == [("on_malloc", "uprobe", BPF_PROG_TYPE_KPROBE, 0), ("on_free", "uprobe", BPF_PROG_TYPE_KPROBE, 0)]


def test_malloc_sizes_license(malloc_sizes):
    assert (malloc_sizes.license, malloc_sizes.programs[0].license) == ("GPL", "GPL")


def test_malloc_sizes_maps(malloc_sizes):
    got = [(m.name, m.type, m.key_size, m.value_size, m.max_entries) for m in malloc_sizes.maps]
    assert got == [
        ("sizes", BPF_MAP_TYPE_HASH, 4, 8, 64),
        ("frees", BPF_MAP_TYPE_RINGBUF, 0, 0, 65536),
        ("malloc_s.rodata", BPF_MAP_TYPE_ARRAY, 4, 4, 1),
        ("malloc_s.bss", BPF_MAP_TYPE_ARRAY, 4, 4, 1),
    ]


@pytest.mark.parametrize(
    ("name", "flags"), [("malloc_s.rodata", BPF_F_RDONLY_PROG | BPF_F_MMAPABLE), ("malloc_s.bss", BPF_F_MMAPABLE)]
)
def test_global_data_map_flags(malloc_sizes, name, flags):
    assert malloc_sizes.map(name).flags == flags


def test_bare_uprobe_section_does_not_auto_attach(malloc_sizes):
    spec = malloc_sizes.program("on_malloc").attach
    assert (spec.kind, spec.auto, spec.retprobe, spec.path) == ("uprobe", False, False, "")


def test_map_reference_becomes_a_map_fd_lddw(malloc_sizes):
    """on_free's first map load is ``frees`` (map 1)."""
    maps = malloc_sizes.load_maps(KernelMemory(), 2)
    insns = malloc_sizes.resolved_insns(malloc_sizes.program("on_free"), maps)
    lddws = [(i.src, i.imm) for i in insns if i.code == 0x18 and i.src == BPF_PSEUDO_MAP_FD]
    assert lddws == [(BPF_PSEUDO_MAP_FD, 1)]


def test_global_data_references_become_map_value_lddw(malloc_sizes):
    """target_tgid (.rodata, map 2) and free_seq (.bss, map 3), both at offset 0."""
    insns = malloc_sizes.resolved_insns(malloc_sizes.program("on_free"))
    got = [(insns[k].imm, insns[k + 1].imm) for k, i in enumerate(insns) if i.code == 0x18 and i.src == 2]
    assert got == [(2, 0), (3, 0)]


def test_load_maps_creates_every_map(malloc_sizes):
    maps = malloc_sizes.load_maps(KernelMemory(), 2)
    assert [(m.name, m.map_type) for m in maps] == [
        ("sizes", BPF_MAP_TYPE_HASH),
        ("frees", BPF_MAP_TYPE_RINGBUF),
        ("malloc_s.rodata", BPF_MAP_TYPE_ARRAY),
        ("malloc_s.bss", BPF_MAP_TYPE_ARRAY),
    ]


def test_load_maps_freezes_rodata_only(malloc_sizes):
    maps = malloc_sizes.load_maps(KernelMemory(), 2)
    assert [m.frozen for m in maps] == [False, False, True, False]


def test_load_maps_keeps_the_btf_type_ids(malloc_sizes):
    m = malloc_sizes.load_maps(KernelMemory(), 2)[0]
    d = malloc_sizes.map("sizes")
    assert (m.btf_key_type_id, m.btf_value_type_id) == (d.btf_key_type_id, d.btf_value_type_id)


def test_ringbuf_map_is_a_ring_buffer(malloc_sizes):
    assert isinstance(malloc_sizes.load_maps(KernelMemory(), 1)[1], RingBuf)


def test_set_rodata_reaches_the_created_map(build_bpf):
    obj = BpfObject.open(build_bpf("malloc_sizes.bpf.c"))
    obj.set_rodata("target_tgid", struct.pack("<I", 1234))
    maps = obj.load_maps(KernelMemory(), 1)
    assert maps[2].lookup_value(bytes(4)) == struct.pack("<I", 1234)


def test_set_rodata_takes_an_int(build_bpf):
    obj = BpfObject.open(build_bpf("malloc_sizes.bpf.c"))
    obj.set_rodata("target_tgid", 7)
    assert obj.map(".rodata").initial == struct.pack("<I", 7)


@pytest.mark.parametrize(
    ("var", "data", "message"),
    [("target_tgid", b"\0" * 8, "has 4 bytes, 8 given"), ("nosuch", b"\0", "no variable 'nosuch' in .rodata")],
)
def test_set_rodata_errors(malloc_sizes, var, data, message):
    with pytest.raises(ObjectError, match=message):
        malloc_sizes.set_rodata(var, data)


def test_find_variable(malloc_sizes):
    assert malloc_sizes.find_variable("free_seq") == (".bss", 0, 4)


def test_map_by_fd_resolves_indices(malloc_sizes):
    maps = malloc_sizes.load_maps(KernelMemory(), 1)
    lookup = map_by_fd(maps)
    assert (lookup(1), lookup(4)) == (maps[1], None)


def test_load_maps_names_the_map_the_kernel_refuses(malloc_sizes):
    d = malloc_sizes.map("sizes")
    old = d.value_size
    d.value_size = 0
    try:
        with pytest.raises(MapError, match="map 'sizes'"):
            malloc_sizes.load_maps(KernelMemory(), 1)
    finally:
        d.value_size = old


# ----------------------------------------------------------------------------- section names


@pytest.mark.parametrize(
    ("sec", "expected"),
    [
        ("uprobe", ("uprobe", False, False, "", "", 0, False)),
        ("uretprobe", ("uprobe", True, False, "", "", 0, False)),
        ("uprobe//bin/bash:readline", ("uprobe", False, False, "/bin/bash", "readline", 0, True)),
        ("uprobe/libc.so.6:malloc+0x10", ("uprobe", False, False, "libc.so.6", "malloc", 16, True)),
        ("uprobe/app:f+010", ("uprobe", False, False, "app", "f", 8, True)),
        ("uprobe/app:f+x", ("uprobe", False, False, "app", "f+x", 0, True)),
        ("uretprobe.s/app:main", ("uprobe", True, True, "app", "main", 0, True)),
        ("uprobe.s", ("uprobe", False, True, "", "", 0, False)),
    ],
)
def test_uprobe_sections(sec, expected):
    d, spec = parse_section(sec)
    got = (spec.kind, spec.retprobe, spec.sleepable, spec.path, spec.func, spec.offset, spec.auto)
    assert got == expected


@pytest.mark.parametrize(
    ("sec", "attach_type", "expected"),
    [
        ("uprobe.multi", BPF_TRACE_UPROBE_MULTI, (False, False, "", "", False)),
        ("uprobe.multi/libc.so.6:mall*", BPF_TRACE_UPROBE_MULTI, (False, False, "libc.so.6", "mall*", False)),
        ("uretprobe.multi/app:f?", BPF_TRACE_UPROBE_MULTI, (True, False, "app", "f?", False)),
        ("uprobe.session/app:main", BPF_TRACE_UPROBE_SESSION, (False, True, "app", "main", False)),
        ("uprobe.multi.s/app:f", BPF_TRACE_UPROBE_MULTI, (False, False, "app", "f", True)),
        ("uprobe.session.s", BPF_TRACE_UPROBE_SESSION, (False, True, "", "", True)),
    ],
)
def test_uprobe_multi_sections(sec, attach_type, expected):
    d, spec = parse_section(sec)
    assert d.expected_attach_type == attach_type
    assert (spec.retprobe, spec.session, spec.path, spec.pattern, spec.sleepable) == expected


@pytest.mark.parametrize(
    ("sec", "expected"),
    [
        ("usdt", ("usdt", "", "", "", False)),
        ("usdt/./app:prov:name", ("usdt", "./app", "prov", "name", True)),
        (
            "usdt.s//usr/bin/python3:python:function__entry",
            ("usdt", "/usr/bin/python3", "python", "function__entry", True),
        ),
    ],
)
def test_usdt_sections(sec, expected):
    _, spec = parse_section(sec)
    assert (spec.kind, spec.path, spec.usdt_provider, spec.usdt_name, spec.auto) == expected


@pytest.mark.parametrize(
    ("sec", "kind", "attach_type"),
    [
        ("kprobe/do_sys_open", "kprobe", 0),
        ("kretprobe/do_sys_open", "kprobe", 0),
        ("kprobe.multi/vfs_*", "kprobe.multi", BPF_TRACE_KPROBE_MULTI),
        ("tracepoint/syscalls/sys_enter_openat", "tracepoint", 0),
        ("fentry/do_unlinkat", "fentry", 24),
    ],
)
def test_other_sections_are_recognised_with_their_kind(sec, kind, attach_type):
    d, spec = parse_section(sec)
    assert (spec.kind, d.expected_attach_type) == (kind, attach_type)


@pytest.mark.parametrize("sec", ["uprobex", "nosuch/thing", "uprobe.multix/a:b", ".text"])
def test_unknown_sections(sec):
    assert parse_section(sec) is None


@pytest.mark.parametrize(
    ("sec", "message"),
    [
        ("uprobe/app", "missing ':function[+offset]'"),
        ("uretprobe/app:f+8", "uretprobes do not support offset"),
        ("usdt/app:prov", "expected SEC"),
        ("uprobe.multi/app", "invalid format"),
    ],
)
def test_malformed_sections(sec, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_section(sec)


# ----------------------------------------------------------------------------- test_sections


def test_sections_programs_in_order(sections):
    assert [(p.name, p.expected_attach_type) for p in sections.programs] == [
        ("multi_entry", BPF_TRACE_UPROBE_MULTI),
        ("multi_exit", BPF_TRACE_UPROBE_MULTI),
        ("with_cookie", BPF_TRACE_UPROBE_SESSION),
        ("usdt_probe", 0),
        ("sleepy_ret", 0),
        ("at_offset", 0),
    ]


@pytest.mark.parametrize(
    ("prog", "subprogs"),
    [("multi_entry", ["bump"]), ("multi_exit", ["bump_twice", "bump"]), ("usdt_probe", ["add_one"]), ("at_offset", [])],
)
def test_subprograms_are_appended_depth_first(sections, prog, subprogs):
    assert sections.program(prog).subprogs == subprogs


def _calls(prog):
    return [(k, i.imm) for k, i in enumerate(prog.insns) if i.code == 0x85 and i.src == BPF_PSEUDO_CALL]


def test_call_offsets_point_at_the_appended_subprograms(sections):
    """multi_exit: main (2 insns), then bump_twice, then bump; every call lands on the
    first instruction of its subprogram."""
    prog = sections.program("multi_exit")
    n_twice = len(next(t for t in sections._text if t.name == "bump_twice").insns)
    assert [k + imm + 1 for k, imm in _calls(prog)] == [2, 2 + n_twice, 2 + n_twice]


def test_callback_address_becomes_a_pseudo_func_lddw(sections):
    """bpf_loop's callback add_one is appended last; the lddw points at its start."""
    prog = sections.program("usdt_probe")
    add_one = next(t for t in sections._text if t.name == "add_one")
    funcs = [k + i.imm + 1 for k, i in enumerate(prog.insns) if i.code == 0x18 and i.src == BPF_PSEUDO_FUNC]
    assert funcs == [len(prog.insns) - len(add_one.insns)]


def test_kfunc_call_keeps_its_name(sections):
    prog = sections.program("with_cookie")
    assert [(r.kind, r.name) for r in prog.relocs if r.kind == "kfunc"] == [("kfunc", "bpf_session_cookie")]


def test_kfunc_call_is_resolved_to_a_kfunc_call(sections):
    prog = sections.program("with_cookie")
    insns = sections.resolved_insns(prog)
    assert [(i.src, i.imm) for i in insns if i.code == 0x85 and i.src == BPF_PSEUDO_KFUNC_CALL] == [
        (BPF_PSEUDO_KFUNC_CALL, 1)
    ]


def test_bpf_prog_carries_the_kfunc_table(sections):
    prog = sections.bpf_prog(sections.program("with_cookie"), lambda name: 77)
    assert (prog.kfuncs, prog.expected_attach_type) == ({77: "bpf_session_cookie"}, BPF_TRACE_UPROBE_SESSION)


def test_data_and_bss_relocations(sections):
    """hits lives in .data (map 2), last_cookie in .bss (map 3)."""
    insns = sections.resolved_insns(sections.program("with_cookie"))
    got = [(insns[k].imm, insns[k + 1].imm) for k, i in enumerate(insns) if i.code == 0x18 and i.src == 2]
    assert got == [(2, 0), (3, 0)]
    assert all(i.src != BPF_PSEUDO_MAP_VALUE or i.imm in (2, 3) for i in insns if i.code == 0x18)


def test_subprogram_map_reference_is_relocated_in_each_program(sections):
    """bump's lookup of ``counts`` is relocated wherever bump is appended."""
    for name in ("multi_entry", "multi_exit", "sleepy_ret"):
        insns = sections.resolved_insns(sections.program(name))
        assert [i.imm for i in insns if i.code == 0x18 and i.src == BPF_PSEUDO_MAP_FD] == [0], name


def test_map_defined_by_sizes_and_flags(sections):
    d = sections.map("scratch")
    assert (d.type, d.key_size, d.value_size, d.flags, d.btf_key_type_id) == (
        BPF_MAP_TYPE_PERCPU_HASH,
        8,
        12,
        BPF_F_NO_PREALLOC,
        0,
    )


def test_data_section_initial_value(sections):
    assert sections.map(".data").initial == struct.pack("<Q", 7)


def test_sections_license(sections):
    assert sections.license == "Dual BSD/GPL"


# ----------------------------------------------------------------------------- errors


def test_not_an_elf_file(tmp_path):
    p = tmp_path / "x.bpf.o"
    p.write_text("hello")
    with pytest.raises(ObjectError, match=r"x\.bpf\.o: not an ELF file"):
        BpfObject.open(p)


def test_wrong_machine(tmp_path, build_bpf):
    data = bytearray(Path(build_bpf("malloc_sizes.bpf.c")).read_bytes())
    data[18:20] = struct.pack("<H", 62)  # EM_X86_64
    p = tmp_path / "x86.o"
    p.write_bytes(bytes(data))
    with pytest.raises(ObjectError, match="EM_BPF=247 required"):
        BpfObject.open(p)


def test_missing_file(tmp_path):
    with pytest.raises(ObjectError, match="nosuch.o: No such file"):
        BpfObject.open(tmp_path / "nosuch.o")


def test_truncated_object(tmp_path, build_bpf):
    data = Path(build_bpf("malloc_sizes.bpf.c")).read_bytes()
    p = tmp_path / "cut.o"
    p.write_bytes(data[:200])
    with pytest.raises(ObjectError, match="cut.o: "):
        BpfObject.open(p)


def test_no_programs(build_bpf):
    with pytest.raises(ObjectError, match="no BPF programs"):
        BpfObject.open(build_bpf("test_errors.bpf.c"))


def test_unknown_section(build_bpf):
    with pytest.raises(ObjectError, match="unknown section 'nosuchtype/thing'"):
        BpfObject.open(build_bpf("test_errors.bpf.c", "-DBAD_SECTION"))


def test_relocation_against_a_non_load_instruction(tmp_path, build_bpf):
    """Turn the lddw of target_tgid (on_malloc's 5th instruction) into a mov."""
    from elftools.elf.elffile import ELFFile

    path = build_bpf("malloc_sizes.bpf.c")
    with open(path, "rb") as f:
        offset = ELFFile(f).get_section_by_name("uprobe")["sh_offset"]
        f.seek(0)
        data = bytearray(f.read())
    data[offset + 4 * 8] = 0xB7
    p = tmp_path / "badrel.o"
    p.write_bytes(bytes(data))
    with pytest.raises(ObjectError, match=r"badrel\.o: prog 'on_malloc': invalid relo against 'target_tgid'"):
        BpfObject.open(p)


@pytest.mark.parametrize("builder", ["not_elf", "cut"])
def test_errors_are_one_line(tmp_path, build_bpf, builder):
    data = b"junk" if builder == "not_elf" else Path(build_bpf("malloc_sizes.bpf.c")).read_bytes()[:300]
    p = tmp_path / "e.o"
    p.write_bytes(data)
    with pytest.raises(ObjectError) as info:
        BpfObject.open(p)
    assert "\n" not in str(info.value)


# ----------------------------------------------------------------------------- legacy maps, .kconfig


@pytest.fixture(scope="module")
def legacy(build_bpf):
    return BpfObject.open(build_bpf("test_legacy.bpf.c"))


def test_legacy_maps_section_definition(legacy):
    d = legacy.map("old_hash")
    assert (d.type, d.key_size, d.value_size, d.max_entries, d.flags) == (BPF_MAP_TYPE_HASH, 4, 8, 32, 0)


def test_kconfig_externs_are_laid_out_by_alignment_then_name(legacy):
    assert legacy.kconfig == [("LINUX_KERNEL_VERSION", 0, 4), ("CONFIG_BPF_SYSCALL", 4, 1)]


def test_kconfig_map_is_named_and_sized_as_libbpf_does(legacy):
    d = legacy.map(".kconfig")
    assert (d.name, d.value_size, d.flags) == ("test_le.kconfig", 5, BPF_F_RDONLY_PROG | BPF_F_MMAPABLE)


def test_kconfig_loads_become_map_value_lddw_at_the_extern_offset(legacy):
    """Map 3 is .kconfig (after old_hash, .data.tally and .rodata); the last two loads are
    the format string (.rodata, map 2) and tally (.data.tally, map 1)."""
    insns = legacy.resolved_insns(legacy.program("legacy"))
    got = [(insns[k].imm, insns[k + 1].imm) for k, i in enumerate(insns) if i.code == 0x18 and i.src == 2]
    assert got == [(3, 4), (3, 0), (2, 0), (1, 0)]


def test_set_kconfig_fills_the_frozen_map(build_bpf):
    obj = BpfObject.open(build_bpf("test_legacy.bpf.c"))
    obj.set_kconfig("LINUX_KERNEL_VERSION", struct.pack("<I", 0x61200))
    m = obj.load_maps(KernelMemory(), 1)[3]
    assert (m.lookup_value(bytes(4)), m.frozen) == (struct.pack("<I", 0x61200) + b"\0", True)


@pytest.mark.parametrize(
    ("real_name", "name", "initial", "flags"),
    [
        (".data.tally", ".data.tally", struct.pack("<i", 5), BPF_F_MMAPABLE),
        (".rodata", "test_leg.rodata", b"key %u\0", BPF_F_RDONLY_PROG),
    ],
)
def test_custom_data_section_and_static_string_maps(legacy, real_name, name, initial, flags):
    """A ``.data.*`` map keeps its ELF name; a .rodata holding only a static string is not
    mmap()able (no global variable in it)."""
    d = legacy.map(real_name)
    assert (d.name, d.initial, d.flags) == (name, initial, flags)


# ----------------------------------------------------------------------------- BTF for the kernel


def test_func_info_follows_the_appended_subprograms(sections):
    """multi_exit's FUNC records: the program at 0, bump_twice and bump where they were
    appended (the kernel wants instruction indices, clang writes bytes)."""
    prog = sections.program("multi_exit")
    n_twice = len(next(t for t in sections._text if t.name == "bump_twice").insns)
    names = [sections.btf.type(tid).name for _, tid in prog.func_info]
    assert (prog.func_info[0][0], [i for i, _ in prog.func_info], names) == (
        0,
        [0, 2, 2 + n_twice],
        ["multi_exit", "bump_twice", "bump"],
    )


def test_line_info_stays_inside_the_program(sections):
    prog = sections.program("multi_exit")
    insns = [i for i, *_ in prog.line_info]
    assert insns == sorted(insns) and insns[0] == 0 and insns[-1] < len(prog.insns)


def test_btf_blob_has_the_datasec_sizes_filled_in(malloc_sizes):
    from kernel_model.bpf import btf as B

    btf = B.parse(malloc_sizes.btf_blob())
    got = {t.name: (t.size, [m.offset for m in t.members]) for t in btf.types if t.kind == B.BTF_KIND_DATASEC}
    assert got == {".bss": (4, [0]), ".maps": (48, [0, 32]), ".rodata": (4, [0]), "license": (4, [0])}


def test_btf_blob_turns_ksym_functions_into_a_dummy_variable(sections):
    from kernel_model.bpf import btf as B

    btf = B.parse(sections.btf_blob())
    sec = btf.find(".ksyms", B.BTF_KIND_DATASEC)
    var = btf.type(sec.members[0].type)
    func = btf.find("bpf_session_cookie", B.BTF_KIND_FUNC)
    assert (var.name, var.linkage, sec.size, func.linkage) == ("dummy_ksym", 1, 4, B.BTF_FUNC_GLOBAL)


def test_btf_blob_allocates_kconfig_variables_at_their_offsets(legacy):
    from kernel_model.bpf import btf as B

    btf = B.parse(legacy.btf_blob())
    sec = btf.find(".kconfig", B.BTF_KIND_DATASEC)
    got = sorted((btf.type(m.type).name, btf.type(m.type).linkage, m.offset) for m in sec.members)
    assert (sec.size, got) == (5, [("CONFIG_BPF_SYSCALL", 1, 4), ("LINUX_KERNEL_VERSION", 1, 0)])


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("bpffuzz")


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_corrupted_object_opens_or_raises_object_error(build_bpf, fuzz_dir, data):
    """Truncated or byte-flipped objects: one ObjectError, never another exception."""
    raw = bytearray(Path(build_bpf("test_sections.bpf.c")).read_bytes())
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    else:
        for _ in range(data.draw(st.integers(1, 4))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    p = fuzz_dir / "f.o"
    p.write_bytes(bytes(raw))
    try:
        BpfObject.open(p)
    except ObjectError as e:
        assert "\n" not in str(e)
