"""The machine: guests run to completion, traps become signals, syscall is the hardware's."""

from __future__ import annotations

import pytest

from emu import Machine
from kernel_model.arch.x86.ptrace import PT_REGS_ORDER, PtRegs
from kernel_model.kernel.signals import SIGNALS
from kernel_model.mm.mm_types import PROT_EXEC, PROT_READ


def run_asm(source: str, **kw):
    m = Machine.from_asm(source, **kw)
    return m, m.run(max_insns=1_000_000)


# ---------------------------------------------------------------- built-in guests


def test_hello_guest_prints_and_exits_zero():
    r = Machine.from_guest("hello").run()
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, b"hello, world\n")


def test_exit_syscall_status_is_the_guest_status():
    r = Machine.from_guest("exit42").run()
    assert (r.reason, r.exit_code, r.status) == ("exit", 42, 42)


def test_echo_guest_reads_stdin_buffer():
    r = Machine.from_guest("echo", stdin=b"line one\nline two\n").run()
    assert r.stdout == b"line one\nline two\n"


def test_fib_guest_takes_argv():
    # fib(n) mod 256 for n = 10 iterations from (0, 1): a=55
    r = Machine.from_guest("fib", argv=["fib", "10"]).run()
    assert r.exit_code == 55


# ---------------------------------------------------------------- syscall semantics

SYSCALL_MARKS = """
_start:
    mov rcx, 0x1111
    mov r11, 0x2222
    mov eax, 39              # getpid
    syscall
after:
    mov r12, rcx
    mov r13, r11
    pushfq
    pop r14
    mov eax, 231
    xor edi, edi
    syscall
"""


def test_syscall_sets_rcx_to_next_rip_and_r11_to_rflags():
    m, r = run_asm(SYSCALL_MARKS)
    assert r.reason == "exit"
    regs = m.read_regs()
    after = m.resolve("after")
    assert regs.r12 == after, f"rcx after syscall: expected {after:#x}, got {regs.r12:#x}"
    assert regs.r13 == regs.r14 & ~0x10000, f"r11 after syscall: expected rflags {regs.r14:#x}, got {regs.r13:#x}"
    assert regs.r12 != 0x1111 and regs.r13 != 0x2222


def test_syscall_returns_in_rax_and_preserves_other_registers():
    src = """
_start:
    mov rbx, 0x1234
    mov rdx, 0x5678
    mov r8, 0x99
    mov eax, 39
    syscall
    mov r15, rax
    mov eax, 231
    xor edi, edi
    syscall
"""
    m, r = run_asm(src)
    regs = m.read_regs()
    assert (regs.r15, regs.rbx, regs.r8) == (m.process.pid, 0x1234, 0x99)


def test_unknown_syscall_returns_enosys_and_is_reported_by_name():
    src = """
_start:
    mov eax, 165             # mount: not modeled
    syscall
    mov rdi, rax
    neg rdi
    mov eax, 231
    syscall
"""
    m, r = run_asm(src)
    assert r.exit_code == 38, "ENOSYS expected"
    assert dict(m.counters.unknown_syscalls) == {"165:mount": 1}


def test_syscalls_are_counted_by_number():
    m = Machine.from_guest("hello")
    m.run()
    assert dict(m.counters.syscalls) == {1: 1, 231: 1}


# ---------------------------------------------------------------- traps -> signals

TRAP_CASES = {
    "int3": ("nop\n    int3\n    nop", "SIGTRAP", None),
    "ud2": ("nop\n    ud2", "SIGILL", "insn"),
    "div0": ("xor ecx, ecx\n    div ecx", "SIGFPE", "insn"),
    "hlt": ("nop\n    hlt", "SIGSEGV", 0),
    "int_0x21": ("nop\n    int 0x21", "SIGSEGV", 0),
    "port_in": ("nop\n    in al, dx", "SIGSEGV", 0),
    "read_unmapped": ("mov rax, 0x1000\n    mov rbx, [rax]", "SIGSEGV", 0x1000),
    "write_text": ("lea rax, [rip]\n    mov qword ptr [rax], 0", "SIGSEGV", "text"),
    "jump_unmapped": ("mov rax, 0x12345000\n    jmp rax", "SIGSEGV", 0x12345000),
}


