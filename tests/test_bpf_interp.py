"""The eBPF interpreter (kernel_model/bpf/core.py) against the semantics of
kernel/bpf/core.c's ___bpf_prog_run and the instruction-set document: exact register
results per class and op, memory through KernelMemory and the stack, calls of every
kind, tail calls, and a BpfRuntimeError for anything a verified program never does."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_model.bpf.bpf_types import BPF_FUNC_PTR_BASE, BpfProg
from kernel_model.bpf.core import BpfRuntimeError, BpfVm
from kernel_model.bpf.insn import (
    BPF_ADD,
    BPF_AND,
    BPF_ARSH,
    BPF_B,
    BPF_CALL,
    BPF_CMPXCHG,
    BPF_DIV,
    BPF_DW,
    BPF_FETCH,
    BPF_H,
    BPF_JEQ,
    BPF_JGE,
    BPF_JGT,
    BPF_JLE,
    BPF_JLT,
    BPF_JMP,
    BPF_JNE,
    BPF_JSET,
    BPF_JSGE,
    BPF_JSGT,
    BPF_JSLE,
    BPF_JSLT,
    BPF_LOAD_ACQ,
    BPF_LSH,
    BPF_MOD,
    BPF_MOV,
    BPF_MUL,
    BPF_NEG,
    BPF_OR,
    BPF_PSEUDO_KFUNC_CALL,
    BPF_RSH,
    BPF_STORE_REL,
    BPF_SUB,
    BPF_W,
    BPF_XCHG,
    BPF_XOR,
    HELPER_IDS,
    MAX_CALL_FRAMES,
    Insn,
    alu32_imm,
    alu32_reg,
    alu64_imm,
    alu64_reg,
    atomic_op,
    call_helper,
    call_rel,
    decode,
    endian,
    exit_insn,
    gotol,
    ja,
    jmp32_imm,
    jmp32_reg,
    jmp_imm,
    jmp_reg,
    ld_imm64,
    ld_map_fd,
    ldx_mem,
    ldx_memsx,
    mov64_imm,
    mov64_reg,
    movsx32_reg,
    movsx64_reg,
    program,
    st_mem,
    stx_mem,
)
from kernel_model.bpf.memory import KernelMemory
from kernel_model.errors import EmuError

M64 = (1 << 64) - 1
S64_MIN = 1 << 63


class FakeEnv:
    """A BpfEnv recording every call; ``funcs`` maps a function id to what runs for it."""

    def __init__(self, memory: KernelMemory):
        self.memory = memory
        self.calls: list[tuple[int, ...]] = []
        self.kfunc_calls: list[tuple[int, ...]] = []
        self.tail_lookups: list[tuple[int, int]] = []
        self.tail_targets: dict[tuple[int, int], BpfProg] = {}
        self.funcs: dict = {}

    def call_helper(self, fid, r1, r2, r3, r4, r5, vm):
        self.calls.append((fid, r1, r2, r3, r4, r5))
        func = self.funcs.get(fid)
        return func(vm, r1, r2, r3, r4, r5) if func else 0

    def call_kfunc(self, btf_id, r1, r2, r3, r4, r5, vm):
        self.kfunc_calls.append((btf_id, r1, r2, r3, r4, r5))
        return -2

    def tail_call_target(self, map_addr, index):
        self.tail_lookups.append((map_addr, index))
        return self.tail_targets.get((map_addr, index))


@pytest.fixture
def mem():
    return KernelMemory()


@pytest.fixture
def env(mem):
    return FakeEnv(mem)


@pytest.fixture
def vm(mem):
    return BpfVm(mem)


def run(vm, env, insns, ctx=0, subprogs=(0,), name="t"):
    return vm.run(BpfProg(name, list(insns), subprog_starts=list(subprogs)), ctx, env)


def alu_result(vm, env, insn, dst, src=0):
    """r1 = dst, r2 = src, the instruction (on r1, r2), r0 = r1."""
    return run(vm, env, program(ld_imm64(1, dst), ld_imm64(2, src), insn, mov64_reg(0, 1), exit_insn()))


# ----------------------------------------------------------------------------- ALU

ALU_CASES = [
    # (id, insn on r1/r2, r1, r2, expected r1)
    ("add64_x_wraps", alu64_reg(BPF_ADD, 1, 2), M64, 2, 1),
    ("add64_k_negative_imm", alu64_imm(BPF_ADD, 1, -1), 5, 0, 4),
    ("add32_x_overflow_zero_extends", alu32_reg(BPF_ADD, 1, 2), 0xFFFFFFFF, 1, 0),
    ("add32_k_drops_high_half", alu32_imm(BPF_ADD, 1, 1), 0x1_0000_0001, 0, 2),
    ("sub64_k", alu64_imm(BPF_SUB, 1, 1), 0, 0, M64),
    ("sub32_x", alu32_reg(BPF_SUB, 1, 2), 0, 1, 0xFFFFFFFF),
    ("mul64_x_wraps", alu64_reg(BPF_MUL, 1, 2), 1 << 32, 1 << 32, 0),
    ("mul32_k", alu32_imm(BPF_MUL, 1, 3), 0x1_8000_0001, 0, 0x80000003),
    ("or64_x", alu64_reg(BPF_OR, 1, 2), 0xF0F0 << 48, 0x0F, (0xF0F0 << 48) | 0xF),
    ("or32_k_clears_high", alu32_imm(BPF_OR, 1, 0x100), 0xFFFF_0000_0000_0001, 0, 0x101),
    ("and64_k_sign_extended_imm", alu64_imm(BPF_AND, 1, -16), M64, 0, M64 - 15),
    ("and32_x", alu32_reg(BPF_AND, 1, 2), M64, 0x1234_5678_9ABC_DEF0, 0x9ABCDEF0),
    ("xor64_x", alu64_reg(BPF_XOR, 1, 2), M64, 0xFF, M64 ^ 0xFF),
    ("xor32_k", alu32_imm(BPF_XOR, 1, -1), 0x1_0000_00FF, 0, 0xFFFFFF00),
    ("lsh64_x_count_masked_63", alu64_reg(BPF_LSH, 1, 2), 1, 65, 2),
    ("lsh64_k", alu64_imm(BPF_LSH, 1, 63), 3, 0, S64_MIN),
    ("lsh32_x_count_masked_31", alu32_reg(BPF_LSH, 1, 2), 1, 33, 2),
    ("lsh32_k_zero_extends", alu32_imm(BPF_LSH, 1, 31), 3, 0, 0x80000000),
    ("rsh64_x", alu64_reg(BPF_RSH, 1, 2), S64_MIN, 63, 1),
    ("rsh32_k_low_half_only", alu32_imm(BPF_RSH, 1, 4), 0xFFFF_FFFF_0000_00F0, 0, 0xF),
    ("arsh64_x_negative", alu64_reg(BPF_ARSH, 1, 2), S64_MIN, 4, 0xF800_0000_0000_0000),
    ("arsh64_k_positive", alu64_imm(BPF_ARSH, 1, 4), 0x7000_0000_0000_0000, 0, 0x0700_0000_0000_0000),
    ("arsh32_k_negative_zero_extends", alu32_imm(BPF_ARSH, 1, 4), 0x8000_0000, 0, 0xF800_0000),
    ("arsh32_x_sign_of_low_half", alu32_reg(BPF_ARSH, 1, 2), 0xFFFF_FFFF_7FFF_FFFF, 1, 0x3FFF_FFFF),
    ("mov64_x", mov64_reg(1, 2), 0, M64, M64),
    ("mov64_k_sign_extends", mov64_imm(1, -1), 0, 0, M64),
    ("mov32_x_zero_extends", alu32_reg(BPF_MOV, 1, 2), 0, M64, 0xFFFFFFFF),
    ("mov32_k", alu32_imm(BPF_MOV, 1, -1), M64, 0, 0xFFFFFFFF),
    ("movsx64_8_of_0x80", movsx64_reg(1, 2, 8), 0, 0x80, 0xFFFF_FFFF_FFFF_FF80),
    ("movsx64_8_of_0x7f", movsx64_reg(1, 2, 8), 0, 0x17F, 0x7F),
    ("movsx64_16", movsx64_reg(1, 2, 16), 0, 0x8000, 0xFFFF_FFFF_FFFF_8000),
    ("movsx64_32", movsx64_reg(1, 2, 32), 0, 0x1_8000_0000, 0xFFFF_FFFF_8000_0000),
    ("movsx32_8_zero_extends", movsx32_reg(1, 2, 8), 0, 0x80, 0xFFFF_FF80),
    ("movsx32_16", movsx32_reg(1, 2, 16), 0, 0xFFFF_8001, 0xFFFF_8001),
    ("neg64", alu64_imm(BPF_NEG, 1, 0), 1, 0, M64),
    ("neg32", alu32_imm(BPF_NEG, 1, 0), 0x5_0000_0001, 0, 0xFFFFFFFF),
    ("div64_x", alu64_reg(BPF_DIV, 1, 2), 7, 2, 3),
    ("div64_x_by_zero_is_0", alu64_reg(BPF_DIV, 1, 2), 7, 0, 0),
    ("div64_k_unsigned_imm", alu64_imm(BPF_DIV, 1, -1), M64 - 1, 0, 0),
    ("div32_x_low_halves", alu32_reg(BPF_DIV, 1, 2), 0x1_0000_0007, 0x1_0000_0002, 3),
    ("div32_x_by_zero_is_0", alu32_reg(BPF_DIV, 1, 2), 7, 1 << 32, 0),
    ("mod64_x", alu64_reg(BPF_MOD, 1, 2), 7, 3, 1),
    ("mod64_x_by_zero_keeps_dst", alu64_reg(BPF_MOD, 1, 2), M64, 0, M64),
    ("mod32_x_by_zero_zero_extends_dst", alu32_reg(BPF_MOD, 1, 2), 0x1_0000_0007, 0, 7),
    ("mod32_k", alu32_imm(BPF_MOD, 1, 10), 0xFFFF_FFFF, 0, 5),
    ("sdiv64_x_negative", alu64_reg(BPF_DIV, 1, 2, off=1), -7 & M64, 2, -3 & M64),
    ("sdiv64_x_both_negative", alu64_reg(BPF_DIV, 1, 2, off=1), -7 & M64, -2 & M64, 3),
    ("sdiv64_x_min_by_minus_1_wraps", alu64_reg(BPF_DIV, 1, 2, off=1), S64_MIN, M64, S64_MIN),
    ("sdiv64_x_by_zero_is_0", alu64_reg(BPF_DIV, 1, 2, off=1), -7 & M64, 0, 0),
    ("sdiv64_k_minus_1", alu64_imm(BPF_DIV, 1, -1, off=1), 6, 0, -6 & M64),
    ("smod64_x_dividend_sign", alu64_reg(BPF_MOD, 1, 2, off=1), -7 & M64, 2, M64),
    ("smod64_x_positive_dividend", alu64_reg(BPF_MOD, 1, 2, off=1), 7, -2 & M64, 1),
    ("smod64_x_min_by_minus_1_is_0", alu64_reg(BPF_MOD, 1, 2, off=1), S64_MIN, M64, 0),
    ("smod64_x_by_zero_keeps_dst", alu64_reg(BPF_MOD, 1, 2, off=1), -7 & M64, 0, -7 & M64),
    ("sdiv32_x_negative_zero_extends", alu32_reg(BPF_DIV, 1, 2, off=1), -7 & M64, 2, 0xFFFF_FFFD),
    ("sdiv32_x_low_half_sign", alu32_reg(BPF_DIV, 1, 2, off=1), 0x1_FFFF_FFF9, 2, 0xFFFF_FFFD),
    ("sdiv32_x_s32_min_by_2", alu32_reg(BPF_DIV, 1, 2, off=1), 0x8000_0000, 2, 0xC000_0000),
    ("sdiv32_k_s32_min_by_minus_1", alu32_imm(BPF_DIV, 1, -1, off=1), 0x8000_0000, 0, 0x8000_0000),
    ("smod32_x_dividend_sign", alu32_reg(BPF_MOD, 1, 2, off=1), 0xFFFF_FFF9, 2, 0xFFFF_FFFF),
    ("smod32_x_by_zero_zero_extends_dst", alu32_reg(BPF_MOD, 1, 2, off=1), 0x3_FFFF_FFF9, 0, 0xFFFF_FFF9),
    ("le16_truncates", endian(1, 16, big=False), 0x1122_3344_5566_7788, 0, 0x7788),
    ("le32_truncates", endian(1, 32, big=False), 0x1122_3344_5566_7788, 0, 0x5566_7788),
    ("le64_no_change", endian(1, 64, big=False), 0x1122_3344_5566_7788, 0, 0x1122_3344_5566_7788),
    ("be16_of_0x1234", endian(1, 16, big=True), 0x1234, 0, 0x3412),
    ("be16_drops_high_bits", endian(1, 16, big=True), 0xFFFF_1234, 0, 0x3412),
    ("be32", endian(1, 32, big=True), 0xAA_1234_5678, 0, 0x7856_3412),
    ("be64", endian(1, 64, big=True), 0x0102_0304_0506_0708, 0, 0x0807_0605_0403_0201),
    ("bswap16", endian(1, 16, big=False, alu64=True), 0xFFFF_1234, 0, 0x3412),
    ("bswap32", endian(1, 32, big=False, alu64=True), 0x1234_5678, 0, 0x7856_3412),
    ("bswap64", endian(1, 64, big=False, alu64=True), 0x0102_0304_0506_0708, 0, 0x0807_0605_0403_0201),
]


@pytest.mark.parametrize("insn,dst,src,expected", [c[1:] for c in ALU_CASES], ids=[c[0] for c in ALU_CASES])
def test_alu(vm, env, insn, dst, src, expected):
    got = alu_result(vm, env, insn, dst, src)
    assert got == expected, f"{insn}: r1={dst:#x} r2={src:#x}: expected {expected:#x}, got {got:#x}"


def test_lddw_loads_both_halves(vm, env):
    got = run(vm, env, program(ld_imm64(0, 0xFFFF_8880_1234_5678), exit_insn()))
    assert got == 0xFFFF_8880_1234_5678, f"got {got:#x}"


# ----------------------------------------------------------------------------- jumps

JMP_CASES = [
    # (id, jump on r1/r2 over two instructions, r1, r2, taken)
    ("jeq64_x", jmp_reg(BPF_JEQ, 1, 2, 2), 5, 5, True),
    ("jeq64_k_sign_extended", jmp_imm(BPF_JEQ, 1, -1, 2), M64, 0, True),
    ("jeq64_k_high_half_counts", jmp_imm(BPF_JEQ, 1, 5, 2), 0xAAAA_AAAA_0000_0005, 0, False),
    ("jeq32_k_low_half_only", jmp32_imm(BPF_JEQ, 1, 5, 2), 0xAAAA_AAAA_0000_0005, 0, True),
    ("jeq32_k_minus_1", jmp32_imm(BPF_JEQ, 1, -1, 2), 0xFFFF_FFFF, 0, True),
    ("jne64_x", jmp_reg(BPF_JNE, 1, 2, 2), 5, 6, True),
    ("jne32_x_equal_low_halves", jmp32_reg(BPF_JNE, 1, 2, 2), 0x1_0000_0005, 0x2_0000_0005, False),
    ("jgt64_x_unsigned", jmp_reg(BPF_JGT, 1, 2, 2), M64, 1, True),
    ("jgt32_k", jmp32_imm(BPF_JGT, 1, 1, 2), 0x1_0000_0001, 0, False),
    ("jge64_x_equal", jmp_reg(BPF_JGE, 1, 2, 2), 9, 9, True),
    ("jge64_k_below", jmp_imm(BPF_JGE, 1, 10, 2), 9, 0, False),
    ("jlt64_x", jmp_reg(BPF_JLT, 1, 2, 2), 1, M64, True),
    ("jlt32_x_low_halves", jmp32_reg(BPF_JLT, 1, 2, 2), 0x1, 0x1_0000_0000, False),
    ("jle64_k_equal", jmp_imm(BPF_JLE, 1, 3, 2), 3, 0, True),
    ("jle32_x", jmp32_reg(BPF_JLE, 1, 2, 2), 0xFFFF_FFFF, 0x7, False),
    ("jset64_x_common_bit", jmp_reg(BPF_JSET, 1, 2, 2), 0b1010, 0b0010, True),
    ("jset64_k_no_common_bit", jmp_imm(BPF_JSET, 1, 0b0101, 2), 0b1010, 0, False),
    ("jset32_k_high_bit_ignored", jmp32_imm(BPF_JSET, 1, 1, 2), 0x1_0000_0000, 0, False),
    ("jsgt64_x_minus_1_not_above_1", jmp_reg(BPF_JSGT, 1, 2, 2), M64, 1, False),
    ("jsgt64_k", jmp_imm(BPF_JSGT, 1, -5, 2), -4 & M64, 0, True),
    ("jsgt64_x_positive_low_half_all_ones", jmp_reg(BPF_JSGT, 1, 2, 2), 0xFFFF_FFFF, 0, True),
    ("jsgt32_x_low_half_is_minus_1", jmp32_reg(BPF_JSGT, 1, 2, 2), 0xFFFF_FFFF, 0, False),
    ("jsge64_x_equal_negative", jmp_reg(BPF_JSGE, 1, 2, 2), -3 & M64, -3 & M64, True),
    ("jsge32_k", jmp32_imm(BPF_JSGE, 1, -1, 2), 0x8000_0000, 0, False),
    ("jslt64_x", jmp_reg(BPF_JSLT, 1, 2, 2), S64_MIN, 0, True),
    ("jslt32_k_low_half", jmp32_imm(BPF_JSLT, 1, 6, 2), 0x7FFF_FFFF_0000_0005, 0, True),
    ("jsle64_k", jmp_imm(BPF_JSLE, 1, -1, 2), 0, 0, False),
    ("jsle32_x_equal", jmp32_reg(BPF_JSLE, 1, 2, 2), 0x1_8000_0000, 0x8000_0000, True),
]


@pytest.mark.parametrize("jump,dst,src,taken", [c[1:] for c in JMP_CASES], ids=[c[0] for c in JMP_CASES])
def test_conditional_jump(vm, env, jump, dst, src, taken):
    insns = program(
        ld_imm64(1, dst),
        ld_imm64(2, src),
        jump,  # taken: skips the next two
        mov64_imm(0, 0),
        exit_insn(),
        mov64_imm(0, 1),
        exit_insn(),
    )
    got = run(vm, env, insns)
    assert got == int(taken), f"{jump} r1={dst:#x} r2={src:#x}: expected taken={taken}, r0={got}"


@pytest.mark.parametrize("jump", [ja(1), gotol(1)], ids=["ja", "gotol"])
def test_unconditional_jump_skips(vm, env, jump):
    got = run(vm, env, program(mov64_imm(0, 1), jump, mov64_imm(0, 2), exit_insn()))
    assert got == 1, f"{jump}: expected the mov skipped (r0 1), got {got}"


def test_gotol_backward_32bit_offset(vm, env):
    insns = program(mov64_imm(0, 0), ja(2), alu64_imm(BPF_ADD, 0, 5), exit_insn(), gotol(-3))
    got = run(vm, env, insns)
    assert got == 5, f"expected the gotol back to the add (r0 5), got {got}"


def test_bounded_loop_sums(vm, env):
    insns = program(
        mov64_imm(0, 0),
        mov64_imm(1, 10),
        alu64_reg(BPF_ADD, 0, 1),
        alu64_imm(BPF_SUB, 1, 1),
        jmp_imm(BPF_JNE, 1, 0, -3),
        exit_insn(),
    )
    got = run(vm, env, insns)
    assert got == 55, f"sum 1..10: expected 55, got {got}"


# ----------------------------------------------------------------------------- memory

DATA = bytes(range(0xF0, 0x100)) + bytes(range(16))


@pytest.fixture
def region(mem):
    r = mem.alloc(32, "map_value")
    r.data[:] = DATA
    return r


LOAD_CASES = [
    ("ldx_b", ldx_mem(BPF_B, 0, 1, 15), 0xFF),
    ("ldx_h", ldx_mem(BPF_H, 0, 1, 14), 0xFFFE),
    ("ldx_w", ldx_mem(BPF_W, 0, 1, 16), 0x03020100),
    ("ldx_dw", ldx_mem(BPF_DW, 0, 1, 12), 0x0302_0100_FFFE_FDFC),
    ("ldxsx_b_of_0xff", ldx_memsx(BPF_B, 0, 1, 15), M64),
    ("ldxsx_b_positive", ldx_memsx(BPF_B, 0, 1, 17), 1),
    ("ldxsx_h", ldx_memsx(BPF_H, 0, 1, 0), 0xFFFF_FFFF_FFFF_F1F0),
    ("ldxsx_w", ldx_memsx(BPF_W, 0, 1, 12), 0xFFFF_FFFF_FFFE_FDFC),
    ("ldx_negative_off", ldx_mem(BPF_B, 0, 1, -1), 0xFF),
]


@pytest.mark.parametrize("load,expected", [c[1:] for c in LOAD_CASES], ids=[c[0] for c in LOAD_CASES])
def test_load(vm, env, region, load, expected):
    base = region.base + 16 if load.off < 0 else region.base
    got = run(vm, env, program(ld_imm64(1, base), load, exit_insn()))
    assert got == expected, f"{load}: expected {expected:#x}, got {got:#x}"


STORE_CASES = [
    # (id, store through r1 = region base, bytes 8..16 of the region afterwards)
    ("stx_b", stx_mem(BPF_B, 1, 2, 9), bytes([0xF8, 0x88]) + DATA[10:16]),
    ("stx_h", stx_mem(BPF_H, 1, 2, 8), bytes([0x88, 0x77]) + DATA[10:16]),
    ("stx_w", stx_mem(BPF_W, 1, 2, 12), DATA[8:12] + bytes([0x88, 0x77, 0x66, 0x55])),
    ("stx_dw", stx_mem(BPF_DW, 1, 2, 8), bytes([0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11])),
    ("st_b", st_mem(BPF_B, 1, 8, 0x1AB), bytes([0xAB]) + DATA[9:16]),
    ("st_w_negative", st_mem(BPF_W, 1, 8, -2), bytes([0xFE, 0xFF, 0xFF, 0xFF]) + DATA[12:16]),
    ("st_dw_sign_extends", st_mem(BPF_DW, 1, 8, -1), b"\xff" * 8),
]


@pytest.mark.parametrize("store,expected", [c[1:] for c in STORE_CASES], ids=[c[0] for c in STORE_CASES])
def test_store(vm, env, region, store, expected):
    run(vm, env, program(ld_imm64(1, region.base), ld_imm64(2, 0x1122_3344_5566_7788), store, exit_insn()))
    assert bytes(region.data[8:16]) == expected, f"{store}: expected {expected.hex()}, got {region.data[8:16].hex()}"


def test_store_leaves_the_rest_alone(vm, env, region):
    run(vm, env, program(ld_imm64(1, region.base), mov64_imm(2, 0), stx_mem(BPF_W, 1, 2, 8), exit_insn()))
    assert bytes(region.data[:8]) + bytes(region.data[12:]) == DATA[:8] + DATA[12:]


def test_stack_store_and_load_through_r10(vm, env):
    insns = program(
        ld_imm64(1, 0xDEAD_BEEF_CAFE_F00D),
        stx_mem(BPF_DW, 10, 1, -8),
        st_mem(BPF_W, 10, -512, 7),
        ldx_mem(BPF_DW, 0, 10, -8),
        ldx_mem(BPF_W, 2, 10, -512),
        alu64_reg(BPF_ADD, 0, 2),
        exit_insn(),
    )
    got = run(vm, env, insns)
    assert got == 0xDEAD_BEEF_CAFE_F00D + 7, f"got {got:#x}"


def test_r10_is_the_top_of_a_512_byte_stack(vm, env, mem):
    top = run(vm, env, program(mov64_reg(0, 10), exit_insn()))
    frame = mem.find(top - 512, 512)
    assert frame is not None and frame.kind == "stack" and frame.end == top, f"r10 {top:#x}, region {frame}"


def test_r1_is_ctx(vm, env):
    got = run(vm, env, program(mov64_reg(0, 1), exit_insn()), ctx=0xFFFF_8880_0000_1000)
    assert got == 0xFFFF_8880_0000_1000, f"got {got:#x}"


def test_each_run_gets_a_zeroed_frame(vm, env):
    run(vm, env, program(st_mem(BPF_DW, 10, -8, 99), mov64_imm(0, 0), exit_insn()))
    got = run(vm, env, program(ldx_mem(BPF_DW, 0, 10, -8), exit_insn()))
    assert got == 0, f"the second run saw {got} left by the first"


@pytest.mark.parametrize("off", [0, -513], ids=["above_top", "below_512"])
def test_stack_access_outside_the_frame_faults(vm, env, off):
    with pytest.raises(BpfRuntimeError, match="outside every object"):
        run(vm, env, program(ldx_mem(BPF_B, 0, 10, off), exit_insn()))


# ----------------------------------------------------------------------------- atomics

OLD = 0x0000_0000_F000_000F


def _run_atomic(vm, env, mem, op, size, src):
    """The atomic op on a value holding OLD with r2 = src: (the value after, r2 after)."""
    value = mem.alloc(8, "map_value")
    value.data[:] = OLD.to_bytes(8, "little")
    insns = program(
        ld_imm64(1, value.base), ld_imm64(2, src), atomic_op(size, op, 1, 2, 0), mov64_reg(0, 2), exit_insn()
    )
    r2 = run(vm, env, insns)
    return int.from_bytes(value.data, "little"), r2


ATOMIC_CASES = [
    # (id, op, size, src r2, expected memory, expected r2 afterwards)
    ("add_dw", BPF_ADD, BPF_DW, 1, OLD + 1, 1),
    ("add_w_wraps_in_32_bits", BPF_ADD, BPF_W, 0x1000_0000, 0x0000_0000_0000_000F, 0x1000_0000),
    ("or_dw", BPF_OR, BPF_DW, 0xF0, OLD | 0xF0, 0xF0),
    ("and_w", BPF_AND, BPF_W, 0xFF, 0x0F, 0xFF),
    ("xor_dw", BPF_XOR, BPF_DW, M64, OLD ^ M64, M64),
    ("fetch_add_dw_returns_old", BPF_ADD | BPF_FETCH, BPF_DW, 1, OLD + 1, OLD),
    ("fetch_add_w_returns_old_zero_extended", BPF_ADD | BPF_FETCH, BPF_W, M64, 0xF000_000E, 0xF000_000F),
    ("fetch_or_w", BPF_OR | BPF_FETCH, BPF_W, 0x100, 0xF000_010F, 0xF000_000F),
    ("fetch_and_dw", BPF_AND | BPF_FETCH, BPF_DW, 0xF, 0xF, OLD),
    ("fetch_xor_w", BPF_XOR | BPF_FETCH, BPF_W, 0xF, 0xF000_0000, 0xF000_000F),
    ("xchg_dw", BPF_XCHG, BPF_DW, 0x1234, 0x1234, OLD),
    ("xchg_w", BPF_XCHG, BPF_W, 0xAAAA_BBBB_CCCC_DDDD, 0xCCCC_DDDD, 0xF000_000F),
]


@pytest.mark.parametrize(
    "op,size,src,mem_after,src_after", [c[1:] for c in ATOMIC_CASES], ids=[c[0] for c in ATOMIC_CASES]
)
def test_atomic(vm, env, mem, op, size, src, mem_after, src_after):
    got = _run_atomic(vm, env, mem, op, size, src)[0]
    assert got == mem_after, f"memory: expected {mem_after:#x}, got {got:#x}"


@pytest.mark.parametrize(
    "op,size,src,mem_after,src_after", [c[1:] for c in ATOMIC_CASES], ids=[c[0] for c in ATOMIC_CASES]
)
def test_atomic_src_register(vm, env, mem, op, size, src, mem_after, src_after):
    got = _run_atomic(vm, env, mem, op, size, src)[1]
    assert got == src_after, f"r2: expected {src_after:#x}, got {got:#x}"


CMPXCHG_CASES = [
    # (id, size, r0 before, memory after, r0 after)
    ("dw_success", BPF_DW, OLD, 0x77, OLD),
    ("dw_failure", BPF_DW, OLD + 1, OLD, OLD),
    ("w_success_compares_low_half", BPF_W, 0xFFFF_FFFF_F000_000F, 0x77, 0xF000_000F),
    ("w_failure", BPF_W, 0xF000_0000, OLD, 0xF000_000F),
]


@pytest.mark.parametrize(
    "size,r0,mem_after,r0_after", [c[1:] for c in CMPXCHG_CASES], ids=[c[0] for c in CMPXCHG_CASES]
)
def test_cmpxchg(vm, env, mem, size, r0, mem_after, r0_after):
    value = mem.alloc(8, "map_value")
    value.data[:] = OLD.to_bytes(8, "little")
    insns = program(
        ld_imm64(1, value.base), mov64_imm(2, 0x77), ld_imm64(0, r0), atomic_op(size, BPF_CMPXCHG, 1, 2, 0), exit_insn()
    )
    got = run(vm, env, insns)
    got_mem = int.from_bytes(value.data, "little")
    assert (got, got_mem) == (r0_after, mem_after), (
        f"expected r0 {r0_after:#x} mem {mem_after:#x}, got {got:#x} {got_mem:#x}"
    )


@pytest.mark.parametrize("size,expected", [(BPF_B, 0x0F), (BPF_H, 0x000F), (BPF_W, 0xF000_000F), (BPF_DW, OLD)])
def test_load_acquire(vm, env, mem, size, expected):
    value = mem.alloc(8, "map_value")
    value.data[:] = OLD.to_bytes(8, "little")
    got = run(vm, env, program(ld_imm64(2, value.base), atomic_op(size, BPF_LOAD_ACQ, 0, 2, 0), exit_insn()))
    assert got == expected, f"expected {expected:#x}, got {got:#x}"


@pytest.mark.parametrize("size,expected", [(BPF_B, 0xF000_0088), (BPF_H, 0xF000_7788), (BPF_DW, 0x1122_3344_5566_7788)])
def test_store_release(vm, env, mem, size, expected):
    value = mem.alloc(8, "map_value")
    value.data[:] = OLD.to_bytes(8, "little")
    run(
        vm,
        env,
        program(
            ld_imm64(1, value.base),
            ld_imm64(2, 0x1122_3344_5566_7788),
            atomic_op(size, BPF_STORE_REL, 1, 2, 0),
            exit_insn(),
        ),
    )
    got = int.from_bytes(value.data, "little")
    assert got == expected, f"expected {expected:#x}, got {got:#x}"


# ----------------------------------------------------------------------------- calls


def test_call_passes_r1_to_r5(vm, env):
    insns = program(*(mov64_imm(i, 10 * i) for i in range(1, 6)), call_helper("ktime_get_ns"), exit_insn())
    run(vm, env, insns)
    assert env.calls == [(HELPER_IDS["ktime_get_ns"], 10, 20, 30, 40, 50)], env.calls


def test_call_result_is_r0_as_u64(vm, env):
    env.funcs[5] = lambda vm, *args: -1
    got = run(vm, env, program(call_helper(5), exit_insn()))
    assert got == M64, f"got {got:#x}"


def test_call_leaves_r1_to_r5(vm, env):
    env.funcs[5] = lambda vm, *args: 0
    got = run(vm, env, program(mov64_imm(3, 33), call_helper(5), mov64_reg(0, 3), exit_insn()))
    assert got == 33, f"r3 after the call: expected 33, got {got}"


def test_kfunc_call(vm, env):
    kfunc = Insn(BPF_JMP | BPF_CALL, 0, BPF_PSEUDO_KFUNC_CALL, 0, 12345)
    got = run(vm, env, program(mov64_imm(1, 1), mov64_imm(2, 2), kfunc, exit_insn()))
    assert (got, env.kfunc_calls) == ((-2) & M64, [(12345, 1, 2, 0, 0, 0)]), (got, env.kfunc_calls)


def _bpf_call_prog(result_addr: int) -> list[Insn]:
    """main: r6-r9 = 6..9, fp-8 = 111, call sub(10, 20); stores r0, r6..r9 and fp-8 at
    result_addr.  sub: clobbers r6-r9 and its own fp-8, returns r1 + r2."""
    main = program(
        mov64_imm(6, 6),
        mov64_imm(7, 7),
        mov64_imm(8, 8),
        mov64_imm(9, 9),
        st_mem(BPF_DW, 10, -8, 111),
        mov64_imm(1, 10),
        mov64_imm(2, 20),
        call_rel(0),  # patched below
        ld_imm64(1, result_addr),
        stx_mem(BPF_DW, 1, 0, 0),
        stx_mem(BPF_DW, 1, 6, 8),
        stx_mem(BPF_DW, 1, 7, 16),
        stx_mem(BPF_DW, 1, 8, 24),
        stx_mem(BPF_DW, 1, 9, 32),
        ldx_mem(BPF_DW, 2, 10, -8),
        stx_mem(BPF_DW, 1, 2, 40),
        exit_insn(),
    )
    sub = program(
        mov64_imm(6, 0x55),
        mov64_imm(7, 0x55),
        mov64_imm(8, 0x55),
        mov64_imm(9, 0x55),
        st_mem(BPF_DW, 10, -8, 222),
        mov64_reg(0, 1),
        alu64_reg(BPF_ADD, 0, 2),
        exit_insn(),
    )
    main[7] = call_rel(len(main) - 7 - 1)
    return main + sub


def _run_bpf_call(vm, env, mem):
    result = mem.alloc(48, "map_value")
    insns = _bpf_call_prog(result.base)
    run(vm, env, insns, subprogs=(0, len(insns) - 8))
    return [int.from_bytes(result.data[i : i + 8], "little") for i in range(0, 48, 8)]


def test_bpf_call_returns_r0(vm, env, mem):
    got = _run_bpf_call(vm, env, mem)[0]
    assert got == 30, f"sub(10, 20): expected 30, got {got}"


def test_bpf_call_preserves_r6_to_r9(vm, env, mem):
    got = _run_bpf_call(vm, env, mem)[1:5]
    assert got == [6, 7, 8, 9], f"r6-r9 after the call: {got}"


def test_bpf_call_callee_has_its_own_stack(vm, env, mem):
    got = _run_bpf_call(vm, env, mem)[5]
    assert got == 111, f"the caller's fp-8 after the call: expected 111, got {got}"


def test_bpf_call_deeper_than_max_frames(vm, env):
    insns = program(call_rel(-1), exit_insn())
    with pytest.raises(BpfRuntimeError, match=f"more than {MAX_CALL_FRAMES} nested call frames"):
        run(vm, env, insns)


def test_call_function_runs_a_callback(vm, env, mem):
    """A bpf_loop stand-in calls the callback (index, ctx) for r1 iterations; the callback
    adds its index into the value at ctx."""
    counter = mem.alloc(8, "map_value")
    returns = []

    def loop(vm, nr, func, ctx, flags, _):
        for i in range(nr):
            returns.append(vm.call_function(func, i, ctx))
        return nr

    env.funcs[HELPER_IDS["loop"]] = loop
    main = program(
        mov64_imm(1, 5),
        ld_imm64(2, BPF_FUNC_PTR_BASE + 8),
        ld_imm64(3, counter.base),
        mov64_imm(4, 0),
        call_helper("loop"),
        exit_insn(),
    )
    callback = program(atomic_op(BPF_DW, BPF_ADD, 2, 1, 0), mov64_imm(0, 0), exit_insn())
    assert len(main) == 8
    got = run(vm, env, main + callback, subprogs=(0, 8))
    assert (got, int.from_bytes(counter.data, "little"), returns) == (5, 10, [0] * 5)


def test_call_function_outside_a_run(vm):
    with pytest.raises(BpfRuntimeError, match="only be called while a program runs"):
        vm.call_function(BPF_FUNC_PTR_BASE)


def test_call_function_of_a_non_subprogram(vm, env):
    env.funcs[HELPER_IDS["loop"]] = lambda vm, nr, func, *rest: vm.call_function(func)
    insns = program(ld_imm64(2, BPF_FUNC_PTR_BASE + 1), call_helper("loop"), exit_insn())
    with pytest.raises(BpfRuntimeError, match="is not a subprogram"):
        run(vm, env, insns)


# ----------------------------------------------------------------------------- tail calls

MAP = 0xFFFF_8880_0000_4000


def _tail_caller(index: int) -> list[Insn]:
    return program(
        mov64_imm(6, 35),
        st_mem(BPF_DW, 10, -8, 7),
        ld_imm64(2, MAP),
        ld_imm64(3, index),
        call_helper("tail_call"),
        mov64_imm(0, 99),
        exit_insn(),
    )


def test_tail_call_continues_in_the_target(vm, env):
    """The target sees the caller's registers (r6) and frame (fp-8): 35 + 7."""
    target = BpfProg("target", program(ldx_mem(BPF_DW, 0, 10, -8), alu64_reg(BPF_ADD, 0, 6), exit_insn()))
    env.tail_targets[(MAP, 0)] = target
    got = run(vm, env, _tail_caller(0))
    assert got == 42, f"expected the target's 42, got {got}"


