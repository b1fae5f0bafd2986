#!/usr/bin/env python3
"""Busybox census: every applet of ``busybox --list``, natively and under ``uprobe-emu run``.

Each applet gets one canned, deterministic invocation (``CASES``): the same arguments,
the same stdin file and a fresh copy of the same input files, in the same working
directory, which is also the one ``--grant-dir``.  Both runs get the environment
``uprobe-emu run`` gives a guest (``DEFAULT_ENV``), stdout and stderr as pipes.  Applets
that need a network, root-only kernel state, a terminal, the wall clock, the host's
processes or randomness are listed in ``NOT_COMPARABLE`` with the reason, and never run
(the native side runs unsandboxed: nothing here may touch anything outside the work
directory).

Output: one line per applet, ``same``, ``differs`` (the first differing line of stdout,
stderr or the directory left behind, and both exit codes; ``BY_DESIGN`` notes where the
model describes its own machine) or ``n/c`` (the reason), then the totals.  ``--only A,B`` limits the run, ``--json
FILE`` writes every result.

    python tools/busybox_census.py [--busybox /bin/busybox] [--only cat,sort] [--json out.json]
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import io
import json
import lzma
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

# What `uprobe-emu run` puts in a guest's environment (kernel_model.fs.binfmt_elf.DEFAULT_ENV).
DEFAULT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/root", "LANG": "C"}
NATIVE_TIMEOUT = 20
EMU_TIMEOUT = 30
FIXED_MTIME = 946684800  # 2000-01-01T00:00:00Z: every input file's mtime

A_TXT = b"alpha beta\nGamma\tdelta\nalpha beta\nepsilon zeta eta\n  indented line\nlast line without upper\n"
B_TXT = b"alpha beta\nGamma\tdelta\nthird changed\nepsilon zeta eta\n"


@dataclass(frozen=True)
class Case:
    """One invocation: ``busybox APPLET *args`` with ``stdin`` (a work-dir file name)."""

    args: tuple = ()
    stdin: str = "empty"


def case(*args: str, stdin: str = "empty") -> Case:
    return Case(tuple(args), stdin)


NETWORK = "needs a network"
ROOT = "root-only kernel state or hardware"
TERMINAL = "needs a terminal or the console"
CLOCK = "output depends on the wall clock"
HOSTPROC = "output depends on the host's processes or login records"
RANDOM = "output is random (uuid, salt, name)"

NOT_COMPARABLE = {
    **{
        a: NETWORK
        for a in (
            "arp",
            "arping",
            "brctl",
            "dnsdomainname",
            "ftpget",
            "ftpput",
            "httpd",
            "ifconfig",
            "ifdown",
            "ifup",
            "ip",
            "ipneigh",
            "logger",
            "nameif",
            "nc",
            "netstat",
            "nslookup",
            "ping",
            "ping6",
            "rdate",
            "route",
            "ssl_client",
            "tc",
            "telnet",
            "telnetd",
            "tftp",
            "traceroute",
            "traceroute6",
            "tunctl",
            "udhcpc",
            "udhcpd",
            "uevent",
            "vconfig",
            "wget",
        )
    },
    **{
        a: ROOT
        for a in (
            "acpid",
            "blkdiscard",
            "blockdev",
            "chroot",
            "crond",
            "crontab",
            "depmod",
            "devmem",
            "dmesg",
            "dpkg",
            "fatattr",
            "fdisk",
            "findfs",
            "freeramdisk",
            "fsfreeze",
            "fstrim",
            "halt",
            "hwclock",
            "i2cdetect",
            "i2cdump",
            "i2cget",
            "i2cset",
            "i2ctransfer",
            "init",
            "insmod",
            "klogd",
            "linuxrc",
            "logread",
            "losetup",
            "lsmod",
            "lsscsi",
            "mdev",
            "modinfo",
            "modprobe",
            "mount",
            "mt",
            "nsenter",
            "partprobe",
            "pivot_root",
            "poweroff",
            "reboot",
            "resume",
            "rmmod",
            "run-init",
            "swapoff",
            "swapon",
            "switch_root",
            "syslogd",
            "ubirename",
            "umount",
            "unshare",
            "watchdog",
            "adjtimex",
        )
    },
    **{
        a: TERMINAL
        for a in (
            "chvt",
            "deallocvt",
            "dumpkmap",
            "getty",
            "loadfont",
            "loadkmap",
            "login",
            "microcom",
            "openvt",
            "passwd",
            "setkeycodes",
            "su",
            "sulogin",
            "top",
            "vi",
            "watch",
        )
    },
    **{a: CLOCK for a in ("time", "ts", "uptime")},
    **{a: HOSTPROC for a in ("last", "ps", "renice", "taskset", "w", "who", "df")},
    **{a: RANDOM for a in ("mkdosfs", "mke2fs", "mkswap", "mktemp")},
    "yes": "writes forever (needs a reader that exits)",
}

# Run and reported, but expected to differ: the model describes its own machine.
BY_DESIGN = {
    "hostname": "uname: the modeled nodename",
    "uname": "uname: the modeled kernel",
    "hostid": "gethostid from the modeled nodename",
    "nproc": "the model has one CPU",
    "free": "sysinfo and /proc/meminfo describe the modeled RAM (--mem-total)",
}

CASES = {
    "[": case("-f", "a.txt", "]"),
    "[[": case("1", "-lt", "2", "]]"),
    "ar": case("t", "a.deb"),
    "arch": case(),
    "ascii": case(),
    "ash": case("-c", "echo ash; exit 3"),
    "awk": case("{ print NF, $1 }", "a.txt"),
    "base64": case("a.txt"),
    "basename": case("/usr/lib/x.so", ".so"),
    "bc": case(stdin="bc.in"),
    "bunzip2": case("-c", "a.bz2"),
    "busybox": case("true"),
    "bzcat": case("a.bz2"),
    "bzip2": case("-c", "a.txt"),
    "cal": case("2", "2000"),
    "cat": case("a.txt", "b.txt"),
    "chgrp": case("0", "c.txt"),
    "chmod": case("600", "c.txt"),
    "chown": case("0:0", "c.txt"),
    "clear": case(),
    "cmp": case("a.txt", "b.txt"),
    "cp": case("-r", "sub", "sub2"),
    "cpio": case("-t", stdin="a.cpio"),
    "crc32": case("a.txt"),
    "cttyhack": case("true"),
    "cut": case("-d", " ", "-f", "1", "a.txt"),
    "date": case("-u", "-d", "@86400", "+%F %T %Z"),
    "dc": case("-e", "2 3 + 7 * p"),
    "dd": case("if=a.txt", "of=dd.out", "bs=4", "count=3", "status=noxfer"),
    "diff": case("a.txt", "b.txt"),
    "dirname": case("/usr/lib/x.so"),
    "dos2unix": case(stdin="crlf.txt"),
    "dpkg-deb": case("-c", "a.deb"),
    "du": case("-a", "sub"),
    "dumpleases": case("-f", "no-such-file"),
    "echo": case("-e", "a\\tb\\n"),
    "ed": case("a.txt", stdin="ed.in"),
    "egrep": case("-n", "alpha|eta", "a.txt"),
    "env": case(),
    "expand": case("a.txt"),
    "expr": case("length", "abcdef"),
    "factor": case("360", "97"),
    "fallocate": case("-l", "8192", "falloc.bin"),
    "false": case(),
    "fgrep": case("-c", "alpha", "a.txt"),
    "find": case(".", "-type", "f", "-name", "*.txt"),
    "fold": case("-w", "5", "a.txt"),
    "free": case(),
    "getopt": case("-o", "ab:", "--", "-a", "-b", "x", "rest"),
    "grep": case("-n", "eta", "a.txt"),
    "groups": case(),
    "gunzip": case("-c", "a.gz"),
    "gzip": case("-c", "a.txt"),
    "head": case("-n", "2", "a.txt"),
    "hexdump": case("-C", "a.txt"),
    "hostid": case(),
    "hostname": case(),
    "id": case(),
    "ionice": case(),
    "ipcalc": case("-bnm", "192.168.1.5/24"),
    "kill": case("-l"),
    "killall": case("-0", "no-such-prog-xyz"),
    "less": case("a.txt"),
    "link": case("a.txt", "hard.txt"),
    "linux32": case("true"),
    "linux64": case("true"),
    "ln": case("-s", "a.txt", "sym"),
    "logname": case(),
    "ls": case("-l"),
    "lzcat": case("a.lzma"),
    "lzma": case("-dc", "a.lzma"),
    "lzop": case("-dc", "a.lzo"),
    "md5sum": case("a.txt", "b.txt"),
    "mim": case("-f", "mimfile", "hello"),
    "mkdir": case("-p", "x/y/z"),
    "mkfifo": case("fifo"),
    "mknod": case("pipe2", "p"),
    "mkpasswd": case("-m", "sha256", "-S", "abcdefgh", "secret"),
    "more": case("a.txt"),
    "mv": case("c.txt", "moved.txt"),
    "nl": case("a.txt"),
    "nologin": case(),
    "nproc": case(),
    "nuke": case("sub2"),
    "od": case("-c", "b.txt"),
    "paste": case("a.txt", "b.txt"),
    "patch": case("-i", "ab.diff"),
    "pidof": case("no-such-prog-xyz"),
    "printf": case("%s-%05d|%x\\n", "x", "42", "255"),
    "pwd": case(),
    "readlink": case("lnk"),
    "realpath": case("sub/../a.txt"),
    "reset": case(),
    "rev": case("a.txt"),
    "rm": case("-r", "sub2", "c.txt"),
    "rmdir": case("emptydir"),
    "rpm": case("-qp", "a.txt"),
    "rpm2cpio": case("a.txt"),
    "run-parts": case("--test", "sub"),
    "sed": case("-n", "s/alpha/ALPHA/p", "a.txt"),
    "seq": case("1", "3", "10"),
    "setpriv": case("-d"),
    "setsid": case("true"),
    "sh": case("-c", "x=$(echo sub); echo ${#x} $((6*7)); exit 4"),
    "sha1sum": case("a.txt"),
    "sha256sum": case("a.txt", "b.txt"),
    "sha3sum": case("a.txt"),
    "sha512sum": case("a.txt"),
    "shred": case("-n", "0", "-z", "c.txt"),
    "shuf": case("-i", "7-7"),
    "sleep": case("0"),
    "sort": case("-r", "a.txt"),
    "start-stop-daemon": case("-K", "-t", "-n", "no-such-prog"),
    "stat": case("-c", "%n %s %F %a %h", "a.txt", "sub"),
    "strings": case("-n", "5", "a.tar"),
    "stty": case("-a"),
    "svc": case("-u", "sub"),
    "svok": case("sub"),
    "sync": case(),
    "sysctl": case("-n", "kernel.ostype"),
    "tac": case("a.txt"),
    "tail": case("-n", "2", "a.txt"),
    "tar": case("-tvf", "a.tar"),
    "tee": case("tee.out", stdin="a.txt"),
    "test": case("-d", "sub", "-a", "-f", "a.txt"),
    "timeout": case("5", "true"),
    "touch": case("new.txt"),
    "tr": case("a-z", "A-Z", stdin="a.txt"),
    "true": case(),
    "truncate": case("-s", "3", "c.txt"),
    "tty": case(),
    "uname": case("-a"),
    "uncompress": case("-c", "a.gz"),
    "unexpand": case("-a", "a.txt"),
    "uniq": case("-c", stdin="sorted.txt"),
    "unix2dos": case(stdin="a.txt"),
    "unlink": case("c.txt"),
    "unlzma": case("-c", "a.lzma"),
    "unxz": case("-c", "a.xz"),
    "unzip": case("-l", "a.zip"),
    "usleep": case("0"),
    "uudecode": case("-o", "-", "a.uu"),
    "uuencode": case("a.txt", "a.txt"),
    "wc": case("a.txt", "b.txt"),
    "which": case("sh"),
    "whoami": case(),
    "xargs": case("echo", stdin="a.txt"),
    "xxd": case("b.txt"),
    "xz": case("-dc", "a.xz"),
    "xzcat": case("a.xz"),
    "zcat": case("a.gz"),
}


# ------------------------------------------------------------------ input files
def _tar_bytes() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in (("a.txt", A_TXT), ("dir/b.txt", B_TXT)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), FIXED_MTIME, 0o644
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _ar_member(name: str, data: bytes) -> bytes:
    head = f"{name + '/':<16}{FIXED_MTIME:<12}{0:<6}{0:<6}{0o100644:<8o}{len(data):<10}`\n".encode()
    return head + data + (b"\n" if len(data) % 2 else b"")


def _targz(members: dict) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), FIXED_MTIME
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def _deb_bytes() -> bytes:
    control = b"Package: demo\nVersion: 1.0\nArchitecture: all\nMaintainer: x <x@y>\nDescription: demo\n"
    return (
        b"!<arch>\n"
        + _ar_member("debian-binary", b"2.0\n")
        + _ar_member("control.tar.gz", _targz({"./control": control}))
        + _ar_member("data.tar.gz", _targz({"./usr/share/demo/a.txt": A_TXT}))
    )


def _zip_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in (("a.txt", A_TXT), ("b.txt", B_TXT)):
            z.writestr(zipfile.ZipInfo(name, date_time=(2000, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


def make_template(root: Path, busybox: str) -> None:
    """The input files every run starts from (made natively, once, then copied)."""
    files = {
        "a.txt": A_TXT,
        "b.txt": B_TXT,
        "c.txt": b"scratch file\n",
        "empty": b"",
        "sorted.txt": b"a\na\nb\nc\nc\nc\n",
        "crlf.txt": b"one\r\ntwo\r\n",
        "bc.in": b"2^10\nscale=3\n1/7\n",
        "ed.in": b"2p\n$p\nq\n",
        "mimfile": b"hello:\n\techo hello from mim\n",
        "a.gz": gzip.compress(A_TXT, mtime=0),
        "a.bz2": bz2.compress(A_TXT),
        "a.xz": lzma.compress(A_TXT),
        "a.lzma": lzma.compress(A_TXT, format=lzma.FORMAT_ALONE),
        "a.tar": _tar_bytes(),
        "a.deb": _deb_bytes(),
        "a.zip": _zip_bytes(),
        "sub/inner.txt": b"inner\n",
        "sub/run.sh": b"#!/bin/sh\necho run\n",
        "sub2/x/y.txt": b"y\n",
    }
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "sub/run.sh").chmod(0o755)
    (root / "emptydir").mkdir()
    os.symlink("a.txt", root / "lnk")

    def native(*args, check=True, **kw):
        return subprocess.run([busybox, *args], cwd=root, check=check, capture_output=True, **kw)

    (root / "ab.diff").write_bytes(native("diff", "-u", "a.txt", "b.txt", check=False).stdout)
    (root / "a.lzo").write_bytes(native("lzop", "-c", "a.txt").stdout)
    (root / "a.uu").write_bytes(native("uuencode", "a.txt", "a.txt").stdout)
    (root / "a.cpio").write_bytes(native("cpio", "-o", "-H", "newc", input=b"a.txt\nb.txt\n").stdout)
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        os.utime(path, (FIXED_MTIME, FIXED_MTIME), follow_symlinks=False)
    os.utime(root, (FIXED_MTIME, FIXED_MTIME))


# ------------------------------------------------------------------ one run
@dataclass
class Outcome:
    code: int | None
    stdout: bytes
    stderr: bytes
    tree: list = field(default_factory=list)


def tree_of(root: Path) -> list:
    """What a run left behind: every entry's path, type, permission bits, size, target
    or content hash (no times or inode numbers: a fresh copy has new ones)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            st = os.lstat(path)
            kind, extra = stat.S_IFMT(st.st_mode), ""
            if stat.S_ISLNK(st.st_mode):
                extra = os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                extra = hashlib.sha256(path.read_bytes()).hexdigest()[:16] + f" {st.st_size}"
            out.append(f"{path.relative_to(root)} {kind:o} {stat.S_IMODE(st.st_mode):o} {extra}")
    return out


