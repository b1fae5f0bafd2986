"""Specification tests for kernel_model.arch.x86.lib.insn (arch_uprobe_analyze_insn() and helpers).

Expected values are written out by hand from the kernel's rules (arch/x86/kernel/uprobes.c,
arch/x86/lib/insn-eval.c insn_is_nop(), asm/nops.h) rather than imported from the model,
so a wrong table or rule in the model fails here.  Where a CPU can arbitrate (jcc
conditions, the rip-relative rewrite) the tests also execute the bytes in Unicorn.
"""

from __future__ import annotations

import itertools

import capstone
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unicorn import UC_ARCH_X86, UC_HOOK_MEM_READ, UC_HOOK_MEM_WRITE, UC_MODE_64, Uc
from unicorn import x86_const as X

from kernel_model.arch.x86.lib.insn import (
    FIX_CALL,
    FIX_IP,
    FIX_RIP_BX,
    FIX_RIP_DI,
    FIX_RIP_SI,
    FIX_SETF,
    MAX_UINSN_BYTES,
    NOP5,
    NOP10,
    ArchUprobe,
    analyze_insn,
    is_nop,
    jcc_taken,
    page_crossing,
)
from kernel_model.errors import RegistrationError

# --- helpers -------------------------------------------------------------------------------


def h(text: str) -> bytes:
    """Hex with optional spaces: h("89 05 10000000")."""
    return bytes.fromhex(text.replace(" ", ""))


def window(code: bytes) -> bytes:
    return code + bytes(MAX_UINSN_BYTES - len(code))


def disasm(code: bytes) -> capstone.CsInsn:
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    return next(md.disasm(window(code), 0x1000, 1))


def disasm_text(code: bytes) -> str:
    insn = disasm(code)
    return f"{insn.mnemonic} {insn.op_str}".strip()


def errno_of(code: bytes, **kw) -> str:
    with pytest.raises(RegistrationError) as info:
        analyze_insn(code, **kw)
    return info.value.errno_name


def case_id(value) -> str:
    return value.hex() if isinstance(value, bytes) else str(value)


# --- Unicorn oracles ---------------------------------------------------------------------------

CF, PF, ZF, SF, OF = 0x001, 0x004, 0x040, 0x080, 0x800
FLAG_BITS = (CF, PF, ZF, SF, OF)


def cpu_takes_jcc(uc: Uc, opc1: int, eflags: int) -> bool:
    """Execute ``opc1 +0x10`` at 0x1000 with ``eflags``; True if the CPU jumped."""
    uc.mem_write(0x1000, bytes([opc1, 0x10]))
    uc.reg_write(X.UC_X86_REG_RIP, 0x1000)
    uc.reg_write(X.UC_X86_REG_EFLAGS, eflags | 0x2)
    uc.emu_start(0x1000, 0, count=1)
    return uc.reg_read(X.UC_X86_REG_RIP) == 0x1012


VADDR = 0x400000  # probed instruction
XOL_SLOT = 0x7FFFFFFFE080  # slot 1 of the XOL page
STACK_TOP = 0x800000
GPRS = {
    "rax": X.UC_X86_REG_RAX,
    "rbx": X.UC_X86_REG_RBX,
    "rcx": X.UC_X86_REG_RCX,
    "rdx": X.UC_X86_REG_RDX,
    "rsi": X.UC_X86_REG_RSI,
    "rdi": X.UC_X86_REG_RDI,
    "rbp": X.UC_X86_REG_RBP,
    "rsp": X.UC_X86_REG_RSP,
    "r8": X.UC_X86_REG_R8,
    "r14": X.UC_X86_REG_R14,
    "r15": X.UC_X86_REG_R15,
}


def execute_once(code: bytes, at: int, regs: dict[str, int]):
    """Run one instruction; return (memory accesses, final GPRs, data page, xmm0)."""
    uc = Uc(UC_ARCH_X86, UC_MODE_64)
    uc.mem_map(VADDR, 0x2000)
    uc.mem_map(XOL_SLOT & ~0xFFF, 0x1000)
    uc.mem_map(STACK_TOP - 0x1000, 0x1000)
    uc.mem_write(VADDR + 0x1000, bytes(range(256)) * 16)
    uc.mem_write(at, code)
    for name, value in regs.items():
        uc.reg_write(GPRS[name], value)
    accesses = []
    uc.hook_add(
        UC_HOOK_MEM_READ | UC_HOOK_MEM_WRITE,
        lambda _uc, kind, addr, size, _value, _data: accesses.append((kind, addr, size)),
    )
    uc.emu_start(at, 0, count=1)
    final = {name: uc.reg_read(reg) for name, reg in GPRS.items()}
    data = bytes(uc.mem_read(VADDR + 0x1000, 0x1000))
    return accesses, final, data, uc.reg_read(X.UC_X86_REG_XMM0)


