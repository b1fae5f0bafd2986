"""``bpf_check()`` of ``kernel/bpf/verifier.c`` for the programs uprobe users load
(BPF_PROG_TYPE_KPROBE: perf-event uprobes, uretprobes and USDT probes, uprobe_multi and
uprobe_session links).

The passes run in the kernel's order: ``add_subprog_and_kfunc``/``check_subprogs``
(subprogram bounds, jumps stay inside their subprogram, each ends in exit or jmp),
``resolve_pseudo_ldimm64`` (opcode sanity, map fds to maps), ``check_cfg`` (every insn
reachable), then ``do_check``: an abstract interpretation of every path, depth first with an explicit
stack of pending branches (``push_stack``/``pop_stack``).  The register and stack types
and the value ranges are in :mod:`kernel_model.bpf.verifier_state`; the checks of each
instruction kind in the modules named after the parts of verifier.c they model
(:mod:`~kernel_model.bpf.verifier_alu`, :mod:`~kernel_model.bpf.verifier_mem`,
:mod:`~kernel_model.bpf.verifier_jmp`, :mod:`~kernel_model.bpf.verifier_calls`, over the
shared :mod:`~kernel_model.bpf.verifier_env`); this module holds the passes, ``do_check``'s
loop and its dispatch of each instruction.  At jump targets the
states already explored are kept; a path whose state one of them contains is pruned, and
one that comes back to a state still on its own path is an infinite loop.  Messages and
errnos are the kernel's, so a rejected program reads as ``bpftool``/libbpf would show it.

Uprobe programs can only be loaded with CAP_PERFMON (``is_perfmon_prog_type``), so the
privileged rules apply: pointers may be stored and compared, and reading stack the program
never wrote yields an unknown value (``allow_uninit_stack``) rather than an error.
"""

from __future__ import annotations

import errno as E
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kernel_model.bpf import insn as I
from kernel_model.bpf import verifier_state as S
from kernel_model.bpf.bpf_types import BPF_FUNC_PTR_BASE, BPF_MAP_TYPE_ARRAY, BpfMap, BpfProg
from kernel_model.bpf.verifier_alu import AluChecks
from kernel_model.bpf.verifier_calls import CallChecks
from kernel_model.bpf.verifier_env import VerifierReject
from kernel_model.bpf.verifier_jmp import CondJmpChecks
from kernel_model.bpf.verifier_mem import ST_ZERO
from kernel_model.bpf.verifier_state import (
    CONST_PTR_TO_MAP,
    PTR_TO_CTX,
    PTR_TO_FUNC,
    PTR_TO_MAP_VALUE,
    Explored,
    State,
)
from kernel_model.errors import EmuError


class BpfVerifierError(EmuError):
    """The verifier rejected a program: ``errno`` is what ``bpf(BPF_PROG_LOAD)`` returns
    (positive), ``log`` the verifier log; ``str()`` is its last line."""

    def __init__(self, errno: int, log: str):
        self.errno, self.log = errno, log
        lines = log.rstrip("\n").split("\n")
        super().__init__(lines[-1] if lines else "")


@dataclass
class VerifierFeatures:
    """What the kernel being modelled has, set by the caller from the kernel profile.

    ``uprobe_session``: the uprobe_session attach type and its kfuncs (6.13).
    ``allow_uninit_stack``: reading never-written stack is allowed (the loader is
    perfmon-capable, as a kprobe program's loader must be).
    ``insn_limit``: BPF_COMPLEXITY_LIMIT_INSNS.
    """

    uprobe_session: bool = True
    allow_uninit_stack: bool = True
    insn_limit: int = I.BPF_COMPLEXITY_LIMIT_INSNS


def _round_up(v: int, a: int) -> int:
    return (v + a - 1) // a * a


def _is_ldimm64(insn: I.Insn) -> bool:
    return insn.code == I.BPF_LD | I.BPF_DW | I.BPF_IMM


