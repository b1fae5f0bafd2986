"""The stepper's linespecs reach shared libraries, as gdb's do once a library is loaded:
``break malloc`` in a dynamic program stops in libc's malloc, ``break libc:free`` names
the file the way probe specs do."""

from __future__ import annotations

import pytest

from emu import Machine
from emu.frontends.stepper import Stepper, StepperError


@pytest.fixture
def at_main(build_c):
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe, argv=[exe, "3"])
    st = Stepper(m)
    st.break_at("main")
    ev = st.cont()
    assert ev.reason == "breakpoint", f"expected a stop at main, got {ev.reason}"
    return m, st


def test_break_on_a_library_function_by_name_stops_at_its_first_call(at_main):
    m, st = at_main
    bp = st.break_at("malloc")
    ev = st.cont()
    assert (ev.reason, st.rip) == ("breakpoint", bp.address), (
        f"expected a stop at malloc {bp.address:#x}, got {ev.reason} at {st.rip:#x}"
    )
    assert m.symbolize(st.rip) == "malloc in libc.so.6", m.symbolize(st.rip)
    assert st.regs().rdi == 32, f"first malloc of the loop is malloc(32), rdi={st.regs().rdi}"


def test_a_library_symbol_named_with_its_file_resolves_there(at_main):
    m, st = at_main
    addr = st.resolve("libc:free")
    label = m.symbolize(addr)  # free has aliases (cfree) at the same address
    assert label.endswith(" in libc.so.6") and "+" not in label, (
        f"expected a function start in libc.so.6, got {label!r}"
    )
    assert st.resolve("free") == addr, "bare and file-qualified names must agree"


def test_a_name_no_mapped_file_has_is_gdbs_error(at_main):
    _, st = at_main
    with pytest.raises(StepperError, match='Function "no_such_function_here" not defined.'):
        st.resolve("no_such_function_here")
