"""The sweep's output: the JSONL stream, --resume, --json, the summary and the exit
status a CI can gate on."""

from __future__ import annotations

import json

import pytest
from sweep_helpers import findings, guest_program, sweep

from emu.frontends.cli import main
from emu.frontends.sweep.report import CaseStore
from emu.frontends.sweep.runners import SerialRunner
from kernel_model.arch.x86.kernel import uprobes as arch_x86


class Interrupted(SerialRunner):
    """A serial runner whose user presses Ctrl-C after ``after`` cases."""

    def __init__(self, after: int):
        super().__init__()
        self.after = after

    def run(self, cases, done=None):
        out = []
        for c in cases:
            if self.runner.executed == self.after:
                raise KeyboardInterrupt
            out.append(self.runner.run(c))
            done(out[-1])
        return out


def _wrong_push(monkeypatch):
    def wrong(au, regs, mem):
        if not arch_x86.emulate_push_stack(regs, mem, (getattr(regs, au.push_reg) + 1) & ((1 << 64) - 1)):
            return False
        regs.rip = (regs.rip + au.ilen) & ((1 << 64) - 1)
        return True

    monkeypatch.setitem(arch_x86._SETUP_OPS, "push", arch_x86.UprobeXolOps("wrong", emulate=wrong))


def test_an_interrupted_sweep_resumes_without_rerunning_finished_cases(tmp_path, monkeypatch):
    _wrong_push(monkeypatch)  # a sweep with some bisection to do
    prog = guest_program("uprobe_targets")
    full = sweep(prog, "6.18", batch=64)
    assert full.executed >= 8, full.executed
    path = str(tmp_path / "cases.jsonl")
    store = CaseStore(path)
    with pytest.raises(KeyboardInterrupt):
        sweep(prog, "6.18", runner=Interrupted(5), store=store, batch=64)
    store.close()
    assert len(_case_lines(path)) == 5
    store = CaseStore(path, resume=True)
    runner = SerialRunner()
    resumed = sweep(prog, "6.18", runner=runner, store=store, batch=64)
    store.close()
    assert runner.runner.executed == full.executed - 5, (
        f"expected {full.executed - 5} cases run after resuming, got {runner.runner.executed}"
    )
    assert (resumed.runs, findings(resumed)) == (full.runs, findings(full))
    assert len(_case_lines(path)) == full.executed


def _case_lines(path) -> list:
    """The JSONL's case records (the reference runs have a line of their own)."""
    return [line for line in open(path).read().splitlines() if '"case"' in line]


def test_a_truncated_last_jsonl_line_is_run_again(tmp_path):
    prog = guest_program("fib")
    path = tmp_path / "cases.jsonl"
    store = CaseStore(str(path))
    sweep(prog, "6.18", store=store)
    store.close()
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])
    runner = SerialRunner()
    store = CaseStore(str(path), resume=True)
    sweep(prog, "6.18", runner=runner, store=store)
    store.close()
    assert runner.runner.executed == 1


def test_cli_clean_sweep_exits_0_with_a_summary_and_json(tmp_path, capsys):
    out_json = tmp_path / "sweep.json"
    rc = main(["sweep", "--kernel", "6.18,7.3", "--no-progress", "--json", str(out_json), "guest:uprobe_targets", "4"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "nop5-redzone (kernel-faithful): guest:uprobe_targets:0x1083" in text
    assert "repro: uprobe-emu sweep --kernel 6.18 --site guest:uprobe_targets:0x1083 guest:uprobe_targets 4" in text
    doc = json.loads(out_json.read_text())
    assert [k["kernel"] for k in doc["kernels"]] == ["6.18", "7.3"]
    assert doc["kernels"][0]["by_class"] == {"nop5-redzone": 1, "syscall-xol": 1}
    assert doc["kernels"][1]["by_class"] == {"syscall-xol": 1}


def test_cli_unclassified_divergence_exits_1_and_streams_jsonl(tmp_path, capsys, monkeypatch):
    _wrong_push(monkeypatch)
    jsonl = tmp_path / "c.jsonl"
    rc = main(["sweep", "--kernel", "6.18", "--no-progress", "--jsonl", str(jsonl), "guest:uprobe_targets", "4"])
    text = capsys.readouterr().out
    assert rc == 1, text
    assert "unclassified (UNCLASSIFIED): guest:uprobe_targets:0x108d 0x40108d <target_push> 55  push rbp" in text
    assert "first: registers: rbp reference 0x0 probed 0x4" in text
    lines = [json.loads(ln) for ln in jsonl.read_text().splitlines()]
    recs = [r for r in lines if "reference" not in r]
    assert recs and all(r["kernel"] == "6.18" and "case" in r for r in recs)
    assert any(r["sites"] == ["guest:uprobe_targets:0x108d"] and r["diverged"] for r in recs)


def test_the_repro_command_reproduces_the_divergence(capsys, monkeypatch):
    _wrong_push(monkeypatch)
    rc = main(
        [
            "sweep",
            "--kernel",
            "6.18",
            "--site",
            "guest:uprobe_targets:0x108d",
            "--no-progress",
            "guest:uprobe_targets",
            "4",
        ]
    )
    text = capsys.readouterr().out
    assert rc == 1 and "first: registers: rbp reference 0x0 probed 0x4" in text, text


@pytest.mark.parametrize(
    "argv,message",
    [
        (["sweep", "--kernel", "6.18,nope", "guest:fib"], "unknown kernel profile 'nope'"),
        (["sweep", "--resume", "guest:fib"], "--resume needs --jsonl FILE"),
        (["sweep", "/nonexistent/prog"], "/nonexistent/prog: no such file"),
        (["sweep", "--sites", "/nonexistent/list", "guest:fib"], "is neither insn, func, ret nor a file"),
        (["sweep", "--site", "no_such_symbol", "guest:fib"], "no_such_symbol"),
        (["sweep", "--jobs", "2", "--ray", "auto", "guest:fib"], "give --jobs or --ray, not both"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
