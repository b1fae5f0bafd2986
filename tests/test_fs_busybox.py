"""The static busybox's shell and file applets (those that run without execve) in a
granted directory print what they print natively, byte for byte, and leave the same
tree behind."""

from __future__ import annotations

import subprocess

import pytest
from fs_helpers import same_tree

from emu import Machine

BUSYBOX = "/bin/busybox"  # Debian busybox-static (installed by .ci/run)

SCRIPTS = {
    "pwd_and_cd": "pwd; cd sub && pwd; cd ..; pwd; cd /; pwd; cd /nonexistent; echo rc=$?",
    "ls": "ls; ls -a sub; ls -d s*; ls missing; echo rc=$?",
    "mkdir_rmdir": "mkdir -p d/e/f && cd d/e && pwd && cd ../.. && rmdir d/e/f d/e d && ls",
    "find": "find . | sort",
    "symlinks": "ln -s a.txt l; readlink l; ls -l l | cut -c1-10; test -L l && echo link",
    "chmod_stat": "chmod 640 a.txt; stat -c '%a %s %F %h' a.txt sub",
    "mv_rm": "mv a.txt b.txt; ls; rm b.txt; rm -r sub; ls; echo rc=$?",
    "redirection": "echo x > sub/f; echo y >> sub/f; read l < sub/f; echo $l; ls sub",
    "tests": "test -d sub && echo d; test -f a.txt && echo f; test -e nope || echo none; test -r a.txt && echo r",
    "glob": "echo *; echo sub/*; echo nothing*",
    "outside_is_read_only": "mkdir /usr/uprobe-emu-test 2>/dev/null || echo refused; test -d /etc && echo etc",
}


def layout(d):
    if d.exists():
        subprocess.run(["rm", "-rf", str(d)], check=True)
    d.mkdir()
    (d / "a.txt").write_text("hello\n")
    (d / "sub").mkdir()


@pytest.mark.parametrize("script", SCRIPTS.values(), ids=SCRIPTS.keys())
def test_busybox_sh_matches_native(tmp_path, script):
    d = tmp_path / "w"
    layout(d)
    if "/usr/uprobe-emu-test" in script:  # natively as root it would succeed: pin it
        want = b"refused\netc\n"
        native_tree = None
    else:
        p = subprocess.run([BUSYBOX, "sh", "-c", script], capture_output=True, cwd=d, timeout=60)
        want = p.stdout + b"rc=%d\n" % p.returncode
        native_tree = same_tree(d)
        layout(d)
    r = Machine.from_elf(BUSYBOX, argv=["sh", "-c", script], grant_dirs=[str(d)], cwd=str(d)).run(timeout=60)
    got = r.stdout + (b"rc=%d\n" % r.exit_code if native_tree is not None else b"")
    assert got == want, f"want {want!r}, got {got!r} ({r.describe()}, stderr {r.stderr!r})"
    if native_tree is not None:
        assert same_tree(d) == native_tree
