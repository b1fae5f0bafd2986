"""Entry probes on real guest code: int3, emulation and out-of-line single-step.

Every instruction class the kernel distinguishes (arch/x86/kernel/uprobes.c: emulated
and single-stepped) is probed in a small keystone guest.  Two things are pinned for each:

* transparency - the probed run ends with exactly the registers (eflags included) and
  writable memory of the unprobed run;
* the path the kernel takes - the exact bp/db traps, emulations, XOL single-steps,
  hits and text writes.

Exact encodings are written with ``.byte`` wherever the kernel's decision depends on the
bytes (keystone picks its own forms and mis-encodes the 5-byte nop).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from uprobe_helpers import (
    assert_same_state,
    expected_counters,
    final_state,
    guest,
    guest_regs,
    probe_counters,
    run_guest,
)

from emu import Machine
from kernel_model.arch.x86.ptrace import TF
from kernel_model.mm.mm_types import PROT_READ, PROT_WRITE
from kernel_model.trace.events import XolStep

# 6-byte `mov r8d, 0xdead`: a marker a taken branch jumps over.
MARKER = ".byte 0x41, 0xb8, 0xad, 0xde, 0x00, 0x00"
DATA = """
val:
    .quad 0x1122334455667788, 0x99aabbccddeeff00
out:
    .quad 0, 0
fptr:
    .quad func
jptr:
    .quad jump_target
buf:
    .byte 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16
dst:
    .byte 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
"""
# Code after the exit: call/jump targets.
TAIL = """
func:
    mov r9, qword ptr [rsp]
    add r10, 1
    ret
jump_target:
    mov r9, 0x77
    jmp done
