"""The walk over modeled filesystems (kernel_model.fs.fs_types.SpecialNode trees, as /proc and /dev
are): descending into a tree mounted at a guest path, following its symlinks (relative
to the link's directory, absolute from the guest's /, magic links to an open file),
listing, stat'ing and opening its nodes, `..` back out of the mount, and /sys holding only the CPU list."""

from __future__ import annotations

import errno as E
import stat as S

import pytest

from emu import Machine
from kernel_model.fs.file import PipeInput, SeqFile
from kernel_model.fs.fs_types import DT_DIR, DT_LNK, DT_REG, Attrs, SpecialNode

FAKE_DEV = 0x2A


class Node(SpecialNode):
    def __init__(self, ino, mode, *, uid=0, kids=None, link=None, data=b"", follow_to=None):
        self.ino, self.mode, self.uid = ino, mode, uid
        self.kids, self.link, self.data, self.follow_to = kids or {}, link, data, follow_to

    def attrs(self, task):
        return Attrs(
            mode=self.mode,
            ino=self.ino,
            dev=FAKE_DEV,
            nlink=2 if S.S_ISDIR(self.mode) else 1,
            uid=self.uid,
            size=len(self.data),
        )

    def lookup(self, task, name):
        if not S.S_ISDIR(self.mode):
            return -E.ENOTDIR
        return self.kids.get(name, -E.ENOENT)

    def children(self, task):
        return [(n, k.ino, (k.mode & 0o170000) >> 12) for n, k in self.kids.items()]

    def readlink(self, task):
        return self.link if self.link is not None else -E.EINVAL

    def follow(self, task):
        return self.follow_to() if self.follow_to else self.readlink(task)

    def open(self, task, flags):
        if flags & 3:
            return -E.EACCES
        return SeqFile(self.data, ino=self.ino)


def fake_tree() -> Node:
    leaf = Node(5, S.S_IFREG | 0o444, data=b"leaf data")
    return Node(
        1,
        S.S_IFDIR | 0o555,
        kids={
            "file": Node(2, S.S_IFREG | 0o444, data=b"hello"),
            "secret": Node(3, S.S_IFREG | 0o400, data=b"root only"),
            "sub": Node(4, S.S_IFDIR | 0o555, kids={"leaf": leaf}),
            "rel": Node(6, S.S_IFLNK | 0o777, link="sub/leaf"),
            "abs": Node(7, S.S_IFLNK | 0o777, link="/fake/file"),
            "up": Node(8, S.S_IFLNK | 0o777, link="../fake/sub/../file"),
            "magic": Node(9, S.S_IFLNK | 0o777, link="pipe:[77]", follow_to=lambda: PipeInput(b"magic data", ino=77)),
            "loop": Node(10, S.S_IFLNK | 0o777, link="loop"),
        },
    )


