"""The eBPF interpreter: ``___bpf_prog_run`` of ``kernel/bpf/core.c``.

A program reaches the interpreter verified: every ``lddw`` already holds a plain 64-bit
value (a map's address, a callback's ``BPF_FUNC_PTR_BASE + index``), every access is
proven in bounds.  The interpreter still never trusts it: whatever a verified program
never does (an unknown opcode, an access outside every object, a jump out of the
program, running past the instruction cap) is a :class:`BpfRuntimeError`, never a crash.

Speed: each program is decoded once per :class:`BpfVm` into a list of closures, one per
instruction slot, each taking the register file and returning the index of the next
instruction, so the dispatch loop is ``pc = code[pc](regs)``.  The closures for ALU and
conditional-jump instructions are generated from expression templates (one factory per
distinct expression, compiled once per VM), with the operands (register numbers, the
immediate already masked and sign-extended as ``core.c`` uses it, the jump target) bound
as closure cells.  The instruction cap costs nothing per instruction: every dispatch
loop of a run, nested ones (bpf-to-bpf calls, ``bpf_loop`` callbacks) included, draws
from one shared ``range`` iterator, and a loop that exhausts it ends the run.
"""

from __future__ import annotations

import operator
import re
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from kernel_model.bpf.bpf_types import BPF_FUNC_PTR_BASE, BpfProg
from kernel_model.bpf.insn import (
    BPF_ADD,
    BPF_ALU,
    BPF_ALU64,
    BPF_AND,
    BPF_ARSH,
    BPF_ATOMIC,
    BPF_CALL,
    BPF_CMPXCHG,
    BPF_DIV,
    BPF_DW,
    BPF_END,
    BPF_EXIT,
    BPF_FETCH,
    BPF_IMM,
    BPF_JA,
    BPF_JEQ,
    BPF_JGE,
    BPF_JGT,
    BPF_JLE,
    BPF_JLT,
    BPF_JMP,
    BPF_JMP32,
    BPF_JNE,
    BPF_JSET,
    BPF_JSGE,
    BPF_JSGT,
    BPF_JSLE,
    BPF_JSLT,
    BPF_LD,
    BPF_LDX,
    BPF_LOAD_ACQ,
    BPF_LSH,
    BPF_MEM,
    BPF_MEMSX,
    BPF_MOD,
    BPF_MOV,
    BPF_MUL,
    BPF_NEG,
    BPF_OR,
    BPF_PSEUDO_CALL,
    BPF_PSEUDO_KFUNC_CALL,
    BPF_RSH,
    BPF_ST,
    BPF_STORE_REL,
    BPF_STX,
    BPF_SUB,
    BPF_TO_BE,
    BPF_X,
    BPF_XCHG,
    BPF_XOR,
    HELPER_IDS,
    MAX_BPF_STACK,
    MAX_CALL_FRAMES,
    MAX_TAIL_CALL_CNT,
    SIZE_BYTES,
    Insn,
)
from kernel_model.bpf.memory import BpfFault, KernelMemory, Region
from kernel_model.errors import EmuError

M64 = (1 << 64) - 1
M32 = (1 << 32) - 1
S64 = 1 << 63
S32 = 1 << 31

# include/linux/filter.h: the hidden register the verifier's rewrites (constant blinding,
# the division and may_goto fix-ups) use, so the register file has 12 slots
BPF_REG_AX = 11
MAX_BPF_EXT_REG = 12
# filter.h's kernel-internal opcodes: what the verifier makes of a bpf_tail_call() call
# (BPF_JMP | BPF_TAIL_CALL), the speculation barrier (BPF_ST | BPF_NOSPEC) and the loads
# of BTF pointers that may fault (BPF_LDX | BPF_PROBE_MEM[SX])
BPF_TAIL_CALL = 0xF0
BPF_NOSPEC = 0xC0
BPF_PROBE_MEM = 0x20
BPF_PROBE_MEMSX = 0x40
BPF_FUNC_TAIL_CALL = HELPER_IDS["tail_call"]
# the most instructions one run may execute, nested frames included
INSN_CAP = 1 << 24

