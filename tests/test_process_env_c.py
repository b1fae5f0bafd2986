"""The process environment shells build, in a gcc-built C guest (tests/c/process_env.c)
compared with a native run byte for byte: a two-child pipeline joined by dup2, a child
redirecting stdout and stderr into a file of its working directory then appending to it
with the parent, exit statuses as wait reports them (codes, kill, fault, abort,
WNOHANG before the death), the blocked mask and dispositions copied at fork but not the
pending set, and process groups and sessions (setpgid, setsid, getsid; a forked child
starts in its parent's group).  The working directory is granted to the guest."""

from __future__ import annotations

import pytest
from guest_compare import fresh_dir, model, model_machine, native

SECTIONS = ["pipeline", "redirect", "statuses", "masks", "groups"]


@pytest.fixture(scope="module")
def exe(build_c):
    return build_c("process_env.c", "-static", name="process_env")


@pytest.mark.parametrize("section", SECTIONS)
def test_section_matches_native(exe, tmp_path, section):
    argv = [exe, section]
    want = native(argv, fresh_dir(tmp_path / "w", {}))
    native_files = sorted(p.name for p in (tmp_path / "w").iterdir())
    got = model(argv, fresh_dir(tmp_path / "w", {}))
    model_files = sorted(p.name for p in (tmp_path / "w").iterdir())
    assert want[0] == "exit 0", f"the native run failed: {want!r}"
    assert (got, model_files) == (want, native_files), (
        f"{section}:\n  native {want!r} {native_files}\n  model  {got!r} {model_files}"
    )


def test_forked_child_is_in_its_parents_process_group(exe, tmp_path):
    """copy_process: the child joins the parent's group and session; before, it led a
    group of its own (so ``kill(0, sig)`` from the parent missed it)."""
    m = model_machine([exe, "groups"], fresh_dir(tmp_path / "w", {}))
    m.run(timeout=60)
    assert b"child: in the parent's group 1, own group 0\n" in m.stdout, bytes(m.stdout)
    assert m.processes[0].sid == 0, (
        f"the first process's session leader is outside the guest, got sid {m.processes[0].sid}"
    )
