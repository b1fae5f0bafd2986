"""The CPU state read and written in place (emu.engine.regfile): exactly what Unicorn's register
API reads and writes, wherever the machine uses it - at traps, in the syscall hook, and
in the fallback where the layout is not recognised."""

from __future__ import annotations

import struct

import pytest
from unicorn import UC_ARCH_X86, UC_MODE_64, Uc
from unicorn import x86_const as X
from uprobe_helpers import guest, guest_regs

from emu import Machine
from emu.engine import regfile
from emu.engine.regfile import RegisterFile, cpu_window_layout
from kernel_model.arch.x86.ptrace import GPR_NAMES

_IDS = {n: getattr(X, "UC_X86_REG_" + n.upper()) for n in GPR_NAMES}


def _fresh_uc() -> Uc:
    uc = Uc(UC_ARCH_X86, UC_MODE_64)
    uc.mem_map(0x1000, 0x1000)
    return uc


def _distinct(salt: int) -> dict[str, int]:
    return {
        n: (0x1111_0000_0000_0000 * (i % 15 + 1) + salt + i) & 0xFFFF_FFFF_FFFF_FFFF
        for i, n in enumerate(GPR_NAMES[:17])
    }


def test_the_layout_is_recognised_on_this_build():
    assert cpu_window_layout() is not None, "CPUX86State not found behind the uc_struct"


def _fake_memory(monkeypatch, uc, block):
    """/proc/self/mem as the search sees it: the uc_struct holds one pointer (at 8), to
    the bytes ``block()`` gives (made afresh at each read, as memory is read); nothing
    else is readable."""
    base, target = regfile._uch(uc), 0x7F00_0000_0000
    head = bytes(8) + target.to_bytes(8, "little") + bytes(0x2000 - 16)

    def pread(_fd, n, at):
        if at == base:
            return head[:n]
        if target <= at < target + 0x20000:
            return block()[at - target : at - target + n]
        raise OSError(5, "EIO")

    monkeypatch.setattr(regfile.os, "pread", pread)


def _pattern_bytes(salt: int) -> bytes:
    return struct.pack("<17Q", *(regfile._pattern(k) ^ salt for k in range(17)))


def _live(uc):
    """The CPU's registers as they are now, in QEMU's order: the copy that follows the API."""
    return lambda: struct.pack(
        "<17Q", *(uc.reg_read(getattr(X, "UC_X86_REG_" + n.upper())) for n in regfile._QEMU_ORDER[:17])
    )


def _search(uc, *parts) -> dict:
    """_candidates over one block made of ``parts``: bytes stay, callables are read live."""

    def block():
        return b"".join(p() if callable(p) else p for p in parts)

    with pytest.MonkeyPatch.context() as mp:
        _fake_memory(mp, uc, block)
        return regfile._candidates(0, uc, 0)


def test_the_search_finds_its_instances_pattern_beside_another_instances():
    """The two scratch CPUs may lie within one block read: each is found by its own
    pattern, which the other's does not make ambiguous."""
    uc = _fresh_uc()
    got = _search(uc, bytes(0x40), _live(uc), bytes(0x300), _pattern_bytes(regfile._SECOND_SALT))
    assert got == {8: 0x40}, got


@pytest.mark.parametrize("before", [True, False], ids=["copy before the CPU", "copy after it"])
def test_a_copy_of_the_pattern_that_does_not_follow_the_registers_is_not_the_cpu(before):
    """The pattern's own bytes (Python's object, in the same heap as the CPU) or a freed
    engine's CPU hold it too, but stay as they are when the registers change: the
    search keeps the place that changed with them."""
    uc = _fresh_uc()
    stale = _pattern_bytes(0)
    parts = (stale, bytes(0x40), _live(uc)) if before else (bytes(0x40), _live(uc), bytes(0x300), stale)
    got = _search(uc, *parts)
    assert got == {8: len(stale) + 0x40 if before else 0x40}, got


def test_a_pattern_that_never_follows_the_registers_is_no_cpu():
    uc = _fresh_uc()
    got = _search(uc, bytes(0x40), _pattern_bytes(0))
    assert got == {}, got


def test_two_places_that_both_follow_the_registers_are_ambiguous():
    uc = _fresh_uc()
    got = _search(uc, bytes(0x40), _live(uc), bytes(0x300), _live(uc))
    assert got == {}, got


def test_the_two_scratch_instances_get_patterns_of_their_own(monkeypatch):
    salts = []
    monkeypatch.setattr(regfile, "_candidates", lambda fd, uc, salt: salts.append(salt) or {})
    regfile._search_layout(-1)
    assert len(salts) == 2 and salts[0] != salts[1], salts


