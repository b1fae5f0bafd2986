"""/proc and /dev through a guest's own syscalls: a gcc-built program prints what it
reads there (host-specific numbers only compared with what it learns from syscalls),
and the model must print exactly what the native run prints."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from emu import Machine


@pytest.fixture(scope="module")
def procdev(build_c):
    return build_c("procdev.c", "-static", "-pthread")


def native(exe: str, mode: str) -> bytes:
    """The native run in a session of its own (no controlling terminal), stdin /dev/null."""
    p = subprocess.run(["setsid", exe, mode, "a b"], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    return p.stdout


def model(exe: str, mode: str) -> bytes:
    r = Machine.from_elf(exe, argv=[exe, mode, "a b"]).run(timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return r.stdout


EXPECTED = {
    "status": b"Name:\tprocdev_static_\nUmask:\t0027\nState:\tR (running)\nTgid is getpid: 1\n"
    b"Pid is gettid: 1\nPPid is getppid: 1\nUid is getuid: 1\nThreads:\t1\n"
    b"SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000200\n"
    b"SigIgn:\t0000000000000002\nSigCgt:\t0000000000004000\nNgid:\t0\nTracerPid:\t0\n"
    b"Kthread:\t0\nVmLck:\t       0 kB\nVmPin:\t       0 kB\nVmSwap:\t       0 kB\n"
    b"HugetlbPages:\t       0 kB\nCoreDumping:\t0\nuntag_mask:\t0xffffffffffffffff\n",
    "stat": b"priority 20 nice 0 itrealvalue 0 rsslim 18446744073709551615 kstkesp 0 kstkeip 0\n"
    b"signal 0 blocked 512 sigignore 2 sigcatch 16384 nswap 0 0\n"
    b"exit_signal 17 rt_priority 0 policy 0 exit_code 0\nstart_stack is argc's address: 1\n"
    b"arg span is cmdline: 1\nenv span is environ: 1\nvsize nonzero: 1\n"
    b"pid is getpid: 1\ncomm: (procdev_static_)\nstate R ppid is getppid: 1 pgrp is getpgrp: 1\n"
    b"fields after comm: 50\n",
    "fds": b"fd 9 is a pipe: 1\nreopened: 5\nwrite: 12\nread: 12 through proc\n"
    b"same pipe inode: 1 fifo: 1\nlisted: 0 1 2 3 9\n"
    b"reopened file reads from 0: 1, the first still at 4\nfd 42: -1 errno=2\n",
    "devices": b"/dev/null: chr=1 mode=666 rdev=1:3 ino=3\n/dev/zero: chr=1 mode=666 rdev=1:5 ino=4\n"
    b"/dev/full: chr=1 mode=666 rdev=1:7 ino=5\n/dev/random: chr=1 mode=666 rdev=1:8 ino=6\n"
    b"/dev/urandom: chr=1 mode=666 rdev=1:9 ino=7\n/dev/tty: chr=1 mode=666 rdev=5:0 ino=9\n"
    b"fstat is stat: 1\nnull read 0 write 3\nTCGETS on null: -1 errno=25\n"
    b"zero read 8 first 0 last 0\nfull write -1 errno=28\nurandom read 16\n"
    b"/dev/stdin -> /proc/self/fd/0\n/dev/fd -> /proc/self/fd\n",
    "redirect": b"after: back on stdout\n",
    "vfork": b"State:\tD (disk sleep)\n",
    "leader_exit": b"State:\tZ (zombie)\nThreads:\t2\nFDSize:\t0\nVmSize shown: 0, Umask shown: 0\n"
    b"cmdline: 0 bytes\nState:\tR (running)\nthread's VmSize shown: 1\ntask entries: 2\n",
    "uptime": b"parsed: 1\nMemTotal first\nMemTotal is sysconf: 1\n",
    "fork": b"child cmdline is the parent's: 1\nchild PPid is getppid: 1\nchild Tgid is getpid: 1\n"
    b"State:\tZ (zombie)\nThreads:\t1\n"
    b"(missing)\nFDSize:\t0\nzombie cmdline: 0\nzombie state Z exit_code 768\n"
    b"zombie flags without PF_RANDOMIZE: 0x804c\nzombie wchan: 1\n"
    b"reaped child's dir: -2\n",
    "threads": b"thread-self from the thread: 1\nThreads:\t2\ntask entries: 2, the thread's among them: 1\n"
    b"thread Pid is its tid: 1, Tgid is getpid: 1\n/proc/TID reachable: 1\nThreads:\t1\n",
}


def _strip_groups(out: bytes) -> bytes:
    """Groups: are the invoking user's, natively and in the model alike; not pinned."""
    return b"".join(line for line in out.splitlines(keepends=True) if not line.startswith(b"Groups:"))


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_guest_reads_proc_and_dev_as_natively(procdev, mode):
    want = EXPECTED[mode]
    got_native = _strip_groups(native(procdev, mode))
    assert got_native == want, f"the host disagrees with the spec:\n{got_native.decode()}"
    got = _strip_groups(model(procdev, mode))
    assert got == want, f"native:\n{want.decode()}\nmodel:\n{got.decode()}"


