"""diff lines the native program up with the model's: the model's rlimits (soft and hard,
every resource) and its one CPU (the native program's affinity), and ``--env VAR=VAL``
on both sides; the report says which alignments were made."""

from __future__ import annotations

import resource

import pytest
from cli_helpers import cli
from test_hostdiff import needs_tracefs, our_probes_left

from emu.frontends import hostdiff
from emu.frontends.hostdiff_args import env_assignment

SHOW = "echo X=$X; ulimit -Sn; ulimit -Hn; ulimit -Ss; ulimit -Hs; ulimit -Su; nproc"


@needs_tracefs
def test_rlimits_cpus_and_added_variables_agree_and_are_reported():
    p = cli("diff", "--env", "X=42", "-e", "uprobe:libc:malloc", "/bin/sh", "-c", SHOW)
    out = p.stdout.decode()
    assert p.returncode == 0, out + p.stderr.decode()
    assert "rlimits and 1 CPU as the model's, 1 variables added: " in out, out
    assert our_probes_left() == []


@needs_tracefs
def test_the_native_program_prints_the_models_limits_and_one_cpu():
    model = cli("run", "/bin/sh", "-c", SHOW)
    assert model.returncode == 0, model.stderr.decode()
    lines = model.stdout.decode().splitlines()
    assert lines[0] == "X=" and lines[-1] == "1", lines
    probes, _ = hostdiff.resolve_specs("/bin/sh", ["uprobe:libc:malloc"])
    modelrec = hostdiff.run_model("/bin/sh", ["/bin/sh", "-c", SHOW], probes, b"", hostdiff.host_profile_name(), None)
    native = hostdiff.run_native("/bin/sh", ["/bin/sh", "-c", SHOW], probes, b"", 60, like_model=(modelrec.rlimits, 1))
    assert native.stdout == model.stdout, (native.stdout, model.stdout)
    assert our_probes_left() == []


@pytest.mark.parametrize(
    "value, want", [(0, 0), (1024, 1024), ((1 << 64) - 1, resource.RLIM_INFINITY), ((1 << 64) - 2, (1 << 64) - 2)]
)
def test_infinity_is_resources_own(value, want):
    assert hostdiff._rlim(value) == want


@pytest.mark.parametrize("text", ["X=1", "X=", "LANG=C.UTF-8", "A=b=c"])
def test_an_assignment_is_taken_as_given(text):
    assert env_assignment(text) == text


@pytest.mark.parametrize("bad", ["X", "=1", ""])
def test_a_bad_env_is_one_line(bad):
    p = cli("diff", "--env", bad, "-e", "uprobe:libc:malloc", "/bin/true")
    err = p.stderr.decode()
    assert p.returncode == 2 and len(err.splitlines()) == 1 and "--env" in err, err


@needs_tracefs
def test_like_host_gives_the_model_the_hosts_limits_and_cpus():
    import subprocess

    show = "ulimit -Sn; ulimit -Hn; nproc"
    p = cli("diff", "--like-host", "-e", "uprobe:libc:malloc", "/bin/sh", "-c", show)
    out = p.stdout.decode()
    assert p.returncode == 0 and "the host's rlimits and CPUs in the model: " in out, out + p.stderr.decode()
    native = subprocess.run(["/bin/sh", "-c", show], capture_output=True, check=True).stdout
    model = cli("run", "/bin/sh", "-c", show).stdout
    assert native != model or native.endswith(b"\n1\n"), "the host's limits and CPUs are the model's defaults"
    assert our_probes_left() == []


def test_a_machine_starts_with_the_rlimits_it_is_given():
    from emu.machine import Machine

    limits = hostdiff.host_rlimits()
    limits[resource.RLIMIT_NOFILE] = (777, 888)
    m = Machine.from_elf("/bin/sh", argv=["/bin/sh", "-c", "ulimit -Sn; ulimit -Hn"], rlimits=limits)
    assert m.run().exit_code == 0
    assert bytes(m.stdout) == b"777\n888\n"


@pytest.mark.parametrize("bad", [[], [(1, 0)] * 16, [(0, 1)] * 15, [(-1, 1)] * 16, [("a", 1)] * 16])
def test_bad_rlimits_are_an_input_error(bad):
    from emu.machine import Machine
    from kernel_model.errors import InputError

    with pytest.raises(InputError, match="rlimit"):
        Machine.from_elf("/bin/true", rlimits=bad)