"""


@dataclass
class Case:
    body: str
    how: str  # "emulated" | "xol"
    hits: int = 1
    check: object = None  # optional fn(machine) -> (ok, message)
    notes: str = ""

    def source(self) -> str:
        return guest(self.body, DATA, TAIL)


def _r9_is(label):
    def check(m, r):
        want = m.resolve(label)
        return r.r9 == want, f"r9 (pushed return address): expected {want:#x}, got {r.r9:#x}"

    return check


def _r9_eq(value):
    def check(m, r):
        return r.r9 == value, f"r9: expected {value:#x}, got {r.r9:#x}"

    return check


def _marker_skipped(m, r):
    return r.r8 != 0xDEAD, "r8 == 0xdead: the branch was not taken"


def _marker_run(m, r):
    return r.r8 == 0xDEAD, f"r8: expected 0xdead (branch not taken), got {r.r8:#x}"


CASES = {
    # -- emulated: nop, push, call rel32, jmp, jcc (branch_setup_xol_ops, push_setup_xol_ops)
    "nop-90": Case("probe:\n    .byte 0x90", "emulated"),
    "push-rbp": Case("probe:\n    push rbp\n    pop r9", "emulated", check=_r9_eq(0x0B0B0B0B0B0B0B0B)),
    "push-r12-41-54": Case("probe:\n    .byte 0x41, 0x54\n    pop r9", "emulated", check=_r9_eq(0x1212121212121212)),
    "push-rsp-pushes-old-rsp": Case(
        "    mov r10, rsp\nprobe:\n    push rsp\n    pop r9",
        "emulated",
        check=lambda m, r: (r.r9 == r.r10, f"push %rsp pushed {r.r9:#x}, expected the old rsp {r.r10:#x}"),
    ),
    "call-rel32": Case("probe:\n    call func\nafter_call:\n    nop", "emulated", check=_r9_is("after_call")),
    "jmp-rel8": Case(f"probe:\n    .byte 0xeb, 0x06\n    {MARKER}", "emulated", check=_marker_skipped),
    "jmp-rel32": Case(f"probe:\n    .byte 0xe9, 0x06, 0, 0, 0\n    {MARKER}", "emulated", check=_marker_skipped),
    "jcc-rel8-taken": Case(
        f"    cmp rbx, rbx\nprobe:\n    .byte 0x74, 0x06\n    {MARKER}", "emulated", check=_marker_skipped
    ),
    "jcc-rel8-not-taken": Case(
        f"    cmp rbx, rbx\nprobe:\n    .byte 0x75, 0x06\n    {MARKER}", "emulated", check=_marker_run
    ),
    "jcc-rel32-taken": Case(
        f"    cmp rbx, rbx\nprobe:\n    .byte 0x0f, 0x84, 0x06, 0, 0, 0\n    {MARKER}",
        "emulated",
        check=_marker_skipped,
    ),
    "jcc-rel32-not-taken": Case(
        f"    cmp rbx, rbx\nprobe:\n    .byte 0x0f, 0x85, 0x06, 0, 0, 0\n    {MARKER}", "emulated", check=_marker_run
    ),
    "jcc-rel8-backward-loop": Case(
        "    mov ecx, 3\n    xor r9d, r9d\ntop:\n    add r9, 1\n    dec ecx\nprobe:\n    .byte 0x75, 0xf8",
        "emulated",
        hits=3,
        check=_r9_eq(3),
    ),
    # -- single-stepped out of line (default_xol_ops) --------------------------------------
    "push-rax-48-50-not-emulated": Case(
        "probe:\n    .byte 0x48, 0x50\n    pop r9", "xol", check=_r9_eq(0x0A0A0A0A0A0A0A0A)
    ),
    "mov-reg-reg": Case("probe:\n    mov rax, rbx", "xol"),
    "add-sets-flags": Case("    mov rdx, -1\nprobe:\n    add rbx, rdx", "xol"),
    "mov-eax-eax-zero-extends": Case(
        "probe:\n    .byte 0x89, 0xc0",
        "xol",
        check=lambda m, r: (r.rax == 0x0A0A0A0A, f"rax: expected 0xa0a0a0a, got {r.rax:#x}"),
    ),
    "ret-no-fix-ip": Case("    call ret_func\n    jmp done\nret_func:\nprobe:\n    ret", "xol"),
    "ret-imm16": Case(
        "    sub rsp, 8\n    call ret8_func\n    jmp done\nret8_func:\nprobe:\n    .byte 0xc2, 0x08, 0x00", "xol"
    ),
    "loop-rel8-fix-ip": Case(
        "    mov ecx, 3\n    xor r9d, r9d\ntop:\n    add r9, 1\nprobe:\n    .byte 0xe2, 0xfa",
        "xol",
        hits=3,
        check=_r9_eq(3),
    ),
    "call-reg-fix-call": Case(
        "    lea rax, [rip + func]\nprobe:\n    call rax\nafter_call:\n    nop", "xol", check=_r9_is("after_call")
    ),
    "call-mem-fix-call": Case(
        "    lea rbx, [rip + fptr]\nprobe:\n    call qword ptr [rbx]\nafter_call:\n    nop",
        "xol",
        check=_r9_is("after_call"),
    ),
    "call-riprel-fix-call": Case(
        "probe:\n    call qword ptr [rip + fptr]\nafter_call:\n    nop", "xol", check=_r9_is("after_call")
    ),
    "jmp-reg": Case(f"    lea rax, [rip + jump_target]\nprobe:\n    jmp rax\n    {MARKER}", "xol", check=_r9_eq(0x77)),
    "jmp-mem": Case(
        f"    lea rbx, [rip + jptr]\nprobe:\n    jmp qword ptr [rbx]\n    {MARKER}", "xol", check=_r9_eq(0x77)
    ),
    "jmp-riprel": Case(f"probe:\n    jmp qword ptr [rip + jptr]\n    {MARKER}", "xol", check=_r9_eq(0x77)),
    "mov-load-riprel": Case(
        "probe:\n    mov rax, qword ptr [rip + val]",
        "xol",
        check=lambda m, r: (r.rax == 0x1122334455667788, f"rax: expected 0x1122334455667788, got {r.rax:#x}"),
    ),
    "mov-load-riprel-into-rsi": Case(
        "probe:\n    mov rsi, qword ptr [rip + val]",
        "xol",
        check=lambda m, r: (r.rsi == 0x1122334455667788, f"rsi: expected 0x1122334455667788, got {r.rsi:#x}"),
    ),
    "mov-store-riprel": Case("probe:\n    mov qword ptr [rip + out], rbx", "xol"),
    "mov-store-riprel-imm32": Case("probe:\n    mov dword ptr [rip + out], 0x12345678", "xol"),
    "rex-b-riprel-load": Case("probe:\n    .byte 0x49, 0x8b, 0x05\n    .long val - after_load\nafter_load:", "xol"),
    "movups-load-riprel": Case(
        "probe:\n    movups xmm0, xmmword ptr [rip + val]\n    movups xmmword ptr [rip + out], xmm0", "xol"
    ),
    "movups-store-riprel": Case(
        "    movups xmm3, xmmword ptr [rip + val]\nprobe:\n    movups xmmword ptr [rip + out], xmm3", "xol"
    ),
    "movdqu-load-riprel": Case(
        "probe:\n    movdqu xmm1, xmmword ptr [rip + val]\n    movdqu xmmword ptr [rip + out], xmm1", "xol"
    ),
    "movdqu-xmm9-load-riprel": Case(
        "probe:\n    movdqu xmm9, xmmword ptr [rip + val]\n    movdqu xmmword ptr [rip + out], xmm9", "xol"
    ),
    "vex-vmovups-load-riprel": Case(
        "probe:\n    .byte 0xc5, 0xf8, 0x10, 0x05\n    .long val - after_vex\n"
        "after_vex:\n    movups xmmword ptr [rip + out], xmm0",
        "xol",
    ),
    "vex-vaddps-riprel-scratch-rbx": Case(
        "    movups xmm7, xmmword ptr [rip + val]\nprobe:\n"
        "    .byte 0xc5, 0xc0, 0x58, 0x35\n    .long val - after_vex\nafter_vex:\n"
        "    movups xmmword ptr [rip + out], xmm6",
        "xol",
        notes="ModRM.reg = 6 and VEX.vvvv = 7: the kernel picks rbx as the scratch register",
    ),
    "lea-riprel": Case(
        "probe:\n    lea rax, [rip + val]",
        "xol",
        check=lambda m, r: (r.rax == m.resolve("val"), f"rax: expected {m.resolve('val'):#x}, got {r.rax:#x}"),
    ),
    "lea-base-disp": Case("probe:\n    lea rdx, [rbx + 8]", "xol"),
    "popfq-keeps-popped-flags": Case(
        "    push 0x8d7\nprobe:\n    popfq\n    pushfq\n    pop r9", "xol", check=_r9_eq(0x8D7 | 0x2)
    ),
    "movsb-no-rep": Case("    lea rsi, [rip + buf]\n    lea rdi, [rip + dst]\nprobe:\n    movsb", "xol"),
    # rep string ops under TF trap after each iteration; FIX_IP then points at the int3
    # again, so the probe hits once per iteration (rcx times).
    "rep-movsb-hits-per-iteration": Case(
        "    lea rsi, [rip + buf]\n    lea rdi, [rip + dst]\n    mov ecx, 5\nprobe:\n    rep movsb", "xol", hits=5
    ),
    "rep-stosb-hits-per-iteration": Case(
        "    lea rdi, [rip + dst]\n    mov ecx, 3\n    mov al, 0x41\nprobe:\n    rep stosb", "xol", hits=3
    ),
    "rep-stosb-zero-count": Case("    lea rdi, [rip + dst]\n    xor ecx, ecx\nprobe:\n    rep stosb", "xol", hits=1),
    "nop5-0f1f4400-latest": Case("probe:\n    .byte 0x0f, 0x1f, 0x44, 0x00, 0x00", "emulated"),
}


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_probed_instruction_is_transparent_and_takes_the_kernels_path(name):
    case = CASES[name]
    src = case.source()
    plain, r0, _ = run_guest(src)
    assert r0.reason == "exit" and r0.exit_code == 0, f"unprobed guest: {r0.describe()}"
    probed, r1, _ = run_guest(src, ["probe"])
    assert r1.reason == "exit" and r1.exit_code == 0, f"probed guest: {r1.describe()}"
    assert_same_state(final_state(plain), final_state(probed), f"{name} probed vs unprobed")
    want = expected_counters(case.hits, case.how)
    assert probe_counters(probed) == want, f"counters: expected {want}, got {probe_counters(probed)}"
    if case.check:
        ok, msg = case.check(probed, SimpleNamespace(**guest_regs(probed)))
        assert ok, msg


# ------------------------------------------------------------------- NOPs per kernel profile

# (encoding, {profile: how}) -- kernel_model.arch.x86.lib.insn.is_nop's docstring:
# <= 6.17 "case 0x90" (any prefix), 6.18 x86_nops[len] or 0x90, 6.19+ insn_is_nop().
NOP_POLICY_CASES = {
    "66-90": ("0x66, 0x90", {"6.17": "emulated", "6.18": "emulated", "latest": "emulated"}),
    "nop5-0f-1f-44-00-00": ("0x0f, 0x1f, 0x44, 0x00, 0x00", {"6.17": "xol", "6.18": "emulated", "latest": "emulated"}),
    "f3-90-pause": ("0xf3, 0x90", {"6.17": "emulated", "6.18": "emulated", "latest": "xol"}),
    "nop3-0f-1f-00": ("0x0f, 0x1f, 0x00", {"6.17": "xol", "6.18": "emulated", "latest": "emulated"}),
    "mov-rax-rax-48-89-c0": ("0x48, 0x89, 0xc0", {"6.17": "xol", "6.18": "xol", "latest": "emulated"}),
    "lea-rbx-0-rbx-48-8d-5b-00": ("0x48, 0x8d, 0x5b, 0x00", {"6.17": "xol", "6.18": "xol", "latest": "emulated"}),
    "jmp-plus-0-e9": ("0xe9, 0, 0, 0, 0", {"6.17": "emulated", "6.18": "emulated", "latest": "emulated"}),
}
PROFILES = ("6.17", "6.18", "latest")


@pytest.mark.parametrize("kernel", PROFILES)
@pytest.mark.parametrize("name", list(NOP_POLICY_CASES), ids=list(NOP_POLICY_CASES))
def test_nop_emulation_follows_the_profiles_policy(name, kernel):
    encoding, how = NOP_POLICY_CASES[name]
    src = guest(f"probe:\n    .byte {encoding}\n    nop")
    plain, _, _ = run_guest(src, kernel=kernel, optimize=None)
    probed, r, _ = run_guest(src, ["probe"], kernel=kernel, optimize=None)
    assert r.reason == "exit", r.describe()
    assert_same_state(final_state(plain), final_state(probed))
    want = expected_counters(1, how[kernel])
    assert probe_counters(probed) == want, (
        f"{name} on {kernel}: expected {how[kernel]} {want}, got {probe_counters(probed)}"
    )


XCHG_R8_RAX = guest("probe:\n    .byte 0x41, 0x90\n    nop")


@pytest.mark.parametrize("kernel", ["6.17", "6.18"])
def test_rex_b_0x90_xchg_is_skipped_as_a_nop_before_insn_is_nop(kernel):
    """Before the unified insn_is_nop() (6.19) any 0x90 opcode is "prefix* + nop", so
    probing ``41 90`` (xchg %r8d,%eax) emulates it as a NOP: a real kernel bug, the
    exchange (and the zero-extension of both registers) never happens."""
    m, _, _ = run_guest(XCHG_R8_RAX, ["probe"], kernel=kernel, optimize=None)
    regs = guest_regs(m)
    assert (regs["rax"], regs["r8"]) == (0x0A0A0A0A0A0A0A0A, 0x0808080808080808), (
        f"rax/r8 were exchanged: rax={regs['rax']:#x} r8={regs['r8']:#x}"
    )
    assert probe_counters(m) == expected_counters(1, "emulated")


def test_rex_b_0x90_xchg_is_single_stepped_with_insn_is_nop():
    plain, _, _ = run_guest(XCHG_R8_RAX)
    m, _, _ = run_guest(XCHG_R8_RAX, ["probe"], kernel="latest")
    regs = guest_regs(m)
    assert (regs["rax"], regs["r8"]) == (0x08080808, 0x0A0A0A0A), (
        f"xchg did not run: rax={regs['rax']:#x} r8={regs['r8']:#x}"
    )
    assert_same_state(final_state(plain), final_state(m))
    assert probe_counters(m) == expected_counters(1, "xol")


# ------------------------------------------------------------------- pinned kernel quirks

SYSCALL_GUEST = guest("""
    mov eax, 39
