"""Optimized uprobes: nop5 (6.18-7.2) and nop10 (7.3+) sites become calls into the
[uprobes-trampoline] page and enter the kernel through the uprobe syscall (336)."""

from __future__ import annotations

import errno

import pytest

from emu import Machine, RegistrationError
from kernel_model.arch.x86.kernel.uprobes_optimize import UPROBE_TRAMPOLINE_NOP5, UPROBE_TRAMPOLINE_NOP10
from kernel_model.kernel.events.uprobes import UPROBE_HANDLER_REMOVE
from kernel_model.trace.events import TextPoke

NOP5 = ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00"
NOP10 = ".byte 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00"

# (profile, site bytes, optimized prefix, trampoline, call offset, site length)
DESIGNS = {
    "nop5@6.18": ("6.18", NOP5, b"\xe8", UPROBE_TRAMPOLINE_NOP5, 0, 5),
    "nop5@7.1": ("7.1", NOP5, b"\xe8", UPROBE_TRAMPOLINE_NOP5, 0, 5),
    "nop5@7.2": ("7.2", NOP5, b"\xe8", UPROBE_TRAMPOLINE_NOP5, 0, 5),
    "nop10@7.3": ("7.3", NOP10, bytes.fromhex("488d642480e8"), UPROBE_TRAMPOLINE_NOP10, 5, 10),
}


def loop_guest(site: str, calls: int = 4) -> str:
    return f"""
_start:
    mov rbx, {calls}
again:
    call func
    dec rbx
    jnz again
    mov eax, 231
    xor edi, edi
    syscall
func:
    push rbp
    mov rbp, rsp
site:
    {site}
after:
    pop rbp
    ret
"""


def machine(design: str, calls: int = 4, **kw):
    kernel, site, *_ = DESIGNS[design]
    return Machine.from_asm(loop_guest(site, calls), kernel=kernel, **kw)


def rel32_target(m, vaddr, call_off):
    call = vaddr + call_off
    rel = int.from_bytes(m.mem.read(call + 1, 4), "little", signed=True)
    return call + 5 + rel


@pytest.mark.parametrize("design", list(DESIGNS))
def test_first_hit_rewrites_the_site_into_a_call_to_the_trampoline(design):
    kernel, _, prefix, tramp_bytes, call_off, size = DESIGNS[design]
    m = machine(design)
    m.uprobes.register("site", handler=lambda c: None)
    site = m.resolve("site")
    assert m.mem.read(site, 1) == b"\xcc", "attach installs int3, not the call"
    m.run()
    code = m.mem.read(site, size)
    assert code.startswith(prefix), f"site bytes {code.hex()}"
    tramp = rel32_target(m, site, call_off)
    vma = m.mem.find_vma(tramp)
    assert (vma.name, vma.perms(), vma.size, vma.start) == ("[uprobes-trampoline]", "r-xp", 4096, tramp)
    assert m.mem.read(tramp, len(tramp_bytes)) == tramp_bytes


@pytest.mark.parametrize("design", list(DESIGNS))
def test_optimized_hits_are_one_syscall_and_no_trap(design):
    m = machine(design, calls=5)
    hits = []
    m.uprobes.register("site", handler=lambda c: hits.append(c.regs.rip))
    m.run()
    c = m.counters
    assert hits == [m.resolve("site")] * 5
    assert (c.bp_traps, c.emulated, c.optimized) == (1, 1, 1), "first hit: int3 + emulated nop"
    assert c.syscalls[336] == c.uprobe_syscalls == 4, "then one uprobe syscall per hit"
    assert c.db_traps == 0 and c.xol_singlesteps == 0


@pytest.mark.parametrize("design", list(DESIGNS))
def test_optimize_uses_the_three_step_int3_protocol(design):
    m = machine(design)
    writes = []
    m.events.subscribe(lambda e: writes.append((e.vaddr, e.data)), TextPoke)
    m.uprobes.register("site", handler=lambda c: None)
    m.run()
    site = m.resolve("site")
    _, _, prefix, _, _, size = DESIGNS[design]
    assert [w[0] for w in writes] == [site, site + 1, site]
    assert writes[0][1] == b"\xcc" and writes[2][1] == prefix[:1]
    assert len(writes[1][1]) == size - 1
    assert m.counters.text_writes == 3


