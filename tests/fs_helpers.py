"""Shared layout and runners for the filesystem-view tests: tests/c/fs_ops.c runs a list
of operations natively (in a fresh copy of the layout) and in the model (in another),
and both print one line per operation."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from emu import Machine


def make_layout(root: Path) -> Path:
    """``root/w``: the granted directory (and working directory) of every run;
    ``root/ro``: a directory outside the grant, read-only to the guest."""
    if root.exists():
        shutil.rmtree(root)
    w, ro = root / "w", root / "ro"
    for d in (w / "dir" / "sub", ro / "dir", ro / "full" / "x", w / "ro_dir", w / "sticky", w / "full" / "x"):
        d.mkdir(parents=True)
    (w / "f").write_text("0123456789")
    (w / "secret").write_text("s")
    (w / "secret").chmod(0o600)
    (w / "noexec").write_text("#")
    (w / "exe").write_text("#")
    (w / "exe").chmod(0o744)
    (w / "dir" / "a").write_text("a")
    (w / "dir" / "b").write_text("bb")
    (w / "lnk").symlink_to("f")
    (w / "dlnk").symlink_to("dir")
    (w / "dangling").symlink_to("nowhere")
    (w / "abs").symlink_to(w / "f")
    (w / "loop").symlink_to("loop")
    (w / "up").symlink_to("../../../../../../../../..")
    (w / "ro_dir").chmod(0o555)
    (w / "sticky").chmod(0o1777)
    (w / "sticky" / "rootfile").write_text("r")
    for i in range(41):  # c0 -> c1 -> ... -> c40 -> f: 41 links from c0
        (w / f"c{i}").symlink_to(f"c{i + 1}" if i < 40 else "f")
    (ro / "f").write_text("ro file")
    (ro / "lnk").symlink_to("f")
    return w


def native_ops(exe: str, root: Path, ops: list[str]) -> str:
    w = make_layout(root)
    p = subprocess.run([exe, *ops], capture_output=True, timeout=60, cwd=w)
    assert p.returncode == 0, p.stderr
    return p.stdout.decode()


def model_ops(exe: str, root: Path, ops: list[str], *, fresh: bool = True, **kw) -> str:
    w = make_layout(root) if fresh else root / "w"
    kw.setdefault("grant_dirs", [str(w)])
    kw.setdefault("cwd", str(w))
    r = Machine.from_elf(exe, argv=[exe, *ops], **kw).run(timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe() + r.stderr.decode()
    return r.stdout.decode()


def both(exe: str, root: Path, ops: list[str], **kw) -> tuple[str, str]:
    """The native output and the model's, each on a fresh layout at the same path."""
    return native_ops(exe, root, ops), model_ops(exe, root, ops, **kw)


def lines(text: str) -> list[str]:
    return text.splitlines()


def same_tree(root: Path) -> str:
    """What the layout looks like after a run: names, types, modes, owners, sizes."""
    out = []
    for dirpath, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out.append(
                f"{os.path.relpath(p, root)} {st.st_mode:o} {st.st_uid}:{st.st_gid} "
                f"{st.st_size if not os.path.isdir(p) else ''}"
            )
        dirs.sort()
    return "\n".join(sorted(out))
