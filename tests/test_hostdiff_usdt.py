"""``uprobe-emu diff -e usdt:...``: USDT sites resolved as ``run -e usdt:`` registers
them (libbpf's attach offsets, the semaphore's file offset), the host probe written as
tracefs ``p:G/E /path:0xOFF(0xSEMA_OFF)`` so the host kernel raises the semaphore too.

Sites in the program (tests/c/usdt_sites.c: a plain one, both nop combos, a
semaphore-guarded one) and in a shared library the test builds (tests/c/usdt_lib.c, its
semaphore in the library's data, mapped after the probe exists).  The host comparisons
follow test_hostdiff.py's rule: skipped only when tracefs cannot be used.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_hostdiff import needs_tracefs, our_probes_left
from test_library_probes import usdt_lib  # noqa: F401 (fixture)

from emu.frontends import hostdiff
from kernel_model.errors import InputError
from kernel_model.fs.elf import load_elf_file

USDT_H_DIR = Path(__file__).resolve().parent.parent / "guest_programs" / "c"


@pytest.fixture(scope="module")
def sites(build_c):
    return build_c("usdt_sites.c", f"-I{USDT_H_DIR}", name="usdt_sites_dyn")


def _semaphore_offset(path: str, symbol: str) -> int:
    elf = load_elf_file(path)
    return elf.vaddr_to_offset(elf.resolve(symbol).value)


def test_a_guarded_site_resolves_with_its_semaphores_file_offset(sites):
    (probe,), _ = hostdiff.resolve_specs(sites, [f"usdt:{sites}:demo:guarded"])
    want = _semaphore_offset(sites, "demo_guarded_semaphore")
    assert (probe.kind, probe.ref_ctr_offset, probe.host_path) == ("p", want, None), probe


def test_a_library_site_goes_on_the_librarys_host_path(usdt_lib):
    exe, lib = usdt_lib
    (probe,), _ = hostdiff.resolve_specs(exe, [f"usdt:{lib}:libdemo:tick"])
    assert probe.host_path == lib and probe.ref_ctr_offset == _semaphore_offset(lib, "libdemo_tick_semaphore"), probe


@pytest.mark.parametrize("kernel, delta", [("6.18", 1), ("6.17", 0)])
def test_a_nop5_combo_site_is_attached_as_libbpf_does_on_the_profile(sites, kernel, delta):
    """On a kernel with the uprobe syscall libbpf probes the nop5 of ``nop; nop5``."""
    (probe,), _ = hostdiff.resolve_specs(sites, [f"usdt:{sites}:demo:combo5"], kernel=kernel)
    note = next(n for n in load_elf_file(sites).usdt if n.name == "combo5")
    assert probe.offset == load_elf_file(sites).vaddr_to_offset(note.pc) + delta, (probe, note)


def test_the_host_definition_carries_the_ref_ctr_offset():
    line = hostdiff.probe_command("p", "uemu_1_2", "ev0", "/usr/bin/a", 0x1167, "", 0x4010)
    assert line == "p:uemu_1_2/ev0 /usr/bin/a:0x1167(0x4010)", line


@pytest.mark.parametrize("ref", [-1, "0x10", 1.5, True])
def test_a_semaphore_offset_that_is_not_a_file_offset_is_refused(ref):
    with pytest.raises(InputError, match="semaphore offset"):
        hostdiff.probe_command("p", "uemu_1_2", "ev0", "/usr/bin/a", 0x1167, "", ref)


@needs_tracefs
@pytest.mark.parametrize("site", ["demo:plain", "demo:combo5", "demo:combo10", "demo:guarded"])
def test_program_usdt_sites_agree_with_the_host_kernel(sites, site):
    probes, _ = hostdiff.resolve_specs(sites, [f"usdt:{sites}:{site}"], kernel=hostdiff.host_profile_name())
    native = hostdiff.run_native(sites, [sites], probes, b"", 60)
    model = hostdiff.run_model(sites, [sites], probes, b"", hostdiff.host_profile_name(), 10**9)
    problems = hostdiff.compare(native, model)
    assert not problems, "\n".join(problems)
    enabled = 3 if site == "demo:guarded" else 0
    assert native.stdout == f"enabled={enabled}\n".encode(), native.stdout
    assert len(native.events) == 3, native.events
    assert our_probes_left() == []


@needs_tracefs
def test_a_library_semaphore_is_raised_on_both_sides(usdt_lib):
    exe, lib = usdt_lib
    probes, _ = hostdiff.resolve_specs(exe, [f"usdt:{lib}:libdemo:tick"], kernel=hostdiff.host_profile_name())
    native = hostdiff.run_native(exe, [exe, "4"], probes, b"", 60)
    model = hostdiff.run_model(exe, [exe, "4"], probes, b"", hostdiff.host_profile_name(), 10**9)
    problems = hostdiff.compare(native, model)
    assert not problems, "\n".join(problems)
    assert native.stdout == b"ticks=4 enabled=4\n" and len(native.events) == 4, (native.stdout, native.events)
    assert our_probes_left() == []


@needs_tracefs
def test_cli_diff_with_a_usdt_spec(usdt_lib):
    from cli_helpers import cli

    exe, lib = usdt_lib
    p = cli("diff", "-e", f"usdt:{lib}:libdemo:tick", "-e", "uprobe:libc:malloc", exe, "2")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.decode().startswith("agree: ") and ", 18 bytes of stdout, " in p.stdout.decode(), p.stdout
