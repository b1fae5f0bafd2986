"""Seeded ELF mutations: every one loads cleanly or is refused with an EmuError, runs
within its limits, and leaves the host's memory bounded - never a traceback or a hang.

The base guests touch the machine's memory paths (brk, mmap, mprotect, munmap, fork,
write); mutations hit the ELF and program headers hardest (where the loader decides
what to map), with values chosen to overflow: 0, all ones, 2^63, page-size edges.
"""

from __future__ import annotations

import random
import struct
import time

import pytest

from emu import Machine
from emu.asm import asm_to_elf
from kernel_model.errors import EmuError

SEEDS = 300
INSN_BUDGET = 20_000
RUN_TIMEOUT = 2.0
MAX_MEMORY = 256 << 20

GUEST = """
_start:
    xor edi, edi
    mov eax, 12
    syscall
    mov rdi, rax
    add rdi, 0x20000
    mov eax, 12
    syscall
    xor edi, edi
    mov rsi, 0x100000
    mov edx, 3
    mov r10, 0x22
    mov r8, -1
    xor r9, r9
    mov eax, 9
    syscall
    mov rbx, rax
    mov byte ptr [rbx], 1
    mov rdi, rbx
    mov esi, 0x1000
    mov edx, 1
    mov eax, 10
    syscall
    mov eax, 57
    syscall
    test rax, rax
    jz out
    mov eax, 61
    mov rdi, -1
    xor esi, esi
    xor edx, edx
    xor r10, r10
    syscall
out:
    mov eax, 1
    mov edi, 1
    lea rsi, [rip + _start]
    mov edx, 64
    syscall
    mov eax, 231
    xor edi, edi
    syscall
.data
    .quad 1, 2, 3, 4
"""

INTERESTING = (
    0,
    1,
    0xFFF,
    0x1000,
    0x7FFFFFFF,
    0xFFFFFFFF,
    0x100000000,
    1 << 47,
    1 << 63,
    (1 << 64) - 1,
    (1 << 64) - 0x1000,
    0x7FFFFFFFF000,
)


def rss_mb() -> int:
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) // 1024


def _put(data: bytearray, fmt: str, off: int, value: int) -> None:
    if off + struct.calcsize(fmt) <= len(data):
        struct.pack_into(fmt, data, off, value & ((1 << 8 * struct.calcsize(fmt)) - 1))


def mutate(base: bytes, rng: random.Random) -> bytes:
    data = bytearray(base)
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phnum = struct.unpack_from("<H", data, 56)[0]
    for _ in range(rng.randint(1, 4)):
        kind = rng.random()
        if kind < 0.5 and phnum:
            # a program header field: p_offset, p_vaddr, p_filesz, p_memsz, p_align, p_flags
            ph = phoff + 56 * rng.randrange(phnum)
            off = rng.choice((4, 8, 16, 16, 16, 32, 40, 40, 40, 40, 48))
            size = 4 if off == 4 else 8
            value = rng.choice(INTERESTING) if rng.random() < 0.7 else rng.getrandbits(8 * size)
            _put(data, "<I" if size == 4 else "<Q", ph + off, value)
        elif kind < 0.7:
            # an ELF header field: e_entry, e_phoff, e_shoff, e_phnum, e_shnum ...
            off, fmt = rng.choice(
                ((24, "<Q"), (32, "<Q"), (40, "<Q"), (54, "<H"), (56, "<H"), (58, "<H"), (60, "<H"), (62, "<H"))
            )
            _put(data, fmt, off, rng.choice(INTERESTING))
        elif kind < 0.95 and data:
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif data:
            del data[rng.randrange(len(data)) :]
    return bytes(data)


@pytest.fixture(scope="module")
def base_elf() -> bytes:
    return asm_to_elf(GUEST)[0]


def test_base_guest_runs(base_elf):
    r = Machine.from_bytes(base_elf, "fuzz", max_memory=MAX_MEMORY).run(max_insns=INSN_BUDGET)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()


def test_seeded_elf_mutations_never_crash_hang_or_grow_the_host(base_elf):
    start, rss0 = time.perf_counter(), rss_mb()
    outcomes: dict[str, int] = {}
    for seed in range(SEEDS):
        data = mutate(base_elf, random.Random(seed))
        t = time.perf_counter()
        try:
            m = Machine.from_bytes(data, f"fuzz{seed}", max_memory=MAX_MEMORY)
            r = m.run(max_insns=INSN_BUDGET, timeout=RUN_TIMEOUT)
            outcome = r.reason
        except EmuError:
            outcome = "refused"
        took = time.perf_counter() - t
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        assert took < RUN_TIMEOUT + 3, f"seed {seed}: {outcome} after {took:.1f} s"
        grew = rss_mb() - rss0
        assert grew < 600, f"seed {seed}: host RSS grew by {grew} MB"
    assert time.perf_counter() - start < 60, f"{SEEDS} mutations took {time.perf_counter() - start:.0f} s"
    assert outcomes.get("refused", 0) and outcomes.get("exit", 0), outcomes
