"""The verifier (kernel/bpf/verifier.c's bpf_check) on uprobe programs: programs it must
accept (hand-written with the insn builders, and the clang-built malloc_sizes object), one
rejected program per check with the kernel's errno and log line, and the rewrite of
``lddw`` pseudo loads into addresses.  The expected log lines are what Linux 6.18 prints
for the same instructions."""

from __future__ import annotations

import errno
from dataclasses import dataclass, field

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from kernel_model.bpf import insn as I
from kernel_model.bpf.bpf_types import (
    BPF_F_RDONLY_PROG,
    BPF_FUNC_PTR_BASE,
    BPF_MAP_TYPE_ARRAY,
    BPF_MAP_TYPE_HASH,
    BPF_MAP_TYPE_RINGBUF,
    BPF_TRACE_UPROBE_MULTI,
    BPF_TRACE_UPROBE_SESSION,
    BpfMap,
    BpfProg,
)
from kernel_model.bpf.func_protos import BPF_FUNC_MAX_ID, FUNC_NAMES, PROTOS, kprobe_func_proto
from kernel_model.bpf.insn import (
    BPF_ADD,
    BPF_B,
    BPF_DIV,
    BPF_DW,
    BPF_JEQ,
    BPF_JGT,
    BPF_JLT,
    BPF_JNE,
    BPF_LSH,
    BPF_SUB,
    BPF_W,
    Insn,
    alu64_imm,
    alu64_reg,
    atomic_op,
    call_helper,
    call_rel,
    exit_insn,
    ja,
    jmp_imm,
    ld_imm64,
    ld_map_fd,
    ld_map_value,
    ldx_mem,
    mov64_imm,
    mov64_reg,
    program,
    st_mem,
    stx_mem,
)
from kernel_model.bpf.memory import KernelMemory
from kernel_model.bpf.verifier import BpfVerifierError, VerifierFeatures, bpf_check

SESSION_KFUNCS = {70001: "bpf_session_is_return", 70002: "bpf_session_cookie"}
HASH_FD, RINGBUF_FD, GLOBAL_FD, ARRAY_FD, RODATA_FD = 3, 4, 5, 6, 7


class FakeMap(BpfMap):
    """A map with the attributes the verifier reads, a ``struct bpf_map`` region and, for
    a single-entry array, a value region (``value_addr``) holding ``data``."""

    def __init__(self, mem: KernelMemory, map_type: int, key_size: int, value_size: int, max_entries: int, **kw):
        super().__init__(key_size, value_size, max_entries, kw.get("map_flags", 0), kw.get("name", ""))
        self.map_type = map_type
        self.region = mem.alloc(64, "map", owner=self)
        self.values = mem.alloc(value_size, "map_value", owner=self)
        self.data = kw.get("data", bytes(value_size))

    def value_addr(self, off: int = 0) -> int:
        return self.values.base + off

    def lookup_value(self, key: bytes) -> bytes | None:
        return self.data


# fd -> (map_type, key_size, value_size, max_entries, map_flags), the maps every test has
MAP_SPECS = {
    HASH_FD: (BPF_MAP_TYPE_HASH, 4, 8, 64, 0),
    RINGBUF_FD: (BPF_MAP_TYPE_RINGBUF, 0, 0, 4096, 0),
    GLOBAL_FD: (BPF_MAP_TYPE_ARRAY, 4, 16, 1, 0),
    ARRAY_FD: (BPF_MAP_TYPE_ARRAY, 4, 64, 4, 0),
}


def make_maps(mem: KernelMemory) -> dict[int, FakeMap]:
    return {fd: FakeMap(mem, t, k, v, n, map_flags=f, name=f"m{fd}") for fd, (t, k, v, n, f) in MAP_SPECS.items()}


def verify(
    insns: list[Insn],
    *,
    license: str = "GPL",
    attach: int = 0,
    features: VerifierFeatures | None = None,
    log_level: int = 0,
    maps: dict[int, FakeMap] | None = None,
) -> tuple[str, BpfProg, dict[int, FakeMap]]:
    maps = maps if maps is not None else make_maps(KernelMemory())
    prog = BpfProg("t", list(insns), license=license, expected_attach_type=attach)
    log = bpf_check(
        prog, map_by_fd=maps.get, kfunc_ids=SESSION_KFUNCS, features=features or VerifierFeatures(), log_level=log_level
    )
    return log, prog, maps


def kfunc(btf_id: int) -> Insn:
    return Insn(I.BPF_JMP | I.BPF_CALL, 0, I.BPF_PSEUDO_KFUNC_CALL, 0, btf_id)


def lookup(fd: int = HASH_FD) -> list[Insn]:
    """key 0 at fp-4, r0 = bpf_map_lookup_elem(map, &key)."""
    return program(
        st_mem(BPF_W, 10, -4, 0),
        mov64_reg(2, 10),
        alu64_imm(BPF_ADD, 2, -4),
        ld_map_fd(1, fd),
        call_helper("map_lookup_elem"),
    )


def lookup_spilled_key(key: int) -> list[Insn]:
    """The u32 key spilled from a register to fp-8 (so the verifier knows it), then looked
    up in the 4-entry array and the element read without a NULL check."""
    return program(
        mov64_imm(1, key),
        stx_mem(BPF_W, 10, 1, -8),
        mov64_reg(2, 10),
        alu64_imm(BPF_ADD, 2, -8),
        ld_map_fd(1, ARRAY_FD),
        call_helper("map_lookup_elem"),
        ldx_mem(BPF_DW, 0, 0, 0),
        exit_insn(),
    )