_ZERO_FRAME = bytes(MAX_BPF_STACK)
_SIZE_MASK = tuple((1 << (8 * n)) - 1 for n in range(9))

Op = Callable[[list[int]], int]


class BpfRuntimeError(EmuError):
    """Something a program did at run time that a verified program never does: an access
    outside every object or a write to a read-only one (a :class:`BpfFault` underneath),
    an opcode the interpreter does not know, a jump out of the program, a call deeper than
    ``MAX_CALL_FRAMES``, more instructions than the cap."""


class BpfEnv(Protocol):
    """What the caller of :meth:`BpfVm.run` provides: the memory the program addresses,
    the kernel functions a program calls (by ``enum bpf_func_id``, kfuncs by BTF id) and
    the ``prog_array`` slots tail calls jump through."""

    memory: KernelMemory

    def call_helper(self, fid: int, r1: int, r2: int, r3: int, r4: int, r5: int, vm: BpfVm) -> int: ...

    def call_kfunc(self, btf_id: int, r1: int, r2: int, r3: int, r4: int, r5: int, vm: BpfVm) -> int: ...

    def tail_call_target(self, map_addr: int, index: int) -> BpfProg | None: ...


class _Exit(Exception):
    """BPF_EXIT: ends the dispatch loop of the frame that runs it (never leaves the VM)."""


class _TailCall(Exception):
    """A tail call that found its program: the loop continues at that program's first
    instruction with the same registers and frame (never leaves the VM)."""

    def __init__(self, prog: BpfProg):
        self.prog = prog


class _Invalid(Exception):
    """An instruction no verified program holds, raised when it runs; the loop turns it
    into a :class:`BpfRuntimeError` naming the program (never leaves the VM)."""


# ----------------------------------------------------------------------------- arithmetic


def _sdiv(a: int, b: int, sign: int, mask: int) -> int:
    """``BPF_SDIV`` (off 1): signed division truncating toward zero, as ``div64_s64`` and
    the ``abs_s32`` form of the 32-bit case; by zero the result is 0 (the verifier's
    fix-up), ``S64_MIN / -1`` wraps to ``S64_MIN``.  ``a``, ``b`` are ``mask``-wide."""
    a = (a ^ sign) - sign
    b = (b ^ sign) - sign
    if not b:
        return 0
    q = abs(a) // abs(b)
    return (-q if (a < 0) != (b < 0) else q) & mask


def _smod(a: int, b: int, sign: int, mask: int) -> int:
    """``BPF_SMOD`` (off 1): the remainder takes the dividend's sign; by zero the
    dividend stays (zero-extended in the 32-bit form), ``S64_MIN % -1`` is 0."""
    sa = (a ^ sign) - sign
    sb = (b ^ sign) - sign
    if not sb:
        return a
    r = abs(sa) % abs(sb)
    return (-r if sa < 0 else r) & mask


def _bswap(value: int, nbytes: int) -> int:
    """``__swab16/32/64`` of a value already ``nbytes`` wide."""
    return int.from_bytes(value.to_bytes(nbytes, "little"), "big")


