"""A guest cannot reach what its view does not show by swapping a file for a symlink
while it opens it: the walk opens one component at a time from its parent's host
descriptor (O_PATH|O_NOFOLLOW) and reads any symlink itself, following it in the
guest's namespace, whose / is the sysroot (see kernel_model.fs.namei).  The secret lies outside the
sysroot; its host path, absolute or relative, names nothing in the guest's view."""

from __future__ import annotations

import os
import threading

import pytest

from emu.machine import Machine

GRANTED, SECRET = "granted-contents", "SECRET-outside-the-grant"


@pytest.fixture
def layout(tmp_path):
    """tmp/root is the sysroot, tmp/root/grant the granted directory (the guest's
    /grant and working directory), tmp/outside invisible to the guest."""
    grant, outside = tmp_path / "root" / "grant", tmp_path / "outside"
    grant.mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (grant / "data.txt").write_text(GRANTED)
    return grant, outside


def _machine(exe, grant, *args):
    return Machine.from_elf(exe, argv=[exe, *args], sysroot=str(grant.parent), grant_dirs=[str(grant)], cwd="/grant")


def _swapper(grant, target: str, stop: threading.Event) -> threading.Thread:
    """Another host process's work: data.txt is atomically, alternately, a regular file
    and a symlink to ``target``."""

    def run():
        regular, link = grant / ".regular", grant / ".link"
        while not stop.is_set():
            regular.write_text(GRANTED)
            os.replace(regular, grant / "data.txt")
            os.symlink(target, link)
            os.replace(link, grant / "data.txt")

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _counts(text: str) -> dict[str, int]:
    last = text.splitlines()[-1]
    return {k: int(v) for k, v in (item.split("=") for item in last.split())}


@pytest.mark.parametrize("kind", ["absolute", "relative"])
def test_symlink_swap_race_never_reads_outside_the_view(build_c, layout, kind):
    grant, outside = layout
    target = str(outside / "secret.txt") if kind == "absolute" else "../../outside/secret.txt"
    exe = build_c("open_loop.c", "-static")
    for _ in range(3):  # the swap must race with the opens: a busy host may starve it
        m = _machine(exe, grant, "data.txt", "3000", GRANTED)
        stop = threading.Event()
        t = _swapper(grant, target, stop)
        try:
            r = m.run(timeout=300)
        finally:
            stop.set()
            t.join()
        out = r.stdout.decode()
        assert SECRET not in out, f"the guest read outside its view:\n{out[:400]}"
        c = _counts(out)
        assert c["other"] == 0 and c["eloop"] == 0, c
        if c["expected"] > 0 and c["failed"] > 0:
            break
    assert c["expected"] > 0 and c["failed"] > 0, f"the swap did not race with the opens: {c}"


@pytest.mark.parametrize(
    "name,want",
    [
        ("data.txt", "expected=1 other=0 eloop=0 failed=0"),
        ("link.txt", "expected=0 other=0 eloop=0 failed=1"),  # absolute host path: not in the view
        ("rel.txt", "expected=0 other=0 eloop=0 failed=1"),  # .. above / stays at /
        ("inner.txt", "expected=1 other=0 eloop=0 failed=0"),  # a symlink inside the view is followed
        ("sub/../data.txt", "expected=1 other=0 eloop=0 failed=0"),
        ("linkdir/secret.txt", "expected=0 other=0 eloop=0 failed=1"),  # symlinked directory outside
        ("../../outside/secret.txt", "expected=0 other=0 eloop=0 failed=1"),
        ("loop", "expected=0 other=0 eloop=1 failed=0"),
    ],
)
def test_resolution_in_the_guests_namespace(build_c, layout, name, want):
    grant, outside = layout
    (grant / "sub").mkdir()
    (grant / "link.txt").symlink_to(outside / "secret.txt")
    (grant / "rel.txt").symlink_to("../../outside/secret.txt")
    (grant / "inner.txt").symlink_to("/grant/data.txt")
    (grant / "linkdir").symlink_to(outside)
    (grant / "loop").symlink_to("loop")
    exe = build_c("open_loop.c", "-static")
    out = _machine(exe, grant, name, "1", GRANTED).run().stdout.decode()
    assert out.strip() == want, f"{name}: want {want!r}, got {out!r}"
