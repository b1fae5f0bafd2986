"""``sweep --host``: the batched sweep under the running kernel's uprobes agrees with
the model on the corpus, and leaves no probe behind (skipped, as every host test, only
when tracefs cannot be used)."""

from __future__ import annotations

import pytest
from sweep_helpers import guest_program, sweep
from test_hostdiff import needs_tracefs, our_probes_left

from emu.frontends.cli import main
from emu.frontends.hostdiff import host_profile_name
from emu.frontends.sweep.case import Program
from emu.frontends.sweep.host import host_sweep

pytestmark = needs_tracefs
HOST = host_profile_name()


def _check(prog, **kw):
    model = sweep(prog, HOST, **kw)
    host = host_sweep(prog, model)
    assert host.disagreements == [], "\n".join(host.lines())
    assert not host.unclassified, "\n".join(host.lines())
    assert our_probes_left() == []
    return model, host


@pytest.mark.parametrize("guest", ["fib", "uprobe_targets", "echo", "hello", "segv"])
def test_host_sweep_of_a_builtin_guest_agrees_with_the_model(guest):
    model, host = _check(guest_program(guest))
    assert host.reference == model.reference
    assert host.runs >= host.batches >= 1


def _own_boundaries(exe) -> list[str]:
    """Every instruction boundary of main (glibc's string functions are IFUNCs: the
    host CPU picks AVX-512 ones the model's CPU does not have, so they run only there)."""
    from emu.frontends.sweep.sites import insn_sites
    from kernel_model.fs.elf import load_elf_file

    return [s.key for s in insn_sites(exe, load_elf_file(exe)) if s.symbol.split("+")[0] == "main"]


@pytest.mark.parametrize("flavour", ["-static", "-dynamic"])
def test_host_sweep_of_a_gcc_guest_agrees_with_the_model(build_c, flavour):
    exe = build_c("hello.c", *([flavour] if flavour == "-static" else []))
    kw = dict(site_specs=_own_boundaries(exe)) if flavour == "-static" else dict(mode="insn")
    model, host = _check(Program.of(exe, [exe, "a"]), **kw)
    assert host.reference == model.reference == "exit 7"
    assert host.sites > 30


def test_cli_host_sweep_prints_the_host_line(capsys):
    rc = main(["sweep", "--host", "--no-progress", "guest:fib", "30"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"vs model {HOST}: native reference exit 40," in out and "0 disagreements" in out
    assert our_probes_left() == []
