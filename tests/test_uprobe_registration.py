"""Registering and unregistering entry probes on a running guest.

As kernel/events/uprobes.c has it: a uprobe is (file, offset); install
writes one 0xCC into the process (never the file); analysis reads the FILE; errors carry
the kernel's errno; UPROBE_HANDLER_REMOVE and filters decide removal; changes made while
the guest runs are seen at once.
"""

from __future__ import annotations

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
from kernel_model.errors import RegistrationError
from kernel_model.kernel.events.uprobes import UPROBE_HANDLER_REMOVE
from kernel_model.mm.mm_types import PROT_EXEC, PROT_READ, PROT_WRITE

LOOP = guest("""
    mov r12d, 5
    xor r13d, r13d
again:
probe:
    add r13, 1
second:
    nop
third:
    mov eax, 39
    syscall
    dec r12d
    jnz again
""")


def file_offset(m, label: str) -> int:
    addr = m.resolve(label)
    return m.mem.find_vma(addr).offset_of(addr)


def counting(hits: list, tag=None, rc=0):
    def handler(ctx):
        hits.append(tag if tag is not None else ctx.vaddr)
        return rc

    return handler


# ------------------------------------------------------------------- targets and install


@pytest.mark.parametrize("how", ["symbol", "symbol+off", "address", "path-offset"])
def test_every_target_form_names_the_same_probe(how):
    m = Machine.from_asm(LOOP)
    addr = m.resolve("second")
    target = {
        "symbol": "second",
        "symbol+off": "probe+4",  # add r13, 1 is 4 bytes
        "address": addr,
        "path-offset": (m.process.exe.path, file_offset(m, "second")),
    }[how]
    hits = []
    m.uprobes.register(target, handler=counting(hits))
    m.run(max_insns=100_000)
    assert hits == [addr] * 5, f"hits: expected 5 at {addr:#x}, got {[hex(h) for h in hits]}"


def test_install_writes_one_int3_into_the_process_and_never_the_file():
    m = Machine.from_asm(LOOP)
    addr, off = m.resolve("probe"), file_offset(m, "probe")
    before = m.mem.read(addr - 8, 32)
    file_before = m.process.exe.data
    m.uprobes.register("probe", handler=lambda ctx: 0)
    after = m.mem.read(addr - 8, 32)
    assert after == before[:8] + b"\xcc" + before[9:], (
        f"text around the probe: expected only byte 8 -> cc, got {before.hex(' ')} -> {after.hex(' ')}"
    )
    assert m.process.exe.data == file_before and m.process.exe.read(off, 1) == before[8:9]
    assert m.counters.text_writes == 1


def test_consumers_of_one_address_share_one_uprobe_and_one_int3():
    m = Machine.from_asm(LOOP)
    a, b = [], []
    m.uprobes.register("probe", handler=counting(a))
    m.uprobes.register((m.process.exe.path, file_offset(m, "probe")), handler=counting(b))
    assert len(m.uprobes.tree) == 1
    m.run(max_insns=100_000)
    assert (len(a), len(b)) == (5, 5)
    assert probe_counters(m) == expected_counters(5, "xol")


def test_probe_on_a_writable_mapping_is_not_installed():
    """valid_vma(is_register=true) refuses VM_WRITE mappings: registration succeeds,
    nothing is written, nothing hits."""
    m = Machine.from_asm(LOOP)
    addr = m.resolve("probe")
    assert m.mem.protect(addr & ~0xFFF, 0x1000, PROT_READ | PROT_WRITE | PROT_EXEC)
    hits = []
    m.uprobes.register("probe", handler=counting(hits))
    r = m.run(max_insns=100_000)
    assert r.reason == "exit" and hits == []
    assert probe_counters(m) == expected_counters(0, "emulated", installs=0)