def run(build_c, ops, **kw):
    exe = build_c("fs_ops.c", "-static")
    m = Machine.from_elf(exe, argv=[exe, *ops], cwd="/", **kw)
    m.syscalls.vfs.mount("/fake", fake_tree())
    r = m.run(timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return r.stdout.decode().splitlines()


@pytest.mark.parametrize(
    "op,want",
    [
        ("stat,/fake/file", "mode=100444 nlink=1 uid=0 gid=0 size=5"),
        ("stat,/fake", "mode=40555 nlink=2 uid=0 gid=0 size=0"),
        ("stat,/fake/sub/leaf", "mode=100444 nlink=1 uid=0 gid=0 size=9"),
        ("lstat,/fake/rel", "mode=120777 nlink=1 uid=0 gid=0 size=0"),
        ("stat,/fake/rel", "mode=100444 nlink=1 uid=0 gid=0 size=9"),
        ("stat,/fake/missing", "ENOENT"),
        ("stat,/fake/file/x", "ENOTDIR"),
        ("stat,/fake/loop", "ELOOP"),
    ],
)
def test_stat_in_a_modeled_tree(build_c, op, want):
    assert run(build_c, [op]) == [f"{op} -> {want}"]


@pytest.mark.parametrize(
    "link,data", [("rel", "leaf data"), ("abs", "hello"), ("up", "hello"), ("magic", "magic data")]
)
def test_open_follows_the_trees_symlinks(build_c, link, data):
    out = run(build_c, [f"open,/fake/{link},0", "read,64"])
    assert out == [f"open,/fake/{link},0 -> 3", f"read,64 -> {len(data)} '{data}'"]


@pytest.mark.parametrize("resolve,want", [(0, "3"), (0x2, "ELOOP"), (0x4, "ELOOP"), (0x8, "EXDEV"), (0x10, "EXDEV")])
def test_openat2_resolve_flags_on_a_magic_link(build_c, resolve, want):
    """nd_jump_link: RESOLVE_NO_MAGICLINKS is ELOOP, a scoped walk EXDEV (the absolute
    path is relative to / for RESOLVE_IN_ROOT here, the guest's cwd being /)."""
    op = f"openat2,fake/magic,0,0,{resolve}"
    assert run(build_c, [op]) == [f"{op} -> {want}"]


def test_statfull_of_a_node_shows_its_device_and_inode(build_c):
    out = run(build_c, ["statfull,/fake/sub"])[0]
    assert f" dev={FAKE_DEV:x} ino=4 " in out, out


def test_statx_of_a_node_is_the_basic_set_and_the_mount_id(build_c):
    out = run(build_c, ["statx,/fake/file,0,0xfff"])[0]
    assert out == (
        "statx,/fake/file,0,0xfff -> mask=17ff mode=100444 nlink=1 uid=0 gid=0 size=5 "
        f"blksize=4096 blocks=0 ino=2 dev=0:{FAKE_DEV} rdev=0:0 mtime=0.000000000"
    ), out


def test_readlink_in_a_modeled_tree(build_c):
    assert run(build_c, ["readlink,/fake/rel,64", "readlink,/fake/magic,64", "readlink,/fake/file,64"]) == [
        "readlink,/fake/rel,64 -> 8 'sub/leaf'",
        "readlink,/fake/magic,64 -> 9 'pipe:[77]'",
        "readlink,/fake/file,64 -> EINVAL",
    ]


def test_getdents_lists_dot_dotdot_and_the_children(build_c):
    out = run(build_c, ["open,/fake,0", "getdents,4096"])
    assert out[1] == (
        f"getdents,4096 -> {out[1].split(' -> ')[1].split(':')[0]}: ./{DT_DIR} ../{DT_DIR} "
        f"file/{DT_REG} secret/{DT_REG} sub/{DT_DIR} rel/{DT_LNK} abs/{DT_LNK} up/{DT_LNK} "
        f"magic/{DT_LNK} loop/{DT_LNK} next=end"
    ), out


def test_a_modeled_directory_opens_like_a_directory(build_c):
    assert run(build_c, ["open,/fake/sub,0x10000", "getfl", "read,4", "open,/fake/sub,1", "fstat"]) == [
        "open,/fake/sub,0x10000 -> 3",
        "getfl -> 98304",
        "read,4 -> EISDIR",
        "open,/fake/sub,1 -> EISDIR",
        "fstat -> mode=40555 nlink=2 uid=0 gid=0 size=0",
    ]


def test_openat_relative_to_a_modeled_directory(build_c):
    assert run(build_c, ["open,/fake/sub,0", "openat,leaf,0", "read,4"])[2] == "read,4 -> 4 'leaf'"


def test_dotdot_leaves_the_mount_for_its_parent(build_c):
    out = run(build_c, ["statfull,/fake/..", "statfull,/"])
    assert out[0].split(" -> ")[1] == out[1].split(" -> ")[1]


@pytest.mark.parametrize(
    "op,want",
    [
        ("open,/fake/secret,0", "EACCES"),  # generic_permission on the node's mode
        ("open,/fake/file,0", "3"),
        ("mkdir,/fake/x,0755", "EACCES"),  # 0555 directory
    ],
)
def test_an_unprivileged_guest_is_held_to_the_nodes_modes(build_c, op, want):
    assert run(build_c, [op], uid=1000, gid=1000) == [f"{op} -> {want}"]


def test_root_cannot_create_in_a_modeled_directory(build_c):
    assert run(build_c, ["mkdir,/fake/x,0755", "unlink,/fake/file"]) == [
        "mkdir,/fake/x,0755 -> EPERM",
        "unlink,/fake/file -> EPERM",
    ]


def test_sys_is_a_read_only_directory_of_devices_only(build_c):
    out = run(build_c, ["stat,/sys", "stat,/sys/kernel", "open,/sys,0", "getdents,4096", "mkdir,/sys/x,0755"])
    assert out[0] == "stat,/sys -> mode=40555 nlink=4 uid=0 gid=0 size=0"
    assert out[1] == "stat,/sys/kernel -> ENOENT"
    assert out[3].endswith(f"./{DT_DIR} ../{DT_DIR} bus/{DT_DIR} devices/{DT_DIR} next=end"), out[3]


def test_mount_point_must_be_absolute_and_normalized():
    m = Machine.from_asm("_start:\n    hlt\n")
    from kernel_model.errors import EmuError

    for bad in ("fake", "/a/../b", "/", "/a/"):
        with pytest.raises(EmuError):
            m.syscalls.vfs.mount(bad, fake_tree())