@pytest.mark.parametrize("case", list(TRAP_CASES), ids=list(TRAP_CASES))
def test_guest_fault_becomes_signal_with_address(case):
    body, signame, addr = TRAP_CASES[case]
    src = f"_start:\n    {body}\nfault_end:\n    mov eax, 231\n    syscall\n"
    m, r = run_asm(src)
    assert r.reason == "signal", r.describe()
    assert r.signal_name == signame, r.describe()
    if addr == "insn":
        assert r.fault_addr == r.rip
    elif addr == "text":
        assert m.mem.find_vma(r.fault_addr).file is m.process.exe
    elif addr is not None:
        assert r.fault_addr == addr, r.describe()


def test_signal_report_names_the_symbol():
    r = Machine.from_guest("segv").run()
    assert r.signal_name == "SIGSEGV" and r.fault_addr == 0x10
    assert r.rip_symbol == "_start+0x7"
    assert r.status == 128 + SIGNALS["SIGSEGV"]
    assert "fault address 0x10" in r.describe()


def test_fault_in_non_executable_page():
    src = """
_start:
    lea rax, [rip + stuff]
    jmp rax
.data
stuff:
    .byte 0x90, 0x90
"""
    m, r = run_asm(src)
    assert r.signal_name == "SIGSEGV" and r.fault_addr == m.resolve("stuff") == r.rip


# ---------------------------------------------------------------- text patching


def test_text_write_while_running_is_seen_by_the_cpu():
    """A syscall handler patches the loop body mid-run; later iterations run the new
    bytes (the translation cache must be dropped, or the patch is never seen)."""
    src = """
_start:
    mov ecx, 6
    xor ebx, ebx
loop:
patch_me:
    add ebx, 1               # 83 c3 01: the immediate is patched to 0x10
    push rcx
    mov eax, 39
    syscall
    pop rcx
    dec ecx
    jnz loop
    mov edi, ebx
    mov eax, 231
    syscall
"""
    m = Machine.from_asm(src)
    site = m.resolve("patch_me")
    calls = []
    real = m.syscalls.table[39]

    def getpid_and_patch(task, regs, *args):
        calls.append(1)
        if len(calls) == 3:
            m.mem.text_poke(site + 2, b"\x10")
        return real(task, regs, *args)

    m.syscalls.register(39, getpid_and_patch)
    r = m.run(max_insns=10_000)
    assert r.exit_code == 3 * 1 + 3 * 0x10, f"expected 51, got {r.exit_code}"
    assert m.counters.text_writes == 1


# ---------------------------------------------------------------- registers


def test_pt_regs_has_the_21_kernel_slots_in_order():
    regs = Machine.from_guest("hello").read_regs()
    assert list(regs.pt_regs()) == list(PT_REGS_ORDER)
    assert regs.cs == 0x33 and regs.ss == 0x2B


def test_register_snapshot_is_one_native_call(monkeypatch):
    # the register file calls uc_reg_read_batch / uc_reg_write_batch through its own
    # unprototyped ctypes functions (regfile._read / regfile._write); the general
    # registers are read and written in the CPU state itself (regfile.window)
    calls = []
    m = Machine.from_guest("hello")
    rf = m.regfile
    assert rf.window is not None
    for attr, name in (("_read", "uc_reg_read_batch"), ("_write", "uc_reg_write_batch")):
        fn = getattr(rf, attr)

        def wrapped(*a, fn=fn, name=name):
            calls.append(name)
            return fn(*a)

        monkeypatch.setattr(rf, attr, wrapped)
    regs = m.read_regs()
    assert calls == ["uc_reg_read_batch"], "eflags, fs_base, gs_base in one call"
    calls.clear()
    regs.rax, regs.r9 = 5, 6
    m.write_regs(regs)
    assert calls == [], "general registers are stored in place"
    assert (m.task_reg_read(m.task, "rax"), m.task_reg_read(m.task, "r9")) == (5, 6)
    regs = m.read_regs()
    calls.clear()
    regs.eflags = 0x246
    m.write_regs(regs)
    assert calls == ["uc_reg_write_batch"], "eflags goes through Unicorn"
    calls.clear()
    m.write_regs(m.read_regs())  # nothing changed: nothing written
    assert calls == ["uc_reg_read_batch"]


