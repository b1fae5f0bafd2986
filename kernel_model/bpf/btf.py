"""BPF Type Format as ``include/uapi/linux/btf.h`` defines it: a header, a type section of
``struct btf_type`` records (each kind followed by its own trailer) and a string section.

:func:`parse` reads a blob (the ``.BTF`` section of an object, or what ``BPF_BTF_LOAD``
receives) into a :class:`Btf`, checking what ``btf_parse_hdr``/``btf_check_all_metas``
check so that a malformed blob is one :class:`BtfError`, never an exception from deep
inside.  The resolve functions follow libbpf's ``btf__resolve_type``/``btf__resolve_size``,
and :func:`format_map_dump` prints elements as ``bpftool map dump`` prints a map that has
BTF (``btf_dumper.c`` in plain-text mode through ``json_writer.c``'s pretty printer).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kernel_model.bpf.bpf_types import PERCPU_MAP_TYPES, BpfMap
from kernel_model.errors import EmuError

BTF_MAGIC = 0xEB9F
BTF_VERSION = 1
BTF_HDR_SIZE = 24
# enum btf_kind
(
    BTF_KIND_UNKN,
    BTF_KIND_INT,
    BTF_KIND_PTR,
    BTF_KIND_ARRAY,
    BTF_KIND_STRUCT,
    BTF_KIND_UNION,
    BTF_KIND_ENUM,
    BTF_KIND_FWD,
    BTF_KIND_TYPEDEF,
    BTF_KIND_VOLATILE,
    BTF_KIND_CONST,
    BTF_KIND_RESTRICT,
    BTF_KIND_FUNC,
    BTF_KIND_FUNC_PROTO,
    BTF_KIND_VAR,
    BTF_KIND_DATASEC,
    BTF_KIND_FLOAT,
    BTF_KIND_DECL_TAG,
    BTF_KIND_TYPE_TAG,
    BTF_KIND_ENUM64,
) = range(20)
KIND_NAMES = (
    "UNKN",
    "INT",
    "PTR",
    "ARRAY",
    "STRUCT",
    "UNION",
    "ENUM",
    "FWD",
    "TYPEDEF",
    "VOLATILE",
    "CONST",
    "RESTRICT",
    "FUNC",
    "FUNC_PROTO",
    "VAR",
    "DATASEC",
    "FLOAT",
    "DECL_TAG",
    "TYPE_TAG",
    "ENUM64",
)
# INT encoding bits
BTF_INT_SIGNED, BTF_INT_CHAR, BTF_INT_BOOL = 1, 2, 4
# VAR / FUNC linkage
BTF_VAR_STATIC, BTF_VAR_GLOBAL_ALLOCATED, BTF_VAR_GLOBAL_EXTERN = 0, 1, 2
BTF_FUNC_STATIC, BTF_FUNC_GLOBAL, BTF_FUNC_EXTERN = 0, 1, 2
MAX_RESOLVE_DEPTH = 32
_MODIFIERS = (BTF_KIND_VOLATILE, BTF_KIND_CONST, BTF_KIND_RESTRICT, BTF_KIND_TYPE_TAG)
_SKIPPED = (BTF_KIND_TYPEDEF, *_MODIFIERS)
_HDR = struct.Struct("<HBBIIIII")


class BtfError(EmuError):
    """A BTF blob that does not parse, or a type that does not resolve."""


@dataclass
class Member:
    """A struct/union member, an enum value, a function parameter or a DATASEC entry
    (``type`` and ``offset``/``size``, as ``struct btf_var_secinfo``)."""

    name: str
    type: int = 0
    offset: int = 0  # bit offset of a member, byte offset of a secinfo
    bitfield_size: int = 0
    value: int = 0  # enum values
    size: int = 0  # secinfo size
    name_off: int = 0  # the name's offset in the string section


@dataclass
class BtfType:
    """One ``struct btf_type`` with its trailer decoded."""

    id: int
    kind: int
    name: str
    kind_flag: bool = False
    size: int = 0  # INT, ENUM, ENUM64, STRUCT, UNION, DATASEC, FLOAT
    type: int = 0  # PTR, TYPEDEF, modifiers, FUNC, FUNC_PROTO (return), VAR, DECL_TAG, TYPE_TAG
    members: list[Member] = field(default_factory=list)
    # INT
    encoding: int = 0
    bit_offset: int = 0
    bits: int = 0
    # ARRAY
    elem_type: int = 0
    index_type: int = 0
    nelems: int = 0
    # VAR / FUNC linkage, DECL_TAG component index
    linkage: int = 0
    component_idx: int = -1
    name_off: int = 0  # the name's offset in the string section

    @property
    def kind_name(self) -> str:
        return KIND_NAMES[self.kind]


_VOID = BtfType(0, BTF_KIND_UNKN, "")


class Btf:
    """Parsed BTF: ``types[id]`` (id 0 is void), the string section."""

    def __init__(self, types: list[BtfType], strings: bytes):
        self.types = types
        self.strings = strings

    def __len__(self) -> int:
        return len(self.types)

    def type(self, type_id: int) -> BtfType:
        if not 0 <= type_id < len(self.types):
            raise BtfError(f"BTF type id {type_id} out of range (the BTF has {len(self.types) - 1} types)")
        return self.types[type_id]

    def find(self, name: str, kind: int | None = None) -> BtfType | None:
        """The first type named ``name`` (of ``kind``), as ``btf__find_by_name_kind``."""
        for t in self.types[1:]:
            if t.name == name and (kind is None or t.kind == kind):
                return t
        return None

    def skip_mods_and_typedefs(self, type_id: int) -> BtfType:
        """The type under any typedefs and const/volatile/restrict/type tags."""
        t = self.type(type_id)
        for _ in range(MAX_RESOLVE_DEPTH):
            if t.kind not in _SKIPPED:
                return t
            t = self.type(t.type)
        raise BtfError(f"BTF type {type_id}: modifier chain too deep")

    def resolve_type(self, type_id: int) -> int:
        """``btf__resolve_type``: skip modifiers, typedefs and vars."""
        t = self.type(type_id)
        for _ in range(MAX_RESOLVE_DEPTH):
            if t.kind not in (*_SKIPPED, BTF_KIND_VAR):
                return t.id
            t = self.type(t.type)
        raise BtfError(f"BTF type {type_id}: modifier chain too deep")

    def resolve_size(self, type_id: int) -> int:
        """``btf__resolve_size``: a type's size in bytes (arrays multiplied out)."""
        nelems = 1
        t = self.type(type_id)
        for _ in range(MAX_RESOLVE_DEPTH):
            k = t.kind
            if k in (BTF_KIND_INT, BTF_KIND_STRUCT, BTF_KIND_UNION, BTF_KIND_ENUM, BTF_KIND_ENUM64):
                return nelems * t.size
            if k in (BTF_KIND_DATASEC, BTF_KIND_FLOAT):
                return nelems * t.size
            if k == BTF_KIND_PTR:
                return nelems * 8
            if k in (*_SKIPPED, BTF_KIND_VAR, BTF_KIND_DECL_TAG):
                t = self.type(t.type)
                continue
            if k == BTF_KIND_ARRAY:
                nelems *= t.nelems
                t = self.type(t.elem_type)
                continue
            raise BtfError(f"BTF type {type_id} ({t.kind_name} {t.name!r}) has no size")
        raise BtfError(f"BTF type {type_id}: type chain too deep")

    def member(self, type_id: int, name: str) -> Member:
        """A struct or union member by name (modifiers and typedefs skipped first)."""
        t = self.skip_mods_and_typedefs(type_id)
        if t.kind not in (BTF_KIND_STRUCT, BTF_KIND_UNION):
            raise BtfError(f"BTF type {type_id} is a {t.kind_name}, not a struct or union")
        for m in t.members:
            if m.name == name:
                return m
        raise BtfError(f"struct {t.name!r} has no member {name!r}")

    def align_of(self, type_id: int) -> int:
        """``btf__align_of``: an integer's own size up to 8, an array's element's, the
        largest of a struct's members'."""
        t = self.skip_mods_and_typedefs(type_id)
        if t.kind in (BTF_KIND_INT, BTF_KIND_ENUM, BTF_KIND_ENUM64, BTF_KIND_FLOAT):
            return max(1, min(t.size, 8))
        if t.kind == BTF_KIND_PTR:
            return 8
        if t.kind == BTF_KIND_ARRAY:
            return self.align_of(t.elem_type)
        if t.kind in (BTF_KIND_STRUCT, BTF_KIND_UNION):
            return max((self.align_of(m.type) for m in t.members), default=1)
        raise BtfError(f"BTF type {type_id} ({t.kind_name}) has no alignment")

    def add_string(self, text: str) -> int:
        """Append a string to the string section; its offset."""
        off = len(self.strings)
        self.strings += text.encode() + b"\0"
        return off

    def add_type(self, t: BtfType) -> int:
        """Append a type (its ``id`` is set); the new id."""
        t.id = len(self.types)
        self.types.append(t)
        return t.id

    def string(self, off: int) -> str:
        """The string at ``off`` in the string section ("" past its end)."""
        if not 0 <= off < len(self.strings):
            return ""
        end = self.strings.find(b"\0", off)
        return self.strings[off:end].decode("utf-8", "replace")

    def encode(self) -> bytes:
        """The blob again, with whatever the loader changed in the types (DATASEC sizes
        and offsets, as libbpf fixes them before ``BPF_BTF_LOAD``); the string section
        is kept as is, so offsets into it (line info) stay valid."""
        out = bytearray()
        for t in self.types[1:]:
            k = t.kind
            vlen = t.linkage if k == BTF_KIND_FUNC else len(t.members)
            info = (k << 24) | vlen | (1 << 31 if t.kind_flag else 0)
            sized = k in (BTF_KIND_INT, BTF_KIND_ENUM, BTF_KIND_ENUM64, BTF_KIND_STRUCT, BTF_KIND_UNION)
            size_type = t.size if sized or k in (BTF_KIND_DATASEC, BTF_KIND_FLOAT) else t.type
            out += struct.pack("<III", t.name_off, info, size_type)
            if k == BTF_KIND_INT:
                out += struct.pack("<I", (t.encoding << 24) | (t.bit_offset << 16) | t.bits)
            elif k == BTF_KIND_ARRAY:
                out += struct.pack("<III", t.elem_type, t.index_type, t.nelems)
            elif k in (BTF_KIND_STRUCT, BTF_KIND_UNION):
                for m in t.members:
                    off = (m.bitfield_size << 24) | m.offset if t.kind_flag else m.offset
                    out += struct.pack("<III", m.name_off, m.type, off)
            elif k == BTF_KIND_ENUM:
                for m in t.members:
                    out += struct.pack("<II", m.name_off, m.value & 0xFFFFFFFF)
            elif k == BTF_KIND_ENUM64:
                for m in t.members:
                    v = m.value & ((1 << 64) - 1)
                    out += struct.pack("<III", m.name_off, v & 0xFFFFFFFF, v >> 32)
            elif k == BTF_KIND_FUNC_PROTO:
                for m in t.members:
                    out += struct.pack("<II", m.name_off, m.type)
            elif k == BTF_KIND_VAR:
                out += struct.pack("<I", t.linkage)
            elif k == BTF_KIND_DATASEC:
                for m in t.members:
                    out += struct.pack("<III", m.type, m.offset, m.size)
            elif k == BTF_KIND_DECL_TAG:
                out += struct.pack("<i", t.component_idx)
        hdr = _HDR.pack(BTF_MAGIC, BTF_VERSION, 0, BTF_HDR_SIZE, 0, len(out), len(out), len(self.strings))
        return hdr + bytes(out) + self.strings

    def type_name(self, type_id: int) -> str:
        """A C-like spelling of the type (``unsigned int``, ``struct free_event *``, ``__u64``)."""
        t = self.type(type_id)
        if t.kind == BTF_KIND_UNKN:
            return "void"
        if t.kind in (BTF_KIND_STRUCT, BTF_KIND_UNION, BTF_KIND_ENUM, BTF_KIND_ENUM64, BTF_KIND_FWD):
            word = {BTF_KIND_STRUCT: "struct", BTF_KIND_UNION: "union", BTF_KIND_FWD: "struct"}.get(t.kind, "enum")
            if t.kind == BTF_KIND_FWD and t.kind_flag:
                word = "union"
            return f"{word} {t.name or '(anon)'}"
        if t.kind == BTF_KIND_PTR:
            return self.type_name(t.type) + " *"
        if t.kind in (BTF_KIND_CONST, BTF_KIND_VOLATILE, BTF_KIND_RESTRICT):
            return f"{KIND_NAMES[t.kind].lower()} {self.type_name(t.type)}"
        if t.kind == BTF_KIND_ARRAY:
            return f"{self.type_name(t.elem_type)}[{t.nelems}]"
        if t.kind == BTF_KIND_TYPE_TAG:
            return self.type_name(t.type)
        return t.name