def initial_regs() -> dict[str, int]:
    regs = {name: 0x1111111111111111 * (i + 1) & 0xFFFFFFFFFFFFFFFF for i, name in enumerate(GPRS)}
    regs["rsp"] = STACK_TOP - 0x100
    return regs


# --- registration refusals ------------------------------------------------------------------------

# good_insns_64 rows read off the kernel table: first opcode bytes whose bit is 0.
REJECTED_FIRST_BYTES = [
    0x06,
    0x07,
    0x0E,
    0x16,
    0x17,
    0x1E,
    0x1F,
    0x27,
    0x2F,
    0x37,
    0x3F,
    0x60,
    0x61,
    0x6C,
    0x6D,
    0x6E,
    0x6F,
    0x82,
    0x9A,
    0xCD,
    0xCE,
    0xCF,
    0xD4,
    0xD5,
    0xD6,
    0xE4,
    0xE5,
    0xE6,
    0xE7,
    0xEA,
    0xEC,
    0xED,
    0xEE,
    0xEF,
    0xF1,
    0xF4,
    0xFA,
    0xFB,
]  # 0x62 is the EVEX escape in 64-bit mode and 0xCC the trap check: tested separately


@pytest.mark.parametrize("opcode", REJECTED_FIRST_BYTES, ids=lambda b: f"{b:02x}")
def test_first_opcode_byte_not_in_good_insns_64_is_enotsupp(opcode):
    assert errno_of(bytes([opcode, 0x00])) == "ENOTSUPP"


def test_int3_reached_through_a_prefix_is_refused_by_the_table():
    assert errno_of(h("66 cc")) == "ENOTSUPP"


def test_every_other_first_byte_passes_the_table():
    """The complement of the table: no ENOTSUPP (ENOEXEC is fine: capstone may not decode)."""
    skip = set(REJECTED_FIRST_BYTES) | {0x26, 0x2E, 0x36, 0x3E, 0xF0, 0x62, 0xCC}
    for first in sorted(set(range(256)) - skip):
        try:
            analyze_insn(bytes([first, 0x00, 0x00]))
        except RegistrationError as err:
            assert err.errno_name == "ENOEXEC", (hex(first), str(err))


@pytest.mark.parametrize(
    "code",
    [h("26 8b 00"), h("2e 8b 00"), h("36 8b 00"), h("3e 8b 00"), h("f0 ff 00"), h("66 2e 0f 1f 40 00")],
    ids=case_id,
)
def test_bad_prefix_is_enotsupp(code):
    assert errno_of(code) == "ENOTSUPP"


@pytest.mark.parametrize(
    "code", [h("64 48 8b 04 25 28 00 00 00"), h("65 8b 00"), h("67 8b 00"), h("f2 0f 10 00")], ids=case_id
)
def test_fs_gs_addr32_and_rep_prefixes_are_accepted(code):
    assert analyze_insn(code).kind == "xol"


@pytest.mark.parametrize("code", [h("8e d0"), h("1f")], ids=["mov-to-ss", "pop-ds-0x1f"])
def test_exception_masking_instruction_is_enotsupp(code):
    assert errno_of(code) == "ENOTSUPP"


def test_mov_to_other_segment_register_is_accepted():
    assert analyze_insn(h("8e d8")).fixups == FIX_IP  # mov %eax,%ds: ModRM.reg 3


@pytest.mark.parametrize(
    "code",
    [h("0f 05"), h("0f 0b"), h("0f 01 d0"), h("0f ae f8"), h("0f 34")],
    ids=["syscall", "ud2", "xgetbv", "sfence", "sysenter"],
)
def test_two_byte_opcodes_pass_because_0x0f_is_good(code):
    """good_2byte_insns would refuse these, but the one-byte test on 0x0f succeeds first."""
    uprobe = analyze_insn(code)
    assert (uprobe.kind, uprobe.fixups) == ("xol", FIX_IP)


@pytest.mark.parametrize(
    "code",
    [h("66 eb 05"), h("66 e9 10 00 00 00"), h("66 e8 10 00 00 00"), h("66 74 05"), h("66 0f 84 10 00 00 00")],
    ids=["jmp8", "jmp32", "call", "jcc8", "jcc32"],
)
def test_0x66_prefixed_branch_is_enotsupp(code):
    assert errno_of(code) == "ENOTSUPP"