RET0 = (mov64_imm(0, 0), exit_insn())

# ----------------------------------------------------------------------------- accepted programs

COUNTING = program(
    *lookup(),
    jmp_imm(BPF_JEQ, 0, 0, 2),
    mov64_imm(1, 1),
    atomic_op(BPF_DW, BPF_ADD, 0, 1, 0),
    *RET0,
)
BOUNDED_LOOP = program(
    mov64_imm(0, 0),
    mov64_imm(1, 0),
    alu64_reg(BPF_ADD, 0, 1),
    alu64_imm(BPF_ADD, 1, 1),
    jmp_imm(BPF_JLT, 1, 40, -3),
    exit_insn(),
)


def variable_index(bound: int) -> list[Insn]:
    """r1 = the probed function's first argument (pt_regs->di), checked ``r1 > bound``
    before it indexes u64s in a 64-byte map value."""
    return program(
        mov64_reg(6, 1),
        *lookup(ARRAY_FD),
        jmp_imm(BPF_JEQ, 0, 0, 5),
        ldx_mem(BPF_DW, 1, 6, 112),
        jmp_imm(BPF_JGT, 1, bound, 3),
        alu64_imm(BPF_LSH, 1, 3),
        alu64_reg(BPF_ADD, 0, 1),
        ldx_mem(BPF_DW, 1, 0, 0),
        *RET0,
    )


def ringbuf(submit: bool = True) -> list[Insn]:
    return program(
        ld_map_fd(1, RINGBUF_FD),
        mov64_imm(2, 16),
        mov64_imm(3, 0),
        call_helper("ringbuf_reserve"),
        jmp_imm(BPF_JEQ, 0, 0, 5 if submit else 2),
        mov64_imm(1, 7),
        stx_mem(BPF_DW, 0, 1, 8),
        *((mov64_reg(1, 0), mov64_imm(2, 0), call_helper("ringbuf_submit")) if submit else ()),
        *RET0,
    )


BPF2BPF = program(
    mov64_imm(6, 7),
    mov64_imm(1, 5),
    call_rel(2),
    alu64_reg(BPF_ADD, 0, 6),
    exit_insn(),
    mov64_imm(7, 0),
    mov64_reg(0, 1),
    alu64_imm(BPF_ADD, 0, 1),
    exit_insn(),
)


def loop_callback(ret: int = 0) -> list[Insn]:
    """bpf_loop(10, cb, &ctx, 0) with a u64 at fp-8 the callback increments."""
    return program(
        st_mem(BPF_DW, 10, -8, 0),
        mov64_imm(1, 10),
        ld_imm64(2, 8, I.BPF_PSEUDO_FUNC),  # insn 2 -> 2 + 8 + 1 = 11
        mov64_reg(3, 10),
        alu64_imm(BPF_ADD, 3, -8),
        mov64_imm(4, 0),
        call_helper("loop"),
        ldx_mem(BPF_DW, 0, 10, -8),
        *RET0,
        # 11: the callback (index, ctx)
        ldx_mem(BPF_DW, 1, 2, 0),
        alu64_imm(BPF_ADD, 1, 1),
        stx_mem(BPF_DW, 2, 1, 0),
        mov64_imm(0, ret),
        exit_insn(),
    )


def session(ret: int = 0) -> list[Insn]:
    """Entry: store 42 in the cookie; return: read it back."""
    return program(
        kfunc(70002),
        mov64_reg(6, 0),
        kfunc(70001),
        jmp_imm(BPF_JNE, 0, 0, 4),
        mov64_imm(1, 42),
        stx_mem(BPF_DW, 6, 1, 0),
        mov64_imm(0, ret),
        exit_insn(),
        ldx_mem(BPF_DW, 1, 6, 0),
        mov64_imm(0, ret),
        exit_insn(),
    )


def loop_exit_window(window: int) -> list[Insn]:
    """r1 counts 1..40 and the loop exits with r1 == 40 exactly: a byte at
    fp - ``window`` + r1 is inside the stack for a window of 41, at fp itself for 40."""
    return program(
        mov64_imm(1, 0),
        alu64_imm(BPF_ADD, 1, 1),
        jmp_imm(BPF_JLT, 1, 40, -2),
        mov64_reg(2, 10),
        alu64_imm(BPF_ADD, 2, -window),
        alu64_reg(BPF_ADD, 2, 1),
        ldx_mem(BPF_B, 0, 2, 0),
        exit_insn(),
    )


# 64 iterations of "if (bpf_get_prandom_u32() > 100) sum += 2; else sum += 1;": sum decides
# nothing, so the two sides of each branch meet in one state instead of doubling the walk
BRANCHY_LOOP = program(
    mov64_imm(6, 0),
    mov64_imm(7, 0),
    call_helper("get_prandom_u32"),
    jmp_imm(BPF_JGT, 0, 100, 2),
    alu64_imm(BPF_ADD, 6, 1),
    ja(1),
    alu64_imm(BPF_ADD, 6, 2),
    alu64_imm(BPF_ADD, 7, 1),
    jmp_imm(BPF_JLT, 7, 64, -7),
    mov64_reg(0, 6),
    exit_insn(),
)


