"""The granted directory cannot be escaped by swapping a file for a symlink while the
guest opens it: resolution and open are one step beneath the granted root (openat2
RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or the per-component O_NOFOLLOW walk)."""

from __future__ import annotations

import os
import threading

import pytest

from emu.grant import GrantedDir
from emu.machine import Machine

GRANTED, SECRET = "granted-contents", "SECRET-outside-the-grant"


@pytest.fixture
def layout(tmp_path):
    grant, outside = tmp_path / "grant", tmp_path / "outside"
    grant.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (grant / "data.txt").write_text(GRANTED)
    return grant, outside


def _swapper(grant, outside, stop: threading.Event) -> threading.Thread:
    """Another host process's work: data.txt is atomically, alternately, a regular file
    and a symlink to the outside file."""
    def run():
        regular, link = grant / ".regular", grant / ".link"
        while not stop.is_set():
            regular.write_text(GRANTED)
            os.replace(regular, grant / "data.txt")
            os.symlink(outside / "secret.txt", link)
            os.replace(link, grant / "data.txt")
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _counts(text: str) -> dict[str, int]:
    last = text.splitlines()[-1]
    return {k: int(v) for k, v in (item.split("=") for item in last.split())}


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "nofollow-walk"])
def test_symlink_swap_race_never_reads_outside_the_grant(build_c, layout, openat2):
    grant, outside = layout
    exe = build_c("open_loop.c", "-static")
    m = Machine.from_elf(exe, argv=[exe, "data.txt", "3000", GRANTED], grant_dir=str(grant))
    m.syscalls.grant.use_openat2 = openat2
    stop = threading.Event()
    t = _swapper(grant, outside, stop)
    try:
        r = m.run(timeout=300)
    finally:
        stop.set()
        t.join()
    out = r.stdout.decode()
    assert SECRET not in out, f"the guest read outside the grant:\n{out[:400]}"
    c = _counts(out)
    assert c["other"] == 0 and c["failed"] == 0, c
    assert c["expected"] > 0 and c["eloop"] > 0, f"the swap did not race with the opens: {c}"


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "nofollow-walk"])
@pytest.mark.parametrize("name,want", [
    ("data.txt", "expected=1 other=0 eloop=0 failed=0"),
    ("link.txt", "expected=0 other=0 eloop=1 failed=0"),           # symlink to the outside
    ("inner.txt", "expected=0 other=0 eloop=1 failed=0"),          # symlink inside the grant
    ("sub/../data.txt", "expected=1 other=0 eloop=0 failed=0"),
    ("linkdir/secret.txt", "expected=0 other=0 eloop=1 failed=0"),  # symlinked directory
    ("../outside/secret.txt", "expected=0 other=0 eloop=0 failed=1"),
])
def test_resolution_beneath_the_grant(build_c, layout, openat2, name, want):
    grant, outside = layout
    (grant / "sub").mkdir()
    (grant / "link.txt").symlink_to(outside / "secret.txt")
    (grant / "inner.txt").symlink_to("data.txt")
    (grant / "linkdir").symlink_to(outside)
    exe = build_c("open_loop.c", "-static")
    m = Machine.from_elf(exe, argv=[exe, name, "1", GRANTED], grant_dir=str(grant))
    m.syscalls.grant.use_openat2 = openat2
    out = m.run().stdout.decode()
    assert out.strip() == want, f"{name}: want {want!r}, got {out!r}"


def test_walk_and_openat2_give_the_same_errno(layout):
    grant, outside = layout
    (grant / "link.txt").symlink_to(outside / "secret.txt")
    for rel, err in [("link.txt", 40), ("../outside/secret.txt", 13), ("missing", 2), ("data.txt/x", 20)]:
        got = [GrantedDir(str(grant), use_openat2=u).open(rel, os.O_RDONLY) for u in (True, False)]
        assert got == [-err, -err], f"{rel}: want -{err} from both, got {got}"
