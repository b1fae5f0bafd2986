"""The address space of a dynamic program is the host kernel's with ASLR off: the PIE at
ELF_ET_DYN_BASE, ld.so just below mmap_base, [vvar]/[vdso] below it, the libraries
where ld.so's mmap(NULL) calls land, brk right after the program, the stack at
STACK_TOP_MAX - so every pointer the program sees equals a ``setarch -R`` native run's."""

from __future__ import annotations

import pytest
from layout_helpers import run_native_norandom

from emu import Machine

ENV = ["A=1", "LANG=C"]
# The emulated CPU is not the host's: CPUID-derived auxv entries differ by design.
CPU_DEPENDENT = {"auxv 16", "auxv 51"}  # AT_HWCAP, AT_MINSIGSTKSZ


def _without_cpu(lines: list[str]) -> list[str]:
    return [ln for ln in lines if " ".join(ln.split()[:2]) not in CPU_DEPENDENT]


def _emulated(exe: str, *args: str) -> list[str]:
    r = Machine.from_elf(exe, argv=[exe, *args], env=ENV, uid=0, gid=0).run(timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return r.stdout.decode().splitlines()


def _native(exe: str, *args: str) -> list[str]:
    native = run_native_norandom([exe, *args], ENV)
    assert native.returncode == 0, native.stderr
    return native.stdout.decode().splitlines()


@pytest.fixture(scope="module")
def layout_exe(build_c):
    return build_c("layout.c", name="layout_dynamic")


@pytest.mark.parametrize(
    "flags", [(), ("-Wl,-z,max-page-size=0x200000",), ("-no-pie",)], ids=["pie", "pie-2MiB-aligned", "no-pie"]
)
def test_start_up_pointers_equal_a_native_run_without_randomization(build_c, flags):
    """auxv (kernel order, every address), argv/envp/stack, sbrk, main, malloc (brk and
    mmap'ed), a libc function: all as natively - for a PIE (ELF_ET_DYN_BASE), a PIE whose
    segments ask for 2 MiB alignment (the base aligned down to it) and an ET_EXEC."""
    exe = build_c("layout.c", *flags, name="layout_dynamic" + "".join(f[-4:] for f in flags))
    native, model = _without_cpu(_native(exe)), _without_cpu(_emulated(exe))
    assert model == native, "\n".join(["expected (native):", *native, "got (model):", *model])


def _maps(lines: list[str]) -> list[str]:
    """The maps lines, but the stack (the model maps 8 MiB at once, the kernel grows
    it on faults) and [vsyscall] (not modeled: glibc never uses it)."""
    return [ln for ln in lines if "-" in ln.split(" ", 1)[0] and not ln.endswith(("[stack]", "[vsyscall]"))]


def test_proc_self_maps_equals_a_native_run_without_randomization(layout_exe):
    """Every mapping but the stack: addresses, permissions, offsets, device, inode and
    path, libraries and the vDSO included."""
    native, model = _maps(_native(layout_exe, "maps")), _maps(_emulated(layout_exe, "maps"))
    assert model == native, "\n".join(["expected (native):", *native, "got (model):", *model])


def test_stack_top_is_stack_top_max(layout_exe):
    m = Machine.from_elf(layout_exe, argv=[layout_exe], env=ENV)
    stack = next(v for v in m.mem.vmas if v.name == "[stack]")
    assert stack.end == 0x7FFFFFFFF000, f"expected the stack to end at 0x7ffffffff000, got {stack.end:#x}"


def test_a_static_guest_keeps_its_layout(build_c):
    """Static programs keep the emulator's historic stack (below the XOL hint page) and
    get no vDSO (their start-up is unchanged)."""
    exe = build_c("hello.c", "-static")
    m = Machine.from_elf(exe)
    stack = next(v for v in m.mem.vmas if v.name == "[stack]")
    assert (stack.end, 33 in m.auxv) == (0x7FFFFFFDE000, False), (hex(stack.end), m.auxv)


def test_an_anonymous_mmap_just_below_another_merges_with_it():
    """Top-down mmaps land just below the previous one; vma_merge makes them one VMA
    (one maps line), as malloc's big chunks next to ld.so's anonymous pages show."""
    m = Machine.from_asm("_start:\n    mov eax, 231\n    syscall\n")
    first = m.syscalls.sys_mmap(m.task, None, 0, 0x3000, 3, 0x22, -1, 0)
    second = m.syscalls.sys_mmap(m.task, None, 0, 0x2000, 3, 0x22, -1, 0)
    lines = [ln for ln in m.mem.maps().splitlines() if ln.startswith(f"{second:08x}")]
    assert (second, lines) == (first - 0x2000, [f"{second:08x}-{first + 0x3000:08x} rw-p 00000000 00:00 0 "]), (
        m.mem.maps()
    )
