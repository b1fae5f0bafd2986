"""The namespace a guest sees: the sysroot read-only at /, granted directories writable
where they appear, mounts crossed by guest path (EXDEV between them, `..` above a mount
root to the parent mount, `..` above / staying there), the working directory it starts
in, host inodes other than files, directories and symlinks, and bad configuration."""

from __future__ import annotations

import os

import pytest
from cli_helpers import cli, one_line_error

from emu import Machine
from kernel_model.errors import EmuError


@pytest.fixture
def two_grants(tmp_path):
    g1, g2, ro = tmp_path / "g1", tmp_path / "g2", tmp_path / "ro"
    for d in (g1, g2, ro):
        d.mkdir()
        (d / "f").write_text(d.name)
    return tmp_path


def ops(build_c, root, operations, **kw):
    exe = build_c("fs_ops.c", "-static")
    r = Machine.from_elf(exe, argv=[exe, *operations], **kw).run(timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return r.stdout.decode().splitlines()


@pytest.mark.parametrize(
    "op,want",
    [
        ("rename,../g2/f,x", "EXDEV"),  # another grant: another mount
        ("link,../g2/f,x", "EXDEV"),
        ("rename,f,../g2/x", "EXDEV"),
        ("rename,../ro/f,x", "EXDEV"),  # the read-only sysroot: EXDEV before EROFS
        ("rename,f,../ro/x", "EXDEV"),
        ("rename,../ro/missing,x", "EXDEV"),  # before the lookup, too
        ("link,../ro/f,x", "EXDEV"),  # from the read-only mount
        ("link,f,../ro/x", "EROFS"),  # into it: filename_create's EROFS comes first
        ("rename,f,g", "0"),
        ("link,f,h", "0"),
    ],
)
def test_rename_and_link_across_mounts_are_exdev(build_c, two_grants, op, want):
    """The read-only cases were measured natively between a read-only bind mount and
    the file system beneath it."""
    g1 = two_grants / "g1"
    out = ops(build_c, two_grants, [op], grant_dirs=[str(g1), str(two_grants / "g2")], cwd=str(g1))
    assert out == [f"{op} -> {want}"]


def test_a_symlink_out_of_a_grant_cannot_write_outside(build_c, two_grants):
    g1 = two_grants / "g1"
    (g1 / "out").symlink_to(two_grants / "ro" / "f")
    out = ops(
        build_c,
        two_grants,
        ["open,out,1", "open,out,0x241,0644", "truncate,out,0", "open,out,0", "read,10"],
        grant_dirs=[str(g1)],
        cwd=str(g1),
    )
    assert out == [
        "open,out,1 -> EROFS",
        "open,out,0x241,0644 -> EROFS",
        "truncate,out,0 -> EROFS",
        "open,out,0 -> 3",
        "read,10 -> 2 'ro'",
    ]
    assert (two_grants / "ro" / "f").read_text() == "ro"


def test_dotdot_above_a_grant_is_the_parent_mount(build_c, two_grants):
    g1 = two_grants / "g1"
    out = ops(
        build_c,
        two_grants,
        ["open,../ro/f,0", "read,10", "open,../ro/new,0x41,0644"],
        grant_dirs=[str(g1)],
        cwd=str(g1),
    )
    assert out == ["open,../ro/f,0 -> 3", "read,10 -> 2 'ro'", "open,../ro/new,0x41,0644 -> EROFS"]


def test_a_grant_inside_a_sysroot_is_mounted_where_it_appears(build_c, tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "passwd").write_text("sysroot passwd")
    (root / "data").mkdir()
    out = ops(
        build_c,
        tmp_path,
        [
            "open,/etc/passwd,0",
            "read,64",
            "open,/data/new,0x41,0644",
            "write,hi",
            "open,/etc/new,0x41,0644",
            "getcwd,100",
            "chdir,/..",
            "getcwd,100",
            "open,../../../etc/passwd,0",
            "read,64",
        ],
        sysroot=str(root),
        grant_dirs=[str(root / "data")],
    )
    assert out == [
        "open,/etc/passwd,0 -> 3",
        "read,64 -> 14 'sysroot passwd'",
        "open,/data/new,0x41,0644 -> 4",
        "write,hi -> 2",
        "open,/etc/new,0x41,0644 -> EROFS",
        "getcwd,100 -> 2 '/'",
        "chdir,/.. -> 0",
        "getcwd,100 -> 2 '/'",
        "open,../../../etc/passwd,0 -> 5",
        "read,64 -> 14 'sysroot passwd'",
    ]
    assert (root / "data" / "new").read_text() == "hi"


def test_an_absolute_symlink_restarts_at_the_guests_root(build_c, tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hostname").write_text("in the sysroot")
    (root / "link").symlink_to("/etc/hostname")
    out = ops(build_c, tmp_path, ["open,/link,0", "read,64"], sysroot=str(root))
    assert out == ["open,/link,0 -> 3", "read,64 -> 14 'in the sysroot'"]


def test_the_guest_starts_in_the_invoking_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    m = Machine.from_asm("_start:\n    hlt\n")
    assert m.process.fs.pwd == os.path.realpath(tmp_path)


def test_an_invoking_directory_outside_the_view_starts_the_guest_at_root(tmp_path, monkeypatch):
    (tmp_path / "root").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    m = Machine.from_asm("_start:\n    hlt\n", sysroot=str(tmp_path / "root"))
    assert m.process.fs.pwd == "/"


def test_the_working_directory_under_a_sysroot_is_its_guest_path(tmp_path, monkeypatch):
    (tmp_path / "root" / "a").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "root" / "a")
    m = Machine.from_asm("_start:\n    hlt\n", sysroot=str(tmp_path / "root"))
    assert m.process.fs.pwd == "/a"


def test_host_fifos_and_devices_stat_but_do_not_open(build_c, tmp_path):
    os.mkfifo(tmp_path / "fifo")
    out = ops(
        build_c,
        tmp_path,
        ["stat,fifo", "open,fifo,0", "open,fifo,1", "open,/dev/null,0x8000000"],
        grant_dirs=[str(tmp_path)],
        cwd=str(tmp_path),
    )
    assert out[0].startswith("stat,fifo -> mode=10644 ")
    assert out[1:3] == ["open,fifo,0 -> EACCES", "open,fifo,1 -> EACCES"]


def test_device_nodes_are_never_created(build_c, tmp_path):
    """Natively root may mknod a device (0); the model refuses (EPERM) rather than make a
    host device node, and leaves nothing behind."""
    out = ops(
        build_c,
        tmp_path,
        ["mknod,null,020666,0x103", "mknod,blk,060600,0x801"],
        grant_dirs=[str(tmp_path)],
        cwd=str(tmp_path),
    )
    assert out == ["mknod,null,020666,0x103 -> EPERM", "mknod,blk,060600,0x801 -> EPERM"]
    assert not (tmp_path / "null").exists() and not (tmp_path / "blk").exists()


def test_an_unprivileged_guest_cannot_read_a_root_only_file(build_c, tmp_path):
    (tmp_path / "secret").write_text("x")
    (tmp_path / "secret").chmod(0o600)
    tmp_path.chmod(0o755)
    out = ops(build_c, tmp_path, ["open,secret,0", "stat,secret"], uid=1000, gid=1000, cwd=str(tmp_path))
    assert out[0] == "open,secret,0 -> EACCES"
    assert out[1].startswith("stat,secret -> mode=100600 nlink=1 uid=0 gid=0 ")


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"sysroot": "/nonexistent-sysroot"}, "sysroot"),
        ({"grant_dirs": ["/nonexistent-grant"]}, "grant dir"),
        ({"grant_dir": "/etc/passwd"}, "grant dir"),
        ({"cwd": "relative"}, "cwd"),
        ({"cwd": "/nonexistent-cwd"}, "cwd"),
        ({"cwd": 5}, "cwd"),
        ({"sysroot": 5}, "sysroot"),
        ({"grant_dirs": 5}, "grant_dirs"),
        ({"grant_dirs": [5]}, "grant dir"),
    ],
)
def test_bad_view_configuration_is_an_input_error(kw, msg):
    with pytest.raises(EmuError, match=msg):
        Machine.from_asm("_start:\n    hlt\n", **kw)


@pytest.mark.parametrize("opt", ["--sysroot", "--grant-dir"])
def test_cli_refuses_a_missing_directory(opt):
    line = one_line_error(cli("run", opt, "/nonexistent-dir", "guest:hello"))
    assert f"{opt} '/nonexistent-dir' is not a directory" in line, line


def test_cli_grant_dir_repeats(build_c, tmp_path):
    exe = build_c("fs_ops.c", "-static")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    p = cli(
        "run",
        "--grant-dir",
        str(a),
        "--grant-dir",
        str(b),
        exe,
        f"open,{a}/x,0x41,0644",
        f"open,{b}/y,0x41,0644",
        f"open,{tmp_path}/z,0x41,0644",
    )
    assert p.stdout.decode().splitlines() == [
        f"open,{a}/x,0x41,0644 -> 3",
        f"open,{b}/y,0x41,0644 -> 4",
        f"open,{tmp_path}/z,0x41,0644 -> EROFS",
    ], p.stderr
