"""The eBPF instruction set as ``include/uapi/linux/bpf_common.h`` and ``bpf.h`` define it:
opcode fields, ``struct bpf_insn`` (8 bytes: code, dst_reg:4, src_reg:4, off s16, imm s32),
the pseudo source registers of ``lddw`` and ``call``, the helper ids, and builders that
spell instructions as the kernel's ``include/linux/filter.h`` macros do (``BPF_MOV64_IMM``
is :func:`mov64_imm`), which tests and the loader use to write programs by hand.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

# instruction classes (code & 0x07)
BPF_LD, BPF_LDX, BPF_ST, BPF_STX = 0x00, 0x01, 0x02, 0x03
BPF_ALU, BPF_JMP, BPF_JMP32, BPF_ALU64 = 0x04, 0x05, 0x06, 0x07
# size (code & 0x18) and mode (code & 0xe0) of loads and stores
BPF_W, BPF_H, BPF_B, BPF_DW = 0x00, 0x08, 0x10, 0x18
BPF_IMM, BPF_ABS, BPF_IND, BPF_MEM, BPF_MEMSX, BPF_ATOMIC = 0x00, 0x20, 0x40, 0x60, 0x80, 0xC0
SIZE_BYTES = {BPF_W: 4, BPF_H: 2, BPF_B: 1, BPF_DW: 8}
# ALU operations (code & 0xf0)
BPF_ADD, BPF_SUB, BPF_MUL, BPF_DIV = 0x00, 0x10, 0x20, 0x30
BPF_OR, BPF_AND, BPF_LSH, BPF_RSH = 0x40, 0x50, 0x60, 0x70
BPF_NEG, BPF_MOD, BPF_XOR, BPF_MOV = 0x80, 0x90, 0xA0, 0xB0
BPF_ARSH, BPF_END = 0xC0, 0xD0
# source operand (code & 0x08); for BPF_END the byte order
BPF_K, BPF_X = 0x00, 0x08
BPF_TO_LE, BPF_TO_BE = 0x00, 0x08
# jump operations (code & 0xf0)
BPF_JA, BPF_JEQ, BPF_JGT, BPF_JGE = 0x00, 0x10, 0x20, 0x30
BPF_JSET, BPF_JNE, BPF_JSGT, BPF_JSGE = 0x40, 0x50, 0x60, 0x70
BPF_CALL, BPF_EXIT = 0x80, 0x90
BPF_JLT, BPF_JLE, BPF_JSLT, BPF_JSLE = 0xA0, 0xB0, 0xC0, 0xD0
# atomic operations (imm of a BPF_STX | BPF_ATOMIC)
BPF_FETCH = 0x01
BPF_XCHG = 0xE0 | BPF_FETCH
BPF_CMPXCHG = 0xF0 | BPF_FETCH
BPF_LOAD_ACQ, BPF_STORE_REL = 0x100, 0x110
# src_reg of a BPF_LD | BPF_IMM | BPF_DW (lddw)
BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE, BPF_PSEUDO_BTF_ID = 1, 2, 3
BPF_PSEUDO_FUNC, BPF_PSEUDO_MAP_IDX, BPF_PSEUDO_MAP_IDX_VALUE = 4, 5, 6
# src_reg of a BPF_JMP | BPF_CALL
BPF_PSEUDO_CALL, BPF_PSEUDO_KFUNC_CALL = 1, 2

MAX_BPF_REG = 11  # r0-r9, r10 the read-only frame pointer
BPF_REG_FP = 10
MAX_BPF_STACK = 512
BPF_MAXINSNS = 4096  # per program for unprivileged loads; privileged: BPF_COMPLEXITY_LIMIT_INSNS
BPF_COMPLEXITY_LIMIT_INSNS = 1_000_000
MAX_CALL_FRAMES = 8
MAX_TAIL_CALL_CNT = 33

# enum bpf_func_id (the ___BPF_FUNC_MAPPER order) for the helpers this model provides
HELPER_IDS = {
    "map_lookup_elem": 1,
    "map_update_elem": 2,
    "map_delete_elem": 3,
    "probe_read": 4,
    "ktime_get_ns": 5,
    "trace_printk": 6,
    "get_prandom_u32": 7,
    "get_smp_processor_id": 8,
    "tail_call": 12,
    "get_current_pid_tgid": 14,
    "get_current_uid_gid": 15,
    "get_current_comm": 16,
    "perf_event_output": 25,
    "get_stackid": 27,
    "get_current_task": 35,
    "probe_write_user": 36,
    "probe_read_str": 45,
    "get_stack": 67,
    "get_current_cgroup_id": 80,
    "map_push_elem": 87,
    "map_pop_elem": 88,
    "map_peek_elem": 89,
    "send_signal": 109,
    "probe_read_user": 112,
    "probe_read_kernel": 113,
    "probe_read_user_str": 114,
    "probe_read_kernel_str": 115,
    "send_signal_thread": 117,
    "jiffies64": 118,
    "ktime_get_boot_ns": 125,
    "ringbuf_output": 130,
    "ringbuf_reserve": 131,
    "ringbuf_submit": 132,
    "ringbuf_discard": 133,
    "ringbuf_query": 134,
    "copy_from_user": 148,
    "ktime_get_coarse_ns": 160,
    "for_each_map_elem": 164,
    "snprintf": 165,
    "get_func_ip": 173,
    "get_attach_cookie": 174,
    "task_pt_regs": 175,
    "trace_vprintk": 177,
    "loop": 181,
    "strncmp": 182,
    "map_lookup_percpu_elem": 195,
    "ktime_get_tai_ns": 208,
}
HELPER_NAMES = {v: k for k, v in HELPER_IDS.items()}
# __BPF_FUNC_MAX_ID of the newest profile, one past the last id of enum bpf_func_id:
# the exclusive limit, a call to this id or above is "invalid func unknown#N"
BPF_FUNC_MAX_ID = 212

_INSN = struct.Struct("<BBhi")


class Insn(NamedTuple):
    """``struct bpf_insn``; ``imm`` is signed 32-bit as in the struct."""

    code: int
    dst: int
    src: int
    off: int
    imm: int

    @property
    def cls(self) -> int:
        return self.code & 0x07

    def encode(self) -> bytes:
        return _INSN.pack(self.code, (self.src << 4) | self.dst, self.off, self.imm)


def decode(data: bytes) -> list[Insn]:
    """The instructions of a program's bytes (a multiple of 8, as ``bpf_prog_load`` requires)."""
    if len(data) % 8:
        raise ValueError(f"program length {len(data)} is not a multiple of 8")
    out = []
    for code, regs, off, imm in _INSN.iter_unpack(data):
        out.append(Insn(code, regs & 0x0F, regs >> 4, off, imm))
    return out