probe:
    syscall
after_syscall:
    mov r12, rcx
    mov r13, r11
""")


def test_probed_syscall_leaves_rcx_pointing_into_the_xol_slot():
    """The kernel single-steps ``syscall`` out of line, so the CPU stores the slot's next
    rip in rcx and the single-step TF in r11 - user-visible, as on a real kernel."""
    plain, _, _ = run_guest(SYSCALL_GUEST)
    m, r, _ = run_guest(SYSCALL_GUEST, ["probe"])
    assert r.reason == "exit", r.describe()
    base, want = guest_regs(plain), guest_regs(m)
    slot1 = 0x7FFFFFFFE000 + 128
    assert base["r12"] == m.resolve("after_syscall"), "unprobed: rcx = next rip"
    assert want["r12"] == slot1 + 2, (
        f"rcx after the probed syscall: expected slot 1 + 2 = {slot1 + 2:#x}, got {want['r12']:#x}"
    )
    assert want["r13"] == base["r13"] | TF, (
        f"r11 after the probed syscall: expected {base['r13'] | TF:#x} (TF set), got {want['r13']:#x}"
    )
    assert want["rax"] == base["rax"], "the syscall itself ran once (getpid result)"
    assert want["eflags"] & TF == 0, "TF cleared after the single-step"
    assert dict(m.counters.syscalls) == {39: 1, 231: 1}
    assert probe_counters(m) == expected_counters(1, "xol")


def test_probed_pushfq_pushes_the_single_step_tf():
    """pushf runs out of line with TF set and the kernel has no fixup for it: the
    pushed flags carry TF (the unprobed run pushes it clear)."""
    src = guest("probe:\n    pushfq\n    pop r9")
    plain, _, _ = run_guest(src)
    m, r, _ = run_guest(src, ["probe"])
    base, probed = guest_regs(plain)["r9"], guest_regs(m)["r9"]
    assert base & TF == 0
    assert probed == base | TF, f"pushed flags: expected {base | TF:#x}, got {probed:#x}"
    assert probe_counters(m) == expected_counters(1, "xol")


def test_probe_in_the_middle_of_an_instruction_is_accepted_and_corrupts_it():
    """The kernel never checks instruction boundaries: ``mov eax, 0x90909090`` probed at
    +1 decodes as a NOP there, registration succeeds, and the int3 lands in the
    immediate.  The probe never hits; the guest loads a corrupted value."""
    src = guest("imm_insn:\n    mov eax, 0x90909090")
    m, r, _ = run_guest(src, ["imm_insn+1"])
    assert r.reason == "exit", r.describe()
    rax = guest_regs(m)["rax"]
    assert rax == 0x909090CC, f"rax: expected 0x909090cc (int3 in the immediate), got {rax:#x}"
    assert probe_counters(m) == expected_counters(0, "emulated")


# ------------------------------------------------------------------- handlers

HANDLER_GUEST = guest(f"""
probe:
    {{insn}}
