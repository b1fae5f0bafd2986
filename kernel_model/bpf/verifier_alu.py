"""``check_alu_op()`` of ``kernel/bpf/verifier.c``: the ALU and ALU64 instructions' reserved
fields, the scalar ranges they produce (``adjust_scalar_min_max_vals()``, in
:mod:`~kernel_model.bpf.verifier_state`), and the little pointer arithmetic a privileged
program may do (``adjust_ptr_min_max_vals()``).
"""

from __future__ import annotations

import errno as E

from kernel_model.bpf import insn as I
from kernel_model.bpf import verifier_state as S
from kernel_model.bpf.verifier_env import BPF_MAX_VAR_OFF, VerifierEnv
from kernel_model.bpf.verifier_state import CONST_PTR_TO_MAP, PTR_TO_STACK, SCALAR, UNKNOWN, Reg, State

_ALU_STR = ("+=", "-=", "*=", "/=", "|=", "&=", "<<=", ">>=", "neg", "%=", "^=", "=", "s>>=", "endian")


class AluChecks(VerifierEnv):
    """Arithmetic on registers."""

    def _check_alu(self, st: State, insn: I.Insn, idx: int) -> None:
        """``check_alu_op()`` and ``adjust_reg_min_max_vals()``."""
        op = insn.code & 0xF0
        alu64 = insn.cls == I.BPF_ALU64
        bits = 64 if alu64 else 32
        x = insn.code & I.BPF_X
        regs = st.cur.regs
        if op in (I.BPF_NEG, I.BPF_END):
            name = "BPF_NEG" if op == I.BPF_NEG else "BPF_END"
            bad = insn.src != 0 or insn.off != 0
            if op == I.BPF_NEG:
                bad = bad or bool(x) or insn.imm != 0
            else:
                bad = bad or insn.imm not in (16, 32, 64) or (alu64 and bool(x))
            if bad:
                raise self.fail(E.EINVAL, f"{name} uses reserved fields")
            self._check_reg_arg(st, insn.dst, True)
            self._check_reg_arg(st, insn.dst, False)
            dst = regs[insn.dst]
            if dst.is_pointer:  # a privileged loader may turn a pointer into a number
                regs[insn.dst] = S.UNKNOWN
            elif op == I.BPF_NEG:
                regs[insn.dst] = S.alu_range(I.BPF_NEG, dst, S.const_reg(0), bits)
            else:
                regs[insn.dst] = self._endian(dst, insn, alu64)
            return
        if op == I.BPF_MOV:
            if x:
                allowed_off = (0, 8, 16, 32) if alu64 else (0, 8, 16)
                if insn.off not in allowed_off or insn.imm:
                    raise self.fail(E.EINVAL, "BPF_MOV uses reserved fields")
                self._check_reg_arg(st, insn.src, True)
            elif insn.src != 0 or insn.off != 0:
                raise self.fail(E.EINVAL, "BPF_MOV uses reserved fields")
            self._check_reg_arg(st, insn.dst, False)
            if not x:
                regs[insn.dst] = S.const_reg(insn.imm if alu64 else insn.imm & 0xFFFFFFFF)
                return
            src = regs[insn.src]
            if insn.off:
                if src.is_pointer:
                    regs[insn.dst] = S.UNKNOWN if alu64 else S.scalar32(0, S.U32)
                else:
                    regs[insn.dst] = S.sign_extend_range(src, insn.off, bits)
            elif alu64:
                if src.type == SCALAR and not src.is_const and src.id == 0:
                    src = src._replace(id=self._new_id())  # copies share what a later check learns
                    regs[insn.src] = src
                regs[insn.dst] = src
            else:
                regs[insn.dst] = S.zext32(src) if src.type == SCALAR else S.scalar32(0, S.U32)
            return
        if x:
            if insn.imm != 0 or insn.off not in (0, 1) or (insn.off == 1 and op not in (I.BPF_DIV, I.BPF_MOD)):
                raise self.fail(E.EINVAL, "BPF_ALU uses reserved fields")
            self._check_reg_arg(st, insn.src, True)
        elif insn.src != 0 or insn.off not in (0, 1) or (insn.off == 1 and op not in (I.BPF_DIV, I.BPF_MOD)):
            raise self.fail(E.EINVAL, "BPF_ALU uses reserved fields")
        self._check_reg_arg(st, insn.dst, True)
        if op in (I.BPF_DIV, I.BPF_MOD) and not x and insn.imm == 0:
            raise self.fail(E.EINVAL, "div by zero")
        if op in (I.BPF_LSH, I.BPF_RSH, I.BPF_ARSH) and not x and not 0 <= insn.imm < bits:
            raise self.fail(E.EINVAL, f"invalid shift {insn.imm}")
        self._check_reg_arg(st, insn.dst, False)
        dst = regs[insn.dst]
        src = regs[insn.src] if x else S.const_reg(insn.imm)
        if dst.is_pointer or src.is_pointer:
            regs[insn.dst] = self._ptr_alu(insn, op, alu64, dst, src, bool(x))
            if x and dst.is_pointer != src.is_pointer:
                self._mark_precise(idx, insn.src if dst.is_pointer else insn.dst)
            return
        regs[insn.dst] = S.alu_range(op, dst, src, bits, signed_div=insn.off == 1)

    def _endian(self, dst: Reg, insn: I.Insn, alu64: bool) -> Reg:
        width = insn.imm
        if dst.is_const:
            v = dst.umin & ((1 << width) - 1)
            if alu64 or insn.code & I.BPF_TO_BE:
                v = int.from_bytes(v.to_bytes(width // 8, "little"), "big")
            return S.const_reg(v)
        if not alu64 and not insn.code & I.BPF_TO_BE and dst.umax < (1 << width):
            return dst._replace(id=0)
        return S.scalar_range(0, (1 << width) - 1)

    def _ptr_alu(self, insn: I.Insn, op: int, alu64: bool, dst: Reg, src: Reg, x: bool) -> Reg:
        """``adjust_ptr_min_max_vals()``: a pointer moves by a scalar; little else is allowed."""
        d = insn.dst
        if dst.is_pointer and src.is_pointer:
            if op == I.BPF_SUB:
                return UNKNOWN
            raise self.fail(E.EACCES, f"R{d} pointer {_ALU_STR[op >> 4]} pointer prohibited")
        ptr, off_reg = (dst, src) if dst.is_pointer else (src, dst)
        if not alu64:
            if op == I.BPF_SUB:
                return S.scalar32(0, S.U32)
            raise self.fail(E.EACCES, f"R{d} 32-bit pointer arithmetic prohibited")
        if ptr.type in S.OR_NULL:
            raise self.fail(E.EACCES, f"R{d} pointer arithmetic on {ptr.type} prohibited, null-check it first")
        known = off_reg.is_const
        if ptr.type == CONST_PTR_TO_MAP and not (known and off_reg.umin == 0 and op == I.BPF_ADD):
            raise self.fail(E.EACCES, f"R{d} pointer arithmetic on {ptr.type} prohibited")
        # check_reg_sane_offset()
        val = S.to_signed(off_reg.umin)
        if known and not -BPF_MAX_VAR_OFF < val < BPF_MAX_VAR_OFF:
            raise self.fail(E.EINVAL, f"math between {ptr.type} pointer and {val} is not allowed")
        if off_reg.smin == S.S64_MIN:
            raise self.fail(
                E.EINVAL, f"math between {ptr.type} pointer and register with unbounded min value is not allowed"
            )
        if not -BPF_MAX_VAR_OFF < off_reg.smin < BPF_MAX_VAR_OFF:
            raise self.fail(E.EINVAL, f"value {off_reg.smin} makes {ptr.type} pointer be out of bounds")
        if op in (I.BPF_AND, I.BPF_OR, I.BPF_XOR):
            raise self.fail(E.EACCES, f"R{d} bitwise operator {_ALU_STR[op >> 4]} on pointer prohibited")
        if op not in (I.BPF_ADD, I.BPF_SUB):
            raise self.fail(E.EACCES, f"R{d} pointer arithmetic with {_ALU_STR[op >> 4]} operator prohibited")
        if op == I.BPF_SUB and not dst.is_pointer:
            raise self.fail(E.EACCES, f"R{d} tried to subtract pointer from scalar")
        if op == I.BPF_SUB and ptr.type == PTR_TO_STACK:
            raise self.fail(E.EACCES, f"R{d} subtraction from stack pointer prohibited")
        if known:
            return ptr._replace(off=ptr.off + (val if op == I.BPF_ADD else -val))
        var = S.alu_range(op, ptr._replace(type=SCALAR), off_reg, 64)
        return S.with_bounds8(ptr, var.bounds)._replace(id=0)
