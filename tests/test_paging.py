"""Guest memory is paged as on x86-64: the kernel model owns 4-level page tables per
address space, faults arrive as #PF and go through do_user_addr_fault.

Each case of tests/c/paging.c prints what a program observes - si_code, si_addr, the
sigcontext's trapno, err and cr2, copy-on-write after fork, stack growth, self-modifying
code - and must print the same natively and under the model."""

from __future__ import annotations

import subprocess

import pytest

from emu import Machine
from emu.engine import mmu
from kernel_model.arch.x86.mm.pgtable import PAGE_NX, PAGE_PRESENT, PAGE_RW, PTE_PFN_MASK
from kernel_model.mm.mm_types import PAGE_SIZE

CASES = [
    "write-readonly",
    "read-unmapped",
    "read-protnone",
    "exec-data",
    "write-text",
    "noncanonical",
    "int-gate",
    "cow",
    "stack-grows",
    "stack-limit",
    "smc",
    "dontneed",
    "mremap",
]


@pytest.fixture(scope="module")
def paging_guest(build_c):
    return build_c("paging.c", "-static", name="paging")


def _model(path: str, case: str) -> tuple[str, Machine]:
    m = Machine.from_elf(path, argv=["paging", case])
    r = m.run(timeout=120)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return r.stdout.decode(), m


@pytest.mark.parametrize("case", CASES)
def test_a_fault_case_prints_what_it_prints_natively(paging_guest, case):
    native = subprocess.run([paging_guest, case], capture_output=True, timeout=60)
    assert native.returncode == 0, native.stderr
    model, _ = _model(paging_guest, case)
    assert model == native.stdout.decode(), f"model:\n{model}\nnative:\n{native.stdout.decode()}"


def test_fork_shares_frames_read_only_and_the_first_write_copies():
    """copy_page_range maps the parent's frames read-only in both; do_wp_page copies
    on the child's write and the parent's frame is its own again."""
    m = Machine.from_asm("_start:\n    hlt\n")
    parent, ram = m.mem, m.engine.ram
    vma = parent.map(0x20_0000_0000, 2 * PAGE_SIZE, 3, "anon")
    parent.write(vma.start, b"parent")
    _, child, _ = m.engine.new_space(m.counters, parent.limit)
    child.map(vma.start, vma.size, 3, "anon")
    child.copy_pages_from(parent, vma.start, vma.end)
    frame = parent.pt.ptes[vma.start >> 12] & PTE_PFN_MASK
    for mem in (parent, child):
        pte = mem.pt.ptes[vma.start >> 12]
        assert pte & PTE_PFN_MASK == frame and not pte & PAGE_RW, f"pte {pte:#x}"
    assert ram.page_count(frame) == 2
    child.write_user(vma.start, b"child!")
    assert child.pt.ptes[vma.start >> 12] & PTE_PFN_MASK != frame
    assert ram.page_count(frame) == 1
    assert (parent.read(vma.start, 6), child.read(vma.start, 6)) == (b"parent", b"child!")
    parent.write_user(vma.start, b"again!")
    assert parent.pt.ptes[vma.start >> 12] & PTE_PFN_MASK == frame, "an exclusive frame is reused"
    child.release()


def _after_anon_mmap(size: int, body: str) -> str:
    """A guest that mmaps ``size`` bytes of anonymous memory (rbx: its address), runs
    ``body`` and exits 0: nine instructions before the body, three after."""
    return f"""
_start:
    mov eax, 9
    xor edi, edi
    mov esi, {size:#x}
    mov edx, 3
    mov r10d, 0x22
    mov r8, -1
    xor r9d, r9d
    syscall
    mov rbx, rax
{body}
    mov eax, 60
    xor edi, edi
    syscall
"""


def test_page_faults_are_counted_and_anonymous_memory_is_populated_on_demand():
    m = Machine.from_asm(
        _after_anon_mmap(
            0x100000,
            """
    mov byte ptr [rbx + 0x80000], 1
""",
        )
    )
    r = m.run()
    assert r.exit_code == 0, r.describe()
    assert m.counters.page_faults == 1, f"expected 1 page fault, got {m.counters.page_faults}"
    base = m.reg_read("rbx")
    populated = [vpn for vpn in m.mem.pt.ptes if base >> 12 <= vpn < (base + 0x100000) >> 12]
    assert 1 <= len(populated) <= 16, f"{len(populated)} pages populated for one touched byte"


def _pte(m: Machine, addr: int) -> int:
    return m.mem.pt.ptes[addr >> 12]


def test_leaf_entries_carry_the_mapping_protection():
    m = Machine.from_asm("_start:\n    hlt\n")
    for prot, want_rw, want_nx in ((1, False, True), (3, True, True), (5, False, False)):
        vma = m.mem.map(0x10_0000_0000 + prot * PAGE_SIZE * 4, PAGE_SIZE, prot, "t")
        m.mem.read(vma.start, 1)  # FOLL_FORCE: populates the page
        pte = _pte(m, vma.start)
        got = (bool(pte & PAGE_PRESENT), bool(pte & PAGE_RW), bool(pte & PAGE_NX))
        assert got == (True, want_rw, want_nx), f"prot {prot}: present/rw/nx {got}"


