"""sys_uretprobe's SIGILL paths as the 6.18 kernel takes them (measured on the host
with tests/c/uretprobe_sigill.c and a tracefs return probe on ``f``):

* called from ordinary code: SIGILL, and the syscall returns -1 (rax = -1 in the
  handler's context);
* entered from the trampoline with no return instance: uprobe_handle_trampoline
  queues SIGILL and returns, and sys_uretprobe goes on as usual - sp back at the
  saved registers, the ax slot rewritten with regs->ip (still the trampoline's
  check address), rip and rcx that address, rax the saved ax."""

from __future__ import annotations

import subprocess

import pytest
from test_hostdiff import needs_tracefs

from emu import Machine
from emu.frontends.host_tracefs import HostProbes, Tracefs
from emu.frontends.hostdiff import ResolvedProbe
from kernel_model.fs.elf import load_elf_file

# what 6.18 prints (the trampoline's syscall check address is base + 13)
EXPECTED = {
    "trampoline": "sig 4 rip=base+13 rax=0x1111 rcx=base+13 stack=[0x3333 0x2222 base+13]\n",
    "direct": "sig 4 code 128 rax=-1\n",
}


@pytest.fixture(scope="module")
def sigill_exe(build_c):
    exe = build_c("uretprobe_sigill.c", "-static")
    image = load_elf_file(exe)
    return exe, image.vaddr_to_offset(image.resolve("f").value)


def _model(exe: str, off: int, mode: str, kernel: str) -> str:
    m = Machine.from_elf(exe, argv=[exe, mode], kernel=kernel)
    m.uprobes.register((exe, off), ret_handler=lambda ctx: None)
    r = m.run(timeout=120)
    assert r.reason == "exit" and r.exit_code == 0, r.describe()
    return r.stdout.decode()


@pytest.mark.parametrize("mode", sorted(EXPECTED))
@pytest.mark.parametrize("kernel", ["6.11", "6.18"])
def test_sys_uretprobe_sigill_leaves_the_registers_and_stack_the_kernel_leaves(sigill_exe, mode, kernel):
    exe, off = sigill_exe
    got = _model(exe, off, mode, kernel)
    assert got == EXPECTED[mode], f"expected {EXPECTED[mode]!r}, got {got!r}"


@needs_tracefs
@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_the_host_kernel_takes_the_same_sigill_paths(sigill_exe, mode):
    exe, off = sigill_exe
    t = Tracefs()
    try:
        with HostProbes(t, [ResolvedProbe(f"{exe}:{off:#x}%return", "t", "r", off, 0, "")], exe):
            native = subprocess.run([exe, mode], capture_output=True, text=True, timeout=60).stdout
    finally:
        t.close()
    assert native == EXPECTED[mode], f"the host printed {native!r}, the model expects {EXPECTED[mode]!r}"
