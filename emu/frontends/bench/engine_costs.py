"""``uprobe-emu bench --engine``: what the engine costs a guest, beside its targets.

* **Stores against loads.**  Two guests run the same 2,000,000-iteration loop, one with
  five loads of a data word per iteration, the other with five stores to it; the ratio
  of their run times is the price of a guest store relative to a load.  Unicorn 2.1.2
  and later keep every store on the slow path when the guest has no paging (a page
  never loses TLB_NOTDIRTY) and for any page an unmapped-memory hook covers: the target
  is stores <= 2x loads.
* **3,000 mappings.**  A guest maps 3,000 one-page anonymous regions at distinct
  addresses (``MAP_FIXED_NOREPLACE``, a page apart so none merges), writes a byte to
  each and exits; the whole machine (build, run, and the address space torn down) is
  timed.  Every Unicorn region makes the next map and unmap rebuild the memory view:
  the target is <= 1 s.

Each is the best of ``repeat`` runs in this process.

Every bench report that shows the engine line also gives two per-unit costs
(:func:`unit_costs`), each the best of ``repeat`` measurements:

* **per translated block**: two hook-free loops on bare Unicorn with the same
  instructions, one cut into 64 blocks by ``jmp`` to the next instruction, the other
  one block; the extra ns per block executed.
* **per syscall**: ``getpid`` in a loop through the model (``do_syscall_64``, the
  dispatch, the exit to user mode), in ns per round trip above the same loop on bare
  Unicorn with an empty native syscall hook (the floor, shown beside it).
"""

from __future__ import annotations

import functools
import time

from emu.asm import asm_to_elf
from emu.engine import baseline
from emu.machine import Machine
from kernel_model.errors import EmuError

LOOP_ITERATIONS = 2_000_000
MAPPINGS = 3_000
STORE_RATIO_TARGET = 2.0
MAPPINGS_SECONDS_TARGET = 1.0

_LOOP = """
_start:
    mov rcx, {n}
    lea rsi, [rip + buf]
again:
{body}
    dec rcx
    jnz again
    mov eax, 231
    xor edi, edi
    syscall
.data
buf:
    .quad 0, 0, 0, 0, 0, 0, 0, 0
"""
_LOADS = "\n".join(f"    mov rax, qword ptr [rsi + {8 * i}]" for i in range(5))
_STORES = "\n".join(f"    mov qword ptr [rsi + {8 * i}], rcx" for i in range(5))

_MAPS = """
_start:
    mov r12, 0x200000000
    mov r13, {n}
next:
    mov rdi, r12
    mov esi, 4096
    mov edx, 3
    mov r10d, 0x100022
    mov r8, -1
    xor r9d, r9d
    mov eax, 9
    syscall
    cmp rax, r12
    jne failed
    mov byte ptr [r12], 1
    add r12, 8192
    dec r13
    jnz next
    mov eax, 231
    xor edi, edi
    syscall
failed:
    mov eax, 231
    mov edi, 1
    syscall
"""


BLOCK_ITERATIONS = 100_000  # x baseline.BLOCKS_PER_ITERATION blocks
SYSCALLS = 20_000

_GETPID = """
_start:
    mov ebx, {n}
again:
    mov eax, 39
    syscall
    dec ebx
    jnz again
    mov eax, 231
    xor edi, edi
    syscall
"""


@functools.cache
def _elf(kind: str) -> bytes:
    if kind == "maps":
        return asm_to_elf(_MAPS.format(n=MAPPINGS))[0]
    if kind == "getpid":
        return asm_to_elf(_GETPID.format(n=SYSCALLS))[0]
    body = _LOADS if kind == "loads" else _STORES
    return asm_to_elf(_LOOP.format(n=LOOP_ITERATIONS, body=body))[0]


