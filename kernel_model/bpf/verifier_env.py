"""The verifier's environment (``struct bpf_verifier_env`` of ``kernel/bpf/verifier.c``)
and what every part of the check uses: the log and the rejection (``verbose()``), the
pending branches (``push_stack()``), ``check_reg_arg()``, fresh ids, and the precision
marks (which scalars' exact values matter, so that pruning keeps them apart).

The checks themselves are grouped as verifier.c groups its functions, each a class over
this one: :mod:`~kernel_model.bpf.verifier_alu` (``check_alu_op()``),
:mod:`~kernel_model.bpf.verifier_mem` (``check_mem_access()``, ``check_atomic()``),
:mod:`~kernel_model.bpf.verifier_jmp` (``check_cond_jmp_op()``) and
:mod:`~kernel_model.bpf.verifier_calls` (helper, kfunc and bpf-to-bpf calls, callbacks,
exits); :mod:`~kernel_model.bpf.verifier` puts them together with ``do_check()``'s loop
and the passes around it.  The parts reach each other through ``self``; only the calls
import another part (the memory checks, for helper arguments), and none imports the
module that assembles them.
"""

from __future__ import annotations

import errno as E
from collections.abc import Callable
from typing import TYPE_CHECKING

from kernel_model.bpf import insn as I
from kernel_model.bpf import verifier_state as S
from kernel_model.bpf.bpf_types import BPF_F_RDONLY_PROG, BPF_TRACE_UPROBE_SESSION, BpfMap, BpfProg
from kernel_model.bpf.func_protos import BPF_FUNC_MAX_ID, kprobe_func_proto
from kernel_model.bpf.verifier_state import NOT_INIT, Explored, Reg, State

if TYPE_CHECKING:
    from kernel_model.bpf.verifier import VerifierFeatures

# the bounds check_reg_sane_offset() and check_mem_size_reg() put on offsets and sizes
BPF_MAX_VAR_OFF = 1 << 29
BPF_MAX_VAR_SIZ = 1 << 29


class VerifierReject(Exception):
    """A check failed: it unwinds the walk to ``bpf_check()``, which turns it into the
    rejection the loader sees (``BpfVerifierError`` with the log)."""

    def __init__(self, errno: int, msg: str):
        super().__init__(msg)
        self.errno, self.msg = errno, msg


def map_rdonly(m: BpfMap) -> bool:
    """``bpf_map_is_rdonly()``: read-only for programs and frozen (a loaded ``.rodata``)."""
    return bool(m.map_flags & BPF_F_RDONLY_PROG) and m.frozen


class VerifierEnv:
    """``struct bpf_verifier_env``: the program, the maps it uses, the walk's bookkeeping
    and the log."""

    def __init__(self, prog, map_by_fd, maps_by_idx, kfunc_ids, features, log_level):
        self.prog: BpfProg = prog
        self.insns: list[I.Insn] = list(prog.insns)
        self.map_by_fd = map_by_fd
        self.maps_by_idx = maps_by_idx
        self.kfunc_ids = kfunc_ids
        self.features: VerifierFeatures = features
        self.log_level = log_level
        self.log: list[str] = []
        self.used_maps: list[BpfMap] = []
        self.ld_aux: dict[int, tuple] = {}  # lddw insn -> what it loads
        self.subprog_starts: list[int] = [0]
        self.stack_depth: list[int] = []
        self.id_gen = 0
        self.insn_processed = 0
        self.explored: dict[int, list[Explored]] = {}
        self.total_states = self.peak_states = self.max_states_per_insn = 0
        self.prune_points: set[int] = set()
        self.pending: list[tuple[State, int]] = []
        self.jmps_processed = self.prev_jmps = self.prev_insns = 0
        self.callees: dict[int, set[int]] = {}  # subprog -> subprogs it calls (and callbacks it passes)
        self.err_mark = -1  # where the failing check's lines start in the log
        self.precise: list[S.Precise] = []
        self.precise_sinks: dict[int, int] = {}  # insn -> registers whose value matters there
        self.precise_slot_sinks: dict[int, frozenset[int]] = {}  # insn -> stack slots whose value matters
        self.cur_idx = 0

    def verbose(self, line: str) -> None:
        self.log.append(line)

    def fail(self, errno: int, msg: str, *before: str) -> VerifierReject:
        """The rejection; ``before`` are the lines the kernel prints ahead of ``msg``."""
        self.err_mark = len(self.log)
        for line in before:
            self.verbose(line)
        return VerifierReject(errno, msg)

    def _push(self, state: State, idx: int) -> State:
        """``push_stack()``: a copy of ``state`` to continue at ``idx`` later."""
        copy = state.copy()
        if copy.parent is not None:
            copy.parent.branches += 1
        self.pending.append((copy, idx))
        return copy

    def _new_id(self) -> int:
        self.id_gen += 1
        return self.id_gen

    def _check_reg_arg(self, st: State, regno: int, src: bool) -> None:
        """``check_reg_arg()``: a source must have been written; r10 is never a destination."""
        if regno >= I.MAX_BPF_REG:
            raise self.fail(E.EINVAL, f"R{regno} is invalid")
        if src:
            if st.cur.regs[regno].type == NOT_INIT:
                raise self.fail(E.EACCES, f"R{regno} !read_ok")
        elif regno == I.BPF_REG_FP:
            raise self.fail(E.EACCES, "frame pointer is read only")

    def _for_each_reg(self, st: State, fn: Callable[[Reg], Reg]) -> None:
        for f in st.frames:
            f.regs = [fn(r) for r in f.regs]
            for spi, (types, spilled) in list(f.stack.items()):
                if spilled is not None:
                    f.stack[spi] = (types, fn(spilled))

    def _update_precision(self) -> None:
        self.precise = S.precise_live(
            self.insns,
            self.subprog_starts,
            self._helper_precise_args,
            self.precise_sinks,
            self.precise_slot_sinks,
            self.prog.expected_attach_type == BPF_TRACE_UPROBE_SESSION,
        )

    def _mark_precise(self, idx: int, regno: int) -> None:
        """A scalar combined with a pointer at ``idx``: its bounds matter from here back."""
        mask = self.precise_sinks.get(idx, 0)
        if not mask >> regno & 1:
            self.precise_sinks[idx] = mask | 1 << regno
            self._update_precision()

    @staticmethod
    def _helper_precise_args(func_id: int) -> int:
        """The argument registers of a helper whose value matters (all but ARG_ANYTHING)."""
        fn = kprobe_func_proto(func_id) if 0 <= func_id < BPF_FUNC_MAX_ID else None
        if fn is None:
            return 0b111110
        return sum(1 << r for r, kind in enumerate(fn.args, start=1) if kind != "anything")