@pytest.mark.parametrize("policy", ["nop1", "x86_nops", "insn_is_nop"])
def test_0x66_prefixed_nop_is_emulated(policy):
    assert analyze_insn(h("66 90"), nop_policy=policy).kind == "nop"


def test_0x66_jmp_plus_0_is_a_nop_only_for_insn_is_nop():
    """NOPs skip the 0x66 check (goto setup), so ``66 eb 00`` depends on the NOP rules."""
    assert analyze_insn(h("66 eb 00"), nop_policy="insn_is_nop").kind == "nop"
    assert errno_of(h("66 eb 00"), nop_policy="nop1") == "ENOTSUPP"


@pytest.mark.parametrize("code", [h("cc"), h("cc 90 90")], ids=case_id)
def test_file_byte_already_int3_is_enotsupp(code):
    assert errno_of(code) == "ENOTSUPP"


@pytest.mark.parametrize("code", [h("0f 04"), h("0f 0a"), h("ff ff"), h("c5")], ids=case_id)
def test_undecodable_bytes_are_enoexec(code):
    assert errno_of(code) == "ENOEXEC"


def test_unknown_policies_are_value_errors():
    with pytest.raises(ValueError):
        analyze_insn(h("90"), nop_policy="bogus")
    with pytest.raises(ValueError):
        analyze_insn(h("90"), optimize="nop7")
    with pytest.raises(ValueError):
        is_nop(h("90"), 1, "bogus")


# --- emulated classes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code,offs,ilen",
    [
        (h("eb 10"), 16, 2),
        (h("eb f0"), -16, 2),
        (h("e9 00 01 00 00"), 256, 5),
        (h("e9 fc ff ff ff"), -4, 5),
    ],
    ids=["rel8+", "rel8-", "rel32+", "rel32-"],
)
def test_jmp_is_emulated_with_signed_offset(code, offs, ilen):
    uprobe = analyze_insn(code)
    assert (uprobe.kind, uprobe.offs, uprobe.ilen) == ("jmp", offs, ilen)


def test_call_is_emulated_and_xol_copy_is_call_plus_0():
    code = h("e8 10 20 30 40 90 90")
    uprobe = analyze_insn(code)
    assert (uprobe.kind, uprobe.offs, uprobe.ilen, uprobe.opc1) == ("call", 0x40302010, 5, 0xE8)
    assert uprobe.ixol == window(h("e8 00 00 00 00 90 90"))
    assert uprobe.insn == window(code)


def test_call_with_negative_offset():
    assert analyze_insn(h("e8 fb ff ff ff")).offs == -5


@pytest.mark.parametrize("opc1", range(0x70, 0x80), ids=lambda b: f"{b:02x}")
def test_short_jcc_is_emulated(opc1):
    uprobe = analyze_insn(bytes([opc1, 0xF0]))
    assert (uprobe.kind, uprobe.opc1, uprobe.offs, uprobe.ilen) == ("jcc", opc1, -16, 2)


@pytest.mark.parametrize("opc2", range(0x80, 0x90), ids=lambda b: f"0f{b:02x}")
def test_near_jcc_maps_to_short_opcode(opc2):
    uprobe = analyze_insn(bytes([0x0F, opc2, 0x00, 0x10, 0x00, 0x00]))
    assert (uprobe.kind, uprobe.opc1, uprobe.offs, uprobe.ilen) == ("jcc", opc2 - 0x10, 0x1000, 6)


@pytest.mark.parametrize(
    "opcode,reg",
    list(zip(range(0x50, 0x58), ["rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi"])),
    ids=lambda v: f"{v:02x}" if isinstance(v, int) else v,
)
def test_push_register_is_emulated(opcode, reg):
    uprobe = analyze_insn(bytes([opcode]))
    assert (uprobe.kind, uprobe.push_reg, uprobe.ilen) == ("push", reg, 1)


@pytest.mark.parametrize(
    "opcode,reg",
    list(zip(range(0x50, 0x58), ["r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"])),
    ids=lambda v: f"41{v:02x}" if isinstance(v, int) else v,
)
def test_push_extended_register_needs_rex_0x41(opcode, reg):
    uprobe = analyze_insn(bytes([0x41, opcode]))
    assert (uprobe.kind, uprobe.push_reg, uprobe.ilen) == ("push", reg, 2)


@pytest.mark.parametrize("code", [h("48 50"), h("49 50"), h("66 50")], ids=["rex.w", "rex.wb", "push-ax"])
def test_other_push_encodings_are_single_stepped(code):
    uprobe = analyze_insn(code)
    assert (uprobe.kind, uprobe.fixups, uprobe.push_reg) == ("xol", FIX_IP, None)