def join_then_index(bad: int) -> list[Insn]:
    """r2 is 0 on the path verified first and ``bad`` on the other; both meet before r2
    indexes a 64-byte map value, so r2's bounds must keep the second path from being
    pruned as "already seen"."""
    return program(
        mov64_reg(6, 1),
        *lookup(ARRAY_FD),
        jmp_imm(BPF_JEQ, 0, 0, 7),
        ldx_mem(BPF_DW, 1, 6, 112),
        mov64_imm(2, bad),
        jmp_imm(BPF_JEQ, 1, 0, 1),
        mov64_imm(2, 0),
        alu64_reg(BPF_ADD, 0, 2),
        ldx_mem(BPF_B, 1, 0, 0),
        mov64_imm(1, 0),
        *RET0,
    )


ACCEPTED = {
    "counting": (COUNTING, 0),
    "bounded_loop_40": (BOUNDED_LOOP, 0),
    "variable_index_checked": (variable_index(7), 0),
    "ringbuf_reserve_submit": (ringbuf(), 0),
    "bpf_to_bpf_call": (BPF2BPF, 0),
    "bpf_loop_callback": (loop_callback(), 0),
    "session_kfuncs": (session(), BPF_TRACE_UPROBE_SESSION),
    "uprobe_multi": (COUNTING, BPF_TRACE_UPROBE_MULTI),
    "loop_exit_value": (loop_exit_window(41), 0),
    "branchy_loop": (BRANCHY_LOOP, 0),
    # the dereference of a scalar is on the branch these known values never take
    "zeroed_stack_reads_as_zero": (
        program(
            st_mem(BPF_DW, 10, -8, 0),
            ldx_mem(BPF_W, 1, 10, -4),
            jmp_imm(BPF_JEQ, 1, 0, 1),
            ldx_mem(BPF_DW, 0, 1, 0),
            *RET0,
        ),
        0,
    ),
    "narrow_fill_of_a_spilled_constant": (
        program(
            mov64_imm(1, 0x105),
            stx_mem(BPF_DW, 10, 1, -8),
            ldx_mem(BPF_B, 2, 10, -8),
            jmp_imm(BPF_JEQ, 2, 5, 1),
            ldx_mem(BPF_DW, 0, 2, 0),
            *RET0,
        ),
        0,
    ),
    # an array element at a constant index below max_entries exists: no NULL check needed
    "array_constant_key": (lookup_spilled_key(3), 0),
    "array_zero_key": (program(*lookup(ARRAY_FD), ldx_mem(BPF_DW, 0, 0, 0), exit_insn()), 0),
    "join_then_index": (join_then_index(63), 0),
    # the loader of a kprobe program is perfmon-capable: never-written stack reads as unknown
    "uninit_stack_read": (program(ldx_mem(BPF_DW, 0, 10, -8), exit_insn()), 0),
}


@pytest.mark.parametrize("name", ACCEPTED)
def test_accepted(name):
    insns, attach = ACCEPTED[name]
    log, _, _ = verify(insns, attach=attach)
    assert log == "", f"{name}: log {log!r}"


def test_branches_on_values_that_decide_nothing_are_pruned():
    log, _, _ = verify(BRANCHY_LOOP, log_level=1)
    processed = int(log.splitlines()[-1].split()[1])
    # two sides of 64 iterations: a few thousand insns at most, not 2**64 paths
    assert processed < 3000, log


def test_log_level_1_prints_the_stats_line():
    log, _, _ = verify(BOUNDED_LOOP, log_level=1)
    last = log.splitlines()[-1]
    assert last.startswith("processed ") and " insns (limit 1000000) max_states_per_insn " in last, last
    processed = int(last.split()[1])
    # 40 iterations of the 3-insn body, the 2 moves before it and the exit
    assert processed >= 40 * 3 + 3, last


# ----------------------------------------------------------------------------- the rewrites


def test_lddw_of_a_map_becomes_its_address():
    _, prog, maps = verify(COUNTING)
    lo, hi = prog.insns[3], prog.insns[4]
    assert (lo.src, lo.dst) == (0, 1), lo
    value = (lo.imm & 0xFFFFFFFF) | (hi.imm & 0xFFFFFFFF) << 32
    assert value == maps[HASH_FD].addr, f"{value:#x} != {maps[HASH_FD].addr:#x}"
    assert prog.maps == [maps[HASH_FD]]


def test_lddw_of_a_global_becomes_the_value_address():
    insns = program(ld_map_value(1, GLOBAL_FD, 8), ldx_mem(BPF_DW, 0, 1, 0), exit_insn())
    _, prog, maps = verify(insns)
    value = (prog.insns[0].imm & 0xFFFFFFFF) | (prog.insns[1].imm & 0xFFFFFFFF) << 32
    assert (prog.insns[0].src, value) == (0, maps[GLOBAL_FD].value_addr(8))


def test_lddw_of_a_subprogram_becomes_a_function_pointer():
    _, prog, _ = verify(loop_callback())
    value = (prog.insns[2].imm & 0xFFFFFFFF) | (prog.insns[3].imm & 0xFFFFFFFF) << 32
    assert (prog.insns[2].src, value) == (0, BPF_FUNC_PTR_BASE + 11)
    assert prog.subprog_starts == [0, 11]