after_probe:
    {MARKER}
    jmp done
target:
    nop
    mov r9, 0x77
""")
EMULATED_PUSH = "push rbx\n    pop r10"  # 53: emulated, 1 byte
XOL_MOV = ".byte 0x48, 0x89, 0xd8"  # mov rax, rbx: single-stepped


@pytest.mark.parametrize("insn,how", [(EMULATED_PUSH, "emulated"), (XOL_MOV, "xol")], ids=["emulated-push", "xol-mov"])
def test_handler_sees_the_probe_address_and_the_guests_registers(insn, how):
    seen = []

    def handler(ctx):
        seen.append((ctx.regs.rip, ctx.vaddr, ctx.regs.rbx, ctx.regs.rsp, ctx.cookie))

    m, r, _ = run_guest(HANDLER_GUEST.format(insn=insn), ["probe"], handler=handler)
    probe = m.resolve("probe")
    assert len(seen) == 1, f"handler ran {len(seen)} times"
    rip, vaddr, rbx, rsp, cookie = seen[0]
    assert (rip, vaddr) == (probe, probe), (
        f"handler rip/vaddr: expected {probe:#x}, got {rip:#x}/{vaddr:#x} (not the int3 + 1)"
    )
    assert rbx == 0x1B1B1B1B1B1B1B1B, f"handler rbx: expected 0x1b1b1b1b1b1b1b1b, got {rbx:#x}"
    assert rsp == guest_regs(m)["rsp"], "handler rsp: expected the rsp at the probe"
    assert cookie == 0


@pytest.mark.parametrize(
    "insn,how,reg", [(EMULATED_PUSH, "emulated", "r10"), (XOL_MOV, "xol", "rax")], ids=["emulated-push", "xol-mov"]
)
def test_handler_register_writes_reach_the_guest(insn, how, reg):
    def handler(ctx):
        ctx.regs.rbx = 0x600DCAFE

    m, r, _ = run_guest(HANDLER_GUEST.format(insn=insn), ["probe"], handler=handler)
    regs = guest_regs(m)
    assert regs[reg] == 0x600DCAFE, (
        f"{reg} (copied from rbx by the probed insn): expected 0x600dcafe, got {regs[reg]:#x}"
    )
    assert regs["rbx"] == 0x600DCAFE
    assert probe_counters(m) == expected_counters(1, how)


def _jump_to_target(ctx):
    ctx.regs.rip = ctx.machine.resolve("target")


@pytest.mark.parametrize("kernel", ["6.18", "latest"])
@pytest.mark.parametrize("insn", [EMULATED_PUSH, XOL_MOV], ids=["emulated-push", "xol-mov"])
def test_handler_moving_rip_skips_the_probed_insn_since_6_18(insn, kernel):
    """6.18+: ip != bp_vaddr after the handlers -> neither emulated nor single-stepped."""
    m, r, _ = run_guest(HANDLER_GUEST.format(insn=insn), ["probe"], handler=_jump_to_target, kernel=kernel)
    plain, _, _ = run_guest(HANDLER_GUEST.format(insn=insn))
    regs, base = guest_regs(m), guest_regs(plain)
    assert regs["r9"] == 0x77 and regs["r8"] != 0xDEAD, "execution did not continue at target"
    assert regs["rsp"] == base["rsp"], f"rsp: expected {base['rsp']:#x} (nothing pushed), got {regs['rsp']:#x}"
    assert regs["rax"] == 0x0A0A0A0A0A0A0A0A, f"mov rax, rbx ran: rax={regs['rax']:#x}"
    assert probe_counters(m) == expected_counters(1, "skipped"), (
        f"expected neither emulation nor single-step, got {probe_counters(m)}"
    )


def test_handler_moving_rip_before_6_18_emulates_the_insn_at_the_new_ip():
    """<= 6.17: handle_swbp goes on to arch_uprobe_skip_sstep() with the handler's ip:
    the emulated ``push %rbx`` runs at ``target`` and ip becomes target + 1."""
    m, r, _ = run_guest(HANDLER_GUEST.format(insn=EMULATED_PUSH), ["probe"], handler=_jump_to_target, kernel="6.17")
    plain, _, _ = run_guest(HANDLER_GUEST.format(insn=EMULATED_PUSH), kernel="6.17")
    regs, base = guest_regs(m), guest_regs(plain)
    assert regs["r9"] == 0x77 and regs["r8"] != 0xDEAD, "execution did not continue after target"
    assert regs["rsp"] == base["rsp"] - 8, (
        f"rsp: expected {base['rsp'] - 8:#x} (push emulated, pop skipped), got {regs['rsp']:#x}"
    )
    pushed = int.from_bytes(m.mem.read(regs["rsp"], 8), "little")
    assert pushed == 0x1B1B1B1B1B1B1B1B, f"pushed value: expected rbx, got {pushed:#x}"
    assert probe_counters(m) == expected_counters(1, "emulated")


def test_handler_moving_rip_before_6_18_is_lost_for_a_single_stepped_insn():
    """<= 6.17: pre_ssout() points ip at the XOL slot regardless, and FIX_IP lands at
    vaddr + ilen: the probed insn runs and the handler's redirect is lost."""
    src = HANDLER_GUEST.format(insn=XOL_MOV)
    m, r, _ = run_guest(src, ["probe"], handler=_jump_to_target, kernel="6.17")
    plain, _, _ = run_guest(src, kernel="6.17")
    assert_same_state(final_state(plain), final_state(m), "6.17 redirect of an XOL insn")
    assert guest_regs(m)["r8"] == 0xDEAD
    assert probe_counters(m) == expected_counters(1, "xol")


