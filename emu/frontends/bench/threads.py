"""``uprobe-emu bench --threads``: the cost of guest threads.

The same work W (rounds of a counting loop with no syscalls) runs on the main thread,
on one thread created with a raw ``clone`` (main waits in ``futex``, as
``pthread_join`` does) and split over four threads; each configuration is timed
``--repeat`` times (best run kept) and the report prints the ratios with the target:
W on 4 threads takes at most 2x W on 1 thread.  Emulated instructions per second and
the scheduler's slices (emu_start calls) and switches are shown beside the times.
"""

from __future__ import annotations

import functools
import time

from rich.table import Table

from emu.asm import asm_to_elf
from emu.frontends.bench.report import JsonReport
from emu.machine import Machine
from kernel_model.errors import InputError

GUEST_PATH = "/bench/threads"
THREADS = (0, 1, 4)  # 0: the main thread does the work
TARGET = 2.0  # W on 4 threads / W on 1 thread
INSNS_PER_ROUND = 6  # the loop body below
DEFAULT_ROUNDS, QUICK_ROUNDS = 20_000_000, 2_000_000

# Thread rbx of a group: cloned on the (rbx + 1)th 64 KiB stack of the area at rbp, its tid
# word at [rsp + rbx*8] (cleared by the kernel at its exit: CLONE_CHILD_CLEARTID); the
# child goes on at ``child``.
CLONE_THREAD = """    mov qword ptr [rsp + rbx*8], 0
    lea rsi, [rbx + 1]
    shl rsi, 16
    add rsi, rbp
    lea rdx, [rsp + rbx*8]
    mov r10, rdx
    xor r8d, r8d
    mov edi, 0x350f00
    mov eax, 56
    syscall
    test rax, rax
    jz {child}
"""
# Wait, FUTEX_WAIT on each tid word in turn, until threads rbx..r13-1 have exited (the
# kernel zeroes the word and wakes it); then go on at ``done``.
JOIN_THREADS = """wait_next:
    cmp rbx, r13
    jae {done}
wait_again:
    mov edx, dword ptr [rsp + rbx*8]
    test edx, edx
    jz wait_done
    lea rdi, [rsp + rbx*8]
    xor esi, esi
    xor r10d, r10d
    mov eax, 202
    syscall
    jmp wait_again
wait_done:
    inc rbx
    jmp wait_next
"""

# threads N W: W rounds split over N threads (N = 0: the main thread does them all).
# Threads: clone(CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|PARENT_SETTID|CHILD_CLEARTID)
# on 64 KiB mmap'd stacks; main waits on each tid word with FUTEX_WAIT until the
# kernel clears it at the thread's exit.
_SOURCE = (
    """
_start:
    mov r12, [rsp]
    xor r13, r13
    mov r14, 1000000
    cmp r12, 2
    jb go
    mov rsi, [rsp + 16]
    call parse
    mov r13, rax
    cmp r12, 3
    jb go
    mov rsi, [rsp + 24]
    call parse
    mov r14, rax
go:
    test r13, r13
    jnz spawn
    mov rcx, r14
    call work
    jmp done
spawn:
    mov rax, r14
    xor edx, edx
    div r13
    mov r15, rax
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
    sub rsp, 128
    xor ebx, ebx
clone_next:
    cmp rbx, r13
    jae wait_all
"""
    + CLONE_THREAD.format(child="thread")
    + """    inc rbx
    jmp clone_next
thread:
    mov rcx, r15
    call work
    xor edi, edi
    mov eax, 60
    syscall
wait_all:
    xor ebx, ebx
"""
    + JOIN_THREADS.format(done="done")
    + """done:
    xor edi, edi
    mov eax, 231
    syscall

work:
    xor eax, eax
    xor edx, edx
    test rcx, rcx
    jz work_done
work_loop:
    mov rsi, rax
    xor rsi, rcx
    add rdx, rsi
    inc rax
    cmp rax, rcx
    jne work_loop
work_done:
    ret

parse:
    xor eax, eax
parse_digit:
    movzx ecx, byte ptr [rsi]
    test cl, cl
    jz parse_done
    sub ecx, 48
    imul rax, rax, 10
    add rax, rcx
    inc rsi
    jmp parse_digit
parse_done:
    ret
"""
)


@functools.cache
def threads_elf() -> bytes:
    return asm_to_elf(_SOURCE)[0]


def run_once(threads: int, rounds: int, seed: int = 0) -> dict:
    """One timed run (machine creation included: it is the same for all)."""
    t0 = time.perf_counter()
    m = Machine.from_bytes(threads_elf(), GUEST_PATH, argv=["threads", str(threads), str(rounds)], seed=seed)
    r = m.run(timeout=600)
    seconds = time.perf_counter() - t0
    if (r.reason, r.exit_code) != ("exit", 0):
        raise RuntimeError(f"threads guest: {r.describe()}")
    return {"seconds": seconds, "slices": sum(t.slices for t in m.all_tasks), "switches": len(m.scheduler.history)}


def measure(rounds: int, repeat: int) -> dict:
    """Best of ``repeat`` runs per configuration, and the ratios."""
    rows = []
    for n in THREADS:
        runs = [run_once(n, rounds) for _ in range(repeat)]
        best = min(runs, key=lambda x: x["seconds"])
        rows.append(
            {
                "threads": n,
                **best,
                "samples": [x["seconds"] for x in runs],
                "mips": rounds * INSNS_PER_ROUND / best["seconds"] / 1e6,
            }
        )
    by = {r["threads"]: r["seconds"] for r in rows}
    ratio = by[4] / by[1]
    return {
        "rounds": rounds,
        "repeat": repeat,
        "rows": rows,
        "one_thread_vs_main": by[1] / by[0],
        "four_vs_one": ratio,
        "target": {
            "target": "W on 4 threads / W on 1 thread",
            "value": ratio,
            "op": "<=",
            "limit": TARGET,
            "ok": ratio <= TARGET,
        },
    }


def render(result: dict, console) -> None:
    t = Table(
        title=f"threads: {result['rounds']:,} loop rounds split over N threads (best of {result['repeat']})",
        title_justify="left",
    )
    for h in ("configuration", "seconds", "M insns/s", "emu_starts", "switches"):
        t.add_column(h, justify="left" if h == "configuration" else "right")
    for r in result["rows"]:
        name = "main thread" if r["threads"] == 0 else f"{r['threads']} thread{'s' * (r['threads'] > 1)}"
        t.add_row(name, f"{r['seconds']:.3f}", f"{r['mips']:.0f}", str(r["slices"]), str(r["switches"]))
    console.print(t)
    tg = result["target"]
    console.print(f"1 thread / main thread: {result['one_thread_vs_main']:.2f}x")
    console.print(
        f"{tg['target']}: {tg['value']:.2f}x (target {tg['op']} {tg['limit']:g}): {'met' if tg['ok'] else 'MISSED'}"
    )


def cmd_threads(args, out) -> int:
    """``bench --threads`` (``--repeat``, ``--quick``, ``--iterations`` = rounds, ``--json``)."""
    if args.repeat is not None and args.repeat < 1:
        raise InputError("--repeat must be at least 1")
    rounds = args.iterations or (QUICK_ROUNDS if args.quick else DEFAULT_ROUNDS)
    repeat = args.repeat or (1 if args.quick else 3)
    with JsonReport(args.json) as json_out:
        result = measure(rounds, repeat)
        render(result, out)
        json_out.write({"schema": "uprobe-emu.bench-threads/1", **result})
    return 0
