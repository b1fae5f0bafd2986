"""The calls of ``kernel/bpf/verifier.c``: ``check_helper_call()`` with each argument
against the helper's prototype (``check_func_arg()``, ``check_helper_mem_access()``),
``check_kfunc_call()`` (the uprobe_session kfuncs), bpf-to-bpf calls
(``check_func_call()``) and the callbacks of bpf_loop/bpf_for_each_map_elem, and the
exits that return from them (``prepare_func_exit()``) or end the program with its
references released and, for a session program, its return value in [0, 1].
"""

from __future__ import annotations

import errno as E
from collections.abc import Callable

from kernel_model.bpf import insn as I
from kernel_model.bpf import verifier_state as S
from kernel_model.bpf.bpf_types import (
    BPF_F_RDONLY_PROG,
    BPF_MAP_TYPE_ARRAY,
    BPF_MAP_TYPE_PERCPU_ARRAY,
    BPF_TRACE_UPROBE_SESSION,
    BpfMap,
)
from kernel_model.bpf.func_protos import (
    BPF_FUNC_MAX_ID,
    FuncProto,
    func_id_name,
    kprobe_func_proto,
    map_func_compatible,
)
from kernel_model.bpf.verifier_env import BPF_MAX_VAR_SIZ, map_rdonly
from kernel_model.bpf.verifier_mem import MemChecks, mark_stack
from kernel_model.bpf.verifier_state import (
    CONST_PTR_TO_MAP,
    NOT_INIT_REG,
    PTR_TO_MAP_KEY,
    PTR_TO_MAP_VALUE,
    PTR_TO_MAP_VALUE_OR_NULL,
    PTR_TO_MEM,
    PTR_TO_RINGBUF_MEM_OR_NULL,
    PTR_TO_STACK,
    SCALAR,
    Frame,
    Reg,
    State,
)

SESSION_KFUNCS = ("bpf_session_is_return", "bpf_session_cookie")
_MEM_TYPES = ("fp", "pkt", "pkt_meta", "map_key", "map_value", "mem", "ringbuf_mem", "buf", "trusted_ptr_")
_ARG_REG_TYPES: dict[str, tuple[str, ...]] = {
    "map_key": _MEM_TYPES,
    "map_value": _MEM_TYPES,
    "uninit_map_value": _MEM_TYPES,
    "mem": _MEM_TYPES,
    "mem_or_null": _MEM_TYPES,
    "uninit_mem": _MEM_TYPES,
    "uninit_mem_or_null": _MEM_TYPES,
    "const_size": ("scalar",),
    "const_size_or_zero": ("scalar",),
    "const_alloc_size_or_zero": ("scalar",),
    "ctx": ("ctx",),
    "const_map_ptr": ("map_ptr",),
    "ringbuf_mem_release": ("ringbuf_mem",),
    "func": ("func",),
    "stack_or_null": ("fp",),
    "const_str": ("map_value",),
    "btf_id": ("ptr_", "trusted_ptr_", "rcu_ptr_"),
}


class _CallMeta:
    """``struct bpf_call_arg_meta``."""

    def __init__(self) -> None:
        self.map: BpfMap | None = None
        self.mem_size = 0
        self.release_ref = 0
        self.subprog = 0
        self.const_key: int | None = None
        self.saved: dict[int, Reg] = {}
        self.uninit_writes: list[Callable[[], None]] = []


