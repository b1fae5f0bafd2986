"""BTF: parsing clang's output and hand-made blobs of every kind, resolving types, the
``bpftool map dump`` text (checked against what bpftool printed for the same maps on
Linux 6.18), and one clear error for any malformed blob."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_model.bpf import btf as B
from kernel_model.bpf.object import BpfObject


class Builder:
    """Writes a BTF blob type by type, as clang/pahole lay it out."""

    def __init__(self) -> None:
        self.types = b""
        self.strings = b"\0"
        self.count = 0

    def s(self, name: str) -> int:
        if not name:
            return 0
        off = len(self.strings)
        self.strings += name.encode() + b"\0"
        return off

    def add(self, name: str, kind: int, vlen: int, size_type: int, extra: bytes = b"", kflag: bool = False) -> int:
        info = (kind << 24) | vlen | (1 << 31 if kflag else 0)
        self.types += struct.pack("<III", self.s(name), info, size_type) + extra
        self.count += 1
        return self.count

    def int_(self, name: str, size: int, encoding: int = 0, bits: int | None = None, offset: int = 0) -> int:
        bits = 8 * size if bits is None else bits
        return self.add(name, B.BTF_KIND_INT, 0, size, struct.pack("<I", (encoding << 24) | (offset << 16) | bits))

    def struct_(self, name: str, size: int, members, kflag: bool = False, union: bool = False) -> int:
        extra = b"".join(struct.pack("<III", self.s(n), t, off) for n, t, off in members)
        kind = B.BTF_KIND_UNION if union else B.BTF_KIND_STRUCT
        return self.add(name, kind, len(members), size, extra, kflag)

    def blob(self, hdr_len: int = 24) -> bytes:
        hdr = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, hdr_len, 0, len(self.types), len(self.types), len(self.strings))
        return hdr + bytes(hdr_len - 24) + self.types + self.strings


@pytest.fixture(scope="module")
def every_kind():
    """One type of each kind; returns (builder ids by name, parsed BTF)."""
    b = Builder()
    ids = {}
    ids["int"] = b.int_("int", 4, B.BTF_INT_SIGNED)
    ids["ptr"] = b.add("", B.BTF_KIND_PTR, 0, ids["int"])
    ids["array"] = b.add("", B.BTF_KIND_ARRAY, 0, 0, struct.pack("<III", ids["int"], ids["int"], 3))
    ids["struct"] = b.struct_("pair", 8, [("a", ids["int"], 0), ("b", ids["int"], 32)])
    ids["union"] = b.struct_("either", 4, [("x", ids["int"], 0)], union=True)
    ids["enum"] = b.add("color", B.BTF_KIND_ENUM, 2, 4, struct.pack("<IiIi", b.s("RED"), 0, b.s("BLUE"), -1))
    ids["fwd"] = b.add("later", B.BTF_KIND_FWD, 0, 0)
    ids["typedef"] = b.add("myint", B.BTF_KIND_TYPEDEF, 0, ids["int"])
    ids["volatile"] = b.add("", B.BTF_KIND_VOLATILE, 0, ids["typedef"])
    ids["const"] = b.add("", B.BTF_KIND_CONST, 0, ids["volatile"])
    ids["restrict"] = b.add("", B.BTF_KIND_RESTRICT, 0, ids["ptr"])
    ids["proto"] = b.add("", B.BTF_KIND_FUNC_PROTO, 1, ids["int"], struct.pack("<II", b.s("arg"), ids["ptr"]))
    ids["func"] = b.add("handler", B.BTF_KIND_FUNC, B.BTF_FUNC_GLOBAL, ids["proto"])
    ids["var"] = b.add("counter", B.BTF_KIND_VAR, 0, ids["const"], struct.pack("<I", 1))
    ids["datasec"] = b.add(".data", B.BTF_KIND_DATASEC, 1, 4, struct.pack("<III", ids["var"], 0, 4))
    ids["float"] = b.add("double", B.BTF_KIND_FLOAT, 0, 8)
    ids["decl_tag"] = b.add("tag", B.BTF_KIND_DECL_TAG, 0, ids["struct"], struct.pack("<i", 1))
    ids["type_tag"] = b.add("user", B.BTF_KIND_TYPE_TAG, 0, ids["int"])
    ids["enum64"] = b.add("big", B.BTF_KIND_ENUM64, 1, 8, struct.pack("<III", b.s("HUGE"), 0, 1))
    return ids, B.parse(b.blob())


@pytest.mark.parametrize(
    ("which", "kind", "name"),
    [
        ("int", B.BTF_KIND_INT, "int"),
        ("ptr", B.BTF_KIND_PTR, ""),
        ("array", B.BTF_KIND_ARRAY, ""),
        ("struct", B.BTF_KIND_STRUCT, "pair"),
        ("union", B.BTF_KIND_UNION, "either"),
        ("enum", B.BTF_KIND_ENUM, "color"),
        ("fwd", B.BTF_KIND_FWD, "later"),
        ("typedef", B.BTF_KIND_TYPEDEF, "myint"),
        ("volatile", B.BTF_KIND_VOLATILE, ""),
        ("const", B.BTF_KIND_CONST, ""),
        ("restrict", B.BTF_KIND_RESTRICT, ""),
        ("proto", B.BTF_KIND_FUNC_PROTO, ""),
        ("func", B.BTF_KIND_FUNC, "handler"),
        ("var", B.BTF_KIND_VAR, "counter"),
        ("datasec", B.BTF_KIND_DATASEC, ".data"),
        ("float", B.BTF_KIND_FLOAT, "double"),
        ("decl_tag", B.BTF_KIND_DECL_TAG, "tag"),
        ("type_tag", B.BTF_KIND_TYPE_TAG, "user"),
        ("enum64", B.BTF_KIND_ENUM64, "big"),
    ],
)
def test_every_kind_parses_with_its_name(every_kind, which, kind, name):
    ids, btf = every_kind
    t = btf.type(ids[which])
    assert (t.kind, t.name) == (kind, name)


@pytest.mark.parametrize(
    ("which", "fields"),
    [
        ("int", {"size": 4, "bits": 32, "encoding": B.BTF_INT_SIGNED}),
        ("array", {"nelems": 3}),
        ("enum", {"size": 4}),
        ("var", {"linkage": 1}),
        ("func", {"linkage": B.BTF_FUNC_GLOBAL}),
        ("decl_tag", {"component_idx": 1}),
        ("float", {"size": 8}),
    ],
)
def test_kind_trailers_are_decoded(every_kind, which, fields):
    ids, btf = every_kind
    t = btf.type(ids[which])
    assert {k: getattr(t, k) for k in fields} == fields


def test_enum_values_are_signed(every_kind):
    ids, btf = every_kind
    assert [(m.name, m.value) for m in btf.type(ids["enum"]).members] == [("RED", 0), ("BLUE", -1)]


def test_enum64_value_joins_both_halves(every_kind):
    ids, btf = every_kind
    assert btf.type(ids["enum64"]).members[0].value == 1 << 32


def test_datasec_entry_has_offset_and_size(every_kind):
    ids, btf = every_kind
    m = btf.type(ids["datasec"]).members[0]
    assert (m.type, m.offset, m.size) == (ids["var"], 0, 4)


@pytest.mark.parametrize(
    ("which", "size"), [("array", 12), ("const", 4), ("ptr", 8), ("struct", 8), ("var", 4), ("enum64", 8)]
)
def test_resolve_size(every_kind, which, size):
    ids, btf = every_kind
    assert btf.resolve_size(ids[which]) == size


@pytest.mark.parametrize("which", ["func", "proto", "fwd"])
def test_resolve_size_of_a_sizeless_type_is_a_btf_error(every_kind, which):
    ids, btf = every_kind
    with pytest.raises(B.BtfError):
        btf.resolve_size(ids[which])


def test_skip_mods_and_typedefs_reaches_the_int(every_kind):
    ids, btf = every_kind
    assert btf.skip_mods_and_typedefs(ids["const"]).id == ids["int"]


def test_member_lookup_gives_the_bit_offset(every_kind):
    ids, btf = every_kind
    assert btf.member(ids["struct"], "b").offset == 32


def test_member_lookup_of_a_missing_member_is_a_btf_error(every_kind):
    ids, btf = every_kind
    with pytest.raises(B.BtfError, match="no member 'c'"):
        btf.member(ids["struct"], "c")


def test_type_name_spells_modifiers_in_c(every_kind):
    ids, btf = every_kind
    assert btf.type_name(ids["const"]) == "const volatile myint"


# ----------------------------------------------------------------------------- clang's BTF


@pytest.fixture(scope="module")
def malloc_obj(build_bpf):
    return BpfObject.open(build_bpf("malloc_sizes.bpf.c"))


@pytest.mark.parametrize(("which", "name", "size"), [("key", "__u32", 4), ("value", "__u64", 8)])
def test_sizes_map_btf_types(malloc_obj, which, name, size):
    d = malloc_obj.map("sizes")
    tid = d.btf_key_type_id if which == "key" else d.btf_value_type_id
    btf = malloc_obj.btf
    assert (btf.type(tid).name, btf.resolve_size(tid)) == (name, size)


def test_rodata_datasec_holds_target_tgid(malloc_obj):
    btf = malloc_obj.btf
    sec = btf.find(".rodata", B.BTF_KIND_DATASEC)
    entries = [(btf.type(m.type).name, m.offset, m.size) for m in sec.members]
    assert entries == [("target_tgid", 0, 4)]


def test_map_definition_struct_members(malloc_obj):
    """``__uint``/``__type`` members of the ``sizes`` definition, in declaration order."""
    btf = malloc_obj.btf
    var = btf.find("sizes", B.BTF_KIND_VAR)
    t = btf.skip_mods_and_typedefs(var.type)
    assert [(m.name, m.offset) for m in t.members] == [("type", 0), ("max_entries", 64), ("key", 128), ("value", 192)]


# ----------------------------------------------------------------------------- bpftool's dump


@pytest.fixture(scope="module")
def dump_btf():
    b = Builder()
    ids = {}
    ids["u32"] = b.int_("unsigned int", 4)
    ids["s64"] = b.int_("long long", 8, B.BTF_INT_SIGNED)
    ids["char"] = b.int_("char", 1, B.BTF_INT_SIGNED)
    ids["bool"] = b.int_("_Bool", 1, B.BTF_INT_BOOL)
    ids["comm"] = b.add("", B.BTF_KIND_ARRAY, 0, 0, struct.pack("<III", ids["char"], ids["u32"], 4))
    ids["pvoid"] = b.add("", B.BTF_KIND_PTR, 0, 0)
    ids["state"] = b.add("state", B.BTF_KIND_ENUM, 1, 4, struct.pack("<Ii", b.s("RUNNING"), 2))
    ids["ev"] = b.struct_(
        "ev",
        32,
        [
            ("pid", ids["u32"], 0),
            ("flag", ids["u32"], (3 << 24) | 36),
            ("delta", ids["s64"], 64),
            ("comm", ids["comm"], 128),
            ("on", ids["bool"], 160),
            ("st", ids["state"], 168 + 24),
        ],
        kflag=True,
    )
    ids["ptrs"] = b.struct_("ptrs", 16, [("p", ids["pvoid"], 0), ("q", ids["pvoid"], 64)])
    ids["var"] = b.add("target_tgid", B.BTF_KIND_VAR, 0, ids["u32"], struct.pack("<I", 1))
    ids["rodata"] = b.add(".rodata", B.BTF_KIND_DATASEC, 1, 4, struct.pack("<III", ids["var"], 0, 4))
    return ids, B.parse(b.blob())


def test_dump_of_plain_int_pairs(dump_btf):
    ids, btf = dump_btf
    out = B.format_map_dump(btf, ids["u32"], ids["u32"], [(struct.pack("<I", 3), struct.pack("<I", 1))])
    assert out == '[{\n        "key": 3,\n        "value": 1\n    }\n]\n'


def test_dump_separates_elements_with_a_comma_and_no_newline(dump_btf):
    ids, btf = dump_btf
    items = [(struct.pack("<I", k), struct.pack("<q", -k)) for k in (1, 2)]
    out = B.format_map_dump(btf, ids["u32"], ids["s64"], items)
    assert out == (
        '[{\n        "key": 1,\n        "value": -1\n    },{\n        "key": 2,\n        "value": -2\n    }\n]\n'
    )


def test_dump_of_an_empty_map(dump_btf):
    ids, btf = dump_btf
    assert B.format_map_dump(btf, ids["u32"], ids["u32"], []) == "[]\n"


def test_dump_of_a_struct_with_bitfield_string_bool_and_enum(dump_btf):
    ids, btf = dump_btf
    value = bytearray(32)
    struct.pack_into("<IIq", value, 0, 42, 0b101 << 4, -7)
    value[16:20] = b"sh\0\0"
    value[20] = 1
    struct.pack_into("<I", value, 24, 2)
    out = B.format_value(btf, ids["ev"], bytes(value))
    assert out == (
        '{\n    "pid": 42,\n    "flag": 0x5,\n    "delta": -7,\n    "comm": "sh",\n    "on": true,\n'
        '    "st": "RUNNING"\n}'
    )


def test_dump_of_pointers_uses_glibc_percent_p(dump_btf):
    ids, btf = dump_btf
    out = B.format_value(btf, ids["ptrs"], struct.pack("<QQ", 0, 0x7FFD1234))
    assert out == '{\n    "p": "(nil)",\n    "q": "0x7ffd1234"\n}'


def test_dump_of_a_char_array_without_nul_is_an_array_of_signed_bytes(dump_btf):
    """Not a string (no NUL): each clang ``char`` (a signed 1-byte int) printed as %hhd."""
    ids, btf = dump_btf
    assert B.format_value(btf, ids["comm"], b"ab\xffd") == "[97,98,-1,100\n]"


def test_dump_of_global_data_has_no_key(dump_btf):
    ids, btf = dump_btf
    out = B.format_map_dump(btf, 0, ids["rodata"], [(bytes(4), struct.pack("<I", 9))])
    assert out == (
        '[{\n        "value": {\n            ".rodata": [{\n                    "target_tgid": 9\n'
        "                }\n            ]\n        }\n    }\n]\n"
    )


def test_dump_of_a_percpu_map_lists_every_cpu(dump_btf):
    ids, btf = dump_btf
    value = struct.pack("<I", 5) + bytes(4) + struct.pack("<I", 6) + bytes(4)
    out = B.format_map_dump(btf, ids["u32"], ids["u32"], [(struct.pack("<I", 0), value)], True, 4, 2)
    assert out == (
        '[{\n        "key": 0,\n        "values": [{\n                "cpu": 0,\n                "value": 5\n'
        '            },{\n                "cpu": 1,\n                "value": 6\n            }\n        ]\n    }\n]\n'
    )


def test_int_type_info_of_a_signed_int(dump_btf):
    ids, btf = dump_btf
    assert B.int_type_info(btf, ids["s64"]) == (8, True)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b"\x00\x00" + b[2:], "bad BTF magic"),
        (lambda b: b[:2] + b"\x02" + b[3:], "unsupported BTF version 2"),
        (lambda b: b[:10], "shorter than its 24-byte header"),
        (lambda b: b[:-1], "past the end"),
        (lambda b: b[:-1] + b"x", "NUL"),
    ],
)
def test_malformed_blob_is_one_btf_error(every_kind, mutate, message):
    b = Builder()
    b.int_("int", 4)
    with pytest.raises(B.BtfError, match=message):
        B.parse(mutate(b.blob()))


def test_unknown_kind_is_a_btf_error():
    b = Builder()
    b.add("x", 25, 0, 0)
    with pytest.raises(B.BtfError, match="unknown kind 25"):
        B.parse(b.blob())


def test_reference_to_a_missing_type_is_a_btf_error():
    b = Builder()
    b.add("", B.BTF_KIND_PTR, 0, 9)
    with pytest.raises(B.BtfError, match="refers to type 9"):
        B.parse(b.blob())


def _valid_blob() -> bytes:
    b = Builder()
    i = b.int_("int", 4, B.BTF_INT_SIGNED)
    b.struct_("s", 8, [("a", i, 0), ("b", i, 32)])
    b.add("e", B.BTF_KIND_ENUM, 1, 4, struct.pack("<Ii", b.s("A"), 1))
    return b.blob()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_parse_or_raise_btf_error(data):
    try:
        B.parse(data)
    except B.BtfError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=len(_valid_blob()) - 1))
def test_every_truncation_is_a_btf_error(n):
    with pytest.raises(B.BtfError):
        B.parse(_valid_blob()[:n])


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=len(_valid_blob()) - 1), st.integers(min_value=0, max_value=255))
def test_any_corrupted_byte_parses_or_raises_btf_error(pos, byte):
    blob = bytearray(_valid_blob())
    blob[pos] = byte
    try:
        btf = B.parse(bytes(blob))
    except B.BtfError:
        return
    for t in btf.types[1:]:
        try:
            btf.resolve_size(t.id)
        except B.BtfError:
            pass


def test_dump_map_of_a_created_percpu_map(dump_btf):
    from kernel_model.bpf.bpf_types import BPF_MAP_TYPE_PERCPU_ARRAY
    from kernel_model.bpf.maps import create_map
    from kernel_model.bpf.memory import KernelMemory

    ids, btf = dump_btf
    m = create_map(KernelMemory(), BPF_MAP_TYPE_PERCPU_ARRAY, 4, 4, 1, 0, "pc", 2)
    m.btf_key_type_id = m.btf_value_type_id = ids["u32"]
    m.update_elem(struct.pack("<I", 0), struct.pack("<I", 3), 0, cpu=1)
    assert B.dump_map(m, btf) == (
        '[{\n        "key": 0,\n        "values": [{\n                "cpu": 0,\n                "value": 0\n'
        '            },{\n                "cpu": 1,\n                "value": 3\n            }\n        ]\n    }\n]\n'
    )


def test_dump_of_a_self_containing_struct_is_a_btf_error():
    """A struct holding itself by value (which the kernel's BTF checks reject) ends in
    one BtfError, not a recursion error."""
    b = Builder()
    b.struct_("loop", 4, [("again", 1, 0)])
    with pytest.raises(B.BtfError, match="nests deeper"):
        B.format_value(B.parse(b.blob()), 1, bytes(4))


def test_encode_gives_clangs_blob_back(build_bpf):
    from elftools.elf.elffile import ELFFile

    with open(build_bpf("test_sections.bpf.c"), "rb") as f:
        raw = ELFFile(f).get_section_by_name(".BTF").data()
    assert B.parse(raw).encode() == raw


def test_encode_of_every_kind_parses_back_the_same(every_kind):
    _, btf = every_kind
    again = B.parse(btf.encode())
    assert again.types == btf.types


@pytest.mark.parametrize(("which", "align"), [("int", 4), ("array", 4), ("struct", 4), ("ptr", 8), ("const", 4)])
def test_align_of(every_kind, which, align):
    ids, btf = every_kind
    assert btf.align_of(ids[which]) == align


# ----------------------------------------------------------------------------- bpftool itself

# What bpftool (built from libbpf/bpftool) printed for these maps on Linux 6.18, created
# with the object's BTF (zero-seed hash maps, 2 CPUs) and filled as _fill_dump_maps does.
BPFTOOL_STRUCTS = (
    "[{\n"
    '        "key": 2,\n'
    '        "value": {\n'
    '            "s": -7,\n'
    '            "flag": 0x5,\n'
    '            "more": 0x11,\n'
    '            "delta": -123456789,\n'
    '            "comm": [97,98,99,100,101,102\n'
    "            ],\n"
    '            "on": true,\n'
    '            "c": "BLUE",\n'
    '            "ptr": "(nil)",\n'
    '            "raw": [1,200,3\n'
    "            ],\n"
    '            "arr": [-1,2\n'
    "            ],\n"
    '            "u": {\n'
    '                "i": 65,\n'
    '                "ch": 65\n'
    "            }\n"
    "        }\n"
    "    },{\n"
    '        "key": 1,\n'
    '        "value": {\n'
    '            "s": -7,\n'
    '            "flag": 0x5,\n'
    '            "more": 0x11,\n'
    '            "delta": -123456789,\n'
    '            "comm": "sh",\n'
    '            "on": true,\n'
    '            "c": "BLUE",\n'
    '            "ptr": "0x7ffd1234",\n'
    '            "raw": [1,200,3\n'
    "            ],\n"
    '            "arr": [-1,2\n'
    "            ],\n"
    '            "u": {\n'
    '                "i": 65,\n'
    '                "ch": 65\n'
    "            }\n"
    "        }\n"
    "    }\n"
    "]\n"
)
BPFTOOL_PERCPU = (
    "[{\n"
    '        "key": 0,\n'
    '        "values": [{\n'
    '                "cpu": 0,\n'
    '                "value": 0\n'
    "            },{\n"
    '                "cpu": 1,\n'
    '                "value": 0\n'
    "            }\n"
    "        ]\n"
    "    },{\n"
    '        "key": 1,\n'
    '        "values": [{\n'
    '                "cpu": 0,\n'
    '                "value": 10\n'
    "            },{\n"
    '                "cpu": 1,\n'
    '                "value": 11\n'
    "            }\n"
    "        ]\n"
    "    }\n"
    "]\n"
)
BPFTOOL_CHARS = '[{\n        "key": 6,\n        "value": 7\n    },{\n        "key": 5,\n        "value": 65\n    }\n]\n'
BPFTOOL_RODATA = (
    "[{\n"
    '        "value": {\n'
    '            ".rodata": [{\n'
    '                    "knob": -5\n'
    "                }\n"
    "            ]\n"
    "        }\n"
    "    }\n"
    "]\n"
)
BPFTOOL_DATA = (
    "[{\n"
    '        "value": {\n'
    '            ".data": [{\n'
    '                    "counter": 3\n'
    "                }\n"
    "            ]\n"
    "        }\n"
    "    }\n"
    "]\n"
)


@pytest.fixture(scope="module")
def dump_maps(build_bpf):
    from kernel_model.bpf.memory import KernelMemory

    obj = BpfObject.open(build_bpf("test_dump.bpf.c"))
    maps = obj.load_maps(KernelMemory(), 2)
    m = {d.real_name: km for d, km in zip(obj.maps, maps)}
    btf = obj.btf
    members = {x.name: x.offset // 8 for x in btf.find("val", B.BTF_KIND_STRUCT).members}
    v = bytearray(obj.map("structs").value_size)
    struct.pack_into("<i", v, members["s"], -7)
    struct.pack_into("<I", v, 4, 5 | (17 << 3))  # flag:3 = 5, more:5 = 17
    struct.pack_into("<q", v, members["delta"], -123456789)
    v[members["comm"] : members["comm"] + 3] = b"sh\0"
    v[members["on"]] = 1
    struct.pack_into("<i", v, members["c"], -3)
    struct.pack_into("<Q", v, members["ptr"], 0x7FFD1234)
    v[members["raw"] : members["raw"] + 3] = bytes([1, 200, 3])
    struct.pack_into("<hh", v, members["arr"], -1, 2)
    struct.pack_into("<i", v, members["u"], 0x41)
    v2 = bytearray(v)
    v2[members["comm"] : members["comm"] + 6] = b"abcdef"
    struct.pack_into("<Q", v2, members["ptr"], 0)
    m["structs"].update_value(struct.pack("<I", 1), bytes(v))
    m["structs"].update_value(struct.pack("<I", 2), bytes(v2))
    m["pc"].update_value(struct.pack("<I", 1), struct.pack("<QQ", 10, 11))
    m["chars"].update_value(struct.pack("<Q", 5), b"A")
    m["chars"].update_value(struct.pack("<Q", 6), b"\x07")
    return btf, m


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("structs", BPFTOOL_STRUCTS),
        ("pc", BPFTOOL_PERCPU),
        ("chars", BPFTOOL_CHARS),
        (".rodata", BPFTOOL_RODATA),
        (".data", BPFTOOL_DATA),
    ],
)
def test_dump_is_what_bpftool_prints(dump_maps, name, expected):
    btf, maps = dump_maps
    assert B.dump_map(maps[name], btf) == expected