def int_type_info(btf: Btf, type_id: int) -> tuple[int, bool] | None:
    """(size, signed) when ``type_id`` is an integer (or enum) of 1, 2, 4 or 8 bytes
    under its typedefs and modifiers, else None (0 and unknown ids included)."""
    if not 0 < type_id < len(btf.types):
        return None
    t = btf.skip_mods_and_typedefs(type_id)
    if t.kind == BTF_KIND_INT and t.bits == 8 * t.size and t.size in (1, 2, 4, 8) and not t.bit_offset:
        return t.size, bool(t.encoding & BTF_INT_SIGNED)
    if t.kind in (BTF_KIND_ENUM, BTF_KIND_ENUM64) and t.size in (1, 2, 4, 8):
        return t.size, not t.kind_flag
    return None


def _str(strings: bytes, off: int, what: str) -> str:
    if off >= len(strings):
        raise BtfError(f"BTF {what}: name offset {off} past the {len(strings)}-byte string section")
    end = strings.find(b"\0", off)
    return strings[off:end].decode("utf-8", "replace")


def parse(data: bytes) -> Btf:
    """Parse a BTF blob (native little-endian, as clang emits for the BPF target)."""
    data = bytes(data)
    if len(data) < BTF_HDR_SIZE:
        raise BtfError(f"BTF of {len(data)} bytes is shorter than its {BTF_HDR_SIZE}-byte header")
    magic, version, _flags, hdr_len, type_off, type_len, str_off, str_len = _HDR.unpack_from(data)
    if magic == 0x9FEB:
        raise BtfError("big-endian BTF is not supported")
    if magic != BTF_MAGIC:
        raise BtfError(f"bad BTF magic {magic:#06x} (expected {BTF_MAGIC:#06x})")
    if version != BTF_VERSION:
        raise BtfError(f"unsupported BTF version {version}")
    if hdr_len < BTF_HDR_SIZE or hdr_len > len(data):
        raise BtfError(f"BTF header length {hdr_len} does not fit the {len(data)}-byte blob")
    body = data[hdr_len:]
    if type_off % 4:
        raise BtfError(f"BTF type section offset {type_off} is not 4-byte aligned")
    if type_off + type_len > len(body) or str_off + str_len > len(body):
        raise BtfError(f"BTF sections (types {type_off}+{type_len}, strings {str_off}+{str_len}) past the end")
    if type_off < str_off < type_off + type_len or str_off < type_off < str_off + str_len:
        raise BtfError("BTF type and string sections overlap")
    strings = body[str_off : str_off + str_len]
    if not strings or strings[0] != 0 or strings[-1] != 0:
        raise BtfError("BTF string section must start and end with a NUL byte")
    types = [_VOID]
    tsec = body[type_off : type_off + type_len]
    pos = 0
    while pos < len(tsec):
        if pos + 12 > len(tsec):
            raise BtfError(f"BTF type {len(types)} truncated at offset {pos}")
        name_off, info, size_type = struct.unpack_from("<III", tsec, pos)
        pos += 12
        kind = (info >> 24) & 0x1F
        vlen = info & 0xFFFF
        kflag = bool(info >> 31)
        tid = len(types)
        if kind == BTF_KIND_UNKN or kind > BTF_KIND_ENUM64:
            raise BtfError(f"BTF type {tid}: unknown kind {kind}")
        t = BtfType(tid, kind, _str(strings, name_off, f"type {tid}"), kflag, name_off=name_off)
        need = {
            BTF_KIND_INT: 4,
            BTF_KIND_ARRAY: 12,
            BTF_KIND_STRUCT: 12 * vlen,
            BTF_KIND_UNION: 12 * vlen,
            BTF_KIND_ENUM: 8 * vlen,
            BTF_KIND_FUNC_PROTO: 8 * vlen,
            BTF_KIND_VAR: 4,
            BTF_KIND_DATASEC: 12 * vlen,
            BTF_KIND_DECL_TAG: 4,
            BTF_KIND_ENUM64: 12 * vlen,
        }.get(kind, 0)
        if pos + need > len(tsec):
            raise BtfError(f"BTF type {tid} ({KIND_NAMES[kind]}) truncated: needs {need} more bytes")
        if kind in (BTF_KIND_INT, BTF_KIND_ENUM, BTF_KIND_ENUM64, BTF_KIND_STRUCT, BTF_KIND_UNION):
            t.size = size_type
        elif kind in (BTF_KIND_DATASEC, BTF_KIND_FLOAT):
            t.size = size_type
        else:
            t.type = size_type
        if kind == BTF_KIND_INT:
            (v,) = struct.unpack_from("<I", tsec, pos)
            t.encoding, t.bit_offset, t.bits = (v >> 24) & 0x0F, (v >> 16) & 0xFF, v & 0xFF
            if t.bits > 128 or t.bit_offset + t.bits > 8 * t.size:
                raise BtfError(f"BTF type {tid}: INT of {t.bits} bits at {t.bit_offset} in {t.size} bytes")
        elif kind == BTF_KIND_ARRAY:
            t.elem_type, t.index_type, t.nelems = struct.unpack_from("<III", tsec, pos)
        elif kind in (BTF_KIND_STRUCT, BTF_KIND_UNION):
            for i in range(vlen):
                mn, mt, moff = struct.unpack_from("<III", tsec, pos + 12 * i)
                m = Member(_str(strings, mn, f"type {tid} member {i}"), mt, moff, name_off=mn)
                if kflag:
                    m.bitfield_size, m.offset = moff >> 24, moff & 0xFFFFFF
                t.members.append(m)
        elif kind == BTF_KIND_ENUM:
            for i in range(vlen):
                mn, val = struct.unpack_from("<Ii", tsec, pos + 8 * i)
                value = val if not kflag else val & 0xFFFFFFFF
                t.members.append(Member(_str(strings, mn, f"type {tid} value {i}"), value=value, name_off=mn))
        elif kind == BTF_KIND_ENUM64:
            for i in range(vlen):
                mn, lo, hi = struct.unpack_from("<III", tsec, pos + 12 * i)
                value = (hi << 32) | lo
                if not kflag and value >> 63:
                    value -= 1 << 64
                t.members.append(Member(_str(strings, mn, f"type {tid} value {i}"), value=value, name_off=mn))
        elif kind == BTF_KIND_FUNC_PROTO:
            for i in range(vlen):
                mn, mt = struct.unpack_from("<II", tsec, pos + 8 * i)
                t.members.append(Member(_str(strings, mn, f"type {tid} param {i}"), mt, name_off=mn))
        elif kind == BTF_KIND_VAR:
            (t.linkage,) = struct.unpack_from("<I", tsec, pos)
        elif kind == BTF_KIND_DATASEC:
            for i in range(vlen):
                vt, voff, vsz = struct.unpack_from("<III", tsec, pos + 12 * i)
                t.members.append(Member("", vt, voff, size=vsz))
        elif kind == BTF_KIND_DECL_TAG:
            (t.component_idx,) = struct.unpack_from("<i", tsec, pos)
        elif kind == BTF_KIND_FUNC:
            t.linkage = vlen
        pos += need
        types.append(t)
    btf = Btf(types, strings)
    _check_refs(btf)
    return btf