# Expression templates of the generated closures.  A and B are the operands as the
# operation's width sees them, SH the masked shift count, MW/SW the width's mask and
# sign bit; ``k`` is the immediate, prepared at decode time.
_ALU_EXPR = {
    BPF_ADD: "(A + B) & MW",
    BPF_SUB: "(A - B) & MW",
    BPF_MUL: "(A * B) & MW",
    BPF_OR: "A | B",
    BPF_AND: "A & B",
    BPF_XOR: "A ^ B",
    BPF_LSH: "(A << SH) & MW",
    BPF_RSH: "A >> SH",
    BPF_ARSH: "(((A ^ SW) - SW) >> SH) & MW",
    BPF_MOV: "B",
}
_DIV_EXPR = {
    (BPF_DIV, 0): "(A // B if B else 0)",
    (BPF_MOD, 0): "(A % B if B else A)",
    (BPF_DIV, 1): "_sdiv(A, B, SW, MW)",
    (BPF_MOD, 1): "_smod(A, B, SW, MW)",
}
_JMP_EXPR = {
    BPF_JEQ: "A == B",
    BPF_JNE: "A != B",
    BPF_JGT: "A > B",
    BPF_JGE: "A >= B",
    BPF_JLT: "A < B",
    BPF_JLE: "A <= B",
    BPF_JSET: "A & B",
    BPF_JSGT: "(A ^ SW) > (B ^ SW)",
    BPF_JSGE: "(A ^ SW) >= (B ^ SW)",
    BPF_JSLT: "(A ^ SW) < (B ^ SW)",
    BPF_JSLE: "(A ^ SW) <= (B ^ SW)",
}
# BPF_END by (code, imm): to_le on little-endian x86 only truncates, to_be and the
# ALU64 bswap swap the bytes
_END_EXPR = {
    (BPF_ALU, 0, 16): "r[d] & 0xFFFF",
    (BPF_ALU, 0, 32): "r[d] & M32",
    (BPF_ALU, 0, 64): "r[d]",
    (BPF_ALU, BPF_TO_BE, 16): "_bswap(r[d] & 0xFFFF, 2)",
    (BPF_ALU, BPF_TO_BE, 32): "_bswap(r[d] & M32, 4)",
    (BPF_ALU, BPF_TO_BE, 64): "_bswap(r[d], 8)",
    (BPF_ALU64, 0, 16): "_bswap(r[d] & 0xFFFF, 2)",
    (BPF_ALU64, 0, 32): "_bswap(r[d] & M32, 4)",
    (BPF_ALU64, 0, 64): "_bswap(r[d], 8)",
}
_ATOMIC_ALU = {BPF_ADD: operator.add, BPF_OR: operator.or_, BPF_AND: operator.and_, BPF_XOR: operator.xor}
_FACTORY_SRC = {
    "alu": "def make(d, s, k, nx):\n    def op(r):\n        r[d] = EXPR\n        return nx\n    return op\n",
    "jmp": "def make(d, s, k, t, nx):\n    def op(r):\n        return t if EXPR else nx\n    return op\n",
}
_PLACEHOLDER = re.compile(r"\b(A|B|SH|MW|SW)\b")
_CONSTANT = re.compile(r"\b(M64|M32|S64|S32)\b")
_CONSTANTS = {"M64": hex(M64), "M32": hex(M32), "S64": hex(S64), "S32": hex(S32)}


def _operands(alu64: bool, reg_src: bool) -> dict[str, str]:
    """The template placeholders of a 64- or 32-bit operation with a register or an
    immediate source (``core.c``: ``(u32) DST OP (u32) SRC``, shifts by ``SRC & 63``)."""
    if alu64:
        return {
            "A": "r[d]",
            "B": "r[s]" if reg_src else "k",
            "SH": "(r[s] & 63)" if reg_src else "k",
            "MW": "M64",
            "SW": "S64",
        }
    return {
        "A": "(r[d] & M32)",
        "B": "(r[s] & M32)" if reg_src else "k",
        "SH": "(r[s] & 31)" if reg_src else "k",
        "MW": "M32",
        "SW": "S32",
    }


def _fill(expr: str, operands: dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: operands[m[0]], expr)


def _invalid(message: str) -> Op:
    def op(r: list[int]) -> int:
        raise _Invalid(message)

    return op


def _exit_op(r: list[int]) -> int:
    raise _Exit


def _nop(nx: int) -> Op:
    def op(r: list[int]) -> int:
        return nx

    return op


# ----------------------------------------------------------------------------- memory