def test_analysis_uses_the_file_bytes_not_the_process_text():
    """The instruction copy comes from the page cache: a process whose text was patched
    (not with int3) before registration single-steps the FILE's instruction."""
    src = guest("probe:\n    .byte 0x48, 0x89, 0xd8")  # mov rax, rbx
    m = Machine.from_asm(src)
    addr = m.resolve("probe")
    m.mem.text_poke(addr, bytes.fromhex("4889c8"))  # process: mov rax, rcx
    m.uprobes.register("probe", handler=lambda ctx: 0)
    m.run(max_insns=100_000)
    rax = guest_regs(m)["rax"]
    assert rax == 0x1B1B1B1B1B1B1B1B, f"rax: expected rbx's value (file insn), got {rax:#x}"
    assert m.mem.read(addr, 3) == bytes.fromhex("cc89c8")


def test_int3_already_in_the_process_is_adopted_and_removal_restores_the_file_byte():
    """verify_opcode(): installing over a 0xCC already in the process (a debugger's) is
    "nothing to do"; unregistering writes the file's byte back (the debugger's int3 is
    lost)."""
    src = guest("probe:\n    mov rax, rbx")
    m = Machine.from_asm(src)
    addr = m.resolve("probe")
    orig = m.mem.read(addr, 1)
    m.mem.text_poke(addr, b"\xcc")
    hits = []
    uc = m.uprobes.register("probe", handler=counting(hits))
    assert m.counters.text_writes == 1, "no write: the int3 was already there"
    m.uprobes.unregister(uc)
    assert m.mem.read(addr, 1) == orig and m.counters.text_writes == 2
    r = m.run(max_insns=100_000)
    assert r.reason == "exit" and hits == [], r.describe()
    assert guest_regs(m)["rax"] == 0x1B1B1B1B1B1B1B1B


def test_adopted_int3_hits_as_the_uprobe():
    m = Machine.from_asm(guest("probe:\n    mov rax, rbx"))
    m.mem.text_poke(m.resolve("probe"), b"\xcc")
    hits = []
    m.uprobes.register("probe", handler=counting(hits))
    r = m.run(max_insns=100_000)
    assert r.reason == "exit", r.describe()
    assert hits == [m.resolve("probe")] and guest_regs(m)["rax"] == 0x1B1B1B1B1B1B1B1B


# ------------------------------------------------------------------- refusals

ERROR_GUEST = guest(
    """
probe:
    nop
""",
    tail="""
bad:
    {bytes}
    ret
""",
)

REFUSED = {
    # name: (.byte list, errno) -- uprobe_register() and arch_uprobe_analyze_insn()
    "file-byte-already-int3": ("0xcc", "ENOTSUPP"),
    "lock-prefix": ("0xf0, 0x48, 0x83, 0x00, 0x01", "ENOTSUPP"),
    "cs-prefix": ("0x2e, 0x48, 0x8b, 0x00", "ENOTSUPP"),
    "ds-prefix": ("0x3e, 0x48, 0x8b, 0x00", "ENOTSUPP"),
    "es-prefix": ("0x26, 0x48, 0x8b, 0x00", "ENOTSUPP"),
    "ss-prefix": ("0x36, 0x48, 0x8b, 0x00", "ENOTSUPP"),
    "hlt": ("0xf4", "ENOTSUPP"),
    "in-al-imm": ("0xe4, 0x60", "ENOTSUPP"),
    "int-0x80": ("0xcd, 0x80", "ENOTSUPP"),
    "cli": ("0xfa", "ENOTSUPP"),
    "mov-ss": ("0x8e, 0xd0", "ENOTSUPP"),
    "vex-vmovdqu-load-opcode-6f": ("0xc5, 0xfa, 0x6f, 0x05, 0, 0, 0, 0", "ENOTSUPP"),
    "66-jmp-rel8": ("0x66, 0xeb, 0x02", "ENOTSUPP"),
    "66-call-rel32": ("0x66, 0xe8, 0, 0, 0, 0", "ENOTSUPP"),
    "66-jcc-rel8": ("0x66, 0x74, 0x00", "ENOTSUPP"),
    "undecodable": ("0x0f, 0x04", "ENOEXEC"),
}


def _assert_nothing_installed(m):
    assert m.uprobes.tree == {}, f"uprobes left in the tree: {m.uprobes.tree}"
    assert m.counters.text_writes == 0
    r = m.run(max_insns=100_000)
    assert r.reason == "exit" and r.exit_code == 0, r.describe()
    assert probe_counters(m) == expected_counters(0, "emulated", installs=0)


