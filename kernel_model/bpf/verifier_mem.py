"""``check_mem_access()`` of ``kernel/bpf/verifier.c`` and what it calls: loads and stores
through the context (``struct pt_regs``, read-only), the stack (spills and fills,
``check_stack_read/write_fixed_off()``, variable offsets), map values and keys, and
memory a helper returned (ringbuf records); and ``check_atomic()``.  The helper-argument
checks of :mod:`~kernel_model.bpf.verifier_calls` use the same stack and region bounds.
"""

from __future__ import annotations

import errno as E
from collections.abc import Callable

from kernel_model.bpf import insn as I
from kernel_model.bpf import verifier_state as S
from kernel_model.bpf.bpf_types import BPF_F_RDONLY_PROG, PT_REGS_SIZE
from kernel_model.bpf.verifier_env import BPF_MAX_VAR_OFF, VerifierEnv, map_rdonly
from kernel_model.bpf.verifier_state import (
    PTR_TO_CTX,
    PTR_TO_MAP_KEY,
    PTR_TO_MAP_VALUE,
    PTR_TO_MEM,
    PTR_TO_RINGBUF_MEM,
    PTR_TO_STACK,
    SCALAR,
    Frame,
    Reg,
    State,
)

# what a BPF_ST of 0 stores: zeroed bytes (STACK_ZERO), not a spilled register
ST_ZERO = S.const_reg(0)


