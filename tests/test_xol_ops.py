"""arch/x86/kernel/uprobes.c's per-class operations: ``arch_uprobe_analyze_insn``
attaches ``branch_xol_ops`` / ``push_xol_ops`` / ``default_xol_ops``, and each op
changes the task's registers exactly as the kernel's does.  Pure kernel-model tests:
pt_regs, a small fake stack and a ``UprobeTask``; no machine."""

from __future__ import annotations

import pytest

from kernel_model.arch.x86.kernel import uprobes as arch
from kernel_model.arch.x86.kernel.uprobes import (
    ERESTART,
    arch_uprobe_abort_xol,
    arch_uprobe_analyze_insn,
    arch_uprobe_post_xol,
    arch_uprobe_pre_xol,
    arch_uprobe_skip_sstep,
    branch_xol_ops,
    default_xol_ops,
    push_xol_ops,
)
from kernel_model.arch.x86.ptrace import TF, PtRegs
from kernel_model.kernel.events.uprobes_types import UprobeTask
from kernel_model.mm.mm_types import GuestFault

VADDR = 0x401000
XOL = 0x7FFFFFFFE080  # slot 1 of the [uprobes] page
SP = 0x7FFFFFFF0000
STACK_LO = SP - 0x1000


class FakeStack:
    """The one mapping the ops may write: 8-byte words in [STACK_LO, SP]."""

    def __init__(self, writable=True):
        self.words, self.writable = {}, writable

    def write_u64(self, addr, value):
        if not self.writable or not STACK_LO <= addr <= SP - 8:
            raise GuestFault(addr, "write")
        self.words[addr] = value

    def read_u64(self, addr):
        return self.words[addr]


def regs(**values):
    base = dict(rip=VADDR, rsp=SP, eflags=0x202)
    base.update(values)
    return PtRegs.from_dict(base)


def analyze(hexbytes: str):
    return arch_uprobe_analyze_insn(bytes.fromhex(hexbytes), nop_policy="insn_is_nop")


def utask():
    return UprobeTask(vaddr=VADDR, xol_vaddr=XOL, xol_slot=1)


# ------------------------------------------------------------------ which ops


@pytest.mark.parametrize(
    "code, ops",
    [
        ("90", branch_xol_ops),  # nop
        ("0f 1f 44 00 00", branch_xol_ops),  # nop5
        ("eb 10", branch_xol_ops),  # jmp rel8
        ("e9 00 01 00 00", branch_xol_ops),  # jmp rel32
        ("e8 00 01 00 00", branch_xol_ops),  # call rel32
        ("74 05", branch_xol_ops),  # je rel8
        ("0f 85 00 01 00 00", branch_xol_ops),  # jne rel32
        ("55", push_xol_ops),  # push rbp
        ("41 54", push_xol_ops),  # push r12
        ("c3", default_xol_ops),  # ret
        ("48 8b 05 10 00 00 00", default_xol_ops),  # mov rax, [rip+0x10]
        ("ff d0", default_xol_ops),  # call rax
        ("9d", default_xol_ops),  # popf
        ("0f 05", default_xol_ops),  # syscall
    ],
)
def test_analyze_attaches_the_kernels_ops_object(code, ops):
    au = analyze(code)
    assert au.ops is ops, f"{code}: expected {ops!r}, got {au.ops!r}"


def test_ops_members_are_the_kernels():
    """The three tables as arch/x86/kernel/uprobes.c declares them (NULL = None)."""
    table = {
        o.name: (o.emulate, o.pre_xol, o.post_xol, o.abort) for o in (branch_xol_ops, push_xol_ops, default_xol_ops)
    }
    assert table == {
        "branch_xol_ops": (arch.branch_emulate_op, None, arch.branch_post_xol_op, None),
        "push_xol_ops": (arch.push_emulate_op, None, None, None),
        "default_xol_ops": (None, arch.default_pre_xol_op, arch.default_post_xol_op, arch.default_abort_op),
    }


# ------------------------------------------------------------------ emulate


def test_branch_emulate_call_pushes_the_return_address_and_jumps():
    au, r, mem = analyze("e8 00 01 00 00"), regs(), FakeStack()
    assert arch_uprobe_skip_sstep(au, r, mem) is True
    assert (r.rip, r.rsp, mem.words) == (VADDR + 5 + 0x100, SP - 8, {SP - 8: VADDR + 5})


