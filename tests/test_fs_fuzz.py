"""Nothing a guest passes to a file or path syscall crashes the emulator: random
arguments (paths from a pool of awkward names, random flags, modes, descriptors, bad
pointers) to every filesystem syscall return an errno or a value, never raise.  The
view is confined to a temporary directory (sysroot and grant), so nothing else can be
touched."""

from __future__ import annotations

import random

import pytest

from emu import Machine
from kernel_model.arch.x86.entry.syscall_64 import SYSCALL_NAMES
from kernel_model.arch.x86.entry.syscall_table import FILE_SYSCALLS as FsSyscalls

BUF = 0x700000
NAMES = [
    b"",
    b"/",
    b".",
    b"..",
    b"f",
    b"d",
    b"d/",
    b"d/x",
    b"lnk",
    b"loop",
    b"/proc/self/maps",
    b"/proc/self",
    b"/proc/self/exe",
    b"/sys",
    b"/sys/x",
    b"f/",
    b"../../..",
    b"new",
    b"d/new",
    b"x" * 300,
    b"a/" * 2100,
    b"/proc",
    b"/proc/1000",
    b"/proc/1000/maps/x",
    b"\xff\xfe",
]
FS_CALLS = sorted(nr for nr, name in SYSCALL_NAMES.items() if hasattr(FsSyscalls, "sys_" + name))


def machine(tmp_path):
    (tmp_path / "f").write_text("data")
    (tmp_path / "d").mkdir()
    (tmp_path / "lnk").symlink_to("f")
    (tmp_path / "loop").symlink_to("loop")
    m = Machine.from_asm("_start:\n    hlt\n", sysroot=str(tmp_path), grant_dirs=[str(tmp_path)], cwd="/")
    m.mem.map(BUF, 0x10000, 3, "fuzz")
    return m


def arg(rng, m, slot):
    kind = rng.random()
    if kind < 0.35:
        name = rng.choice(NAMES)
        addr = BUF + 0x100 * slot
        m.mem.write_user(addr, name[:0xFF] + b"\0")
        return addr
    if kind < 0.45:
        return BUF + 0x8000 + 0x800 * slot  # a writable buffer
    if kind < 0.55:
        return rng.choice([0, 1, 0xFFFFFFFFFFFFFFFF, 0xDEAD0000])  # bad pointers
    if kind < 0.75:
        return rng.choice([0, 1, 2, 3, 4, 0xFFFFFF9C, -100 & (2**64 - 1), 0x100, 0x200, 0x1000])
    return rng.getrandbits(rng.choice([8, 16, 32, 64]))


@pytest.mark.parametrize("seed", range(4))
def test_random_arguments_never_raise(tmp_path, seed):
    m = machine(tmp_path)
    rng = random.Random(seed)
    task, regs = m.task, m.regs
    for _ in range(1500):
        nr = rng.choice(FS_CALLS)
        args = [arg(rng, m, i) for i in range(6)]
        regs.rax = nr
        (regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9) = args
        m.syscalls.dispatch(task, regs)
        ret = regs.rax
        assert isinstance(ret, int), (SYSCALL_NAMES[nr], args, ret)
    assert len(m.process.files) <= 1024