def test_tail_call_index_is_u32(vm, env):
    env.tail_targets[(MAP, 3)] = BpfProg("target", program(mov64_imm(0, 1), exit_insn()))
    run(vm, env, _tail_caller(0x1_0000_0003))
    assert env.tail_lookups == [(MAP, 3)], env.tail_lookups


def test_tail_call_without_target_falls_through(vm, env):
    got = run(vm, env, _tail_caller(5))
    assert (got, env.tail_lookups) == (99, [(MAP, 5)]), (got, env.tail_lookups)


def test_tail_call_chain_stops_after_33(vm, env, mem):
    """A program tail-calling itself runs 1 + MAX_TAIL_CALL_CNT (33) times, then falls through."""
    counter = mem.alloc(8, "ctx")
    insns = program(
        mov64_reg(6, 1),
        mov64_imm(2, 1),
        atomic_op(BPF_DW, BPF_ADD, 6, 2, 0),
        ld_imm64(2, MAP),
        mov64_imm(3, 0),
        call_helper("tail_call"),
        mov64_imm(0, 7),
        exit_insn(),
    )
    prog = BpfProg("self", insns)
    env.tail_targets[(MAP, 0)] = prog
    got = vm.run(prog, counter.base, env)
    runs = int.from_bytes(counter.data, "little")
    assert (runs, got) == (34, 7), f"expected 34 runs then the fall-through's 7, got {runs} runs, r0 {got}"


