"""The register-test kit: the pytest plugin's fixtures, helpers and failure message."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu.frontends.testing import Regs

pytest_plugins = ["pytester"]

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "test_my_probe.py"


def test_the_readme_example_file_passes(pytester):
    pytester.copy_example(str(EXAMPLE))
    result = pytester.runpytest("-q")
    result.assert_outcomes(passed=3)


def test_plugin_is_registered_as_a_pytest11_entry_point():
    from importlib.metadata import entry_points

    eps = [ep for ep in entry_points(group="pytest11") if ep.value == "emu.frontends.testing"]
    assert eps, "pip install . registers the pytest11 entry point 'uprobe_emu'"


def test_failure_prints_only_differing_registers_in_gdb_layout(pytester):
    pytester.makepyfile(
        test_regs="""
        from emu.frontends.testing import snapshot

        def test_differs(emu_asm):
            a = emu_asm("_start:\\n    mov rax, 5\\n    mov eax, 231\\n    syscall\\n")
            b = emu_asm("_start:\\n    mov rax, 7\\n    mov eax, 231\\n    syscall\\n")
            from emu.frontends.testing import run_to
            ra = run_to(a, a.resolve("_start") + 7)
            rb = run_to(b, b.resolve("_start") + 7)
            assert ra == rb
    """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "register snapshots differ in 1 register(s) (rax)" in out
    assert "  - rax            0x5                 5" in out
    assert "  + rax            0x7                 7" in out
    assert "rbx " not in out.split("register snapshots differ")[1].split("test_regs.py")[0]


def test_expect_signal_failure_message(pytester):
    pytester.makepyfile(
        test_sig="""
        from emu.frontends.testing import expect_signal

        def test_wrong(emu_machine):
            expect_signal(emu_machine(guest="exit42"), "SIGSEGV")
    """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    assert "expected the guest to die of SIGSEGV, but it exited with status 42" in result.stdout.str()


def test_emu_machine_needs_exactly_one_source(emu_machine):
    with pytest.raises(TypeError):
        emu_machine()
    with pytest.raises(TypeError):
        emu_machine(guest="hello", asm="_start:\n")


def test_regs_compares_against_a_partial_dict():
    r = Regs({"rax": 1, "rbx": 2})
    assert r == {"rax": 1}
    assert r != {"rax": 2}
    assert r.diff({"rax": 3, "rbx": 2}) == {"rax": (1, 3)}
    assert r.without("rbx") == Regs({"rax": 1})


def test_gdb_layout_matches_gdb_columns():
    r = Regs(
        {
            "rax": 0x4A16F0,
            "rdx": 0x1FB143BF0DDE9675,
            "rsp": 0x7FFFFFFFE5F0,
            "eflags": 0x206,
            "rip": 0x401005,
            "cs": 0x33,
            "r9": 2**64 - 1,
        },
        symbolize=lambda a: "_init+0x5" if a == 0x401005 else None,
    )
    # lines as gdb 13 prints them (measured on this machine)
    assert r.gdb().splitlines() == [
        "rax            0x4a16f0            4855536",
        "rdx            0x1fb143bf0dde9675  2283680973904057973",
        "rsp            0x7fffffffe5f0      0x7fffffffe5f0",
        "r9             0xffffffffffffffff  -1",
        "rip            0x401005            0x401005 <_init+5>",
        "eflags         0x206               [ PF IF ]",
        "cs             0x33                51",
    ]
