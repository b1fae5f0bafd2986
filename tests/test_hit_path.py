"""The probe hit path built for cost: lazy registers, write-back of what changed, reused
consumer contexts, host-memory reads, the cached analysis - each still exactly the
int3 trap the guest and the model see (byte, registers, counters, signals)."""

from __future__ import annotations

import pytest
from uprobe_helpers import guest, guest_regs

from emu import Machine
from kernel_model.arch.x86.kernel import uprobes as arch_x86
from kernel_model.arch.x86.lib import insn as insn_x86
from kernel_model.arch.x86.ptrace import GPR_NAMES, TF, TF_ONLY, PtRegs

LOOP = guest("""
    mov r12d, 3
again:
probe:
    {insn}
    dec r12d
    jnz again
""")


def _spy(monkeypatch, rf, attr: str, calls: list) -> None:
    fn = getattr(rf, attr)

    def wrapped(*a):
        calls.append(attr)
        return fn(*a)

    monkeypatch.setattr(rf, attr, wrapped)


# ----------------------------------------------------------------------------- lazy registers


def _trap_regs(rip=0x1000, tf=0, gprs=None, extra=(0x202, 0, 0)):
    loads = []

    class Source:
        @staticmethod
        def read_window():
            loads.append("gprs")
            return list(gprs if gprs is not None else range(len(GPR_NAMES)))

        @staticmethod
        def read_extra():
            loads.append("extra")
            return list(extra)

    return PtRegs.at_trap(rip, tf, Source), loads


def test_a_trap_snapshot_reads_the_general_registers_only_when_asked():
    regs, loads = _trap_regs()
    assert (regs.rip, regs.tf, loads) == (0x1000, 0, []), "rip and TF need no read"
    assert regs.rbx == GPR_NAMES.index("rbx") and loads == ["gprs"], f"one read on first use, loads {loads}"
    assert regs.r15 == GPR_NAMES.index("r15") and loads == ["gprs"], f"read once, loads {loads}"


def test_a_trap_snapshot_reads_eflags_and_the_bases_apart_from_the_rest():
    regs, loads = _trap_regs(tf=0x100, extra=(0x346, 0x7000, 0x8000))
    assert (regs.eflags, regs.fs_base, regs.gs_base) == (0x346, 0x7000, 0x8000), regs
    assert loads == ["extra"], f"the general registers were not needed: {loads}"


def test_a_trap_snapshot_knows_tf_before_eflags_and_follows_a_write_of_it():
    regs, loads = _trap_regs(tf=0x100, extra=(0x302, 0, 0))
    assert regs.tf == 0x100 and loads == [], f"tf {regs.tf:#x} loads {loads}"
    regs.eflags = 0x202
    assert regs.tf == 0 and regs.changed() == {GPR_NAMES.index("eflags"): 0x202}, regs.changed()


def test_tf_set_alone_is_written_as_that_bit_without_reading_eflags():
    regs, loads = _trap_regs(tf=0, extra=(0x246, 0, 0))
    regs.tf = TF
    assert regs.changed() == {TF_ONLY: TF} and loads == [], f"changed {regs.changed()}, loads {loads}"


def test_tf_set_before_eflags_is_read_shows_in_eflags_and_is_written_with_it():
    regs, loads = _trap_regs(tf=0, extra=(0x246, 0, 0))
    regs.tf = TF
    assert regs.eflags == 0x346 and loads == ["extra"], f"eflags {regs.eflags:#x}"
    assert regs.changed() == {GPR_NAMES.index("eflags"): 0x346}, regs.changed()


def test_tf_cleared_back_leaves_nothing_to_write():
    regs, _ = _trap_regs(tf=TF, extra=(0x346, 0, 0))
    regs.tf = 0
    regs.tf = TF
    assert regs.changed() == {}, regs.changed()


def test_a_trap_snapshot_keeps_a_rip_set_before_the_read():
    regs, _ = _trap_regs(gprs=[7] * len(GPR_NAMES))
    regs.rip = 0x2000
    assert regs.rax == 7 and regs.rip == 0x2000, f"rip {regs.rip:#x} after the read"
    assert regs.changed() == {GPR_NAMES.index("rip"): 0x2000}, regs.changed()


