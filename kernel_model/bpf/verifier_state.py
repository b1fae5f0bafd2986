"""The abstract state the verifier walks a program with (``struct bpf_verifier_state``,
``bpf_func_state``, ``bpf_reg_state`` and ``bpf_stack_state`` of
``include/linux/bpf_verifier.h``) and the value-range arithmetic on it.

A scalar register is a set of possible 64-bit values described by unsigned and signed
bounds (``umin_value``/``umax_value``/``smin_value``/``smax_value``) and the same four for
its low 32 bits (``u32_min_value``...), which the ALU32/JMP32 instructions clang emits for
``int`` work on; a pointer keeps its fixed offset in ``off`` and the range of a variable
offset added to it in the same bounds.  The kernel's tnum (known-bits) half is left out:
the bounds alone are what bounded loops and bounds-checked indexes need.  Comparisons
narrow the bounds on each branch (``reg_set_min_max``) and :func:`refine` says when a
branch cannot be taken at all, which is how a loop with a constant bound ends.

Pruning compares a new state with the ones already explored at the same insn
(:func:`states_equal`); a scalar whose value decides nothing further
(:func:`precise_live`, the kernel's precision marks) matches any scalar, so counters and
sums do not split the walk at every branch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from kernel_model.bpf.insn import (
    BPF_ADD,
    BPF_AND,
    BPF_ARSH,
    BPF_DIV,
    BPF_JEQ,
    BPF_JGE,
    BPF_JGT,
    BPF_JLE,
    BPF_JLT,
    BPF_JNE,
    BPF_JSET,
    BPF_JSGE,
    BPF_JSGT,
    BPF_JSLE,
    BPF_JSLT,
    BPF_LSH,
    BPF_MOD,
    BPF_MUL,
    BPF_NEG,
    BPF_OR,
    BPF_RSH,
    BPF_SUB,
    BPF_XOR,
    MAX_BPF_REG,
)

if TYPE_CHECKING:
    from kernel_model.bpf.bpf_types import BpfMap

U64 = (1 << 64) - 1
U32 = (1 << 32) - 1
S64_MIN, S64_MAX = -(1 << 63), (1 << 63) - 1
S32_MIN, S32_MAX = -(1 << 31), (1 << 31) - 1
BPF_REG_SIZE = 8

# register types, spelled as reg_type_str() prints them
NOT_INIT = "?"
SCALAR = "scalar"
PTR_TO_CTX = "ctx"
PTR_TO_STACK = "fp"
CONST_PTR_TO_MAP = "map_ptr"
PTR_TO_MAP_VALUE = "map_value"
PTR_TO_MAP_VALUE_OR_NULL = "map_value_or_null"
PTR_TO_MAP_KEY = "map_key"
PTR_TO_MEM = "mem"
PTR_TO_RINGBUF_MEM = "ringbuf_mem"
PTR_TO_RINGBUF_MEM_OR_NULL = "ringbuf_mem_or_null"
PTR_TO_FUNC = "func"
OR_NULL = {PTR_TO_MAP_VALUE_OR_NULL: PTR_TO_MAP_VALUE, PTR_TO_RINGBUF_MEM_OR_NULL: PTR_TO_RINGBUF_MEM}

# slot_type of each stack byte
STACK_INVALID, STACK_MISC, STACK_ZERO, STACK_SPILL = "I", "M", "Z", "S"


def to_signed(v: int, bits: int = 64) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


class Reg(NamedTuple):
    """``struct bpf_reg_state``: for a scalar the bounds are its value's, for a pointer
    those of the variable part of its offset (``off`` is the fixed part).  The ``*32``
    bounds are those of the low 32 bits (the subregister ALU32/JMP32 insns use)."""

    type: str = NOT_INIT
    umin: int = 0
    umax: int = U64
    smin: int = S64_MIN
    smax: int = S64_MAX
    off: int = 0
    id: int = 0  # links copies: one null check marks them all; scalars: copies share bounds
    ref_obj_id: int = 0  # the acquired reference this pointer holds (ringbuf record)
    map: BpfMap | None = None
    mem_size: int = 0
    frameno: int = 0  # PTR_TO_STACK: whose frame
    subprog: int = 0  # PTR_TO_FUNC: the callee's first instruction
    u32min: int = 0
    u32max: int = U32
    s32min: int = S32_MIN
    s32max: int = S32_MAX

    @property
    def is_const(self) -> bool:
        return self.umin == self.umax

    @property
    def is_pointer(self) -> bool:
        return self.type not in (SCALAR, NOT_INIT)

    @property
    def var_is_const(self) -> bool:
        return self.umin == self.umax

    @property
    def bounds(self) -> Bounds8:
        return self.umin, self.umax, self.smin, self.smax, self.u32min, self.u32max, self.s32min, self.s32max


Bounds = tuple[int, int, int, int]
Bounds8 = tuple[int, int, int, int, int, int, int, int]
FULL8: Bounds8 = (0, U64, S64_MIN, S64_MAX, 0, U32, S32_MIN, S32_MAX)


def sync_bounds(umin: int, umax: int, smin: int, smax: int, bits: int = 64) -> Bounds | None:
    """Tighten unsigned bounds from signed ones and back (each is exact only where the
    range does not cross the sign boundary); None when they contradict each other."""
    half = 1 << (bits - 1)
    mask = (1 << bits) - 1
    for _ in range(2):
        if umax < half or umin >= half:
            smin, smax = max(smin, to_signed(umin, bits)), min(smax, to_signed(umax, bits))
        if smin >= 0 or smax < 0:
            umin, umax = max(umin, smin & mask), min(umax, smax & mask)
        if umin > umax or smin > smax:
            return None
    return umin, umax, smin, smax


def sync8(b: Bounds8) -> Bounds8 | None:
    """``reg_bounds_sync()``: the 64-bit and the 32-bit bounds inform each other (the low
    half is known from the full value when the upper half is fixed or the value fits in
    an s32, and the full value from the low half when the upper half is fixed); None
    when no value satisfies them all - a branch no execution takes."""
    umin, umax, smin, smax, a, b_, c, d = b
    for _ in range(2):
        r64 = sync_bounds(umin, umax, smin, smax, 64)
        r32 = sync_bounds(a, b_, c, d, 32)
        if r64 is None or r32 is None:
            return None
        umin, umax, smin, smax = r64
        a, b_, c, d = r32
        if umin >> 32 == umax >> 32:
            upper = umin & ~U32
            a, b_ = max(a, umin & U32), min(b_, umax & U32)
            if a > b_:
                return None
            umin, umax = max(umin, upper | a), min(umax, upper | b_)
        if S32_MIN <= smin and smax <= S32_MAX:
            c, d = max(c, smin), min(d, smax)
        if smin >> 32 == smax >> 32 and c >= 0 and smin >= 0:
            upper = smin & ~U32
            smin, smax = max(smin, upper | a), min(smax, upper | b_)
        if umin > umax or smin > smax or a > b_ or c > d:
            return None
    return umin, umax, smin, smax, a, b_, c, d


def with_bounds8(reg: Reg, b: Bounds8 | None) -> Reg:
    """``reg`` with new bounds (synced); an unknown scalar when they contradict."""
    s = sync8(b) if b is not None else None
    if s is None:
        return reg._replace(
            umin=0, umax=U64, smin=S64_MIN, smax=S64_MAX, u32min=0, u32max=U32, s32min=S32_MIN, s32max=S32_MAX
        )
    return reg._replace(umin=s[0], umax=s[1], smin=s[2], smax=s[3], u32min=s[4], u32max=s[5], s32min=s[6], s32max=s[7])


NOT_INIT_REG = Reg()
UNKNOWN = Reg(SCALAR)


def const_reg(value: int) -> Reg:
    value &= U64
    lo = value & U32
    return Reg(
        SCALAR,
        value,
        value,
        to_signed(value),
        to_signed(value),
        u32min=lo,
        u32max=lo,
        s32min=to_signed(lo, 32),
        s32max=to_signed(lo, 32),
    )


def pointer(type_: str, **kw) -> Reg:
    """A pointer with a fixed offset only (variable part known zero)."""
    return Reg(type_, 0, 0, 0, 0, u32min=0, u32max=0, s32min=0, s32max=0, **kw)


def scalar_range(umin: int, umax: int, smin: int = S64_MIN, smax: int = S64_MAX) -> Reg:
    return with_bounds8(UNKNOWN, (umin, umax, smin, smax, 0, U32, S32_MIN, S32_MAX))


def scalar32(u32min: int, u32max: int, s32min: int = S32_MIN, s32max: int = S32_MAX) -> Reg:
    """A zero-extended 32-bit result with these low-half bounds."""
    b = sync_bounds(u32min, u32max, s32min, s32max, 32)
    if b is None:
        b = (0, U32, S32_MIN, S32_MAX)
    return with_bounds8(UNKNOWN, (b[0], b[1], b[0], b[1], *b))


# ----------------------------------------------------------------------------- ALU on ranges


def alu_const(op: int, a: int, b: int, bits: int, signed_div: bool = False) -> int:
    """One ALU operation on known values as ``___bpf_prog_run`` computes it (division by
    zero gives 0, modulo by zero leaves the dividend, shifts are masked)."""
    mask = (1 << bits) - 1
    a, b = a & mask, b & mask
    if op == BPF_ADD:
        r = a + b
    elif op == BPF_SUB:
        r = a - b
    elif op == BPF_MUL:
        r = a * b
    elif op in (BPF_DIV, BPF_MOD):
        if b == 0:
            r = 0 if op == BPF_DIV else a
        elif signed_div:
            sa, sb = to_signed(a, bits), to_signed(b, bits)
            q = abs(sa) // abs(sb) * (1 if (sa < 0) == (sb < 0) else -1)
            r = q if op == BPF_DIV else sa - q * sb
        else:
            r = a // b if op == BPF_DIV else a % b
    elif op == BPF_OR:
        r = a | b
    elif op == BPF_AND:
        r = a & b
    elif op == BPF_XOR:
        r = a ^ b
    elif op == BPF_LSH:
        r = a << (b & (bits - 1))
    elif op == BPF_RSH:
        r = a >> (b & (bits - 1))
    elif op == BPF_ARSH:
        r = to_signed(a, bits) >> (b & (bits - 1))
    elif op == BPF_NEG:
        r = -a
    else:
        raise ValueError(f"alu op {op:#x}")
    return r & mask


def low32(reg: Reg) -> tuple[int, int]:
    """The unsigned range of a scalar's low 32 bits (the operand of an ALU32/JMP32 insn)."""
    return reg.u32min, reg.u32max