@pytest.mark.parametrize("design", list(DESIGNS))
def test_detach_restores_a_nop_and_keeps_the_trampoline(design):
    kernel, site_src, _, _, call_off, size = DESIGNS[design]
    m = machine(design)
    p = m.uprobes.register("site", handler=lambda c: None)
    m.run()
    site = m.resolve("site")
    tramp = rel32_target(m, site, call_off)
    m.uprobes.unregister(p)
    code = m.mem.read(site, size)
    if size == 5:
        assert code == bytes.fromhex("0f1f440000")
    else:
        # the call bytes stay as the nop's operands: still a valid 10-byte nop
        assert code[:5] == bytes.fromhex("662e0f1f84") and code[5] == 0xE8
    assert m.mem.find_vma(tramp).name == "[uprobes-trampoline]"
    assert m.counters.unoptimized == 1


def test_unoptimized_nop10_still_decodes_as_one_10_byte_nop():
    from capstone import CS_ARCH_X86, CS_MODE_64, Cs

    m = machine("nop10@7.3")
    p = m.uprobes.register("site", handler=lambda c: None)
    m.run()
    m.uprobes.unregister(p)
    insn = next(Cs(CS_ARCH_X86, CS_MODE_64).disasm(m.mem.read(m.resolve("site"), 10), 0))
    assert (insn.size, insn.mnemonic) == (10, "nop")


@pytest.mark.parametrize("design", list(DESIGNS))
def test_reattach_after_detach_leaves_int3_and_counts_nothing(design):
    m = machine(design, calls=2)
    p = m.uprobes.register("site", handler=lambda c: None)
    m.run()
    site = m.resolve("site")
    m.uprobes.unregister(p)
    before = m.counters.snapshot()
    m.uprobes.register("site", handler=lambda c: None)
    assert m.mem.read(site, 1) == b"\xcc"
    after = m.counters.snapshot()
    assert {k: v for k, v in after.items() if v != before[k]} == {"text_writes": before["text_writes"] + 1}
    assert after["optimized"] == before["optimized"] and after["uprobe_syscalls"] == before["uprobe_syscalls"]


REGS_EQUAL_GUEST = """
_start:
    call func
    call func
    mov eax, 231
    xor edi, edi
    syscall
func:
    mov rax, 0x1111
    mov rbx, 0x2222
    mov rcx, 0x3333
    mov rdx, 0x4444
    mov rsi, 0x5555
    mov rdi, 0x6666
    mov r8, 0x8888
    mov r9, 0x9999
    mov r10, 0xaaaa
    mov r11, 0xbbbb
    mov r12, 0xcccc
    mov r13, 0xdddd
    mov r14, 0xeeee
    mov r15, 0xffff
    mov rbp, 0x7777
    cmp rax, rbx
site:
    {site}
after:
    ret
"""


@pytest.mark.parametrize("design", list(DESIGNS))
def test_handler_sees_the_probe_site_registers_on_the_optimized_path(design):
    """uprobe_regs_equal, entry variant: after one warm-up call the site is optimized,
    and the handler's registers equal those the unprobed guest has at the site."""
    kernel, site, *_ = DESIGNS[design]
    src = REGS_EQUAL_GUEST.format(site=site)
    ref = Machine.from_asm(src, kernel=kernel)
    # reference: the registers at the site without probes (a stepping run to 'site')
    import unicorn

    expected = []
    ref.uc.hook_add(
        unicorn.UC_HOOK_CODE,
        lambda uc, a, s, d: expected.append(ref.read_regs().pt_regs()),
        begin=ref.resolve("site"),
        end=ref.resolve("site"),
    )
    ref.run()
    m = Machine.from_asm(src, kernel=kernel)
    seen = []
    m.uprobes.register("site", handler=lambda c: seen.append(c.regs.pt_regs()))
    m.run()
    assert m.counters.uprobe_syscalls == 1, "second call goes through the trampoline"
    assert len(seen) == len(expected) == 2
    for want, got in zip(expected, seen):
        diff = {k: (hex(want[k]), hex(got[k])) for k in want if want[k] != got[k] and k != "orig_rax"}
        assert not diff, f"registers differ (expected, got): {diff}"


@pytest.mark.parametrize("design", list(DESIGNS))
def test_guest_registers_after_an_optimized_hit_are_untouched(design):
    kernel, site, *_ = DESIGNS[design]
    src = REGS_EQUAL_GUEST.format(site=site)
    import unicorn

    results = []
    for probed in (False, True):
        m = Machine.from_asm(src, kernel=kernel)
        after = []
        m.uc.hook_add(
            unicorn.UC_HOOK_CODE,
            lambda uc, a, s, d, m=m, after=after: after.append(m.read_regs().pt_regs()),
            begin=m.resolve("after"),
            end=m.resolve("after"),
        )
        if probed:
            m.uprobes.register("site", handler=lambda c: None)
        m.run()
        results.append(after)
    assert results[0] == results[1]