def _valid_opcodes() -> frozenset[int]:
    """``bpf_opcode_in_insntable()``: every opcode the ISA defines."""
    ops = set()
    for cls in (I.BPF_ALU, I.BPF_ALU64):
        for op in (I.BPF_ADD, I.BPF_SUB, I.BPF_MUL, I.BPF_DIV, I.BPF_OR, I.BPF_AND, I.BPF_LSH, I.BPF_RSH):
            ops |= {cls | op | I.BPF_K, cls | op | I.BPF_X}
        for op in (I.BPF_MOD, I.BPF_XOR, I.BPF_MOV, I.BPF_ARSH):
            ops |= {cls | op | I.BPF_K, cls | op | I.BPF_X}
        ops.add(cls | I.BPF_NEG)
    ops |= {I.BPF_ALU | I.BPF_END | I.BPF_TO_LE, I.BPF_ALU | I.BPF_END | I.BPF_TO_BE, I.BPF_ALU64 | I.BPF_END}
    for cls in (I.BPF_JMP, I.BPF_JMP32):
        ops.add(cls | I.BPF_JA)
        for op in (
            I.BPF_JEQ,
            I.BPF_JGT,
            I.BPF_JGE,
            I.BPF_JSET,
            I.BPF_JNE,
            I.BPF_JSGT,
            I.BPF_JSGE,
            I.BPF_JLT,
            I.BPF_JLE,
            I.BPF_JSLT,
            I.BPF_JSLE,
        ):
            ops |= {cls | op | I.BPF_K, cls | op | I.BPF_X}
    ops |= {I.BPF_JMP | I.BPF_CALL, I.BPF_JMP | I.BPF_EXIT}
    ops.add(I.BPF_LD | I.BPF_IMM | I.BPF_DW)
    for size in (I.BPF_B, I.BPF_H, I.BPF_W):
        ops |= {I.BPF_LD | I.BPF_ABS | size, I.BPF_LD | I.BPF_IND | size, I.BPF_LDX | I.BPF_MEMSX | size}
    for size in (I.BPF_B, I.BPF_H, I.BPF_W, I.BPF_DW):
        ops |= {I.BPF_LDX | I.BPF_MEM | size, I.BPF_ST | I.BPF_MEM | size, I.BPF_STX | I.BPF_MEM | size}
        ops.add(I.BPF_STX | I.BPF_ATOMIC | size)
    return frozenset(ops)


VALID_OPCODES = _valid_opcodes()


def bpf_check(
    prog: BpfProg,
    *,
    map_by_fd: Callable[[int], BpfMap | None],
    maps_by_idx: Sequence[BpfMap] = (),
    kfunc_ids: Mapping[int, str] | None = None,
    features: VerifierFeatures | None = None,
    log_level: int = 0,
) -> str:
    """Verify ``prog`` and rewrite its ``lddw`` pseudo loads as the kernel does before the
    program runs; returns the log, raises :class:`BpfVerifierError` on rejection."""
    kfuncs = kfunc_ids if kfunc_ids is not None else prog.kfuncs
    env = _Verifier(prog, map_by_fd, maps_by_idx, kfuncs, features or VerifierFeatures(), log_level)
    return env.run()