@pytest.mark.parametrize(
    "code", [h("e0 10"), h("e1 10"), h("e2 10"), h("e3 10")], ids=["loopne", "loope", "loop", "jrcxz"]
)
def test_loop_and_jrcxz_are_single_stepped_with_ip_fixup(code):
    uprobe = analyze_insn(code)
    assert (uprobe.kind, uprobe.fixups) == ("xol", FIX_IP)


def test_emulated_classes_do_not_touch_the_xol_copy():
    for code in (h("eb 10"), h("74 10"), h("0f 84 10 00 00 00"), h("53"), h("41 57"), h("90")):
        uprobe = analyze_insn(code)
        assert uprobe.ixol == uprobe.insn == window(code), code.hex()


# --- default class: fixups ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code,fixups",
    [
        (h("9d"), FIX_SETF | FIX_IP),
        (h("c3"), 0),
        (h("cb"), 0),
        (h("c2 08 00"), 0),
        (h("ca 08 00"), 0),
        (h("ff d0"), FIX_CALL),
        (h("ff 10"), FIX_CALL),
        (h("ff 18"), FIX_CALL),
        (h("ff e0"), 0),
        (h("ff 20"), 0),
        (h("ff 28"), 0),
        (h("ff 30"), FIX_IP),
        (h("ff 00"), FIX_IP),
        (h("ff 15 10 00 00 00"), FIX_CALL | FIX_RIP_SI),
        (h("ff 25 10 00 00 00"), FIX_RIP_SI),
        (h("48 8d 05 10 00 00 00"), FIX_IP | FIX_RIP_SI),
        (h("89 c8"), FIX_IP),
        (h("f3 90"), FIX_IP),
    ],
    ids=[
        "popf",
        "ret",
        "lret",
        "ret-imm",
        "lret-imm",
        "call-rax",
        "call-mem",
        "lcall-mem",
        "jmp-rax",
        "jmp-mem",
        "ljmp-mem",
        "push-mem",
        "inc-mem",
        "call-riprel",
        "jmp-riprel",
        "lea-riprel",
        "mov",
        "pause",
    ],
)
def test_xol_fixups(code, fixups):
    uprobe = analyze_insn(code, nop_policy="insn_is_nop")
    assert (uprobe.kind, uprobe.fixups) == ("xol", fixups)


def test_absolute_disp32_is_not_rip_relative():
    """ModRM 00 reg 100 + SIB base 101 is [disp32], not [rip+disp32]."""
    code = h("8b 04 25 10 00 00 00")
    uprobe = analyze_insn(code)
    assert (uprobe.fixups, uprobe.scratch, uprobe.ixol) == (FIX_IP, None, window(code))


# --- rip-relative rewrite -----------------------------------------------------------------------

D32 = "00 01 00 00"  # disp32 = 0x100

RIPREL_CASES = [
    # (original, expected XOL copy, scratch, expected capstone text of the copy)
    (h("89 05" + D32), h("89 86" + D32), "rsi", "mov dword ptr [rsi + 0x100], eax"),
    (h("48 8b 05" + D32), h("48 8b 86" + D32), "rsi", "mov rax, qword ptr [rsi + 0x100]"),
    (h("41 8b 05" + D32), h("40 8b 86" + D32), "rsi", "mov eax, dword ptr [rsi + 0x100]"),
    (h("8b 35" + D32), h("8b b7" + D32), "rdi", "mov esi, dword ptr [rdi + 0x100]"),
    (h("4c 8b 35" + D32), h("4c 8b b7" + D32), "rdi", "mov r14, qword ptr [rdi + 0x100]"),
    (h("8b 3d" + D32), h("8b be" + D32), "rsi", "mov edi, dword ptr [rsi + 0x100]"),
    (h("ff 35" + D32), h("ff b7" + D32), "rdi", "push qword ptr [rdi + 0x100]"),
    (h("80 3d" + D32 + "05"), h("80 be" + D32 + "05"), "rsi", "cmp byte ptr [rsi + 0x100], 5"),
    (
        h("c7 05" + D32 + "78 56 34 12"),
        h("c7 86" + D32 + "78 56 34 12"),
        "rsi",
        "mov dword ptr [rsi + 0x100], 0x12345678",
    ),
    (h("48 8d 05" + D32), h("48 8d 86" + D32), "rsi", "lea rax, [rsi + 0x100]"),
    (h("f3 0f 6f 05" + D32), h("f3 0f 6f 86" + D32), "rsi", "movdqu xmm0, xmmword ptr [rsi + 0x100]"),
]
RIPREL_IDS = [
    "mov-store",
    "mov-load-rex.w",
    "rex.b-cleared",
    "reg6-uses-rdi",
    "rex.r-reg6-uses-rdi",
    "reg7-uses-rsi",
    "push-mem-reg6",
    "imm-after-disp",
    "mov-imm32",
    "lea",
    "sse-movdqu",
]