# ----------------------------------------------------------------------------- errors


def test_load_outside_every_region(vm, env):
    with pytest.raises(BpfRuntimeError, match=r"insn 2: BPF read of 8 bytes at 0x1000 outside every object"):
        run(vm, env, program(ld_imm64(1, 0x1000), ldx_mem(BPF_DW, 0, 1, 0), exit_insn()))


def test_store_to_read_only_region(vm, env, mem):
    ro = mem.alloc(8, "map_value", writable=False)
    with pytest.raises(BpfRuntimeError, match="BPF write of 4 bytes"):
        run(vm, env, program(ld_imm64(1, ro.base), st_mem(BPF_W, 1, 0, 1), exit_insn()))


def test_atomic_on_read_only_region(vm, env, mem):
    ro = mem.alloc(8, "map_value", writable=False)
    with pytest.raises(BpfRuntimeError, match="BPF write of 8 bytes"):
        run(vm, env, program(ld_imm64(1, ro.base), mov64_imm(2, 1), atomic_op(BPF_DW, BPF_ADD, 1, 2, 0), exit_insn()))


INVALID_CASES = [
    ("unknown_alu_op", Insn(0xFF, 0, 0, 0, 0)),
    ("neg_with_reg_source", Insn(0x8F, 0, 0, 0, 0)),
    ("movsx32_off_32", movsx32_reg(0, 1, 32)),
    ("end_bad_width", Insn(0xD4, 0, 0, 0, 24)),
    ("alu64_to_be", Insn(0xDF, 0, 0, 0, 16)),
    ("div_off_2", alu64_reg(BPF_DIV, 0, 1, off=2)),
    ("register_12", mov64_imm(12, 0)),
    ("ldxsx_dw", ldx_memsx(BPF_DW, 0, 10, -8)),
    ("atomic_add_b", atomic_op(BPF_B, BPF_ADD, 10, 0, -8)),
    ("atomic_unknown_op", atomic_op(BPF_DW, 0x33, 10, 0, -8)),
    ("legacy_ld_abs", Insn(0x20, 0, 0, 0, 0)),
    ("call_unknown_src", Insn(BPF_JMP | BPF_CALL, 0, 3, 0, 0)),
    ("jmp32_exit", Insn(0x96, 0, 0, 0, 0)),
]