@pytest.mark.parametrize("name", list(REFUSED), ids=list(REFUSED))
def test_refused_instruction_fails_registration_with_the_kernels_errno(name):
    encoding, errno_name = REFUSED[name]
    m = Machine.from_asm(ERROR_GUEST.format(bytes=f".byte {encoding}"))
    with pytest.raises(RegistrationError) as info:
        m.uprobes.register("bad", handler=lambda ctx: 0)
    assert info.value.errno_name == errno_name, (
        f"{name}: expected {errno_name}, got {info.value.errno_name} ({info.value})"
    )
    assert m.mem.read(m.resolve("bad"), 1) == bytes.fromhex(encoding.split(",")[0][2:])
    _assert_nothing_installed(m)


@pytest.mark.parametrize(
    "encoding,text",
    [
        ("0x0f, 0x05", "syscall"),
        ("0x0f, 0x0b", "ud2"),
        ("0x0f, 0xa2", "cpuid"),
        ("0x0f, 0x01, 0xd0", "xgetbv"),
        ("0x0f, 0xae, 0xf8", "sfence"),
    ],
    ids=["syscall", "ud2", "cpuid", "xgetbv", "sfence"],
)
def test_every_0f_escaped_opcode_registers(encoding, text):
    """Quirk: 0x0f is good in good_insns_64, so good_2byte_insns is never consulted."""
    m = Machine.from_asm(ERROR_GUEST.format(bytes=f".byte {encoding}"))
    m.uprobes.register("bad", handler=lambda ctx: 0)
    assert m.mem.read(m.resolve("bad"), 1) == b"\xcc", f"{text}: int3 not installed"


def test_consumer_without_handlers_is_einval():
    m = Machine.from_asm(LOOP)
    with pytest.raises(RegistrationError) as info:
        m.uprobes.register("probe")
    assert info.value.errno_name == "EINVAL"
    _assert_nothing_installed(m)


def test_offset_past_the_end_of_the_file_is_einval():
    m = Machine.from_asm(LOOP)
    with pytest.raises(RegistrationError) as info:
        m.uprobes.register((m.process.exe.path, m.process.exe.size + 1), handler=lambda ctx: 0)
    assert info.value.errno_name == "EINVAL"
    _assert_nothing_installed(m)


def test_failed_registration_leaves_other_probes_working():
    m = Machine.from_asm(ERROR_GUEST.format(bytes=".byte 0xf4"))
    hits = []
    m.uprobes.register("probe", handler=counting(hits))
    with pytest.raises(RegistrationError):
        m.uprobes.register("bad", handler=lambda ctx: 0)
    assert list(m.uprobes.tree.values())[0].offset == file_offset(m, "probe")
    m.run(max_insns=100_000)
    assert hits == [m.resolve("probe")]


# ------------------------------------------------------------------- unregister


def test_unregister_restores_the_original_byte():
    m = Machine.from_asm(LOOP)
    addr = m.resolve("probe")
    orig = m.mem.read(addr, 16)
    uc = m.uprobes.register("probe", handler=lambda ctx: 0)
    m.uprobes.unregister(uc)
    assert m.mem.read(addr, 16) == orig, (
        f"text after unregister: expected {orig.hex(' ')}, got {m.mem.read(addr, 16).hex(' ')}"
    )
    assert m.uprobes.tree == {} and m.counters.text_writes == 2


def test_unregistering_one_of_two_consumers_keeps_the_int3():
    m = Machine.from_asm(LOOP)
    a, b = [], []
    ua = m.uprobes.register("probe", handler=counting(a))
    m.uprobes.register("probe", handler=counting(b))
    m.uprobes.unregister(ua)
    assert m.mem.read(m.resolve("probe"), 1) == b"\xcc"
    m.run(max_insns=100_000)
    assert (len(a), len(b)) == (0, 5)


REX_B_RIPREL = guest(
    """
probe:
    .byte 0x49, 0x8b, 0x05
    .long val - after_load
after_load:
""",
    data="val:\n    .quad 0x1122334455667788",
)


