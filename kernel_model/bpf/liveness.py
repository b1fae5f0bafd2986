"""Register liveness over a verified program: does the context pointer the program
starts with in r1 ever reach a use?

The interpreter needs ``struct pt_regs`` filled only for a program that can read it (a
load through r1 or a copy of it, or r1 handed to a helper or a subprogram).  The kernel
passes its pt_regs pointer for free; the model copies the task's registers, so a
program that never reads them - the bench's counter, most counting programs - skips the
copy.  Backward dataflow (``live_in = use | (live_out - def)``) over every instruction,
to a fixpoint; a helper call uses as many argument registers as its prototype has
arguments, every other call all five.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kernel_model.bpf.insn import (
    BPF_ALU,
    BPF_ALU64,
    BPF_ATOMIC,
    BPF_CALL,
    BPF_CMPXCHG,
    BPF_DW,
    BPF_END,
    BPF_EXIT,
    BPF_FETCH,
    BPF_IMM,
    BPF_JA,
    BPF_JMP,
    BPF_JMP32,
    BPF_LD,
    BPF_LDX,
    BPF_MOV,
    BPF_NEG,
    BPF_PSEUDO_CALL,
    BPF_ST,
    BPF_STX,
    BPF_X,
    Insn,
)

_ARGS = (0, 0b10, 0b110, 0b1110, 0b11110, 0b111110)  # r1..rN as bits, by N
_CALLER_SAVED = 0b111111  # r0-r5: a call defines them


def _effects(insns: Sequence[Insn], i: int, nargs: Mapping[int, int]) -> tuple[int, int, list[int]]:
    """(use bits, def bits, successors) of instruction ``i``."""
    insn = insns[i]
    code, dst, src = insn.code, insn.dst, insn.src
    cls, op = code & 0x07, code & 0xF0
    nxt = [i + 1] if i + 1 < len(insns) else []
    if cls in (BPF_ALU, BPF_ALU64):
        use = (1 << src) if code & BPF_X and op != BPF_END else 0
        if op not in (BPF_MOV,):
            use |= 1 << dst
        if op in (BPF_NEG, BPF_END):
            use |= 1 << dst
        return use, 1 << dst, nxt
    if cls == BPF_LD:
        if code == BPF_LD | BPF_DW | BPF_IMM:
            return 0, 1 << dst, [i + 2] if i + 2 < len(insns) else []
        return 0b111110, 1, nxt  # legacy packet loads: not for uprobe programs; conservative
    if cls == BPF_LDX:
        return 1 << src, 1 << dst, nxt
    if cls == BPF_ST:
        return 1 << dst, 0, nxt
    if cls == BPF_STX:
        use = (1 << dst) | (1 << src)
        if code & 0xE0 == BPF_ATOMIC:
            if insn.imm == BPF_CMPXCHG:
                return use | 1, 1, nxt
            if insn.imm & BPF_FETCH:
                return use, 1 << src, nxt
        return use, 0, nxt
    if cls in (BPF_JMP, BPF_JMP32):
        if op == BPF_EXIT:
            return 1, 0, []
        if op == BPF_CALL:
            if src == BPF_PSEUDO_CALL or cls == BPF_JMP32:
                return _ARGS[5], _CALLER_SAVED, nxt
            return _ARGS[min(nargs.get(insn.imm, 5), 5)] if insn.imm in nargs else _ARGS[5], _CALLER_SAVED, nxt
        off = insn.imm if (op == BPF_JA and cls == BPF_JMP32) else insn.off
        target = i + 1 + off
        succ = [target] if 0 <= target < len(insns) else []
        if op == BPF_JA:
            return 0, 0, succ
        use = (1 << dst) | ((1 << src) if code & BPF_X else 0)
        return use, 0, nxt + succ
    return 0b11111111111, 0, nxt  # unknown: everything live


def ctx_live_at_entry(insns: Sequence[Insn], nargs: Mapping[int, int]) -> bool:
    """Whether r1's value at instruction 0 can be read; ``nargs``: helper id -> the
    number of argument registers its prototype reads."""
    n = len(insns)
    effects = [_effects(insns, i, nargs) for i in range(n)]
    live_in = [0] * n
    changed = True
    while changed:
        changed = False
        for i in range(n - 1, -1, -1):
            use, defs, succ = effects[i]
            out = 0
            for s in succ:
                out |= live_in[s]
            new = use | (out & ~defs)
            if new != live_in[i]:
                live_in[i] = new
                changed = True
    return bool(n and live_in[0] & 0b10)
