"""``struct bpf_map`` and ``struct bpf_prog`` as ``include/linux/bpf.h`` declares them, with
the uapi enums (``enum bpf_map_type``, ``enum bpf_prog_type``, ``enum bpf_attach_type``)
the loader, the verifier, the interpreter and the ``bpf()`` syscall share.

A map's operations are ``struct bpf_map_ops`` (``map_lookup_elem`` for a program,
``map_lookup_elem_sys_only``-style copies for the syscall side): each map type
(:mod:`kernel_model.bpf.hashtab`, :mod:`kernel_model.bpf.arraymap`, :mod:`kernel_model.bpf.ringbuf`,
created by :mod:`kernel_model.bpf.maps`) implements them over :class:`~kernel_model.bpf.memory.Region`s,
so a value a program looks up is a real address it can load from and store to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kernel_model.arch.x86.ptrace import PT_REGS_ORDER

if TYPE_CHECKING:
    from kernel_model.bpf.insn import Insn
    from kernel_model.bpf.memory import Region

# enum bpf_map_type
(
    BPF_MAP_TYPE_UNSPEC,
    BPF_MAP_TYPE_HASH,
    BPF_MAP_TYPE_ARRAY,
    BPF_MAP_TYPE_PROG_ARRAY,
    BPF_MAP_TYPE_PERF_EVENT_ARRAY,
    BPF_MAP_TYPE_PERCPU_HASH,
    BPF_MAP_TYPE_PERCPU_ARRAY,
    BPF_MAP_TYPE_STACK_TRACE,
    BPF_MAP_TYPE_CGROUP_ARRAY,
    BPF_MAP_TYPE_LRU_HASH,
    BPF_MAP_TYPE_LRU_PERCPU_HASH,
) = range(11)
BPF_MAP_TYPE_RINGBUF = 27
MAP_TYPE_NAMES = {
    BPF_MAP_TYPE_HASH: "hash",
    BPF_MAP_TYPE_ARRAY: "array",
    BPF_MAP_TYPE_PROG_ARRAY: "prog_array",
    BPF_MAP_TYPE_PERF_EVENT_ARRAY: "perf_event_array",
    BPF_MAP_TYPE_PERCPU_HASH: "percpu_hash",
    BPF_MAP_TYPE_PERCPU_ARRAY: "percpu_array",
    BPF_MAP_TYPE_LRU_HASH: "lru_hash",
    BPF_MAP_TYPE_LRU_PERCPU_HASH: "lru_percpu_hash",
    BPF_MAP_TYPE_RINGBUF: "ringbuf",
}
PERCPU_MAP_TYPES = frozenset({BPF_MAP_TYPE_PERCPU_HASH, BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_LRU_PERCPU_HASH})

# map update flags
BPF_ANY, BPF_NOEXIST, BPF_EXIST, BPF_F_LOCK = 0, 1, 2, 4
# map_flags
BPF_F_NO_PREALLOC = 1 << 0
BPF_F_RDONLY_PROG = 1 << 7
BPF_F_WRONLY_PROG = 1 << 8
BPF_F_MMAPABLE = 1 << 10

# enum bpf_prog_type / enum bpf_attach_type (the ones uprobe programs use)
BPF_PROG_TYPE_KPROBE = 2
BPF_PERF_EVENT = 41
BPF_TRACE_KPROBE_MULTI = 42
BPF_TRACE_UPROBE_MULTI = 48
BPF_TRACE_KPROBE_SESSION = 56
BPF_TRACE_UPROBE_SESSION = 57

# struct pt_regs (arch/x86/include/asm/ptrace.h), the context of a uprobe program:
# the registers in this order, 8 bytes each, 168 bytes in all
PT_REGS_FIELDS = PT_REGS_ORDER
PT_REGS_SIZE = 8 * len(PT_REGS_FIELDS)


class BpfMap:
    """``struct bpf_map``: its attributes, the object a ``lddw`` of the map loads
    (``region``, whose address the program passes to helpers), and ``bpf_map_ops``.

    Program-side operations return kernel addresses and negative errnos as the helpers
    do; syscall-side ones copy bytes.  ``cpu`` selects a per-CPU map's copy.
    """

    map_type: int = BPF_MAP_TYPE_UNSPEC

    def __init__(self, key_size: int, value_size: int, max_entries: int, map_flags: int = 0, name: str = ""):
        self.key_size, self.value_size = key_size, value_size
        self.max_entries, self.map_flags, self.name = max_entries, map_flags, name
        self.region: Region | None = None  # struct bpf_map, set when the map is created in a KernelMemory
        self.frozen = False  # BPF_MAP_FREEZE: read-only from the syscall side
        self.btf_key_type_id = 0
        self.btf_value_type_id = 0
        self.id = 0  # the map id bpf(BPF_MAP_GET_NEXT_ID) and bpftool show

    @property
    def addr(self) -> int:
        """The map pointer a ``lddw`` with BPF_PSEUDO_MAP_FD loads."""
        assert self.region is not None, "map not created"
        return self.region.base

    # -- bpf_map_ops (program side) ----------------------------------------------
    def lookup_elem(self, key: bytes, cpu: int = 0) -> int:
        """The value's address or 0 (``map_lookup_elem``)."""
        raise NotImplementedError

    def update_elem(self, key: bytes, value: bytes, flags: int, cpu: int = 0) -> int:
        """0 or a negative errno (``map_update_elem``)."""
        raise NotImplementedError

    def delete_elem(self, key: bytes) -> int:
        raise NotImplementedError

    # -- the syscall side ----------------------------------------------------------
    def get_next_key(self, key: bytes | None) -> bytes | None:
        """``map_get_next_key``: the key after ``key`` (the first for None), None at the end."""
        raise NotImplementedError

    def lookup_value(self, key: bytes) -> bytes | None:
        """What ``BPF_MAP_LOOKUP_ELEM`` copies out (every CPU's value, 8-byte aligned,
        for a per-CPU map), or None when there is no such element."""
        raise NotImplementedError

    def items(self) -> list[tuple[bytes, bytes]]:
        """Every (key, value) as the syscall side sees them, in ``get_next_key`` order."""
        out = []
        key = self.get_next_key(None)
        while key is not None:
            value = self.lookup_value(key)
            if value is not None:
                out.append((key, value))
            key = self.get_next_key(key)
        return out


