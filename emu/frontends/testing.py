"""The register-test kit: a pytest plugin for users' own assertion-based tests.

Installed as the ``pytest11`` entry point ``uprobe_emu``, so any pytest run in an
environment where uprobe-emu is installed gets:

- fixtures ``emu_machine`` (factory: ``emu_machine(guest="hello")``,
  ``emu_machine(asm=SOURCE)``, ``emu_machine(elf=PATH)``; keyword arguments go to the
  Machine) and ``emu_asm`` (``emu_asm(SOURCE, kernel=...)``);
- :class:`Regs`, a register snapshot whose failed ``==`` prints only the differing
  registers in gdb's ``info registers`` layout (``pytest_assertrepr_compare``);
- helpers :func:`snapshot`, :func:`run_to`, :func:`call_snapshots` (registers at a
  function's entry and right after it returns) and :func:`expect_signal`.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from emu.inspect import GPR_NAMES

# gdb's amd64 `info registers` order
_GDB_ORDER = GPR_NAMES[:18] + ("cs", "ss", "ds", "es", "fs", "gs", "fs_base", "gs_base")

__all__ = ["Regs", "snapshot", "run_to", "call_snapshots", "expect_signal"]

_COMPARED = GPR_NAMES + ("cs", "ss")


class Regs(Mapping):
    """An immutable register snapshot: ``regs["rax"]``, ``regs.rax``; equality with
    another snapshot or a dict compares the registers both name (a dict may name a few)."""

    def __init__(self, values: Mapping, symbolize=None):
        self._v = {k: int(v) & 0xFFFFFFFFFFFFFFFF for k, v in values.items()}
        self._symbolize = symbolize

    def __getitem__(self, name):
        return self._v[name]

    def __getattr__(self, name):
        try:
            return self._v[name]
        except KeyError:
            raise AttributeError(name) from None

    def __iter__(self):
        return iter(self._v)

    def __len__(self):
        return len(self._v)

    def _other(self, other) -> dict | None:
        if isinstance(other, Regs):
            return other._v
        if isinstance(other, Mapping):
            return {k: int(v) & 0xFFFFFFFFFFFFFFFF for k, v in other.items()}
        return None

    def diff(self, other, names=None) -> dict:
        """{name: (mine, theirs)} for registers that differ."""
        theirs = self._other(other)
        if theirs is None:
            raise TypeError(f"cannot compare registers with {type(other).__name__}")
        names = names or [n for n in self._v if n in theirs]
        return {n: (self._v[n], theirs[n]) for n in names if self._v[n] != theirs[n]}

    def __eq__(self, other):
        theirs = self._other(other)
        if theirs is None:
            return NotImplemented
        return not self.diff(theirs)

    def __hash__(self):
        return hash(tuple(sorted(self._v.items())))

    def without(self, *names) -> "Regs":
        return Regs({k: v for k, v in self._v.items() if k not in names}, self._symbolize)

    def gdb_line(self, name: str, value: int | None = None) -> str:
        """One register in gdb's ``info registers`` layout (the stepper's formatter)."""
        # lazy: pytest loads this plugin in every run of a project that installs us; the
        # stepper package pulls in the machine and Unicorn
        from emu.debug.format import register_line

        return register_line(name, self._v[name] if value is None else value, self._gdb_label)

    def _gdb_label(self, addr: int) -> str | None:
        """gdb writes code labels as ``sym+N`` with a decimal offset."""
        sym = self._symbolize(addr) if self._symbolize else None
        if not sym:
            return None
        base, _, off = sym.partition("+")
        return f"{base}+{int(off, 16)}" if off else base

    def gdb(self, names=None) -> str:
        names = [n for n in (names or _GDB_ORDER) if n in self._v]
        return "\n".join(self.gdb_line(n) for n in names)

    def __repr__(self):
        return "Regs(" + ", ".join(f"{k}={v:#x}" for k, v in self._v.items()) + ")"


def snapshot(machine, names=_COMPARED) -> Regs:
    regs = machine.read_regs()
    return Regs({n: getattr(regs, n) for n in names}, machine.symbolize)


def run_to(machine, target, *, max_insns: int = 100_000_000) -> Regs:
    """Run until ``target`` (symbol or address) is about to execute; its registers.

    Uses a one-address code hook, removed again: no breakpoint byte is written, so
    uprobes and guest memory are untouched."""
    addr = machine.resolve(target) if isinstance(target, str) else int(target)
    state = {}

    def hit(address, size):
        state["hit"] = True
        machine.stop(f"reached {target}")

    h = machine.add_code_hook(hit, addr, addr)
    try:
        result = machine.run(max_insns=max_insns)
    finally:
        machine.remove_hook(h)
    if not state.get("hit"):
        raise AssertionError(f"the guest never reached {target}: {result.describe()}")
    return snapshot(machine)


def call_snapshots(machine, function, **kw) -> tuple[Regs, Regs]:
    """(registers at the entry of ``function``, registers right after it returned)."""
    entry = run_to(machine, function, **kw)
    ret_addr = machine.mem.read_u64(entry.rsp)
    after = run_to(machine, ret_addr, **kw)
    return entry, after


def expect_signal(what, signal: str, *, addr: int | None = None, rip: int | None = None):
    """Assert a run ended with ``signal`` (and the fault/rip addresses when given).
    ``what`` is a RunResult or a Machine (which is then run)."""
    result = what.run() if hasattr(what, "run") and hasattr(what, "uc") else what
    assert result.reason == "signal" and result.signal_name == signal, (
        f"expected the guest to die of {signal}, but it {result.describe()}"
    )
    if addr is not None:
        assert result.fault_addr == addr, f"expected fault address {addr:#x}, got {result.fault_addr!r:}"
    if rip is not None:
        assert result.rip == rip, f"expected rip {rip:#x}, got {result.rip:#x}"
    return result


# ----------------------------------------------------------------------------- pytest hooks


def pytest_assertrepr_compare(config, op, left, right):
    if op != "==" or not (isinstance(left, Regs) or isinstance(right, Regs)):
        return None
    a, b = (left, right) if isinstance(left, Regs) else (right, left)
    try:
        diff = a.diff(b)
    except TypeError:
        return None
    lines = [
        f"register snapshots differ in {len(diff)} register(s) ({', '.join(diff)}); left, then right, in gdb's layout:"
    ]
    for name, (mine, theirs) in diff.items():
        lines.append("  - " + a.gdb_line(name, mine))
        lines.append("  + " + a.gdb_line(name, theirs))
    return lines


@pytest.fixture
def emu_machine():
    """Factory: ``emu_machine(guest=NAME | asm=SOURCE | elf=PATH, **machine_kwargs)``."""
    from emu.machine import Machine  # lazy, as in Regs.gdb_line

    def make(*, guest: str | None = None, asm: str | None = None, elf: str | None = None, **kw):
        given = [x for x in (guest, asm, elf) if x is not None]
        if len(given) != 1:
            raise TypeError("give exactly one of guest=, asm=, elf=")
        if guest is not None:
            return Machine.from_guest(guest, **kw)
        if asm is not None:
            return Machine.from_asm(asm, **kw)
        assert elf is not None  # exactly one was given
        return Machine.from_elf(elf, **kw)

    return make


@pytest.fixture
def emu_asm(emu_machine):
    """Factory: ``emu_asm(SOURCE, **machine_kwargs)`` -> Machine."""
    return lambda source, **kw: emu_machine(asm=source, **kw)