LOOP_GUEST = guest("""
    mov r12d, 4
again:
probe:
    {insn}
    dec r12d
    jnz again
""")


@pytest.mark.parametrize("insn", ["nop", "mov rax, rbx"], ids=["emulated-nop", "xol-mov"])
def test_handlers_run_newest_registered_first_on_every_hit(insn):
    m = Machine.from_asm(LOOP_GUEST.format(insn=insn))
    calls = []
    for name in ("first", "second", "third"):
        m.uprobes.register("probe", handler=lambda ctx, name=name: calls.append(name))
    r = m.run(max_insns=100_000)
    assert r.reason == "exit", r.describe()
    assert calls == ["third", "second", "first"] * 4, f"handler order: {calls}"
    assert m.counters.uprobe_hits == 4 and m.counters.text_writes == 1, "three consumers share one uprobe and one int3"


def test_consumer_added_by_a_handler_to_the_hit_uprobe_runs_from_the_next_hit():
    """consumer_add() links at the list head, behind the running handler_chain walk."""
    m = Machine.from_asm(LOOP_GUEST.format(insn="nop"))
    calls = []

    def adder(ctx):
        calls.append("adder")
        if len([c for c in calls if c == "adder"]) == 2:
            m.uprobes.register("probe", handler=lambda ctx: calls.append("added"))

    m.uprobes.register("probe", handler=adder)
    m.run(max_insns=100_000)
    assert calls == ["adder", "adder", "added", "adder", "added", "adder"], f"calls: {calls}"