VEX_RIPREL_CASES = [
    (h("c5 f8 10 05" + D32), h("c5 f8 10 86" + D32), "rsi", "vmovups xmm0, xmmword ptr [rsi + 0x100]"),
    (h("c4 c1 78 10 05" + D32), h("c4 e1 78 10 86" + D32), "rsi", "vmovups xmm0, xmmword ptr [rsi + 0x100]"),
    (h("c5 c8 58 05" + D32), h("c5 c8 58 87" + D32), "rdi", "vaddps xmm0, xmm6, xmmword ptr [rdi + 0x100]"),
    (h("c5 c0 58 35" + D32), h("c5 c0 58 b3" + D32), "rbx", "vaddps xmm6, xmm7, xmmword ptr [rbx + 0x100]"),
    (h("c5 c8 58 3d" + D32), h("c5 c8 58 bb" + D32), "rbx", "vaddps xmm7, xmm6, xmmword ptr [rbx + 0x100]"),
    (h("62 91 7c 08 10 05" + D32), h("62 f1 7c 08 10 86" + D32), "rsi", "vmovups xmm0, xmmword ptr [rsi + 0x100]"),
    (h("c4 e1 48 58 05" + D32), h("c4 e1 48 58 87" + D32), "rdi", "vaddps xmm0, xmm6, xmmword ptr [rdi + 0x100]"),
    (h("62 f1 4c 08 58 05" + D32), h("62 f1 4c 08 58 87" + D32), "rdi", "vaddps xmm0, xmm6, xmmword ptr [rdi + 0x100]"),
]
VEX_RIPREL_IDS = [
    "vex2",
    "vex3-b-bit-set",
    "vvvv6-uses-rdi",
    "reg6-vvvv7-uses-rbx",
    "reg7-vvvv6-uses-rbx",
    "evex-x-b-bits-set",
    "vex3-vvvv6-uses-rdi",
    "evex-vvvv6-uses-rdi",
]

SCRATCH_FIX = {"rsi": FIX_RIP_SI, "rdi": FIX_RIP_DI, "rbx": FIX_RIP_BX}


@pytest.mark.parametrize("code,expected,scratch,text", RIPREL_CASES + VEX_RIPREL_CASES, ids=RIPREL_IDS + VEX_RIPREL_IDS)
def test_riprel_rewrite_exact_bytes(code, expected, scratch, text):
    uprobe = analyze_insn(code)
    assert uprobe.ixol == window(expected)
    assert uprobe.scratch == scratch
    assert uprobe.fixups & (FIX_RIP_SI | FIX_RIP_DI | FIX_RIP_BX) == SCRATCH_FIX[scratch]
    assert uprobe.insn == window(code)  # the file copy is untouched
    assert disasm_text(uprobe.ixol) == text
    assert disasm(uprobe.ixol).size == uprobe.ilen == len(code)


@pytest.mark.parametrize("code,expected,scratch,text", RIPREL_CASES, ids=RIPREL_IDS)
def test_riprel_rewrite_accesses_the_same_memory_on_a_cpu(code, expected, scratch, text):
    """Run the original at VADDR and the XOL copy in a slot with scratch = VADDR + ilen
    (what arch_uprobe_pre_xol() loads): same accesses, same results."""
    uprobe = analyze_insn(code)
    regs = initial_regs()
    orig = execute_once(code, VADDR, regs)
    xol = execute_once(uprobe.ixol[: uprobe.ilen], XOL_SLOT, {**regs, scratch: VADDR + uprobe.ilen})
    assert xol[0] == orig[0]
    assert {k: v for k, v in xol[1].items() if k != scratch} == {k: v for k, v in orig[1].items() if k != scratch}
    assert xol[2:] == orig[2:]


def test_vex_opcode_c2_skips_riprel_analysis():
    """Kernel quirk: the fixup switch reads OPCODE1, which for ``vcmpps`` is 0xc2 -- the
    ``ret imm16`` case -- so there is no rewrite and no ip fixup."""
    code = h("c5 f8 c2 05" + D32 + "00")
    uprobe = analyze_insn(code)
    assert (uprobe.kind, uprobe.fixups, uprobe.scratch) == ("xol", 0, None)
    assert uprobe.ixol == window(code)