def test_unregister_writes_back_the_analyzed_rex_byte():
    """The REX quirk: riprel_analyze() clears REX.B in auprobe->insn, which is
    also what set_orig_insn() writes back, so ``49 8b 05`` comes back as ``48 8b 05``
    (same semantics: REX.B is ignored with rip-relative addressing)."""
    m = Machine.from_asm(REX_B_RIPREL)
    addr = m.resolve("probe")
    uc = m.uprobes.register("probe", handler=lambda ctx: 0)
    m.uprobes.unregister(uc)
    assert m.mem.read(addr, 3) == bytes.fromhex("488b05"), (
        f"restored bytes: expected 48 8b 05, got {m.mem.read(addr, 3).hex(' ')}"
    )
    assert m.process.exe.read(file_offset(m, "probe"), 1) == b"\x49", "the file keeps 0x49"
    r = m.run(max_insns=100_000)
    assert r.reason == "exit" and guest_regs(m)["rax"] == 0x1122334455667788


def test_unregister_of_a_rip_relative_insn_without_rex_at_byte_0_restores_the_file_byte():
    m = Machine.from_asm(
        guest("probe:\n    .byte 0x8b, 0x05\n    .long val - after_load\nafter_load:", data="val:\n    .quad 7")
    )
    uc = m.uprobes.register("probe", handler=lambda ctx: 0)
    m.uprobes.unregister(uc)
    assert m.mem.read(m.resolve("probe"), 2) == bytes.fromhex("8b05")


# ------------------------------------------------------------------- UPROBE_HANDLER_REMOVE


class Flip:
    """A filter that wants the process until told otherwise."""

    def __init__(self):
        self.wants = True

    def __call__(self, proc):
        return self.wants


def _remove_after_first(hits, flip=None):
    def handler(ctx):
        hits.append(ctx.vaddr)
        if flip is not None:
            flip.wants = False
        return UPROBE_HANDLER_REMOVE

    return handler


def test_remove_with_no_filter_wanting_the_process_removes_the_int3():
    m = Machine.from_asm(LOOP)
    hits, flip = [], Flip()
    m.uprobes.register("probe", handler=_remove_after_first(hits, flip), filter=flip)
    plain, _, _ = run_guest(LOOP)
    m.run(max_insns=100_000)
    assert len(hits) == 1, f"hits: expected 1, got {len(hits)}"
    assert m.mem.read(m.resolve("probe"), 1) == plain.mem.read(plain.resolve("probe"), 1)
    assert_same_state(final_state(plain), final_state(m), "the removing hit still runs the insn")
    assert probe_counters(m) == expected_counters(1, "xol", installs=2)


@pytest.mark.parametrize("filt", ["no-filter", "filter-wants-it"])
def test_remove_is_vetoed_by_the_consumers_own_filter(filt):
    m = Machine.from_asm(LOOP)
    hits = []
    m.uprobes.register(
        "probe", handler=_remove_after_first(hits), filter=None if filt == "no-filter" else (lambda proc: True)
    )
    m.run(max_insns=100_000)
    assert len(hits) == 5, f"hits: expected 5 (removal vetoed), got {len(hits)}"
    assert m.counters.text_writes == 1


def test_filterless_consumer_vetoes_removal_even_when_it_returns_remove():
    m = Machine.from_asm(LOOP)
    a, b, flip = [], [], Flip()
    m.uprobes.register("probe", handler=_remove_after_first(a, flip), filter=flip)
    m.uprobes.register("probe", handler=_remove_after_first(b))
    m.run(max_insns=100_000)
    assert (len(a), len(b)) == (5, 5)


def test_remove_needs_every_consumer_to_return_remove():
    m = Machine.from_asm(LOOP)
    a, b, fa, fb = [], [], Flip(), Flip()
    m.uprobes.register("probe", handler=_remove_after_first(a, fa), filter=fa)
    m.uprobes.register("probe", handler=counting(b), filter=fb)
    fb.wants = False
    m.run(max_insns=100_000)
    assert (len(a), len(b)) == (5, 5), "b returned 0: no removal"


