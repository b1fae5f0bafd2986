"""``sweep --resume`` repeats nothing: the two reference (unprobed) runs and the site
list are recorded in the JSONL under the key of the sweep's description (binary
SHA-256, argv, stdin, profile and overrides, seed, sites asked for) and reused when the
resumed sweep's description is the same; run again, and said why, when it is not.  So
are sweep --host's native runs (that test is skipped only when tracefs cannot be used,
the rule of test_hostdiff.py)."""

from __future__ import annotations

import json

import pytest
from sweep_helpers import findings, guest_program, sweep
from test_hostdiff import needs_tracefs

from emu.frontends.cli import main
from emu.frontends.hostdiff import host_profile_name
from emu.frontends.sweep.case import Case, CaseRunner, Program
from emu.frontends.sweep.compare import Noise, RunDigest, noise_between
from emu.frontends.sweep.driver import Sweeper
from emu.frontends.sweep.report import CaseStore
from emu.frontends.sweep.runners import SerialRunner
from emu.frontends.sweep.sites import insn_sites
from guest_programs import write_guest
from kernel_model.fs.elf import load_elf_file


@pytest.fixture
def reference_runs(monkeypatch):
    """How many unprobed runs were executed (a case with no sites is a reference run)."""
    count = {"n": 0}
    execute = CaseRunner.execute

    def counting(self, case):
        count["n"] += not case.sites
        return execute(self, case)

    monkeypatch.setattr(CaseRunner, "execute", counting)
    return count


def _sweep(prog, path, resume, **kw):
    store = CaseStore(str(path), resume=resume)
    runner = SerialRunner()
    try:
        return sweep(prog, kw.pop("kernel", "6.18"), runner=runner, store=store, **kw), runner
    finally:
        store.close()


def test_a_resumed_sweep_does_not_repeat_the_reference_runs(tmp_path, reference_runs):
    prog, path = guest_program("uprobe_targets"), tmp_path / "c.jsonl"
    first, _ = _sweep(prog, path, False)
    assert (reference_runs["n"], first.reference_runs) == (2, 2)
    reference_runs["n"] = 0
    again, runner = _sweep(prog, path, True)
    assert (reference_runs["n"], again.reference_runs, runner.runner.executed) == (0, 0, 0), (
        f"expected no run at all on resume, got {reference_runs['n']} reference, {runner.runner.executed} probed"
    )
    assert again.reference_note == f"reused from {path}"
    assert (again.sites, again.noise, again.ref_digest, again.reference) == (
        first.sites,
        first.noise,
        first.ref_digest,
        first.reference,
    )
    assert (again.runs, findings(again)) == (first.runs, findings(first))


def _changed_binary(tmp_path):
    exe = str(tmp_path / "fib")
    write_guest("fib", exe)

    def change():
        with open(exe, "ab") as f:  # one byte more: another SHA-256, the same program
            f.write(b"\0")
        return Program.of(exe, [exe, "30"])

    return Program.of(exe, [exe, "30"]), change