# --- decoder-level quirks (OPCODE1 of VEX/EVEX is the byte after the prefix) -----------------


def test_evex_is_judged_by_its_opcode_not_by_the_0x62_table_entry():
    assert analyze_insn(h("62 91 7c 08 10 05" + D32)).kind == "xol"  # vmovups: 0x10
    assert errno_of(h("62 f1 7e 08 6f 05" + D32)) == "ENOTSUPP"  # vmovdqu32: 0x6f


def test_vex_vmovdqu_load_is_refused_as_opcode_0x6f():
    assert errno_of(h("c5 fa 6f 05" + D32)) == "ENOTSUPP"


@pytest.mark.parametrize(
    "code,kind,opc1",
    [
        (h("c5 fa 7f 05" + D32), "jcc", 0x7F),  # vmovdqu store: 0x7f = jg
        (h("c5 f1 eb c2"), "jmp", 0xEB),  # vpor: 0xeb = jmp rel8
        (h("c5 f1 e8 c2"), "call", 0xE8),  # vpsubsb: 0xe8 = call
    ],
    ids=["vmovdqu-store-as-jg", "vpor-as-jmp", "vpsubsb-as-call"],
)
def test_vex_opcodes_that_look_like_branches_are_emulated_as_branches(code, kind, opc1):
    uprobe = analyze_insn(code)
    assert (uprobe.kind, uprobe.opc1, uprobe.offs, uprobe.ixol) == (kind, opc1, 0, window(code))


def test_vex_opcode_0x8e_with_reg_2_hits_the_masking_check():
    assert errno_of(h("c4 e2 79 8e 10")) == "ENOTSUPP"  # vpmaskmovd, ModRM.reg 2


# --- NOP policies --------------------------------------------------------------------------------

NOP_TABLE = [
    # bytes,                         nop1,  x86_nops, insn_is_nop
    ("90", True, True, True),
    ("66 90", True, True, True),
    ("48 90", True, True, True),
    ("66 66 66 66 90", True, True, True),
    ("f3 90", True, True, False),  # pause
    ("41 90", True, True, False),  # xchg %r8,%rax
    ("0f 1f 00", False, True, True),  # nop3
    ("0f 1f 40 00", False, True, True),  # nop4
    ("0f 1f 44 00 00", False, True, True),  # nop5
    ("66 0f 1f 44 00 00", False, True, True),  # nop6
    ("0f 1f 80 00 00 00 00", False, True, True),  # nop7
    ("0f 1f 84 00 00 00 00 00", False, True, True),  # nop8
    ("2e 0f 1f 84 00 00 00 00 00", False, True, True),  # nop9
    ("66 2e 0f 1f 84 00 00 00 00 00", False, True, True),  # nop10
    ("0f 1f 44 00 01", False, False, True),  # nopl with disp 1
    ("66 66 0f 1f 84 00 00 00 00 00", False, False, True),
    ("41 0f 1f 40 00", False, False, True),  # REX.B nopl
    ("44 0f 1f 40 00", False, False, False),  # REX.R: reg 8, not /0
    ("0f 1f 48 00", False, False, False),  # 0f 1f /1
    ("48 89 c0", False, False, True),  # mov %rax,%rax
    ("4d 89 c0", False, False, True),  # mov %r8,%r8
    ("89 c0", False, False, False),  # mov %eax,%eax zero-extends
    ("4c 89 c0", False, False, False),  # mov %r8,%rax
    ("48 89 00", False, False, False),  # mov %rax,(%rax)
    ("48 8d 40 00", False, False, True),  # lea 0(%rax),%rax
    ("48 8d 80 00 00 00 00", False, False, True),  # lea 0x0(%rax) disp32
    ("48 8d 64 24 00", False, False, True),  # lea 0(%rsp,%riz,1),%rsp
    ("48 8d 44 20 00", False, False, True),  # lea 0(%rax,%riz,1),%rax
    ("4a 8d 44 20 00", False, False, False),  # index %r12
    ("48 8d 40 08", False, False, False),  # disp 8
    ("8d 40 00", False, False, False),  # 32-bit lea
    ("48 8d 00", False, False, False),  # mod 0
    ("48 8d 41 00", False, False, False),  # lea 0(%rcx),%rax
    ("67 48 8d 40 00", False, False, False),  # addr32 prefix
    ("eb 00", False, False, True),
    ("e9 00 00 00 00", False, False, True),
    ("eb 01", False, False, False),
    ("c5 f8 90 c1", True, True, False),  # kmovw: VEX opcode 0x90
]
POLICIES = ("nop1", "x86_nops", "insn_is_nop")


