"""BPF objects as users load them into a machine: ``m.bpf.load("prog.bpf.o")``.

What libbpf does for a tool - open the object, create its maps (global data written,
``.rodata`` frozen), load every program through the verifier, attach the programs
whose section names a target (``SEC("uprobe/PATH:FUNC")``, ``uretprobe``,
``uprobe.multi``, ``uprobe.session``, ``usdt``) - done against the machine's kernel
(``kernel.bpf``).  Programs whose section names no target attach where ``attach=``
says, with the targets ``m.uprobes`` takes (``"libc:malloc"``, ``"/bin/ls:main+4"``,
``(path, offset)``).  Maps read as dicts (integer keys and values decoded when their
BTF type is an integer); ring buffer records and perf event output reach callbacks as
the programs submit them.
"""

from __future__ import annotations

import errno as E
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from emu.probes.bpf_usdt import attach_usdt, set_bpf_cookie_kconfig
from kernel_model.bpf.bpf_types import (
    BPF_MAP_TYPE_HASH,
    BPF_MAP_TYPE_PERF_EVENT_ARRAY,
    BPF_MAP_TYPE_RINGBUF,
    BPF_TRACE_UPROBE_MULTI,
    BPF_TRACE_UPROBE_SESSION,
    MAP_TYPE_NAMES,
    PERCPU_MAP_TYPES,
    BpfProg,
)
from kernel_model.bpf.btf import dump_map, int_type_info
from kernel_model.bpf.insn import BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE, Insn
from kernel_model.bpf.maps import MapError
from kernel_model.bpf.object import BpfObject, map_by_fd
from kernel_model.bpf.verifier import BpfVerifierError
from kernel_model.errors import InputError

if TYPE_CHECKING:
    from emu.machine import Machine

# what front ends use of the BPF model (they reach it through this module only)
__all__ = [
    "BPF_MAP_TYPE_HASH",
    "BPF_MAP_TYPE_PERF_EVENT_ARRAY",
    "BPF_MAP_TYPE_RINGBUF",
    "BPF_PSEUDO_MAP_FD",
    "BPF_PSEUDO_MAP_VALUE",
    "MAP_TYPE_NAMES",
    "BpfLoadError",
    "BpfObject",
    "Insn",
    "LoadedObject",
    "MapView",
    "UserBpf",
    "has_variable",
    "program_target",
]


class BpfLoadError(InputError):
    """A program the kernel (the model's verifier) refused, with its errno and log."""

    def __init__(self, message: str, errno: int = E.EINVAL, log: str = ""):
        self.errno, self.log = errno, log
        super().__init__(message)


class MapView(Mapping):
    """A map as a read-only dict, read at each access (the syscall side's copy).

    Keys and values whose BTF type is an integer of 1-8 bytes come as ints, others as
    bytes; a per-CPU map's value is a list with one entry per CPU."""

    def __init__(self, kmap, btf, name: str = "") -> None:
        self.map = kmap
        self.name = name or kmap.name
        self._btf = btf
        self._key = int_type_info(btf, kmap.btf_key_type_id) if btf is not None else None
        self._value = int_type_info(btf, kmap.btf_value_type_id) if btf is not None else None

    def _dec(self, raw: bytes, info) -> Any:
        if info is None:
            return raw
        size, signed = info
        return int.from_bytes(raw[:size], "little", signed=signed)

    def _enc_key(self, key: Any) -> bytes:
        if isinstance(key, int):
            if self._key is None and self.map.key_size not in (1, 2, 4, 8):
                raise KeyError(key)
            signed = self._key[1] if self._key else False
            return key.to_bytes(self.map.key_size, "little", signed=signed)
        return bytes(key)

    def _dec_value(self, raw: bytes) -> Any:
        nr = getattr(self.map, "nr_cpus", 1)
        if self.map.map_type in PERCPU_MAP_TYPES:  # one value per CPU, each 8-byte aligned
            step = (self.map.value_size + 7) & ~7
            return [self._dec(raw[i * step : i * step + self.map.value_size], self._value) for i in range(nr)]
        return self._dec(raw, self._value)

    def __getitem__(self, key: Any) -> Any:
        raw = self.map.lookup_value(self._enc_key(key))
        if raw is None:
            raise KeyError(key)
        return self._dec_value(raw)

    def __iter__(self) -> Iterator[Any]:
        return iter([self._dec(k, self._key) for k, _ in self.map.items()])

    def __len__(self) -> int:
        return len(self.map.items())

    def dump(self) -> str:
        """The map as ``bpftool map dump`` prints it (with BTF: JSON-like records)."""
        return dump_map(self.map, self._btf)