# change -> (tmp_path -> (the first program, () -> the changed one), sweep kwargs, the note's word)
CHANGES = {
    "binary": (_changed_binary, {}, "binary (SHA-256 differs)"),
    "argv": (lambda _: (guest_program("fib", ["fib", "30"]), lambda: guest_program("fib", ["fib", "31"])), {}, "argv"),
    "seed": (lambda _: (guest_program("fib"), lambda: Program.of("guest:fib", ["fib", "30"], seed=5)), {}, "seed"),
    "sites": (lambda _: (guest_program("fib"), lambda: guest_program("fib")), {"mode": "func"}, "--sites"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_the_reference_runs_are_run_again_when_the_description_changed(tmp_path, reference_runs, change):
    programs, second_kw, named = CHANGES[change]
    prog, changed = programs(tmp_path)
    path = tmp_path / "c.jsonl"
    _sweep(prog, path, False)
    reference_runs["n"] = 0
    second = changed()
    again, _ = _sweep(second, path, True, **second_kw)
    assert (reference_runs["n"], again.reference_runs) == (2, 2), (
        f"expected the 2 reference runs again after a changed {change}, got {reference_runs['n']}"
    )
    assert again.reference_note == f"run again: the ones in {path} were for another {named}", again.reference_note
    reference_runs["n"] = 0
    _sweep(second, path, True, **second_kw)
    assert reference_runs["n"] == 0, "the changed description's reference runs were not recorded"


def test_a_reference_recorded_for_another_kernel_is_not_a_change(tmp_path, reference_runs):
    path = tmp_path / "c.jsonl"
    _sweep(guest_program("fib"), path, False, kernel="6.18")
    reference_runs["n"] = 0
    other, _ = _sweep(guest_program("fib"), path, True, kernel="7.2")
    assert (reference_runs["n"], other.reference_note) == (2, f"run: {path} has none for this kernel profile")


def test_a_reference_digest_survives_the_jsonl(tmp_path):
    """What is reused compares as what was run: the digest and the noise come back equal."""
    runner = CaseRunner()
    case = Case(guest_program("echo"), "6.18", (), ())
    a, b = runner.run(case).digest, runner.run(case).digest
    back = RunDigest.from_json(json.loads(json.dumps(a.to_json())))
    assert back == a, "the digest read back differs from the one written"
    assert back.syscalls and back.memory and back.stdout, "a digest with every part"
    noise = noise_between(a, b)
    assert Noise.from_json(json.loads(json.dumps(noise.to_json()))) == noise


def test_cli_says_the_reference_runs_were_reused(tmp_path, capsys):
    jsonl = str(tmp_path / "c.jsonl")
    assert main(["sweep", "--kernel", "6.18", "--no-progress", "--jsonl", jsonl, "guest:fib", "30"]) == 0
    first = capsys.readouterr().out
    assert "reference runs:" not in first, first
    assert main(["sweep", "--kernel", "6.18", "--no-progress", "--jsonl", jsonl, "--resume", "guest:fib", "30"]) == 0
    out = capsys.readouterr().out
    assert f"[6.18] reference runs: reused from {jsonl}" in out, out
    assert main(["sweep", "--kernel", "6.18", "--no-progress", "--jsonl", jsonl, "--resume", "guest:fib", "31"]) == 0
    out = capsys.readouterr().out
    assert f"[6.18] reference runs: run again: the ones in {jsonl} were for another argv" in out, out


@needs_tracefs
def test_a_resumed_host_sweep_does_not_repeat_the_native_runs(tmp_path, monkeypatch, build_c):
    from emu.frontends.sweep import host as host_mod

    native = {"n": 0}
    run_native = host_mod.run_native

    def counting(*a, **kw):
        native["n"] += 1
        return run_native(*a, **kw)

    monkeypatch.setattr(host_mod, "run_native", counting)
    exe = build_c("sweep_stderr.c")
    prog = Program.of(exe, [exe, "ab"])
    sites = [s.key for s in insn_sites(exe, load_elf_file(exe)) if s.symbol.split("+")[0] == "main"][:4]
    path = tmp_path / "c.jsonl"

    def host(resume, batch):
        store = CaseStore(str(path), resume=resume)
        try:
            model = Sweeper(prog, SerialRunner(), store=store).sweep(host_profile_name(), site_specs=sites)
            return host_mod.host_sweep(prog, model, batch=batch, store=store)
        finally:
            store.close()

    first = host(False, 2)
    assert (native["n"], first.executed, first.reused) == (4, 4, 0), (native, first.executed)
    native["n"] = 0
    again = host(True, 2)
    assert (native["n"], again.executed, again.reused) == (0, 0, 4), (
        f"expected no native run on resume, got {native['n']}"
    )
    assert (again.reference, again.compared, again.runs, again.found) == (
        first.reference,
        first.compared,
        first.runs,
        first.found,
    )
    assert f"  4 native run(s) reused from {path}, 0 run now" in again.lines()
    native["n"] = 0
    other = host(True, 4)  # other batches: only the references are reused
    assert (native["n"], other.reused) == (1, 2), (native, other.reused)


def test_a_damaged_reference_record_is_run_again(tmp_path, reference_runs):
    path = tmp_path / "c.jsonl"
    _sweep(guest_program("fib"), path, False)
    lines = path.read_text().splitlines()
    ref = json.loads(lines[0])
    del ref["digest"]["memory"]
    path.write_text("\n".join([json.dumps(ref), *lines[1:]]) + "\n")
    reference_runs["n"] = 0
    again, _ = _sweep(guest_program("fib"), path, True)
    assert (reference_runs["n"], again.reference) == (2, "exit 40"), reference_runs
    assert again.reference_note == f"run again: their record in {path} is damaged", again.reference_note