def _accessors(
    memory: KernelMemory,
) -> tuple[Callable[[int, int], int], Callable[[int, int, int], None], Callable[[], None]]:
    """``load(addr, size)``, ``store(addr, size, value)`` and ``reset()`` over ``memory``.

    What a program dereferences is a raw pointer in the kernel; here each access resolves
    its :class:`Region`, at most one ``KernelMemory.find`` per access: the last two
    regions loaded from (and, apart, the last two writable ones stored to) are cached, so
    the usual mix of stack and one map value costs no search.  ``reset`` forgets them
    (at the start of a run after a region went away: ``KernelMemory.generation``)."""
    find = memory.find
    empty = bytearray()
    lb0 = le0 = lb1 = le1 = 0
    ld0 = ld1 = empty
    sb0 = se0 = sb1 = se1 = 0
    sd0 = sd1 = empty

    def load(addr: int, size: int) -> int:
        nonlocal lb0, le0, ld0, lb1, le1, ld1
        if lb0 <= addr and addr + size <= le0:
            o = addr - lb0
            return int.from_bytes(ld0[o : o + size], "little")
        if lb1 <= addr and addr + size <= le1:
            o = addr - lb1
            return int.from_bytes(ld1[o : o + size], "little")
        region = find(addr, size)
        if region is None:
            raise BpfFault(addr & M64, size, False)
        lb1, le1, ld1 = lb0, le0, ld0
        lb0, le0, ld0 = region.base, region.end, region.data
        o = addr - lb0
        return int.from_bytes(ld0[o : o + size], "little")

    def store(addr: int, size: int, value: int) -> None:
        nonlocal sb0, se0, sd0, sb1, se1, sd1
        if sb0 <= addr and addr + size <= se0:
            o = addr - sb0
            sd0[o : o + size] = (value & _SIZE_MASK[size]).to_bytes(size, "little")
            return
        if sb1 <= addr and addr + size <= se1:
            o = addr - sb1
            sd1[o : o + size] = (value & _SIZE_MASK[size]).to_bytes(size, "little")
            return
        region = find(addr, size)
        if region is None or not region.writable:
            raise BpfFault(addr & M64, size, True)
        sb1, se1, sd1 = sb0, se0, sd0
        sb0, se0, sd0 = region.base, region.end, region.data
        o = addr - sb0
        sd0[o : o + size] = (value & _SIZE_MASK[size]).to_bytes(size, "little")

    def reset() -> None:
        nonlocal lb0, le0, ld0, lb1, le1, ld1, sb0, se0, sd0, sb1, se1, sd1
        lb0 = le0 = lb1 = le1 = sb0 = se0 = sb1 = se1 = 0
        ld0 = ld1 = sd0 = sd1 = empty

    return load, store, reset


# ----------------------------------------------------------------------------- the VM