@pytest.mark.parametrize("design", list(DESIGNS))
def test_regs_change_through_the_uprobe_syscall(design):
    kernel, site, *_ = DESIGNS[design]
    src = REGS_EQUAL_GUEST.format(site=site)
    m = Machine.from_asm(src, kernel=kernel)
    import unicorn

    after = []
    m.uc.hook_add(
        unicorn.UC_HOOK_CODE,
        lambda uc, a, s, d: after.append(m.read_regs()),
        begin=m.resolve("after"),
        end=m.resolve("after"),
    )

    def change(ctx):
        ctx.regs.rax, ctx.regs.rcx, ctx.regs.r11, ctx.regs.r12 = 0xA1, 0xC1, 0xB1, 0x12

    m.uprobes.register("site", handler=change)
    m.run()
    assert m.counters.uprobe_syscalls == 1
    for regs in after:
        got = (regs.rax, regs.rcx, regs.r11, regs.r12)
        assert got == (0xA1, 0xC1, 0xB1, 0x12), f"expected a1/c1/b1/12, got {[hex(x) for x in got]}"


@pytest.mark.parametrize("design", list(DESIGNS))
def test_handler_set_ip_is_honoured_on_the_optimized_path(design):
    kernel, site, *_ = DESIGNS[design]
    src = REGS_EQUAL_GUEST.format(site=site).replace(
        "after:\n    ret", "after:\n    ret\nskip:\n    mov r15, 0x5eed\n    ret"
    )
    m = Machine.from_asm(src, kernel=kernel)
    m.uprobes.register("site", handler=lambda c: setattr(c.regs, "rip", m.resolve("skip")))
    r = m.run()
    assert r.exit_code == 0 and m.read_regs().r15 == 0x5EED
    assert m.counters.uprobe_syscalls == 1


@pytest.mark.parametrize("design", list(DESIGNS))
def test_handler_that_moves_rsp_takes_the_direct_return_path(design):
    """A handler that changes rsp: the kernel returns with the full pt_regs, skipping
    the nop (ip += size) and bypassing the trampoline's pops."""
    kernel, site, *_ = DESIGNS[design]
    src = """
_start:
    call func
    call func
    mov eax, 231
    xor edi, edi
    syscall
func:
    push 0x1234
site:
    {site}
after:
    pop rax
    ret
""".format(site=site)
    m = Machine.from_asm(src, kernel=kernel)
    import unicorn

    seen = []
    m.uc.hook_add(
        unicorn.UC_HOOK_CODE,
        lambda uc, a, s, d: seen.append((m.read_regs().rsp, m.read_regs().rbx)),
        begin=m.resolve("after"),
        end=m.resolve("after"),
    )
    calls = []

    def handler(ctx):
        calls.append(1)
        if len(calls) == 2:  # on the optimized hit: drop the pushed word
            ctx.regs.rsp += 8
            ctx.regs.rbx = 0x77
        return 0

    m.uprobes.register("site", handler=handler)
    r = m.run()
    assert m.counters.uprobe_syscalls == 1
    assert seen[1][0] == seen[0][0] + 8 and seen[1][1] == 0x77
    # the guest's own stack is now one word short: `ret` pops argc (1) and jumps there
    assert (r.signal_name, r.fault_addr) == ("SIGSEGV", 1), r.describe()


def test_uretprobe_on_an_optimized_site_hijacks_the_real_return_address():
    kernel, site, *_ = DESIGNS["nop5@6.18"]
    src = """
_start:
    call func
    call func
    mov rdi, rax
    mov eax, 231
    syscall
func:
site:
    {site}
    mov eax, 42
    ret
""".format(site=site)
    m = Machine.from_asm(src, kernel=kernel)
    rets = []
    m.uprobes.register("site", handler=lambda c: None, ret_handler=lambda c: rets.append((c.func, c.regs.rax)))
    r = m.run()
    assert r.exit_code == 42
    assert m.counters.uprobe_syscalls == 1 and m.counters.syscalls[335] == 2
    assert rets == [(m.resolve("site"), 42)] * 2


SYS_UPROBE_FROM_CODE = """
_start:
    mov eax, 336
    syscall
    mov rdi, rax
    neg rdi
    mov eax, 231
    syscall
"""


@pytest.mark.parametrize(
    "kernel,expected",
    [
        ("6.17", errno.ENOSYS),
        ("6.18", errno.ENXIO),
        ("7.1", errno.ENXIO),
        ("7.2", errno.ENXIO),
        ("7.3", errno.EPROTO),
        ("latest", errno.EPROTO),
    ],
)
def test_uprobe_syscall_from_ordinary_code_returns_an_errno(kernel, expected):
    r = Machine.from_asm(SYS_UPROBE_FROM_CODE, kernel=kernel).run()
    assert (r.reason, r.exit_code) == ("exit", expected)