class LoadedObject:
    """One loaded object: its maps (:class:`MapView` by name), programs, links."""

    def __init__(self, api: UserBpf, obj: BpfObject, kmaps: list, progs: dict[str, BpfProg]) -> None:
        self._api, self.object, self._kmaps = api, obj, kmaps
        self.programs = progs
        self.links: list = []
        # by the object's names (the kernel's are cut to 15 characters)
        self.maps = {d.name: MapView(m, obj.btf, d.name) for m, d in zip(kmaps, obj.maps)}

    @property
    def path(self) -> str:
        return self.object.path

    def variable(self, name: str) -> bytes:
        """The current bytes of a global variable (``.bss``/``.data``/``.rodata``)."""
        section, offset, size = self.object.find_variable(name)
        kmap = next((m for m, d in zip(self._kmaps, self.object.maps) if d.section == section), None)
        if kmap is None:
            raise InputError(f"{self.path}: no global data section {section!r}")
        value = kmap.lookup_value(bytes(4))
        return bytes(value[offset : offset + size])

    def on_ringbuf(self, map_name: str, callback: Callable[[bytes], object]) -> None:
        """Call ``callback(record)`` for each record the programs submit to the ring
        buffer ``map_name``, as it is submitted (and consume it, as libbpf's
        ``ring_buffer__poll`` does)."""
        kmap = self._map_of(map_name, BPF_MAP_TYPE_RINGBUF)
        self._api.watch_ringbuf(kmap, callback)

    def ringbuf_records(self, map_name: str) -> list[bytes]:
        """The records waiting in a ring buffer, consumed."""
        return self._map_of(map_name, BPF_MAP_TYPE_RINGBUF).consume()

    def on_perf_output(self, map_name: str, callback: Callable[[int, bytes], object]) -> None:
        """``callback(cpu, sample)`` for each ``bpf_perf_event_output`` to ``map_name``."""
        kmap = self._map_of(map_name, BPF_MAP_TYPE_PERF_EVENT_ARRAY)
        self._api.perf_listeners.setdefault(id(kmap), []).append(callback)

    def _map_of(self, name: str, map_type: int):
        view = self.maps.get(name)
        if view is None:
            raise InputError(f"{self.path}: no map {name!r} (maps: {', '.join(self.maps) or 'none'})")
        if view.map.map_type != map_type:
            raise InputError(f"{self.path}: map {name!r} is a {MAP_TYPE_NAMES.get(view.map.map_type)}")
        return view.map

    def detach(self) -> None:
        for link in self.links:
            self._api.kernel_bpf.detach(link)
        self.links = []


class _PerfSink:
    """A perf event array slot as ``perf_buffer__new`` fills it: samples go to listeners."""

    def __init__(self, api: UserBpf, kmap) -> None:
        self.api, self.kmap = api, kmap

    def write(self, record: bytes, cpu: int) -> None:
        for cb in self.api.perf_listeners.get(id(self.kmap), []):
            cb(cpu, record)