class MemChecks(VerifierEnv):
    """Memory accesses: what a load yields, what a store leaves on the stack."""

    def _check_mem_access(
        self, st: State, regno: int, off: int, size: int, write: bool, value: Reg | None
    ) -> Reg | None:
        """``check_mem_access()``: the load's result register (None for a store)."""
        reg = st.cur.regs[regno]
        t = reg.type
        if t == PTR_TO_CTX:
            if reg.off or not reg.var_is_const or reg.umin:
                raise self.fail(E.EACCES, f"dereference of modified ctx ptr R{regno} off={reg.off} disallowed")
            if write or off < 0 or off + size > PT_REGS_SIZE or off % size:
                raise self.fail(E.EACCES, f"invalid bpf_context access off={off} size={size}")
            return S.UNKNOWN if size == 8 else S.scalar_range(0, (1 << (8 * size)) - 1)
        if t == PTR_TO_STACK:
            return self._stack_access(st, regno, reg, off, size, write, value)
        if t == PTR_TO_MAP_VALUE:
            m = reg.map
            assert m is not None
            if write and m.map_flags & BPF_F_RDONLY_PROG:
                raise self.fail(
                    E.EACCES, f"write into map forbidden, value_size={m.value_size} off={reg.off + off} size={size}"
                )
            self._check_region(regno, reg, reg.off + off, size, m.value_size, "map value, value_size")
            if not write and map_rdonly(m) and reg.var_is_const:
                start = reg.off + off + reg.umin
                data = m.lookup_value(bytes(m.key_size))
                if data is not None and start + size <= len(data):
                    return S.const_reg(int.from_bytes(data[start : start + size], "little"))
            return None if write else self._loaded(size)
        if t == PTR_TO_MAP_KEY:
            assert reg.map is not None
            if write:
                raise self.fail(E.EACCES, f"write to change key R{regno} not allowed")
            self._check_region(regno, reg, reg.off + off, size, reg.map.key_size, "map key, key_size")
            return self._loaded(size)
        if t in (PTR_TO_MEM, PTR_TO_RINGBUF_MEM):
            self._check_region(regno, reg, reg.off + off, size, reg.mem_size, "memory, mem_size")
            return None if write else self._loaded(size)
        raise self.fail(E.EACCES, f"R{regno} invalid mem access '{t}'")

    @staticmethod
    def _loaded(size: int) -> Reg:
        return S.UNKNOWN if size == 8 else S.scalar_range(0, (1 << (8 * size)) - 1)

    def _check_region(self, regno: int, reg: Reg, off: int, size: int, mem_size: int, what: str) -> None:
        """``check_mem_region_access()``: the access at the lowest and the highest offset
        the pointer's variable part allows must both fit in the object."""
        if reg.smin < 0 and (
            reg.smin == S.S64_MIN or not -(1 << 31) <= off + reg.smin < (1 << 31) or off + reg.smin < 0
        ):
            raise self.fail(
                E.EACCES,
                f"R{regno} min value is negative, either use unsigned index or do a if (index >=0) check.",
            )
        lo = reg.smin + off
        if not (lo >= 0 and lo + size <= mem_size and size > 0):
            raise self.fail(
                E.EACCES,
                f"R{regno} min value is outside of the allowed memory range",
                f"invalid access to {what}={mem_size} off={lo} size={size}",
            )
        if reg.umax >= BPF_MAX_VAR_OFF:
            raise self.fail(E.EACCES, f"R{regno} unbounded memory access, make sure to bounds check any such access")
        hi = reg.umax + off
        if not hi + size <= mem_size:
            raise self.fail(
                E.EACCES,
                f"R{regno} max value is outside of the allowed memory range",
                f"invalid access to {what}={mem_size} off={hi} size={size}",
            )

    def _stack_bounds(self, st: State, regno: int, reg: Reg, off: int, size: int, extra: str) -> tuple[Frame, int, int]:
        """``check_stack_access_within_bounds()``: the frame and the lowest and highest fp offsets."""
        total = reg.off + off
        if reg.var_is_const:
            lo = hi = total + S.to_signed(reg.umin)
        else:
            lo, hi = total + reg.smin, total + reg.smax
        if lo < -I.MAX_BPF_STACK or hi + size > 0 or (size <= 0 and hi >= 0):
            # check_stack_slot_within_bounds(): a start outside the stack is EACCES, an end
            # past the frame pointer EINVAL
            errno = E.EACCES if lo < -I.MAX_BPF_STACK or lo >= 0 else E.EINVAL
            if reg.var_is_const:
                raise self.fail(errno, f"invalid{extra} stack R{regno} off={total} size={size}")
            raise self.fail(
                errno,
                f"invalid variable-offset{extra} stack R{regno} var_off={_tnum_str(reg)} off={total} size={size}",
            )
        frame = st.frames[reg.frameno]
        self.stack_depth[frame.subprog] = max(self.stack_depth[frame.subprog], -lo)
        return frame, lo, hi

    def _stack_access(self, st: State, regno: int, reg: Reg, off: int, size: int, write: bool, value: Reg | None):
        if reg.var_is_const and (reg.off + off + S.to_signed(reg.umin)) % size:
            raise self.fail(
                E.EACCES,
                f"misaligned stack access off {S.to_signed(reg.umin)}+{reg.off}+{off} size {size}",
            )
        frame, lo, hi = self._stack_bounds(st, regno, reg, off, size, " write to" if write else " read from")
        if lo != hi:  # variable offset: every byte it may touch
            if write:
                mark_stack(frame, lo, hi + size, S.STACK_MISC)
                return None
            self._stack_initialized(
                frame, lo, hi + size, lambda o, i: f"invalid read from stack R{regno} var_off {o}+{i}"
            )
            return self._loaded(size)
        if write:
            assert value is not None
            self._stack_write(frame, lo, size, value)
            return None
        return self._stack_read(frame, lo, size)

    def _stack_write(self, frame: Frame, off: int, size: int, value: Reg) -> None:
        """``check_stack_write_fixed_off()``: a register stored whole (or a bounded scalar
        at a slot's start) is spilled and keeps its type; other bytes become misc or zero."""
        if value.is_pointer and size != 8:
            raise self.fail(E.EACCES, "invalid size of register spill")
        spi = (-off - 1) // 8
        fits = value.is_pointer or (value.type == SCALAR and value.umax >> (8 * size) == 0)
        if off % 8 == 0 and fits and value is not ST_ZERO:
            old, _ = frame.stack.get(spi, S._EMPTY_SLOT)
            if old[0] == S.STACK_SPILL and size < 8:
                old = old.replace(S.STACK_SPILL, S.STACK_MISC)
            types = "".join(S.STACK_SPILL if k >= 8 - size else old[k] for k in range(8))
            frame.stack[spi] = (types, value)
            return
        kind = S.STACK_ZERO if value.is_const and value.umin == 0 else S.STACK_MISC
        mark_stack(frame, off, off + size, kind)

    def _stack_read(self, frame: Frame, off: int, size: int) -> Reg:
        """``check_stack_read_fixed_off()``."""
        spi = (-off - 1) // 8
        types, spilled = frame.stack.get(spi, S._EMPTY_SLOT)
        if types[0] == S.STACK_SPILL or (spilled is not None and types[7] == S.STACK_SPILL):
            assert spilled is not None
            nspill = types.count(S.STACK_SPILL)
            if size == 8 and nspill == 8:
                return spilled
            if spilled.is_pointer:
                raise self.fail(E.EACCES, "invalid size of register fill")
            if off % 8 == 0 and size <= nspill:  # a narrower fill from the slot's start (little endian)
                mask = (1 << (8 * size)) - 1
                if spilled.umax <= mask:
                    return spilled if size == nspill else spilled._replace(id=0)
                return S.const_reg(spilled.umin & mask) if spilled.is_const else S.scalar_range(0, mask)
        all_zero = True
        for i in range(size):
            o = off + i
            t = frame.stack.get((-o - 1) // 8, S._EMPTY_SLOT)[0][(-o - 1) % 8]
            if t == S.STACK_INVALID and not self.features.allow_uninit_stack:
                raise self.fail(E.EACCES, f"invalid read from stack off {off}+{i} size {size}")
            all_zero = all_zero and t == S.STACK_ZERO
        return S.const_reg(0) if all_zero else self._loaded(size)

    def _stack_initialized(self, frame: Frame, lo: int, hi: int, msg: Callable[[int, int], str]) -> None:
        """``check_stack_range_initialized()`` for bytes [lo, hi) of a frame."""
        if self.features.allow_uninit_stack:
            return
        for o in range(lo, hi):
            if frame.stack.get((-o - 1) // 8, S._EMPTY_SLOT)[0][(-o - 1) % 8] == S.STACK_INVALID:
                raise self.fail(E.EACCES, f"{msg(lo, o - lo)} size {hi - lo}")

    def _check_atomic(self, st: State, insn: I.Insn) -> None:
        """``check_atomic()``: a read-modify-write of map values or stack, never the context."""
        ops = {I.BPF_ADD, I.BPF_AND, I.BPF_OR, I.BPF_XOR}
        ops |= {o | I.BPF_FETCH for o in ops} | {I.BPF_XCHG, I.BPF_CMPXCHG}
        if insn.imm not in ops:
            raise self.fail(E.EINVAL, f"BPF_ATOMIC uses invalid atomic opcode {insn.imm & 0xFFFFFFFF:02x}")
        size = I.SIZE_BYTES[insn.code & 0x18]
        if size not in (4, 8):
            raise self.fail(E.EINVAL, "invalid atomic operand size")
        self._check_reg_arg(st, insn.src, True)
        self._check_reg_arg(st, insn.dst, True)
        if insn.imm == I.BPF_CMPXCHG:
            self._check_reg_arg(st, 0, True)
        dst = st.cur.regs[insn.dst]
        if dst.type == PTR_TO_CTX:
            raise self.fail(E.EACCES, f"BPF_ATOMIC stores into R{insn.dst} {dst.type} is not allowed")
        self._check_mem_access(st, insn.dst, insn.off, size, False, None)
        self._check_mem_access(st, insn.dst, insn.off, size, True, S.UNKNOWN)
        if insn.imm & I.BPF_FETCH:
            load = 0 if insn.imm == I.BPF_CMPXCHG else insn.src
            self._check_reg_arg(st, load, False)
            st.cur.regs[load] = self._loaded(size)


def _tnum_str(reg: Reg) -> str:
    """``tnum_strn()`` of the known bits a range implies (``tnum_range()``)."""
    chi = reg.umin ^ reg.umax
    delta = (1 << chi.bit_length()) - 1
    return f"({reg.umin & ~delta:#x}; {delta:#x})"


def mark_stack(frame: Frame, lo: int, hi: int, kind: str) -> None:
    """Bytes [lo, hi) of the frame written with data: a spill they overlap is gone."""
    for o in range(lo, hi):
        spi, k = (-o - 1) // 8, (-o - 1) % 8
        types, spilled = frame.stack.get(spi, S._EMPTY_SLOT)
        if S.STACK_SPILL in types:
            types, spilled = types.replace(S.STACK_SPILL, S.STACK_MISC), None
        frame.stack[spi] = (types[:k] + kind + types[k + 1 :], spilled)