class _Verifier(AluChecks, CondJmpChecks, CallChecks):
    """The whole check: the passes before and after ``do_check()``, its loop over the
    pending paths with state pruning, and the per-instruction dispatch to the checks
    the base classes hold."""

    # ------------------------------------------------------------------------- driver
    def run(self) -> str:
        try:
            self._check_subprogs()
            self._resolve_pseudo_ldimm64()
            self._check_cfg()
            self._update_precision()
            self._do_check()
            self._check_max_stack_depth()
        except VerifierReject as r:
            self.verbose(r.msg)
            log = self.log if self.log_level else self._error_lines()
            if self.log_level:
                log = [*log, self._stats()]
            raise BpfVerifierError(r.errno, "\n".join(log) + "\n") from None
        self._convert_pseudo_ld_imm64()
        self.prog.maps = list(self.used_maps)
        self.prog.subprog_starts = list(self.subprog_starts)
        self.prog.stack_depth = self.stack_depth[0]
        return "\n".join([*self.log, self._stats()]) + "\n" if self.log_level else ""

    def _error_lines(self) -> list[str]:
        return self.log[self.err_mark :]

    def _stats(self) -> str:
        return (
            f"processed {self.insn_processed} insns (limit {self.features.insn_limit}) max_states_per_insn "
            f"{self.max_states_per_insn} total_states {self.total_states} peak_states {self.peak_states} mark_read 0"
        )

    # ------------------------------------------------------------------------- passes before do_check
    def _map_from_fd(self, fd: int, by_idx: bool) -> BpfMap:
        if by_idx:
            if not self.maps_by_idx:
                raise self.fail(E.EPROTO, "fd_idx without fd_array is invalid")
            m = self.maps_by_idx[fd] if 0 <= fd < len(self.maps_by_idx) else None
        else:
            m = self.map_by_fd(fd)
        if m is None:
            raise self.fail(E.EBADF, f"fd {fd} is not pointing to valid bpf_map")
        if m not in self.used_maps:
            self.used_maps.append(m)
        return m

    def _resolve_pseudo_ldimm64(self) -> None:
        """Opcode sanity, and each ``lddw``'s map, map value or subprogram."""
        insns, n = self.insns, len(self.insns)
        i = 0
        while i < n:
            insn = insns[i]
            if insn.cls == I.BPF_LDX and (insn.code & 0xE0 not in (I.BPF_MEM, I.BPF_MEMSX) or insn.imm != 0):
                raise self.fail(E.EINVAL, "BPF_LDX uses reserved fields")
            if _is_ldimm64(insn):
                nxt = insns[i + 1] if i + 1 < n else None
                if nxt is None or nxt.code or nxt.dst or nxt.src or nxt.off:
                    raise self.fail(E.EINVAL, "invalid bpf_ld_imm64 insn")
                src = insn.src
                if src == 0:
                    self.ld_aux[i] = ("imm", (insn.imm & 0xFFFFFFFF) | (nxt.imm & 0xFFFFFFFF) << 32)
                elif src == I.BPF_PSEUDO_FUNC:
                    self.ld_aux[i] = ("func", i + insn.imm + 1)
                elif src in (I.BPF_PSEUDO_MAP_FD, I.BPF_PSEUDO_MAP_IDX) and nxt.imm == 0:
                    self.ld_aux[i] = ("map", self._map_from_fd(insn.imm, src == I.BPF_PSEUDO_MAP_IDX))
                elif src in (I.BPF_PSEUDO_MAP_VALUE, I.BPF_PSEUDO_MAP_IDX_VALUE):
                    m = self._map_from_fd(insn.imm, src == I.BPF_PSEUDO_MAP_IDX_VALUE)
                    off = nxt.imm & 0xFFFFFFFF
                    if m.map_type != BPF_MAP_TYPE_ARRAY:
                        raise self.fail(E.EINVAL, "no direct value access support for this map type")
                    if m.max_entries != 1 or off >= m.value_size:
                        raise self.fail(
                            E.EOPNOTSUPP if m.max_entries != 1 else E.EINVAL,
                            f"invalid access to map value pointer, value_size={m.value_size} off={off}",
                        )
                    self.ld_aux[i] = ("map_value", m, off)
                elif src == I.BPF_PSEUDO_BTF_ID:
                    raise self.fail(E.EINVAL, f"ldimm64 insn specifies invalid btf_id {insn.imm}")
                else:
                    raise self.fail(E.EINVAL, "unrecognized bpf_ld_imm64 insn")
                i += 2
                continue
            if insn.code not in VALID_OPCODES:
                raise self.fail(E.EINVAL, f"unknown opcode {insn.code:02x}")
            i += 1

    def _check_subprogs(self) -> None:
        """``add_subprog_and_kfunc()`` and ``check_subprogs()``."""
        n = len(self.insns)
        starts = {0}
        for i, insn in enumerate(self.insns):
            call = insn.code == I.BPF_JMP | I.BPF_CALL
            if (call and insn.src == I.BPF_PSEUDO_CALL) or (_is_ldimm64(insn) and insn.src == I.BPF_PSEUDO_FUNC):
                target = i + insn.imm + 1
                if not 0 <= target < n:
                    raise self.fail(E.EINVAL, "call to invalid destination")
                starts.add(target)
            elif call and insn.src == I.BPF_PSEUDO_KFUNC_CALL and insn.imm not in self.kfunc_ids:
                raise self.fail(E.EINVAL, f"kernel btf_id {insn.imm & 0xFFFFFFFF} is not a function")
        self.subprog_starts = sorted(starts)
        self.stack_depth = [0] * len(self.subprog_starts)
        bounds = [*self.subprog_starts, n]
        for s in range(len(self.subprog_starts)):
            start, end = bounds[s], bounds[s + 1]
            for i in range(start, end):
                insn = self.insns[i]
                if insn.cls not in (I.BPF_JMP, I.BPF_JMP32) or insn.code & 0xF0 in (I.BPF_CALL, I.BPF_EXIT):
                    continue
                if i > 0 and _is_ldimm64(self.insns[i - 1]):
                    continue
                target = self._jump_target(i)
                if not start <= target < end:
                    raise self.fail(E.EINVAL, f"jump out of range from insn {i} to {target}")
            last = self.insns[end - 1].code
            if last not in (I.BPF_JMP | I.BPF_EXIT, I.BPF_JMP | I.BPF_JA, I.BPF_JMP32 | I.BPF_JA):
                raise self.fail(E.EINVAL, "last insn is not an exit or jmp")

    def _jump_target(self, i: int) -> int:
        insn = self.insns[i]
        if insn.code == I.BPF_JMP32 | I.BPF_JA:
            return i + insn.imm + 1
        return i + insn.off + 1

    def _check_cfg(self) -> None:
        """``check_cfg()``: every insn reachable (loops are fine for a privileged loader),
        no jump into the second half of a ``lddw``; marks the prune points."""
        n = len(self.insns)
        seen = [False] * n
        todo = [0]
        seen[0] = True
        while todo:
            t = todo.pop()
            insn = self.insns[t]
            succ: list[int] = []
            op = insn.code & 0xF0
            if _is_ldimm64(insn):
                succ = [t + 2]
                if insn.src == I.BPF_PSEUDO_FUNC:
                    succ.append(t + insn.imm + 1)
                    self.prune_points.add(t + insn.imm + 1)
            elif insn.cls in (I.BPF_JMP, I.BPF_JMP32) and op == I.BPF_EXIT:
                succ = []
            elif insn.cls in (I.BPF_JMP, I.BPF_JMP32) and op == I.BPF_CALL:
                succ = [t + 1]
                self.prune_points.add(t + 1)
                if insn.src == I.BPF_PSEUDO_CALL:
                    succ.append(t + insn.imm + 1)
                    self.prune_points.add(t + insn.imm + 1)
            elif insn.cls in (I.BPF_JMP, I.BPF_JMP32) and op == I.BPF_JA:
                succ = [self._jump_target(t)]
                self.prune_points.add(succ[0])
            elif insn.cls in (I.BPF_JMP, I.BPF_JMP32):
                succ = [t + 1, self._jump_target(t)]
                self.prune_points.update(succ)
            else:
                succ = [t + 1]
            for w in succ:
                if not 0 <= w < n:
                    raise self.fail(E.EINVAL, f"jump out of range from insn {t} to {w}")
                if not seen[w]:
                    seen[w] = True
                    todo.append(w)
        i = 0
        while i < n:
            if not seen[i]:
                raise self.fail(E.EINVAL, f"unreachable insn {i}")
            if _is_ldimm64(self.insns[i]):
                if i + 1 < n and seen[i + 1]:
                    raise self.fail(E.EINVAL, f"jump into the middle of ldimm64 insn {i}")
                i += 1
            i += 1

    # ------------------------------------------------------------------------- the walk
    def _do_check(self) -> None:
        frame = S.new_frame(0, -1, 0)
        frame.regs[1] = S.pointer(PTR_TO_CTX)
        state: State | None = State([frame])
        idx = 0
        while True:
            if state is None:
                if not self.pending:
                    return
                state, idx = self.pending.pop()
            self.insn_processed += 1
            if self.insn_processed > self.features.insn_limit:
                raise self.fail(E.E2BIG, f"BPF program is too large. Processed {self.insn_processed} insn")
            if idx in self.prune_points and self._is_state_visited(state, idx):
                self._path_done(state)
                state = None
                continue
            self.cur_idx = idx
            nxt = self._step(state, idx)
            if nxt is None:
                self._path_done(state)
                state = None
            else:
                idx = nxt

    def _path_done(self, state: State) -> None:
        """``update_branch_counts()``: one path fewer from each state it came through."""
        rec = state.parent
        while rec is not None:
            rec.branches -= 1
            if rec.branches:
                break
            rec = rec.parent

    def _is_state_visited(self, state: State, idx: int) -> bool:
        """``is_state_visited()``: prune ``state`` when an explored one at ``idx`` covers it;
        the same state again on its own path is an infinite loop.  Like the kernel, a state
        that keeps failing to match is dropped, and a new one is kept only every few jumps
        and insns."""
        recs = self.explored.setdefault(idx, [])
        precise = self._precise_of(state, idx)
        keep = []
        pruned = False
        for rec in recs:
            if pruned:
                keep.append(rec)
                continue
            if rec.branches:
                if S.states_equal(rec.state, state, exact=True):
                    raise self.fail(
                        E.EINVAL,
                        f"old state: {S.state_str(rec.state)}",
                        f"infinite loop detected at insn {idx}",
                        f"cur state: {S.state_str(state)}",
                    )
                keep.append(rec)
                continue
            if S.states_equal(rec.state, state, exact=False, precise=precise):
                rec.hits += 1
                pruned = True
                keep.append(rec)
                continue
            rec.misses += 1
            if rec.misses <= rec.hits * 3 + 3:
                keep.append(rec)
        recs[:] = keep
        if pruned:
            return True
        if self.jmps_processed - self.prev_jmps < 2 or self.insn_processed - self.prev_insns < 8:
            return False
        self.prev_jmps, self.prev_insns = self.jmps_processed, self.insn_processed
        rec = Explored(state.copy())
        rec.parent = state.parent
        recs.append(rec)
        self.total_states += 1
        self.peak_states = max(self.peak_states, sum(len(v) for v in self.explored.values()))
        self.max_states_per_insn = max(self.max_states_per_insn, len(recs))
        state.parent = rec
        return False

    def _precise_of(self, st: State, idx: int) -> Callable[[int], S.Precise]:
        """Which scalars matter in each frame: at ``idx`` for the running one, at the
        return point (r0-r5 are replaced there) for its callers."""

        def of(k: int) -> S.Precise:
            if k == len(st.frames) - 1:
                return self.precise[idx]
            p = self.precise[st.frames[k + 1].callsite + 1]
            return p._replace(regs=p.regs & ~0b111111)

        return of

    def _step(self, st: State, idx: int) -> int | None:
        insn = self.insns[idx]
        cls = insn.cls
        if cls in (I.BPF_ALU, I.BPF_ALU64):
            self._check_alu(st, insn, idx)
            return idx + 1
        if cls == I.BPF_LDX:
            self._check_reg_arg(st, insn.src, True)
            self._check_reg_arg(st, insn.dst, False)
            size = I.SIZE_BYTES[insn.code & 0x18]
            val = self._check_mem_access(st, insn.src, insn.off, size, False, None)
            assert val is not None
            if insn.code & 0xE0 == I.BPF_MEMSX:
                val = S.sign_extend_range(val, size * 8)
            st.cur.regs[insn.dst] = val
            return idx + 1
        if cls == I.BPF_STX:
            if insn.code & 0xE0 == I.BPF_ATOMIC:
                self._check_atomic(st, insn)
                return idx + 1
            if insn.code & 0xE0 != I.BPF_MEM or insn.imm != 0:
                raise self.fail(E.EINVAL, "BPF_STX uses reserved fields")
            self._check_reg_arg(st, insn.src, True)
            self._check_reg_arg(st, insn.dst, True)
            size = I.SIZE_BYTES[insn.code & 0x18]
            self._check_mem_access(st, insn.dst, insn.off, size, True, st.cur.regs[insn.src])
            return idx + 1
        if cls == I.BPF_ST:
            if insn.code & 0xE0 != I.BPF_MEM or insn.src != 0:
                raise self.fail(E.EINVAL, "BPF_ST uses reserved fields")
            self._check_reg_arg(st, insn.dst, True)
            size = I.SIZE_BYTES[insn.code & 0x18]
            value = ST_ZERO if insn.imm == 0 else S.const_reg(insn.imm)
            self._check_mem_access(st, insn.dst, insn.off, size, True, value)
            return idx + 1
        if cls == I.BPF_LD:
            if insn.code & 0xE0 in (I.BPF_ABS, I.BPF_IND):
                raise self.fail(E.EINVAL, "BPF_LD_[ABS|IND] instructions not allowed for this program type")
            return self._check_ld_imm(st, idx)
        return self._check_jmp(st, idx)

    def _check_ld_imm(self, st: State, idx: int) -> int:
        insn = self.insns[idx]
        if insn.code & 0x18 != I.BPF_DW:
            raise self.fail(E.EINVAL, "invalid BPF_LD_IMM insn")
        if insn.off != 0:
            raise self.fail(E.EINVAL, "BPF_LD_IMM64 uses reserved fields")
        self._check_reg_arg(st, insn.dst, False)
        aux = self.ld_aux[idx]
        if aux[0] == "imm":
            reg = S.const_reg(aux[1])
        elif aux[0] == "func":
            reg = S.pointer(PTR_TO_FUNC, subprog=aux[1])
        elif aux[0] == "map":
            reg = S.pointer(CONST_PTR_TO_MAP, map=aux[1])
        else:
            reg = S.pointer(PTR_TO_MAP_VALUE, map=aux[1], off=aux[2])
        st.cur.regs[insn.dst] = reg
        return idx + 2

    def _check_jmp(self, st: State, idx: int) -> int | None:
        insn = self.insns[idx]
        op = insn.code & 0xF0
        jmp32 = insn.cls == I.BPF_JMP32
        self.jmps_processed += 1
        if op == I.BPF_JA:
            if insn.code & I.BPF_X or insn.src or insn.dst or (not jmp32 and insn.imm) or (jmp32 and insn.off):
                raise self.fail(E.EINVAL, "BPF_JA uses reserved fields")
            return self._jump_target(idx)
        if op == I.BPF_EXIT:
            if insn.code & I.BPF_X or insn.imm or insn.src or insn.dst or jmp32:
                raise self.fail(E.EINVAL, "BPF_EXIT uses reserved fields")
            return self._check_exit(st)
        if op == I.BPF_CALL:
            if (
                insn.code & I.BPF_X
                or insn.src not in (0, I.BPF_PSEUDO_CALL, I.BPF_PSEUDO_KFUNC_CALL)
                or (insn.off and insn.src != I.BPF_PSEUDO_KFUNC_CALL)
                or insn.dst
                or jmp32
            ):
                raise self.fail(E.EINVAL, "BPF_CALL uses reserved fields")
            if insn.src == I.BPF_PSEUDO_CALL:
                return self._check_func_call(st, idx, idx + insn.imm + 1)
            if insn.src == I.BPF_PSEUDO_KFUNC_CALL:
                self._check_kfunc_call(st, insn)
                return idx + 1
            return self._check_helper_call(st, idx)
        return self._check_cond_jmp(st, idx, insn, op, jmp32)

    # ------------------------------------------------------------------------- after the walk
    def _check_max_stack_depth(self) -> None:
        """``check_max_stack_depth()``: along every static call chain the frames' stacks
        (rounded to 16 bytes as the JIT lays them out) add up to at most 512 bytes."""

        def walk(sub: int, depth: int, frames: int, seen: tuple[int, ...]) -> None:
            depth += _round_up(self.stack_depth[sub], 16)
            if depth > I.MAX_BPF_STACK:
                raise self.fail(E.EACCES, f"combined stack size of {frames} calls is {depth}. Too large")
            for callee in sorted(self.callees.get(sub, ())):
                if callee not in seen:
                    walk(callee, depth, frames + 1, (*seen, callee))

        walk(0, 0, 1, (0,))

    def _convert_pseudo_ld_imm64(self) -> None:
        """What the program runs with: each ``lddw`` holds the address it stands for."""
        for i, aux in self.ld_aux.items():
            kind = aux[0]
            if kind == "imm":
                continue
            if kind == "map":
                value = aux[1].addr
            elif kind == "map_value":
                value_addr = getattr(aux[1], "value_addr", None)  # array_map_direct_value_addr
                assert value_addr is not None, "a single-entry array map has a direct value address"
                value = value_addr(aux[2])
            else:
                value = BPF_FUNC_PTR_BASE + aux[1]
            lo, hi = I.ld_imm64(self.insns[i].dst, value)
            self.prog.insns[i], self.prog.insns[i + 1] = lo, hi


__all__ = ["BpfVerifierError", "VerifierFeatures", "bpf_check"]
