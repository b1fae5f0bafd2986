"""x86-64 instruction analysis for uprobes: ``arch_uprobe_analyze_insn()`` as pure Python.

This models what arch/x86/kernel/uprobes.c does when a uprobe is first registered
(``prepare_uprobe()`` -> ``arch_uprobe_analyze_insn()``): decode the 16 bytes copied
from the file, refuse what cannot be probed, and sort the instruction into one of the
"emulated" classes (nop, jmp, call, jcc, push -- handled by ``branch_setup_xol_ops()`` /
``push_setup_xol_ops()``) or the default class that is single-stepped out of line
(XOL) with post-step fixups and the rip-relative rewrite of ``riprel_analyze()``.

Decoding.  The kernel uses its own decoder (arch/x86/lib/insn.c); here Capstone (64-bit
mode) decides validity, length and the ModRM position, and the layout the kernel's
decoder exposes (legacy prefixes, REX, VEX/EVEX, opcode bytes, SIB, displacement,
immediate) is recomputed from the raw bytes by :func:`_scan` / :func:`_layout`.  Two
properties of the kernel's decoder matter and are reproduced on purpose:

* ``OPCODE1`` of a VEX/EVEX instruction is the opcode byte *after* the VEX/EVEX prefix
  ("VEX has only 1 byte for opcode" in ``insn_get_opcode()``), so ``good_insns_64`` and
  every ``switch (OPCODE1(insn))`` in uprobes.c see e.g. 0x6f for ``vmovdqu`` (rejected:
  0x6c-0x6f is ins/outs) and 0x7f for ``vmovdqu`` stores or 0xeb for ``vpor`` (which
  ``branch_setup_xol_ops()`` then treats as a jcc / jmp with displacement 0).  The 0x62
  entry of the table therefore never rejects EVEX: in 64-bit mode 0x62 is always read
  as the EVEX escape and the table is consulted with the real opcode.
* The kernel's decoder knows the one-byte opcodes that are invalid in 64-bit mode
  (06, 07, 0e, 1f, 27, 60, 82, 9a, d4, ea, ...) and decodes them, so they reach the
  ``good_insns_64`` test and fail with ENOTSUPP; Capstone refuses them, so they are
  re-admitted here (:func:`_decode_kernel_only`).

Known limits: APX REX2 (0xD5 prefix, kernels 6.10+) is not decoded by Capstone 5 and is
treated as its ``good_insns_64`` entry (rejected); instructions with more than four
distinct legacy prefixes are judged by Capstone, not by the kernel's "5th prefix becomes
the opcode" behaviour.

Nothing here holds state: every function is a pure function of its arguments.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kernel_model.errors import RegistrationError

if TYPE_CHECKING:
    import capstone

    from kernel_model.arch.x86.kernel.uprobes import UprobeXolOps

# --- constants (arch/x86/kernel/uprobes.c, arch/x86/include/asm/uprobes.h) -------------

FIX_IP, FIX_CALL, FIX_SETF, FIX_RIP_SI, FIX_RIP_DI, FIX_RIP_BX = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
FIX_RIP_MASK = FIX_RIP_SI | FIX_RIP_DI | FIX_RIP_BX
MAX_UINSN_BYTES = 16
PAGE_SIZE = 4096
UPROBE_SWBP_INSN = 0xCC

NOP_POLICIES = ("nop1", "x86_nops", "insn_is_nop")  # <=6.17 / 6.18 / 6.19+
OPTIMIZE_POLICIES = (None, "nop5", "nop10")  # none / 6.18-7.2 / 7.3+

NOP5 = bytes.fromhex("0f1f440000")
NOP10 = bytes.fromhex("662e0f1f840000000000")
# The 7.3 optimizer only takes a nop10 that starts like this (the last five bytes are the
# SIB + disp32 operand the unoptimize sequence relies on).
NOP10_HEAD = NOP10[:5]

# x86_nops[len] for CONFIG_64BIT (arch/x86/include/asm/nops.h, alternative.c): index is
# the length; ASM_NOP_MAX is 11 on 64-bit.
_NOP8 = bytes.fromhex("0f1f840000000000")
X86_NOPS: tuple[bytes, ...] = (
    b"",
    bytes.fromhex("90"),
    bytes.fromhex("6690"),
    bytes.fromhex("0f1f00"),
    bytes.fromhex("0f1f4000"),
    NOP5,
    b"\x66" + NOP5,
    bytes.fromhex("0f1f8000000000"),
    _NOP8,
    b"\x2e" + _NOP8,
    b"\x66\x2e" + _NOP8,
    b"\x66\x66\x2e" + _NOP8,
)

# good_insns_64: the FIRST opcode bytes whose bit is 0 (everything else is allowed,
# including 0x0f, so every two-byte opcode passes and good_2byte_insns -- which would
# reject 0f 00/01/05/06/07/08/09/0b/30/34/35/37/78/79/ae -- is never consulted).
GOOD_INSNS_64_REJECTED = frozenset(
    {
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
        0x62,
        0x6C,
        0x6D,
        0x6E,
        0x6F,
        0x82,
        0x9A,
        0xCC,
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
    }
)
# One-byte opcodes the kernel's decoder marks invalid in 64-bit mode but still decodes
# (Capstone refuses them).  0x62/0xc4/0xc5 are not here: in 64-bit mode they are the
# EVEX/VEX escapes.
_INVALID64_OPCODES = frozenset(
    {
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
        0x82,
        0x9A,
        0xCE,
        0xD4,
        0xD5,
        0xD6,
        0xEA,
    }
)
BAD_PREFIXES = frozenset({0x26, 0x2E, 0x36, 0x3E, 0xF0})  # ES CS SS DS LOCK
_LEGACY_PREFIXES = frozenset({0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x66, 0x67, 0xF0, 0xF2, 0xF3})

_PUSH_REGS = ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi")
_PUSH_REGS_REX_B = ("r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15")
_SCRATCH = {FIX_RIP_SI: "rsi", FIX_RIP_DI: "rdi", FIX_RIP_BX: "rbx"}

EFLAGS_CF, EFLAGS_PF, EFLAGS_ZF, EFLAGS_SF, EFLAGS_OF = 0x001, 0x004, 0x040, 0x080, 0x800


# --- the result --------------------------------------------------------------------------


@dataclass(frozen=True)
class ArchUprobe:
    """``struct arch_uprobe`` after ``arch_uprobe_analyze_insn()``.

    The kernel keeps ``insn`` and ``ixol`` in one union (the analysis edits the very
    copy later executed out of line, and ``set_orig_insn()`` writes its byte 0 back);
    here ``insn`` is the untouched file copy and ``ixol`` the edited one, so a caller
    modelling the restore quirk uses ``ixol[0]``.

    ``opc1`` holds the kernel's ``branch.opc1`` for every emulated branch kind: the
    short jcc opcode 0x70..0x7f for "jcc", 0xe8 for "call", 0xeb/0xe9 for "jmp", and the
    first opcode byte for "nop"; it is 0 for "push" and "xol".
    """

    insn: bytes
    ixol: bytes
    ilen: int
    kind: str  # "nop" | "jmp" | "call" | "jcc" | "push" | "xol"
    offs: int = 0
    opc1: int = 0
    push_reg: str | None = None
    fixups: int = 0
    scratch: str | None = None
    can_optimize: bool = False
    text: str = ""
    # ``auprobe->ops``: the class's ``struct uprobe_xol_ops``, attached by
    # ``arch_x86.arch_uprobe_analyze_insn`` (None straight out of the decoder, which no
    # hit sees: typed as attached)
    ops: UprobeXolOps = field(default=None, compare=False, repr=False)  # type: ignore[assignment]


# --- decoded instruction layout (the parts of struct insn that uprobes.c reads) --------


@dataclass(frozen=True)
class _Scan:
    """Prefixes and opcode, scanned the way ``insn_get_prefixes()``/``insn_get_opcode()`` do."""

    prefixes: tuple[int, ...]  # distinct legacy prefixes (insn->prefixes.bytes, <= 4)
    rex_off: int | None  # offset of the REX byte
    rex: int  # the REX byte, 0 if none
    vex_off: int | None  # offset of the C4/C5/62/8F escape
    vex: bytes  # the 2/3/4 VEX/XOP/EVEX bytes, b"" if none
    opcode: bytes  # 1..3 opcode bytes; VEX/EVEX always 1
    opcode_end: int


@dataclass(frozen=True)
class _Insn:
    """A decoded instruction: scan + ModRM/SIB/displacement/immediate positions."""

    raw: bytes  # the 16-byte window
    length: int
    scan: _Scan
    modrm_off: int | None
    sib_off: int | None
    disp: int  # sign-extended displacement (0 if none)
    imm_off: int  # first immediate byte (== length if none)
    text: str

    @property
    def opcode1(self) -> int:
        return self.scan.opcode[0]

    @property
    def modrm(self) -> int | None:
        return None if self.modrm_off is None else self.raw[self.modrm_off]

    @property
    def immediate(self) -> int:
        """``insn->immediate.value``: the first immediate, sign-extended (at most 4 bytes)."""
        data = self.raw[self.imm_off : min(self.length, self.imm_off + 4)]
        return int.from_bytes(data, "little", signed=True) if data else 0

    @property
    def imm_nbytes(self) -> int:
        return max(0, min(self.length - self.imm_off, 4))

    @property
    def opnd_bytes(self) -> int:
        """Operand size in 64-bit mode: REX.W -> 8, else 0x66 -> 2, else 4."""
        if self.scan.rex & 0x08:
            return 8
        return 2 if 0x66 in self.scan.prefixes else 4


def _scan(raw: bytes) -> _Scan:
    """Legacy prefixes, REX, VEX/EVEX/XOP and opcode bytes, in the kernel decoder's order.

    Mirrors ``insn_get_prefixes()`` (distinct legacy prefixes, at most four; then one REX;
    then a VEX escape, which in 64-bit mode is always C4/C5/62) and ``insn_get_opcode()``
    (a VEX-encoded instruction has a one-byte opcode; otherwise 0x0f escapes to a second
    byte and 0f 38 / 0f 3a to a third).  XOP (8F with map >= 8) is treated like VEX3.
    """
    raw = raw + bytes(4)  # look-ahead past a window full of prefixes
    pos = 0
    distinct: list[int] = []
    while pos < MAX_UINSN_BYTES and raw[pos] in _LEGACY_PREFIXES:
        if raw[pos] not in distinct:
            if len(distinct) == 4:
                break
            distinct.append(raw[pos])
        pos += 1
    rex_off, rex = None, 0
    if 0x40 <= raw[pos] <= 0x4F:
        rex_off, rex = pos, raw[pos]
        pos += 1
    vex_len = _vex_length(raw, pos)
    vex_off = pos if vex_len else None
    vex = raw[pos : pos + vex_len]
    pos += vex_len
    if vex_len:
        opcode = raw[pos : pos + 1]
    elif raw[pos] == 0x0F and raw[pos + 1] in (0x38, 0x3A):
        opcode = raw[pos : pos + 3]
    elif raw[pos] == 0x0F:
        opcode = raw[pos : pos + 2]
    else:
        opcode = raw[pos : pos + 1]
    return _Scan(tuple(distinct), rex_off, rex, vex_off, vex, opcode, pos + len(opcode))


def _vex_length(raw: bytes, pos: int) -> int:
    """Length of a VEX2 (C5), VEX3 (C4), XOP (8F, map >= 8) or EVEX (62) escape at ``pos``."""
    first = raw[pos]
    if first == 0xC5:
        return 2
    if first == 0xC4:
        return 3
    if first == 0x62:
        return 4
    if first == 0x8F and (raw[pos + 1] & 0x1F) >= 8:
        return 3
    return 0


def _layout(raw: bytes, length: int, scan: _Scan, modrm_off: int | None, text: str = "") -> _Insn:
    """Add SIB, displacement and immediate positions (``insn_get_sib/displacement``)."""
    if modrm_off is None:
        return _Insn(raw, length, scan, None, None, 0, scan.opcode_end, text)
    modrm = raw[modrm_off]
    mod, rm = modrm >> 6, modrm & 7
    sib_off = modrm_off + 1 if mod != 3 and rm == 4 else None
    pos = modrm_off + 1 + (sib_off is not None)
    disp_len = 0
    if mod == 1:
        disp_len = 1
    elif mod == 2 or (mod == 0 and rm == 5) or (mod == 0 and sib_off is not None and raw[sib_off] & 7 == 5):
        disp_len = 4
    disp = int.from_bytes(raw[pos : pos + disp_len], "little", signed=True) if disp_len else 0
    return _Insn(raw, length, scan, modrm_off, sib_off, disp, pos + disp_len, text)


def _pad(insn: bytes) -> bytes:
    """The 16-byte window ``copy_insn()`` reads from the file (zero past EOF)."""
    raw = bytes(insn)[:MAX_UINSN_BYTES]
    return raw + bytes(MAX_UINSN_BYTES - len(raw))


@functools.lru_cache(maxsize=1)
def _decoder() -> capstone.Cs:
    """One capstone decoder, built once: building it costs more than a decode.  Capstone
    is imported here, at the first probe analysed, not with the kernel: a run without
    probes never loads it."""
    import capstone

    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    return md


def _decode(raw: bytes) -> _Insn:
    """``insn_decode(..., INSN_MODE_64)``; failure is ``-ENOEXEC`` (``uprobe_init_insn()``)."""
    found = next(_decoder().disasm(raw, 0, 1), None)
    scan = _scan(raw)
    if found is None:
        return _decode_kernel_only(raw, scan)
    modrm_off = found.modrm_offset or None
    text = f"{found.mnemonic} {found.op_str}".strip()
    return _layout(raw, found.size, scan, modrm_off, text)


def insn_length(raw: bytes) -> int:
    """The length of the instruction at the start of ``raw`` (15, the architectural
    maximum, if it does not decode)."""
    found = next(_decoder().disasm(raw, 0, 1), None)
    return found.size if found is not None else 15


def _decode_kernel_only(raw: bytes, scan: _Scan) -> _Insn:
    """Opcodes invalid in 64-bit mode that the kernel's decoder still accepts.

    The kernel's opcode map has entries for the legacy one-byte opcodes (push es, daa,
    pusha, call far, ...), so ``insn_decode()`` succeeds and the instruction is refused
    by ``good_insns_64`` (ENOTSUPP), not by the decoder (ENOEXEC).  The length is that
    of newer kernels' decoder, which stops at such an opcode; it is never used because
    the instruction is always rejected.
    """
    if scan.vex or scan.opcode[0] not in _INVALID64_OPCODES:
        raise RegistrationError("ENOEXEC", f"cannot decode instruction {raw.hex(' ')}")
    return _Insn(raw, scan.opcode_end, scan, None, None, 0, scan.opcode_end, "(bad)")


# --- uprobe_init_insn(): the kernel's refusals ------------------------------------------


def _uprobe_init_insn_checks(dec: _Insn) -> None:
    """``is_prefix_bad()``, ``insn_masking_exception()`` and the ``good_insns_64`` test.

    Raises ENOTSUPP.  The one-byte table is tested with ``OPCODE1``, and 0x0f is good,
    so every 0F-escaped opcode (syscall, ud2, ...) passes.
    """
    bad = [p for p in dec.scan.prefixes if p in BAD_PREFIXES]
    if bad:
        raise RegistrationError("ENOTSUPP", f"bad prefix 0x{bad[0]:02x} in {_hex(dec)}")
    if _masks_exceptions(dec):
        raise RegistrationError("ENOTSUPP", f"exception-masking instruction {_hex(dec)}")
    if dec.opcode1 in GOOD_INSNS_64_REJECTED:
        raise RegistrationError("ENOTSUPP", f"opcode 0x{dec.opcode1:02x} not in good_insns_64 ({_hex(dec)})")


def _masks_exceptions(dec: _Insn) -> bool:
    """``insn_masking_exception()``: POP_SS_OPCODE (0x1f, sic) or ``mov ..., %ss`` (8E /2)."""
    if dec.opcode1 == 0x1F:
        return True
    return dec.opcode1 == 0x8E and dec.modrm is not None and (dec.modrm >> 3) & 7 == 2


def _hex(dec: _Insn) -> str:
    return dec.raw[: dec.length].hex(" ")


# --- NOP recognition: three kernel generations ------------------------------------------


def is_nop(insn: bytes, ilen: int, policy: str) -> bool:
    """Does ``branch_setup_xol_ops()`` emulate these ``ilen`` bytes as a NOP?

    ``policy``:

    * ``"nop1"`` (6.2 .. before the 2025 x86_nops patch): ``case 0x90: goto setup`` --
      first opcode byte 0x90 with ANY prefixes, so ``66 90`` is a NOP but so are
      ``f3 90`` (pause) and ``41 90`` (``xchg %r8,%rax``: a real kernel bug).  Before
      6.2 the 0x90 case fell through to the 0x66 check and ``66 90`` was refused.
    * ``"x86_nops"`` (6.18): an exact ``memcmp`` with ``x86_nops[ilen]`` (the 64-bit GAS
      nops of length 1..11), or the 0x90 case above.
    * ``"insn_is_nop"`` (6.19+, arch/x86/lib/insn-eval.c): 0x90 without REX.B or F3;
      ``0f 1f /0`` (reg including REX.R) of any length; ``89 /r`` register-direct with
      reg == rm at 64-bit operand size; ``8d`` LEA, mod 1 or 2, displacement 0, base ==
      reg (REX-extended), SIB only without index, 64-bit operand size, no prefix but DS;
      ``e9``/``eb`` with displacement 0; never VEX/EVEX.
    """
    raw = _pad(insn)
    scan = _scan(raw)
    return _is_nop(_layout(raw, ilen, scan, _nop_modrm_offset(scan)), policy)


def _nop_modrm_offset(scan: _Scan) -> int | None:
    """Where the ModRM byte is, for the opcodes the NOP rules inspect (0f 1f, 89, 8d)."""
    has_modrm = not scan.vex and scan.opcode in (b"\x0f\x1f", b"\x89", b"\x8d")
    return scan.opcode_end if has_modrm else None


def _is_nop(dec: _Insn, policy: str) -> bool:
    if policy == "nop1":
        return dec.opcode1 == 0x90
    if policy == "x86_nops":
        return _matches_x86_nops(dec) or dec.opcode1 == 0x90
    if policy == "insn_is_nop":
        return _insn_is_nop(dec)
    raise ValueError(f"unknown nop policy {policy!r}; known: {NOP_POLICIES}")


def _matches_x86_nops(dec: _Insn) -> bool:
    """``insn->length <= ASM_NOP_MAX && !memcmp(insn, x86_nops[insn->length], length)``."""
    return dec.length < len(X86_NOPS) and dec.raw[: dec.length] == X86_NOPS[dec.length]


def _insn_is_nop(dec: _Insn) -> bool:
    """``insn_is_nop()`` of arch/x86/lib/insn-eval.c (the 6.19+ unified version)."""
    if dec.scan.vex:
        return False
    opcode = dec.scan.opcode
    if opcode == b"\x90":
        return not dec.scan.rex & 0x01 and 0xF3 not in dec.scan.prefixes
    if opcode in (b"\xe9", b"\xeb"):
        return dec.immediate == 0
    if opcode == b"\x0f\x1f":
        return _modrm_reg(dec) == 0
    if opcode == b"\x89":
        return _is_mov_reg_to_itself(dec)
    if opcode == b"\x8d":
        return _is_lea_zero_to_itself(dec)
    return False


def _modrm_reg(dec: _Insn) -> int | None:
    """ModRM.reg extended by REX.R (``modrm_reg`` in ``insn_is_nop()``)."""
    if dec.modrm is None:
        return None
    return ((dec.modrm >> 3) & 7) + 8 * bool(dec.scan.rex & 0x04)


def _modrm_rm_or_base(dec: _Insn) -> int:
    """ModRM.rm, or SIB.base when there is a SIB byte, extended by REX.B."""
    low = dec.raw[dec.sib_off] & 7 if dec.sib_off is not None else dec.modrm & 7  # type: ignore[operator]  # has ModRM
    return low + 8 * bool(dec.scan.rex & 0x01)


def _is_mov_reg_to_itself(dec: _Insn) -> bool:
    """``mov %reg,%reg`` at native (64-bit) size; ``89 c0`` zero-extends, so it is not."""
    if dec.modrm is None or dec.modrm >> 6 != 3 or dec.opnd_bytes != 8:
        return False
    return _modrm_reg(dec) == _modrm_rm_or_base(dec)


def _is_lea_zero_to_itself(dec: _Insn) -> bool:
    """``lea 0(%reg),%reg`` (optionally ``0(%reg,%riz,1)``) at 64-bit size."""
    if dec.modrm is None or dec.modrm >> 6 not in (1, 2) or dec.opnd_bytes != 8:
        return False
    if dec.disp != 0:
        return False
    if dec.sib_off is not None and not _sib_has_no_index(dec):
        return False
    if any(p != 0x3E for p in dec.scan.prefixes):
        return False
    return _modrm_reg(dec) == _modrm_rm_or_base(dec)


def _sib_has_no_index(dec: _Insn) -> bool:
    """SIB scale 0 and index 4 without REX.X (i.e. "%riz")."""
    sib = dec.raw[dec.sib_off]  # type: ignore[index]  # called with a SIB byte
    index = ((sib >> 3) & 7) + 8 * bool(dec.scan.rex & 0x02)
    return sib >> 6 == 0 and index == 4


# --- can_optimize() -------------------------------------------------------------------------


def _fits_in_page(vaddr: int | None, length: int) -> bool:
    return vaddr is None or not page_crossing(vaddr, length)


def _can_optimize_nop10(dec: _Insn, vaddr: int | None) -> bool:
    """7.3 ``can_optimize()``: a 10-byte ``insn_is_nop()`` starting ``66 2e 0f 1f 84``."""
    return dec.length == 10 and dec.raw[:5] == NOP10_HEAD and _insn_is_nop(dec) and _fits_in_page(vaddr, 10)


def _can_optimize_nop5(dec: _Insn, vaddr: int | None, nop_policy: str) -> bool:
    """6.18-7.1 ``can_optimize()``: any 5-byte NOP that does not cross a page.

    With the 6.19+ ``insn_is_nop()`` policy the unified rules decide; otherwise the 6.18
    helpers: one-byte opcode 0x90 (any prefixes) or ``0f 1f`` with ModRM.reg == 0 (REX.R
    not considered).
    """
    if dec.length != 5 or not _fits_in_page(vaddr, 5):
        return False
    if nop_policy == "insn_is_nop":
        return _insn_is_nop(dec)
    opcode = dec.scan.opcode
    return opcode == b"\x90" or (opcode == b"\x0f\x1f" and dec.modrm is not None and (dec.modrm >> 3) & 7 == 0)


def page_crossing(vaddr: int, length: int) -> bool:
    """``PAGE_SIZE - (vaddr & ~PAGE_MASK) < length``: the bytes straddle a page boundary."""
    return PAGE_SIZE - (vaddr & (PAGE_SIZE - 1)) < length


# --- branch_setup_xol_ops() / push_setup_xol_ops() ---------------------------------------

_COND_JMP_OPCODES = frozenset(range(0x70, 0x80))


def _branch_setup(dec: _Insn, nop_policy: str) -> ArchUprobe | None:
    """``branch_setup_xol_ops()``: nop, jmp rel8/rel32, call rel32, jcc; None = -ENOSYS.

    A 0x66 prefix on anything but a NOP is refused (ENOTSUPP).  ``call`` gets its
    immediate zeroed in the XOL copy (``branch_clear_offset()``: "call +0").
    """
    opc1, ixol = dec.opcode1, dec.raw
    if _is_nop(dec, nop_policy):
        return _branch(dec, "nop", opc1, ixol)
    if opc1 in (0xEB, 0xE9):
        kind = "jmp"
    elif opc1 == 0xE8:
        kind, ixol = "call", _clear_immediate(dec)
    else:
        if opc1 == 0x0F:
            if len(dec.scan.opcode) != 2:
                return None
            opc1 = (dec.scan.opcode[1] - 0x10) & 0xFF  # near jcc 0f 8x -> short 7x
        if opc1 not in _COND_JMP_OPCODES:
            return None
        kind = "jcc"
    if 0x66 in dec.scan.prefixes:
        raise RegistrationError("ENOTSUPP", f"0x66-prefixed branch {_hex(dec)}")
    return _branch(dec, kind, opc1, ixol)


def _branch(dec: _Insn, kind: str, opc1: int, ixol: bytes) -> ArchUprobe:
    return ArchUprobe(insn=dec.raw, ixol=ixol, ilen=dec.length, kind=kind, offs=dec.immediate, opc1=opc1, text=dec.text)


def _clear_immediate(dec: _Insn) -> bytes:
    """``branch_clear_offset()``: zero the immediate bytes of the XOL copy."""
    end = dec.imm_off + dec.imm_nbytes
    return dec.raw[: dec.imm_off] + bytes(dec.imm_nbytes) + dec.raw[end:]


def _push_setup(dec: _Insn) -> ArchUprobe | None:
    """``push_setup_xol_ops()``: ``50+r`` alone, or with exactly the REX byte 0x41."""
    opc1 = dec.opcode1
    if not 0x50 <= opc1 <= 0x57 or dec.length > 2:
        return None
    if dec.length == 2:
        if dec.scan.rex != 0x41:
            return None
        reg = _PUSH_REGS_REX_B[opc1 - 0x50]
    else:
        reg = _PUSH_REGS[opc1 - 0x50]
    return ArchUprobe(insn=dec.raw, ixol=dec.raw, ilen=dec.length, kind="push", push_reg=reg, text=dec.text)


# --- default class: single-step out of line --------------------------------------------


def _default_setup(dec: _Insn) -> ArchUprobe:
    """The fixup switch at the end of ``arch_uprobe_analyze_insn()``, by ``OPCODE1``.

    popf: FIX_SETF (+ FIX_IP); ret/lret/jmp far: no fixup; call far: FIX_CALL;
    FF /2 /3: FIX_CALL, FF /4 /5: none, other FF: FIX_IP -- all FF forms then go through
    ``riprel_analyze()`` like every other opcode.  popf/ret/far forms skip it.
    """
    opc1, fix_ip_or_call, fixups, ixol = dec.opcode1, FIX_IP, 0, dec.raw
    if opc1 == 0x9D:
        fixups = FIX_SETF
    elif opc1 in (0xC3, 0xCB, 0xC2, 0xCA, 0xEA):
        fix_ip_or_call = 0
    elif opc1 == 0x9A:
        fix_ip_or_call = FIX_CALL
    else:
        if opc1 == 0xFF and dec.modrm is not None:
            fix_ip_or_call = _ff_fixup((dec.modrm >> 3) & 7)
        fixups, ixol = _riprel_analyze(dec)
    fixups |= fix_ip_or_call
    scratch = next((name for bit, name in _SCRATCH.items() if fixups & bit), None)
    return ArchUprobe(
        insn=dec.raw, ixol=ixol, ilen=dec.length, kind="xol", fixups=fixups, scratch=scratch, text=dec.text
    )


def _ff_fixup(reg: int) -> int:
    """Group 5: indirect (l)call fixes the return address, indirect (l)jmp nothing."""
    if reg in (2, 3):
        return FIX_CALL
    if reg in (4, 5):
        return 0
    return FIX_IP


def _riprel_analyze(dec: _Insn) -> tuple[int, bytes]:
    """``riprel_analyze()``: rewrite ``disp32(%rip)`` into ``disp32(%scratch)``.

    Only when ModRM is ``00 reg 101``.  Clears REX.B; for VEX3/XOP/EVEX sets bits 0x60
    of the byte after the escape (inverted X/B: "not extended"); picks si, else di, else
    bx so that neither ModRM.reg nor the low three bits of VEX.vvvv name the scratch
    register; and makes ModRM ``10 reg scratch``.  The disp32 stays where it is, so the
    length is unchanged and ``scratch = vaddr + ilen`` reproduces the address.
    """
    if dec.modrm is None or dec.modrm & 0xC7 != 0x05:
        return 0, dec.raw
    buf = bytearray(dec.raw)
    scan = dec.scan
    if scan.rex_off is not None:
        buf[scan.rex_off] &= 0xFE
    if len(scan.vex) >= 3:
        buf[scan.vex_off + 1] |= 0x60  # type: ignore[operator]  # a VEX prefix has its offset
    reg = (dec.modrm >> 3) & 7
    reg2 = _vex_vvvv_low3(scan)
    if reg != 6 and reg2 != 6:
        fixup, scratch = FIX_RIP_SI, 6
    elif reg != 7 and reg2 != 7:
        fixup, scratch = FIX_RIP_DI, 7
    else:
        fixup, scratch = FIX_RIP_BX, 3
    buf[dec.modrm_off] = 0x80 | (reg << 3) | scratch  # type: ignore[index]  # ModRM checked above
    return fixup, bytes(buf)


def _vex_vvvv_low3(scan: _Scan) -> int:
    """Low three bits of (inverted) VEX.vvvv; 0 without VEX (the kernel reads 0xff).

    The kernel reads ``vex_prefix.bytes[2]``; for VEX2 its decoder stores a VEX3-like
    copy of byte 1 there, so vvvv is always bits 6..3 of the byte holding it.
    """
    if not scan.vex:
        return 0
    holder = scan.vex[1] if len(scan.vex) == 2 else scan.vex[2]
    return ((holder >> 3) & 7) ^ 7


# --- the entry point -------------------------------------------------------------------------


def analyze_insn(
    insn: bytes, *, nop_policy: str = "insn_is_nop", optimize: str | None = None, vaddr: int | None = None
) -> ArchUprobe:
    """See :func:`_analyze_insn`; results are memoized (the analysis is a pure function
    of the bytes, the policies and the page offset), which makes attaching many probes
    on the same instruction bytes cheap.  Errors are not cached."""
    return _analyze_cached(*analysis_key(insn, nop_policy, optimize, vaddr))


def analysis_key(insn: bytes, nop_policy: str, optimize: str | None, vaddr: int | None) -> tuple:
    """What the analysis depends on: the 16-byte window, the policies, and the page
    offset - only through page-crossing tests of at most 16 bytes, so every offset
    that leaves 16 bytes in the page is the same as offset 0 (one cache entry for all
    the probes of an instruction, not one per page offset)."""
    off = None if vaddr is None else vaddr & (PAGE_SIZE - 1)
    if off is not None and off <= PAGE_SIZE - MAX_UINSN_BYTES:
        off = 0
    return _pad(insn), nop_policy, optimize, off


@functools.lru_cache(maxsize=4096)
def _analyze_cached(raw: bytes, nop_policy: str, optimize: str | None, page_offset: int | None) -> ArchUprobe:
    return _analyze_insn(
        raw, nop_policy=nop_policy, optimize=optimize, vaddr=None if page_offset is None else 0x1000 + page_offset
    )


def _analyze_insn(
    insn: bytes, *, nop_policy: str = "insn_is_nop", optimize: str | None = None, vaddr: int | None = None
) -> ArchUprobe:
    """Model ``prepare_uprobe()``'s trap check plus ``arch_uprobe_analyze_insn()``.

    ``insn`` is up to 16 bytes from the file (zero-padded, longer input truncated).
    ``nop_policy`` picks the NOP rules (see :func:`is_nop`); ``optimize`` the
    optimized-uprobe generation: ``"nop5"`` (6.18-7.1) runs ``can_optimize()`` after
    the refusals, ``"nop10"`` (7.3+) runs it first and skips the refusals for an
    eligible nop10 (it carries a CS prefix).  ``vaddr``, when given, adds the kernel's
    page-crossing test to ``can_optimize()``; with ``vaddr=None`` the caller decides
    page crossing later (then a page-crossing nop10 is the caller's to refuse).

    Raises ``RegistrationError("ENOTSUPP")`` for a file byte already 0xCC and for the
    kernel's refusals, ``RegistrationError("ENOEXEC")`` when the bytes do not decode.
    """
    if nop_policy not in NOP_POLICIES:
        raise ValueError(f"unknown nop policy {nop_policy!r}; known: {NOP_POLICIES}")
    if optimize not in OPTIMIZE_POLICIES:
        raise ValueError(f"unknown optimize policy {optimize!r}; known: {OPTIMIZE_POLICIES}")
    raw = _pad(insn)
    if raw[0] == UPROBE_SWBP_INSN:
        raise RegistrationError("ENOTSUPP", "the file already has int3 at the probe address")
    dec = _decode(raw)
    can_optimize = optimize == "nop10" and _can_optimize_nop10(dec, vaddr)
    if not can_optimize:
        _uprobe_init_insn_checks(dec)
        can_optimize = optimize == "nop5" and _can_optimize_nop5(dec, vaddr, nop_policy)
    result = _branch_setup(dec, nop_policy) or _push_setup(dec) or _default_setup(dec)
    return replace(result, can_optimize=can_optimize)


# --- used at probe hits --------------------------------------------------------------------


def jcc_taken(opc1: int, eflags: int) -> bool:
    """``check_jmp_cond()``: is the short-form jcc ``opc1`` taken with these flags?

    70/71 OF; 72/73 CF; 74/75 ZF; 76/77 CF|ZF; 78/79 SF; 7a/7b PF; 7c/7d SF!=OF;
    7e/7f ZF|(SF!=OF); even opcode jumps when the condition holds, odd when it does not.
    Any other opcode is "not a conditional jmp" and, as in the kernel, counts as taken.
    """
    if opc1 not in _COND_JMP_OPCODES:
        return True
    cf, pf, zf = bool(eflags & EFLAGS_CF), bool(eflags & EFLAGS_PF), bool(eflags & EFLAGS_ZF)
    sf, of = bool(eflags & EFLAGS_SF), bool(eflags & EFLAGS_OF)
    condition = {
        0x70: of,
        0x72: cf,
        0x74: zf,
        0x76: cf or zf,
        0x78: sf,
        0x7A: pf,
        0x7C: sf != of,
        0x7E: zf or sf != of,
    }[opc1 & ~1]
    return condition if opc1 % 2 == 0 else not condition