@pytest.mark.parametrize("salt", [0, 0x0F0F_0F0F_0F0F_0F0F, 0x8000_0000_0000_0001])
def test_the_window_reads_what_the_api_wrote(salt):
    uc = _fresh_uc()
    rf = RegisterFile(uc)
    want = _distinct(salt)
    for n, v in want.items():
        uc.reg_write(_IDS[n], v)
    got = dict(zip(GPR_NAMES, rf.read_window()))
    diff = {n: (hex(want[n]), hex(got[n])) for n in want if got[n] != want[n]}
    assert not diff, f"register: (api, window) {diff}"


def test_a_write_through_the_window_is_what_the_api_reads():
    uc = _fresh_uc()
    rf = RegisterFile(uc)
    want = _distinct(0x42)
    rf.write({GPR_NAMES.index(n): v for n, v in want.items() if n != "rip"})
    diff = {n: (hex(v), hex(uc.reg_read(_IDS[n]))) for n, v in want.items() if n != "rip" and uc.reg_read(_IDS[n]) != v}
    assert not diff, f"register: (written, api) {diff}"


def test_eflags_and_the_bases_go_through_unicorn():
    uc = _fresh_uc()
    rf = RegisterFile(uc)
    rf.write({GPR_NAMES.index("eflags"): 0x247, GPR_NAMES.index("fs_base"): 0x7000_1000})
    assert (uc.reg_read(X.UC_X86_REG_EFLAGS), uc.reg_read(X.UC_X86_REG_FS_BASE)) == (0x247, 0x7000_1000)
    assert rf.read_extra()[:2] == [0x247, 0x7000_1000], rf.read_extra()


@pytest.mark.parametrize("flags", [0x302, 0x202, 0x3C7])
def test_the_trap_flag_read_in_place_is_the_apis(flags):
    uc = _fresh_uc()
    rf = RegisterFile(uc)
    uc.reg_write(X.UC_X86_REG_EFLAGS, flags)
    uc.reg_write(X.UC_X86_REG_RIP, 0x1234)
    regs = rf.trap_regs(-1)
    assert (regs.rip, regs.tf) == (0x1234, flags & 0x100), (hex(regs.rip), regs.tf, hex(flags))
    assert regs.eflags == flags, f"eflags {regs.eflags:#x}, api {flags:#x}"


@pytest.mark.parametrize("use_window", [True, False], ids=["window", "native-batch"])
def test_both_paths_read_every_register_the_same(use_window):
    uc = _fresh_uc()
    rf = RegisterFile(uc, use_window=use_window)
    want = _distinct(7)
    for n, v in want.items():
        uc.reg_write(_IDS[n], v)
    uc.reg_write(X.UC_X86_REG_EFLAGS, 0x246)
    got = dict(zip(GPR_NAMES, rf.read_all()))
    assert (rf.window is not None) == use_window
    assert {n: got[n] for n in want} == want and got["eflags"] == 0x246, got


PROGRAM = guest("""
    mov rax, 0x1111
    mov rbx, 0x2222
    mov r9, 0x9999
probe:
    push rbx
    pop rcx
    mov r8, rax
""")


@pytest.mark.parametrize("use_window", [True, False], ids=["window", "native-batch"])
def test_a_handlers_writes_reach_the_guest_on_both_paths(monkeypatch, use_window):
    """A uprobe handler sets general registers (window stores at the trap) and the
    run ends with the same registers either way."""
    if not use_window:
        monkeypatch.setattr("emu.engine.regfile.cpu_window_layout", lambda: None)
    m = Machine.from_asm(PROGRAM)
    assert (m.regfile.window is not None) == use_window

    def handler(ctx):
        ctx.regs.rax = 0xAAAA
        ctx.regs.rbx = 0xBBBB

    m.uprobes.register("probe", handler=handler)
    r = m.run(max_insns=10_000)
    assert r.reason == "exit", r.describe()
    regs = guest_regs(m)
    assert (regs["rcx"], regs["r8"], regs["r9"]) == (0xBBBB, 0xAAAA, 0x9999), {
        n: hex(regs[n]) for n in ("rcx", "r8", "r9")
    }


SYSCALLS = guest("""
    mov r12, 5
again:
    mov eax, 39
    syscall
    mov r13, rcx
    mov r14, r11
    dec r12
    jnz again
""")


@pytest.mark.parametrize("use_window", [True, False], ids=["window", "native-batch"])
def test_the_syscall_return_writes_rip_rcx_and_r11_on_both_paths(monkeypatch, use_window):
    if not use_window:
        monkeypatch.setattr("emu.engine.regfile.cpu_window_layout", lambda: None)
    m = Machine.from_asm(SYSCALLS)
    r = m.run(max_insns=10_000)
    assert r.reason == "exit", r.describe()
    regs = guest_regs(m)
    after = m.resolve("again") + 7  # mov eax (5) + syscall (2)
    assert regs["r13"] == after, f"rcx after syscall {regs['r13']:#x}, expected {after:#x}"
    assert regs["r14"] & 0x202 == 0x202, f"r11 = rflags {regs['r14']:#x}"
    assert m.counters.syscalls[39] == 5, m.counters.syscalls