def test_branch_emulate_call_with_an_unwritable_stack_falls_back_to_xol():
    au, r, mem = analyze("e8 00 01 00 00"), regs(), FakeStack(writable=False)
    assert arch_uprobe_skip_sstep(au, r, mem) is False
    assert (r.rip, r.rsp) == (VADDR, SP), "nothing changed"


@pytest.mark.parametrize("eflags, rip", [(0x202, VADDR + 2), (0x242, VADDR + 2 + 5)])
def test_branch_emulate_jcc_follows_the_flags(eflags, rip):
    au, r = analyze("74 05"), regs(eflags=eflags)  # je +5
    assert arch_uprobe_skip_sstep(au, r, FakeStack()) is True
    assert r.rip == rip, f"eflags {eflags:#x}: expected rip {rip:#x}, got {r.rip:#x}"


def test_push_emulate_pushes_the_register():
    au, r, mem = analyze("41 54"), regs(r12=0x1122334455667788), FakeStack()
    assert arch_uprobe_skip_sstep(au, r, mem) is True
    assert (r.rip, r.rsp, mem.words) == (VADDR + 2, SP - 8, {SP - 8: 0x1122334455667788})


def test_default_class_has_no_emulation():
    au, r = analyze("c3"), regs()
    assert arch_uprobe_skip_sstep(au, r, FakeStack()) is False
    assert r.rip == VADDR


# ------------------------------------------------------------------ pre_xol / post_xol / abort


def test_default_pre_xol_loads_the_riprel_scratch_register_and_sets_tf():
    au, r, ut = analyze("48 8b 05 10 00 00 00"), regs(rsi=0xAAAA), utask()
    assert au.scratch == "rsi"
    assert arch_uprobe_pre_xol(au, r, ut) == 0
    assert (r.rip, r.rsi, r.eflags & TF) == (XOL, VADDR + 7, TF)
    assert (ut.autask.saved_scratch_register, ut.autask.saved_tf) == (0xAAAA, False)


def test_default_post_xol_moves_rip_back_and_restores_scratch():
    au, r, ut = analyze("48 8b 05 10 00 00 00"), regs(rsi=0xAAAA), utask()
    arch_uprobe_pre_xol(au, r, ut)
    r.rip = XOL + 7  # the step ran in the slot
    assert arch_uprobe_post_xol(au, r, FakeStack(), ut) == (0, False)
    assert (r.rip, r.rsi, r.eflags & TF) == (VADDR + 7, 0xAAAA, 0)


def test_default_post_xol_fix_call_replaces_the_slot_return_address():
    au, r, ut, mem = analyze("ff d0"), regs(rax=0x402000), utask(), FakeStack()
    arch_uprobe_pre_xol(au, r, ut)
    r.rip, r.rsp = 0x402000, SP - 8  # call *%rax ran in the slot
    mem.words[SP - 8] = XOL + 2
    assert arch_uprobe_post_xol(au, r, mem, ut) == (0, False)
    assert (r.rip, r.rsp, mem.words) == (0x402000, SP - 8, {SP - 8: VADDR + 2})


def test_branch_post_xol_undoes_the_call_and_restarts():
    """branch_post_xol_op returns -ERESTART: rip back at the probe, no SIGTRAP even with
    the task's own TF set."""
    au, r, ut = analyze("e8 00 01 00 00"), regs(eflags=0x202 | TF), utask()
    arch_uprobe_pre_xol(au, r, ut)
    r.rip, r.rsp = XOL + 5, SP - 8  # the mangled `call +0` ran
    assert arch.branch_post_xol_op(au, r, FakeStack(), ut) == -ERESTART
    r.rsp = SP - 8
    assert arch_uprobe_post_xol(au, r, FakeStack(), ut) == (0, False)
    assert (r.rip, r.rsp, r.eflags & TF) == (VADDR, SP, TF)


def test_default_abort_restores_scratch_and_reports_at_the_probe():
    au, r, ut = analyze("48 8b 05 10 00 00 00"), regs(rsi=0xAAAA), utask()
    arch_uprobe_pre_xol(au, r, ut)
    arch_uprobe_abort_xol(au, r, ut)
    assert (r.rip, r.rsi, r.eflags & TF) == (VADDR, 0xAAAA, 0)
