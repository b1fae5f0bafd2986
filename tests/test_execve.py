"""execve and execveat against a native run, byte for byte (tests/c/exec.c and the
host's shells): the arguments, environment, AT_EXECFN and comm the new program gets;
descriptors with FD_CLOEXEC closed; caught signals reset to SIG_DFL while ignored ones,
the blocked mask and a pending signal stay and the alternate stack is disabled; the
errnos of failing execs (the process goes on); ``#!`` scripts with an argument, nested
to the kernel's depth; execveat with AT_EMPTY_PATH and a directory descriptor; exec
from a non-leader thread of a multi-threaded process; vfork released at exec; and
shells running pipelines of other programs.  The working directory is granted."""

from __future__ import annotations

import pytest
from guest_compare import BASH, BUSYBOX, fresh_dir, model, native, require

SECTIONS = ["args", "cloexec", "signals", "errors", "script", "at", "threads", "vfork"]


@pytest.fixture(scope="module")
def exe(build_c):
    return build_c("exec.c", "-static", name="exec")


@pytest.fixture(scope="module")
def dyn_exe(build_c):
    return build_c("exec.c", name="exec_dyn")


def _compare(argv, tmp_path, stdin=b""):
    want = native(argv, fresh_dir(tmp_path / "w", {}), stdin)
    got = model(argv, fresh_dir(tmp_path / "w", {}), stdin)
    assert want[0] == "exit 0", f"the native run failed: {want!r}"
    assert got == want, f"{argv!r}\n  native {want!r}\n  model  {got!r}"


@pytest.mark.parametrize("section", SECTIONS)
def test_exec_section_matches_native(exe, tmp_path, section):
    _compare([exe, section], tmp_path)


def test_dynamic_program_fork_execs_itself_as_native(dyn_exe, tmp_path):
    """The child's execve loads the PIE and ld.so again in a new address space."""
    _compare([dyn_exe, "args"], tmp_path)


@pytest.mark.parametrize(
    "argv",
    [
        ["/bin/sh", "-c", "echo a | /bin/cat"],
        ["/bin/sh", "-c", "ls / | wc -l"],
        [BUSYBOX, "sh", "-c", "echo a | cat"],
        [BUSYBOX, "sh", "-c", "cat /etc/hostname; /bin/busybox true; echo $?"],
        [BASH, "-c", "ls | wc -l"],
        [BASH, "-c", "/bin/true && env -i /usr/bin/env; echo $?"],
    ],
    ids=["dash-echo-cat", "dash-ls-wc", "busybox-echo-cat", "busybox-applets", "bash-ls-wc", "bash-env"],
)
def test_shell_pipeline_matches_native(tmp_path, argv):
    require(argv[0]) if argv[0] in (BUSYBOX, BASH) else None
    _compare(argv, tmp_path)


def test_child_exec_leaves_the_parent_address_space(exe, tmp_path):
    """exec_mmap gives the exec'ing child a new mm (its own Unicorn instance): the
    parent keeps its Memory and Unicorn, the child's old copy is freed."""
    from guest_compare import model_machine

    m = model_machine([exe, "args"], fresh_dir(tmp_path / "w", {}))
    parent = m.main_process
    mem, uc = parent.mem, parent.uc
    r = m.run(timeout=60)
    assert r.exit_code == 0, r.describe()
    assert (parent.mem, parent.uc) == (mem, uc), "the parent's address space was replaced"
    assert parent.mem.uc is not None and parent.mem.read(parent.mem.vmas[0].start, 4) == b"\x7fELF", (
        "the parent's mappings were released"
    )
    assert m.counters.syscalls[59] == 1, f"expected one execve, got {m.counters.syscalls[59]}"
    assert m._retired_mms == [], f"the child's old address space was not freed: {m._retired_mms}"


def test_failure_after_the_point_of_no_return_is_sigsegv(build_c, tmp_path):
    """The new image does not fit the memory limit (the old mm is already gone): the
    exec'ing process dies of SIGSEGV (bprm_execve's force_fatal_sig); the parent goes on."""
    from emu import Machine

    exe = build_c("exec.c", "-static", name="exec")
    big = build_c("bigbss.c", "-static", name="bigbss")
    m = Machine.from_elf(exe, argv=[exe, "run", big], max_memory=40 << 20)
    r = m.run(timeout=60)
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, b"child killed 11\n"), r.describe()


def test_exec_of_a_program_that_fits_once_the_old_mm_is_freed(build_c, tmp_path):
    """exec_mmap drops the old mm before the new image is mapped: a child whose old and
    new image would not fit together still execs."""
    from emu import Machine

    exe = build_c("exec.c", "-static", name="exec")
    m = Machine.from_elf(exe, argv=[exe, "run", exe], max_memory=22 << 20)
    r = m.run(timeout=60)
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, b"child exited 2\n"), r.describe()


@pytest.fixture(scope="module")
def census_template(tmp_path_factory):
    import test_busybox_applets as applets

    root = tmp_path_factory.mktemp("bbexec") / "t"
    root.mkdir()
    applets.census.make_template(root, require(BUSYBOX))
    return root


@pytest.mark.parametrize("applet", ["timeout", "nologin", "mim"])
def test_busybox_applet_that_execs_matches_native(census_template, tmp_path, applet):
    """The census's applets that run another program (timeout forks and execs ``true``,
    nologin and mim exec a shell): as native, with the census's canned invocation."""
    import test_busybox_applets as applets

    want, got = applets.run_both(census_template, tmp_path / "w", applet)
    assert got == want, f"busybox {applet}:\n  native {want!r}\n  model  {got!r}"


def test_trace_of_a_guest_that_execs_runs_the_new_program(tmp_path):
    """The traced address space goes at exec; the trace follows the task into the new
    image (tests/test_trace_exec.py) and the new program's output is the native one."""
    from cli_helpers import cli

    p = cli("trace", require(BUSYBOX), "sh", "-c", "exec /bin/busybox echo hi")
    assert p.returncode == 0, f"exit {p.returncode}: {p.stderr[-300:]!r}"
    assert p.stdout.endswith(b"hi\n") or b"\nhi\n" in p.stdout, p.stdout[-300:]
