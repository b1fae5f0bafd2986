"""The vDSO: the image the project builds (kernel_model/arch/x86/entry/vdso.py) exports the kernel's symbols at
version LINUX_2.6, is mapped as [vdso] where AT_SYSINFO_EHDR says, glibc finds it, and
every time call of a dynamic program goes through it onto the machine's one clock."""

from __future__ import annotations

import errno
import io
from collections import Counter

import pytest
from elftools.elf.elffile import ELFFile
from test_memory_limits import run_syscall

from emu import Machine
from kernel_model.arch.x86.entry.vdso import VDSO_SIZE, linux_version_code, vdso_image
from kernel_model.trace import events as ev

CLOCK_CALLS = {228: "clock_gettime", 96: "gettimeofday", 201: "time", 229: "clock_getres"}


def _exports(image: bytes) -> set[tuple[str, str, str, str]]:
    """(name, type, bind, version) of every defined .dynsym symbol."""
    elf = ELFFile(io.BytesIO(image))
    dynsym, versym = elf.get_section_by_name(".dynsym"), elf.get_section_by_name(".gnu.version")
    verdef = elf.get_section_by_name(".gnu.version_d")
    names = {vd["vd_ndx"]: next(aux).name for vd, aux in verdef.iter_versions()}
    out = set()
    for i, sym in enumerate(dynsym.iter_symbols()):
        if sym.name and sym["st_shndx"] != "SHN_UNDEF":
            ver = names.get(versym.get_symbol(i)["ndx"] if isinstance(versym.get_symbol(i)["ndx"], int) else 0, "")
            out.add((sym.name, sym["st_info"]["type"], sym["st_info"]["bind"], ver))
    return out


def _host_vdso() -> bytes:
    with open("/proc/self/maps") as f:
        line = next(ln for ln in f if ln.rstrip().endswith("[vdso]"))
    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
    with open("/proc/self/mem", "rb") as mem:
        mem.seek(lo)
        return mem.read(hi - lo)


def test_the_image_exports_the_host_kernels_symbols_and_versions():
    """Every symbol of the host's vDSO, same type, binding and version - but
    __vdso_getrandom/getrandom (6.11+; glibc then takes the getrandom syscall)."""
    host = {s for s in _exports(_host_vdso()) if "getrandom" not in s[0]}
    ours = _exports(vdso_image())
    assert ours == host, f"expected {sorted(host)}, got {sorted(ours)}"


def test_the_image_is_a_soname_d_shared_object_of_the_hosts_size():
    elf = ELFFile(io.BytesIO(vdso_image()))
    soname = next(t.soname for t in elf.get_section_by_name(".dynamic").iter_tags() if t.entry.d_tag == "DT_SONAME")
    host_size = len(_host_vdso())
    assert (elf["e_type"], soname, len(vdso_image()), VDSO_SIZE) == ("ET_DYN", "linux-vdso.so.1", host_size, host_size)


@pytest.fixture(scope="module")
def clock_exe(build_c):
    return build_c("vdso_clock.c", name="vdso_clock_dynamic")


def _run_counting(exe: str, n: int):
    m = Machine.from_elf(exe, argv=[exe, str(n)])
    calls: Counter = Counter()

    def on_syscall(e):
        if e.nr in CLOCK_CALLS or e.nr == 309:
            vma = m.mem.find_vma(e.rip)
            calls[(e.nr, vma.name if vma else None)] += 1

    m.events.subscribe(on_syscall, ev.Syscall)
    r = m.run(timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return m, r, calls


def test_the_mapped_vdso_is_the_image_at_at_sysinfo_ehdr(clock_exe):
    m = Machine.from_elf(clock_exe)
    vdso = next(v for v in m.mem.vmas if v.name == "[vdso]")
    image = vdso_image(linux_version_code(m.profile.release))
    assert (m.auxv[33], m.mem.read(vdso.start, vdso.size)) == (vdso.start, image), (
        f"AT_SYSINFO_EHDR {m.auxv.get(33, 0):#x}, [vdso] at {vdso.start:#x}"
    )


def test_glibc_time_calls_go_through_the_vdso(clock_exe):
    """n calls of each: exactly n syscalls each, every one issued from inside [vdso]
    (none from libc's own syscall stubs), getcpu once."""
    n = 7
    _, _, calls = _run_counting(clock_exe, n)
    expected = {(nr, "[vdso]"): n for nr in CLOCK_CALLS} | {(309, "[vdso]"): 1}
    assert dict(calls) == expected, f"expected {expected}, got {dict(calls)}"


def test_the_vdso_answers_from_the_virtual_clock(clock_exe):
    """Each clock read advances the virtual clock 1 us: after 5 rounds of (clock_gettime,
    gettimeofday, time) the last values are reads 13, 14 and 15 of the machine's clock
    (CLOCK_MONOTONIC counts from boot, the others from 2026-01-01)."""
    _, r, _ = _run_counting(clock_exe, 5)
    assert r.stdout.decode().splitlines() == [
        "vdso=0x7ffff7fc8000 res=0.004000000 getcpu=0 cpu=0 node=0",
        "mono=0.000013000 tv=1767225600.000014 time=1767225600",
    ], r.stdout


@pytest.mark.parametrize(
    "clk, expected",
    [(1, 0), (5, 0), (6, 0), (99, -errno.EINVAL)],
    ids=["monotonic", "realtime-coarse", "monotonic-coarse", "bad-clock"],
)
def test_clock_getres_the_vdso_fallback(clk, expected):
    assert run_syscall(229, clk, 0) == expected


@pytest.mark.parametrize("release, code", [("6.18.0", 0x061200), ("6.1.55-uprobe", 0x060137), ("7.2", 0x070200)])
def test_the_linux_note_carries_the_profiles_version(release, code):
    elf = ELFFile(io.BytesIO(vdso_image(linux_version_code(release))))
    note = next(elf.get_section_by_name(".note").iter_notes())
    assert (note["n_name"], note["n_type"], note["n_descdata"]) == ("Linux", 0, code.to_bytes(4, "little")), note


def test_getcpu_says_cpu_0():
    assert run_syscall(309, 0, 0, 0) == 0