def test_stack_depth_is_the_deepest_access():
    _, prog, _ = verify(loop_callback())
    assert prog.stack_depth == 8


def test_plain_lddw_and_other_insns_are_unchanged():
    insns = program(ld_imm64(0, 0x1122334455667788), exit_insn())
    _, prog, _ = verify(insns)
    assert prog.insns == insns


# ----------------------------------------------------------------------------- rejections


@dataclass
class Bad:
    insns: list[Insn]
    errno: int
    lines: tuple[str, ...]  # the log's last lines (the last is str(error))
    license: str = "GPL"
    attach: int = 0
    features: VerifierFeatures = field(default_factory=VerifierFeatures)
    native: bool = True  # Linux 6.18 gives the same for these bytes (needs no kfunc BTF)


def _ctx(off: int, size: int = BPF_DW) -> list[Insn]:
    return program(ldx_mem(size, 0, 1, off), exit_insn())


REJECTED: dict[str, Bad] = {
    "reg_not_init": Bad(program(mov64_reg(0, 2), exit_insn()), errno.EACCES, ("R2 !read_ok",)),
    "r0_not_init_at_exit": Bad(program(exit_insn()), errno.EACCES, ("R0 !read_ok",)),
    "frame_pointer_write": Bad(program(mov64_imm(10, 0), *RET0), errno.EACCES, ("frame pointer is read only",)),
    "unreachable": Bad(program(*RET0, *RET0), errno.EINVAL, ("unreachable insn 2",)),
    "jump_out_of_range": Bad(program(ja(5), *RET0), errno.EINVAL, ("jump out of range from insn 0 to 6",)),
    "infinite_loop": Bad(
        program(mov64_imm(0, 0), ja(-1)),
        errno.EINVAL,
        (
            "infinite loop detected at insn 1",
            "cur state: R0=0 R1=ctx() R10=fp0",
            "old state: R0=0 R1=ctx() R10=fp0",
        ),
    ),
    "last_insn": Bad(program(mov64_imm(0, 0)), errno.EINVAL, ("last insn is not an exit or jmp",)),
    "unknown_opcode": Bad(program(Insn(0xE7, 0, 0, 0, 0), *RET0), errno.EINVAL, ("unknown opcode e7",)),
    "lddw_last": Bad(program(*RET0, Insn(0x18, 0, 0, 0, 0)), errno.EINVAL, ("last insn is not an exit or jmp",)),
    "lddw_second_half": Bad(
        program(Insn(0x18, 0, 0, 0, 0), mov64_imm(0, 0), exit_insn()), errno.EINVAL, ("invalid bpf_ld_imm64 insn",)
    ),
    "invalid_func": Bad(
        program(call_helper(BPF_FUNC_MAX_ID), *RET0), errno.EINVAL, (f"invalid func unknown#{BPF_FUNC_MAX_ID}",)
    ),
    "helper_not_for_kprobe": Bad(
        program(call_helper(9), *RET0), errno.EINVAL, ("program of this type cannot use helper bpf_skb_store_bytes#9",)
    ),
    "copy_from_user_not_sleepable": Bad(
        program(call_helper("copy_from_user"), *RET0),
        errno.EINVAL,
        ("helper call might sleep in a non-sleepable prog",),
    ),
    "gpl_only": Bad(
        program(call_helper("probe_read_user"), *RET0),
        errno.EINVAL,
        ("cannot call GPL-restricted function from non-GPL compatible program",),
        license="Proprietary",
    ),
    "ctx_past_end": Bad(_ctx(168), errno.EACCES, ("invalid bpf_context access off=168 size=8",)),
    "ctx_negative": Bad(_ctx(-8), errno.EACCES, ("invalid bpf_context access off=-8 size=8",)),
    "ctx_misaligned": Bad(_ctx(2, BPF_W), errno.EACCES, ("invalid bpf_context access off=2 size=4",)),
    "ctx_write": Bad(
        program(mov64_imm(2, 0), stx_mem(BPF_DW, 1, 2, 0), *RET0),
        errno.EACCES,
        ("invalid bpf_context access off=0 size=8",),
    ),
    "ctx_store_imm": Bad(
        program(st_mem(BPF_DW, 1, 0, 1), *RET0), errno.EACCES, ("invalid bpf_context access off=0 size=8",)
    ),
    "ctx_atomic": Bad(
        program(mov64_imm(2, 1), atomic_op(BPF_DW, BPF_ADD, 1, 2, 0), *RET0),
        errno.EACCES,
        ("BPF_ATOMIC stores into R1 ctx is not allowed",),
    ),
    "uninit_stack_read_unprivileged": Bad(
        program(ldx_mem(BPF_DW, 0, 10, -8), exit_insn()),
        errno.EACCES,
        ("invalid read from stack off -8+0 size 8",),
        features=VerifierFeatures(allow_uninit_stack=False),
        native=False,
    ),
    "stack_out_of_bounds": Bad(
        program(st_mem(BPF_DW, 10, -520, 0), *RET0), errno.EACCES, ("invalid write to stack R10 off=-520 size=8",)
    ),
    "stack_above_fp": Bad(
        program(ldx_mem(BPF_DW, 0, 10, 0), exit_insn()), errno.EACCES, ("invalid read from stack R10 off=0 size=8",)
    ),
    "helper_key_outside_stack": Bad(
        program(mov64_reg(2, 10), ld_map_fd(1, HASH_FD), call_helper("map_lookup_elem"), *RET0),
        errno.EACCES,
        ("invalid read from stack R2 off=0 size=4",),
    ),
    "helper_key_uninit_unprivileged": Bad(
        program(
            mov64_reg(2, 10), alu64_imm(BPF_ADD, 2, -8), ld_map_fd(1, HASH_FD), call_helper("map_lookup_elem"), *RET0
        ),
        errno.EACCES,
        ("invalid read from stack R2 off -8+0 size 4",),
        features=VerifierFeatures(allow_uninit_stack=False),
        native=False,
    ),
    "helper_write_past_fp": Bad(
        program(
            mov64_reg(1, 10),
            alu64_imm(BPF_ADD, 1, -16),
            mov64_imm(2, 100),
            mov64_imm(3, 0),
            call_helper("probe_read_user"),
            *RET0,
        ),
        errno.EINVAL,
        ("invalid write to stack R1 off=-16 size=100",),
    ),
    "helper_zero_sized_key": Bad(program(*lookup(RINGBUF_FD), *RET0), errno.EACCES, ("invalid zero-sized read",)),
    "stack_misaligned": Bad(
        program(st_mem(BPF_DW, 10, -12, 0), *RET0),
        errno.EACCES,
        ("misaligned stack access off 0+0+-12 size 8",),
    ),
    "loop_exit_value_past_fp": Bad(loop_exit_window(40), errno.EACCES, ("invalid read from stack R2 off=0 size=1",)),
    "join_then_index_past_end": Bad(
        join_then_index(64),
        errno.EACCES,
        (
            "invalid access to map value, value_size=64 off=64 size=1",
            "R0 min value is outside of the allowed memory range",
        ),
    ),
    "map_value_or_null_deref": Bad(
        program(*lookup(), ldx_mem(BPF_DW, 0, 0, 0), exit_insn()),
        errno.EACCES,
        ("R0 invalid mem access 'map_value_or_null'",),
    ),
    "array_key_past_max_entries": Bad(
        lookup_spilled_key(4),
        errno.EACCES,
        ("R0 invalid mem access 'map_value_or_null'",),
    ),
    "scalar_deref": Bad(
        program(mov64_imm(1, 0), ldx_mem(BPF_DW, 0, 1, 0), exit_insn()),
        errno.EACCES,
        ("R1 invalid mem access 'scalar'",),
    ),
    "map_value_past_end": Bad(
        program(*lookup(), jmp_imm(BPF_JEQ, 0, 0, 1), ldx_mem(BPF_DW, 0, 0, 8), *RET0),
        errno.EACCES,
        (
            "invalid access to map value, value_size=8 off=8 size=8",
            "R0 min value is outside of the allowed memory range",
        ),
    ),
    "variable_index_unchecked_bound": Bad(
        variable_index(8),
        errno.EACCES,
        (
            "invalid access to map value, value_size=64 off=64 size=8",
            "R0 max value is outside of the allowed memory range",
        ),
    ),
    "unreleased_reference": Bad(
        ringbuf(submit=False),
        errno.EINVAL,
        ("Unreleased reference id=2 alloc_insn=4", "BPF_EXIT instruction in main prog would lead to reference leak"),
    ),
    "ringbuf_submit_unchecked": Bad(
        program(
            ld_map_fd(1, RINGBUF_FD),
            mov64_imm(2, 8),
            mov64_imm(3, 0),
            call_helper("ringbuf_reserve"),
            mov64_reg(1, 0),
            mov64_imm(2, 0),
            call_helper("ringbuf_submit"),
            *RET0,
        ),
        errno.EACCES,
        ("R1 type=ringbuf_mem_or_null expected=ringbuf_mem",),
    ),
    "helper_key_scalar": Bad(
        program(ld_map_fd(1, HASH_FD), mov64_imm(2, 0), call_helper("map_lookup_elem"), *RET0),
        errno.EACCES,
        ("R2 type=scalar expected=fp, pkt, pkt_meta, map_key, map_value, mem, ringbuf_mem, buf, trusted_ptr_",),
    ),
    "map_type_for_helper": Bad(
        program(ld_map_fd(1, HASH_FD), mov64_imm(2, 0), call_helper("ringbuf_query"), *RET0),
        errno.EINVAL,
        ("cannot pass map_type 1 into func bpf_ringbuf_query#134",),
    ),
    "too_large": Bad(
        program(mov64_imm(0, 0), alu64_imm(BPF_ADD, 0, 1), jmp_imm(BPF_JLT, 0, 1_000_000, -2), exit_insn()),
        errno.E2BIG,
        ("BPF program is too large. Processed 1001 insn",),
        features=VerifierFeatures(insn_limit=1000),
        native=False,
    ),
    "alu_reserved": Bad(
        program(mov64_imm(0, 0), Insn(I.BPF_ALU64 | BPF_ADD | I.BPF_K, 0, 1, 0, 1), exit_insn()),
        errno.EINVAL,
        ("BPF_ALU uses reserved fields",),
    ),
    "mov_reserved": Bad(
        program(Insn(I.BPF_ALU64 | I.BPF_MOV | I.BPF_K, 0, 0, 1, 0), exit_insn()),
        errno.EINVAL,
        ("BPF_MOV uses reserved fields",),
    ),
    "stx_reserved": Bad(
        program(mov64_imm(0, 0), Insn(I.BPF_STX | I.BPF_MEM | BPF_DW, 10, 0, -8, 1), exit_insn()),
        errno.EINVAL,
        ("BPF_STX uses reserved fields",),
    ),
    "st_reserved": Bad(
        program(Insn(I.BPF_ST | I.BPF_MEM | BPF_DW, 10, 1, -8, 0), *RET0),
        errno.EINVAL,
        ("BPF_ST uses reserved fields",),
    ),
    "ldx_reserved": Bad(
        program(Insn(I.BPF_LDX | I.BPF_MEM | BPF_DW, 0, 10, -8, 1), exit_insn()),
        errno.EINVAL,
        ("BPF_LDX uses reserved fields",),
    ),
    "jmp_reserved": Bad(
        program(mov64_imm(0, 0), Insn(I.BPF_JMP | BPF_JEQ | I.BPF_K, 0, 1, 0, 0), exit_insn()),
        errno.EINVAL,
        ("BPF_JMP/JMP32 uses reserved fields",),
    ),
    "exit_reserved": Bad(
        program(mov64_imm(0, 0), Insn(I.BPF_JMP | I.BPF_EXIT, 0, 0, 0, 1)),
        errno.EINVAL,
        ("BPF_EXIT uses reserved fields",),
    ),
    "div_by_zero": Bad(program(mov64_imm(0, 1), alu64_imm(BPF_DIV, 0, 0), exit_insn()), errno.EINVAL, ("div by zero",)),
    "shift_out_of_range": Bad(
        program(mov64_imm(0, 1), alu64_imm(BPF_LSH, 0, 64), exit_insn()), errno.EINVAL, ("invalid shift 64",)
    ),
    "spill_size": Bad(program(stx_mem(BPF_W, 10, 1, -8), *RET0), errno.EACCES, ("invalid size of register spill",)),
    "fill_size": Bad(
        program(stx_mem(BPF_DW, 10, 1, -8), ldx_mem(BPF_W, 0, 10, -8), exit_insn()),
        errno.EACCES,
        ("invalid size of register fill",),
    ),
    "combined_stack": Bad(
        program(st_mem(BPF_DW, 10, -304, 0), call_rel(1), exit_insn(), st_mem(BPF_DW, 10, -304, 0), *RET0),
        errno.EACCES,
        ("combined stack size of 2 calls is 608. Too large",),
    ),
    "jmp_operand_read_before_reserved_check": Bad(
        program(mov64_imm(0, 0), Insn(I.BPF_JMP | BPF_JEQ | I.BPF_X, 9, 0, 0, 1), exit_insn()),
        errno.EACCES,
        ("R9 !read_ok",),
    ),
    "negated_pointer_is_a_number": Bad(
        program(mov64_reg(1, 10), Insn(I.BPF_ALU64 | I.BPF_NEG, 1, 0, 0, 0), ldx_mem(BPF_DW, 0, 1, 0), exit_insn()),
        errno.EACCES,
        ("R1 invalid mem access 'scalar'",),
    ),
    "sign_extended_pointer_is_a_number": Bad(
        program(I.movsx64_reg(2, 10, 8), ldx_mem(BPF_B, 0, 2, 0), exit_insn()),
        errno.EACCES,
        ("R2 invalid mem access 'scalar'",),
    ),
    "modulo_leaves_nothing_known": Bad(
        program(
            *lookup(ARRAY_FD),
            mov64_imm(1, 8),
            Insn(I.BPF_ALU | I.BPF_MOD | I.BPF_K, 1, 0, 0, 3),
            alu64_reg(BPF_ADD, 0, 1),
            *RET0,
        ),
        errno.EINVAL,
        ("math between map_value pointer and register with unbounded min value is not allowed",),
    ),
    "pointer_and_unbounded_before_operator": Bad(
        program(
            mov64_reg(6, 1),
            *lookup(ARRAY_FD),
            ldx_mem(BPF_DW, 1, 6, 112),
            alu64_reg(I.BPF_AND, 0, 1),
            *RET0,
        ),
        errno.EINVAL,
        ("math between map_value pointer and register with unbounded min value is not allowed",),
    ),
    "pointer_bitwise": Bad(
        program(*lookup(ARRAY_FD), mov64_imm(1, 8), alu64_reg(I.BPF_AND, 0, 1), *RET0),
        errno.EACCES,
        ("R0 bitwise operator &= on pointer prohibited",),
    ),
    "or_null_arithmetic": Bad(
        program(*lookup(), alu64_imm(BPF_ADD, 0, 8), *RET0),
        errno.EACCES,
        ("R0 pointer arithmetic on map_value_or_null prohibited, null-check it first",),
    ),
    "fp_subtraction": Bad(
        program(mov64_reg(1, 10), alu64_imm(BPF_SUB, 1, 8), *RET0),
        errno.EACCES,
        ("R1 subtraction from stack pointer prohibited",),
    ),
    "ld_abs": Bad(
        program(mov64_reg(6, 1), Insn(I.BPF_LD | I.BPF_ABS | BPF_W, 0, 0, 0, 0), exit_insn()),
        errno.EINVAL,
        ("BPF_LD_[ABS|IND] instructions not allowed for this program type",),
    ),
    "bad_map_fd": Bad(program(ld_map_fd(1, 42), *RET0), errno.EBADF, ("fd 42 is not pointing to valid bpf_map",)),
    "call_invalid_destination": Bad(program(call_rel(5), *RET0), errno.EINVAL, ("call to invalid destination",)),
    "jump_into_lddw": Bad(
        program(jmp_imm(BPF_JEQ, 1, 0, 1), ld_imm64(0, 1), *RET0),
        errno.EINVAL,
        ("jump into the middle of ldimm64 insn 1",),
    ),
    "call_stack_too_deep": Bad(
        program(call_rel(1), exit_insn(), call_rel(-1), exit_insn()),
        errno.E2BIG,
        ("the call stack of 9 frames is too deep",),
    ),
    "callback_return_range": Bad(
        loop_callback(ret=2),
        errno.EINVAL,
        ("At callback return the register R0 has smin=2 smax=2 should have been in [0, 1]",),
        native=False,  # the kernel wants the callback's BTF func_info, which hand-written bytes lack
    ),
    "session_return_range": Bad(
        program(mov64_imm(0, 2), exit_insn()),
        errno.EINVAL,
        ("At program exit the register R0 has smin=2 smax=2 should have been in [0, 1]",),
        attach=BPF_TRACE_UPROBE_SESSION,
    ),
    "session_kfunc_outside_session": Bad(
        session(), errno.EACCES, ("calling kernel function bpf_session_cookie is not allowed",), native=False
    ),
    "session_kfunc_without_uprobe_session": Bad(
        session(),
        errno.EACCES,
        ("calling kernel function bpf_session_cookie is not allowed",),
        attach=BPF_TRACE_UPROBE_SESSION,
        features=VerifierFeatures(uprobe_session=False),
        native=False,
    ),
    "callee_reads_callers_r6": Bad(
        program(mov64_imm(6, 1), call_rel(1), exit_insn(), mov64_reg(0, 6), exit_insn()),
        errno.EACCES,
        ("R6 !read_ok",),
    ),
    "callee_returns_its_stack": Bad(
        program(call_rel(1), exit_insn(), mov64_reg(0, 10), exit_insn()),
        errno.EINVAL,
        ("cannot return stack pointer to the caller",),
    ),
    "session_kfunc_in_uprobe_multi": Bad(
        session(),
        errno.EACCES,
        ("calling kernel function bpf_session_cookie is not allowed",),
        attach=BPF_TRACE_UPROBE_MULTI,
        native=False,
    ),
    "unknown_kfunc": Bad(
        program(kfunc(99), *RET0), errno.EINVAL, ("kernel btf_id 99 is not a function",), native=False
    ),
}


