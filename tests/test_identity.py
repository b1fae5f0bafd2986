"""Identity: credentials (kernel/sys.c's set*id rules, getgroups, the auxv ids) as the
invoking user by default or as configured (``Machine(uid=, gid=, groups=)``, ``--uid``/
``--gid``/``--groups``), and the socket calls of a machine without network.  Native
runs of the same gcc-built programs are the reference; unprivileged native runs use
util-linux's setpriv (the suite runs as root, as CI does)."""

from __future__ import annotations

import os
import subprocess

import pytest
from cli_helpers import cli, one_line_error

from emu.machine import Machine
from kernel_model.errors import InputError


@pytest.fixture(scope="module")
def ids_exe(build_c):
    return build_c("ids.c", "-static")


@pytest.fixture(scope="module")
def sockets_exe(build_c):
    return build_c("sockets.c", "-static")


def native(exe, uid=None, gid=None, groups=None) -> str:
    cmd = [exe]
    if uid is not None:
        assert os.geteuid() == 0, "an unprivileged native reference run needs root (setpriv)"
        grp = ["--clear-groups"] if not groups else ["--groups", ",".join(map(str, groups))]
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={gid}", *grp, exe]
    p = subprocess.run(cmd, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    return p.stdout.decode()


def model(exe, **kw) -> str:
    r = Machine.from_elf(exe, **kw).run()
    assert r.exit_code == 0, r
    return r.stdout.decode()


def line(out: str, prefix: str) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith(prefix))


def test_default_identity_is_the_invoking_users(ids_exe):
    want, got = native(ids_exe), model(ids_exe)
    assert got == want, f"native:\n{want}\nmodel:\n{got}"


@pytest.mark.parametrize("groups", [[], [9, 3, 5]])
def test_unprivileged_user_matches_native(ids_exe, groups):
    """setuid/setgid/setre*id/setres*id/setfs*id/setgroups with the kernel's EPERM rules."""
    want = native(ids_exe, 1000, 1000, groups)
    got = model(ids_exe, uid=1000, gid=1000, groups=groups)
    assert got == want, f"native:\n{want}\nmodel:\n{got}"


def test_root_matches_native(ids_exe):
    want = native(ids_exe, 0, 0, [])
    got = model(ids_exe, uid=0, gid=0, groups=[])
    assert got == want, f"native:\n{want}\nmodel:\n{got}"


@pytest.mark.parametrize(
    "step,want",
    [
        ("setuid(0) ", "rc=-1 errno=EPERM uid=1000,1000,1000,1000"),
        ("setgid(777)", "rc=-1 errno=EPERM uid=1000,1000,1000,1000 gid=1000,1000,1000,1000"),
        ("setgroups(9,3)", "rc=-1 errno=EPERM"),
        ("setfsuid(4141)", "rc=1000 errno=0 uid=1000,1000,1000,1000"),
        ("setuid(1000)", "rc=0 errno=0 uid=1000,1000,1000,1000"),
    ],
)
def test_unprivileged_set_ids(ids_exe, step, want):
    got = line(model(ids_exe, uid=1000, gid=1000), step)
    assert want in got, f"want {want!r} in {got!r}"


@pytest.mark.parametrize(
    "step,want",
    [
        ("setgid(777)", "rc=0 errno=0 uid=0,0,0,4141 gid=777,777,777,777"),
        ("setreuid(-1,4242)", "uid=0,4242,4242,4242"),  # the saved uid follows a new euid
        ("setuid(0) ", "rc=0 errno=0 uid=0,0,4242,0"),  # back to the real uid without privilege
        ("setresuid(-1,0,-1)", "rc=-1 errno=EPERM"),  # euid 4343: no CAP_SETUID left
    ],
)
def test_root_set_ids(ids_exe, step, want):
    got = line(model(ids_exe, uid=0, gid=0, groups=[]), step)
    assert want in got, f"want {want!r} in {got!r}"


def test_getgroups_lists_the_configured_groups_sorted(ids_exe):
    got = line(model(ids_exe, uid=5, gid=6, groups=[30, 10, 20]), "ngroups=")
    assert got == "ngroups=3 10 20 30", got


def test_auxv_ids_follow_the_configuration(ids_exe):
    got = model(ids_exe, uid=123, gid=456).splitlines()[:2]
    assert got == ["uid=123 euid=123 gid=456 egid=456", "auxv uid=123 euid=123 gid=456 egid=456"], got


def test_configured_ids_alone_mean_no_supplementary_groups(ids_exe):
    assert line(model(ids_exe, uid=os.getuid(), gid=os.getgid()), "ngroups=") == "ngroups=0"


def test_cli_uid_gid_groups_options(ids_exe):
    p = cli("run", "--uid", "7", "--gid", "8", "--groups", "2,1", ids_exe)
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode().splitlines()
    assert out[0] == "uid=7 euid=7 gid=8 egid=8", out[0]
    assert out[2] == "ngroups=2 1 2", out[2]