def test_uprobe_syscall_outside_a_trampoline_sigill_revision():
    r = Machine.from_asm(SYS_UPROBE_FROM_CODE, kernel="6.18", uprobe_syscall_outside="SIGILL").run()
    assert r.signal_name == "SIGILL"


def test_a_nop4_plus_nop_is_not_one_5_byte_nop_and_stays_int3():
    m = Machine.from_asm(loop_guest(".byte 0x0f, 0x1f, 0x40, 0x00, 0x90"), kernel="6.18")
    m.uprobes.register("site", handler=lambda c: None)
    m.run()
    assert m.counters.optimized == 0 and m.counters.bp_traps == 4
    assert m.mem.read(m.resolve("site"), 1) == b"\xcc"


def test_a_66_prefixed_nopl_of_length_5_is_optimized_on_6_18():
    """Measured on a real 6.18 kernel: 66 0f 1f 40 00 becomes e8 rel32 ("Accept more NOP
    forms"); its first hit is stepped out of line, since it is not in x86_nops[5]."""
    m = Machine.from_asm(loop_guest(".byte 0x66, 0x0f, 0x1f, 0x40, 0x00"), kernel="6.18")
    m.uprobes.register("site", handler=lambda c: None)
    m.run()
    assert (m.counters.optimized, m.counters.bp_traps, m.counters.xol_singlesteps) == (1, 1, 1)
    assert m.mem.read(m.resolve("site"), 1) == b"\xe8"


def test_page_crossing_nop5_stays_int3():
    def src(pad: int) -> str:
        return f"""
_start:
    mov rbx, 3
again:
    call func
    dec rbx
    jnz again
    mov eax, 231
    xor edi, edi
    syscall
func:
    jmp site
    .fill {pad}, 1, 0xcc
site:
    {NOP5}
    ret
"""

    first = Machine.from_asm(src(1000)).resolve("site")  # jmp rel32 either way
    m = Machine.from_asm(src(1000 + 0x402000 - 2 - first), kernel="6.18")
    site = m.resolve("site")
    assert site == 0x402000 - 2, f"site {site:#x} must cross a page"
    m.uprobes.register("site", handler=lambda c: None)
    r = m.run()
    assert r.exit_code == 0
    assert m.counters.optimized == 0 and m.counters.bp_traps == 3 and m.counters.emulated == 3


def test_nop10_is_refused_before_7_3_for_its_cs_prefix():
    m = Machine.from_asm(loop_guest(NOP10), kernel="6.18")
    with pytest.raises(RegistrationError) as e:
        m.uprobes.register("site", handler=lambda c: None)
    assert e.value.errno_name == "ENOTSUPP"


def test_nop5_is_not_optimized_on_7_3():
    m = Machine.from_asm(loop_guest(NOP5), kernel="7.3")
    m.uprobes.register("site", handler=lambda c: None)
    m.run()
    assert m.counters.optimized == 0 and m.counters.bp_traps == 4 and m.counters.emulated == 4


def test_trampoline_is_reused_for_sites_in_reach():
    src = loop_guest(NOP5).replace("after:", f"second:\n    {NOP5}\nafter:")
    m = Machine.from_asm(src, kernel="6.18")
    m.uprobes.register("site", handler=lambda c: None)
    m.uprobes.register("second", handler=lambda c: None)
    m.run()
    tramps = [v for v in m.mem.vmas if v.name == "[uprobes-trampoline]"]
    assert len(tramps) == 1 and m.counters.optimized == 2


def test_failed_optimization_is_sticky_and_the_probe_keeps_working(monkeypatch):
    m = machine("nop5@6.18", calls=4)
    monkeypatch.setattr(m.kernel.optimizer, "find_nearest_trampoline", lambda proc, end: None)
    hits = []
    p = m.uprobes.register("site", handler=lambda c: hits.append(1))
    m.run()
    assert len(hits) == 4
    assert (m.counters.optimize_failed, m.counters.optimized, m.counters.bp_traps) == (1, 0, 4)
    assert p.uprobe.optimize_fail


def test_remove_from_handler_unoptimizes():
    m = machine("nop5@6.18", calls=4)
    hits = []

    def once_optimized(ctx):
        hits.append(1)
        return UPROBE_HANDLER_REMOVE if len(hits) == 2 else 0

    wants = [True]
    m.uprobes.register("site", handler=once_optimized, filter=lambda proc: wants[0])
    wants[0] = False  # from now on no consumer wants this process
    m.run()
    assert len(hits) == 2
    assert m.mem.read(m.resolve("site"), 5) == bytes.fromhex("0f1f440000")