@pytest.mark.parametrize("name", REJECTED)
def test_rejected(name):
    bad = REJECTED[name]
    with pytest.raises(BpfVerifierError) as e:
        verify(bad.insns, license=bad.license, attach=bad.attach, features=bad.features)
    got = e.value.log.rstrip("\n").split("\n")[-len(bad.lines) :]
    assert (e.value.errno, tuple(got)) == (bad.errno, bad.lines), f"{name}: {e.value.errno} {e.value.log!r}"
    assert str(e.value) == bad.lines[-1]


def test_rejection_log_level_1_ends_with_the_stats_line():
    with pytest.raises(BpfVerifierError) as e:
        verify(REJECTED["reg_not_init"].insns, log_level=1)
    lines = e.value.log.rstrip("\n").split("\n")
    assert lines[-2] == "R2 !read_ok", lines
    assert lines[-1].startswith("processed 1 insns (limit 1000000) "), lines


def test_insn_limit_is_the_kernels():
    assert VerifierFeatures().insn_limit == 1_000_000


@pytest.mark.parametrize("sleepable,expected", [(True, ""), (False, "helper call might sleep in a non-sleepable prog")])
def test_only_a_sleepable_program_may_call_a_helper_that_might_sleep(sleepable, expected):
    """``prog->sleepable`` (a ``uprobe.s`` program): bpf_copy_from_user(fp-8, 8, ptr)."""
    insns = program(
        mov64_reg(1, 10),
        alu64_imm(BPF_ADD, 1, -8),
        mov64_imm(2, 8),
        mov64_imm(3, 0),
        call_helper("copy_from_user"),
        *RET0,
    )
    prog = BpfProg("t", list(insns), sleepable=sleepable)
    try:
        got = bpf_check(prog, map_by_fd=make_maps(KernelMemory()).get)
    except BpfVerifierError as e:
        got = str(e)
    assert got == expected, f"sleepable={sleepable}: expected {expected!r}, got {got!r}"


