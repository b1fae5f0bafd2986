"""A clang-built ``.bpf.o`` opened as libbpf's ``bpf_object__open`` opens it
(``tools/lib/bpf/libbpf.c``), and its maps created in a :class:`KernelMemory`.

Opening reads the ELF relocatable object (``EM_BPF``): programs from the executable
sections, one per function symbol, typed by the section name's ``SEC()`` definition
(:func:`~kernel_model.bpf.libbpf_sections.parse_section`); ``.text`` functions are
subprograms, appended after each program that calls them, in the order
``bpf_object__reloc_code`` appends them, with the call offsets fixed; relocations are
recorded as libbpf records them (``bpf_program__record_reloc``, :mod:`kernel_model.bpf.relocs`);
maps come from the ``.maps`` DATASEC (BTF-defined), the legacy ``maps`` section, and the
internal arrays libbpf makes of ``.data``/``.rodata``/``.bss`` (and ``.kconfig`` externs).

What the verifier receives from :meth:`BpfObject.resolved_insns`: the program's
instructions with each map reference turned into what libbpf passes to ``BPF_PROG_LOAD``:

- ``lddw`` of a map: ``src_reg = BPF_PSEUDO_MAP_FD``, ``imm = fd`` (second slot imm 0);
- ``lddw`` of global data: ``src_reg = BPF_PSEUDO_MAP_VALUE``, ``imm = fd``, the second
  slot's ``imm`` the offset into the map's value (symbol value + the instruction's addend);
- a call of a kfunc: ``src_reg = BPF_PSEUDO_KFUNC_CALL`` with ``imm`` the id
  :meth:`BpfObject.kfunc_ids` gives the name (the loader's table of kfunc BTF ids);

where ``fd`` is the index of the map in the list :meth:`BpfObject.load_maps` returned, so
``map_by_fd(maps)`` (``maps[fd]``, None when out of range) resolves it;
:meth:`BpfObject.bpf_prog` wraps the result in the ``BpfProg`` the verifier takes.

``.BTF.ext`` func and line info follow the code into each program (:attr:`BpfProgram.func_info`,
``line_info``) and :meth:`BpfObject.btf_blob` is the BTF with libbpf's DATASEC fixups, so a
program can be loaded with its BTF.  Not modelled: CO-RE relocations (they need the kernel's
BTF), struct_ops and arena maps, typed ``__ksym`` variables.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernel_model.bpf import btf as btf_mod
from kernel_model.bpf.bpf_map import BPF_F_MMAPABLE, BPF_F_RDONLY_PROG
from kernel_model.bpf.bpf_types import (
    BPF_MAP_TYPE_ARRAY,
    BPF_MAP_TYPE_PERF_EVENT_ARRAY,
    BPF_MAP_TYPE_RINGBUF,
    BPF_PROG_TYPE_KPROBE,
    BpfMap,
    BpfProg,
)
from kernel_model.bpf.insn import (
    BPF_PSEUDO_CALL,
    BPF_PSEUDO_FUNC,
    Insn,
    decode,
)
from kernel_model.bpf.libbpf_sections import AttachSpec, SecDef, parse_section
from kernel_model.bpf.maps import MODEL_MAP_MEMORY_LIMIT, MapError, create_map
from kernel_model.bpf.relocs import CALL, LDDW, Reloc, Sym, record_reloc, resolve_insns
from kernel_model.errors import InputError, printable

if TYPE_CHECKING:
    from kernel_model.bpf.memory import KernelMemory

EM_BPF = 247
BPF_OBJ_NAME_LEN = 16
PAGE_SIZE = 4096
SHF_EXECINSTR = 0x4


class ObjectError(InputError):
    """A BPF object that cannot be opened or loaded, named in the message."""


# ----------------------------------------------------------------------------- the object


@dataclass(eq=False)
class BpfProgram:
    """A program as opened: its instructions with map references unresolved, where it
    came from, its type and attach spec."""

    name: str
    section: str
    insns: list[Insn]
    prog_type: int = BPF_PROG_TYPE_KPROBE
    expected_attach_type: int = 0
    attach: AttachSpec = field(default_factory=lambda: AttachSpec("subprog"))  # .text functions: "subprog"
    license: str = ""
    kern_version: int = 0
    relocs: list[Reloc] = field(default_factory=list)
    subprogs: list[str] = field(default_factory=list)  # appended .text functions, in order
    # .BTF.ext records moved with the code as libbpf moves them: (instruction, FUNC type id)
    # and (instruction, file name offset, line offset, line << 10 | column)
    func_info: list[tuple[int, int]] = field(default_factory=list)
    line_info: list[tuple[int, int, int, int]] = field(default_factory=list)
    # where it sits in its ELF section (instruction indices)
    sec_insn_off: int = 0
    sec_insn_cnt: int = 0

    @property
    def sleepable(self) -> bool:
        return self.attach.sleepable

    @property
    def spec(self) -> AttachSpec:
        """The attach spec (``attach``)."""
        return self.attach


@dataclass
class MapDef:
    """A map as the object declares it (``struct bpf_map_def`` plus what libbpf keeps)."""

    name: str  # the name given to the kernel (internal maps: "<obj prefix>.rodata")
    type: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int = 0
    initial: bytes | None = None
    btf_key_type_id: int = 0
    btf_value_type_id: int = 0
    real_name: str = ""  # the ELF name: the variable, or the section (".rodata")
    internal: str = ""  # "data", "rodata", "bss", "kconfig" for internal maps
    sec_idx: int = 0
    sec_offset: int = 0
    numa_node: int = 0
    pinning: int = 0
    map_extra: int = 0

    @property
    def map_type(self) -> int:
        return self.type

    @property
    def map_flags(self) -> int:
        return self.flags

    @property
    def section(self) -> str:
        """The ELF section an internal map holds (``.rodata``...), "" for other maps."""
        return self.real_name if self.internal else ""

    @property
    def frozen(self) -> bool:
        """Whether libbpf freezes the map after filling it (``.rodata``, ``.kconfig``)."""
        return self.internal in ("rodata", "kconfig")


def map_by_fd(maps: list[BpfMap]) -> Callable[[int], BpfMap | None]:
    """The ``map_by_fd`` the verifier uses with :meth:`BpfObject.resolved_insns`."""

    def lookup(fd: int) -> BpfMap | None:
        return maps[fd] if 0 <= fd < len(maps) else None

    return lookup


class BpfObject:
    """An opened BPF object: ``programs`` (the entry points, .text subprograms folded
    in), ``maps`` (:class:`MapDef` in libbpf's order: BTF-defined, then global data in
    section order, then ``.kconfig``), ``btf`` (None if the object has none), ``license``."""

    def __init__(self, path: str, name: str):
        self.path = path
        self.name = name
        self.programs: list[BpfProgram] = []
        self.maps: list[MapDef] = []
        self.btf: btf_mod.Btf | None = None
        self.license = ""
        self.kern_version = 0
        self.kconfig: list[tuple[str, int, int]] = []  # (name, offset, size) in the .kconfig map

    def _err(self, message: str) -> ObjectError:
        return ObjectError(f"{printable(self.path)}: {message}")

    # -- opening ------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> BpfObject:
        """``bpf_object__open``: raises :class:`ObjectError` naming the file."""
        path = os.fspath(path)
        base = os.path.basename(path)
        obj = cls(path, base.split(".", 1)[0][: BPF_OBJ_NAME_LEN - 1] if base else base)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise obj._err(e.strerror or "cannot read") from None
        from elftools.common.exceptions import ELFError
        from elftools.construct import ConstructError
        from elftools.elf.elffile import ELFFile

        if data[:4] != b"\x7fELF":
            raise obj._err("not an ELF file")
        try:
            elf = ELFFile(io.BytesIO(data))
            obj._load(elf, len(data))
        except ObjectError:
            raise
        except btf_mod.BtfError as e:
            raise obj._err(f"bad BTF: {e}") from None
        except (
            ELFError,
            ConstructError,
            struct.error,
            ValueError,
            KeyError,
            IndexError,
            AttributeError,
            OverflowError,
        ) as e:
            raise obj._err(f"malformed ELF: {e}") from None
        return obj

    def _load(self, elf: Any, file_size: int) -> None:
        hdr = elf.header
        if elf.elfclass != 64 or not elf.little_endian:
            raise self._err("not a 64-bit little-endian BPF object")
        machine = hdr["e_machine"]
        if hdr["e_type"] != "ET_REL" or machine not in ("EM_BPF", EM_BPF, "EM_NONE"):
            raise self._err(f"not a BPF object file (e_type {hdr['e_type']}, e_machine {machine}; EM_BPF=247 required)")
        sections = list(elf.iter_sections())
        for sec in sections:
            if sec["sh_type"] != "SHT_NOBITS" and sec["sh_offset"] + sec["sh_size"] > file_size:
                raise self._err(f"section '{printable(sec.name)}' runs past the end of the file")
        self._secs = sections
        symtab = next((s for s in sections if s["sh_type"] == "SHT_SYMTAB"), None)
        if symtab is None:
            raise self._err("no symbol table")
        syms: list[Sym] = []
        for i, s in enumerate(symtab.iter_symbols()):
            shndx = s["st_shndx"]
            idx = 0 if shndx == "SHN_UNDEF" else shndx if isinstance(shndx, int) else -1
            syms.append(Sym(s.name, s["st_value"], s["st_size"], s["st_info"]["type"], s["st_info"]["bind"], idx, i))
        self._syms = syms
        names = [s.name for s in sections]
        self._text_shndx = names.index(".text") if ".text" in names else 0
        btf_sec = next((s for s in sections if s.name == ".BTF"), None)
        if btf_sec is not None:
            try:
                self.btf = btf_mod.parse(btf_sec.data())
            except btf_mod.BtfError as e:
                raise self._err(f"bad .BTF: {e}") from None
        for s in sections:
            if s.name == "license":
                self.license = s.data().split(b"\0", 1)[0].decode("utf-8", "replace")
            elif s.name == "version":
                if s["sh_size"] != 4:
                    raise self._err(f"invalid kver section size {s['sh_size']}")
                self.kern_version = struct.unpack("<I", s.data())[0]
        self._fixup_datasecs()
        self._btf_ext = self._parse_btf_ext(next((s for s in sections if s.name == ".BTF.ext"), None))
        self._init_maps()
        self._init_externs()
        self._init_programs()
        if not self.programs:
            raise self._err("no BPF programs")
        self._relocate()

    # -- BTF fixups and maps ---------------------------------------------------------------
    def _fixup_datasecs(self) -> None:
        """``btf_fixup_datasec``: a DATASEC gets its ELF section's size and each variable
        its symbol's offset (clang leaves them for the loader)."""
        if self.btf is None:
            return
        by_name = {s.name: s for s in self._secs}
        for t in self.btf.types:
            if t.kind != btf_mod.BTF_KIND_DATASEC or t.name in (".kconfig", ".ksyms"):
                continue
            sec = by_name.get(t.name)
            if sec is None:
                continue
            if t.size == 0:
                t.size = sec["sh_size"]
            for m in t.members:
                var = self.btf.type(m.type)
                sym = next((s for s in self._syms if s.name == var.name and s.type == "STT_OBJECT"), None)
                if sym is not None:
                    m.offset = sym.value

    def _init_maps(self) -> None:
        names = [s.name for s in self._secs]
        if "maps" in names:
            self._init_legacy_maps(names.index("maps"))
        if ".maps" in names:
            self._init_btf_maps(names.index(".maps"))
        for idx, s in enumerate(self._secs):
            n = s.name
            kind = ""
            if n == ".data" or n.startswith(".data."):
                kind = "data"
            elif n == ".rodata" or n.startswith(".rodata."):
                kind = "rodata"
            elif n == ".bss":
                kind = "bss"
            if not kind or s["sh_size"] == 0:
                continue
            if s["sh_size"] > MODEL_MAP_MEMORY_LIMIT:
                raise self._err(f"section '{printable(n)}' of {s['sh_size']} bytes is too big for a map")
            self._add_internal_map(kind, n, idx, bytes(s["sh_size"]) if kind == "bss" else s.data())

    def _internal_map_name(self, real_name: str) -> str:
        """``internal_map_name``: the object name's first characters and the section."""
        sfx_len = min(max(7, len(real_name)), BPF_OBJ_NAME_LEN - 1)
        if "." in real_name[1:]:
            pfx_len = 0
        else:
            pfx_len = min(BPF_OBJ_NAME_LEN - sfx_len - 1, len(self.name))
        name = self.name[:pfx_len] + real_name[:sfx_len]
        return "".join(c if (c.isascii() and c.isalnum()) or c in "_." else "_" for c in name)

    def _add_internal_map(self, kind: str, real_name: str, sec_idx: int, data: bytes) -> None:
        """``bpf_object__init_internal_map``: a one-element array holding the section;
        read-only for programs if ``.rodata``/``.kconfig``, mmap()able if any global
        variable is in it."""
        flags = BPF_F_RDONLY_PROG if kind in ("rodata", "kconfig") else 0
        value_type_id = 0
        if self.btf is not None:
            t = self.btf.find(real_name, btf_mod.BTF_KIND_DATASEC)
            if t is not None:
                value_type_id = t.id
                if kind == "kconfig" or any(
                    self.btf.type(m.type).kind == btf_mod.BTF_KIND_VAR
                    and self.btf.type(m.type).linkage == btf_mod.BTF_VAR_GLOBAL_ALLOCATED
                    for m in t.members
                ):
                    flags |= BPF_F_MMAPABLE
        self.maps.append(
            MapDef(
                self._internal_map_name(real_name),
                BPF_MAP_TYPE_ARRAY,
                4,
                len(data),
                1,
                flags,
                bytes(data),
                0,
                value_type_id,
                real_name,
                kind,
                sec_idx,
            )
        )

    def _init_legacy_maps(self, sec_idx: int) -> None:
        """The pre-BTF ``maps`` section: a ``struct bpf_map_def`` (type, key_size,
        value_size, max_entries, map_flags) per symbol; libbpf 1.0 dropped it, older
        objects still carry it."""
        data = self._secs[sec_idx].data()
        syms = sorted((s for s in self._syms if s.shndx == sec_idx and s.type != "STT_SECTION"), key=lambda s: s.value)
        if not syms:
            return
        size = len(data) // len(syms)
        if size < 20:
            raise self._err(f"legacy maps section: {size}-byte map definitions are too short")
        for s in syms:
            if s.value + 20 > len(data):
                raise self._err(f"legacy map '{s.name}' past the end of the maps section")
            t, ks, vs, me, fl = struct.unpack_from("<5I", data, s.value)
            self.maps.append(MapDef(s.name, t, ks, vs, me, fl, real_name=s.name, sec_idx=sec_idx, sec_offset=s.value))

    def _init_btf_maps(self, sec_idx: int) -> None:
        """``bpf_object__init_user_btf_maps``: each variable of the ``.maps`` DATASEC is a
        struct whose members encode the definition (``__uint`` as a pointer to an array of
        that many elements, ``__type`` as a pointer to the type)."""
        btf = self.btf
        if btf is None:
            raise self._err("a .maps section needs BTF")
        sec = btf.find(".maps", btf_mod.BTF_KIND_DATASEC)
        if sec is None:
            raise self._err("DATASEC '.maps' not found in BTF")
        for vsi in sec.members:
            var = btf.type(vsi.type)
            if var.kind != btf_mod.BTF_KIND_VAR:
                raise self._err(f"'.maps' entry {vsi.type} is not a variable")
            name = var.name
            if var.linkage not in (btf_mod.BTF_VAR_STATIC, btf_mod.BTF_VAR_GLOBAL_ALLOCATED):
                raise self._err(f"map '{name}': unsupported map linkage {var.linkage}")
            try:
                d = self._parse_btf_map_def(name, var.type)
            except btf_mod.BtfError as e:
                raise self._err(f"map '{name}': {e}") from None
            d.sec_idx, d.sec_offset = sec_idx, vsi.offset
            self.maps.append(d)

    def _parse_btf_map_def(self, name: str, type_id: int) -> MapDef:
        btf = self.btf
        assert btf is not None
        st = btf.skip_mods_and_typedefs(type_id)
        if st.kind != btf_mod.BTF_KIND_STRUCT:
            raise self._err(f"map '{name}': unexpected def kind {st.kind_name}")
        d = MapDef(name, 0, 0, 0, 0, real_name=name)
        key_size = value_size = None

        def get_int(m: btf_mod.Member) -> int:
            t = btf.skip_mods_and_typedefs(m.type)
            if t.kind != btf_mod.BTF_KIND_PTR:
                raise self._err(f"map '{name}': attr '{m.name}': expected PTR, got {t.kind_name}")
            arr = btf.type(t.type)
            if arr.kind != btf_mod.BTF_KIND_ARRAY:
                raise self._err(f"map '{name}': attr '{m.name}': expected ARRAY, got {arr.kind_name}")
            return arr.nelems

        def get_type(m: btf_mod.Member) -> tuple[int, int]:
            t = btf.skip_mods_and_typedefs(m.type)
            if t.kind != btf_mod.BTF_KIND_PTR:
                raise self._err(f"map '{name}': {m.name} spec is not PTR: {t.kind_name}")
            return t.type, btf.resolve_size(t.type)

        for m in st.members:
            if m.name == "type":
                d.type = get_int(m)
            elif m.name == "max_entries":
                d.max_entries = get_int(m)
            elif m.name == "map_flags":
                d.flags = get_int(m)
            elif m.name == "numa_node":
                d.numa_node = get_int(m)
            elif m.name == "map_extra":
                d.map_extra = get_int(m)
            elif m.name == "pinning":
                d.pinning = get_int(m)
                if d.pinning not in (0, 1):
                    raise self._err(f"map '{name}': invalid pinning value {d.pinning}")
            elif m.name == "key_size":
                sz = get_int(m)
                if key_size is not None and key_size != sz:
                    raise self._err(f"map '{name}': conflicting key size {key_size} != {sz}")
                key_size = sz
            elif m.name == "value_size":
                sz = get_int(m)
                if value_size is not None and value_size != sz:
                    raise self._err(f"map '{name}': conflicting value size {value_size} != {sz}")
                value_size = sz
            elif m.name == "key":
                tid, sz = get_type(m)
                if key_size is not None and key_size != sz:
                    raise self._err(f"map '{name}': conflicting key size {key_size} != {sz}")
                key_size, d.btf_key_type_id = sz, tid
            elif m.name == "value":
                tid, sz = get_type(m)
                if value_size is not None and value_size != sz:
                    raise self._err(f"map '{name}': conflicting value size {value_size} != {sz}")
                value_size, d.btf_value_type_id = sz, tid
            elif m.name == "values":
                raise self._err(f"map '{name}': map-in-map and prog array initialisation are not supported")
            else:
                raise self._err(f"map '{name}': unknown field '{m.name}'")
        d.key_size = key_size or 0
        d.value_size = value_size or 0
        if d.type == BPF_MAP_TYPE_RINGBUF:
            d.max_entries = _adjust_ringbuf_sz(d.max_entries)
        return d

    def _init_externs(self) -> None:
        """``bpf_object__collect_externs`` for what uprobe programs use: kfuncs (BTF
        FUNCs in ``.ksyms``) and ``.kconfig`` variables, laid out in one read-only map in
        libbpf's order (bigger alignment first, then smaller size, then name); the BTF is
        rewritten as libbpf rewrites it for the kernel (extern variables become allocated
        ones at their offsets, ``.ksyms`` functions point at a ``dummy_ksym`` variable)."""
        self._externs: dict[int, tuple[str, str]] = {}  # symbol index -> (kind, name)
        kcfg: list[tuple[int, int, str]] = []
        for s in self._syms:
            if s.shndx != 0 or s.bind not in ("STB_GLOBAL", "STB_WEAK") or not s.name:
                continue
            found = None if self.btf is None else self._find_extern_btf(s.name)
            if found is None:
                raise self._err(f"failed to find BTF for extern '{s.name}'")
            sec_name, t = found
            if t.kind == btf_mod.BTF_KIND_FUNC:
                self._externs[s.index] = ("kfunc", s.name)
            elif sec_name == ".kconfig":
                assert self.btf is not None
                kcfg.append((self.btf.align_of(t.type), self.btf.resolve_size(t.type), s.name))
                self._externs[s.index] = ("kconfig", s.name)
            else:
                self._externs[s.index] = ("ksym", s.name)
        if self.btf is not None:
            self._fixup_ksyms_btf(self.btf)
        if kcfg:
            off = 0
            for align, size, name in sorted(kcfg, key=lambda k: (-k[0], k[1], k[2])):
                off = (off + align - 1) // align * align
                self.kconfig.append((name, off, size))
                off += size
            if self.btf is not None:
                sec = self.btf.find(".kconfig", btf_mod.BTF_KIND_DATASEC)
                if sec is not None:
                    offsets = {n: o for n, o, _ in self.kconfig}
                    sec.size = off
                    for vsi in sec.members:
                        var = self.btf.type(vsi.type)
                        var.linkage = btf_mod.BTF_VAR_GLOBAL_ALLOCATED
                        vsi.offset = offsets.get(var.name, vsi.offset)
            self._add_internal_map("kconfig", ".kconfig", 0, bytes(off))

    @staticmethod
    def _fixup_ksyms_btf(btf: btf_mod.Btf) -> None:
        """The ``.ksyms`` DATASEC as libbpf hands it to the kernel: 4-byte slots, extern
        variables allocated ints, functions replaced by a ``dummy_ksym`` variable."""
        sec = btf.find(".ksyms", btf_mod.BTF_KIND_DATASEC)
        if sec is None:
            return
        int_id = next((t.id for t in btf.types if t.kind == btf_mod.BTF_KIND_INT and t.bits == 32), 0)
        dummy = None
        if any(btf.type(m.type).kind == btf_mod.BTF_KIND_FUNC for m in sec.members):
            name_off = btf.add_string("dummy_ksym")
            dummy = btf_mod.BtfType(0, btf_mod.BTF_KIND_VAR, "dummy_ksym", type=int_id, name_off=name_off)
            dummy.linkage = btf_mod.BTF_VAR_GLOBAL_ALLOCATED
            btf.add_type(dummy)
        for i, vsi in enumerate(sec.members):
            t = btf.type(vsi.type)
            if t.kind == btf_mod.BTF_KIND_FUNC:
                assert dummy is not None
                for param in btf.type(t.type).members:
                    if param.type and not param.name_off:
                        param.name_off, param.name = dummy.name_off, dummy.name
                vsi.type = dummy.id
                t.linkage = btf_mod.BTF_FUNC_GLOBAL
            else:
                t.linkage = btf_mod.BTF_VAR_GLOBAL_ALLOCATED
                t.type = int_id
            vsi.offset, vsi.size = 4 * i, 4
        sec.size = 4 * len(sec.members)

    def _find_extern_btf(self, name: str) -> tuple[str, btf_mod.BtfType] | None:
        assert self.btf is not None
        for t in self.btf.types:
            if t.kind == btf_mod.BTF_KIND_DATASEC and t.name in (".kconfig", ".ksyms"):
                for m in t.members:
                    v = self.btf.type(m.type)
                    if v.name == name:
                        return t.name, v
        t2 = self.btf.find(name, btf_mod.BTF_KIND_FUNC)
        if t2 is not None and t2.linkage == btf_mod.BTF_FUNC_EXTERN:
            return ".ksyms", t2
        return None

    # -- programs ------------------------------------------------------------------------------
    def _init_programs(self) -> None:
        """``bpf_object__add_programs``: one program per function symbol of each
        executable section, sorted by offset."""
        self._text: list[BpfProgram] = []
        self._relos: dict[int, dict[int, Any]] = {}  # section -> insn index -> relocation
        for idx, s in enumerate(self._secs):
            if s["sh_type"] != "SHT_PROGBITS" or not s["sh_flags"] & SHF_EXECINSTR or s["sh_size"] == 0:
                continue
            data = s.data()
            if len(data) % 8:
                raise self._err(f"section '{s.name}' size {len(data)} is not a multiple of 8")
            insns = decode(data)
            is_text = idx == self._text_shndx
            sec = None if is_text else parse_section_checked(self, s.name)
            funcs = sorted((y for y in self._syms if y.shndx == idx and y.type == "STT_FUNC"), key=lambda y: y.value)
            if not funcs:
                raise self._err(f"section '{s.name}' has code but no function symbols")
            for f in funcs:
                if f.value % 8 or f.size % 8 or f.value + f.size > len(data) or f.size == 0:
                    raise self._err(f"function '{f.name}' in '{s.name}' has a bad offset or size")
                if not is_text and f.bind == "STB_LOCAL":
                    raise self._err(f"sec '{s.name}': program '{f.name}' is static and not supported")
                p = BpfProgram(f.name, s.name, insns[f.value // 8 : (f.value + f.size) // 8])
                p.sec_insn_off, p.sec_insn_cnt = f.value // 8, f.size // 8
                p.license, p.kern_version = self.license, self.kern_version
                if sec is not None:
                    p.prog_type, p.expected_attach_type = sec[0].prog_type, sec[0].expected_attach_type
                    p.attach = sec[1]
                    self.programs.append(p)
                else:
                    self._text.append(p)
            self._relos[idx] = self._collect_relos(idx)

    def _collect_relos(self, sec_idx: int) -> dict[int, Any]:
        """``bpf_object__collect_prog_relos``: the ``.rel<section>`` entries by instruction."""
        target = self._secs[sec_idx].name
        out: dict[int, Any] = {}
        for s in self._secs:
            if s["sh_type"] != "SHT_REL" or s["sh_info"] != sec_idx:
                continue
            for r in s.iter_relocations():
                off, sym_i = r["r_offset"], r["r_info_sym"]
                if off % 8:
                    raise self._err(f"bad relocation offset {off} in '{target}'")
                if sym_i >= len(self._syms):
                    raise self._err(f"relocation in '{target}' against symbol #{sym_i} that does not exist")
                out[off // 8] = self._syms[sym_i]
        return out

    def _record_reloc(self, prog: BpfProgram, insns: list[Insn], idx: int, sec_insn: int, sym: Sym) -> Reloc:
        """``bpf_program__record_reloc`` (:func:`~kernel_model.bpf.relocs.record_reloc`)."""
        return record_reloc(
            prog.name,
            insns[idx],
            idx,
            sec_insn,
            sym,
            externs=self._externs,
            text_shndx=self._text_shndx,
            maps=self.maps,
            sec_name=self._sec_name,
            err=self._err,
        )

    def _parse_btf_ext(self, sec: Any) -> dict[str, tuple[list[tuple[int, int]], list[tuple[int, int, int, int]]]]:
        """``.BTF.ext``'s func_info and line_info, by ELF section name (offsets in bytes,
        as clang writes them)."""
        out: dict[str, tuple[list[tuple[int, int]], list[tuple[int, int, int, int]]]] = {}
        if sec is None or self.btf is None:
            return out
        data = sec.data()
        if len(data) < 24:
            raise self._err(".BTF.ext is shorter than its header")
        magic, version, _flags, hdr_len, fi_off, fi_len, li_off, li_len = struct.unpack_from("<HBBIIIII", data)
        if magic != btf_mod.BTF_MAGIC or version != 1 or hdr_len > len(data):
            raise self._err(f"bad .BTF.ext header (magic {magic:#x}, version {version})")

        def records(off: int, length: int, min_size: int, fmt: str) -> dict[str, list[Any]]:
            recs: dict[str, list[Any]] = {}
            if not length:
                return recs
            start, end = hdr_len + off, hdr_len + off + length
            if end > len(data) or length < 4:
                raise self._err(".BTF.ext info past the end of the section")
            (rec_size,) = struct.unpack_from("<I", data, start)
            if rec_size < min_size or rec_size % 4:
                raise self._err(f".BTF.ext record size {rec_size} is too small")
            pos = start + 4
            while pos < end:
                if pos + 8 > end:
                    raise self._err(".BTF.ext info truncated")
                name_off, num = struct.unpack_from("<II", data, pos)
                pos += 8
                if pos + num * rec_size > end:
                    raise self._err(".BTF.ext info truncated")
                name = self.btf.string(name_off) if self.btf is not None else ""
                recs[name] = [struct.unpack_from(fmt, data, pos + i * rec_size) for i in range(num)]
                pos += num * rec_size
            return recs

        funcs = records(fi_off, fi_len, 8, "<II")
        lines = records(li_off, li_len, 16, "<IIII")
        for name in set(funcs) | set(lines):
            out[name] = (funcs.get(name, []), lines.get(name, []))
        return out

    def btf_blob(self) -> bytes | None:
        """The BTF as the loader hands it to ``BPF_BTF_LOAD``: DATASEC sizes and variable
        offsets filled in (clang leaves them 0), None without BTF."""
        return None if self.btf is None else self.btf.encode()

    def _sec_name(self, idx: int) -> str:
        return self._secs[idx].name if 0 < idx < len(self._secs) else f"#{idx}"

    def _relocate(self) -> None:
        """``bpf_object__relocate``: record each program's relocations, then append the
        .text subprograms it calls (``bpf_object__reloc_code``, depth first)."""
        for prog in self.programs:
            sec_idx = next(i for i, s in enumerate(self._secs) if s.name == prog.section)
            body = list(prog.insns)
            placed: dict[str, int] = {}  # subprogram -> its first instruction in body
            relocs: list[Reloc] = []
            self._reloc_code(prog, body, placed, relocs, prog, 0, sec_idx)
            prog.insns = body
            prog.relocs = sorted(relocs, key=lambda r: r.insn)
            prog.subprogs = list(placed)

    def _reloc_code(
        self,
        main: BpfProgram,
        body: list[Insn],
        placed: dict[str, int],
        relocs: list[Reloc],
        prog: BpfProgram,
        sub_off: int,
        sec_idx: int,
    ) -> None:
        sec_relos = self._relos.get(sec_idx, {})
        # reloc_prog_func_and_line_info: this (sub)program's records, moved with its code
        funcs, lines = self._btf_ext.get(self._secs[sec_idx].name, ([], []))
        lo, hi = prog.sec_insn_off, prog.sec_insn_off + prog.sec_insn_cnt
        adj = sub_off - prog.sec_insn_off
        main.func_info += [(off // 8 + adj, tid) for off, tid in funcs if lo <= off // 8 < hi]
        main.line_info += [(off // 8 + adj, f, ln, col) for off, f, ln, col in lines if lo <= off // 8 < hi]
        for i in range(prog.sec_insn_cnt):
            sec_insn = prog.sec_insn_off + i
            sym = sec_relos.get(sec_insn)
            rel = None if sym is None else self._record_reloc(main, body, sub_off + i, sec_insn, sym)
            insn = body[sub_off + i]
            is_call = insn.code == CALL and insn.src == BPF_PSEUDO_CALL
            is_func = insn.code == LDDW and insn.src == BPF_PSEUDO_FUNC
            if rel is not None and rel.kind not in ("call", "subprog_addr"):
                relocs.append(rel)
                continue
            if rel is not None and rel.kind == "subprog_addr" and not is_func:
                is_func = True
            if not is_call and not is_func:
                continue
            if rel is not None:
                if rel.kind == "call":
                    sub_insn = rel.sym_off // 8 + insn.imm + 1
                else:
                    sub_insn = (rel.sym_off + insn.imm) // 8
            elif is_func:
                raise self._err(f"prog '{main.name}': missing subprog addr relo for insn #{sec_insn}")
            else:
                if sec_idx != self._text_shndx:
                    raise self._err(f"prog '{main.name}': call at insn #{sec_insn} outside .text without a relocation")
                sub_insn = sec_insn + insn.imm + 1
            sub = next((t for t in self._text if t.sec_insn_off <= sub_insn < t.sec_insn_off + t.sec_insn_cnt), None)
            if sub is None or sub.sec_insn_off != sub_insn:
                raise self._err(f"prog '{main.name}': no .text sub-program at instruction {sub_insn}")
            if sub.name not in placed:
                placed[sub.name] = len(body)
                body.extend(sub.insns)
                self._reloc_code(main, body, placed, relocs, sub, placed[sub.name], self._text_shndx)
            new_imm = placed[sub.name] - (sub_off + i) - 1
            cur = body[sub_off + i]
            body[sub_off + i] = cur._replace(imm=new_imm, src=BPF_PSEUDO_FUNC if is_func else cur.src)

    # -- skeleton-style access -----------------------------------------------------------------
    def program(self, name: str) -> BpfProgram:
        for p in self.programs:
            if p.name == name:
                return p
        raise self._err(f"no program '{name}'")

    def map(self, name: str) -> MapDef:
        for m in self.maps:
            if m.name == name or m.real_name == name:
                return m
        raise self._err(f"no map '{name}'")

    def _set_var(self, sec: str, var_name: str, data: bytes) -> None:
        m = next((x for x in self.maps if x.real_name == sec), None)
        if m is None or m.initial is None or self.btf is None:
            raise self._err(f"no {sec} map")
        ds = self.btf.find(sec, btf_mod.BTF_KIND_DATASEC)
        if ds is None:
            raise self._err(f"no DATASEC '{sec}' in BTF")
        for vsi in ds.members:
            if self.btf.type(vsi.type).name == var_name:
                if len(data) != vsi.size:
                    raise self._err(f"{sec} variable '{var_name}' has {vsi.size} bytes, {len(data)} given")
                init = bytearray(m.initial)
                init[vsi.offset : vsi.offset + vsi.size] = data
                m.initial = bytes(init)
                return
        raise self._err(f"no variable '{var_name}' in {sec}")

    def find_variable(self, var_name: str) -> tuple[str, int, int]:
        """(section, offset, size) of a global variable, found through the DATASECs."""
        if self.btf is not None:
            for t in self.btf.types:
                if t.kind != btf_mod.BTF_KIND_DATASEC or t.name in (".kconfig", ".ksyms", ".maps"):
                    continue
                for vsi in t.members:
                    if self.btf.type(vsi.type).name == var_name:
                        return t.name, vsi.offset, vsi.size
        raise self._err(f"no global variable '{var_name}'")

    def set_rodata(self, var_name: str, data: bytes | int) -> None:
        """Set a ``const volatile`` global before load, as a skeleton's ``rodata->var = x``
        (an int is stored little-endian in the variable's size)."""
        if isinstance(data, int):
            number = data
            _, _, size = self.find_variable(var_name)
            try:
                data = number.to_bytes(size, "little", signed=number < 0)
            except OverflowError:
                raise self._err(f".rodata variable '{var_name}' ({size} bytes) cannot hold {number}") from None
        self._set_var(".rodata", var_name, bytes(data))

    def set_data(self, sec: str, var_name: str, data: bytes) -> None:
        """Set a variable of ``.data``/``.bss``/``.rodata.*`` before load."""
        self._set_var(sec, var_name, bytes(data))

    def set_kconfig(self, name: str, data: bytes) -> None:
        """The value of a ``.kconfig`` extern (libbpf reads them from the kernel config)."""
        for n, off, size in self.kconfig:
            if n == name:
                if len(data) != size:
                    raise self._err(f"kconfig '{name}' has {size} bytes, {len(data)} given")
                m = self.map(".kconfig")
                init = bytearray(m.initial or b"")
                init[off : off + size] = data
                m.initial = bytes(init)
                return
        raise self._err(f"no kconfig extern '{name}'")

    # -- loading -------------------------------------------------------------------------------
    def load_maps(self, memory: KernelMemory, nr_cpus: int) -> list[BpfMap]:
        """``bpf_object__create_maps``: create each map in ``memory`` (a perf event array
        without max_entries gets one slot per CPU), fill the global data maps, freeze
        ``.rodata`` and ``.kconfig``.  A map the kernel refuses is a :class:`MapError`
        naming the file and the map."""
        out: list[BpfMap] = []
        for d in self.maps:
            max_entries = d.max_entries
            if d.type == BPF_MAP_TYPE_PERF_EVENT_ARRAY and not max_entries:
                max_entries = nr_cpus
            try:
                m = create_map(memory, d.type, d.key_size, d.value_size, max_entries, d.flags, d.name, nr_cpus)
            except MapError as e:
                raise MapError(e.errno, f"{printable(self.path)}: map '{d.name}': {e}") from None
            m.btf_key_type_id, m.btf_value_type_id = d.btf_key_type_id, d.btf_value_type_id
            if d.internal and d.initial is not None:
                err = m.update_elem(bytes(4), d.initial, 0)
                if err:
                    raise MapError(-err, f"{printable(self.path)}: map '{d.name}': initial value not written")
                if d.internal in ("rodata", "kconfig"):
                    m.frozen = True
            out.append(m)
        return out

    def kfunc_ids(self, prog: BpfProgram) -> dict[str, int]:
        """An id for each kfunc the program calls (1, 2, ... in order of first call)."""
        ids: dict[str, int] = {}
        for r in prog.relocs:
            if r.kind == "kfunc" and r.name not in ids:
                ids[r.name] = len(ids) + 1
        return ids

    def resolved_insns(
        self, prog: BpfProgram, maps: list[BpfMap] | None = None, kfuncs: dict[str, int] | None = None
    ) -> list[Insn]:
        """The instructions as ``BPF_PROG_LOAD`` receives them (see the module
        docstring): map fds are indices into ``maps``, the list :meth:`load_maps` made
        (or into :attr:`maps` in the same order); kfunc calls carry ``kfuncs[name]``
        (default: :meth:`kfunc_ids`)."""
        if maps is not None and len(maps) != len(self.maps):
            raise self._err(f"{len(maps)} maps given, the object has {len(self.maps)}")
        if kfuncs is None:
            kfuncs = self.kfunc_ids(prog)
        return resolve_insns(
            prog.name, prog.insns, prog.relocs, maps=self.maps, kconfig=self.kconfig, kfuncs=kfuncs, err=self._err
        )

    def bpf_prog(self, prog: BpfProgram, kfunc_btf_id: Callable[[str], int] | None = None) -> BpfProg:
        """The ``struct bpf_prog`` to hand the verifier: resolved instructions (map fds
        are indices into :attr:`maps`), type, license, and the kfuncs by id
        (``kfunc_btf_id(name)`` gives a kfunc's id, by default :meth:`kfunc_ids`')."""
        ids = self.kfunc_ids(prog)
        if kfunc_btf_id is not None:
            ids = {name: kfunc_btf_id(name) for name in ids}
        return BpfProg(
            prog.name,
            self.resolved_insns(prog, None, ids),
            prog_type=prog.prog_type,
            expected_attach_type=prog.expected_attach_type,
            license=prog.license,
            sleepable=prog.sleepable,
            section=prog.section,
            kfuncs={i: n for n, i in ids.items()},
        )


def parse_section_checked(obj: BpfObject, name: str) -> tuple[SecDef, AttachSpec]:
    """:func:`parse_section` for a program section of ``obj``: unknown or malformed
    section names are an :class:`ObjectError` (libbpf: "missing BPF prog type")."""
    try:
        res = parse_section(name)
    except ValueError as e:
        raise obj._err(str(e)) from None
    if res is None:
        raise obj._err(f"unknown section '{printable(name)}' (missing BPF prog type)")
    return res


def _adjust_ringbuf_sz(sz: int) -> int:
    """libbpf's ``adjust_ringbuf_sz``: round a ring buffer up to a power-of-2 number of pages."""
    if sz == 0:
        return 0
    if sz % PAGE_SIZE == 0 and (sz // PAGE_SIZE) & (sz // PAGE_SIZE - 1) == 0:
        return sz
    mul = 1
    while mul <= 0xFFFFFFFF // PAGE_SIZE:
        if mul * PAGE_SIZE > sz:
            return mul * PAGE_SIZE
        mul <<= 1
    return sz
