"""``uprobe-emu diff`` on the host as root: nothing a program path says can become a
tracefs command, and no probe, trace instance or tracefs mount outlives a run, whatever
signal ends it (SIGKILL: the next run removes them).  Skipped only when tracefs cannot be
used (the rule of test_hostdiff.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest
from cli_helpers import cli, one_line_error
from test_hostdiff import needs_tracefs

from emu.frontends import hostdiff
from emu.frontends.host_tracefs import Tracefs, run_tag

# these tests look at the host's own tracefs mount (diff's private ones come and go)
pytestmark = pytest.mark.usefixtures("host_tracefs")

UEMU = shutil.which("uprobe-emu")


def uprobe_events() -> str:
    t = Tracefs()
    try:
        return t.read("uprobe_events")
    finally:
        t.close()


def host_state(pid: int) -> tuple[list[str], bool]:
    """(probe lines, instance exists) of the run with this pid."""
    tag = run_tag(pid)
    lines = [line for line in uprobe_events().splitlines() if f":{tag}/" in line]
    inst = os.path.exists(os.path.join(hostdiff.find_tracefs(), "instances", tag))
    return lines, inst


def processes_running(exe: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if f.read().split(b"\0")[0] == exe.encode():
                        out.append(int(d))
            except OSError:
                pass
    return out


def wait_for(cond, what: str, timeout: float = 30):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# --------------------------------------------------------------------------- injection


def _evil_paths(tmp_path, exe):
    """name -> (program path, files to remove).  The first one, written unchecked, is two
    commands: a probe on T/a at 0 and a probe of a foreign group ``uemuinj``."""
    t = str(tmp_path)
    for f in ("a", "a:0x0"):
        shutil.copy(exe, os.path.join(t, f))
    creates = os.path.join(t, "a:0x0\np:uemuinj") + "/ev " + t + "/a:0x0"
    os.makedirs(os.path.dirname(creates), exist_ok=True)
    paths = {
        "newline-creates-a-probe": creates,
        "newline-deletes": os.path.join(t, "x\n-:uemuinj") + "/ev",
        "space": os.path.join(t, "sp ace"),
        "tab": os.path.join(t, "t\tab"),
        "hash": os.path.join(t, "ha#sh"),
        "carriage-return": os.path.join(t, "c\rr"),
        "nbsp-byte": os.path.join(t, os.fsdecode(b"nb\xa0sp")),
    }
    for p in paths.values():
        os.makedirs(os.path.dirname(p), exist_ok=True)
        shutil.copy(exe, p)
        os.chmod(p, 0o755)
    return paths


@pytest.fixture
def block_exe(build_c):
    return build_c("block_read.c", "-static", name="block_read")


@needs_tracefs
@pytest.mark.parametrize(
    "name", ["newline-creates-a-probe", "newline-deletes", "space", "tab", "hash", "carriage-return", "nbsp-byte"]
)
def test_a_path_tracefs_would_interpret_never_reaches_uprobe_events(tmp_path, build_c, name):
    exe = build_c("hello.c", "-static", name="hello_static")
    path = _evil_paths(tmp_path, exe)[name]

    def ours():  # other users' probes come and go: only what this test could add
        return [line for line in uprobe_events().splitlines() if str(tmp_path) in line or "uemuinj" in line]

    before = ours()
    try:
        p = cli("diff", "-e", "p /x:main", path, timeout=60)
        after = ours()
    finally:
        for line in uprobe_events().splitlines():  # never leave an injected probe
            if line.startswith(("p:uemuinj/", "r:uemuinj/")):
                Tracefs().write("uprobe_events", f"-:{line.split()[0][2:]}\n")
    assert after == before, f"uprobe_events changed:\nbefore: {before!r}\nafter: {after!r}"
    line = one_line_error(p)
    assert (
        line.startswith("uprobe-emu: error: diff: program path ")
        and "which tracefs would interpret; the host probes cannot name it" in line
    ), line


@pytest.mark.parametrize("field,value", [("event", "ev\n0"), ("group", "g#x"), ("args", "a=%ax\n-:x/y")])
def test_every_field_of_a_definition_is_checked(field, value):
    fields = dict(kind="p", group="uemu_1_1", event="ev0", path="/bin/true", offset=0x10, args="")
    fields[field] = value
    with pytest.raises(hostdiff.InputError):
        hostdiff.probe_command(**fields)


def test_a_clean_definition_is_one_line():
    assert (
        hostdiff.probe_command("r", "uemu_1_2", "ev3", "/usr/bin/a:b", 0x40, "x=%ax")
        == "r:uemu_1_2/ev3 /usr/bin/a:b:0x40 x=%ax"
    )


def test_help_says_the_native_run_is_unsandboxed_root():
    out = cli("diff", "--help").stdout.decode()
    assert "UNSANDBOXED AS ROOT" in " ".join(out.split()), out


# --------------------------------------------------------------------------- signals


def _start_diff(exe: str, *, private_mount: bool) -> subprocess.Popen:
    """A shell that runs diff in the foreground (so SIGINT is not ignored), prints its
    pid, its exit status and the tracefs mounts left; then, after a line on stdin, runs
    a second diff (whose sweep removes a SIGKILLed run's leftovers) and prints the mounts
    again.  With ``private_mount`` in a mount namespace without tracefs: diff mounts one."""
    mounts = 'awk \'$3=="tracefs"{print "mount", $2}\' /proc/mounts; echo end'
    script = (
        f"sh -c 'echo $$; exec {UEMU} diff -e \"p {exe}:main\" {exe}'; echo rc=$?; {mounts}; "
        f"read _; {UEMU} diff -e guest:hello:_start guest:hello >/dev/null; {mounts}"
    )
    argv = ["sh", "-c", script]
    if private_mount:
        script = "for m in $(awk '$3==\"tracefs\"{print $2}' /proc/mounts); do umount $m; done; " + script
        argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _mount_lines(holder) -> list[str]:
    out = []
    for line in iter(holder.stdout.readline, ""):
        if line.strip() == "end":
            return out
        out.append(line.split()[1])
    raise AssertionError("the holder shell ended early")


def _private_mounts(pid: int) -> list[str]:
    with open(f"/proc/{pid}/mounts") as f:
        return [ln.split()[1] for ln in f if ln.split()[2] == "tracefs" and "uemu-tracefs-" in ln]


SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL]


@needs_tracefs
@pytest.mark.parametrize("private_mount", [False, True], ids=["host-mount", "private-mount"])
@pytest.mark.parametrize("sig", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_leaves_no_probe_instance_or_mount(block_exe, sig, private_mount):
    holder = _start_diff(block_exe, private_mount=private_mount)
    try:
        pid = int(holder.stdout.readline())
        wait_for(
            lambda: host_state(pid)[0] and host_state(pid)[1] and processes_running(block_exe),
            "the probes, the instance and the native run",
        )
        mine = _private_mounts(pid)
        assert bool(mine) == private_mount, f"private tracefs mounts of the run: {mine}"
        os.kill(pid, sig)
        rc = holder.stdout.readline().strip()
        left = [m for m in _mount_lines(holder) if "uemu-tracefs-" in m]
        if sig == signal.SIGKILL:
            assert host_state(pid) != ([], False), "SIGKILL cannot be caught: expected leftovers"
            assert bool(left) == private_mount, left
            for orphan in processes_running(block_exe):
                os.kill(orphan, signal.SIGKILL)
        else:
            expected = "rc=130" if sig == signal.SIGINT else f"rc={128 + sig}"
            assert rc == expected, f"expected {expected} (death by {sig.name}), got {rc}"
            assert host_state(pid) == ([], False), f"left after {sig.name}: {host_state(pid)}"
            assert left == [], f"tracefs mounts left after {sig.name}: {left}"
            assert processes_running(block_exe) == [], "the native run was left running"
        holder.stdin.write("\n")
        holder.stdin.flush()
        after = [m for m in _mount_lines(holder) if "uemu-tracefs-" in m]
        assert host_state(pid) == ([], False), f"left after the next run: {host_state(pid)}"
        assert after == [] and not any(os.path.exists(m) for m in mine), f"mounts left after the next run: {after}"
        assert holder.wait(30) == 0
    finally:
        holder.kill()
        holder.wait()
        for orphan in processes_running(block_exe):
            os.kill(orphan, signal.SIGKILL)