@pytest.mark.parametrize("insn", [c[1] for c in INVALID_CASES], ids=[c[0] for c in INVALID_CASES])
def test_invalid_instruction(vm, env, insn):
    with pytest.raises(BpfRuntimeError, match=r"insn 1: invalid instruction"):
        run(vm, env, program(mov64_imm(0, 0), insn, exit_insn()))


def test_unresolved_map_fd_lddw(vm, env):
    with pytest.raises(BpfRuntimeError, match=r"insn 0: invalid instruction \(code 0x18 dst r1 src r1"):
        run(vm, env, program(ld_map_fd(1, 3), exit_insn()))


def test_invalid_instruction_never_run_is_harmless(vm, env):
    got = run(vm, env, program(mov64_imm(0, 4), exit_insn(), Insn(0xFF, 0, 0, 0, 0)))
    assert got == 4, f"got {got}"


def test_running_past_the_end(vm, env):
    with pytest.raises(BpfRuntimeError, match="ran past the last instruction"):
        run(vm, env, program(mov64_imm(0, 0)))


def test_jump_out_of_the_program(vm, env):
    with pytest.raises(BpfRuntimeError, match="jump out of the program"):
        run(vm, env, program(ja(5), exit_insn()))


def test_jump_into_the_second_half_of_lddw(vm, env):
    with pytest.raises(BpfRuntimeError, match="insn 2: invalid instruction"):
        run(vm, env, program(ja(1), ld_imm64(0, 1 << 40), exit_insn()))


