"""The bench guest with N producer threads, each pinned to its own CPU.

The kernel's bench runs ``-p N`` producers, producer i pinned to CPU i (``-a``); each
calls the probed function in a loop.  ``bench_producers LOOP N THREADS`` does the same in
the model: the main thread maps THREADS stacks, ``clone``s THREADS - 1 threads
(``CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|PARENT_SETTID|CHILD_CLEARTID``), every thread
i (main is 0) calls ``sched_setaffinity(0, 16, {i})`` and runs N iterations of the
bench_trigger loop LOOP; main waits on each thread's tid word with ``FUTEX_WAIT`` until
the kernel clears it, then exits 0.  The loops and targets are bench_trigger's own
source.
"""

from __future__ import annotations

import functools

from emu.asm import asm_to_elf
from emu.frontends.bench.scenarios import attach
from emu.frontends.bench.threads import CLONE_THREAD, JOIN_THREADS
from emu.machine import Machine
from guest_programs import guest_source
from kernel_model.errors import InputError

GUEST = "bench_producers"
GUEST_PATH = "/guest/bench_producers"
ITERATIONS = 6  # per thread: the middle trigger is past every first-time path
MAX_THREADS = 128

_DRIVER = (
    """
_start:
    mov rsi, [rsp + 16]
    call parse_dec
    mov r14, rax
    mov rsi, [rsp + 24]
    call parse_dec
    mov r15, rax
    mov rsi, [rsp + 32]
    call parse_dec
    mov r13, rax
    mov rsi, r13
    shl rsi, 16
    xor edi, edi
    mov edx, 3
    mov r10d, 0x22
    mov r8, -1
    xor r9d, r9d
    mov eax, 9
    syscall
    mov rbp, rax
    sub rsp, 1024
    mov ebx, 1
clone_next:
    cmp rbx, r13
    jae run_main
"""
    + CLONE_THREAD.format(child="thread_start")
    + """    inc rbx
    jmp clone_next
thread_start:
    call producer
    xor edi, edi
    mov eax, 60
    syscall
run_main:
    xor ebx, ebx
    call producer
    mov ebx, 1
"""
    + JOIN_THREADS.format(done="bench_done")
    + """bench_done:
    mov eax, 231
    xor edi, edi
    syscall

# rbx = this producer's CPU: pin, then r15 iterations of loop r14
producer:
    sub rsp, 16
    mov qword ptr [rsp], 0
    mov qword ptr [rsp + 8], 0
    bts qword ptr [rsp], rbx
    xor edi, edi
    mov esi, 16
    mov rdx, rsp
    mov eax, 203
    syscall
    add rsp, 16
    mov r12, r15
    call dispatch
    ret
"""
)


@functools.cache
def producers_elf() -> bytes:
    """bench_trigger's loops and targets under the threaded driver above."""
    src = guest_source("bench_trigger")
    start = src.index("_start:")
    phase = src.index("# r12 iterations of the selected loop")
    return asm_to_elf(src[:start] + _DRIVER + src[phase:])[0]


def record_triggers(col, scen, threads: int, iterations: int = ITERATIONS) -> list[tuple]:
    """Run ``scen`` with ``threads`` pinned producers on a ``threads``-CPU machine under
    kernel column ``col`` and return, per CPU, the accesses of one steady-state trigger
    (the middle one)."""
    if not 1 <= threads <= MAX_THREADS:
        raise InputError(f"1..{MAX_THREADS} producer threads, not {threads}")
    m = Machine.from_bytes(
        producers_elf(),
        GUEST_PATH,
        argv=[GUEST, str(scen.loop), str(iterations), str(threads)],
        kernel=col.kernel,
        cpus=threads,
        **dict(col.overrides),
    )
    attach(m, scen, "program")
    log = m.record_accesses()
    assert log is not None  # recording was asked for
    r = m.run(max_insns=None, timeout=120)
    if r.reason != "exit" or r.exit_code != 0:
        raise InputError(f"bench_producers on {col.label}: guest ended: {r.describe()}")
    out = []
    for cpu in range(threads):
        trig = log.triggers(cpu)
        if len(trig) < iterations:
            raise InputError(
                f"bench_producers on {col.label}: CPU {cpu} made {len(trig)} triggers, "
                f"not {iterations} (is the producer pinned?)"
            )
        out.append(trig[len(trig) // 2])
    return out