@pytest.mark.parametrize("policy_index,policy", list(enumerate(POLICIES)), ids=POLICIES)
@pytest.mark.parametrize("row", NOP_TABLE, ids=[r[0].replace(" ", "") for r in NOP_TABLE])
def test_is_nop_per_policy(row, policy_index, policy):
    code = h(row[0])
    assert disasm(code).size == len(code)
    assert is_nop(code, len(code), policy) is row[1 + policy_index]


@pytest.mark.parametrize("policy_index,policy", list(enumerate(POLICIES)), ids=POLICIES)
@pytest.mark.parametrize("row", [r for r in NOP_TABLE if "2e" not in r[0].split()], ids=lambda r: r[0].replace(" ", ""))
def test_analyze_emulates_exactly_the_policy_nops(row, policy_index, policy):
    uprobe = analyze_insn(h(row[0]), nop_policy=policy)
    assert (uprobe.kind == "nop") is row[1 + policy_index]
    if uprobe.kind == "nop":
        assert (uprobe.offs, uprobe.ilen) == (0, len(h(row[0])))


# --- jcc conditions ------------------------------------------------------------------------------

FLAG_COMBOS = [sum(c) for n in range(6) for c in itertools.combinations(FLAG_BITS, n)]


@pytest.mark.parametrize("opc1", range(0x70, 0x80), ids=lambda b: f"{b:02x}")
def test_jcc_taken_matches_the_cpu_for_all_flag_combinations(opc1):
    uc = Uc(UC_ARCH_X86, UC_MODE_64)
    uc.mem_map(0x1000, 0x1000)
    for eflags in FLAG_COMBOS:
        assert jcc_taken(opc1, eflags) is cpu_takes_jcc(uc, opc1, eflags), hex(eflags)


@pytest.mark.parametrize(
    "opc1,eflags,taken",
    [
        (0x70, OF, True),
        (0x71, OF, False),
        (0x72, CF, True),
        (0x73, 0, True),
        (0x74, ZF, True),
        (0x75, ZF, False),
        (0x76, CF, True),
        (0x76, ZF, True),
        (0x77, 0, True),
        (0x78, SF, True),
        (0x79, SF, False),
        (0x7A, PF, True),
        (0x7B, PF, False),
        (0x7C, SF, True),
        (0x7C, SF | OF, False),
        (0x7D, OF, False),
        (0x7E, ZF, True),
        (0x7E, OF, True),
        (0x7E, SF | OF, False),
        (0x7F, 0, True),
    ],
    ids=lambda v: f"{v:x}" if isinstance(v, int) else str(v),
)
def test_jcc_condition_table(opc1, eflags, taken):
    assert jcc_taken(opc1, eflags) is taken


def test_non_conditional_opcode_counts_as_taken():
    assert jcc_taken(0xEB, 0) and jcc_taken(0xE8, ZF)


# --- optimized-uprobe eligibility -------------------------------------------------------------


@pytest.mark.parametrize(
    "code,nop_policy,eligible",
    [
        (NOP5, "insn_is_nop", True),
        (NOP5, "x86_nops", True),
        (h("0f 1f 44 00 01"), "insn_is_nop", True),  # non-canonical nopl, 5 bytes
        (h("0f 1f 44 00 01"), "x86_nops", True),
        (h("66 66 66 66 90"), "x86_nops", True),
        (h("e9 00 00 00 00"), "insn_is_nop", True),  # jmp +0 is a NOP since 6.19
        (h("e9 00 00 00 00"), "x86_nops", False),
        (h("44 0f 1f 40 00"), "x86_nops", True),  # 6.18 helper ignores REX.R
        (h("44 0f 1f 40 00"), "insn_is_nop", False),
        (h("0f 1f 40 00"), "insn_is_nop", False),  # nop4
        (h("e8 00 00 00 00"), "insn_is_nop", False),
    ],
    ids=[
        "nop5",
        "nop5-6.18",
        "noncanonical",
        "noncanonical-6.18",
        "prefixed-90",
        "jmp0",
        "jmp0-6.18",
        "rex.r-6.18",
        "rex.r",
        "nop4",
        "call",
    ],
)
def test_nop5_eligibility(code, nop_policy, eligible):
    assert analyze_insn(code, nop_policy=nop_policy, optimize="nop5").can_optimize is eligible


def test_nop5_checks_prefixes_first():
    assert errno_of(h("2e 0f 1f 40 00"), optimize="nop5") == "ENOTSUPP"
    assert errno_of(NOP10, optimize="nop5") == "ENOTSUPP"


