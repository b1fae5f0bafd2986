"""Descriptors and open file descriptions: per-process tables copied at fork, shared
refcounted descriptions, /proc/self/maps as a seq_file snapshot, and errnos (never an
emulator crash) for what a guest gets wrong.  Where a guest's output does not depend on
the machine, the native run is the expected value."""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

from emu.machine import Machine
from kernel_model.fs.file import FdTable, HostFile, SeqFile


def native(exe: str, *args: str, cwd: str | None = None) -> bytes:
    p = subprocess.run([exe, *args], capture_output=True, timeout=60, cwd=cwd)
    assert p.returncode == 0, p.stderr
    return p.stdout


def run(exe: str, *args: str, **kw):
    r = Machine.from_elf(exe, argv=[exe, *args], **kw).run(timeout=60)
    assert r.reason == "exit" and r.exit_code == 0, r.describe()
    return r.stdout


@pytest.fixture
def granted(tmp_path):
    (tmp_path / "data").write_bytes(b"0123456789")
    return str(tmp_path)


# ------------------------------------------------------------------ /proc/self/maps


def test_proc_self_maps_read_lseek_pread_write_close_as_native(build_c):
    exe = build_c("procmaps.c", "-static")
    assert run(exe).decode() == native(exe).decode()


def test_proc_self_maps_cannot_be_opened_for_writing():
    """By an unprivileged guest (root's CAP_DAC_OVERRIDE opens it; see test_procfs)."""
    m = Machine.from_asm(
        """
_start:
    lea rdi, [rip + path]
    mov esi, 1
    mov eax, 2
    syscall
    neg eax
    mov edi, eax
    mov eax, 60
    syscall
path:
    .asciz "/proc/self/maps"
""",
        uid=1000,
        gid=1000,
    )
    assert m.run().exit_code == 13, "open(O_WRONLY) on the 0444 file: EACCES"


def test_proc_self_maps_over_64_kib_reads_in_full(build_c):
    """The seq_file is read a page at a time, however long the text: no pipe to fill."""
    exe = build_c("procmaps.c", "-static")
    m = Machine.from_elf(exe, argv=[exe, "size"])
    for i in range(3000):
        m.mem.map(0x10000000 + i * 0x2000, 0x1000, 1, "")
    box = {}
    t = threading.Thread(target=lambda: box.update(r=m.run(timeout=60)), daemon=True)
    t.start()
    t.join(90)
    assert "r" in box, "the guest's read of /proc/self/maps never finished"
    words = dict(w.split("=") for w in box["r"].stdout.decode().split())
    text = m.mem.maps() + "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n"
    assert int(words["bytes"]) == len(text) > 65536, (words, len(text))
    assert int(words["lines"]) == text.count("\n")


def test_seq_file_snapshot_semantics():
    f = SeqFile(b"abcdef", ino=7)
    assert f.write(b"x") == -9  # EBADF: not open for writing
    assert f.read(2, lambda: False) == b"ab"
    assert f.lseek(1, 1) == 3 and f.read(10, lambda: False) == b"def"
    assert f.lseek(0, 2) == -22  # seq_lseek: no SEEK_END
    assert f.pread(3, 1) == b"bcd" and f.pread(3, -1) == -22


# ------------------------------------------------------------------ fork and descriptions


def test_child_closing_a_shared_descriptor_leaves_the_parents_open(build_c, granted):
    exe = build_c("forkfd.c", "-static")
    assert (
        run(exe, "data", grant_dir=granted, cwd=granted)
        == native(exe, "data", cwd=granted)
        == b"child: read 4 0123 close=0\nparent: read 4 4567 close=0 close again=-1\n"
    )


def test_host_descriptor_closes_with_the_last_reference(granted):
    hfd = os.open(os.path.join(granted, "data"), os.O_RDONLY)
    f = HostFile(hfd, "data", os.O_RDONLY)
    parent = FdTable()
    fd = parent.install(f, 3)
    child = parent.fork()
    assert f.refs == 2
    assert child.close(fd) == 0 and f.refs == 1
    os.fstat(hfd)  # still open under the parent
    parent.put()  # exit_files
    assert f.refs == 0
    with pytest.raises(OSError):
        os.fstat(hfd)


def test_shared_table_closes_only_with_its_last_user(granted):
    f = HostFile(os.open(os.path.join(granted, "data"), os.O_RDONLY), "data", os.O_RDONLY)
    table = FdTable()
    table.install(f)
    shared = table.share()  # CLONE_FILES
    shared.put()
    assert f.refs == 1
    table.put()
    assert f.refs == 0


def test_fd_table_is_full_at_the_rlimit():
    from kernel_model.fs.file import PipeInput

    table = FdTable(limit=4)
    assert [table.install(PipeInput()) for _ in range(5)] == [0, 1, 2, 3, -24]  # EMFILE


def test_exit_closes_the_guests_host_descriptors(granted):
    """A guest that never closes its file leaks no host descriptor past its exit."""
    m = Machine.from_asm(
        """
_start:
    lea rdi, [rip + path]
    xor esi, esi
    mov eax, 2
    syscall
    mov edi, eax
    mov eax, 231
    syscall
path:
    .asciz "data"
""",
        grant_dir=granted,
        cwd=granted,
    )
    before = len(os.listdir("/proc/self/fd"))
    r = m.run()
    assert r.exit_code == 3, "open gives the lowest free descriptor"
    assert len(os.listdir("/proc/self/fd")) == before, "the host descriptor is closed at exit"
    assert len(m.process.files) == 0


# ------------------------------------------------------------------ errnos, not crashes


@pytest.mark.parametrize("name", ["", "."])
def test_empty_path_and_directory_read_get_the_native_errno(build_c, granted, name):
    exe = build_c("sandbox.c", "-static")
    assert run(exe, name, grant_dir=granted, cwd=granted) == native(exe, name, cwd=granted)


def test_ioctl_and_lseek_on_bad_descriptors():
    m = Machine.from_asm("""
_start:
    mov edi, 77
    mov esi, 0x5401
    xor edx, edx
    mov eax, 16
    syscall
    mov r12, rax
    mov edi, 1
    xor esi, esi
    mov edx, 1
    mov eax, 8
    syscall
    add rax, r12
    neg eax
    mov edi, eax
    mov eax, 60
    syscall
""")
    assert m.run().exit_code == 9 + 29, "ioctl(77): EBADF; lseek on the stdout pipe: ESPIPE"


# ------------------------------------------------------------------ /proc/self/exe


def test_readlink_exe_is_the_path_the_guest_was_named_by(build_c):
    exe = build_c("readlink_exe.c", "-static")
    assert run(exe) == native(exe) == exe.encode() + b"\n"


def test_readlink_exe_of_a_relative_program_is_its_absolute_path_as_natively(build_c, monkeypatch):
    """The guest sees the host's paths and starts in the invoking directory, so a
    program named relatively reads back the absolute path the host would give."""
    exe = build_c("readlink_exe.c", "-static")
    monkeypatch.chdir(os.path.dirname(exe))
    name = os.path.basename(exe)
    out = Machine.from_elf(name, argv=[name]).run().stdout
    want = native("./" + name)
    assert out == want == f"{os.path.realpath(exe)}\n".encode(), f"want {want!r}, got {out!r}"
