"""Static glibc guests built by gcc run to completion; the initial stack is Linux's."""

from __future__ import annotations

import subprocess

import pytest

from emu import Machine


@pytest.mark.parametrize("flavour", ["-static", "-static-pie"])
def test_glibc_hello_runs_to_completion(build_c, flavour):
    exe = build_c("hello.c", flavour)
    r = Machine.from_elf(exe, argv=[exe, "one", "two"]).run()
    assert r.reason == "exit" and r.exit_code == 7, r.describe()
    assert r.stdout == f"hello from {exe} argc=3\none\ntwo\nheap ok\n".encode()
    assert r.stderr == b"to stderr\n"


def test_static_pie_is_loaded_at_the_default_base(build_c):
    m = Machine.from_elf(build_c("hello.c", "-static-pie"))
    assert m.resolve("main") >= 0x555555554000
    vma = m.mem.find_vma(m.resolve("main"))
    assert vma.file is m.process.exe and vma.offset_of(m.resolve("main")) == m.process.exe.elf.vaddr_to_offset(
        m.process.exe.elf.resolve("main").value
    )


@pytest.mark.parametrize("flavour", ["-static", "-static-pie"])
def test_initial_stack_and_auxv(build_c, flavour):
    exe = build_c("auxv.c", flavour)
    r = Machine.from_elf(exe, argv=[exe, "arg"], env=["FOO=bar"], uid=1000, gid=1000).run()
    lines = dict(
        line.split("=", 1)
        for line in r.stdout.decode().splitlines()
        if "=" in line and " " not in line.split("=", 1)[0]
    )
    assert lines["pagesz"] == "4096"
    assert lines["phent"] == "56"
    assert lines["entry_ok"] == "1" and lines["phdr_ok"] == "1" and lines["random_nonnull"] == "1"
    assert lines["execfn"] == exe and lines["platform"] == "x86_64"
    assert "argc=2 argv1=arg env0=FOO=bar" in r.stdout.decode()
    assert "uid=1000 euid=1000 gid=1000 egid=1000" in r.stdout.decode()


def test_virtual_clock_and_random_are_deterministic(build_c):
    exe = build_c("clock.c", "-static")
    a = Machine.from_elf(exe).run()
    b = Machine.from_elf(exe).run()
    c = Machine.from_elf(exe, seed=1).run()
    assert a.exit_code == 0 and a.stdout == b.stdout
    assert a.stdout.split(b"rnd=")[1] != c.stdout.split(b"rnd=")[1]


def test_sysroot_files_are_readable_as_natively(build_c):
    """The default view: the host's / read-only, so /etc/passwd reads as it does natively."""
    exe = build_c("sandbox.c", "-static")
    want = subprocess.run([exe, "/etc/passwd"], capture_output=True, timeout=60).stdout
    r = Machine.from_elf(exe, argv=[exe, "/etc/passwd"]).run()
    assert r.stdout == want and b": read " in want, f"want {want!r}, got {r.stdout!r}"


def test_relative_names_start_in_the_working_directory(build_c, tmp_path):
    exe = build_c("sandbox.c", "-static")
    (tmp_path / "data.txt").write_text("granted contents")
    names = ["data.txt", str(tmp_path / "data.txt"), "missing"]
    want = subprocess.run([exe, *names], capture_output=True, timeout=60, cwd=tmp_path).stdout
    r = Machine.from_elf(exe, argv=[exe, *names], grant_dir=str(tmp_path), cwd=str(tmp_path)).run()
    assert (
        r.stdout.decode().splitlines()
        == want.decode().splitlines()
        == [
            "data.txt: read 16: granted contents",
            f"{tmp_path}/data.txt: read 16: granted contents",
            "missing: errno=2",
        ]
    )


def test_proc_self_maps_shows_the_mappings(build_c):
    exe = build_c("sandbox.c", "-static")
    r = Machine.from_elf(exe, argv=[exe, "/proc/self/maps"]).run()
    first = r.stdout.decode().split(": read ", 1)[1]
    assert first.split(":", 1)[1].startswith(" 00400000-")