@pytest.mark.parametrize("optimize", [None, "nop10"])
def test_nop5_is_not_eligible_without_the_nop5_design(optimize):
    uprobe = analyze_insn(NOP5, optimize=optimize)
    assert (uprobe.kind, uprobe.can_optimize) == ("nop", False)


@pytest.mark.parametrize("code", [NOP10, h("66 2e 0f 1f 84 ff 78 56 34 12")], ids=["canonical", "other-sib-disp"])
def test_nop10_is_eligible_and_skips_the_prefix_check(code):
    uprobe = analyze_insn(code, optimize="nop10")
    assert (uprobe.kind, uprobe.ilen, uprobe.can_optimize) == ("nop", 10, True)


@pytest.mark.parametrize("optimize", [None, "nop5"])
def test_nop10_is_refused_for_its_cs_prefix_without_the_nop10_design(optimize):
    assert errno_of(NOP10, optimize=optimize) == "ENOTSUPP"


@pytest.mark.parametrize(
    "code",
    [h("2e 66 0f 1f 84 00 00 00 00 00"), h("66 66 2e 0f 1f 84 00 00 00 00 00")],
    ids=["prefixes-swapped", "nop11"],
)
def test_non_canonical_cs_nops_stay_refused_under_nop10(code):
    assert errno_of(code, optimize="nop10") == "ENOTSUPP"


def test_ten_byte_nop_without_cs_is_emulated_but_not_eligible():
    uprobe = analyze_insn(h("66 66 0f 1f 84 00 00 00 00 00"), optimize="nop10")
    assert (uprobe.kind, uprobe.ilen, uprobe.can_optimize) == ("nop", 10, False)


def test_nop10_crossing_a_page_is_refused_when_vaddr_is_known():
    assert errno_of(NOP10, optimize="nop10", vaddr=0x1FF7) == "ENOTSUPP"
    assert analyze_insn(NOP10, optimize="nop10", vaddr=0x1FF6).can_optimize


def test_nop5_crossing_a_page_is_emulated_but_not_eligible():
    assert not analyze_insn(NOP5, optimize="nop5", vaddr=0x1FFC).can_optimize
    assert analyze_insn(NOP5, optimize="nop5", vaddr=0x1FFB).can_optimize


@pytest.mark.parametrize(
    "vaddr,length,crosses",
    [
        (0x1000, 10, False),
        (0x1FF6, 10, False),
        (0x1FF7, 10, True),
        (0x1FFF, 1, False),
        (0x1FFF, 2, True),
        (0x7FFFF000, 4096, False),
        (0x7FFFF001, 4096, True),
    ],
    ids=lambda v: f"{v:#x}" if isinstance(v, int) else str(v),
)
def test_page_crossing(vaddr, length, crosses):
    assert page_crossing(vaddr, length) is crosses


# --- shape of the result ----------------------------------------------------------------------


def test_short_input_is_zero_padded_and_long_input_truncated():
    assert analyze_insn(h("90")).insn == window(h("90"))
    long = bytes([0x90]) + bytes(range(1, 20))
    uprobe = analyze_insn(long)
    assert uprobe.insn == long[:16] and len(uprobe.ixol) == 16


def test_text_is_capstone_of_the_original():
    assert analyze_insn(h("89 05" + D32)).text == "mov dword ptr [rip + 0x100], eax"


def test_result_is_immutable():
    uprobe = analyze_insn(h("90"))
    assert isinstance(uprobe, ArchUprobe)
    with pytest.raises(AttributeError):
        uprobe.kind = "xol"


@settings(max_examples=400, deadline=None)
@given(st.binary(min_size=1, max_size=16), st.sampled_from(POLICIES), st.sampled_from([None, "nop5", "nop10"]))
def test_any_bytes_analyze_or_fail_with_a_kernel_errno(code, policy, optimize):
    """Never crashes; results are self-consistent with Capstone."""
    try:
        uprobe = analyze_insn(code, nop_policy=policy, optimize=optimize)
    except RegistrationError as err:
        assert err.errno_name in ("ENOTSUPP", "ENOEXEC")
        return
    assert uprobe.insn == window(code)[:16] and len(uprobe.ixol) == 16
    assert uprobe.ilen == disasm(uprobe.insn).size
    assert uprobe.ixol[uprobe.ilen :] == uprobe.insn[uprobe.ilen :]
    if uprobe.scratch:
        assert disasm(uprobe.ixol).size == uprobe.ilen
        assert "rip" not in disasm_text(uprobe.ixol)