def test_remove_by_all_consumers_whose_filters_let_go_removes_the_int3():
    m = Machine.from_asm(LOOP)
    a, b, fa, fb = [], [], Flip(), Flip()
    m.uprobes.register("probe", handler=_remove_after_first(a, fa), filter=fa)
    m.uprobes.register("probe", handler=_remove_after_first(b, fb), filter=fb)
    m.run(max_insns=100_000)
    assert (len(a), len(b)) == (1, 1)
    assert m.counters.text_writes == 2


def test_filter_decides_install_only_for_the_new_consumer():
    """register_for_each_vma() consults only the NEW consumer's filter; at a hit every
    consumer's handler runs, filters are not consulted."""
    m = Machine.from_asm(LOOP)
    a, b = [], []
    m.uprobes.register("probe", handler=counting(a), filter=lambda proc: False)
    assert m.counters.text_writes == 0, "filtered out: not installed"
    m.uprobes.register("probe", handler=counting(b))
    assert m.counters.text_writes == 1
    m.run(max_insns=100_000)
    assert (len(a), len(b)) == (5, 5)


# ------------------------------------------------------------------- changes while running


def test_register_and_unregister_from_a_syscall_are_seen_at_once():
    """getpid runs once per iteration (5); the probe on ``probe`` (top of the loop) is
    added during the 2nd getpid and removed during the 4th: iterations 3 and 4 hit."""
    m = Machine.from_asm(LOOP)
    real = m.syscalls.table[39]
    calls, hits, state = [], [], {}

    def getpid(task, regs, *args):
        calls.append(1)
        if len(calls) == 2:
            state["uc"] = m.uprobes.register("probe", handler=counting(hits))
        if len(calls) == 4:
            m.uprobes.unregister(state["uc"])
        return real(task, regs, *args)

    m.syscalls.register(39, getpid)
    r = m.run(max_insns=100_000)
    assert r.reason == "exit", r.describe()
    assert len(hits) == 2, f"hits: expected 2, got {len(hits)}"
    assert guest_regs(m)["r13"] == 5
    assert probe_counters(m) == expected_counters(2, "xol", installs=2)


def test_register_and_unregister_from_another_probes_handler_are_seen_at_once():
    """The handler of ``probe`` adds a probe on ``third`` (later in the same iteration)
    at its 1st hit and removes it at its 3rd: ``third`` hits in iterations 1 and 2."""
    m = Machine.from_asm(LOOP)
    first, later, state = [], [], {}

    def handler(ctx):
        first.append(1)
        if len(first) == 1:
            state["uc"] = m.uprobes.register("third", handler=counting(later))
        if len(first) == 3:
            m.uprobes.unregister(state["uc"])

    m.uprobes.register("probe", handler=handler)
    r = m.run(max_insns=100_000)
    assert r.reason == "exit", r.describe()
    assert (len(first), len(later)) == (5, 2), f"hits: expected (5, 2), got {(len(first), len(later))}"
    assert m.mem.read(m.resolve("third"), 1) == b"\xb8"
    assert m.counters.text_writes == 3 and m.counters.uprobe_hits == 7


def test_probe_added_on_the_next_instruction_by_a_handler_hits_immediately():
    """The int3 written into the very block that is executing is seen at once
    (text_poke drops the translated code)."""
    m = Machine.from_asm(LOOP)
    later, state = [], {}

    def handler(ctx):
        if "uc" not in state:
            state["uc"] = m.uprobes.register("second", handler=counting(later))

    m.uprobes.register("probe", handler=handler)
    m.run(max_insns=100_000)
    assert len(later) == 5, f"hits on the next instruction: expected 5, got {len(later)}"


def test_handler_removing_its_own_probe_by_unregister_stops_further_hits():
    m = Machine.from_asm(LOOP)
    hits, state = [], {}

    def handler(ctx):
        hits.append(1)
        if len(hits) == 2:
            m.uprobes.unregister(state["uc"])

    state["uc"] = m.uprobes.register("probe", handler=handler)
    plain, _, _ = run_guest(LOOP)
    m.run(max_insns=100_000)
    assert len(hits) == 2
    assert_same_state(final_state(plain), final_state(m))


