"""The engine says which of its speed tricks work on this host, and what runs instead."""

import pytest
from cli_helpers import cli

from emu.engine import capabilities
from emu.engine.quantum import BlockQuantum
from emu.inspect import describe_engine, engine_capabilities


def test_every_trick_is_in_use_on_this_host():
    caps = {c["name"]: c["ok"] for c in engine_capabilities()}
    assert caps == {
        "register window": True,
        "native block quantum": True,
        "instruction counter": True,
        "exception state": True,
    }


@pytest.mark.parametrize(
    "name,patch,reason",
    [
        ("register window", ("cpu_window_layout", lambda: None), "one native batch call per trap"),
        ("instruction counter", ("instruction_counter_available", lambda: False), "no reverse execution"),
        ("exception state", ("exception_state_known", lambda: False), "double faults"),
    ],
)
def test_a_missing_trick_is_named_with_its_fallback(monkeypatch, name, patch, reason):
    monkeypatch.setattr(capabilities, *patch)
    line = describe_engine(engine_capabilities())
    assert f"{name} FALLBACK" in line and reason in line, line


def test_a_missing_native_quantum_is_named(monkeypatch):
    monkeypatch.setattr(BlockQuantum, "native", property(lambda self: False))
    line = describe_engine(engine_capabilities())
    assert "native block quantum FALLBACK" in line and "per instruction" in line, line


def test_verbose_run_says_it_on_stderr():
    p = cli("run", "--verbose", "guest:hello")
    assert p.returncode == 0, p.stderr.decode()
    err = p.stderr.decode()
    assert err.startswith("uprobe-emu: engine: register window in use"), err