def encode(insns) -> bytes:
    return b"".join(i.encode() for i in insns)


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


# ----------------------------------------------------------------------------- filter.h builders


def alu64_reg(op: int, dst: int, src: int, off: int = 0) -> Insn:
    return Insn(BPF_ALU64 | op | BPF_X, dst, src, off, 0)


def alu32_reg(op: int, dst: int, src: int, off: int = 0) -> Insn:
    return Insn(BPF_ALU | op | BPF_X, dst, src, off, 0)


def alu64_imm(op: int, dst: int, imm: int, off: int = 0) -> Insn:
    return Insn(BPF_ALU64 | op | BPF_K, dst, 0, off, _s32(imm))


def alu32_imm(op: int, dst: int, imm: int, off: int = 0) -> Insn:
    return Insn(BPF_ALU | op | BPF_K, dst, 0, off, _s32(imm))


def mov64_reg(dst: int, src: int) -> Insn:
    return alu64_reg(BPF_MOV, dst, src)


def mov32_reg(dst: int, src: int) -> Insn:
    return alu32_reg(BPF_MOV, dst, src)


def mov64_imm(dst: int, imm: int) -> Insn:
    return alu64_imm(BPF_MOV, dst, imm)


def mov32_imm(dst: int, imm: int) -> Insn:
    return alu32_imm(BPF_MOV, dst, imm)


def movsx64_reg(dst: int, src: int, bits: int) -> Insn:
    """``BPF_MOVSX64_REG``: sign-extend the low ``bits`` (8, 16, 32) of src (cpu v4)."""
    return alu64_reg(BPF_MOV, dst, src, bits)


def movsx32_reg(dst: int, src: int, bits: int) -> Insn:
    return alu32_reg(BPF_MOV, dst, src, bits)