@pytest.mark.parametrize(
    "opt,value,why",
    [
        ("--uid", "-1", "an id is 0-4294967294"),
        ("--gid", "4294967295", "an id is 0-4294967294"),
        ("--uid", "root", "not a number"),
        ("--groups", "1,x", "not a number"),
    ],
)
def test_cli_rejects_bad_ids(opt, value, why):
    err = one_line_error(cli("run", opt, value, "guest:hello"))
    assert f"argument {opt}: {why}" in err, err


@pytest.mark.parametrize("kw", [{"uid": -1}, {"gid": 1 << 32}, {"uid": "0"}, {"groups": [1, -2]}, {"uid": True}])
def test_api_rejects_bad_ids(kw):
    with pytest.raises(InputError, match="must be an integer"):
        Machine.from_guest("hello", **kw)


# -------------------------------------------------------------------- no network
SOCKET_ROWS = 20  # the lines before the socket() calls that succeed natively


def test_socket_calls_on_non_sockets_match_native(sockets_exe):
    """ENOTSOCK for a descriptor that is not a socket, EBADF for none, the flag checks
    that come first (accept4, sendmsg), and socket()'s family/type validation."""
    want = native(sockets_exe).splitlines()[:SOCKET_ROWS]
    got = model(sockets_exe).splitlines()[:SOCKET_ROWS]
    assert got == want, "\n".join(f"native {w!r}\nmodel  {g!r}" for w, g in zip(want, got) if w != g)


@pytest.mark.parametrize(
    "call,errno_name",
    [
        ("socket(UNIX)", "EACCES"),
        ("socket(INET)", "EACCES"),
        ("socket(INET6)", "EACCES"),
        ("socket(NETLINK)", "EAFNOSUPPORT"),
        ("socket(PACKET)", "EAFNOSUPPORT"),
        ("socketpair(UNIX)", "EACCES"),
    ],
)
def test_no_socket_can_be_created(sockets_exe, call, errno_name):
    got = line(model(sockets_exe), call + " ")
    assert got.split()[1:] == ["rc=-1", f"errno={errno_name}"], got


def test_bash_does_not_believe_it_runs_under_sshd():
    """bash reads the bashrc files of a non-interactive shell when getpeername(0)
    succeeds or fails with anything but ENOTSOCK (run_startup_files: sshd)."""
    m = Machine.from_elf("/bin/bash-static", argv=["bash", "-c", "echo hi"])
    opened = []
    openat = m.syscalls.table[257]

    def spy(task, regs, dfd, path, *rest):
        opened.append(m.mem.read_cstring(path).decode())
        return openat(task, regs, dfd, path, *rest)

    m.syscalls.register(257, spy)
    r = m.run()
    assert (r.exit_code, r.stdout) == (0, b"hi\n"), r
    assert not [p for p in opened if "bashrc" in p], f"bash opened {opened}"


def test_credentials_are_per_task_and_copied_at_fork(build_c):
    """copy_creds: a thread's raw setresuid changes only that task; a fork child starts
    with the ids of the thread that forked."""
    exe = build_c("thread_creds.c", "-static", "-pthread")
    want = native(exe, 0, 0, [])
    got = model(exe, uid=0, gid=0, groups=[])
    assert got == want == ("thread uid=5,6,7\nthread's child uid=5,6,7\nmain uid=0,0,0\nmain's child uid=8,8,8\n"), (
        f"native:\n{want}\nmodel:\n{got}"
    )


@pytest.mark.parametrize("groups,status", [([], 0), ([4], 256 - 14)])
def test_getgroups_touches_the_list_only_to_copy_groups(groups, status):
    """groups_to_user copies ngroups entries: with none, a NULL list is no EFAULT."""
    m = Machine.from_asm(
        """
_start:
    mov edi, 5
    xor esi, esi
    mov eax, 115           # getgroups(5, NULL)
    syscall
    mov edi, eax
    mov eax, 60
    syscall
""",
        uid=1,
        gid=1,
        groups=groups,
    )
    r = m.run()
    assert r.exit_code == status, f"want exit {status}, got {r.exit_code}"


def test_getresuid_to_a_bad_pointer_is_efault():
    m = Machine.from_asm("""
_start:
    mov edi, 8
    mov esi, 8
    mov edx, 8
    mov eax, 118           # getresuid(8, 8, 8)
    syscall
    neg eax
    mov edi, eax
    mov eax, 60
    syscall
""")
    r = m.run()
    assert r.exit_code == 14, f"EFAULT (14) expected, got {r.exit_code}"


def test_glibc_set_ids_in_a_threaded_program_reaches_every_thread(build_c):
    """glibc signals each other thread (SIGSETXID) to change its own credentials: the
    signal must run the other thread's handler, or setresgid never returns."""
    exe = build_c("setxid_threads.c", "-static", "-pthread")
    want = native(exe)
    r = Machine.from_elf(exe, uid=0, gid=0, groups=[]).run(timeout=60)
    assert r.reason == "exit" and r.exit_code == 0, r
    assert r.stdout.decode() == want, f"native:\n{want}model:\n{r.stdout.decode()}"