RED_ZONE_GUEST = """
_start:
    mov rbx, 2
    xor r12, r12
again:
    call leaf
    add r12, rax
    dec rbx
    jnz again
    mov rdi, r12
    mov eax, 231
    syscall
leaf:
    mov rax, 0x1122334455667788
    mov qword ptr [rsp - 8], rax
    mov qword ptr [rsp - 16], rax
    mov qword ptr [rsp - 32], rax
    mov qword ptr [rsp - 128], rax
site:
    {site}
    xor eax, eax
    mov rcx, 0x1122334455667788
    cmp qword ptr [rsp - 8], rcx
    setne al
    cmp qword ptr [rsp - 16], rcx
    setne cl
    or al, cl
    movzx eax, al
    ret
"""


@pytest.mark.parametrize("design,clobbered", [("nop5@6.18", 1), ("nop5@7.1", 1), ("nop5@7.2", 1), ("nop10@7.3", 0)])
def test_red_zone_clobbering_per_design(design, clobbered):
    """The nop5 call pushes its return address into the 128-byte red zone (the reason
    for nop10); the nop10's lea skips it.  Only the optimized (second) call can clobber."""
    kernel, site, *_ = DESIGNS[design]
    src = RED_ZONE_GUEST.format(site=site)
    plain = Machine.from_asm(src, kernel=kernel).run()
    assert plain.exit_code == 0
    m = Machine.from_asm(src, kernel=kernel)
    m.uprobes.register("site", handler=lambda c: None)
    r = m.run()
    assert m.counters.uprobe_syscalls == 1
    assert r.exit_code == clobbered


# ----------------------------------------------------------------------------- USDT


@pytest.fixture(scope="module")
def usdt_guest(build_c):
    import os

    inc = os.path.join(os.path.dirname(__file__), "..", "guest_programs", "c")
    return build_c("usdt_sites.c", "-static", f"-I{inc}", name="usdt_sites")


@pytest.mark.parametrize("kernel,optimized", [("6.17", 0), ("6.18", 1), ("7.2", 1), ("7.3", 1)])
@pytest.mark.parametrize("name", ["plain", "combo5", "combo10", "guarded"])
def test_usdt_sites_attach_like_libbpf(usdt_guest, kernel, optimized, name):
    m = Machine.from_elf(usdt_guest, kernel=kernel)
    hits = []
    (uc,) = m.uprobes.register_usdt(f"usdt:{usdt_guest}:demo:{name}", handler=lambda c: hits.append(c.regs.rip))
    r = m.run()
    assert r.exit_code == 0 and len(hits) == 3
    note = next(n for n in m.process.exe.elf.usdt if n.name == name)
    combo = {"combo5": ("6.18", "7.2"), "combo10": ("7.3",)}.get(name, ())
    expected_site = note.pc + (1 if kernel in combo else 0)
    assert set(hits) == {expected_site}
    assert m.counters.optimized == (1 if kernel in combo else 0)


def test_usdt_semaphore_rises_on_attach_and_falls_on_detach(usdt_guest):
    m = Machine.from_elf(usdt_guest, kernel="6.18")
    sema = m.resolve("demo_guarded_semaphore")
    assert m.mem.read(sema, 2) == b"\0\0"
    (uc,) = m.uprobes.register_usdt(f"usdt:{usdt_guest}:demo:guarded", handler=lambda c: None)
    assert m.mem.read(sema, 2) == b"\1\0"
    m.uprobes.unregister(uc)
    assert m.mem.read(sema, 2) == b"\0\0"


def test_usdt_semaphore_seen_by_the_guest(usdt_guest):
    plain = Machine.from_elf(usdt_guest).run()
    assert plain.stdout == b"enabled=0\n"
    m = Machine.from_elf(usdt_guest)
    m.uprobes.register_usdt(f"usdt:{usdt_guest}:demo:guarded", handler=lambda c: None)
    assert m.run().stdout == b"enabled=3\n"


def test_usdt_event_through_the_cli(usdt_guest):
    from cli_helpers import cli

    p = cli("run", "--kernel", "6.18", "-e", f"usdt:{usdt_guest}:demo:combo5", usdt_guest)
    lines = [ln for ln in p.stderr.decode().splitlines() if "demo_combo5" in ln]
    assert p.returncode == 0 and len(lines) == 3, p.stderr.decode()