def fresh(template: Path, work: Path) -> None:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(template, work, symlinks=True)


def run_one(cmd: list, work: Path, stdin: str, timeout: float, env: dict | None) -> Outcome:
    with open(work / stdin, "rb") as inp:
        try:
            p = subprocess.run(cmd, cwd=work, stdin=inp, capture_output=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return Outcome(None, e.stdout or b"", (e.stderr or b"") + b"<host timeout>")
    return Outcome(p.returncode, p.stdout, p.stderr, tree_of(work))


def first_difference(native: Outcome, emu: Outcome) -> str | None:
    for what in ("stdout", "stderr", "tree"):
        a, b = getattr(native, what), getattr(emu, what)
        if what != "tree":
            a, b = a.split(b"\n"), b.split(b"\n")
        if a != b:
            i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            x = a[i] if i < len(a) else "<end>"
            y = b[i] if i < len(b) else "<end>"
            return f"{what} line {i + 1}: native {x!r} vs emu {y!r}"
    if native.code != emu.code:
        return "exit code only"
    return None


def census(busybox: str, emu_cmd: list, applets: list, base: Path):
    template, work = base / "template", base / "w"
    template.mkdir()
    make_template(template, busybox)
    results = []
    for applet in applets:
        if applet in NOT_COMPARABLE:
            results.append((applet, "n/c", NOT_COMPARABLE[applet]))
            continue
        c = CASES.get(applet)
        if c is None:
            results.append((applet, "n/c", "no canned invocation in the census table"))
            continue
        argv = [busybox, applet, *c.args]
        fresh(template, work)
        native = run_one(argv, work, c.stdin, NATIVE_TIMEOUT, DEFAULT_ENV)
        fresh(template, work)
        emu = run_one(
            [*emu_cmd, "run", "--timeout", str(EMU_TIMEOUT), "--grant-dir", str(work), busybox, *argv[1:]],
            work,
            c.stdin,
            EMU_TIMEOUT + 10,
            None,
        )
        diff = first_difference(native, emu)
        codes = f"(exit native {native.code}, emu {emu.code})"
        note = f" [by design: {BY_DESIGN[applet]}]" if applet in BY_DESIGN else ""
        results.append((applet, "same", "") if diff is None else (applet, "differs", f"{diff} {codes}{note}"))
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--busybox", default="/bin/busybox")
    ap.add_argument("--emu", default="uprobe-emu", help="the uprobe-emu command (default: on PATH)")
    ap.add_argument("--only", help="comma-separated applets (default: every applet)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if not os.access(args.busybox, os.X_OK):
        print(f"busybox_census: {args.busybox} is not an executable (install busybox-static)", file=sys.stderr)
        return 2
    listed = subprocess.run([args.busybox, "--list"], capture_output=True, text=True, check=True).stdout.split()
    applets = args.only.split(",") if args.only else listed
    unknown = sorted(set(applets) - set(listed))
    if unknown:
        print(f"busybox_census: not applets of {args.busybox}: {' '.join(unknown)}", file=sys.stderr)
        return 2
    emu_cmd = args.emu.split()
    emu_cmd[0] = shutil.which(emu_cmd[0]) or emu_cmd[0]
    if not os.access(emu_cmd[0], os.X_OK):
        print(f"busybox_census: {args.emu!r} is not a command (activate the venv)", file=sys.stderr)
        return 2
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bbcensus-") as tmp:
        results = census(args.busybox, emu_cmd, applets, Path(tmp))
    width = max(len(a) for a, _, _ in results)
    for applet, verdict, detail in results:
        print(f"{verdict:8} {applet:{width}}  {detail}".rstrip())
    totals = {v: sum(1 for _, r, _ in results if r == v) for v in ("same", "differs", "n/c")}
    print(
        f"total {len(results)}: same {totals['same']}, differs {totals['differs']}, "
        f"not comparable {totals['n/c']} ({time.monotonic() - start:.0f} s)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps([dict(applet=a, verdict=v, detail=d) for a, v, d in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
