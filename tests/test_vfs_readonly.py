"""Writes outside a granted directory fail as on a read-only mount, with the kernel's
precedence between EROFS and the other errnos.  The expected values were taken from a
native run on a read-only bind mount (mount --bind DIR MNT; mount -o remount,bind,ro MNT)
of the same layout: they cannot be produced here without mounting, so they are pinned."""

from __future__ import annotations

import pytest
from fs_helpers import model_ops

OCREAT, OEXCL, OTRUNC = 0o100, 0o200, 0o1000

# (operation on ../ro, the errno or value natively on the read-only bind mount)
PINNED = [
    ("mkdir,../ro/dir,0755", "EEXIST"),  # filename_create: EEXIST before EROFS
    ("mkdir,../ro/f,0755", "EEXIST"),
    ("mkdir,../ro/new,0755", "EROFS"),
    ("mkdir,../ro/new/,0755", "EROFS"),
    ("mkdir,../ro/nope/new,0755", "ENOENT"),
    ("mkdir,../ro/.,0755", "EEXIST"),
    ("unlink,../ro/missing", "EROFS"),  # do_unlinkat: mnt_want_write before the lookup
    ("unlink,../ro/f", "EROFS"),
    ("unlink,../ro/dir", "EROFS"),
    ("unlink,../ro/f/", "EROFS"),
    ("unlink,../ro/.", "EISDIR"),
    ("rmdir,../ro/missing", "EROFS"),
    ("rmdir,../ro/dir", "EROFS"),
    ("rmdir,../ro/full", "EROFS"),
    ("rmdir,../ro/f", "EROFS"),
    ("rmdir,../ro/.", "EINVAL"),
    ("rmdir,../ro/dir/..", "ENOTEMPTY"),
    (f"open,../ro/f,{OCREAT},0644", "3"),  # O_RDONLY|O_CREAT of an existing file opens it
    (f"open,../ro/new,{OCREAT},0644", "EROFS"),
    (f"open,../ro/f,{OCREAT | OEXCL},0644", "EEXIST"),
    ("open,../ro/f,1", "EROFS"),
    ("open,../ro/f,2", "EROFS"),
    (f"open,../ro/f,{OTRUNC}", "EROFS"),
    ("open,../ro/missing,1", "ENOENT"),
    ("open,../ro/dir,2", "EISDIR"),
    (f"open,../ro/dir,{OCREAT}", "EISDIR"),
    (f"open,../ro/new/,{OCREAT}", "EISDIR"),
    (f"open,../ro/f/,{OCREAT}", "EISDIR"),
    ("rename,../ro/missing,../ro/x", "EROFS"),
    ("rename,../ro/f,../ro/x", "EROFS"),
    ("rename,../ro/f,../ro/nodir/x", "ENOENT"),
    ("rename,../ro/.,../ro/x", "EBUSY"),
    ("symlink,a,../ro/f", "EEXIST"),
    ("symlink,a,../ro/new", "EROFS"),
    ("symlink,a,../ro/new/", "ENOENT"),  # a trailing slash only mkdir may have
    ("symlink,a,../ro/f/", "EEXIST"),
    ("link,../ro/f,../ro/new/", "ENOENT"),
    ("link,../ro/f,../ro/dir", "EEXIST"),
    ("link,../ro/f,../ro/new", "EROFS"),
    ("link,../ro/missing,../ro/new", "ENOENT"),
    ("chmod,../ro/f,0600", "EROFS"),
    ("chmod,../ro/missing,0600", "ENOENT"),
    ("chown,../ro/f,0,0", "EROFS"),
    ("utimensnull,../ro/f", "EROFS"),
    ("truncate,../ro/f,0", "EROFS"),
    ("truncate,../ro/dir,0", "EISDIR"),
    ("truncate,../ro/missing,0", "ENOENT"),
    ("access,../ro/f,2", "EROFS"),
    ("access,../ro/missing,2", "ENOENT"),
    ("access,../ro/dir,2", "EROFS"),
    ("access,../ro/f,4", "0"),
]


@pytest.mark.parametrize("op,want", PINNED, ids=[op for op, _ in PINNED])
def test_write_outside_the_grants_gets_the_read_only_mount_errno(build_c, tmp_path, op, want):
    exe = build_c("fs_ops.c", "-static")
    got = model_ops(exe, tmp_path / "t", [op]).strip()
    assert got == f"{op} -> {want}", f"want {want}, got {got!r}"


def test_ftruncate_of_a_read_only_descriptor_is_einval(build_c, tmp_path):
    exe = build_c("fs_ops.c", "-static")
    got = model_ops(exe, tmp_path / "t", ["open,../ro/f,0", "ftruncate,0"]).splitlines()
    assert got == ["open,../ro/f,0 -> 3", "ftruncate,0 -> EINVAL"]


def test_nothing_outside_the_grant_changed(build_c, tmp_path):
    exe = build_c("fs_ops.c", "-static")
    root = tmp_path / "t"
    model_ops(exe, root, [op for op, _ in PINNED])
    ro = root / "ro"
    assert sorted(p.name for p in ro.iterdir()) == ["dir", "f", "full", "lnk"]
    assert (ro / "f").read_text() == "ro file" and (ro / "f").stat().st_mode & 0o777 == 0o644
