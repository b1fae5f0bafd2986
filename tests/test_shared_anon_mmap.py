"""MAP_SHARED | MAP_ANONYMOUS (kernel_model/mm/mmap.py) as Linux answers it:
tests/c/shared_anon.c runs natively first and in the model; each case's line must match.
Writes cross fork both ways (pages touched before the fork and a page first touched by
the child after it), a private mapping stays private, mprotect keeps the pages shared,
anonymous MAP_SHARED_VALIDATE is EINVAL, and maps shows ``rw-s /dev/zero (deleted)``."""

from __future__ import annotations

import subprocess

import pytest

from emu import Machine

CASES = [
    "zeroed",
    "maps",
    "child sees",
    "parent sees",
    "parent sees late page",
    "private stays",
    "after mprotect",
    "validate unknown flag",
    "validate",
    "no type",
]


@pytest.fixture(scope="module")
def outputs(build_c):
    exe = build_c("shared_anon.c")
    native = subprocess.run([exe], capture_output=True, timeout=60)
    assert native.returncode == 0, native.stderr
    r = Machine.from_elf(exe, argv=[exe]).run(timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return native.stdout.decode().splitlines(), r.stdout.decode().splitlines()


@pytest.mark.parametrize("case", CASES)
def test_shared_anonymous_case_answers_as_the_kernel(outputs, case):
    native, model = outputs
    want = [ln for ln in native if ln.split(":")[0] == case]
    got = [ln for ln in model if ln.split(":")[0] == case]
    assert want and got == want, f"expected {want}, got {got}"


def test_a_checkpoint_restore_keeps_the_pages_shared():
    """Restoring a checkpoint writes a shared mapping's bytes back into the frames the
    processes share (a private page shared after fork is copied instead): a write by the
    child after the restore is still the parent's."""
    from emu.replay.checkpoint import restore_checkpoint, take_checkpoint

    m = Machine.from_elf("/bin/true")
    task, sc = m.task, m.syscalls
    addr = sc.sys_mmap(task, None, 0, 4096, 3, 0x21, 0xFFFFFFFF, 0)
    task.process.mem.write_user(addr, b"before")
    regs, _ = task.process.cpu_regs.syscall_entry()
    pid = sc.sys_fork(task, regs)
    child = next(p for p in m.processes if p.pid == pid)
    cp = take_checkpoint(m)
    task.process.mem.write_user(addr, b"after!")
    restore_checkpoint(m, cp)
    restored = task.process.mem.read(addr, 6)
    child.mem.write_user(addr, b"child!")
    assert (restored, task.process.mem.read(addr, 6)) == (b"before", b"child!")