class BpfVm:
    """One CPU's interpreter: its call frames' stacks (``MAX_CALL_FRAMES`` regions of
    ``MAX_BPF_STACK`` bytes in ``memory``, allocated on first use and reused by every
    run) and the programs it has decoded.

    :meth:`run` is ``bpf_prog_run``: r1 = ctx, r10 the top of a fresh zeroed 512-byte
    frame, the result r0 as u64.  Inside a run, the kernel functions that take a
    callback (``bpf_loop``, ``bpf_for_each_map_elem``) run it with :meth:`call_function`.
    """

    def __init__(self, memory: KernelMemory, *, insn_cap: int = INSN_CAP):
        self.memory = memory
        self.insn_cap = insn_cap
        self._load, self._store, self._reset_cache = _accessors(memory)
        self._generation = memory.generation
        self._stacks: list[Region] = []
        self._code: weakref.WeakKeyDictionary[BpfProg, list[Op]] = weakref.WeakKeyDictionary()
        self._last: tuple[BpfProg | None, list[Op]] = (None, [])
        self._factories: dict[tuple[str, str], Callable[..., Op]] = {}
        # the state of the run under way
        self._env: BpfEnv | None = None
        self._ticks: Iterator[int] = iter(())
        self._depth = 0
        self._tail_calls = 0
        self._prog: BpfProg | None = None
        self._cur: list[Op] = []

    # -- running -------------------------------------------------------------------

    def run(self, prog: BpfProg, ctx: int, env: BpfEnv) -> int:
        """Run ``prog`` on ``ctx`` to its BPF_EXIT; r0 as u64."""
        code = self.code_of(prog)
        saved = (self._env, self._ticks, self._tail_calls)
        outermost = self._env is None
        self._env = env
        if outermost:
            self._ticks = iter(range(self.insn_cap))
            self._tail_calls = 0
            if self.memory.generation != self._generation:  # a region went away since
                self._generation = self.memory.generation
                self._reset_cache()
        regs = [0] * MAX_BPF_EXT_REG
        regs[1] = ctx & M64
        try:
            return self._enter(prog, code, 0, regs)
        finally:
            self._env, self._ticks, self._tail_calls = saved

    def call_function(self, func_ptr: int, r1: int = 0, r2: int = 0, r3: int = 0, r4: int = 0, r5: int = 0) -> int:
        """Run the running program's subprogram at ``func_ptr`` (``BPF_FUNC_PTR_BASE`` +
        its first instruction's index, what the verifier made of ``lddw`` of a
        BPF_PSEUDO_FUNC) with r1-r5 in a new frame, as ``bpf_loop`` calls its callback;
        its r0 as u64."""
        prog = self._prog
        if self._env is None or prog is None:
            raise BpfRuntimeError("a BPF callback can only be called while a program runs")
        start = func_ptr - BPF_FUNC_PTR_BASE
        if start not in prog.subprog_starts or not 0 <= start < len(prog.insns):
            raise BpfRuntimeError(f"{prog.name}: {func_ptr & M64:#x} is not a subprogram of the program")
        regs = [0] * MAX_BPF_EXT_REG
        regs[1:6] = (r1 & M64, r2 & M64, r3 & M64, r4 & M64, r5 & M64)
        return self._enter(prog, self._cur, start, regs)

    def _enter(self, prog: BpfProg, code: list[Op], pc: int, regs: list[int]) -> int:
        """A new frame (``interpreters_args``' fresh stack): r10 = its top, then the
        dispatch loop from ``pc`` until its EXIT."""
        depth = self._depth
        if depth >= MAX_CALL_FRAMES:
            raise BpfRuntimeError(f"{prog.name}: more than {MAX_CALL_FRAMES} nested call frames")
        if depth == len(self._stacks):
            self._stacks.append(self.memory.alloc(MAX_BPF_STACK, "stack", owner=self))
        stack = self._stacks[depth]
        stack.data[:] = _ZERO_FRAME
        regs[10] = stack.end
        self._depth = depth + 1
        saved = self._prog, self._cur
        try:
            return self._loop(prog, code, pc, regs)
        finally:
            self._depth = depth
            self._prog, self._cur = saved

    def _loop(self, prog: BpfProg, code: list[Op], pc: int, r: list[int]) -> int:
        """``___bpf_prog_run``'s dispatch: ``pc = code[pc](r)`` until BPF_EXIT raises
        :class:`_Exit`; a tail call switches ``code`` in place (the same frame)."""
        self._prog, self._cur = prog, code
        ticks = self._ticks
        while True:
            try:
                for _ in ticks:
                    pc = code[pc](r)
                raise BpfRuntimeError(f"{prog.name}: program ran {self.insn_cap} instructions without exiting")
            except _Exit:
                return r[0]
            except _TailCall as call:
                prog = call.prog
                code = self.code_of(prog)
                self._prog, self._cur = prog, code
                pc = 0
            except _Invalid as err:
                raise BpfRuntimeError(f"{prog.name}: {err}") from None
            except BpfFault as err:
                raise BpfRuntimeError(f"{prog.name}: insn {pc}: {err}") from err

    # -- tail calls, calls ------------------------------------------------------------

    def _tail_call(self, nx: int) -> Op:
        """``JMP_TAIL_CALL``: map in r2, index in r3 (u32).  No program at the index (out
        of range or an empty slot) or ``MAX_TAIL_CALL_CNT`` tail calls already taken in
        this run (one count for all of the run's frames, as the x86 JIT keeps it): fall
        through; else continue at that program's first instruction, counting the call."""

        def op(r: list[int]) -> int:
            if self._tail_calls >= MAX_TAIL_CALL_CNT:
                return nx
            env = self._env
            assert env is not None
            target = env.tail_call_target(r[2], r[3] & M32)
            if target is None:
                return nx
            self._tail_calls += 1
            raise _TailCall(target)

        return op

    def _func_call(self, fid: int, nx: int) -> Op:
        """A call of kernel function ``fid`` (``enum bpf_func_id``): r0 = its result; r1-r5 keep whatever
        they held (the verifier marks them unreadable after a call)."""

        def op(r: list[int]) -> int:
            env = self._env
            assert env is not None
            r[0] = env.call_helper(fid, r[1], r[2], r[3], r[4], r[5], self) & M64
            return nx

        return op

    def _kfunc_call(self, btf_id: int, nx: int) -> Op:
        def op(r: list[int]) -> int:
            env = self._env
            assert env is not None
            r[0] = env.call_kfunc(btf_id, r[1], r[2], r[3], r[4], r[5], self) & M64
            return nx

        return op

    def _bpf_call(self, code: list[Op], target: int, nx: int) -> Op:
        """A bpf-to-bpf call (BPF_PSEUDO_CALL): the callee gets r1-r5 and a frame of its
        own; r6-r9 of the caller are untouched, as its register file is."""

        def op(r: list[int]) -> int:
            prog = self._prog
            assert prog is not None
            regs = [0] * MAX_BPF_EXT_REG
            regs[1:6] = r[1:6]
            r[0] = self._enter(prog, code, target, regs)
            return nx

        return op

    # -- decoding -----------------------------------------------------------------------

    def code_of(self, prog: BpfProg) -> list[Op]:
        """``prog`` decoded for this VM (once; kept while the program lives)."""
        last, code = self._last
        if last is prog:
            return code
        found = self._code.get(prog)
        if found is None:
            found = self._code[prog] = self._decode(prog.insns)
        self._last = (prog, found)
        return found

    def _factory(self, kind: str, expr: str) -> Callable[..., Op]:
        key = (kind, expr)
        found = self._factories.get(key)
        if found is not None:
            return found
        source = _FACTORY_SRC[kind].replace("EXPR", _CONSTANT.sub(lambda m: _CONSTANTS[m[0]], expr))
        namespace: dict[str, Any] = {"_sdiv": _sdiv, "_smod": _smod, "_bswap": _bswap}
        exec(source, namespace)
        factory: Callable[..., Op] = namespace["make"]
        self._factories[key] = factory
        return factory

    def _decode(self, insns: list[Insn]) -> list[Op]:
        """One closure per instruction slot, then two sentinels: running off the end
        (index n) and a jump out of the program (index n + 1)."""
        n = len(insns)
        code: list[Op] = []
        for pc, insn in enumerate(insns):
            code.append(self._decode_one(insns, pc, insn, code))
        code.append(_invalid(f"insn {n}: ran past the last instruction"))
        code.append(_invalid("jump out of the program"))
        return code

    def _decode_one(self, insns: list[Insn], pc: int, insn: Insn, code: list[Op]) -> Op:
        c, d, s, off, imm = insn
        cls = c & 0x07
        nx = pc + 1
        bad = _invalid(f"insn {pc}: invalid instruction (code {c:#04x} dst r{d} src r{s} off {off} imm {imm})")
        if d >= MAX_BPF_EXT_REG or s >= MAX_BPF_EXT_REG:
            return bad
        if cls in (BPF_ALU, BPF_ALU64):
            return self._decode_alu(insn, nx) or bad
        if cls in (BPF_JMP, BPF_JMP32):
            return self._decode_jmp(insn, pc, len(insns), code) or bad
        if cls in (BPF_LDX, BPF_ST, BPF_STX):
            return self._decode_mem(insn, nx) or bad
        # BPF_LD: only lddw (the legacy packet loads BPF_ABS/BPF_IND are socket-filter only)
        if c == BPF_LD | BPF_IMM | BPF_DW and s == 0 and pc + 1 < len(insns):
            value = (imm & M32) | (insns[pc + 1].imm & M32) << 32
            return self._factory("alu", "k")(d, 0, value, pc + 2)
        return bad

    def _decode_alu(self, insn: Insn, nx: int) -> Op | None:
        c, d, s, off, imm = insn
        alu64 = c & 0x07 == BPF_ALU64
        op = c & 0xF0
        reg_src = bool(c & BPF_X)
        if op == BPF_END:
            expr = _END_EXPR.get((c & 0x07, c & BPF_X, imm))
            return self._factory("alu", expr)(d, 0, 0, nx) if expr is not None and off == 0 else None
        operands = _operands(alu64, reg_src)
        mask, shift_mask = (M64, 63) if alu64 else (M32, 31)
        k = imm & mask
        if op == BPF_NEG:
            if reg_src or off:
                return None
            expr = "-r[d] & MW"
        elif op == BPF_MOV and reg_src and off:
            # MOVSX: sign-extend the low 8/16 (32 for ALU64) bits of src
            if off not in ((8, 16, 32) if alu64 else (8, 16)):
                return None
            bit = 1 << (off - 1)
            expr = f"(((r[s] & {2 * bit - 1:#x}) ^ {bit:#x}) - {bit:#x}) & MW"
        elif op in (BPF_DIV, BPF_MOD):
            if off not in (0, 1):
                return None
            expr = _DIV_EXPR[(op, off)]
        elif op in _ALU_EXPR and off == 0:
            expr = _ALU_EXPR[op]
            if op in (BPF_LSH, BPF_RSH, BPF_ARSH):
                k = imm & shift_mask
        else:
            return None
        return self._factory("alu", _fill(expr, operands))(d, s, k, nx)

    def _decode_jmp(self, insn: Insn, pc: int, n: int, code: list[Op]) -> Op | None:
        c, d, s, off, imm = insn
        cls = c & 0x07
        op = c & 0xF0
        reg_src = bool(c & BPF_X)
        nx = pc + 1

        def target(rel: int) -> int:
            t = pc + 1 + rel
            return t if 0 <= t < n else n + 1

        if op == BPF_JA:
            if reg_src:
                return None
            return _nop(target(imm if cls == BPF_JMP32 else off))
        if cls == BPF_JMP32 or reg_src:
            if op in _JMP_EXPR:
                return self._cond_jump(insn, target(off), nx)
            return None
        if op == BPF_EXIT:
            return _exit_op
        if op == BPF_TAIL_CALL:
            return self._tail_call(nx)
        if op == BPF_CALL:
            if s == 0:
                return self._tail_call(nx) if imm == BPF_FUNC_TAIL_CALL else self._func_call(imm, nx)
            if s == BPF_PSEUDO_KFUNC_CALL:
                return self._kfunc_call(imm, nx)
            if s == BPF_PSEUDO_CALL:
                t = target(imm)
                return self._bpf_call(code, t, nx) if t < n else None
            return None
        if op in _JMP_EXPR:
            return self._cond_jump(insn, target(off), nx)
        return None

    def _cond_jump(self, insn: Insn, t: int, nx: int) -> Op:
        """``COND_JMP``: JMP compares the 64-bit registers, JMP32 their low halves; an
        immediate is the s32 sign-extended (JMP) or taken as u32/s32 (JMP32)."""
        c, d, s, off, imm = insn
        alu64 = c & 0x07 == BPF_JMP
        expr = _fill(_JMP_EXPR[c & 0xF0], _operands(alu64, bool(c & BPF_X)))
        return self._factory("jmp", expr)(d, s, imm & (M64 if alu64 else M32), t, nx)

    def _decode_mem(self, insn: Insn, nx: int) -> Op | None:
        """LDX (MEM, MEMSX, PROBE_MEM[SX]), ST, STX (MEM, ATOMIC) and the NOSPEC barrier."""
        c, d, s, off, imm = insn
        cls = c & 0x07
        mode = c & 0xE0
        nbytes = SIZE_BYTES[c & 0x18]
        load, store = self._load, self._store
        if cls == BPF_LDX:
            if mode == BPF_MEM:

                def ldx(r: list[int]) -> int:
                    r[d] = load(r[s] + off, nbytes)
                    return nx

                return ldx
            if mode == BPF_MEMSX and nbytes < 8:
                bit = 1 << (8 * nbytes - 1)

                def ldxsx(r: list[int]) -> int:
                    r[d] = ((load(r[s] + off, nbytes) ^ bit) - bit) & M64
                    return nx

                return ldxsx
            if mode == BPF_PROBE_MEM or (mode == BPF_PROBE_MEMSX and nbytes < 8):
                return self._probe_load(d, s, off, nbytes, mode == BPF_PROBE_MEMSX, nx)
            return None
        if cls == BPF_ST:
            if mode == BPF_MEM:
                k = imm & M64

                def st(r: list[int]) -> int:
                    store(r[d] + off, nbytes, k)
                    return nx

                return st
            if c == BPF_ST | BPF_NOSPEC:
                return _nop(nx)
            return None
        if mode == BPF_MEM:

            def stx(r: list[int]) -> int:
                store(r[d] + off, nbytes, r[s])
                return nx

            return stx
        if mode == BPF_ATOMIC:
            return self._atomic(insn, nbytes, nx)
        return None

    def _probe_load(self, d: int, s: int, off: int, nbytes: int, signed: bool, nx: int) -> Op:
        """``LDX_PROBE_MEM``: ``bpf_probe_read_kernel`` of a BTF pointer's field; a fault
        reads as 0."""
        load = self._load
        bit = 1 << (8 * nbytes - 1) if signed else 0

        def op(r: list[int]) -> int:
            try:
                value = load(r[s] + off, nbytes)
            except BpfFault:
                value = 0
            r[d] = ((value ^ bit) - bit) & M64
            return nx

        return op

    def _atomic(self, insn: Insn, nbytes: int, nx: int) -> Op | None:
        """``STX_ATOMIC``: read-modify-write ops (W and DW only) with and without FETCH
        (the old value into src, zero-extended), XCHG, CMPXCHG against r0 (r0 gets the
        old value; a failed compare writes the old value back, as ``lock cmpxchg``
        does), and the load-acquire/store-release of any size."""
        c, d, s, off, imm = insn
        load, store = self._load, self._store
        mask = _SIZE_MASK[nbytes]
        if imm == BPF_LOAD_ACQ:

            def load_acq(r: list[int]) -> int:
                r[d] = load(r[s] + off, nbytes)
                return nx

            return load_acq
        if imm == BPF_STORE_REL:

            def store_rel(r: list[int]) -> int:
                store(r[d] + off, nbytes, r[s])
                return nx

            return store_rel
        if nbytes not in (4, 8):
            return None
        alu = _ATOMIC_ALU.get(imm & ~BPF_FETCH)
        if alu is not None:
            fn = alu
            if imm & BPF_FETCH:

                def fetch_op(r: list[int]) -> int:
                    addr = r[d] + off
                    old = load(addr, nbytes)
                    store(addr, nbytes, fn(old, r[s]))
                    r[s] = old
                    return nx

                return fetch_op

            def atomic_op(r: list[int]) -> int:
                addr = r[d] + off
                store(addr, nbytes, fn(load(addr, nbytes), r[s]))
                return nx

            return atomic_op
        if imm == BPF_XCHG:

            def xchg(r: list[int]) -> int:
                addr = r[d] + off
                old = load(addr, nbytes)
                store(addr, nbytes, r[s])
                r[s] = old
                return nx

            return xchg
        if imm == BPF_CMPXCHG:

            def cmpxchg(r: list[int]) -> int:
                addr = r[d] + off
                old = load(addr, nbytes)
                store(addr, nbytes, r[s] if old == r[0] & mask else old)
                r[0] = old
                return nx

            return cmpxchg
        return None