def test_a_trap_snapshot_with_rip_set_back_has_nothing_to_write():
    regs, loads = _trap_regs()
    regs.rip = 0xFFF
    regs.rip = 0x1000
    assert regs.changed() == {} and loads == [], f"changed {regs.changed()}, loads {loads}"


def test_a_rip_set_out_of_range_is_written_back_cut_to_64_bits():
    regs, _ = _trap_regs()
    regs.rip = (1 << 64) + 0x1000 + 5
    assert regs.changed() == {GPR_NAMES.index("rip"): 0x1005}, regs.changed()


def test_a_written_register_is_listed_once_with_its_new_value():
    regs, _ = _trap_regs(gprs=[0] * len(GPR_NAMES))
    regs.rsp = 0x7FF0
    regs.rdi = 0
    assert regs.changed() == {GPR_NAMES.index("rsp"): 0x7FF0}, "rdi was set to what it was"


# ----------------------------------------------------------------------------- syscall entry


def _at_syscall(rip=0x401000, eflags=0x10346, rax=39, rcx=0x1111, r11=0x2222):
    v = [0] * len(GPR_NAMES)
    for name, value in (("rax", rax), ("rcx", rcx), ("r11", r11), ("rip", rip), ("eflags", eflags)):
        v[GPR_NAMES.index(name)] = value
    return PtRegs.at_syscall(v)


def test_a_syscall_snapshot_holds_what_the_hardware_put_in_rcx_and_r11():
    regs = _at_syscall()
    got = (regs.rcx, regs.r11, regs.rip, regs.orig_rax, regs.rax)
    assert got == (0x401002, 0x346, 0x401002, 39, 39), (
        f"rcx r11 rip orig_rax rax: {[hex(x) for x in got]}, want rcx=rip=next, r11=rflags without RF"
    )


def test_a_syscall_snapshot_lists_rcx_r11_and_rip_as_changed():
    want = {GPR_NAMES.index("rcx"): 0x401002, GPR_NAMES.index("r11"): 0x346, GPR_NAMES.index("rip"): 0x401002}
    assert _at_syscall().changed() == want, _at_syscall().changed()


def test_a_syscall_snapshot_leaves_out_rcx_and_r11_already_equal():
    regs = _at_syscall(rcx=0x401002, r11=0x346)
    assert regs.changed() == {GPR_NAMES.index("rip"): 0x401002}, regs.changed()


def test_a_syscall_at_the_top_of_the_address_space_wraps_rip():
    regs = _at_syscall(rip=0xFFFFFFFFFFFFFFFF)
    assert (regs.rip, regs.rcx) == (1, 1), (hex(regs.rip), hex(regs.rcx))


def test_an_emulated_nop_hit_calls_unicorn_for_no_register(monkeypatch):
    m = Machine.from_asm(LOOP.format(insn="nop"))
    m.uprobes.register("probe", handler=lambda ctx: 0)
    calls = []
    for attr in ("read_all", "read_window", "read_extra", "_read", "_write"):
        _spy(monkeypatch, m.regfile, attr, calls)
    hits = []
    m.uprobes.register("probe", handler=lambda ctx: hits.append(calls.copy()) or calls.clear())
    r = m.run(max_insns=100_000)
    assert r.reason == "exit", r.describe()
    assert m.regfile.window is not None, "the CPU state window is available on this build"
    assert hits == [[]] * 3, f"register calls up to each handler: {hits}"


def test_a_handler_reading_a_register_gets_the_guests_value():
    m = Machine.from_asm(LOOP.format(insn="nop"))
    seen = []
    m.uprobes.register("probe", handler=lambda ctx: seen.append((ctx.regs.rbx, ctx.regs.r12)))
    m.run(max_insns=100_000)
    assert seen == [(0x1B1B1B1B1B1B1B1B, n) for n in (3, 2, 1)], [tuple(map(hex, s)) for s in seen]