def test_consumer_unregistered_by_an_earlier_handler_of_the_same_hit_does_not_run():
    """consumer_del() is list_del_rcu(): a walk that has not reached the removed consumer
    yet no longer sees it."""
    m = Machine.from_asm(LOOP_GUEST.format(insn="nop"))
    calls = []
    older = m.uprobes.register("probe", handler=lambda ctx: calls.append("older"))

    def newer(ctx):
        calls.append("newer")
        if calls.count("newer") == 2:
            m.uprobes.unregister(older)

    m.uprobes.register("probe", handler=newer)
    m.run(max_insns=100_000)
    assert calls == ["newer", "older", "newer", "newer", "newer"], f"calls: {calls}"


# ------------------------------------------------------------------- signals and TF

FAULT_CASES = {
    # name: (body, signal, fault address: "probe" | int)
    "load-through-bad-pointer": ("    mov rbx, 0x10\nprobe:\n    mov rax, qword ptr [rbx]", "SIGSEGV", 0x10),
    "ud2": ("probe:\n    ud2", "SIGILL", "probe"),
    "divide-by-zero": ("    xor ecx, ecx\nprobe:\n    div rcx", "SIGFPE", "probe"),
}


@pytest.mark.parametrize("name", list(FAULT_CASES), ids=list(FAULT_CASES))
def test_fault_in_the_xol_slot_is_reported_at_the_probe_address(name):
    """arch_uprobe_abort_xol(): ip = vaddr, TF cleared; si_addr of traps is the probed
    address too (uprobe_get_trap_addr)."""
    body, signame, addr = FAULT_CASES[name]
    src = guest(body)
    plain, r0, _ = run_guest(src)
    m, r, _ = run_guest(src, ["probe"])
    probe = m.resolve("probe")
    want_addr = probe if addr == "probe" else addr
    assert (r.reason, r.signal_name) == ("signal", signame), r.describe()
    assert r.rip == probe, f"signal rip: expected the probe {probe:#x}, got {r.rip:#x} <{r.rip_symbol}>"
    assert r.fault_addr == want_addr, f"fault address: expected {want_addr:#x}, got {r.fault_addr:#x}"
    assert (r0.rip, r0.fault_addr) == (r.rip, r.fault_addr), "as reported without the probe"
    assert probe_counters(m) == dict(
        bp_traps=1, db_traps=0, emulated=0, xol_singlesteps=1, uprobe_hits=1, text_writes=1
    )


@pytest.mark.parametrize("name", list(FAULT_CASES), ids=list(FAULT_CASES))
def test_registers_after_an_aborted_xol_step_are_the_guests(name):
    """After the abort the task's registers are back at the probe: rip = vaddr, the TF
    the kernel set is cleared."""
    m, r, _ = run_guest(guest(FAULT_CASES[name][0]), ["probe"])
    regs = m.read_regs()
    assert regs.rip == m.resolve("probe"), f"rip: expected the probe, got {regs.rip:#x}"
    assert regs.eflags & TF == 0, f"eflags {regs.eflags:#x}: TF set by the kernel must be cleared"


def test_faulting_rip_relative_insn_restores_the_scratch_register():
    """``mov rax, [rip + d]`` runs as ``mov rax, [rsi + d]`` with rsi = vaddr + ilen; the
    abort path puts the guest's rsi back before the signal."""
    src = guest("probe:\n    .byte 0x48, 0x8b, 0x05\n    .long 0x10000000\nafter_bad:")
    m, r, _ = run_guest(src, ["probe"])
    bad = m.resolve("after_bad") + 0x10000000
    assert (r.signal_name, r.fault_addr, r.rip) == ("SIGSEGV", bad, m.resolve("probe")), r.describe()
    assert m.regs.rsi == 0x5151515151515151, f"rsi: expected 0x5151515151515151, got {m.regs.rsi:#x}"
    assert m.regs.rip == m.resolve("probe")


SET_TF = "    pushfq\n    or qword ptr [rsp], 0x100\n    popfq\n"