def _timed_run(kind: str) -> float:
    """Seconds of one run of guest ``kind``; for ``maps`` the machine's whole life."""
    t0 = time.perf_counter()
    m = Machine.from_bytes(_elf(kind), f"/bench/{kind}", argv=[kind])
    if kind != "maps":
        t0 = time.perf_counter()
    r = m.run(max_insns=None, timeout=300)
    if r.reason != "exit" or r.exit_code != 0:
        raise EmuError(f"engine guest {kind}: {r.describe()}")
    del m  # the address spaces go with the machine
    return time.perf_counter() - t0


def run_engine(repeat: int = 3, progress=None) -> dict:
    kinds = ("loads", "stores", "maps")
    task = progress.add_task("engine costs", total=len(kinds) * repeat) if progress else None
    best: dict[str, float] = {}
    for kind in kinds:
        for _ in range(repeat):
            dt = _timed_run(kind)
            best[kind] = min(best.get(kind, dt), dt)
            if progress:
                progress.advance(task)
    ratio = best["stores"] / best["loads"]
    per = 1e9 / LOOP_ITERATIONS
    return {
        "iterations": LOOP_ITERATIONS,
        "mappings": MAPPINGS,
        "repeat": repeat,
        "loads_seconds": best["loads"],
        "stores_seconds": best["stores"],
        "maps_seconds": best["maps"],
        "ns_per_load_iteration": best["loads"] * per,
        "ns_per_store_iteration": best["stores"] * per,
        "targets": [
            {
                "target": "guest stores / loads (same loop)",
                "value": ratio,
                "op": "<=",
                "limit": STORE_RATIO_TARGET,
                "ok": ratio <= STORE_RATIO_TARGET,
                "note": f"{best['loads'] * 1e3:.0f} ms loads, {best['stores'] * 1e3:.0f} ms stores, "
                f"{LOOP_ITERATIONS:,} iterations of 5",
            },
            {
                "target": f"{MAPPINGS:,} one-page mmaps and exit, seconds",
                "value": best["maps"],
                "op": "<=",
                "limit": MAPPINGS_SECONDS_TARGET,
                "ok": best["maps"] <= MAPPINGS_SECONDS_TARGET,
                "note": "build, run and tear down the machine",
            },
        ],
    }


def _timed_syscalls() -> float:
    """Seconds of the getpid guest's run alone (no build, no teardown)."""
    m = Machine.from_bytes(_elf("getpid"), "/bench/getpid", argv=["getpid"])
    t0 = time.perf_counter()
    r = m.run(max_insns=None, timeout=300)
    dt = time.perf_counter() - t0
    if r.reason != "exit" or r.exit_code != 0 or m.counters.syscalls[39] != SYSCALLS:
        raise EmuError(f"engine guest getpid: {r.describe()}")
    return dt


def unit_costs(repeat: int = 3) -> dict:
    """The engine's per-unit costs (module docstring): ``per_block_ns`` (extra ns per
    translated block executed, no hooks), ``per_syscall_ns`` (a model syscall round
    trip above the floor), ``syscall_floor_ns`` (bare Unicorn with an empty native
    syscall hook) and ``model_syscall_ns`` (the model's whole round trip)."""
    chained = straight = floor = model = float("inf")
    for _ in range(max(1, repeat)):
        c, s = baseline.block_loops(BLOCK_ITERATIONS)
        chained, straight = min(chained, c), min(straight, s)
        floor = min(floor, baseline.syscall_hook_loop(SYSCALLS))
        model = min(model, _timed_syscalls())
    blocks = BLOCK_ITERATIONS * baseline.BLOCKS_PER_ITERATION
    floor_ns, model_ns = floor * 1e9 / SYSCALLS, model * 1e9 / SYSCALLS
    return {
        "per_block_ns": (chained - straight) * 1e9 / blocks,
        "blocks": blocks,
        "per_syscall_ns": model_ns - floor_ns,
        "syscall_floor_ns": floor_ns,
        "model_syscall_ns": model_ns,
        "syscalls": SYSCALLS,
        "repeat": max(1, repeat),
    }
