"""The dynamic ``diff`` corpus: host binaries and gcc-built dynamic programs under libc's
malloc (entry and return) and free, compared with the host kernel's events (the
existing tracefs skip rule): the same exit status, stdout and event streams.  (Loops,
threads and forks of a malloc/free program: test_hostdiff_dynamic.py.)

``/bin/ls /`` used to diverge at event #3: the model had no ``/proc/filesystems``, so
libselinux's ``selinuxfs_exists()`` failed to fopen it (malloc, free of the FILE) and
fell back to ``/proc/mounts``.  The model now has the file (the types its mount table
shows, marked and ordered as the host's), and ls takes the native path.
"""

from __future__ import annotations

import shutil

import pytest
from test_hostdiff import needs_tracefs, our_probes_left

from emu import Machine
from emu.frontends import hostdiff

MALLOC_FREE = ["uprobe:libc:malloc", "uretprobe:libc:malloc", "uprobe:libc:free"]


@pytest.fixture(scope="module")
def progs(build_c, tmp_path_factory):
    d = tmp_path_factory.mktemp("dyncorpus")
    work = build_c("exec_work.c", name="exec_work")
    copy = d / "exec_work_copy"
    shutil.copy(work, copy)
    return {
        "dlopen_libm": build_c("dlopen_libm.c", "-ldl", name="dlopen_libm"),
        "exec": build_c("exec.c", name="exec_dyn"),
        "exec_work": work,
        "exec_work_copy": str(copy),
    }


CORPUS = {
    "true": (["/bin/true"], MALLOC_FREE),
    "ls-root": (["/bin/ls", "/"], MALLOC_FREE),
    "echo": (["/bin/echo", "hi"], MALLOC_FREE),
    "sh-pipe": (["/bin/sh", "-c", "echo a | /bin/cat"], MALLOC_FREE),
    "env": (["/usr/bin/env"], MALLOC_FREE),
    "malloc-loop": (["{exec_work}", "work", "6"], MALLOC_FREE),
    "dlopen-libm": (["{dlopen_libm}", "3"], ["uprobe:libc:malloc", "uprobe:libm:frexp", "uretprobe:libm:frexp"]),
    "fork-exec": (["{exec}", "args"], MALLOC_FREE),
    "exec-copy": (["{exec_work}", "exec", "{exec_work_copy}", "work", "4"], MALLOC_FREE),
}


@needs_tracefs
@pytest.mark.parametrize("name", list(CORPUS))
def test_dynamic_corpus_agrees_with_the_host_kernel(progs, name):
    argv, specs = CORPUS[name]
    argv = [a.format(**progs) for a in argv]
    probes, _ = hostdiff.resolve_specs(argv[0], specs, kernel=hostdiff.host_profile_name())
    native = hostdiff.run_native(argv[0], argv, probes, b"", 120)
    model = hostdiff.run_model(argv[0], argv, probes, b"", hostdiff.host_profile_name(), None)
    problems = hostdiff.compare(native, model)
    assert not problems, "\n".join(problems)
    if name != "true":
        assert native.events, "the host produced no events: the probes did not fire"
    assert our_probes_left() == []


def _host_filesystems() -> list[str]:
    with open("/proc/filesystems") as f:
        return f.read().splitlines()


def test_proc_filesystems_lists_the_types_of_the_mount_table_as_the_host_marks_them():
    m = Machine.from_elf("/bin/cat", argv=["cat", "/proc/filesystems"])
    r = m.run(timeout=60)
    assert r.exit_code == 0, r.describe()
    got = r.stdout.decode().splitlines()
    assert "nodev\tproc" in got and "nodev\tdevtmpfs" in got, got
    host = _host_filesystems()
    assert [line for line in host if line in got] == got, f"model {got} not in the host's order {host}"


def test_ls_finds_proc_filesystems_as_natively():
    """libselinux's selinuxfs_exists() fopens /proc/filesystems; when it opens, it
    never falls back to /proc/mounts (no second fopen)."""
    m = Machine.from_elf("/bin/ls", argv=["/bin/ls", "/"])
    opened = []
    from kernel_model.trace.events import Syscall, SyscallReturn

    pending = {}

    def on(ev):
        if isinstance(ev, Syscall) and ev.nr == 257:
            pending[ev.task] = bytes(m.mem.read(ev.args[1], 32)).split(b"\0")[0].decode()
        elif isinstance(ev, SyscallReturn) and ev.task in pending:
            path = pending.pop(ev.task)
            if path.startswith("/proc/"):
                opened.append((path, ev.ret < 1 << 63))

    m.events.subscribe(on, Syscall, SyscallReturn)
    r = m.run(timeout=60)
    assert r.exit_code == 0, r.describe()
    assert opened == [("/proc/filesystems", True)], opened


@pytest.mark.parametrize(
    "argv",
    [["/bin/ls", "/"], ["/bin/sh", "-c", "echo a | /bin/cat"], ["/bin/true"]],
    ids=["ls-root", "sh-pipe", "true"],
)
def test_host_binaries_exit_and_print_as_native_without_probes(argv):
    """Everywhere (no tracefs needed): exit status, stdout and stderr as a native run
    in the model's environment."""
    import subprocess

    from kernel_model.fs.binfmt_elf import DEFAULT_ENV

    env = dict(item.split("=", 1) for item in DEFAULT_ENV)
    native = subprocess.run(argv, capture_output=True, timeout=60, env=env)
    r = Machine.from_elf(argv[0], argv=argv).run(timeout=60)
    assert (r.reason, r.exit_code, r.stdout, r.stderr) == ("exit", native.returncode, native.stdout, native.stderr), (
        r.describe()
    )