def _check_refs(btf: Btf) -> None:
    """Every referenced type id exists (``btf_check_all_types``' first test)."""
    n = len(btf.types)

    def ref(tid: int, what: str, target: int) -> None:
        if target >= n:
            raise BtfError(f"BTF type {tid}: {what} refers to type {target}, the BTF has {n - 1} types")

    for t in btf.types[1:]:
        if t.kind in (BTF_KIND_PTR, BTF_KIND_TYPEDEF, BTF_KIND_FUNC, BTF_KIND_VAR, BTF_KIND_DECL_TAG, *_MODIFIERS):
            ref(t.id, KIND_NAMES[t.kind], t.type)
        elif t.kind == BTF_KIND_FUNC_PROTO:
            ref(t.id, "return type", t.type)
        elif t.kind == BTF_KIND_ARRAY:
            ref(t.id, "element", t.elem_type)
            ref(t.id, "index", t.index_type)
        if t.kind in (BTF_KIND_STRUCT, BTF_KIND_UNION, BTF_KIND_FUNC_PROTO, BTF_KIND_DATASEC):
            for m in t.members:
                ref(t.id, f"member {m.name!r}", m.type)


# ----------------------------------------------------------------------------- bpftool's dumper


class JsonWriter:
    """``json_writer.c`` with ``jsonw_pretty(true)``: 4-space indents, a comma before
    every item but the first of its level, no newline before an object that opens an
    array element."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.depth = 0
        self.sep = ""

    def _eol(self) -> None:
        self.out.append("\n" + "    " * self.depth)

    def _eor(self) -> None:
        if self.sep:
            self.out.append(self.sep)
        self.sep = ","

    def begin(self, c: str) -> None:
        self._eor()
        self.out.append(c)
        self.depth += 1
        self.sep = ""

    def end(self, c: str) -> None:
        self.depth -= 1
        if self.sep:
            self._eol()
        self.out.append(c)
        self.sep = ","

    def name(self, name: str) -> None:
        self._eor()
        self._eol()
        self.sep = ""
        self.out.append(_quote(name) + ": ")

    def raw(self, text: str) -> None:
        """``jsonw_printf``."""
        self._eor()
        self.out.append(text)

    def string(self, text: str) -> None:
        self._eor()
        self.out.append(_quote(text))

    def destroy(self) -> str:
        """``jsonw_destroy``: the final newline."""
        return "".join(self.out) + "\n"


_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f", "\b": "\\b", "\\": "\\\\", '"': '\\"'}


def _quote(text: str) -> str:
    return '"' + "".join(_ESCAPES.get(c, c) for c in text) + '"'


def _c_isprint(b: int) -> bool:
    return 0x20 <= b <= 0x7E


class _Dumper:
    """``btf_dumper.c`` with ``is_plain_text`` set, as ``bpftool map dump`` uses it."""

    def __init__(self, btf: Btf, jw: JsonWriter):
        self.btf, self.jw = btf, jw
        self.depth = 0

    def do_type(self, type_id: int, bit_offset: int, data: bytes) -> int:
        self.depth += 1
        try:
            if self.depth > MAX_RESOLVE_DEPTH:
                raise BtfError(f"BTF type {type_id} nests deeper than {MAX_RESOLVE_DEPTH} levels")
            return self._do_type(type_id, bit_offset, data)
        finally:
            self.depth -= 1

    def _do_type(self, type_id: int, bit_offset: int, data: bytes) -> int:
        t = self.btf.type(type_id)
        k = t.kind
        if k == BTF_KIND_INT:
            return self.int_(t, bit_offset, data)
        if k in (BTF_KIND_STRUCT, BTF_KIND_UNION):
            return self.struct_(t, data)
        if k == BTF_KIND_ARRAY:
            return self.array(t, data)
        if k == BTF_KIND_ENUM:
            value = int.from_bytes(data[: t.size], "little", signed=True) if t.size in (1, 2, 4, 8) else None
            if value is None:
                return -22
            for m in t.members:
                val = m.value & 0xFFFFFFFF  # struct btf_enum.val is an s32
                if (val - (1 << 32) if val >> 31 else val) == value:
                    self.jw.string(m.name)
                    return 0
            self.jw.raw(str(value))
            return 0
        if k == BTF_KIND_ENUM64:
            value = int.from_bytes(data[:8], "little")
            for m in t.members:
                if m.value & ((1 << 64) - 1) == value:
                    self.jw.string(m.name)
                    return 0
            self.jw.raw(str(value - (1 << 64) if value >> 63 else value))
            return 0
        if k == BTF_KIND_PTR:
            value = int.from_bytes(data[:8], "little")
            self.jw.raw('"(nil)"' if value == 0 else f'"{value:#x}"')
            return 0
        if k == BTF_KIND_UNKN:
            self.jw.raw("(unknown)")
            return 0
        if k == BTF_KIND_FWD:
            self.jw.raw("(fwd-kind-invalid)")
            return -22
        if k in (BTF_KIND_TYPEDEF, BTF_KIND_VOLATILE, BTF_KIND_CONST, BTF_KIND_RESTRICT):
            return self.do_type(self.btf.resolve_type(type_id), bit_offset, data)
        if k == BTF_KIND_VAR:
            self.jw.begin("{")
            self.jw.name(t.name)
            ret = self.do_type(t.type, bit_offset, data)
            self.jw.end("}")
            return ret
        if k == BTF_KIND_DATASEC:
            self.jw.begin("{")
            self.jw.name(t.name)
            self.jw.begin("[")
            ret = 0
            for m in t.members:
                ret = self.do_type(m.type, 0, data[m.offset :])
                if ret:
                    break
            self.jw.end("]")
            self.jw.end("}")
            return ret
        self.jw.raw("(unsupported-kind)")
        return -22

    def bitfield(self, nr_bits: int, bit_offset: int, data: bytes) -> None:
        nbytes = (bit_offset + nr_bits + 7) // 8
        value = (int.from_bytes(data[:nbytes], "little") >> bit_offset) & ((1 << nr_bits) - 1)
        self.jw.raw(f"{value:#x}")

    def int_(self, t: BtfType, bit_offset: int, data: bytes) -> int:
        bits = t.bits
        if bit_offset or t.bit_offset or bits % 8:
            total = bit_offset + t.bit_offset
            self.bitfield(bits, total % 8, data[total // 8 :])
            return 0
        if bits == 128:
            value = int.from_bytes(data[:16], "little")
            self.jw.raw(f"{value:#x}")
            return 0
        nbytes = bits // 8
        enc = t.encoding
        if enc in (0, BTF_INT_SIGNED):
            if bits not in (8, 16, 32, 64):
                self.bitfield(bits, 0, data)
                return 0
            self.jw.raw(str(int.from_bytes(data[:nbytes], "little", signed=enc == BTF_INT_SIGNED)))
        elif enc == BTF_INT_CHAR:
            c = data[0]
            self.jw.raw(f'"{chr(c)}"' if _c_isprint(c) else f"{c:#x}")
        elif enc == BTF_INT_BOOL:
            self.jw.raw("true" if data[0] else "false")
        else:
            return -22
        return 0

    def struct_(self, t: BtfType, data: bytes) -> int:
        self.jw.begin("{")
        ret = 0
        for m in t.members:
            self.jw.name(m.name)
            sub = data[m.offset // 8 :]
            if m.bitfield_size:
                self.bitfield(m.bitfield_size, m.offset % 8, sub)
            else:
                ret = self.do_type(m.type, m.offset % 8, sub)
                if ret:
                    break
        self.jw.end("}")
        return ret

    def _is_str_array(self, t: BtfType, data: bytes) -> bool:
        if not t.nelems:
            return False
        elem = self.btf.type(t.elem_type)
        for _ in range(MAX_RESOLVE_DEPTH):
            if elem.kind not in _MODIFIERS:
                break
            elem = self.btf.type(elem.type)
        if elem.kind != BTF_KIND_INT or elem.size != 1:
            return False
        if elem.encoding != BTF_INT_CHAR and elem.name != "char":
            return False
        for b in data[: t.nelems]:
            if b == 0:
                return True
            if b <= 0x1F or b >= 0x7F:
                return False
        return False

    def array(self, t: BtfType, data: bytes) -> int:
        if self._is_str_array(t, data):
            self.jw.string(data[: data.index(0)].decode("latin-1"))
            return 0
        elem_size = self.btf.resolve_size(t.elem_type)
        # only the elements the value holds (a verified map's BTF always fits its value)
        count = min(t.nelems, len(data) // elem_size) if elem_size else min(t.nelems, 1)
        self.jw.begin("[")
        ret = 0
        for i in range(count):
            ret = self.do_type(t.elem_type, 0, data[i * elem_size :])
            if ret:
                break
        self.jw.end("]")
        return ret


def format_value(btf: Btf, type_id: int, data: bytes) -> str:
    """One value as ``btf_dumper_type`` prints it (pretty, at depth 0)."""
    jw = JsonWriter()
    _Dumper(btf, jw).do_type(type_id, 0, bytes(data))
    return "".join(jw.out)


def format_map_dump(
    btf: Btf,
    key_type_id: int,
    value_type_id: int,
    items: list[tuple[bytes, bytes]],
    percpu: bool = False,
    value_size: int = 0,
    nr_cpus: int = 1,
) -> str:
    """What ``bpftool map dump`` prints for a map with BTF: an array of ``{"key": ...,
    "value": ...}`` objects (no key for a map whose key type id is 0, such as global
    data; ``"values"`` with one ``{"cpu": N, "value": ...}`` per CPU for a per-CPU map,
    whose syscall value holds each CPU's copy rounded up to 8 bytes)."""
    jw = JsonWriter()
    d = _Dumper(btf, jw)
    jw.begin("[")
    for key, value in items:
        jw.begin("{")
        ret = 0
        if key_type_id:
            jw.name("key")
            ret = d.do_type(key_type_id, 0, bytes(key))
        if not ret:
            if not percpu:
                jw.name("value")
                d.do_type(value_type_id, 0, bytes(value))
            else:
                step = (value_size + 7) & ~7
                jw.name("values")
                jw.begin("[")
                for cpu in range(nr_cpus):
                    jw.begin("{")
                    jw.name("cpu")
                    jw.raw(str(cpu))
                    jw.name("value")
                    r = d.do_type(value_type_id, 0, bytes(value[cpu * step :]))
                    jw.end("}")
                    if r:
                        break
                jw.end("]")
        jw.end("}")
    jw.end("]")
    return jw.destroy()


def dump_map(bpf_map: BpfMap, btf: Btf) -> str:
    """``bpftool map dump`` of a created map with BTF: its elements in ``get_next_key``
    order, per-CPU maps with every CPU's value."""
    percpu = bpf_map.map_type in PERCPU_MAP_TYPES
    nr_cpus = int(getattr(bpf_map, "nr_cpus", 1))
    return format_map_dump(
        btf,
        bpf_map.btf_key_type_id,
        bpf_map.btf_value_type_id,
        bpf_map.items(),
        percpu,
        bpf_map.value_size,
        nr_cpus,
    )
