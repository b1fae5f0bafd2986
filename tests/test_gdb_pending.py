"""gdb's own pending breakpoints through the stub: a breakpoint on a function of a
library the guest dlopen()s later is pending, resolves at ld.so's library event (the
svr4 library list read again) and hits in the library, which gdb reads through vFile."""

from __future__ import annotations

import re

from test_gdbstub import gdb_session
from test_stepper_catch_pending import dlopen_guest  # noqa: F401 (fixture)

from emu import Machine


def test_a_pending_breakpoint_in_a_dlopened_library_hits(dlopen_guest):
    prog, lib = dlopen_guest
    m = Machine.from_elf(prog, argv=[prog, lib])
    out = gdb_session(
        m,
        prog,
        [
            "set debug-file-directory /nonexistent",
            "set breakpoint pending on",
            "break pend_func",
            "info breakpoints",
            "continue",
            "bt 2",
            "info symbol $pc",
            "kill",
        ],
    )
    assert 'Function "pend_func" not defined.' in out, out
    assert "Breakpoint 1 (pend_func) pending." in out, out
    assert re.search(r"^1 +breakpoint +keep y +<PENDING> +pend_func$", out, re.M), out
    stop = re.search(rf"^Breakpoint 1, (0x[0-9a-f]+) in pend_func \(\) from target:{re.escape(lib)}$", out, re.M)
    assert stop, out
    assert re.search(r"^#1  0x[0-9a-f]+ in main \(\)$", out, re.M), out
    assert f"pend_func in section .text of target:{lib}" in out, out
    base = min(v.start for v in m.mem.vmas if v.file is not None and v.name == lib)
    want = base + Machine.from_elf(prog).mapped_file(lib).elf.resolve("pend_func").value
    assert int(stop.group(1), 16) == want, f"stopped at {stop.group(1)}, pend_func is at {want:#x}"
