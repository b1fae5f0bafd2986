"""``check_cond_jmp_op()`` of ``kernel/bpf/verifier.c``: a conditional jump's taken and
fall-through sides, each with the operands' bounds narrowed (``reg_set_min_max()``,
``is_branch_taken()``) and shared by the scalar's copies (``sync_linked_regs()``); a null
check of a ``*_or_null`` pointer (``mark_ptr_or_null_regs()``).
"""

from __future__ import annotations

import errno as E
from collections.abc import Callable

from kernel_model.bpf import insn as I
from kernel_model.bpf import verifier_state as S
from kernel_model.bpf.verifier_env import VerifierEnv
from kernel_model.bpf.verifier_state import SCALAR, Reg, State


class CondJmpChecks(VerifierEnv):
    """Conditional jumps."""

    def _check_cond_jmp(self, st: State, idx: int, insn: I.Insn, op: int, jmp32: bool) -> int:
        """``check_cond_jmp_op()``: follow the branch that must be taken, or both with the
        operands' bounds narrowed on each; a null check turns ``*_or_null`` copies into
        pointers on one side and into 0 (releasing a ringbuf record) on the other."""
        x = insn.code & I.BPF_X
        self._check_reg_arg(st, insn.dst, True)
        if (x and insn.imm) or (not x and insn.src):
            raise self.fail(E.EINVAL, "BPF_JMP/JMP32 uses reserved fields")
        if x:
            self._check_reg_arg(st, insn.src, True)
        regs = st.cur.regs
        dst = regs[insn.dst]
        src = regs[insn.src] if x else S.const_reg(insn.imm if not jmp32 else insn.imm & 0xFFFFFFFF)
        target = idx + insn.off + 1
        if not x and insn.imm == 0 and op in (I.BPF_JEQ, I.BPF_JNE) and dst.type in S.OR_NULL and not jmp32:
            other = self._push(st, target)
            null_side, nonnull_side = (other, st) if op == I.BPF_JEQ else (st, other)
            self._mark_ptr_or_null(null_side, dst, True)
            self._mark_ptr_or_null(nonnull_side, dst, False)
            return idx + 1
        if dst.is_pointer or src.is_pointer:
            if dst.is_pointer and dst.type not in S.OR_NULL and not x and insn.imm == 0 and not jmp32:
                if op == I.BPF_JEQ:
                    return idx + 1
                if op == I.BPF_JNE:
                    return target
            self._push(st, target)
            return idx + 1
        bits = 32 if jmp32 else 64
        taken = self._branch_regs(st, insn, True, bits)
        fall = self._branch_regs(st, insn, False, bits)
        if taken is None and fall is None:  # contradictory bounds: no execution gets here
            return idx + 1
        if fall is None:
            assert taken is not None
            self._narrow(st, taken)
            return target
        if taken is not None:
            self._narrow(self._push(st, target), taken)
        self._narrow(st, fall)
        return idx + 1

    def _branch_regs(self, st: State, insn: I.Insn, taken: bool, bits: int) -> list[tuple[int, Reg]] | None:
        """``reg_set_min_max()``: the compared registers as one side of the branch sees
        them, None when no execution takes that side (``is_branch_taken()``)."""
        regs = st.cur.regs
        x = insn.code & I.BPF_X
        dst = regs[insn.dst]
        src = regs[insn.src] if x else S.const_reg(insn.imm if bits == 64 else insn.imm & S.U32)
        r = S.refine(insn.code & 0xF0, S.bounds_of(dst, bits), S.bounds_of(src, bits), bits, taken)
        if r is None:
            return None
        new_dst = S.apply_bounds(dst, r[0], bits)
        new_src = S.apply_bounds(src, r[1], bits)
        if new_dst is None or new_src is None:
            return None
        return [(insn.dst, new_dst), (insn.src, new_src)] if x else [(insn.dst, new_dst)]

    def _narrow(self, st: State, regs: list[tuple[int, Reg]]) -> None:
        for regno, new in regs:
            st.cur.regs[regno] = new
            if new.id:  # sync_linked_regs(): copies of the scalar learn the same
                self._for_each_reg(st, _linked_to(new))

    def _mark_ptr_or_null(self, st: State, reg: Reg, is_null: bool) -> None:
        rid = reg.id

        def mark(r: Reg) -> Reg:
            if r.type not in S.OR_NULL or r.id != rid:
                return r
            if is_null:
                return S.const_reg(0)
            return r._replace(type=S.OR_NULL[r.type], id=0)

        self._for_each_reg(st, mark)
        if is_null and reg.ref_obj_id:
            st.refs = tuple(ref for ref in st.refs if ref[0] != reg.ref_obj_id)


def _linked_to(new: Reg) -> Callable[[Reg], Reg]:
    """Replace each scalar copy of ``new`` (same id) by it."""

    def sync(r: Reg) -> Reg:
        return new if r.type == SCALAR and r.id == new.id else r

    return sync