@pytest.mark.parametrize(
    "insn,ilen,how",
    [("nop", 1, "emulated"), ("push rbx", 1, "emulated"), ("mov rax, rbx", 3, "xol")],
    ids=["emulated-nop", "emulated-push", "xol-mov"],
)
def test_guest_that_set_tf_gets_sigtrap_after_the_probed_insn(insn, ilen, how):
    """TF set by the guest: an emulated insn sends SIGTRAP right after the emulation
    (arch_uprobe_skip_sstep), an XOL one after the fixups (saved_tf); either way the
    report is at vaddr + ilen, as a plain single-step would be, and TF stays set."""
    src = guest(SET_TF + f"probe:\n    {insn}\n    nop\n    nop")
    m, r, _ = run_guest(src, ["probe"])
    probe = m.resolve("probe")
    assert (r.reason, r.signal_name) == ("signal", "SIGTRAP"), r.describe()
    assert r.rip == probe + ilen, f"SIGTRAP rip: expected {probe + ilen:#x}, got {r.rip:#x}"
    assert m.regs.eflags & TF, "the guest's own TF must survive"
    assert probe_counters(m) == expected_counters(1, how)


def test_popf_probed_keeps_the_tf_it_pops():
    """FIX_SETF: a probed popf that sets TF keeps it (no SIGTRAP from the probe itself);
    the guest then single-steps into a plain trace trap one instruction later."""
    src = guest("    push 0x302\nprobe:\n    popfq\nnext_insn:\n    nop\n    nop")
    m, r, _ = run_guest(src, ["probe"])
    assert (r.reason, r.signal_name) == ("signal", "SIGTRAP"), r.describe()
    assert r.rip == m.resolve("next_insn") + 1, f"trace trap after the nop, got {r.rip:#x}"
    assert probe_counters(m) == expected_counters(1, "xol") | {"db_traps": 2}


def test_int3_that_is_not_a_probe_is_sigtrap_while_probes_exist():
    src = guest("probe:\n    nop\nstray:\n    int3\n    nop")
    m, r, _ = run_guest(src, ["probe"])
    stray = m.resolve("stray")
    assert (r.reason, r.signal_name) == ("signal", "SIGTRAP"), r.describe()
    assert r.rip == stray + 1, f"SIGTRAP rip: expected {stray + 1:#x}, got {r.rip:#x}"
    assert probe_counters(m) == dict(
        bp_traps=2, db_traps=0, emulated=1, xol_singlesteps=0, uprobe_hits=1, text_writes=1
    )


# ------------------------------------------------------------------- the XOL area

XOL_HINT = 0x7FFFFFFFE000
TRAMPOLINE_17 = bytes.fromhex("50 51 41 53 48 c7 c0 4f 01 00 00 0f 05 41 5b 59 c3")


def _uprobes_vmas(m):
    return [v for v in m.mem.vmas if v.name == "[uprobes]"]


def test_no_xol_area_until_an_insn_is_single_stepped():
    m, r, _ = run_guest(guest("probe:\n    nop"), ["probe"])
    assert m.counters.emulated == 1
    assert _uprobes_vmas(m) == [], "emulated probes need no [uprobes] page"


def test_xol_area_is_one_execute_only_page_at_the_hint():
    m, r, _ = run_guest(LOOP_GUEST.format(insn="mov rax, rbx"), ["probe"])
    vmas = _uprobes_vmas(m)
    assert len(vmas) == 1, f"[uprobes] mappings: {vmas}"
    v = vmas[0]
    assert (v.start, v.size, v.perms()) == (XOL_HINT, 4096, "--xp"), (
        f"[uprobes]: expected {XOL_HINT:#x} 4096 --xp, got {v.start:#x} {v.size} {v.perms()}"
    )
    assert f"{XOL_HINT:08x}-{XOL_HINT + 4096:08x} --xp" in m.mem.maps()
    assert m.counters.xol_singlesteps == 4


@pytest.mark.parametrize(
    "kernel,slot0",
    [
        ("6.10", b"\xcc"),
        ("6.11", TRAMPOLINE_17),
        ("6.17", TRAMPOLINE_17),
        ("6.18", TRAMPOLINE_17 + b"\xcc"),
        ("latest", TRAMPOLINE_17 + b"\xcc"),
    ],
)
def test_xol_slot_0_holds_the_profiles_uretprobe_trampoline(kernel, slot0):
    m, r, _ = run_guest(guest("probe:\n    mov rax, rbx"), ["probe"], kernel=kernel)
    got = m.mem.read(XOL_HINT, 128)
    assert got[: len(slot0)] == slot0, f"slot 0: expected {slot0.hex(' ')}, got {got[:18].hex(' ')}"
    assert got[len(slot0) :] == bytes(128 - len(slot0)), "rest of slot 0 is zero-filled"


@pytest.mark.parametrize(
    "insn,ixol",
    [
        ("mov rax, rbx", "48 89 d8"),
        ("mov rax, qword ptr [rip + val]", "48 8b 86"),  # rip-relative -> disp32(%rsi)
        ("mov rsi, qword ptr [rip + val]", "48 8b b7"),  # reg = rsi -> disp32(%rdi)
    ],
    ids=["plain", "riprel-scratch-rsi", "riprel-scratch-rdi"],
)
def test_xol_slot_1_gets_the_16_analyzed_bytes_from_the_file(insn, ixol):
    src = guest(f"probe:\n    {insn}", DATA, TAIL)
    m, r, _ = run_guest(src, ["probe"])
    exe = m.process.exe
    offset = m.mem.find_vma(m.resolve("probe")).offset_of(m.resolve("probe"))
    file16 = exe.read(offset, 16)
    want = bytes.fromhex(ixol) + file16[len(bytes.fromhex(ixol)) :]
    slot1 = m.mem.read(XOL_HINT + 128, 128)
    assert slot1[:16] == want, f"slot 1: expected {want.hex(' ')}, got {slot1[:16].hex(' ')}"
    assert slot1[16:] == bytes(112), "only 16 bytes are copied into the slot"