class UserBpf:
    """``machine.bpf``: load objects, read their maps."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.objects: list[LoadedObject] = []
        self.perf_listeners: dict[int, list] = {}
        self._ring_watch: list[tuple[Any, Callable[[bytes], object]]] = []

    @property
    def kernel_bpf(self):
        return self.machine.kernel.bpf

    @property
    def maps(self) -> dict[str, MapView]:
        """Every loaded object's maps by name (a later object's map wins a clash)."""
        out: dict[str, MapView] = {}
        for obj in self.objects:
            out.update(obj.maps)
        return out

    def load(
        self,
        path: str,
        *,
        attach: Mapping[str, Any] | None = None,
        rodata: Mapping[str, int | bytes] | None = None,
        pid: int | None = None,
        log_level: int = 0,
        strict: bool = True,
    ) -> LoadedObject:
        """Open, load and attach ``path`` (see the module's docstring).  ``attach``:
        program name -> target; ``rodata``: ``const volatile`` variable -> value set
        before the load; ``pid``: the programs fire in that process only.  With
        ``strict`` (the default) a name in ``attach`` or ``rodata`` the object lacks is
        an error; without, it is left for another object."""
        obj = BpfObject.open(path)
        set_bpf_cookie_kconfig(obj)
        for var, value in (rodata or {}).items():
            if strict or has_variable(obj, var):
                obj.set_rodata(var, value)
        attach = dict(attach or {})
        names = {p.name for p in obj.programs}
        unknown = [name for name in attach if name not in names]
        if unknown and strict:
            raise InputError(f"{path}: no program {unknown[0]!r} to attach (programs: {', '.join(sorted(names))})")
        kb = self.kernel_bpf
        kmaps = [self._create_map(kb, d) for d in obj.maps]
        progs: dict[str, BpfProg] = {}
        for p in obj.programs:
            missing = [k for k in obj.kfunc_ids(p) if kb.kfunc_btf_id(k) is None]
            if missing:
                raise BpfLoadError(f"{path}: extern (func ksym) '{missing[0]}': not found in kernel BTF", E.ESRCH)
            prog = obj.bpf_prog(p, kb.kfunc_btf_id)
            try:
                kb.prog_load(prog, map_by_fd=map_by_fd(kmaps), log_level=log_level)
            except BpfVerifierError as err:
                last = err.log.strip().splitlines()[-1] if err.log.strip() else str(err)
                raise BpfLoadError(
                    f"{path}: program {p.name}: {last} ({E.errorcode.get(err.errno, err.errno)})", err.errno, err.log
                ) from None
            progs[p.name] = prog
        loaded = LoadedObject(self, obj, kmaps, progs)
        self.objects.append(loaded)
        for p in obj.programs:
            target = attach.get(p.name)
            if target is not None or p.spec.autoattach:
                loaded.links.extend(self._attach(p, progs[p.name], target, pid))
        return loaded

    def _create_map(self, kb, d):
        """``bpf_object__create_map``: the map, its initial data (global data sections),
        ``.rodata`` frozen, a perf event array's slots given to this API's listeners."""
        try:
            kmap = kb.map_create(
                d.map_type,
                d.key_size,
                d.value_size,
                d.max_entries,
                d.map_flags,
                d.name[:15],  # bpf_map_create: libbpf_strlcpy into attr.map_name[BPF_OBJ_NAME_LEN]
                d.btf_key_type_id,
                d.btf_value_type_id,
            )
        except MapError as err:
            raise BpfLoadError(f"map {d.name!r}: {err}", err.errno) from None
        if d.initial is not None:
            kmap.update_value(bytes(4), d.initial)
        if d.frozen:
            kmap.freeze()
        if d.map_type == BPF_MAP_TYPE_PERF_EVENT_ARRAY:
            for cpu in range(kb.nr_cpus):
                kmap.set_sink(cpu, _PerfSink(self, kmap))
        return kmap

    def _attach(self, p, prog: BpfProg, target, pid: int | None) -> list:
        kb, spec = self.kernel_bpf, p.spec
        targets = self.machine.uprobes.targets
        if spec.kind == "usdt":
            return self._attach_usdt(p, prog, target, pid)
        file, offset = targets.resolve_target(program_target(p, target))
        if prog.expected_attach_type in (BPF_TRACE_UPROBE_MULTI, BPF_TRACE_UPROBE_SESSION):
            session = prog.expected_attach_type == BPF_TRACE_UPROBE_SESSION
            return [kb.attach_uprobe_multi(prog, file, [offset], retprobe=spec.retprobe, session=session, pid=pid)]
        return [kb.attach_uprobe(prog, file, offset, retprobe=spec.retprobe, pid=pid)]

    def _attach_usdt(self, p, prog: BpfProg, target, pid: int | None) -> list:
        loaded = next(o for o in self.objects if o.programs.get(p.name) is prog)
        machine = self.machine
        return attach_usdt(
            self.kernel_bpf,
            machine.uprobes.targets,
            machine.kernel.profile,
            loaded.object,
            loaded._kmaps,
            loaded.links,
            p,
            prog,
            target,
            pid,
        )

    def watch_ringbuf(self, kmap, callback: Callable[[bytes], object]) -> None:
        self._ring_watch.append((kmap, callback))
        self.kernel_bpf.after_run = self._deliver

    def _deliver(self) -> None:
        for kmap, cb in self._ring_watch:
            for record in kmap.consume():
                cb(record)


def program_target(p, target: Any = None) -> Any:
    """Where a program attaches: ``target`` when given (``PATH:0xOFF`` a file offset,
    else as ``m.uprobes`` resolves it), else what its section names
    (``uprobe/PATH:FUNC+OFF``, ``uprobe/PATH:0xOFF``), else None (not attached)."""
    if target is not None:
        return _target(target)
    spec = p.spec
    if not spec.autoattach:
        return None
    if spec.func:
        return f"{spec.path}:{spec.func}+{spec.offset}" if spec.offset else f"{spec.path}:{spec.func}"
    return (spec.path, spec.offset)


def has_variable(obj: BpfObject, name: str) -> bool:
    """Whether the object has a global variable ``name`` (``.bss``/``.data``/``.rodata``)."""
    try:
        obj.find_variable(name)
    except InputError:
        return False
    return True


def _target(target: Any) -> Any:
    """``PATH:0xOFF`` is a file offset; anything else as ``m.uprobes`` resolves it."""
    if isinstance(target, str) and ":" in target:
        path, _, where = target.rpartition(":")
        try:
            return (path, int(where, 0))
        except ValueError:
            return target
    return target