@dataclass(eq=False)
class BpfProg:
    """``struct bpf_prog``: the instructions as the verifier left them (``lddw`` of a map
    rewritten to its address), the maps it uses, and where it was declared."""

    name: str
    insns: list[Insn]
    prog_type: int = BPF_PROG_TYPE_KPROBE
    expected_attach_type: int = 0
    license: str = "GPL"
    # prog->sleepable: loaded with BPF_F_SLEEPABLE (libbpf does for a ``uprobe.s`` section);
    # only such a program may call the helpers that might sleep (bpf_copy_from_user)
    sleepable: bool = False
    maps: list = field(default_factory=list)  # used_maps
    section: str = ""
    id: int = 0
    # set by the verifier: each subprogram's first instruction and its stack depth
    subprog_starts: list[int] = field(default_factory=lambda: [0])
    stack_depth: int = 0
    # kfunc BTF ids the loader resolved, by id: the kfunc's name
    kfuncs: dict = field(default_factory=dict)
    # may the program read its context (r1 at entry)? Set at load (bpf.liveness); the
    # model fills struct pt_regs for a run only then
    reads_ctx: bool = True
    run_cnt: int = 0  # runs so far (bpf_prog_stats.cnt, what bpftool prog show calls run_cnt)

    @property
    def gpl_compatible(self) -> bool:
        """``license_is_gpl_compatible()``: the licenses GPL-only helpers accept."""
        return self.license in (
            "GPL",
            "GPL v2",
            "GPL and additional rights",
            "Dual BSD/GPL",
            "Dual MIT/GPL",
            "Dual MPL/GPL",
        )


# A callback's address as a program holds it after ``lddw rX, <subprog>`` (BPF_PSEUDO_FUNC),
# which the verifier rewrites to this base plus the subprogram's first instruction index:
# what the interpreter's ``call_function`` (``bpf_loop``, ``bpf_for_each_map_elem``) runs.
BPF_FUNC_PTR_BASE = 0xFFFFFFFFA0000000