def test_a_handler_writing_a_register_reaches_the_guest():
    m = Machine.from_asm(LOOP.format(insn="nop"))

    def set_rbx(ctx):
        ctx.regs.rbx = ctx.regs.r12 * 0x100

    m.uprobes.register("probe", handler=set_rbx)
    r = m.run(max_insns=100_000)
    assert r.reason == "exit", r.describe()
    assert guest_regs(m)["rbx"] == 0x100, f"rbx {guest_regs(m)['rbx']:#x}, expected the last hit's 0x100"


@pytest.mark.parametrize("insn", ["nop", "push rbx", "mov ecx, 5"], ids=["emulated-nop", "emulated-push", "xol"])
def test_a_handler_setting_a_flag_reaches_the_guest(insn):
    """eflags set alone (no general register written) is written back too: CF set by
    the handler is what the guest's setc reads after the probed instruction."""
    m = Machine.from_asm(f"""
_start:
    xor eax, eax
probe:
    {insn}
    setc bl
    movzx edi, bl
    mov eax, 231
    syscall
""")

    def set_cf(ctx):
        ctx.regs.eflags |= 1

    m.uprobes.register("probe", handler=set_cf)
    r = m.run(max_insns=10_000)
    assert (r.reason, r.exit_code) == ("exit", 1), f"CF after the hit: {r.describe()}, expected exit status 1"


# ----------------------------------------------------------------------------- reuse


def test_a_consumer_gets_one_context_reused_with_each_hits_registers():
    m = Machine.from_asm(LOOP.format(insn="nop"))
    seen, ctxs = [], []

    def keep(ctx):
        ctxs.append(ctx)
        seen.append((ctx.regs.r12, ctx.cookie))

    m.uprobes.register("probe", handler=keep)
    m.run(max_insns=100_000)
    assert all(c is ctxs[0] for c in ctxs) and len(ctxs) == 3, f"{len(set(map(id, ctxs)))} contexts"
    assert seen == [(3, 0), (2, 0), (1, 0)], seen


def test_a_reused_context_starts_each_hit_with_a_zero_cookie():
    m = Machine.from_asm(LOOP.format(insn="nop"))
    cookies = []

    def session(ctx):
        cookies.append(ctx.cookie)
        ctx.cookie = 0xC0DE

    m.uprobes.register("probe", handler=session)
    m.run(max_insns=100_000)
    assert cookies == [0, 0, 0], cookies


def test_the_analysis_is_one_object_for_every_page_offset_that_cannot_cross():
    analysis_key = insn_x86.analysis_key
    key = analysis_key(b"\x90", "insn_is_nop", None, 0x401000)
    assert key == analysis_key(b"\x90", "insn_is_nop", None, 0x401FF0), "offset 0xff0 leaves 16 bytes"
    assert key != analysis_key(b"\x90", "insn_is_nop", None, 0x401FF1), "offset 0xff1 may cross"
    a = arch_x86.arch_uprobe_analyze_insn(b"\x90", vaddr=0x401000)
    b = arch_x86.arch_uprobe_analyze_insn(b"\x90", vaddr=0x7F0123456789)
    assert a is b and a.ops is arch_x86.branch_xol_ops, (a, b)


# ----------------------------------------------------------------------------- still an int3


def test_the_guest_reads_the_int3_byte_at_a_probed_address():
    src = guest("""
    mov al, byte ptr [rip + probe]
    movzx r13d, al
probe:
    nop
""")
    m = Machine.from_asm(src)
    m.uprobes.register("probe", handler=lambda ctx: 0)
    m.run(max_insns=100_000)
    assert guest_regs(m)["r13"] == 0xCC, f"r13 {guest_regs(m)['r13']:#x}"


def test_a_guests_own_int3_is_a_sigtrap_after_the_byte():
    m = Machine.from_asm(
        guest("""
    nop
probe:
    int3
""")
    )
    m.uprobes.register("_start", handler=lambda ctx: 0)  # the mm has uprobes
    r = m.run(max_insns=100_000)
    assert (r.reason, r.signal, r.rip) == ("signal", 5, m.resolve("probe") + 1), r.describe()
    assert (m.counters.bp_traps, m.counters.uprobe_hits) == (2, 1), (
        f"bp_traps {m.counters.bp_traps}, uprobe_hits {m.counters.uprobe_hits}"
    )