# ----------------------------------------------------------------------------- the helper table


def test_every_provided_helper_has_a_prototype_under_its_kernel_name():
    mismatched = {n: i for n, i in I.HELPER_IDS.items() if FUNC_NAMES[i] != n or n not in PROTOS}
    assert mismatched == {}


@pytest.mark.parametrize(
    "name,gpl", [("probe_read_user", True), ("trace_printk", True), ("map_lookup_elem", False), ("loop", False)]
)
def test_gpl_only_flags(name, gpl):
    proto = kprobe_func_proto(I.HELPER_IDS[name])
    assert proto is not None and proto.gpl_only is gpl, proto


# ----------------------------------------------------------------------------- the clang-built object

R_BPF_64_64 = 1


def load_object_programs(path: str, maps: dict[str, FakeMap], fds: dict[str, int]) -> dict[str, list[Insn]]:
    """The programs of a ``.bpf.o`` with their ``lddw`` relocations applied as libbpf does
    (``bpf_object__relocate_data``): a map symbol in ``.maps`` becomes BPF_PSEUDO_MAP_FD,
    a variable in ``.rodata``/``.bss``/``.data`` BPF_PSEUDO_MAP_VALUE at its offset."""
    out: dict[str, list[Insn]] = {}
    with open(path, "rb") as f:
        elf = ELFFile(f)
        symtab = elf.get_section_by_name(".symtab")
        sec_names = {i: s.name for i, s in enumerate(elf.iter_sections())}
        for sec_idx, sec in enumerate(elf.iter_sections()):
            if sec["sh_type"] != "SHT_PROGBITS" or not sec["sh_flags"] & 0x4:  # SHF_EXECINSTR
                continue
            insns = I.decode(sec.data())
            rel = elf.get_section_by_name(".rel" + sec.name)
            if isinstance(rel, RelocationSection):
                for r in rel.iter_relocations():
                    assert r["r_info_type"] == R_BPF_64_64, r
                    sym = symtab.get_symbol(r["r_info_sym"])
                    i = r["r_offset"] // 8
                    target = sec_names[sym["st_shndx"]]
                    if target == ".maps":
                        insns[i] = insns[i]._replace(src=I.BPF_PSEUDO_MAP_FD, imm=fds[sym.name])
                    else:
                        off = insns[i].imm + sym["st_value"]
                        insns[i] = insns[i]._replace(src=I.BPF_PSEUDO_MAP_VALUE, imm=fds[target])
                        insns[i + 1] = insns[i + 1]._replace(imm=off)
            for sym in symtab.iter_symbols():
                if sym["st_shndx"] == sec_idx and sym["st_info"]["type"] == "STT_FUNC":
                    start = sym["st_value"] // 8
                    out[sym.name] = insns[start : start + sym["st_size"] // 8]
    return out


@pytest.fixture(scope="module")
def malloc_sizes(build_bpf):
    mem = KernelMemory()
    maps = {
        "sizes": FakeMap(mem, BPF_MAP_TYPE_HASH, 4, 8, 64, name="sizes"),
        "frees": FakeMap(mem, BPF_MAP_TYPE_RINGBUF, 0, 0, 64 * 1024, name="frees"),
        ".rodata": FakeMap(mem, BPF_MAP_TYPE_ARRAY, 4, 4, 1, map_flags=BPF_F_RDONLY_PROG, name=".rodata"),
        ".bss": FakeMap(mem, BPF_MAP_TYPE_ARRAY, 4, 4, 1, name=".bss"),
    }
    maps[".rodata"].frozen = True
    fds = {name: 10 + i for i, name in enumerate(maps)}
    progs = load_object_programs(build_bpf("malloc_sizes.bpf.c"), maps, fds)
    return progs, maps, {fd: maps[name] for name, fd in fds.items()}


@pytest.mark.parametrize("name", ["on_malloc", "on_free"])
def test_malloc_sizes_programs_are_accepted_and_rewritten(malloc_sizes, name):
    progs, maps, by_fd = malloc_sizes
    prog = BpfProg(name, list(progs[name]), section="uprobe")
    bpf_check(prog, map_by_fd=by_fd.get)
    loaded = {
        (x.imm & 0xFFFFFFFF) | (prog.insns[i + 1].imm & 0xFFFFFFFF) << 32
        for i, x in enumerate(prog.insns)
        if x.code == I.BPF_LD | I.BPF_IMM | BPF_DW
    }
    pseudo = [i for i, x in enumerate(prog.insns) if x.code == I.BPF_LD | I.BPF_IMM | BPF_DW and x.src]
    assert pseudo == [], f"lddw left with a pseudo source at {pseudo}"
    # target_tgid is the first (only) .rodata variable
    assert maps[".rodata"].value_addr(0) in loaded, [hex(v) for v in loaded]


def test_malloc_sizes_used_maps(malloc_sizes):
    progs, maps, by_fd = malloc_sizes
    used = {}
    for name in ("on_malloc", "on_free"):
        prog = BpfProg(name, list(progs[name]), section="uprobe")
        bpf_check(prog, map_by_fd=by_fd.get)
        used[name] = sorted(m.name for m in prog.maps)
    assert used == {"on_malloc": [".rodata", "sizes"], "on_free": [".bss", ".rodata", "frees"]}


def test_malloc_sizes_without_the_null_check_is_rejected(malloc_sizes):
    """Dropping on_free's ``if (!e)`` lets the record be used possibly NULL."""
    progs, _, by_fd = malloc_sizes
    insns = list(progs["on_free"])
    reserve = next(i for i, x in enumerate(insns) if x.code == 0x85 and x.imm == I.HELPER_IDS["ringbuf_reserve"])
    check = next(i for i in range(reserve + 1, len(insns)) if insns[i].code & 0x07 in (I.BPF_JMP, I.BPF_JMP32))
    insns[check] = mov64_reg(insns[check].dst, insns[check].dst)
    with pytest.raises(BpfVerifierError) as e:
        bpf_check(BpfProg("on_free", insns), map_by_fd=by_fd.get)
    assert e.value.errno == errno.EACCES and "ringbuf_mem_or_null" in str(e.value), str(e.value)