def test_xol_area_falls_back_below_when_the_hint_is_taken():
    m = Machine.from_asm(guest("probe:\n    mov rax, rbx"))
    m.mem.map(XOL_HINT, 4096, PROT_READ, "squatter")
    m.uprobes.register("probe", handler=lambda ctx: 0)
    r = m.run(max_insns=100_000)
    assert r.reason == "exit", r.describe()
    (v,) = _uprobes_vmas(m)
    assert v.start != XOL_HINT and v.perms() == "--xp"
    assert guest_regs(m)["rax"] == 0x1B1B1B1B1B1B1B1B
    assert probe_counters(m) == expected_counters(1, "xol")


def test_no_room_for_the_xol_area_restarts_the_probe_and_reruns_the_handlers():
    """xol_get_insn_slot() failing (no [uprobes] page can be mapped) makes pre_ssout()
    fail: handle_swbp leaves ip at the probe, the task traps again and the handlers run
    again; the insn is single-stepped once the area can be created."""
    m = Machine.from_asm(guest("probe:\n    mov rax, rbx"))
    real = m.mem.get_unmapped_area
    hits = []

    def handler(ctx):
        hits.append(ctx.regs.rip)
        m.mem.get_unmapped_area = real if len(hits) == 3 else (lambda *a, **k: None)

    m.uprobes.register("probe", handler=handler)
    r = m.run(max_insns=100_000)
    assert r.reason == "exit", r.describe()
    assert len(hits) == 3 and set(hits) == {m.resolve("probe")}, f"handler runs: {hits}"
    assert guest_regs(m)["rax"] == 0x1B1B1B1B1B1B1B1B
    assert probe_counters(m) == dict(
        bp_traps=3, db_traps=1, emulated=0, xol_singlesteps=1, uprobe_hits=3, text_writes=1
    )


# ------------------------------------------------------------------- emulation fallbacks


@pytest.mark.parametrize(
    "insn", ["call func", "push rbx", ".byte 0x41, 0x54"], ids=["call-rel32", "push-rbx", "push-r12"]
)
def test_emulation_whose_stack_write_faults_falls_back_to_xol_and_faults_there(insn):
    """emulate_push_stack() failing makes the emulation return false: the insn (the
    mangled ``call +0`` for a call) runs out of line, faults on the same stack, and the
    signal is reported at the probe like the unprobed fault."""
    src = guest(f"    mov rsp, 0x10\nprobe:\n    {insn}", tail=TAIL)
    plain, r0, _ = run_guest(src)
    m, r, _ = run_guest(src, ["probe"])
    probe = m.resolve("probe")
    assert (r.signal_name, r.rip, r.fault_addr) == ("SIGSEGV", probe, 0x8), r.describe()
    assert (r0.signal_name, r0.rip, r0.fault_addr) == (r.signal_name, r.rip, r.fault_addr)
    assert probe_counters(m) == dict(
        bp_traps=1, db_traps=0, emulated=0, xol_singlesteps=1, uprobe_hits=1, text_writes=1
    )


def test_call_fallback_that_succeeds_out_of_line_is_undone_and_restarted():
    """branch_post_xol_op(): if the mangled ``call +0`` unexpectedly succeeds (another
    thread grew the stack in between), the pushed word is dropped and the task restarts
    at the probe - the handlers run again and the call is emulated this time."""
    src = guest("probe:\n    call func\nafter_call:\n    nop", tail=TAIL)
    plain, _, _ = run_guest(src)
    m = Machine.from_asm(src)
    stack = next(v for v in m.mem.vmas if v.name == "[stack]")
    top_page = (m.regs.rsp - 8) & ~0xFFF
    hits = []

    def handler(ctx):
        hits.append(ctx.regs.rsp)
        if len(hits) == 1:  # the emulated push will fault...
            m.mem.protect(top_page, 0x1000, PROT_READ)

    def grow_stack(event):  # ...but the XOL step will not
        m.mem.protect(top_page, 0x1000, PROT_READ | PROT_WRITE)

    m.uprobes.register("probe", handler=handler)
    m.events.subscribe(grow_stack, XolStep)
    r = m.run(max_insns=100_000)
    assert r.reason == "exit", r.describe()
    assert len(hits) == 2 and hits[0] == hits[1], f"handler rsp per hit: {[hex(h) for h in hits]}"
    assert stack.start <= hits[0] < stack.end
    assert_same_state(final_state(plain), final_state(m))
    assert probe_counters(m) == dict(
        bp_traps=2, db_traps=1, emulated=1, xol_singlesteps=1, uprobe_hits=2, text_writes=1
    )
