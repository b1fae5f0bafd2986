"""/proc/filesystems as filesystems_proc_show makes it: the host kernel's registered
types, read the way libselinux reads it (stdio lines) and in small chunks, byte for
byte and read for read as natively."""

from __future__ import annotations

import builtins
import subprocess

import pytest

from emu.machine import Machine
from kernel_model.fs.proc import procfs
from kernel_model.fs.proc.procfs import ProcFs


def host_filesystems() -> bytes:
    with open("/proc/filesystems", "rb") as f:
        return f.read()


@pytest.fixture(scope="module", params=["static", "dynamic"])
def exe(request, build_c):
    flags = ("-static",) if request.param == "static" else ()
    return build_c("proc_maps.c", *flags, name=f"proc_maps_{request.param}")


def native(exe: str, *args: str) -> bytes:
    p = subprocess.run([exe, *args], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def model(exe: str, *args: str) -> bytes:
    r = Machine.from_elf(exe, argv=[exe, *args]).run(timeout=120)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return r.stdout


@pytest.mark.parametrize("chunk", [1, 7, 64, 1024, 4096])
def test_chunked_reads_as_natively(exe, chunk):
    host = host_filesystems()
    reads = -(-len(host) // chunk) + 1  # the last read returns 0
    want = f"bytes={len(host)} reads={reads} last=0\n".encode() + host
    got_native = native(exe, "fs", str(chunk))
    assert got_native == want, f"the host disagrees with the spec:\n{got_native.decode()}"
    got = model(exe, "fs", str(chunk))
    assert got == want, f"model:\n{got.decode()}\nnative:\n{want.decode()}"


def test_libselinux_getline_scan_as_natively(exe):
    host = host_filesystems()
    lines, selinuxfs = host.count(b"\n"), int(b"\tselinuxfs\n" in host)
    want = f"lines={lines} bytes={len(host)} selinuxfs={selinuxfs}\n".encode()
    got_native = native(exe, "fsline")
    assert got_native == want, f"the host disagrees with the spec:\n{got_native.decode()}"
    assert model(exe, "fsline") == want


@pytest.fixture
def m():
    return Machine.from_asm("_start:\n    hlt", path="/opt/prog", argv=["prog"], env=[])


def read_filesystems(m) -> bytes:
    f = ProcFs(m).root.lookup(m.task, "filesystems").open(m.task, 0)
    out = b""
    while data := f.read(100, None):
        out += data
    return out


def test_text_is_the_hosts_registered_types(m):
    assert read_filesystems(m) == host_filesystems()


def test_without_the_hosts_file_the_mounted_types_are_listed(m, monkeypatch):
    real_open = builtins.open

    def no_filesystems(path, *a, **kw):
        if path == "/proc/filesystems":
            raise PermissionError(13, "denied")
        return real_open(path, *a, **kw)

    monkeypatch.setattr(procfs, "open", no_filesystems, raising=False)
    names = [line.split(b"\t") for line in read_filesystems(m).splitlines()]
    assert [b"nodev", b"proc"] in names and [b"nodev", b"devtmpfs"] in names, names