def test_a_guest_that_restores_the_byte_runs_its_instruction_without_a_trap():
    """Self-modifying code over a probe: once the guest writes its nop back (through a
    writable alias made with mprotect), the next pass executes it - no hit, no trap."""
    m = Machine.from_asm(
        guest("""
    mov r12d, 2
    lea rdi, [rip + probe]
    and rdi, -4096
    mov esi, 4096
    mov edx, 7
    mov eax, 10
    syscall
again:
probe:
    nop
    mov byte ptr [rip + probe], 0x90
    dec r12d
    jnz again
""")
    )
    m.uprobes.register("probe", handler=lambda ctx: 0)
    r = m.run(max_insns=100_000)
    assert r.reason == "exit", r.describe()
    assert (m.counters.bp_traps, m.counters.uprobe_hits) == (1, 1), (
        f"bp_traps {m.counters.bp_traps}, uprobe_hits {m.counters.uprobe_hits}"
    )


def test_a_jump_into_the_middle_of_a_block_still_traps():
    m = Machine.from_asm(
        guest("""
    mov r12d, 2
    jmp probe
again:
    nop
    nop
probe:
    nop
    dec r12d
    jnz again
""")
    )
    m.uprobes.register("probe", handler=lambda ctx: 0)
    r = m.run(max_insns=100_000)
    assert r.reason == "exit", r.describe()
    assert (m.counters.bp_traps, m.counters.uprobe_hits, m.counters.emulated) == (2, 2, 2), (
        f"bp {m.counters.bp_traps} hits {m.counters.uprobe_hits} emulated {m.counters.emulated}"
    )


@pytest.mark.parametrize("insn, how", [("nop", "emulated"), ("mov rax, rbx", "xol")])
def test_a_probe_on_a_tf_stepped_instruction_sends_sigtrap_after_it(insn, how):
    """TF set (popf) before a probed instruction: the kernel's SIGTRAP after the
    emulated or single-stepped instruction, reported at the next one."""
    m = Machine.from_asm(
        guest(f"""
    pushfq
    or qword ptr [rsp], 0x100
    popfq
probe:
    {insn}
after:
    nop
""")
    )
    m.uprobes.register("probe", handler=lambda ctx: 0)
    r = m.run(max_insns=100_000)
    assert (r.reason, r.signal, r.rip) == ("signal", 5, m.resolve("after")), r.describe()
    assert m.counters.uprobe_hits == 1 and getattr(m.counters, how if how == "emulated" else "xol_singlesteps") == 1, (
        m.counters.snapshot()
    )


def test_a_forked_child_traps_on_its_own_cpu_and_counts_its_hits():
    m = Machine.from_asm(
        guest("""
    mov eax, 57
    syscall
    mov r13, rax
probe:
    nop
    test r13, r13
    jz done
    mov rdi, -1
    xor esi, esi
    xor edx, edx
    xor r10d, r10d
    mov eax, 61
    syscall
""")
    )
    pids = []
    m.uprobes.register("probe", handler=lambda ctx: pids.append(ctx.task.process.pid))
    r = m.run(max_insns=200_000)
    assert r.reason == "exit", r.describe()
    assert sorted(pids) == sorted({m.main_process.pid, *pids}) and len(pids) == 2, f"hits in pids {pids}"
    assert m.counters.uprobe_hits == 2, m.counters.uprobe_hits


def test_a_released_address_space_reads_no_registers():
    """The register file calls Unicorn with a handle taken at each call: once the
    address space is released (its engine closed) a read is an error, not a read of
    freed memory."""
    from unicorn import UcError

    m = Machine.from_guest("hello")
    rf = m.regfile
    m.mem.release()
    with pytest.raises(UcError, match="UC_ERR_HANDLE"):
        rf.read_all()
    with pytest.raises(UcError, match="UC_ERR_HANDLE"):
        rf.trap_regs(-1)
    with pytest.raises(UcError, match="UC_ERR_HANDLE"):
        rf.write({0: 1})