def _range_op(op: int, a: Bounds, b: Bounds, bits: int, signed_div: bool) -> Bounds:
    """Unsigned and signed bounds of ``a op b`` in ``bits``-bit arithmetic."""
    alo, ahi, asmin, asmax = a
    blo, bhi, bsmin, bsmax = b
    top = (1 << bits) - 1
    smin_full, smax_full = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    lo, hi, smin, smax = 0, top, smin_full, smax_full
    if op == BPF_ADD:
        if ahi + bhi <= top:
            lo, hi = alo + blo, ahi + bhi
        if smin_full <= asmin + bsmin and asmax + bsmax <= smax_full:
            smin, smax = asmin + bsmin, asmax + bsmax
    elif op == BPF_SUB:
        if alo >= bhi:
            lo, hi = alo - bhi, ahi - blo
        if smin_full <= asmin - bsmax and asmax - bsmin <= smax_full:
            smin, smax = asmin - bsmax, asmax - bsmin
    elif op == BPF_MUL:
        if ahi * bhi <= top:
            lo, hi = alo * blo, ahi * bhi
    elif op == BPF_DIV and not signed_div:
        lo, hi = (alo // bhi, ahi // blo) if blo > 0 else (0, ahi)
    elif op == BPF_MOD and not signed_div:
        hi = min(ahi, bhi - 1) if blo > 0 else ahi
    elif op == BPF_AND:
        hi = min(ahi, bhi)
        if asmin >= 0 or bsmin >= 0:
            smin, smax = 0, min(asmax if asmin >= 0 else smax_full, bsmax if bsmin >= 0 else smax_full)
    elif op in (BPF_OR, BPF_XOR):
        hi = (1 << max(ahi.bit_length(), bhi.bit_length())) - 1
        lo = max(alo, blo) if op == BPF_OR else 0
    elif op == BPF_LSH and bhi < bits:
        if (ahi << bhi) <= top:
            lo, hi = alo << blo, ahi << bhi
    elif op == BPF_RSH and bhi < bits:
        lo, hi = alo >> bhi, ahi >> blo
    elif op == BPF_ARSH and blo == bhi and blo < bits:
        smin, smax = asmin >> blo, asmax >> blo
    return lo, hi, smin, smax


# ops whose result's low 32 bits depend only on the operands' low 32 bits
_LOW_HALF_OPS = (BPF_ADD, BPF_SUB, BPF_MUL, BPF_AND, BPF_OR, BPF_XOR)


def alu_range(op: int, a: Reg, b: Reg, bits: int, signed_div: bool = False) -> Reg:
    """``adjust_scalar_min_max_vals()``: the result of ``a op b`` on scalars; 32-bit results
    are zero-extended to 64 bits as the ALU32 class does."""
    # is_safe_to_compute_dst_reg_range(): division and modulo, and shifts by an unknown or
    # oversized amount, leave nothing known (even of constants, and not even the zero upper
    # half of a 32-bit result: the kernel returns before zero-extending)
    shift = op in (BPF_LSH, BPF_RSH, BPF_ARSH)
    if op in (BPF_DIV, BPF_MOD) or (shift and not (b.is_const and b.umin < bits)):
        return UNKNOWN
    if bits == 32:
        if a.u32min == a.u32max and b.u32min == b.u32max:
            return const_reg(alu_const(op, a.u32min, b.u32min, 32, signed_div))
        r = _range_op(
            op, (a.u32min, a.u32max, a.s32min, a.s32max), (b.u32min, b.u32max, b.s32min, b.s32max), 32, signed_div
        )
        return scalar32(*r)
    if a.is_const and b.is_const:
        return const_reg(alu_const(op, a.umin, b.umin, 64, signed_div))
    r64 = _range_op(op, (a.umin, a.umax, a.smin, a.smax), (b.umin, b.umax, b.smin, b.smax), 64, signed_div)
    r32: Bounds = (0, U32, S32_MIN, S32_MAX)
    if op in _LOW_HALF_OPS:
        r32 = _range_op(
            op, (a.u32min, a.u32max, a.s32min, a.s32max), (b.u32min, b.u32max, b.s32min, b.s32max), 32, signed_div
        )
    if op == BPF_LSH and b.is_const and b.umin == 32 and a.s32min >= 0:
        # the compiler's "<<= 32, s>>= 32" sign extension: a non-negative s32 moves up whole
        r64 = (r64[0], r64[1], a.s32min << 32, a.s32max << 32)
    if op == BPF_LSH and b.is_const and b.umin >= 32:
        r32 = (0, 0, 0, 0)
    return with_bounds8(UNKNOWN, (*r64, *r32))


def sign_extend_range(reg: Reg, from_bits: int, to_bits: int = 64) -> Reg:
    """``movsx``/``ldsx``: the low ``from_bits`` of a scalar sign-extended (then truncated
    to ``to_bits`` for the 32-bit form)."""
    half = 1 << (from_bits - 1)
    if reg.is_const or (reg.u32min == reg.u32max and from_bits <= 32):
        v = reg.umin if reg.is_const else reg.u32min
        return const_reg(to_signed(v, from_bits) & ((1 << to_bits) - 1))
    if reg.umax < half:
        return reg._replace(id=0)
    if from_bits == 32 and to_bits == 64:
        return with_bounds8(UNKNOWN, (0, U64, reg.s32min, reg.s32max, reg.u32min, reg.u32max, reg.s32min, reg.s32max))
    if to_bits == 32:
        return scalar32(0, U32, -half, half - 1)
    return scalar_range(0, U64, -half, half - 1)


def zext32(reg: Reg) -> Reg:
    """A 32-bit result (or ``w = w`` move): the low half, zero-extended."""
    if reg.umax <= U32:
        return reg._replace(id=0)
    return scalar32(reg.u32min, reg.u32max, reg.s32min, reg.s32max)


# ----------------------------------------------------------------------------- branches

NEGATE = {
    BPF_JEQ: BPF_JNE,
    BPF_JNE: BPF_JEQ,
    BPF_JGT: BPF_JLE,
    BPF_JLE: BPF_JGT,
    BPF_JGE: BPF_JLT,
    BPF_JLT: BPF_JGE,
    BPF_JSGT: BPF_JSLE,
    BPF_JSLE: BPF_JSGT,
    BPF_JSGE: BPF_JSLT,
    BPF_JSLT: BPF_JSGE,
}
_SWAP = {BPF_JLT: BPF_JGT, BPF_JLE: BPF_JGE, BPF_JSLT: BPF_JSGT, BPF_JSLE: BPF_JSGE}


def refine(op: int, a: Bounds, b: Bounds, bits: int, taken: bool) -> tuple[Bounds, Bounds] | None:
    """``reg_set_min_max()`` for ``if a op b``: the operands' bounds on the branch where the
    comparison is ``taken`` (or not), None when that branch is impossible - which is how
    ``is_branch_taken()`` prunes a loop's exit or its back edge."""
    if op == BPF_JSET:
        if a[0] == a[1] and b[0] == b[1]:
            return (a, b) if bool(a[0] & b[0]) == taken else None
        if taken and (a[1] == 0 or b[1] == 0):
            return None
        return a, b
    if not taken:
        op = NEGATE[op]
    if op in _SWAP:
        r = refine(_SWAP[op], b, a, bits, True)
        return None if r is None else (r[1], r[0])
    aumin, aumax, asmin, asmax = a
    bumin, bumax, bsmin, bsmax = b
    if op == BPF_JEQ:
        aumin = bumin = max(aumin, bumin)
        aumax = bumax = min(aumax, bumax)
        asmin = bsmin = max(asmin, bsmin)
        asmax = bsmax = min(asmax, bsmax)
    elif op == BPF_JNE:
        if aumin == aumax and bumin == bumax and aumin == bumin:
            return None
        if bumin == bumax:
            aumin, aumax, asmin, asmax = _exclude(aumin, aumax, asmin, asmax, bumin, bsmin)
        if aumin == aumax:
            bumin, bumax, bsmin, bsmax = _exclude(bumin, bumax, bsmin, bsmax, aumin, asmin)
    elif op == BPF_JGT:
        aumin, bumax = max(aumin, bumin + 1), min(bumax, aumax - 1)
    elif op == BPF_JGE:
        aumin, bumax = max(aumin, bumin), min(bumax, aumax)
    elif op == BPF_JSGT:
        asmin, bsmax = max(asmin, bsmin + 1), min(bsmax, asmax - 1)
    elif op == BPF_JSGE:
        asmin, bsmax = max(asmin, bsmin), min(bsmax, asmax)
    ra = sync_bounds(aumin, aumax, asmin, asmax, bits)
    rb = sync_bounds(bumin, bumax, bsmin, bsmax, bits)
    if ra is None or rb is None:
        return None
    return ra, rb


def _exclude(umin: int, umax: int, smin: int, smax: int, u: int, s: int) -> Bounds:
    """Drop the value ``u`` (``s`` signed) from a range when it sits at one of its ends."""
    if umin == u:
        umin += 1
    if umax == u:
        umax -= 1
    if smin == s:
        smin += 1
    if smax == s:
        smax -= 1
    return umin, umax, smin, smax


def bounds_of(reg: Reg, bits: int) -> Bounds:
    """A scalar's bounds as a JMP (64-bit) or JMP32 comparison sees them."""
    if bits == 64:
        return reg.umin, reg.umax, reg.smin, reg.smax
    return reg.u32min, reg.u32max, reg.s32min, reg.s32max


def apply_bounds(reg: Reg, b: Bounds, bits: int) -> Reg | None:
    """Narrow a scalar to refined comparison bounds (None: no value fits them all)."""
    cur = reg.bounds
    new = (*b, *cur[4:]) if bits == 64 else (*cur[:4], *b)
    s = sync8(new)
    if s is None:
        return None
    return with_bounds8(reg, s)


# ----------------------------------------------------------------------------- frames and states


@dataclass
class Frame:
    """``struct bpf_func_state``: one call frame's registers and stack (stack slots by
    index, slot i covering ``fp-8*(i+1)`` .. ``fp-8*i``; each is its 8 byte types and the
    spilled register, if any)."""

    regs: list[Reg]
    callsite: int = -1  # the call insn in the caller; -1 for the main program
    subprog: int = 0  # index into subprog_starts
    frameno: int = 0
    callback: str = ""  # the helper that calls this frame as a callback ("loop", ...)
    stack: dict[int, tuple[str, Reg | None]] = field(default_factory=dict)

    def copy(self) -> Frame:
        return Frame(list(self.regs), self.callsite, self.subprog, self.frameno, self.callback, dict(self.stack))


def new_frame(frameno: int, callsite: int, subprog: int) -> Frame:
    regs = [NOT_INIT_REG] * MAX_BPF_REG
    regs[10] = pointer(PTR_TO_STACK, frameno=frameno)
    return Frame(regs, callsite, subprog, frameno)


@dataclass
class State:
    """``struct bpf_verifier_state``: the call frames, the acquired references (id and the
    insn that acquired it) and the explored state this path continues from (for the
    branch counts that tell a loop from a join)."""

    frames: list[Frame]
    refs: tuple[tuple[int, int], ...] = ()
    parent: Explored | None = None

    @property
    def cur(self) -> Frame:
        return self.frames[-1]

    def copy(self) -> State:
        return State([f.copy() for f in self.frames], self.refs, self.parent)


@dataclass(eq=False)
class Explored:
    """A state kept at a prune point; ``branches`` counts the paths from it still being
    verified (non-zero: it is on the current path, so reaching it again is a loop)."""

    state: State
    branches: int = 1
    parent: Explored | None = None
    hits: int = 0
    misses: int = 0


class _IdMap:
    """``check_ids()``: ids in the old state must correspond one-to-one to the current's."""

    def __init__(self) -> None:
        self.fwd: dict[int, int] = {}
        self.back: dict[int, int] = {}

    def ok(self, old: int, cur: int) -> bool:
        if old == 0:
            return True
        if cur == 0:
            return False
        if self.fwd.setdefault(old, cur) != cur:
            return False
        return self.back.setdefault(cur, old) == old


def regsafe(old: Reg, cur: Reg, ids: _IdMap, precise: bool = True) -> bool:
    """``regsafe()``: every execution ``cur`` describes is one ``old`` already covered; a
    scalar whose value decides nothing from here on matches any scalar."""
    if old.type == NOT_INIT:
        return True  # old never read it (reading would have failed)
    if old.type != cur.type:
        return False
    if old.type == SCALAR and not precise:
        return True
    if not (old.umin <= cur.umin and cur.umax <= old.umax and old.smin <= cur.smin and cur.smax <= old.smax):
        return False
    if not (
        old.u32min <= cur.u32min and cur.u32max <= old.u32max and old.s32min <= cur.s32min <= cur.s32max <= old.s32max
    ):
        return False
    if old.type == SCALAR:
        return ids.ok(old.id, cur.id)
    return (
        old.off == cur.off
        and old.map is cur.map
        and old.mem_size == cur.mem_size
        and old.frameno == cur.frameno
        and old.subprog == cur.subprog
        and ids.ok(old.id, cur.id)
        and ids.ok(old.ref_obj_id, cur.ref_obj_id)
    )


_EMPTY_SLOT = (STACK_INVALID * BPF_REG_SIZE, None)


def stacksafe(old: Frame, cur: Frame, ids: _IdMap, precise: Precise | None = None) -> bool:
    """``stacksafe()``: bytes old left uninitialized or treated as unknown accept anything;
    spilled registers must be covered as registers are."""
    for slot, (otypes, oreg) in old.stack.items():
        ctypes, creg = cur.stack.get(slot, _EMPTY_SLOT)
        if otypes[0] == STACK_SPILL:
            exact = precise is None or precise.all_slots or slot in precise.slots
            if ctypes[0] != STACK_SPILL or creg is None or oreg is None or not regsafe(oreg, creg, ids, exact):
                return False
            continue
        for ot, ct in zip(otypes, ctypes):
            if ot in (STACK_INVALID, STACK_MISC):
                continue
            if ot != ct:
                return False
    return True


def states_equal(
    old: State, cur: State, exact: bool, precise: Callable[[int], Precise | None] = lambda k: None
) -> bool:
    """``states_equal()``: ``exact`` for loop detection (the very same state again),
    otherwise whether ``cur`` is contained in ``old`` so its path can be pruned
    (``precise(k)``: which scalars of frame k still matter, None: all)."""
    if len(old.frames) != len(cur.frames):
        return False
    if exact:
        return old.refs == cur.refs and all(
            o.regs == c.regs and o.stack == c.stack and o.callsite == c.callsite for o, c in zip(old.frames, cur.frames)
        )
    ids = _IdMap()
    if len(old.refs) != len(cur.refs):
        return False
    for (oid, _), (cid, _) in zip(old.refs, cur.refs):
        if not ids.ok(oid, cid):
            return False
    for k, (o, c) in enumerate(zip(old.frames, cur.frames)):
        if o.callsite != c.callsite:
            return False
        p = precise(k)
        mask = p.regs if p is not None else -1
        if not all(regsafe(ro, rc, ids, bool(mask >> r & 1)) for r, (ro, rc) in enumerate(zip(o.regs, c.regs))):
            return False
        if not stacksafe(o, c, ids, p):
            return False
    return True


def reg_str(reg: Reg) -> str:
    """A register as ``print_verifier_state()`` shows it (the common cases)."""
    t = reg.type
    if t == SCALAR:
        if reg.is_const:
            return str(reg.smin)
        parts = []
        if reg.smin != S64_MIN and reg.smin != reg.umin:
            parts.append(f"smin={reg.smin}")
        if reg.smax != S64_MAX and reg.smax != reg.umax:
            parts.append(f"smax={reg.smax}")
        if reg.umin:
            parts.append(f"umin={reg.umin}")
        if reg.umax != U64:
            parts.append(f"umax={reg.umax}")
        return f"scalar({','.join(parts)})"
    if t == PTR_TO_STACK:
        return f"fp{reg.off}" if reg.off else "fp0"
    parts = []
    if reg.id:
        parts.append(f"id={reg.id}")
    if reg.ref_obj_id:
        parts.append(f"ref_obj_id={reg.ref_obj_id}")
    if reg.off:
        parts.append(f"off={reg.off}")
    if reg.map is not None:
        if t in (PTR_TO_MAP_VALUE, PTR_TO_MAP_VALUE_OR_NULL):
            parts.append(f"map={reg.map.name}")
        parts.append(f"ks={reg.map.key_size},vs={reg.map.value_size}")
    if t in (PTR_TO_MEM, PTR_TO_RINGBUF_MEM, PTR_TO_RINGBUF_MEM_OR_NULL):
        parts.append(f"sz={reg.mem_size}")
    return f"{t}({','.join(parts)})"


def state_str(state: State) -> str:
    """The current frame's initialized registers and stack slots, as the kernel prints
    a state (``R0=0 R1=ctx() R10=fp0 fp-8=mmmmmmmm``)."""
    frame = state.cur
    out = [f"R{i}={reg_str(r)}" for i, r in enumerate(frame.regs) if r.type != NOT_INIT]
    for spi in sorted(frame.stack):
        types, spilled = frame.stack[spi]
        if spilled is not None and types == STACK_SPILL * BPF_REG_SIZE:
            out.append(f"fp{-8 * (spi + 1)}={reg_str(spilled)}")
        elif types != STACK_INVALID * BPF_REG_SIZE:
            out.append(f"fp{-8 * (spi + 1)}=" + types.translate(str.maketrans("IMZS", "?m0r")))
    return " ".join(out)


# ----------------------------------------------------------------------------- precision


class Precise(NamedTuple):
    """Which scalars' values still matter at an insn: registers (a bitmask), stack slots of
    the frame (spi indexes), or every stack slot."""

    regs: int = 0
    slots: frozenset[int] = frozenset()
    all_slots: bool = False

    def union(self, o: Precise) -> Precise:
        return Precise(self.regs | o.regs, self.slots | o.slots, self.all_slots or o.all_slots)


_ARGS = 0b111110  # r1-r5


def bit(regno: int) -> int:
    return 1 << regno


_CALLER_SAVED = 0b111111  # r0-r5


def precise_live(
    insns: list,
    starts: list[int],
    helper_args: Callable[[int], int],
    sinks: dict[int, int],
    slot_sinks: dict[int, frozenset[int]],
    main_ret: bool,
) -> list[Precise]:
    """The scalars whose exact bounds may still decide something at each insn: a backward
    flow from the uses where a value matters (a memory access's address, a conditional
    jump's operands, a helper's sized or pointer arguments, the value added to a pointer,
    a return value) through the moves, arithmetic, spills and fills that feed them.

    The kernel learns the same on the fly (``mark_chain_precision()`` backtracking from
    each such use): a scalar that nothing decisive ever reads is compared as "any scalar"
    when states are pruned, so a loop that only counts or sums converges instead of
    forking at every branch.  ``helper_args(func_id)`` is the bitmask of a helper's
    argument registers whose value matters; ``sinks`` adds, by insn, the registers found
    to matter there while verifying (a scalar added to a pointer), ``slot_sinks`` the stack
    slots (a constant array key); ``main_ret``: whether
    the main program's return value is checked (session programs return 0 or 1).
    """
    n = len(insns)
    live = [Precise() for _ in range(n)]
    bounds = [*sorted(starts), n]
    for s in range(len(bounds) - 1):
        start, end = bounds[s], bounds[s + 1]
        changed = True
        while changed:
            changed = False
            for i in range(end - 1, start - 1, -1):
                new = _transfer(insns, i, start, end, live, helper_args, main_ret or s > 0)
                if i in sinks:
                    new = new._replace(regs=new.regs | sinks[i])
                if i in slot_sinks:
                    new = new._replace(slots=new.slots | slot_sinks[i])
                if new != live[i]:
                    live[i] = new
                    changed = True
    return live


def _transfer(insns: list, i: int, start: int, end: int, live: list[Precise], helper_args, ret: bool) -> Precise:
    insn = insns[i]
    cls, op, code = insn.code & 0x07, insn.code & 0xF0, insn.code
    if i > start and insns[i - 1].code == 0x18:  # second half of a lddw
        return live[i + 1] if i + 1 < end else Precise()

    def after(*targets: int) -> Precise:
        out = Precise()
        for t in targets:
            if start <= t < end:
                out = out.union(live[t])
        return out

    if cls in (0x05, 0x06):  # JMP, JMP32
        if op == 0x90:  # exit: the return value is checked (session programs, callbacks) or used by callers
            return Precise(bit(0) if ret else 0)
        if op == 0x80:
            out = after(i + 1)
            if insn.src == 1:  # bpf-to-bpf: the callee sees r1-r5 and, through pointers, our stack
                return Precise((out.regs & ~_CALLER_SAVED) | _ARGS, out.slots, True)
            if insn.src == 2:
                return Precise(out.regs & ~_CALLER_SAVED, out.slots, out.all_slots)
            args = helper_args(insn.imm)
            return Precise((out.regs & ~_CALLER_SAVED) | args, out.slots, out.all_slots or insn.imm in (164, 181))
        if op == 0x00:
            target = i + (insn.imm if cls == 0x06 else insn.off) + 1
            return after(target)
        out = after(i + 1, i + insn.off + 1)
        used = bit(insn.dst) | (bit(insn.src) if code & 0x08 else 0)
        return out._replace(regs=out.regs | used)
    out = after(i + 2 if code == 0x18 else i + 1)
    regs, slots, all_slots = out.regs, out.slots, out.all_slots
    if cls in (0x04, 0x07):  # ALU, ALU64
        d, s = bit(insn.dst), bit(insn.src)
        x = code & 0x08
        if op == 0xB0:  # mov
            if regs & d:
                regs = (regs & ~d) | (s if x else 0)
            return Precise(regs, slots, all_slots)
        if x and regs & d:
            regs |= s
        return Precise(regs, slots, all_slots)
    if code == 0x18:
        return Precise(regs & ~bit(insn.dst), slots, all_slots)
    size = {0x00: 4, 0x08: 2, 0x10: 1, 0x18: 8}[code & 0x18]
    if cls == 0x01:  # LDX: the address matters; the loaded value came from where it was stored
        d = bit(insn.dst)
        if regs & d:
            regs &= ~d
            if insn.src == 10:
                slots = slots | {(-insn.off - 1) // 8}
            else:
                all_slots = True
        return Precise(regs | bit(insn.src), slots, all_slots)
    if cls in (0x02, 0x03):  # ST, STX
        regs |= bit(insn.dst)
        if code & 0xE0 == 0xC0:  # atomic
            return Precise(regs | bit(insn.src) | bit(0), slots, all_slots)
        if insn.dst == 10:
            spi = (-insn.off - 1) // 8
            if spi in slots:
                if cls == 0x03:
                    regs |= bit(insn.src)
                if size == 8:
                    slots = slots - {spi}
        elif cls == 0x03 and (slots or all_slots):
            regs |= bit(insn.src)
        return Precise(regs, slots, all_slots)
    return out
