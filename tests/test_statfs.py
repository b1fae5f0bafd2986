"""statfs/fstatfs match a native run of tests/c/xattr_statfs.c: procfs, sysfs, devtmpfs
and pipefs as the kernel answers, a host directory with the host filesystem's type,
sizes and flags (granted: writable, so the flags are the host's own), and the errors.
The model's own numbers that the host cannot pin (devtmpfs' size from the modeled RAM,
ST_RDONLY on the read-only sysroot) are checked against the kernel's formulas."""

from __future__ import annotations

import os
import subprocess

import pytest

from emu import Machine

ST_RDONLY, TMPFS_MAGIC = 0x1, 0x01021994


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("xattr_statfs.c", "-static")


def test_statfs_matches_native(guest, tmp_path):
    d = str(tmp_path)
    want = subprocess.run([guest, "statfs", d], capture_output=True, timeout=60).stdout
    st = os.statvfs(d)
    assert f"  blocks={st.f_blocks} files={st.f_files}\n".encode() in want, want  # the host pins the spec
    r = Machine.from_elf(guest, argv=[guest, "statfs", d], grant_dirs=[d]).run(timeout=60)
    assert r.stdout == want, f"expected\n{want.decode()}\ngot\n{r.stdout.decode()}"


def model_statfs_line(tmp_path, path: str, **kw) -> bytes:
    src = tmp_path / "one.c"
    src.write_text(
        "#include <stdio.h>\n#include <sys/vfs.h>\n"
        "int main(int c, char **v) { struct statfs s; if (statfs(v[1], &s)) return 1;\n"
        ' printf("%lx %lu %lu %lu %lu %lu %lx\\n", (long)s.f_type, s.f_blocks, s.f_bfree, s.f_bavail,'
        " s.f_files, s.f_ffree, (long)s.f_flags); return 0; }\n"
    )
    exe = str(tmp_path / "one")
    subprocess.run(["gcc", "-static", "-o", exe, str(src)], check=True)
    r = Machine.from_elf(exe, argv=[exe, path], **kw).run(timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return r.stdout


@pytest.mark.parametrize("mem_total", [1 << 30, 4 << 30])
def test_devtmpfs_is_half_the_modeled_ram(tmp_path, mem_total):
    """shmem's defaults: half the RAM in pages as blocks and as inodes, every block free,
    one inode per node of the modeled /dev (its ten nodes, the root, the pts mount
    point)."""
    pages = mem_total // 4096 // 2
    got = model_statfs_line(tmp_path, "/dev", mem_total=mem_total)
    want = f"{TMPFS_MAGIC:x} {pages} {pages} {pages} {pages} {pages - 12} 1020\n".encode()
    assert got == want, f"expected {want!r}, got {got!r}"


def test_sysroot_is_read_only(tmp_path):
    """The sysroot is mounted read-only in the guest's view: the host's flags plus
    ST_RDONLY; its numbers are the host filesystem's."""
    got = model_statfs_line(tmp_path, "/").split()
    st = os.statvfs("/")
    assert (int(got[1]), int(got[4])) == (st.f_blocks, st.f_files), (got, st)
    assert int(got[6], 16) == st.f_flag | ST_RDONLY | 0x20, (got, st.f_flag)
