"""``vFile:`` host I/O: the stub serves the guest's files as the guest sees them (the
model's file system, ``--sysroot`` included), read-only, with gdb's File-I/O errno
values; and a real gdb with its default ``target:`` sysroot loads the program and its
libraries through it."""

from __future__ import annotations

import os
import re
import struct

import pytest
from gdb_client import RawClient, Stub
from test_gdbstub import gdb_session

from emu import Machine
from emu.frontends.gdbstub import unescape_binary
from emu.frontends.gdbstub.hostio import MAX_OPEN

HELLO = "_start:\n    mov edi, 7\n    mov eax, 231\n    syscall\n"


def hexpath(path: str) -> bytes:
    return path.encode().hex().encode()


@pytest.fixture
def rooted(tmp_path):
    """A sysroot holding one file and a symbolic link to it; the machine runs an asm
    guest with that root.  Yields (client, the file's bytes)."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    data = bytes(range(256)) * 40 + b"$#}*tail"
    (root / "etc" / "data").write_bytes(data)
    os.symlink("data", root / "etc" / "link")
    (tmp_path / "outside").write_bytes(b"secret")
    os.symlink(tmp_path / "outside", root / "etc" / "escape")  # absolute: resolved in the root
    m = Machine.from_asm(HELLO, sysroot=str(root))
    stub = Stub(m)
    c = RawClient(stub.port)
    yield c, data
    c.send_packet(b"k")
    c.close()
    assert stub.finished(), "the stub did not end after k"
    assert stub.errors == [], stub.errors[0]


def open_fd(c, path: str) -> int:
    reply = c.ask(b"vFile:open:%s,0,0" % hexpath(path))
    assert re.fullmatch(rb"F[0-9a-f]+", reply), f"open {path}: {reply!r}"
    return int(reply[1:], 16)


def test_setfs_zero_is_accepted(rooted):
    c, _ = rooted
    assert c.ask(b"vFile:setfs:0") == b"F0"


def test_pread_returns_the_files_bytes_escaped(rooted):
    """A range holding $ # } * comes back escaped; its length is the count before escaping."""
    c, data = rooted
    fd = open_fd(c, "/etc/data")
    off = len(data) - 8
    reply = c.ask(b"vFile:pread:%x,%x,%x" % (fd, 100, off))
    head, _, body = reply.partition(b";")
    assert head == b"F8", reply
    assert unescape_binary(body) == b"$#}*tail", reply
    assert c.ask(b"vFile:pread:%x,10,%x" % (fd, len(data) + 5)) == b"F0;"  # past the end: nothing


def test_fstat_is_gdbs_big_endian_fio_stat(rooted):
    c, data = rooted
    fd = open_fd(c, "/etc/data")
    head, _, body = c.ask(b"vFile:fstat:%x" % fd).partition(b";")
    st = unescape_binary(body)
    assert head == b"F40" and len(st) == 64, (head, len(st))
    mode, size = struct.unpack_from(">I", st, 8)[0], struct.unpack_from(">Q", st, 28)[0]
    assert (mode & 0o170000, size) == (0o100000, len(data)), f"mode {mode:o}, size {size}"


def test_readlink_gives_the_links_text(rooted):
    c, _ = rooted
    assert c.ask(b"vFile:readlink:%s" % hexpath("/etc/link")) == b"F4;data"


def test_close_then_the_descriptor_is_gone(rooted):
    c, _ = rooted
    fd = open_fd(c, "/etc/data")
    assert c.ask(b"vFile:close:%x" % fd) == b"F0"
    assert c.ask(b"vFile:pread:%x,10,0" % fd) == b"F-1,9"  # EBADF
    assert c.ask(b"vFile:close:%x" % fd) == b"F-1,9"


@pytest.mark.parametrize(
    "path", ["/outside", "/../outside", "/../../../../../etc/hostname_not_there", "/etc/missing", "/etc/escape"]
)
def test_a_path_outside_the_guests_view_is_not_found(rooted, path):
    """Paths resolve in the guest's root, as in a chroot: ``..`` at / stays at /."""
    c, _ = rooted
    assert c.ask(b"vFile:open:%s,0,0" % hexpath(path)) == b"F-1,2"  # ENOENT


@pytest.mark.parametrize(
    "packet, reply",
    [
        (b"vFile:open:%s,1,1a4" % hexpath("/etc/data"), b"F-1,d"),  # O_WRONLY: EACCES
        (b"vFile:open:%s,202,1a4" % hexpath("/etc/new"), b"F-1,d"),  # O_CREAT|O_RDWR
        (b"vFile:pwrite:0,0:abc", b"F-1,9"),  # no such descriptor
        (b"vFile:unlink:%s" % hexpath("/etc/data"), b"F-1,d"),
        (b"vFile:open:zz,0,0", b"F-1,16"),  # bad hex: EINVAL
        (b"vFile:open:%s,0" % hexpath("/etc/data"), b"F-1,16"),  # a missing field
        (b"vFile:open:,0,0", b"F-1,16"),  # an empty path
        (b"vFile:pread:0,10", b"F-1,16"),
        (b"vFile:pread:7,10,0", b"F-1,9"),
        (b"vFile:fstat:x", b"F-1,16"),
        (b"vFile:setfs:7fff", b"F-1,16"),  # no such process
        (b"vFile:rename:00,00", b"F-1,16"),  # unknown operation
        (b"vFile:", b"F-1,16"),
    ],
)
def test_writes_and_malformed_requests_get_an_errno_reply(rooted, packet, reply):
    c, _ = rooted
    assert c.ask(packet) == reply
    assert c.ask(b"?").startswith(b"S05"), "the stub still answers"


def test_pwrite_on_an_open_file_is_refused(rooted):
    c, data = rooted
    fd = open_fd(c, "/etc/data")
    assert c.ask(b"vFile:pwrite:%x,0:abc" % fd) == b"F-1,d"  # EACCES
    head, _, body = c.ask(b"vFile:pread:%x,3,0" % fd).partition(b";")
    assert unescape_binary(body) == data[:3], "the file is unchanged"


def test_gdb_loads_the_program_and_libc_from_the_target(build_c):
    """No `set sysroot`: gdb reads through vFile ("target:"), finds main's symbols and
    libc's, and info symbol names libc's file with the target: prefix."""
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe)
    out = gdb_session(
        m, exe, ["set debug-file-directory /nonexistent", "break main", "continue", "info symbol malloc", "kill"]
    )
    assert "Reading /lib/x86_64-linux-gnu/libc.so.6 from remote target..." in out, out
    assert re.search(r"^Breakpoint 1, (0x[0-9a-f]+ in )?main \(", out, re.M), out
    assert "malloc in section .text of target:/lib/x86_64-linux-gnu/libc.so.6" in out, out


def test_an_offset_past_the_file_offsets_range_is_einval(rooted):
    c, _ = rooted
    fd = open_fd(c, "/etc/data")
    assert c.ask(b"vFile:pread:%x,10,8000000000000000" % fd) == b"F-1,16"


def test_descriptors_are_bounded(rooted):
    """At most MAX_OPEN files at once (EMFILE after), and a closed one is reused."""
    c, _ = rooted
    fds = [open_fd(c, "/etc/data") for _ in range(MAX_OPEN)]
    assert fds == list(range(MAX_OPEN)), fds
    assert c.ask(b"vFile:open:%s,0,0" % hexpath("/etc/data")) == b"F-1,18"  # EMFILE
    assert c.ask(b"vFile:close:5") == b"F0"
    assert open_fd(c, "/etc/data") == 5