def test_instruction_cap(mem, env):
    vm = BpfVm(mem, insn_cap=1000)
    with pytest.raises(BpfRuntimeError, match="loop: program ran 1000 instructions"):
        run(vm, env, program(mov64_imm(0, 0), ja(-1), exit_insn()), name="loop")


def test_instruction_cap_counts_nested_frames(mem, env):
    """bpf-to-bpf callees draw from the same cap: 4 calls of a 300-instruction loop."""
    vm = BpfVm(mem, insn_cap=1000)
    main = program(call_rel(4), call_rel(3), call_rel(2), call_rel(1), exit_insn())
    sub = program(mov64_imm(1, 150), alu64_imm(BPF_SUB, 1, 1), jmp_imm(BPF_JNE, 1, 0, -2), exit_insn())
    with pytest.raises(BpfRuntimeError, match="program ran 1000 instructions"):
        run(vm, env, main + sub, subprogs=(0, 5))


def test_a_program_is_decoded_once(vm):
    prog = BpfProg("p", program(mov64_imm(0, 0), exit_insn()))
    assert vm.code_of(prog) is vm.code_of(prog)


# ----------------------------------------------------------------------------- fuzz

_insn_bytes = st.builds(
    lambda code, regs, off, imm: Insn(code, regs & 0xF, regs >> 4, off, imm).encode(),
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(-4, 4),
    st.sampled_from([0, 1, -1, 8, 16, 32, 64, 12, 0x100, 0x110, 0xE1, 0xF1, 0x7FFFFFFF, -(1 << 31)]),
)