class CallChecks(MemChecks):
    """Calls and exits."""

    def _check_exit(self, st: State) -> int | None:
        frame = st.cur
        if len(st.frames) > 1:
            return self._prepare_func_exit(st)
        if st.refs:
            rid, at = st.refs[0]
            raise self.fail(
                E.EINVAL,
                "BPF_EXIT instruction in main prog would lead to reference leak",
                f"Unreleased reference id={rid} alloc_insn={at}",
            )
        self._check_reg_arg(st, 0, True)
        if self.prog.expected_attach_type == BPF_TRACE_UPROBE_SESSION:
            self._check_retval(frame.regs[0], "At program exit", E.EINVAL)
        return None

    def _check_retval(self, r0: Reg, where: str, errno: int) -> None:
        """The [0, 1] return range of session programs and callbacks."""
        if r0.type != SCALAR:
            if where == "At callback return":
                raise self.fail(E.EACCES, "R0 not a scalar value")
            raise self.fail(errno, f"{where} the register R0 is not a known value ({r0.type})")
        if 0 <= r0.smin and r0.smax <= 1:
            return
        parts = []
        if r0.smin > S.S64_MIN:
            parts.append(f" smin={r0.smin}")
        if r0.smax < S.S64_MAX:
            parts.append(f" smax={r0.smax}")
        desc = "".join(parts) or " unknown scalar value"
        raise self.fail(errno, f"{where} the register R0 has{desc} should have been in [0, 1]")

    def _prepare_func_exit(self, st: State) -> int:
        callee = st.frames.pop()
        r0 = callee.regs[0]
        caller = st.cur
        if callee.callback:
            self._check_retval(r0, "At callback return", E.EINVAL)
            r0 = S.UNKNOWN
        elif r0.type == PTR_TO_STACK:
            raise self.fail(E.EINVAL, "cannot return stack pointer to the caller")
        caller.regs[0] = r0
        return callee.callsite + 1

    def _enter_frame(self, st: State, callsite: int, target: int, callback: str = "") -> Frame:
        if len(st.frames) >= I.MAX_CALL_FRAMES:
            raise self.fail(E.E2BIG, f"the call stack of {len(st.frames) + 1} frames is too deep")
        sub = self.subprog_starts.index(target)
        self.callees.setdefault(st.cur.subprog, set()).add(sub)
        frame = S.new_frame(len(st.frames), callsite, sub)
        frame.callback = callback
        st.frames.append(frame)
        return frame

    def _check_func_call(self, st: State, idx: int, target: int) -> int:
        """``check_func_call()``: a bpf-to-bpf call runs the callee in a new frame with the
        caller's r1-r5; the caller keeps r6-r9 and gets its r1-r5 scratched."""
        caller = st.cur
        frame = self._enter_frame(st, idx, target)
        for r in range(1, 6):
            frame.regs[r] = caller.regs[r]
            caller.regs[r] = NOT_INIT_REG
        return target

    def _check_kfunc_call(self, st: State, insn: I.Insn) -> None:
        """``check_kfunc_call()``: the session kfuncs exist only for session programs."""
        name = self.kfunc_ids[insn.imm]
        allowed = (
            name in SESSION_KFUNCS
            and self.features.uprobe_session
            and self.prog.expected_attach_type == BPF_TRACE_UPROBE_SESSION
        )
        if not allowed:
            raise self.fail(E.EACCES, f"calling kernel function {name} is not allowed")
        regs = st.cur.regs
        for r in range(1, 6):
            regs[r] = NOT_INIT_REG
        if name == "bpf_session_is_return":
            regs[0] = S.scalar_range(0, 1)
        else:
            regs[0] = S.pointer(PTR_TO_MEM, mem_size=8)

    def _check_helper_call(self, st: State, idx: int) -> int:
        """``check_helper_call()``."""
        func_id = self.insns[idx].imm
        if not 0 <= func_id < BPF_FUNC_MAX_ID:
            raise self.fail(E.EINVAL, f"invalid func {func_id_name(func_id)}#{func_id}")
        fn = kprobe_func_proto(func_id)
        if fn is None:
            raise self.fail(E.EINVAL, f"program of this type cannot use helper {func_id_name(func_id)}#{func_id}")
        if fn.gpl_only and not self.prog.gpl_compatible:
            raise self.fail(E.EINVAL, "cannot call GPL-restricted function from non-GPL compatible program")
        if fn.might_sleep and not self.prog.sleepable:
            raise self.fail(E.EINVAL, "helper call might sleep in a non-sleepable prog")
        name = func_id_name(func_id)[4:]
        meta = _CallMeta()
        for argno, kind in enumerate(fn.args, start=1):
            self._check_func_arg(st, argno, kind, meta, fn)
        if meta.map is not None and not map_func_compatible(meta.map.map_type, name):
            raise self.fail(
                E.EINVAL, f"cannot pass map_type {meta.map.map_type} into func {func_id_name(func_id)}#{func_id}"
            )
        regs = st.cur.regs
        if meta.release_ref:
            st.refs = tuple(ref for ref in st.refs if ref[0] != meta.release_ref)
            rid = meta.release_ref
            self._for_each_reg(st, lambda r: S.UNKNOWN if r.ref_obj_id == rid else r)
        for mark in meta.uninit_writes:
            mark()
        for r in range(1, 6):
            regs[r] = NOT_INIT_REG
        if fn.ret == "integer":
            regs[0] = S.UNKNOWN
        elif fn.ret == "void":
            regs[0] = NOT_INIT_REG
        elif fn.ret == "map_value_or_null" and self._lookup_never_null(name, meta):
            regs[0] = S.pointer(PTR_TO_MAP_VALUE, map=meta.map)
        elif fn.ret == "map_value_or_null":
            regs[0] = S.pointer(PTR_TO_MAP_VALUE_OR_NULL, map=meta.map, id=self._new_id())
        elif fn.ret == "ringbuf_mem_or_null":
            self._new_id()
            ref = self._new_id()
            st.refs = (*st.refs, (ref, idx))
            regs[0] = S.pointer(PTR_TO_RINGBUF_MEM_OR_NULL, mem_size=meta.mem_size, id=ref, ref_obj_id=ref)
        else:
            regs[0] = S.UNKNOWN
        if name in ("loop", "for_each_map_elem"):
            return self._push_callback(st, idx, name, meta)
        return idx + 1

    def _constant_map_key(self, st: State, reg: Reg, size: int) -> int | None:
        """``get_constant_map_key()``: the key a stack pointer argument points to when it is
        known (zeroed bytes, or a constant scalar spilled with the key's size); the slot's
        value then matters to the rest of the walk."""
        if reg.type != PTR_TO_STACK or not reg.var_is_const or reg.frameno != len(st.frames) - 1:
            return None
        off = reg.off + S.to_signed(reg.umin)
        spi, k = (-off - 1) // 8, (-off - 1) % 8
        types, spilled = st.cur.stack.get(spi, S._EMPTY_SLOT)
        zeros = next((k - i for i in range(k, -1, -1) if types[i] != S.STACK_ZERO), k + 1)
        if zeros >= size:
            return 0
        spill = next((k - i for i in range(k, -1, -1) if types[i] != S.STACK_SPILL), k + 1)
        if spilled is None or spilled.type != SCALAR or spill != size or not spilled.is_const:
            return None
        idx = self.cur_idx
        slots = self.precise_slot_sinks.get(idx, frozenset())
        if spi not in slots:
            self.precise_slot_sinks[idx] = slots | {spi}
            self._update_precision()
        return spilled.umin

    @staticmethod
    def _lookup_never_null(name: str, meta: _CallMeta) -> bool:
        """``can_elide_value_nullness()``: an array's element at a constant index below
        max_entries always exists, so bpf_map_lookup_elem() returns it, never NULL."""
        m = meta.map
        return (
            name == "map_lookup_elem"
            and m is not None
            and m.map_type in (BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_PERCPU_ARRAY)
            and meta.const_key is not None
            and meta.const_key < m.max_entries
        )

    def _push_callback(self, st: State, idx: int, name: str, meta: _CallMeta) -> int:
        """bpf_loop/bpf_for_each_map_elem: the path where the callback never runs goes on
        after the call; this one runs the callback body once in a new frame."""
        self._push(st, idx + 1)
        args = meta.saved
        frame = self._enter_frame(st, idx, meta.subprog, callback=name)
        if name == "loop":
            frame.regs[1] = S.UNKNOWN
            frame.regs[2] = args[3]
        else:
            m = meta.map
            frame.regs[1] = S.pointer(CONST_PTR_TO_MAP, map=m)
            frame.regs[2] = S.pointer(PTR_TO_MAP_KEY, map=m)
            frame.regs[3] = S.pointer(PTR_TO_MAP_VALUE, map=m)
            frame.regs[4] = args[3]
        return meta.subprog

    def _check_func_arg(self, st: State, argno: int, kind: str, meta: _CallMeta, fn: FuncProto) -> None:
        """``check_func_arg()``: argument ``argno`` (register rN) against its declared kind."""
        regs = st.cur.regs
        self._check_reg_arg(st, argno, True)
        reg = regs[argno]
        meta.saved[argno] = reg
        if kind == "anything":
            return
        is_null = reg.type == SCALAR and reg.is_const and reg.umin == 0
        nullable = kind in ("mem_or_null", "uninit_mem_or_null", "stack_or_null")
        ok_types = _ARG_REG_TYPES[kind]
        if not (nullable and is_null) and reg.type not in ok_types:
            raise self.fail(E.EACCES, f"R{argno} type={reg.type} expected={', '.join(ok_types)}")
        if kind == "const_map_ptr":
            meta.map = reg.map
        elif kind in ("map_key", "map_value", "uninit_map_value"):
            if meta.map is None:
                raise self.fail(E.EACCES, "invalid map_ptr to access map->key")
            size = meta.map.key_size if kind == "map_key" else meta.map.value_size
            self._helper_mem(st, argno, size, kind == "uninit_map_value", False, meta)
            if kind == "map_key":
                meta.const_key = self._constant_map_key(st, reg, size)
        elif kind in ("const_size", "const_size_or_zero"):
            if reg.smin < 0:
                raise self.fail(E.EACCES, f"R{argno} min value is negative, either use unsigned or 'var &= const'")
            if reg.umin == 0 and kind == "const_size":
                raise self.fail(E.EACCES, f"R{argno} invalid zero-sized read: u64=[{reg.umin},{reg.umax}]")
            if reg.umax >= BPF_MAX_VAR_SIZ:
                raise self.fail(E.EACCES, f"R{argno} unbounded memory access, use 'var &= const' or 'if (var < const)'")
            mem_kind = fn.args[argno - 2]
            mem_reg = regs[argno - 1]
            if mem_reg.type == SCALAR and reg.umax == 0:
                return
            self._helper_mem(st, argno - 1, reg.umax, mem_kind.startswith("uninit"), kind.endswith("zero"), meta)
        elif kind == "const_alloc_size_or_zero":
            if not reg.is_const:
                raise self.fail(E.EACCES, f"R{argno} is not a known constant'")
            meta.mem_size = reg.umin
        elif kind == "ringbuf_mem_release":
            if not reg.ref_obj_id:
                raise self.fail(E.EINVAL, f"R{argno} must be referenced when passed to release function")
            meta.release_ref = reg.ref_obj_id
        elif kind == "func":
            meta.subprog = reg.subprog
        elif kind == "const_str":
            assert reg.map is not None
            if not map_rdonly(reg.map):
                raise self.fail(E.EACCES, f"R{argno} does not point to a readonly map'")

    def _helper_mem(self, st: State, regno: int, size: int, write: bool, zero_ok: bool, meta: _CallMeta) -> None:
        """``check_helper_mem_access()``: ``size`` bytes at rN that the helper reads (they
        must be initialized) or writes (they become initialized after the call)."""
        reg = st.cur.regs[regno]
        if size == 0 and zero_ok:
            return
        if reg.type == PTR_TO_STACK:
            if size == 0:
                raise self.fail(E.EACCES, "invalid zero-sized read")
            frame, lo, hi = self._stack_bounds(st, regno, reg, 0, size, " write to" if write else " read from")
            if write:
                meta.uninit_writes.append(lambda: mark_stack(frame, lo, hi + size, S.STACK_MISC))
            else:
                self._stack_initialized(
                    frame, lo, hi + size, lambda o, i: f"invalid read from stack R{regno} off {o}+{i}"
                )
        elif reg.type == PTR_TO_MAP_VALUE:
            assert reg.map is not None
            if write and reg.map.map_flags & BPF_F_RDONLY_PROG:
                raise self.fail(
                    E.EACCES, f"write into map forbidden, value_size={reg.map.value_size} off={reg.off} size={size}"
                )
            self._check_region(regno, reg, reg.off, size, reg.map.value_size, "map value, value_size")
        elif reg.type == PTR_TO_MAP_KEY:
            assert reg.map is not None
            if write:
                raise self.fail(E.EACCES, f"write to change key R{regno} not allowed")
            self._check_region(regno, reg, reg.off, size, reg.map.key_size, "map key, key_size")
        else:
            self._check_region(regno, reg, reg.off, size, reg.mem_size, "memory, mem_size")
