"""busybox applets match a native run of the same binary byte for byte.

Each applet runs with the census's canned invocation (``tools/busybox_census.py``: its
arguments, stdin and input files) in a fresh copy of the same work directory, which is
the guest's granted directory and working directory; exit status, stdout, stderr and
the directory it leaves behind must be the native run's.  ``SAME`` are the applets the
census finds equal; ``SAME_WITH_FS_VIEW`` need the host's paths (a read-only sysroot with
/etc/passwd, getcwd, chdir, getdents64, mkdir/rename/unlink/link/symlink/chmod/chown/
utimensat/ftruncate in a granted directory) and ``SAME_WITH_DEV`` /dev/null and /dev/zero.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from guest_compare import BUSYBOX, model, native, require

_CENSUS = Path(__file__).resolve().parent.parent / "tools" / "busybox_census.py"


def _load_census():
    spec = importlib.util.spec_from_file_location("busybox_census", _CENSUS)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


census = _load_census()

SAME = [
    "[",
    "[[",
    "ar",
    "arch",
    "ascii",
    "ash",
    "awk",
    "base64",
    "basename",
    "bc",
    "bunzip2",
    "busybox",
    "bzcat",
    "bzip2",
    "cal",
    "cat",
    "clear",
    "cmp",
    "cpio",
    "crc32",
    "cut",
    "date",
    "dc",
    "dd",
    "diff",
    "dirname",
    "dos2unix",
    "dpkg-deb",
    "dumpleases",
    "echo",
    "ed",
    "egrep",
    "env",
    "expand",
    "expr",
    "factor",
    "false",
    "fgrep",
    "fold",
    "getopt",
    "grep",
    "gunzip",
    "gzip",
    "head",
    "hexdump",
    "ionice",
    "ipcalc",
    "kill",
    "killall",
    "less",
    "lzcat",
    "lzma",
    "lzop",
    "md5sum",
    "mkpasswd",
    "more",
    "nl",
    "od",
    "paste",
    "pidof",
    "printf",
    "reset",
    "rev",
    "rpm",
    "rpm2cpio",
    "sed",
    "seq",
    "setsid",
    "sh",
    "sha1sum",
    "sha256sum",
    "sha3sum",
    "sha512sum",
    "shuf",
    "sleep",
    "sort",
    "start-stop-daemon",
    "stat",
    "strings",
    "stty",
    "sync",
    "tac",
    "tail",
    "tar",
    "tee",
    "test",
    "tr",
    "true",
    "tty",
    "uncompress",
    "unexpand",
    "uniq",
    "unix2dos",
    "unlzma",
    "unxz",
    "unzip",
    "usleep",
    "uudecode",
    "uuencode",
    "wc",
    "xargs",
    "xxd",
    "xz",
    "xzcat",
    "zcat",
]
SAME_WITH_FS_VIEW = [
    "chgrp",
    "chmod",
    "chown",
    "cp",
    "du",
    "find",
    "groups",
    "id",
    "link",
    "ln",
    "ls",
    "mkdir",
    "mv",
    "nuke",
    "patch",
    "pwd",
    "readlink",
    "realpath",
    "rm",
    "rmdir",
    "run-parts",
    "svc",
    "svok",
    "touch",
    "truncate",
    "unlink",
    "which",
    "whoami",
]
SAME_WITH_DEV = ["shred"]
# fallocate, mknodat, /proc/self/loginuid; personality kept across execve
SAME_WITH_LIMITS = ["fallocate", "mkfifo", "mknod", "logname", "linux32", "linux64"]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("bbtemplate") / "t"
    root.mkdir()
    census.make_template(root, require(BUSYBOX))
    return root


def run_both(template: Path, work: Path, applet: str):
    c = census.CASES[applet]
    argv = [BUSYBOX, applet, *c.args]
    stdin = (template / c.stdin).read_bytes()
    results = []
    for run in (native, model):
        census.fresh(template, work)
        status, out, err = run(argv, work, stdin)
        results.append((status, out, err, census.tree_of(work)))
    return results


@pytest.mark.parametrize("applet", SAME + SAME_WITH_FS_VIEW + SAME_WITH_DEV + SAME_WITH_LIMITS)
def test_applet_matches_native(template, tmp_path, applet):
    want, got = run_both(template, tmp_path / "w", applet)
    for i, what in enumerate(("exit status", "stdout", "stderr", "directory left behind")):
        assert got[i] == want[i], (
            f"busybox {applet} {' '.join(census.CASES[applet].args)}: {what} differs\n"
            f"  native {want[i]!r}\n  model  {got[i]!r}"
        )


def test_every_applet_is_either_run_or_excused():
    """The census table covers every applet this busybox lists, each in one place."""
    listed = set(
        subprocess.run([require(BUSYBOX), "--list"], capture_output=True, text=True, check=True).stdout.split()
    )
    both = set(census.CASES) & set(census.NOT_COMPARABLE)
    missing = listed - set(census.CASES) - set(census.NOT_COMPARABLE)
    assert (sorted(both), sorted(missing)) == ([], []), f"in both tables {sorted(both)}; in neither {sorted(missing)}"


def test_the_same_lists_only_name_canned_applets():
    unknown = sorted(set(SAME + SAME_WITH_FS_VIEW + SAME_WITH_DEV + SAME_WITH_LIMITS) - set(census.CASES))
    assert unknown == [], f"no canned invocation for {unknown}"