def test_offset_at_the_end_of_the_file_is_eio():
    """offset == i_size passes the sanity check, then copy_insn() reads nothing: -EIO."""
    m = Machine.from_asm(LOOP)
    with pytest.raises(RegistrationError) as info:
        m.uprobes.register((m.process.exe.path, m.process.exe.size), handler=lambda ctx: 0)
    assert info.value.errno_name == "EIO", f"expected EIO, got {info.value}"
    _assert_nothing_installed(m)


def test_probe_in_a_private_file_mapping_without_exec_is_installed():
    """valid_vma() wants VM_MAYEXEC, not VM_EXEC: text mprotect'ed read-only still gets
    the int3, and the probe hits once the text is executable again."""
    m = Machine.from_asm(LOOP)
    page = m.resolve("probe") & ~0xFFF
    assert m.mem.protect(page, 0x1000, PROT_READ)
    hits = []
    m.uprobes.register("probe", handler=counting(hits))
    assert m.mem.read(m.resolve("probe"), 1) == b"\xcc", "int3 not installed in the r-- mapping"
    assert m.mem.protect(page, 0x1000, PROT_READ | PROT_EXEC)
    r = m.run(max_insns=100_000)
    assert r.reason == "exit" and len(hits) == 5, (r.describe(), hits)


def test_unregister_removes_the_int3_from_text_made_writable_after_install():
    """Removal uses valid_vma(is_register=false), which ignores VM_WRITE (and VM_EXEC)."""
    m = Machine.from_asm(LOOP)
    addr = m.resolve("probe")
    orig = m.mem.read(addr, 1)
    uc = m.uprobes.register("probe", handler=lambda ctx: 0)
    assert m.mem.protect(addr & ~0xFFF, 0x1000, PROT_READ | PROT_WRITE)
    m.uprobes.unregister(uc)
    assert m.mem.read(addr, 1) == orig, f"byte after unregister: {m.mem.read(addr, 1).hex()}"


# ------------------------------------------------------------------- USDT semaphore updates

SEMA_LOOP = guest(
    """
    mov r12d, 3
again:
probe:
    nop
    dec r12d
    jnz again
    mov eax, 39
    syscall
""",
    data="sema:\n    .short 0",
)


def _semaphore(m):
    addr = m.resolve("sema")
    return addr, m.mem.find_vma(addr).offset_of(addr)


def test_semaphore_is_not_decremented_twice_by_remove_then_unregister():
    """uprobe_write() touches the ref_ctr only when it writes: after
    UPROBE_HANDLER_REMOVE restored the byte, unregistering finds no int3 ("nothing to
    do") and leaves the semaphore at 0."""
    m = Machine.from_asm(SEMA_LOOP)
    addr, off = _semaphore(m)
    read = lambda: int.from_bytes(m.mem.read(addr, 2), "little", signed=True)  # noqa: E731
    flip, seen = Flip(), {}
    uc = m.uprobes.register("probe", handler=_remove_after_first([], flip), filter=flip, ref_ctr_offset=off)
    real = m.syscalls.table[39]

    def getpid(task, regs, *args):  # after the loop, while the guest is alive
        seen["after_remove"] = read()
        m.uprobes.unregister(uc)
        seen["after_unregister"] = read()
        return real(task, regs, *args)

    m.syscalls.register(39, getpid)
    assert read() == 1
    r = m.run(max_insns=100_000)
    assert r.reason == "exit" and m.counters.uprobe_hits == 1, r.describe()
    assert seen == {"after_remove": 0, "after_unregister": 0}, f"semaphore: {seen}"


def test_adopting_an_int3_already_in_the_process_leaves_the_semaphore_alone():
    m = Machine.from_asm(SEMA_LOOP)
    addr, off = _semaphore(m)
    m.mem.text_poke(m.resolve("probe"), b"\xcc")
    m.uprobes.register("probe", handler=lambda ctx: 0, ref_ctr_offset=off)
    got = int.from_bytes(m.mem.read(addr, 2), "little", signed=True)
    assert got == 0, f"semaphore: expected 0 (verify_opcode: nothing to do), got {got}"