def test_a_counted_text_write_goes_into_a_private_copy_of_the_files_page(build_c):
    """uprobe_write_opcode: the file's page is replaced by a copy holding the int3; a
    process sharing the frame (a fork child) keeps the file's bytes."""
    path = build_c("hello.c", "-static")
    m = Machine.from_elf(path)
    text = next(v for v in m.mem.vmas if v.file is not None and v.prot & 4)
    addr = text.start + 0x10
    _, child, _ = m.engine.new_space(m.counters, m.mem.limit)
    child.map(text.start, text.size, text.prot, text.name, file=text.file, pgoff=text.pgoff)
    child.copy_pages_from(m.mem, text.start, text.end)
    frame_before = _pte(m, addr) & PTE_PFN_MASK
    original = m.mem.read(addr, 1)
    assert original != b"\xcc"
    m.mem.text_poke(addr, b"\xcc")
    frame_after = _pte(m, addr) & PTE_PFN_MASK
    assert frame_after != frame_before, "the page was written in place"
    assert m.mem.read(addr, 1) == b"\xcc"
    assert child.pt.ptes[addr >> 12] & PTE_PFN_MASK == frame_before
    assert child.read(addr, 1) == original, "the other process sees the int3"
    assert m.engine.ram.page_count(frame_before) == 1
    m.mem.text_poke(addr + 1, b"\xcc")
    assert _pte(m, addr) & PTE_PFN_MASK == frame_after, "an exclusive copy is written in place"
    child.release()


def test_the_engine_can_read_the_cpu_exception_state():
    """The #PF error code and the end of an exception's delivery (old_exception) are
    found in Unicorn's CPU state; without them a second fault is a double fault."""
    assert mmu.exception_state_known(), "the CPU's exception fields were not found"


def test_a_guest_touching_many_pages_keeps_its_instruction_count_exact():
    """A handled fault re-runs its instruction: the count must not see it twice."""
    src = _after_anon_mmap(
        0x400000,
        """
    mov ecx, 64
again:
    mov qword ptr [rbx], rcx
    add rbx, 0x10000
    dec ecx
    jnz again
""",
    )
    m = Machine.from_asm(src)
    r = m.run(max_insns=100_000)  # a counted run
    assert r.exit_code == 0, r.describe()
    assert m.counters.page_faults == 64, m.counters.page_faults
    assert m.icount == 9 + 1 + 64 * 4 + 3, f"icount {m.icount}"
    steps = Machine.from_asm(src)
    n = 0
    while steps.process is not None and n < 1000:
        res = steps.run(max_insns=1)
        n += 1
        if res.reason == "exit":
            break
    assert n == 9 + 1 + 64 * 4 + 3, f"{n} single steps"


def test_the_initial_stack_mapping_is_the_arguments_plus_128_kib():
    """setup_arg_pages: stack_expand (128 KiB) below the pages of the strings."""
    m = Machine.from_asm("_start:\n    hlt\n")
    stack = next(v for v in m.mem.vmas if v.name == "[stack]")
    above = stack.end - stack.start - (128 << 10)
    assert "growsdown" in stack.flags
    assert 0 < above <= 2 * PAGE_SIZE and above % PAGE_SIZE == 0, f"{above:#x} bytes above the 128 KiB"


def _without_err(text: str) -> str:
    return "\n".join(" ".join(w for w in line.split() if not w.startswith("err=")) for line in text.splitlines())


@pytest.mark.parametrize(
    "case", ["write-readonly", "read-unmapped", "read-protnone", "exec-data", "write-text", "cow", "stack-grows", "smc"]
)
def test_without_the_cpus_error_code_the_rebuilt_one_ends_the_same(paging_guest, case, monkeypatch):
    """The fallback when the engine cannot read env->error_code: the code is rebuilt
    from the page tables and the instruction; the signal (si_code, si_addr, trapno) is
    the same, only the sigcontext's err may differ (a write to a page not yet present
    faults twice: as a read, then as a write to a present page)."""
    monkeypatch.setattr(mmu, "error_code", lambda uc: None)
    native = subprocess.run([paging_guest, case], capture_output=True, timeout=60)
    model, _ = _model(paging_guest, case)
    assert _without_err(model) == _without_err(native.stdout.decode()), model


def test_a_page_zapped_and_touched_again_in_a_loop_faults_every_time_and_runs_on():
    """The same instruction faulting on the same address again and again is progress
    when each fault populates the page (MADV_DONTNEED between the touches)."""
    m = Machine.from_asm(
        _after_anon_mmap(
            0x1000,
            """
    mov r12d, 10
again:
    mov byte ptr [rbx], 1
    mov rdi, rbx
    mov esi, 0x1000
    mov edx, 4
    mov eax, 28
    syscall
    dec r12d
    jnz again
""",
        )
    )
    r = m.run()
    assert r.exit_code == 0, r.describe()
    assert m.counters.page_faults == 10, m.counters.page_faults


def test_the_machines_ram_goes_back_to_the_host_with_its_last_address_space():
    """Zones are freed with the last address space (exit_mmap of every process), not
    when the machine is collected.  The main process's stays after its exit, for
    inspection, until it is released."""
    m = Machine.from_asm(_after_anon_mmap(0x10000, "    mov byte ptr [rbx], 1\n"))
    ram = m.engine.ram
    assert ram.zones and ram.users == 1
    assert m.run().exit_code == 0
    assert ram.zones and ram.frames_in_use > 0, "the exited main process's memory is still inspectable"
    m.process.mem.release()
    assert (ram.zones, ram.users, ram.frames_in_use) == ([], 0, 0)
