"""fadvise64 matches a native run of tests/c/xattr_statfs.c: every advice value on a
file, a directory, /dev/null and a /proc file, and the kernel's refusals (EBADF for a
closed or O_PATH descriptor, ESPIPE for a pipe before anything else, EINVAL for a
negative length or an unknown advice)."""

from __future__ import annotations

import subprocess

from emu import Machine


def test_fadvise_matches_native(build_c, tmp_path):
    guest = build_c("xattr_statfs.c", "-static")
    (tmp_path / "f").write_bytes(b"data\n")
    d = str(tmp_path)
    want = subprocess.run([guest, "fadvise", d], capture_output=True, timeout=60).stdout
    assert b"fadvise pipe bad advice = ESPIPE\n" in want, want  # the host pins the spec
    r = Machine.from_elf(guest, argv=[guest, "fadvise", d]).run(timeout=60)
    assert r.stdout == want, f"expected\n{want.decode()}\ngot\n{r.stdout.decode()}"
