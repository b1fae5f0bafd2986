"""Which of the engine's speed tricks work on this host, and what runs instead.

The engine reaches into Unicorn in three places a binding does not offer, each found at
run time and each with a slower, exact fallback:

* the **register window**: the CPU state read and written in place
  (:func:`emu.engine.regfile.cpu_window_layout`), which the breakpoint fast paths
  (``Cpu.set_breakpoint_fast_path``) need; else one native batch call per trap and
  every probe hit through the general int3 path;
* the **native block quantum**: an 18-byte x86-64 callback in an executable page that
  counts a time slice in translated blocks (:mod:`emu.engine.quantum`); else slices are
  counted by Unicorn's per-instruction counter (15-20x slower guest code while several
  tasks run);
* the **instruction counter**: Unicorn's ``emu_counter`` found in its ``uc_struct``;
  else exact budgets and reverse execution are unavailable;
* the **exception state**: ``env->error_code`` and ``env->old_exception`` found in the
  CPU state (:func:`emu.engine.mmu.exception_state_known`).  Guest memory is paged and
  every page fault is handled in an interrupt hook that Unicorn never marks delivered:
  without it the #PF error code is rebuilt from the page tables, and a guest's second
  page fault in a row becomes a double fault.

:func:`engine_capabilities` says which are in use, so a slow run can say why.
"""

from __future__ import annotations

from emu.engine.mmu import exception_state_known
from emu.engine.quantum import BlockQuantum, instruction_counter_available
from emu.engine.regfile import cpu_window_layout


def engine_capabilities() -> list[dict]:
    """``[{"name", "ok", "detail"}]`` for the register window, the native block
    quantum, the instruction counter and the exception state on this host and Unicorn
    build."""
    window = cpu_window_layout() is not None
    quantum = BlockQuantum().native
    counter = instruction_counter_available()
    excp = exception_state_known()
    return [
        {
            "name": "register window",
            "ok": window,
            "detail": "registers read and written in Unicorn's CPU state in place; breakpoint fast paths "
            "for probed emulated instructions"
            if window
            else "CPU state layout not recognised: one native batch call per trap instead, and every probe hit "
            "through the general int3 path",
        },
        {
            "name": "native block quantum",
            "ok": quantum,
            "detail": "time slices counted by a native block hook"
            if quantum
            else "no executable page or not x86-64 Linux: slices counted per instruction (slower with threads)",
        },
        {
            "name": "instruction counter",
            "ok": counter,
            "detail": "exact instruction budgets and reverse execution"
            if counter
            else "Unicorn's emu_counter not found: no exact budgets, no reverse execution",
        },
        {
            "name": "exception state",
            "ok": excp,
            "detail": "page faults read their error code and end their delivery in place"
            if excp
            else "CPU exception fields not found: error codes rebuilt, repeated page faults become double faults",
        },
    ]


def describe(caps: list[dict]) -> str:
    """One line: ``engine: register window in place, ...`` with each fallback named."""
    return "engine: " + "; ".join(f"{c['name']} {'in use' if c['ok'] else 'FALLBACK'} ({c['detail']})" for c in caps)
