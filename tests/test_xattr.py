"""The extended attribute syscalls match a native run of tests/c/xattr_statfs.c byte for
byte: host files' real attributes read through the sysroot (values, lists, ERANGE, size
0, EFAULT only on copy-out), the path walk's errors, and what procfs, devtmpfs, sysfs
and pipes answer.  Writing: in a granted directory user.* attributes reach the host
file exactly as natively; elsewhere the model refuses as documented in
kernel_model/fs/xattr.py (EROFS on the read-only sysroot, EPERM for the namespaces that
would change what the host grants)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

from emu import Machine


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("xattr_statfs.c", "-static")


def prepared_dir(path) -> str:
    """A file ``f`` with two user.* attributes, a symlink to it, a symlink loop."""
    path.mkdir()
    (path / "f").write_bytes(b"hi\n")
    os.setxattr(path / "f", "user.a", b"hello")
    os.setxattr(path / "f", "user.b", b"x\0y")
    os.symlink("f", path / "lnk")
    os.symlink("loop", path / "loop")
    return str(path)


def native(exe: str, mode: str, d: str) -> bytes:
    r = subprocess.run([exe, mode, d], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def model(exe: str, mode: str, d: str, **kw) -> bytes:
    r = Machine.from_elf(exe, argv=[exe, mode, d], **kw).run(timeout=120)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return r.stdout


def test_reading_xattrs_matches_native(guest, tmp_path):
    d = prepared_dir(tmp_path / "d")
    want = native(guest, "xattr", d)
    assert b"getxattr f user.a = 5\n  [hello]\n" in want, want  # the host pins the spec
    got = model(guest, "xattr", d)
    assert got == want, f"expected\n{want.decode()}\ngot\n{got.decode()}"


def test_writing_user_xattrs_in_a_granted_directory_matches_native(guest, tmp_path):
    nd, md = prepared_dir(tmp_path / "n"), prepared_dir(tmp_path / "m")
    want = native(guest, "set", nd)
    got = model(guest, "set", md, grant_dirs=[md])
    assert got == want, f"expected\n{want.decode()}\ngot\n{got.decode()}"
    assert os.listxattr(md + "/f") == os.listxattr(nd + "/f"), (os.listxattr(md + "/f"), os.listxattr(nd + "/f"))


SET_CASES = {
    # (name, in a granted directory?) -> errno the model answers for setxattr
    ("user.c", False): "EROFS",
    ("trusted.c", True): "EPERM",
    ("security.capability", True): "EPERM",
    ("system.posix_acl_access", True): "EPERM",
}


@pytest.mark.parametrize(("name", "granted"), list(SET_CASES))
def test_setxattr_refusals(guest, tmp_path, name, granted):
    """The sysroot is read-only (EROFS, as for any write there); in a granted directory
    the namespaces that would change what the host grants are refused (EPERM); the host
    file keeps its attributes."""
    d = prepared_dir(tmp_path / "d")
    src = f"""
        #include <errno.h>
        #include <stdio.h>
        #include <string.h>
        #include <sys/xattr.h>
        int main(void) {{
            int r = setxattr("{d}/f", "{name}", "v", 1, 0);
            int s = removexattr("{d}/f", "user.a");
            printf("%d %s %d %s\\n", r, strerrorname_np(r ? errno : 0) ?: "0", s, s ? strerrorname_np(errno) : "0");
            return 0;
        }}
    """
    c = tmp_path / "refuse.c"
    c.write_text(src)
    exe = str(tmp_path / "refuse")
    subprocess.run(["gcc", "-static", "-o", exe, str(c)], check=True)
    r = Machine.from_elf(exe, argv=[exe], grant_dirs=[d] if granted else []).run(timeout=60)
    want_rm = "0 0" if granted else "-1 EROFS"
    expected = f"-1 {SET_CASES[name, granted]} {want_rm}\n".encode()
    assert r.stdout == expected, f"expected {expected!r}, got {r.stdout!r} ({r.describe()})"
    assert os.listxattr(d + "/f") == (["user.b"] if granted else ["user.a", "user.b"])


@pytest.fixture
def shared_dir():
    """A prepared directory every uid can search (under /tmp, mode 0755) with a
    trusted.* attribute on ``f`` and a root-owned file ``secret`` of mode 0."""
    top = tempfile.mkdtemp(prefix="xattr-")
    try:
        os.chmod(top, 0o755)
        d = prepared_dir(pathlib.Path(top) / "d")
        os.chmod(d, 0o755)
        os.setxattr(d + "/f", "trusted.t", b"root only")
        (pathlib.Path(d) / "secret").write_bytes(b"s")
        os.chmod(d + "/secret", 0)
        yield d
    finally:
        shutil.rmtree(top)


@pytest.mark.parametrize("uid", [0, 1000])
def test_xattr_permissions_match_native(guest, shared_dir, uid):
    """xattr_permission with the guest's credentials: trusted.* only for root (ENODATA
    and left out of lists otherwise), user.* and unknown prefixes need read permission,
    security.* and the ACLs none; writing a file one may not write is EACCES (granted
    directory, so the mount is writable)."""
    cmd = [guest, "perm", shared_dir]
    if uid:
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *cmd]
    want = subprocess.run(cmd, capture_output=True, timeout=60).stdout
    assert (b"[root only]" in want) == (uid == 0), want  # the host pins the spec
    ids = {"uid": uid, "gid": uid, "groups": []}
    got = model(guest, "perm", shared_dir, grant_dirs=[shared_dir], **ids)
    assert got == want, f"expected\n{want.decode()}\ngot\n{got.decode()}"
