"""/proc/PID/maps as fs/proc/task_mmu.c makes it through fs/seq_file.c: the lines of the
mappings as they are when the reading reaches them, a page of buffer at a time, the
[vsyscall] gate line last.  The guest program's native run is the expected value; the
model-level tests pin the seq_file rules (position, buffer, restart) exactly."""

from __future__ import annotations

import os
import subprocess

import pytest

from emu.machine import Machine
from kernel_model.fs.elf import load_elf_file
from kernel_model.fs.proc.procfs import ProcFs
from kernel_model.mm.mm_types import PROT_READ, PROT_WRITE

O_RDONLY = 0
VSYSCALL = "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n"


@pytest.fixture(scope="module")
def dynamic(build_c):
    return build_c("proc_maps.c", name="proc_maps_dynamic")


def native(exe: str, *args: str) -> bytes:
    p = subprocess.run([exe, *args], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def model(exe: str, *args: str) -> bytes:
    r = Machine.from_elf(exe, argv=[exe, *args]).run(timeout=120)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return r.stdout


EXPECTED = {
    "regions": "rw-p [heap]\nr--p [vvar]\nr--p [vvar_vclock]\nr-xp [vdso]\nrw-p [stack]\n" + VSYSCALL,
    "stack": "initial size is at least 128 KiB: 1\ntop stays: 1\ngrew to the deepest frame: 1\n"
    "no further than the page below it: 1\ngrown size over 2 MiB: 1\n",
    "change": "first read: 64\nmapped: 1 1\nrest starts with the first line's rest: 1\n"
    "mapping above what was read is shown: 1\nmapping below what was read is not: 1\nends with [vsyscall]: 1\n",
    "seek": "first pass shows it: 0\nat the end: 0\nlseek 0: 0\n"
    "after lseek 0 it is shown: 1, one line longer: 1\npread at 0 is the new text's start: 1\n",
    "single": "first read: after-open\nrest is the first text's: 1\nafter lseek 0: after-read\nUmask\n",
}


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_guest_reads_maps_as_natively(dynamic, mode):
    want = EXPECTED[mode].encode()
    got_native = native(dynamic, mode)
    assert got_native == want, f"the host disagrees with the spec:\n{got_native.decode()}"
    got = model(dynamic, mode)
    assert got == want, f"model:\n{got.decode()}\nnative:\n{want.decode()}"


# ------------------------------------------------------------------ the seq_file rules, in the model


@pytest.fixture
def m():
    return Machine.from_asm("_start:\n    hlt", path="/opt/prog", argv=["prog"], env=[])


def open_maps(m, path: str = "self/maps"):
    fs = ProcFs(m)
    node = fs.root
    for name in path.split("/"):
        node = node.lookup(m.task, str(m.process.pid) if name == "self" else name)
    f = node.open(m.task, O_RDONLY)
    assert not isinstance(f, int), f"open {path}: errno {-f}"
    return f


def read_all(f, chunk: int = 1 << 20) -> bytes:
    out = b""
    while data := f.read(chunk, None):
        out += data
    return out


def many_mappings(m, n: int = 120) -> None:
    for i in range(n):
        m.mem.map(0x10000000 + i * 0x2000, 0x1000, PROT_READ, f"/opt/lib{i:03d}.so")


@pytest.mark.parametrize("chunk", [1, 7, 64, 100, 4096, 1 << 20])
def test_chunked_reads_give_the_whole_text(m, chunk):
    many_mappings(m)
    want = (m.mem.maps() + VSYSCALL).encode()
    got = read_all(open_maps(m), chunk)
    assert got == want, f"chunk {chunk}: {len(got)} bytes, want {len(want)}"


def test_the_gate_line_is_last_and_exact(m):
    text = read_all(open_maps(m)).decode()
    assert text.splitlines(keepends=True)[-1] == VSYSCALL, text


def test_one_read_gives_the_lines_that_fit_in_a_page(m):
    """seq_read_iter's Fill loop: whole records while the next one still fits below the
    page's end (seq_printf: count + len < size)."""
    many_mappings(m)
    lines = [(line + "\n").encode() for line in m.mem.maps().splitlines()]
    want, total = b"", 0
    for line in lines:
        if total + len(line) >= 4096:
            break
        want, total = want + line, total + len(line)
    got = open_maps(m).read(1 << 20, None)
    assert got == want, f"first read {len(got)} bytes, want {len(want)}"


def test_a_line_in_the_buffer_stays_as_printed(m):
    """The rest of a line already printed comes from the buffer: a later change to that
    mapping is not seen in it."""
    f = open_maps(m)
    first = m.mem.vmas[0]
    head = f.read(10, None)
    old_line = first.maps_line() + "\n"
    m.mem.protect(first.start, first.size, first.prot | PROT_WRITE)
    rest = f.read(len(old_line) - 10, None)
    assert head + rest == old_line.encode(), f"{head + rest!r} != {old_line!r}"


def test_a_line_not_yet_printed_shows_the_change(m):
    f = open_maps(m)
    first_line = (m.mem.vmas[0].maps_line() + "\n").encode()
    assert f.read(len(first_line), None) == first_line
    second = m.mem.vmas[1]
    m.mem.protect(second.start, second.size, PROT_READ)
    got = f.read(1 << 20, None).decode().splitlines(keepends=True)[0]
    assert got == m.mem.find_vma(second.start).maps_line() + "\n" and got.split()[1] == "r--p", got


@pytest.mark.parametrize("where,seen", [(0x1000_0000_0000, True), (0x20000, False)])
def test_a_mapping_made_between_reads(m, where, seen):
    """m_start resumes after the end of the last line read: a new mapping above it is
    listed, one below is not."""
    f = open_maps(m)
    head = f.read(20, None)
    m.mem.map(where, 0x1000, PROT_READ, "[new]")
    text = (head + read_all(f)).decode()
    assert ("[new]" in text) is seen, text


def test_the_stack_line_shows_its_current_extent(m):
    stack = next(v for v in m.mem.vmas if v.name == "[stack]")
    before = stack.start
    assert m.mem.expand_stack(before - 0x5000) is stack
    line = next(ln for ln in read_all(open_maps(m)).decode().splitlines() if ln.endswith("[stack]"))
    assert line.split()[0] == f"{before - 0x5000:08x}-{stack.end:08x}", line


def test_lseek_to_0_prints_again(m):
    f = open_maps(m)
    first = read_all(f)
    m.mem.map(0x1000_0000_0000, 0x1000, PROT_READ, "[new]")
    assert f.lseek(0, 0) == 0
    again = read_all(f)
    assert b"[new]" in again and b"[new]" not in first, again.decode()


@pytest.mark.parametrize("offset", [0, 1, 57, 100, 500])
def test_pread_at_an_offset_is_the_text_from_there(m, offset):
    """traverse() prints from the start up to the offset; pread leaves the file position."""
    many_mappings(m, 10)
    want = (m.mem.maps() + VSYSCALL).encode()
    f = open_maps(m)
    got = f.pread(50, offset)
    assert (got, f.pos) == (want[offset : offset + 50], 0)


@pytest.mark.parametrize("offset", [3, 200, 1000])
def test_lseek_then_read(m, offset):
    many_mappings(m, 20)
    want = (m.mem.maps() + VSYSCALL).encode()
    f = open_maps(m)
    assert f.lseek(offset, 0) == offset
    got = read_all(f)
    assert got == want[offset:], f"{got[:80]!r} != {want[offset : offset + 80]!r}"


def test_task_maps_is_the_same_mm(m):
    tid = m.task.tid
    path = f"{m.process.pid}/task/{tid}/maps"
    assert read_all(open_maps(m, path)) == read_all(open_maps(m))


def test_maps_opened_before_the_exit_reads_empty_after_it(m):
    """m_start finds no mm once the task has exited: the read gives nothing, although
    the file was opened while it lived."""
    f = open_maps(m)
    m.task.exit_code = 0
    assert read_all(f) == b""


# ------------------------------------------------------------------ the [uprobes] page appearing between reads


@pytest.fixture(scope="module")
def static(build_c):
    return build_c("proc_maps.c", "-static", name="proc_maps_static")


XOL_WANT = b"probed function returns: 7\n[uprobes] in the rest: 1\n"


def native_with_host_uprobe(tracefs: str, exe: str) -> bytes:
    """The program run natively with a uprobe of the host kernel on xol_probe, enabled
    in a tracefs instance of its own; event and instance are removed afterwards."""
    offset = load_elf_file(exe).vaddr_to_offset(load_elf_file(exe).resolve("xol_probe").value)
    group = f"procmaps_{os.getpid()}"
    instance = os.path.join(tracefs, "instances", group)

    def write(rel: str, text: str, append: bool = False) -> None:
        fd = os.open(os.path.join(tracefs, rel), os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC))
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    write("uprobe_events", f"p:{group}/xol {exe}:{offset:#x}\n", append=True)
    try:
        os.mkdir(instance)
        try:
            write(f"instances/{group}/events/{group}/xol/enable", "1")
            try:
                return native(exe, "xol")
            finally:
                write(f"instances/{group}/events/{group}/xol/enable", "0")
        finally:
            os.rmdir(instance)
    finally:
        write("uprobe_events", f"-:{group}/xol\n", append=True)


def test_xol_page_made_after_a_partial_read_is_listed_natively(static, host_tracefs):
    if host_tracefs is None:
        pytest.skip("host tracefs unavailable")
    got = native_with_host_uprobe(host_tracefs, static)
    assert got == XOL_WANT, f"the host disagrees with the spec:\n{got.decode()}"


def test_xol_page_made_after_a_partial_read_is_listed_in_the_model(static):
    m = Machine.from_elf(static, argv=[static, "xol"])
    hits = []
    m.uprobes.register("xol_probe", handler=lambda ctx: hits.append(ctx))
    r = m.run(timeout=120)
    assert (r.reason, r.exit_code, len(hits)) == ("exit", 0, 1), r.describe()
    assert r.stdout == XOL_WANT, r.stdout.decode()
