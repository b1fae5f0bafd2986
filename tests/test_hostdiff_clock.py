"""``diff`` starts the model's clock at the host's time by default (``--clock host``), so a
program that dates files by its clock (``ls -la``: the time of day for a file less than
six months old, else the year) prints the same on both sides; the alignment is named in
the report; ``--clock fixed`` is the model's own start."""

from __future__ import annotations

from cli_helpers import cli
from test_hostdiff import needs_tracefs, our_probes_left

LS = ("-e", "uprobe:libc:malloc", "/bin/ls", "-la", "/etc")


@needs_tracefs
def test_ls_la_agrees_on_the_hosts_clock_and_says_so():
    p = cli("diff", *LS)
    out = p.stdout.decode()
    assert p.returncode == 0 and out.startswith("agree: host ") and ", host clock, " in out, out + p.stderr.decode()
    assert our_probes_left() == []


@needs_tracefs
def test_ls_la_diverges_in_its_dates_on_the_fixed_clock():
    p = cli("diff", "--clock", "fixed", *LS)
    out = p.stdout.decode()
    assert p.returncode == 1 and ", fixed clock, " in out.splitlines()[0], out + p.stderr.decode()
    assert "stdout differs" in out, out
    assert our_probes_left() == []


def test_a_bad_clock_is_one_line():
    p = cli("diff", "--clock", "soon", "-e", "uprobe:libc:malloc", "/bin/true")
    err = p.stderr.decode()
    assert (
        p.returncode == 2 and err == "uprobe-emu: error: --clock: fixed, host or seconds since the epoch, not 'soon'\n"
    )