def test_trap_registers_kept_past_their_engine_are_an_error_not_freed_memory():
    """A context's regs are the CPU state itself during the trap; one kept after the
    address space is released reads and writes nothing."""
    from unicorn import UcError

    m = Machine.from_asm(LOOP.format(insn="nop"))
    kept = []
    m.uprobes.register("probe", handler=lambda ctx: kept.append(ctx.regs))
    m.run(max_insns=100_000)
    regs = kept[-1]
    assert regs.r12 == m.regs.r12, "kept past the trap, it reads the CPU as it is now"
    m.mem.release()
    with pytest.raises(UcError, match="UC_ERR_HANDLE"):
        regs.r12  # noqa: B018 - the read itself must raise
    with pytest.raises(UcError, match="UC_ERR_HANDLE"):
        regs.rax = 5


def test_trap_registers_are_the_cpu_state_during_the_trap():
    """A register a handler writes is what the machine's register view reads within
    the same trap; a copy taken before is a snapshot."""
    m = Machine.from_asm(LOOP.format(insn="nop"))
    seen = []

    def handler(ctx):
        before = ctx.regs.copy()
        ctx.regs.rbx = 0x77
        seen.append((before.rbx, ctx.regs.rbx, m.regs.rbx))

    m.uprobes.register("probe", handler=handler)
    m.run(max_insns=100_000)
    want = [(0x1B1B1B1B1B1B1B1B, 0x77, 0x77)] + [(0x77, 0x77, 0x77)] * 2
    assert seen == want, [tuple(map(hex, s)) for s in seen]
    assert guest_regs(m)["rbx"] == 0x77, hex(guest_regs(m)["rbx"])


@pytest.mark.parametrize("change", ["map", "grow", "protect", "unmap"])
def test_every_change_of_the_vmas_moves_the_generation_the_hit_path_checks(change):
    """handle_swbp's per-mm address -> uprobe answers are dropped when ``vma_gen``
    moves, so every change of the VMA list must move it."""
    from kernel_model.mm.mm_types import PROT_READ, PROT_WRITE

    m = Machine.from_asm(LOOP.format(insn="nop"))
    mem = m.mem
    base = 0x7000_0000_0000
    mem.map(base, 0x2000, PROT_READ | PROT_WRITE, "[test]")
    before = mem.vma_gen
    if change == "map":
        mem.map(base + 0x10000, 0x1000, PROT_READ, "[test2]")
    elif change == "grow":
        mem.map(base + 0x2000, 0x1000, PROT_READ | PROT_WRITE, "[test]")
    elif change == "protect":
        mem.protect(base, 0x1000, PROT_READ)
    else:
        mem.unmap(base, 0x1000)
    assert mem.vma_gen > before, f"{change}: vma_gen stayed {before}"


def test_every_hit_fills_the_one_trap_registers_object_afresh():
    """The trap's pt_regs are one object per register file, filled at each entry: a
    hit sees its own flags (not those the previous hit's handler set), and what a
    handler sets still reaches the guest at every hit."""
    m = Machine.from_asm(
        guest("""
    mov r12d, 3
    xor r13d, r13d
again:
    clc
probe:
    nop
    adc r13, 0
    dec r12d
    jnz again
""")
    )
    seen, objs = [], []

    def set_cf(ctx):
        objs.append(ctx.regs)
        seen.append(ctx.regs.eflags & 1)
        ctx.regs.eflags |= 1

    m.uprobes.register("probe", handler=set_cf)
    r = m.run(max_insns=100_000)
    assert r.reason == "exit", r.describe()
    assert seen == [0, 0, 0], f"CF seen at each hit (clc runs before it): {seen}"
    assert guest_regs(m)["r13"] == 3, f"adc after each hit added CF: r13 = {guest_regs(m)['r13']}"
    assert all(o is objs[0] for o in objs), f"{len(set(map(id, objs)))} register objects for 3 hits"