def test_random_programs_raise_only_emu_errors(mem, env):
    """Random instruction bytes (any opcode, register, small offsets, telling immediates)
    either run to an exit or end in an EmuError - never another exception."""
    vm = BpfVm(mem, insn_cap=2000)
    ctx = mem.alloc(168, "ctx")
    env.funcs[HELPER_IDS["loop"]] = lambda vm, nr, func, *rest: vm.call_function(func, 0)

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(st.lists(st.one_of(_insn_bytes, st.binary(min_size=8, max_size=8)), min_size=1, max_size=24))
    def check(chunks):
        prog = BpfProg("fuzz", decode(b"".join(chunks)), subprog_starts=[0, len(chunks) // 2])
        try:
            result = vm.run(prog, ctx.base, env)
        except EmuError:
            return
        assert 0 <= result <= M64

    check()


def test_a_region_given_another_buffer_between_runs_is_read_and_written_there(vm, env, mem):
    """A ring buffer moved into guest RAM at its first mmap keeps its address with a new
    buffer: the next run's loads and stores go to the new one, not to a cached old one."""
    region = mem.alloc(16, "ringbuf")
    prog = program(
        ld_imm64(1, region.base),
        ldx_mem(BPF_DW, 0, 1, 0),
        st_mem(BPF_DW, 1, 8, 7),
        exit_insn(),
    )
    region.data[:8] = (5).to_bytes(8, "little")
    assert run(vm, env, prog) == 5
    moved = bytearray(region.data)
    moved[:8] = (9).to_bytes(8, "little")
    mem.replace_data(region, moved)
    assert (run(vm, env, prog), moved[8], region.data is moved) == (9, 7, True)