def endian(dst: int, bits: int, big: bool, alu64: bool = False) -> Insn:
    """``BPF_ENDIAN``: ``le16``/``be32``...; with ``alu64`` the unconditional ``bswap``."""
    cls = BPF_ALU64 if alu64 else BPF_ALU
    return Insn(cls | BPF_END | (BPF_TO_BE if big else BPF_TO_LE), dst, 0, 0, bits)


def ld_imm64(dst: int, value: int, src: int = 0) -> list[Insn]:
    """``BPF_LD_IMM64_RAW``: two slots, the low and the high 32 bits of ``value``."""
    value &= 0xFFFFFFFFFFFFFFFF
    return [Insn(BPF_LD | BPF_DW | BPF_IMM, dst, src, 0, _s32(value)), Insn(0, 0, 0, 0, _s32(value >> 32))]


def ld_map_fd(dst: int, fd: int) -> list[Insn]:
    return ld_imm64(dst, fd, BPF_PSEUDO_MAP_FD)


def ld_map_value(dst: int, fd: int, off: int) -> list[Insn]:
    """``lddw`` of BPF_PSEUDO_MAP_VALUE: imm is the map fd, the second imm the value offset."""
    return [Insn(BPF_LD | BPF_DW | BPF_IMM, dst, BPF_PSEUDO_MAP_VALUE, 0, fd), Insn(0, 0, 0, 0, off)]


def ldx_mem(size: int, dst: int, src: int, off: int) -> Insn:
    return Insn(BPF_LDX | size | BPF_MEM, dst, src, off, 0)


def ldx_memsx(size: int, dst: int, src: int, off: int) -> Insn:
    """``BPF_LDX_MEMSX``: a sign-extending load (cpu v4)."""
    return Insn(BPF_LDX | size | BPF_MEMSX, dst, src, off, 0)


def stx_mem(size: int, dst: int, src: int, off: int) -> Insn:
    return Insn(BPF_STX | size | BPF_MEM, dst, src, off, 0)


def st_mem(size: int, dst: int, off: int, imm: int) -> Insn:
    return Insn(BPF_ST | size | BPF_MEM, dst, 0, off, _s32(imm))


def atomic_op(size: int, op: int, dst: int, src: int, off: int) -> Insn:
    """``BPF_ATOMIC_OP``: ``op`` is BPF_ADD..., | BPF_FETCH, BPF_XCHG or BPF_CMPXCHG."""
    return Insn(BPF_STX | size | BPF_ATOMIC, dst, src, off, op)


def jmp_reg(op: int, dst: int, src: int, off: int) -> Insn:
    return Insn(BPF_JMP | op | BPF_X, dst, src, off, 0)


def jmp_imm(op: int, dst: int, imm: int, off: int) -> Insn:
    return Insn(BPF_JMP | op | BPF_K, dst, 0, off, _s32(imm))


def jmp32_reg(op: int, dst: int, src: int, off: int) -> Insn:
    return Insn(BPF_JMP32 | op | BPF_X, dst, src, off, 0)


def jmp32_imm(op: int, dst: int, imm: int, off: int) -> Insn:
    return Insn(BPF_JMP32 | op | BPF_K, dst, 0, off, _s32(imm))


def ja(off: int) -> Insn:
    return Insn(BPF_JMP | BPF_JA, 0, 0, off, 0)


def gotol(imm: int) -> Insn:
    """``BPF_JMP32 | BPF_JA``: the 32-bit-offset jump (cpu v4), the offset in imm."""
    return Insn(BPF_JMP32 | BPF_JA, 0, 0, 0, _s32(imm))


def call_helper(helper: int | str) -> Insn:
    fid = HELPER_IDS[helper] if isinstance(helper, str) else helper
    return Insn(BPF_JMP | BPF_CALL, 0, 0, 0, fid)


def call_rel(imm: int) -> Insn:
    """A bpf-to-bpf call (BPF_PSEUDO_CALL): imm is the callee's index minus this one's minus 1."""
    return Insn(BPF_JMP | BPF_CALL, 0, BPF_PSEUDO_CALL, 0, _s32(imm))


def exit_insn() -> Insn:
    return Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)


def program(*parts) -> list[Insn]:
    """Flatten builders' results (single instructions and ``ld_imm64`` pairs) into a list."""
    out: list[Insn] = []
    for p in parts:
        if isinstance(p, Insn):
            out.append(p)
        else:
            out.extend(p)
    return out