def test_groups_line_matches_the_native_run(procdev):
    pick = lambda out: [line for line in out.splitlines() if line.startswith(b"Groups:")]  # noqa: E731
    assert pick(model(procdev, "status")) == pick(native(procdev, "status"))


def test_setproctitle_cmdline_as_natively(procdev):
    """The title runs into the environment, up to and with its first NUL."""
    env = {"A": "1", "B": "22"}
    argv = [procdev, "title", "x"]
    nat = subprocess.run(argv, capture_output=True, timeout=60, env=env).stdout
    r = Machine.from_elf(procdev, argv=argv, env=["A=1", "B=22"]).run(timeout=60)
    n = len(procdev) + len("title") + len("x") + 3
    want = b"t" * n + b"A=1|\n" + f"{n + 4} bytes\n".encode()
    assert (nat, r.stdout) == (want, want)


def test_cmdline_and_comm_as_natively(procdev):
    want = (
        f"{procdev}|cmdline|a b|\ncomm: procdev_static_\nenviron matches: 1\ncwd is getcwd: 1\nroot: /\n"
        "auxv pairs agree with getauxval: 1, ends with AT_NULL: 1\n"
    ).encode()
    assert native(procdev, "cmdline") == want
    assert model(procdev, "cmdline") == want


BUSYBOX, BASH = "/bin/busybox", "/usr/bin/bash-static"
SCRIPTS = [
    (BUSYBOX, "sh", "echo hidden >/dev/null; echo shown; read x </dev/null; echo rc=$?"),
    (BUSYBOX, "sh", "exec 3</proc/self/status; read a b <&3; echo $a $b"),
    (BUSYBOX, "sh", "echo err 2>/dev/null >&2; echo done"),
    (BUSYBOX, "sh", "read -n 4 z </dev/zero; echo ${#z}"),
    (BUSYBOX, "sh", "echo x >/dev/full; echo rc=$?"),
    (BASH, None, "echo hidden >/dev/null; read c </proc/self/comm; echo $c; echo $(</proc/self/cmdline)"),
    (BASH, None, "echo x >/dev/full; echo rc=$?"),
    (BASH, None, "echo a > /dev/stderr; echo b >/dev/stdout"),
    (BASH, None, "echo x >/dev/tty; echo rc=$?"),
    (BUSYBOX, "sh", "exec 5<>/dev/tty; echo rc=$?"),
]


@pytest.mark.parametrize("binary,applet,script", SCRIPTS, ids=[s[2] for s in SCRIPTS])
def test_shell_redirections_to_dev_and_proc_match_native(binary, applet, script):
    argv = [binary, *([applet] if applet else []), "-c", script]
    nat = subprocess.run(["setsid", *argv], capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    r = Machine.from_elf(binary, argv=argv).run(timeout=60)
    got = (r.exit_code, r.stdout, r.stderr)
    want = (nat.returncode, nat.stdout, nat.stderr)
    assert got == want, f"native {want}\nmodel  {got} ({r.describe()})"


def test_cli_guest_reads_its_piped_stdin_through_dev_stdin():
    """`echo hello | uprobe-emu run busybox sh -c 'read x </dev/stdin ...'` as natively."""
    script = "read x </dev/stdin; echo got $x; exec 3</proc/self/fd/0; echo rc=$?"
    nat = subprocess.run([BUSYBOX, "sh", "-c", script], input=b"hello\n", capture_output=True, timeout=60)
    emu = subprocess.run(
        [shutil.which("uprobe-emu"), "run", BUSYBOX, "sh", "-c", script],
        input=b"hello\n",
        capture_output=True,
        timeout=120,
    )
    assert (emu.returncode, emu.stdout) == (nat.returncode, nat.stdout) == (0, b"got hello\nrc=0\n"), emu.stderr