def test_only_changed_registers_are_written_back():
    regs = PtRegs.from_dict({"rax": 1, "rbx": 2})
    regs.rbx = 3
    regs.rcx = 0
    assert regs.changed() == {1: 3}


# ---------------------------------------------------------------- memory map


def test_text_mapping_records_file_and_offset():
    m = Machine.from_guest("hello")
    start = m.resolve("_start")
    vma = m.mem.find_vma(start)
    assert vma.file is m.process.exe and vma.file.path == "guest:hello"
    assert vma.perms() == "r-xp"
    off = vma.offset_of(start)
    assert off == 0x1000 and vma.vaddr_of(off) == start
    assert m.process.exe.read(off, 1) == m.mem.read(start, 1)


def test_stack_and_data_mappings():
    m = Machine.from_guest("hello")
    names = {v.name: v for v in m.mem.vmas}
    assert names["[stack]"].perms() == "rw-p"
    msg = m.resolve("msg")
    assert m.mem.find_vma(msg).perms() == "rw-p"


def test_mprotect_and_mmap_from_the_guest():
    src = """
_start:
    xor edi, edi
    mov esi, 8192
    mov edx, 3               # PROT_READ|PROT_WRITE
    mov r10d, 0x22           # MAP_PRIVATE|MAP_ANONYMOUS
    mov r8, -1
    xor r9d, r9d
    mov eax, 9
    syscall
    mov r12, rax
    mov qword ptr [rax + 4096], 7
    mov rdi, r12
    mov esi, 4096
    mov edx, 1               # PROT_READ
    mov eax, 10
    syscall
    mov qword ptr [r12], 1   # now faults
    mov eax, 231
    syscall
"""
    m, r = run_asm(src)
    base = m.read_regs().r12
    assert r.signal_name == "SIGSEGV" and r.fault_addr == base
    assert m.mem.find_vma(base).perms() == "r--p"
    assert m.mem.find_vma(base + 4096).perms() == "rw-p"
    assert m.mem.read(base + 4096, 8) == (7).to_bytes(8, "little")


def test_get_unmapped_area_honours_a_free_hint():
    m = Machine.from_guest("hello")
    assert m.mem.get_unmapped_area(4096, hint=0x7FFFFFFFE000) == 0x7FFFFFFFE000
    m.mem.map(0x7FFFFFFFE000, 4096, PROT_READ | PROT_EXEC, "[uprobes]", special=True)
    other = m.mem.get_unmapped_area(4096, hint=0x7FFFFFFFE000)
    assert other != 0x7FFFFFFFE000 and m.mem.is_free(other, other + 4096)


# ---------------------------------------------------------------- limits

LOOP_FOREVER = "_start:\n    nop\nspin:\n    jmp spin\n"


def test_instruction_budget_stops_a_spinning_guest():
    m = Machine.from_asm(LOOP_FOREVER)
    r = m.run(max_insns=1000)
    assert r.reason == "budget" and r.insns == 1000 and r.rip == m.resolve("spin")


def test_wall_clock_timeout_stops_a_spinning_guest_without_budget():
    m = Machine.from_asm(LOOP_FOREVER)
    r = m.run(max_insns=None, timeout=0.3)
    assert r.reason == "timeout"


def test_stop_request_from_another_thread():
    import threading

    m = Machine.from_asm(LOOP_FOREVER)
    threading.Timer(0.2, m.stop).start()
    r = m.run(max_insns=None, timeout=30)
    assert r.reason == "stopped"


def test_run_after_exit_is_an_error():
    from emu import InputError

    m = Machine.from_guest("exit42")
    m.run()
    with pytest.raises(InputError):
        m.run()


def test_raise_on_signal_raises_documented_exception():
    from emu import GuestSignalError

    with pytest.raises(GuestSignalError) as ei:
        Machine.from_guest("segv").run(raise_on_signal=True)
    assert ei.value.result.signal_name == "SIGSEGV"
