"""The model against the real kernel of this machine (Linux 6.18 as root, tracefs).

These tests run the same guest natively with probes created through tracefs and in the
model under the host's profile, and require agreement.  They may only be skipped when
tracefs cannot be used on the machine, and say so.
"""

from __future__ import annotations

import os
import shutil

import pytest

from emu.frontends import hostdiff
from emu.frontends.host_tracefs import HostKernelError, HostProbes, Tracefs
from guest_programs import CORPUS, build_corpus_guest


def _tracefs_usable() -> str | None:
    try:
        t = Tracefs()
    except HostKernelError as e:
        return str(e)
    t.close()
    return None


REASON = _tracefs_usable()
needs_tracefs = pytest.mark.skipif(REASON is not None, reason=f"host tracefs unusable: {REASON}")


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("corpus"))


def diff(path, specs, argv=()):
    probes, _ = hostdiff.resolve_specs(path, specs)
    native = hostdiff.run_native(path, [path, *argv], probes, b"", 60)
    model = hostdiff.run_model(path, [path, *argv], probes, b"", hostdiff.host_profile_name(), 10**9)
    return native, model, hostdiff.compare(native, model)


def our_probes_left() -> list[str]:
    t = Tracefs()
    try:
        mine = f"{hostdiff.run_tag()}/"
        return [ln for ln in t.read("uprobe_events").splitlines() if ln.split()[0].split(":")[1].startswith(mine)]
    finally:
        t.close()


@needs_tracefs
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_guest_agrees_with_the_host_kernel(corpus_dir, name):
    g = CORPUS[name]
    exe = build_corpus_guest(name, corpus_dir)
    native, model, problems = diff(exe, [p.format(exe=exe) for p in g.probes], g.argv)
    assert not problems, "\n".join(problems)
    assert native.events, "the host produced no events: the probes did not fire"
    assert our_probes_left() == []


@needs_tracefs
def test_host_facts_the_corpus_pins(corpus_dir):
    """The measured facts, stated once more as plain assertions on the model's output."""
    exe = build_corpus_guest("optsite", corpus_dir)
    native, model, _ = diff(exe, [p.format(exe=exe) for p in CORPUS["optsite"].probes])
    out = model.stdout.decode()
    assert "nop5: e8" in out and "66nop4: e8" in out and "nop4nop: cc" in out
    assert "[uprobes-trampoline]" in out
    deep = build_corpus_guest("deep", corpus_dir)
    native, model, _ = diff(deep, [p.format(exe=deep) for p in CORPUS["deep"].probes])
    assert sum(e.kind == "return" for e in native.events) == 64
    assert sum(e.kind == "entry" for e in native.events) == 81


@needs_tracefs
@pytest.mark.parametrize(
    "guest,specs,argv",
    [
        ("guest:fib", ["guest:fib:fib_loop %ax %bx", "guest:fib:run"], ["7"]),
        ("guest:hello", ["guest:hello:_start"], []),
        ("guest:segv", ["guest:segv:_start %sp"], []),
    ],
    ids=["fib", "hello", "segv"],
)
def test_builtin_guest_agrees_with_the_host_kernel(guest, specs, argv):
    path, tmp = hostdiff._program_path(guest)
    try:
        specs = [s.replace(guest, path) for s in specs]
        native, model, problems = diff(path, specs, argv)
        if guest == "guest:segv":
            # stack addresses differ (the host randomizes the stack); compare the rest
            problems = [p for p in problems if "arg1=0x7ff" not in p and "event stream" not in p]
            assert native.status == model.status == "signal SIGSEGV"
        assert not problems, "\n".join(problems)
    finally:
        shutil.rmtree(tmp)
    assert our_probes_left() == []


@needs_tracefs
def test_probes_are_removed_after_an_interrupted_run(corpus_dir):
    exe = build_corpus_guest("deep", corpus_dir)
    t = Tracefs()
    try:
        with pytest.raises(KeyboardInterrupt):
            with HostProbes(t, [hostdiff.ResolvedProbe("p", "ev0", "p", 0x1000, 0, "")], exe):
                assert our_probes_left() != []
                raise KeyboardInterrupt
    finally:
        t.close()
    assert our_probes_left() == []
    assert not os.path.exists(os.path.join(hostdiff.find_tracefs() or "/nonexistent", "instances", hostdiff.run_tag()))


@needs_tracefs
def test_diff_cli_reports_agreement_and_exit_0(corpus_dir):
    from cli_helpers import cli

    exe = build_corpus_guest("longjmp", corpus_dir)
    p = cli("diff", "-e", f"p {exe}:outer %di", "-e", f"r {exe}:outer $retval", exe)
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
    assert p.stdout.decode().startswith("agree: host ")


@needs_tracefs
def test_diff_cli_shows_the_first_divergence(corpus_dir):
    """A stack-pointer fetcharg differs between the host (random stack) and the model."""
    from cli_helpers import cli

    exe = build_corpus_guest("deep", corpus_dir)
    p = cli("diff", "-e", f"p {exe}:rec %sp", exe)
    out = p.stdout.decode()
    assert p.returncode == 1 and "DIVERGE" in out and "event stream differs at event #1" in out
    assert our_probes_left() == []


def test_non_root_gets_one_line_and_exit_2(monkeypatch, capsys):
    from emu.frontends.cli import main

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["diff", "-e", "guest:hello:_start", "guest:hello"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["uprobe-emu: error: the host kernel's uprobes need root (tracefs uprobe_events)"]
