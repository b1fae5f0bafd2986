"""File-backed mmap (kernel_model/mm/mmap.py): MAP_PRIVATE and read-only MAP_SHARED mappings
of guest-opened files, their errnos as do_mmap gives them, mprotect/munmap splitting
file VMAs, /proc/self/maps lines as show_map_vma prints them, and one page-cache file
per inode.  The host runs the same program first: its output is the spec."""

from __future__ import annotations

import os
import subprocess

import pytest
from test_memory_limits import run_syscall

from emu import Machine
from kernel_model.mm.filemap import PageCache
from kernel_model.trace import events as ev


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("mmapfiles")
    data = d / "data.bin"
    data.write_bytes(bytes((i * 7 + 3) & 0xFF for i in range(0x3800)))
    (d / "wo.txt").write_text("")
    os.link(data, d / "hard.bin")
    os.symlink("data.bin", d / "link.bin")
    return d


@pytest.fixture(scope="module")
def mmap_exe(build_c):
    return build_c("file_mmap.c", name="file_mmap_dynamic")


def _argv(exe, d):
    return [exe, str(d / "data.bin"), str(d), str(d / "wo.txt"), str(d / "hard.bin")]


@pytest.fixture(scope="module")
def native(mmap_exe, files):
    out = subprocess.run(_argv(mmap_exe, files), capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.decode().split("\n")


@pytest.fixture(scope="module")
def model(mmap_exe, files):
    """The emulated run, and the file VMAs of the fixed area just before exit_group."""
    m = Machine.from_elf(mmap_exe, argv=_argv(mmap_exe, files), grant_dirs=[str(files)])
    at_exit = []
    m.events.subscribe(
        lambda e: e.nr == 231 and at_exit.extend(v for v in m.mem.vmas if v.start >> 32 == 2), ev.Syscall
    )
    r = m.run(timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return r.stdout.decode().split("\n"), at_exit, m


def _section(lines, start, stop=None):
    i = lines.index(start)
    j = lines.index(stop) if stop else len(lines)
    return lines[i:j]


@pytest.mark.parametrize(
    "case",
    [
        "private offset 0x3000: ok",
        "first=1 last=1 tail=0",  # file bytes, zero tail of the last page
        "private write stays private: file=1 map=1",
        "hint taken=1 byte=1",
        "shared read-only: ok",
        "shared byte=1",
        "mprotect shared writable: -1 errno=13",  # no VM_MAYWRITE on an O_RDONLY file
        "shared writable on O_RDONLY: errno=13",
        "private on O_WRONLY: errno=13",
        "shared read-only on O_RDWR: ok",
        "directory: errno=19",
        "pipe: errno=19",
        "closed fd: errno=9",
        "unaligned offset: errno=22",
        "bad map type: errno=22",
        "zero length: errno=22",
        "offset 0x8000000000000000: failed errno=75",
        "offset 0x7ffffffffffff000: failed errno=75",
        "offset 0x7fffffffffffe000: ok errno=0",
    ],
)
def test_mmap_case_answers_as_the_kernel(native, model, case):
    assert case in native, f"the host disagrees with the spec: {case!r} not in {native}"
    assert case in model[0], f"expected {case!r}, model printed {model[0]}"


@pytest.mark.parametrize(
    "section",
    [
        "maps three pages:",
        "maps middle page writable:",
        "maps first page unmapped:",
        "after split: 1 1",
        "maps the file and a hard link of it:",
    ],
)
def test_maps_lines_through_mprotect_and_munmap_splits(native, model, section):
    """Exact maps lines: offsets of the split pieces, MAJ:MIN, inode, the path the file
    was mapped through (a hard link prints its own name), 's' for MAP_SHARED."""
    nxt = {
        "maps three pages:": "maps middle page writable:",
        "maps middle page writable:": "maps first page unmapped:",
        "maps first page unmapped:": "after split: 1 1",
        "after split: 1 1": "maps the file and a hard link of it:",
    }.get(section)
    want, got = _section(native, section, nxt), _section(model[0], section, nxt)
    assert got == want, "\n".join(["expected (native):", *want, "got (model):", *got])


def test_a_hard_link_is_the_same_page_cache_file(model, files):
    """Three mappings, two names, one inode: one MappedFile, keyed by (st_dev, st_ino)."""
    _, vmas, m = model
    st = os.stat(files / "data.bin")
    keys = {(v.file.dev, v.file.ino) for v in vmas}
    assert len(vmas) == 3 and len({id(v.file) for v in vmas}) == 1, vmas
    assert keys == {(st.st_dev, st.st_ino)}, f"expected {(st.st_dev, st.st_ino)}, got {keys}"
    assert [v.name for v in vmas] == [str(files / "data.bin")] * 2 + [str(files / "hard.bin")]


def test_a_symlink_is_the_same_page_cache_file(files):
    cache = PageCache()
    fds = [os.open(files / name, os.O_RDONLY) for name in ("data.bin", "link.bin", "hard.bin")]
    try:
        got = {id(cache.file_of(fd, "p", "p")) for fd in fds}
    finally:
        for fd in fds:
            os.close(fd)
    assert len(got) == 1, f"expected one file for three paths to one inode, got {len(got)}"


def test_a_mapped_file_reads_from_the_host_past_eof_as_zeros(files):
    cache = PageCache()
    fd = os.open(files / "data.bin", os.O_RDONLY)
    try:
        f = cache.file_of(fd, "/data.bin", "/data.bin")
    finally:
        os.close(fd)  # the cache keeps its own descriptor
    assert (f.size, f.read(0x37FE, 4)) == (0x3800, bytes([(0x37FE * 7 + 3) & 0xFF, (0x37FF * 7 + 3) & 0xFF, 0, 0]))


def test_without_a_descriptor_a_file_mapping_is_ebadf():
    assert run_syscall(9, 0, 4096, 1, 2, 7, 0) == -9  # MAP_PRIVATE on fd 7: nothing open


def test_the_page_cache_holds_few_host_descriptors(files, tmp_path):
    """Many mapped files, few open host descriptors: a file whose descriptor was
    closed is reopened by path (and only while it is the same inode)."""
    cache = PageCache()
    mapped = []
    for i in range(PageCache.MAX_OPEN + 20):
        p = tmp_path / f"f{i}"
        p.write_bytes(bytes([i]) * 10)
        fd = os.open(p, os.O_RDONLY)
        mapped.append(cache.file_of(fd, str(p), str(p)))
        os.close(fd)
    got = [f.read(3, 1) for f in mapped]
    assert got == [bytes([i]) for i in range(len(mapped))] and len(cache._open) <= PageCache.MAX_OPEN
    (tmp_path / "f0").unlink()
    (tmp_path / "f0").write_bytes(b"other inode")
    for f in mapped[1 : PageCache.MAX_OPEN + 1]:
        f.read(0, 1)  # evicts f0's descriptor
    assert mapped[0].read(0, 2) == b"\0\0", "a replaced file must not be read as the mapped one"
