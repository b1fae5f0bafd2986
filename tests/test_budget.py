"""The instruction budget counts every instruction, those before each early stop too.

A guest that traps or yields between every few instructions leaves Unicorn early each
time; the budget must still end it (was: uncharged, so only the wall clock could).
"""

from __future__ import annotations

import time

from emu import Machine

YIELD_FOREVER = """
_start:
    mov eax, 24
    syscall
    jmp _start
"""

# SIGSEGV handler that returns to the faulting load: the fault repeats forever.
REFAULT_FOREVER = """
_start:
    lea rax, [rip + handler]
    mov [rip + act], rax
    mov rax, 0x04000000
    mov [rip + act + 8], rax
    lea rax, [rip + restorer]
    mov [rip + act + 16], rax
    mov edi, 11
    lea rsi, [rip + act]
    xor edx, edx
    mov r10, 8
    mov eax, 13
    syscall
fault:
    mov rax, [0]
    jmp fault
handler:
    ret
restorer:
    mov eax, 15
    syscall
.data
act:
    .quad 0, 0, 0, 0
"""


def test_a_guest_that_yields_forever_ends_at_its_budget():
    m = Machine.from_asm(YIELD_FOREVER)
    t = time.perf_counter()
    r = m.run(max_insns=3000, timeout=0)
    assert (r.reason, r.insns) == ("budget", 3000), r.describe()
    assert m.counters.syscalls[24] == 1000, f"3 instructions a round: {m.counters.syscalls[24]}"
    assert time.perf_counter() - t < 10


def test_a_signal_handler_that_refaults_forever_ends_at_its_budget():
    m = Machine.from_asm(REFAULT_FOREVER)
    r = m.run(max_insns=5000, timeout=0)
    assert r.reason == "budget", r.describe()
    assert 100 < m.counters.signals[11] < 5000, f"faults: {m.counters.signals[11]}"


def test_two_threads_yielding_forever_end_at_the_budget():
    src = """
_start:
    mov edi, 0x50f00
    xor esi, esi
    mov eax, 56
    syscall
spin:
    mov eax, 24
    syscall
    jmp spin
"""
    m = Machine.from_asm(src)
    r = m.run(max_insns=4000, timeout=0)
    assert (r.reason, r.insns) == ("budget", 4000), r.describe()
    assert len(m.tasks) == 2


def test_budget_is_exact_across_early_stops():
    """Each yield round is mov + syscall + jmp: instruction 3001 is round 1001's mov,
    3002 its syscall."""
    for budget, yields in ((3001, 1000), (3002, 1001)):
        m = Machine.from_asm(YIELD_FOREVER)
        m.run(max_insns=budget, timeout=0)
        assert m.counters.syscalls[24] == yields, f"budget {budget}: {m.counters.syscalls[24]} yields"


BRK_ONE_PAGE_AT_A_TIME = """
_start:
    xor edi, edi
    mov eax, 12
    syscall
    mov rbx, rax
again:
    add rbx, 4096
    mov rdi, rbx
    mov eax, 12
    syscall
    jmp again
"""


def test_a_brk_loop_stops_at_the_timeout_and_keeps_few_unicorn_regions():
    """Was: one Unicorn region per brk() call, each map (and the final teardown)
    slower than the last; a --timeout 45 run overran by 14 s.  Now guest memory is
    paged: the only Unicorn regions are the zones of the machine's RAM."""
    import gc

    t = time.perf_counter()
    m = Machine.from_asm(BRK_ONE_PAGE_AT_A_TIME)
    r = m.run(timeout=1.5)
    regions = len(list(m.uc.mem_regions()))
    heap = m.process.brk - m.process.brk_start
    del m
    gc.collect()
    took = time.perf_counter() - t
    assert r.reason == "timeout", r.describe()
    assert took < 3.5, f"run + teardown took {took:.1f} s for a 1.5 s timeout"
    assert regions <= 1 + heap // (64 << 20) + 1, f"{regions} Unicorn regions for a {heap >> 20} MiB heap"
