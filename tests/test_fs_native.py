"""File and path syscalls in a granted directory match a native run of the same program
byte for byte: tests/c/fs_ops.c prints each operation's value or errno name, and both
runs start from identical fresh layouts at the same path (tests/fs_helpers.py), so
sizes, modes, owners and errnos must agree; afterwards the trees must be the same."""

from __future__ import annotations

import os
import subprocess

import pytest
from fs_helpers import make_layout, model_ops, native_ops, same_tree

OCREAT, OEXCL, OTRUNC, OAPPEND, ODIR, ONOFOLLOW, OPATH, OCLOEXEC = \
    0o100, 0o200, 0o1000, 0o2000, 0o200000, 0o400000, 0o10000000, 0o2000000

CASES = {
    # open flags
    "open_read": ["open,f,0", "read,4", "read,100", "read,5"],
    "open_missing": ["open,missing,0", "open,missing/x,0", "open,f/x,0"],
    "open_trailing_slash": ["open,f/,0", f"open,new/,{OCREAT},0644", f"open,f/,{OCREAT}", "open,dir/,0"],
    "open_directory_flag": [f"open,f,{ODIR}", f"open,dir,{ODIR}", f"open,dlnk,{ODIR}", f"open,lnk,{ODIR}"],
    "open_dir_for_write": ["open,dir,1", "open,dir,2", f"open,dir,{OCREAT}", f"open,dir,{ODIR | OCREAT}"],
    "open_creat": [f"open,new,{OCREAT | 1},0640", "write,hello", "fstat", "close", "stat,new"],
    "open_creat_excl": [f"open,f,{OCREAT | OEXCL},0600", f"open,lnk,{OCREAT | OEXCL},0600",
                        f"open,.,{OCREAT | OEXCL},0600", f"open,.,{OCREAT},0600",
                        f"open,dangling,{OCREAT | OEXCL},0600"],
    "open_creat_through_dangling_link": [f"open,dangling,{OCREAT | 1},0600", "stat,nowhere", "lstat,dangling"],
    "open_creat_umask": ["umask,027", f"open,new,{OCREAT | 1},0777", "fstat", "umask,0", "mkdir,d2,0777",
                         "stat,d2"],
    "open_rdonly_trunc": [f"open,f,{OTRUNC}", "fstat", "read,3", "write,x"],
    "open_trunc": [f"open,f,{OTRUNC | 1}", "fstat", "write,ab", "stat,f"],
    "open_append": [f"open,f,{OAPPEND | 1}", "write,XY", "lseek,0,1", "pwrite,Z,0", "close", "open,f,0",
                    "read,100"],
    "open_nofollow": [f"open,lnk,{ONOFOLLOW}", f"open,dlnk/a,{ONOFOLLOW}", f"open,f,{ONOFOLLOW}"],
    "open_path": [f"open,lnk,{OPATH | ONOFOLLOW}", "read,4", "fstat", "getfl", "close",
                  f"open,dir,{OPATH}", "openat,a,0", "read,5"],
    "open_cloexec": [f"open,f,{OCLOEXEC}", "getfd", "open,f,0", "getfd", f"open,dir,{OCLOEXEC | ODIR}", "getfd",
                     f"openat2,f,{OCLOEXEC},0,0", "getfd"],
    "open_getfl": [f"open,f,{OCLOEXEC | OAPPEND | 2}", "getfl", f"open,dir,{ODIR}", "getfl"],
    "open_loop": ["open,loop,0", "stat,loop", "lstat,loop"],
    "forty_links_and_no_more": ["open,c1,0", "read,3", "open,c0,0", "stat,c0", "stat,c1", "lstat,c0",
                                "stat,c0/", "open,c10,0"],
    "symlinks_in_the_middle": ["open,dlnk/a,0", "read,3", "stat,dlnk/../f", "open,up/etc/passwd,0",
                               "stat,abs", "stat,dangling/x", "stat,lnk/x"],
    "open_name_too_long": ["open," + "n" * 256 + ",0", "open," + "n" * 255 + ",0",
                           "stat," + "d/" * 2047 + "x", "stat," + "d/" * 2048, "stat," + "./" * 2047 + "f"],
    "openat_relative_to_dirfd": ["open,dir,0", "openat,a,0", "read,10", "open,dir,0", "openat,../f,0",
                                 "read,3", "open,f,0", "openat,x,0"],
    "openat2_checks": ["openat2,f,0,0,0", "openat2,f,0,0644,0", f"openat2,new,{OCREAT | 1},0644,0",
                       "openat2,f,0x80000000,0,0", "openat2,f,0,0,64", "openat2,f,0,0,24"],
    "openat2_no_symlinks": ["openat2,lnk,0,0,4", "openat2,f,0,0,4", f"openat2,lnk,{OPATH | ONOFOLLOW},0,4",
                            "openat2,dlnk/a,0,0,4", "openat2,dangling,0x41,0644,4"],
    "openat2_beneath": ["openat2,abs,0,0,8", "openat2,/etc/passwd,0,0,8", "openat2,../w/f,0,0,8",
                        "openat2,dir/../f,0,0,8", "openat2,lnk,0,0,8", "openat2,up,0,0,8", "openat2,..,0,0,8"],
    "openat2_in_root": ["openat2,up,0,0,16", "fstat", "openat2,abs,0,0,16", "openat2,/f,0,0,16",
                        "read,3", "openat2,../../f,0,0,16", "read,3"],
    "openat2_no_xdev": ["openat2,dir/a,0,0,1", "openat2,/proc/self/maps,0,0,1", "openat2,/proc,0,0,1"],
    "openat2_cached": ["openat2,f,0x40,0644,32", f"openat2,f,{OTRUNC},0,32", "openat2,f,0,0,32"],
    "creat": ["creat,c,0600", "write,x", "stat,c", "creat,dir,0600"],
    # read / write family
    "pread_pwrite": ["open,f,2", "pread,3,2", "pwrite,AB,8", "pread,20,0", "read,2", "pread,4,100",
                     "pread,1,-1"],
    "readv_writev": ["open,f,2", "readv,3,4", "writev,xy,zw", "preadv,5,5,0", "pwritev,P,Q,1", "pread,20,0"],
    "read_directory": ["open,dir,0", "read,10", "pread,10,0", "write,x"],
    "write_readonly_fd": ["open,f,0", "write,x", "pwrite,x,0", "open,f,1", "read,1"],
    "lseek": ["open,f,0", "lseek,3,0", "read,2", "lseek,-2,1", "read,2", "lseek,-1,2", "read,9",
              "lseek,-20,1", "lseek,0,7", "lseek,100,0", "read,1"],
    "lseek_directory": ["open,dir,0", "lseek,0,2", "lseek,0,0", "lseek,5,1"],
    # stat family
    "stat_types": ["stat,f", "stat,dir", "lstat,lnk", "stat,lnk", "stat,dlnk", "lstat,dangling",
                   "stat,dangling", "stat,f/", "stat,dir/", "stat,lnk/", "stat,dlnk/"],
    "stat_empty_path": ["stat,", "fstatat,,0", "fstatat,,0x1000", "fstatat,f,0x4"],
    "stat_above_root": ["stat,up", "lstat,up/..", "stat,../../../../../../../../../../.."],
    "statx_flags": ["statx,f,0x6000,0x7ff", "statx,f,0,0x80000000", "statx,f,0x1,0x7ff", "statx,,0,0x7ff"],
    # access
    "access": ["access,f,0", "access,f,4", "access,f,2", "access,noexec,1", "access,exe,1",
               "access,missing,0", "access,f,8", "access,dir,1"],
    "faccessat2": ["faccessat2,lnk,0,0x100", "faccessat2,dangling,0,0x100", "faccessat2,dangling,0,0",
                   "faccessat2,f,4,0x200", "faccessat2,f,4,0x1", "faccessat2,,0,0"],
    # readlink
    "readlink": ["readlink,lnk,100", "readlink,lnk,1", "readlink,f,100", "readlink,missing,100",
                 "readlink,lnk,0", "readlink,dlnk/,100", "readlink,abs,200"],
    # directories
    "getdents": ["open,dir,0", "getdents,4096", "getdents,4096"],
    "getdents_small_buffer": ["open,dir,0", "getdents,10", "getdents,24,1"],
    "getdents_not_dir": ["open,f,0", "getdents,4096"],
    "getdents_lseek_back": ["open,dir,0", "getdents,4096,2", "getdents,4096", "lseek,0,0", "getdents,4096"],
    "getdents_resumes_at_a_d_off": ["open,dir,0", "getdents,4096,3", "getdents,4096", "seekdoff",
                                    "getdents,4096"],
    "mkdir": ["mkdir,d,0750", "stat,d", "mkdir,d,0750", "mkdir,f,0750", "mkdir,missing/d,0750",
              "mkdir,f/d,0750", "mkdir,.,0750", "mkdir,e/,0750", "mkdir,lnk/x,0700"],
    "rmdir": ["rmdir,dir", "rmdir,full", "rmdir,f", "rmdir,missing", "rmdir,.", "rmdir,dir/..",
              "rmdir,dir/sub", "rmdir,dlnk", "rmdir,dir/sub/"],
    "unlink": ["unlink,f", "stat,f", "unlink,missing", "unlink,dir", "unlink,.", "unlink,lnk",
               "stat,lnk", "unlink,dir/a/", "unlink,dlnk/"],
    "unlinkat": ["unlinkat,dir/sub,0x200", "unlinkat,dir/a,0", "unlinkat,f,0x1", "unlinkat,dir/b,0x200"],
    "rename": ["rename,f,g", "stat,g", "rename,missing,x", "rename,g,dir", "rename,dir,f2",
               "rename,dir/sub,dir/a", "rename,full,dir/sub", "rename,dir,dir/sub/x", "rename,.,x",
               "rename,lnk,lnk2", "readlink,lnk2,50"],
    "renameat2_noreplace": ["renameat2,f,noexec,1", "renameat2,f,new,1", "renameat2,new,f,3",
                            "renameat2,noexec,new,2", "read,1", "renameat2,noexec,f,8"],
    "truncate": ["truncate,f,4", "stat,f", "truncate,f,-1", "truncate,dir,0", "truncate,missing,0",
                 "truncate,lnk,20", "stat,f", "open,f,0", "ftruncate,0", "open,f,2", "ftruncate,2",
                 "ftruncate,-1", "fstat", "open,dir,0", "ftruncate,0"],
    # cwd
    "cwd": ["chdir,dir", "getcwd,4096", "open,a,0", "read,3", "chdir,..", "getcwd,4096", "chdir,f",
            "chdir,missing", "chdir,dlnk", "getcwd,4096", "getcwd,3", "chdir,/", "getcwd,2", "getcwd,1"],
    "fchdir": ["open,dir,0", "fchdir", "getcwd,4096", "open,/,0", "fchdir", "getcwd,4096", "open,f,0",
               "fchdir"],
    "cwd_of_a_child": ["forkchdir,dir", "forkchdir,/", "getcwd,4096"],
    "cwd_renamed_by_the_guest": ["mkdir,a,0755", "chdir,a", "rename,../a,../b", "getcwd,4096",
                                 "creat,x,0644", "stat,../b/x"],
    "dirfd_renamed_by_the_guest": ["mkdir,a,0755", "open,a,0", "rename,a,b", "openat,x,0x41,0644",
                                   "stat,b/x"],
    "cwd_removed": ["mkdir,gone,0755", "chdir,gone", "rmdir,../gone", "getcwd,4096", "open,.,0",
                    "open,..,0", "creat,x,0644", "stat,.", "chdir,..", "getcwd,4096"],
    # attributes
    "chmod": ["chmod,f,0600", "stat,f", "open,f,0", "fchmod,0604", "fstat", "chmod,lnk,0640", "stat,f",
              "chmod,missing,0600", "open,lnk,0x220000", "fchmod,0600"],
    "chown_as_root": ["chown,f,1000,1000", "stat,f", "lchown,lnk,12,13", "lstat,lnk", "open,f,0",
                      "fchown,-1,7", "fstat", "chown,missing,0,0"],
    "utimens": ["utimens,f,1000,5,0", "times,f,0", "utimens,f,1,1000000000,0", "utimens,lnk,7,0,0x100",
                "times,lnk,0x100", "utimens,missing,1,0,0", "utimens,missing,1,1000000000,0",
                "utimens,f,1,1000000000,0x2", "utimens,f,1,1073741822,0"],
    "mknod": ["mknod,p,010644", "stat,p", "mknod,r,0640", "stat,r", "mknod,s,0140600", "lstat,s",
              "mknod,p,010644", "mknod,q,0170644", "mknod,ro_dir/x,010644", "umask,077", "mknod,p2,010666",
              "stat,p2"],
    "create_with_a_trailing_slash": ["symlink,f,s/", "link,f,h/", "mkdir,m/,0755", "stat,m"],
    "symlink_link": ["symlink,f,s", "readlink,s,50", "symlink,x,f", "symlink,,e", "symlink,x,missing/s",
                     "link,f,h", "stat,h", "link,dir,h2", "link,missing,h3", "link,f,dir",
                     "linkat,lnk,h4,0", "lstat,h4", "linkat,lnk,h5,0x400", "lstat,h5"],
    "fsync": ["open,f,2", "fsync", "fdatasync", "open,dir,0", "fsync", "open,f,0x200000", "fsync"],
    "linkat_empty_path": ["open,f,0", "linkfd,hl", "stat,hl", "linkfd,f", "open,dir,0", "linkfd,hd",
                          "open,f,0", "become,1000,1000", "linkfd,h2"],
    "umask": ["umask,077", "umask,0777", "umask,01022", "umask,022"],
    # an unprivileged guest
    "unprivileged_permissions": ["become,1000,1000", "open,secret,0", "access,secret,4", "stat,secret",
                                 "open,f,1", "open,f,0", "mkdir,ro_dir/x,0755", "open,ro_dir/n,0x41,0644",
                                 "unlink,f", "chmod,f,0777", "chown,f,1000,1000", "utimensnull,f",
                                 "utimens,f,5,0,0", "unlink,sticky/rootfile"],
    "rename_a_directory_to_another_parent": ["chmod,.,0777", "chmod,full,0777", "become,1000,1000",
                                             "rename,dir,full/d2", "rename,dir,d3", "mkdir,mine,0755",
                                             "rename,mine,full/mine", "stat,full/mine"],
    "protected_hardlinks": ["chmod,.,0777", "chmod,noexec,0666", "chmod,exe,04777", "become,1000,1000",
                            "link,f,h1", "link,noexec,h2", "link,exe,h3", "link,lnk,h4", "creat,mine,0600",
                            "link,mine,h5"],
    "unprivileged_own_files": ["chmod,.,0777", "become,1000,1000", "mkdir,mine,0700", "stat,mine",
                               "chmod,mine,0755", "chown,mine,1000,0", "chown,mine,0,-1",
                               "creat,mine/f,0644", "stat,mine/f", "chown,mine/f,-1,1000",
                               "unlink,mine/f", "rmdir,mine"],
    "root_exec_needs_an_x_bit": ["access,noexec,1", "access,exe,1", "open,noexec,0"],
    "root_overrides_directory_modes": ["chmod,dir,0", "access,dir,7", "open,dir/a,0", "read,1",
                                       "chmod,secret,0", "access,secret,6", "access,secret,1",
                                       "open,secret,2", "chmod,secret,0100", "access,secret,1"],
    "group_and_other_bits": ["chmod,secret,0640", "chown,secret,0,1000", "become,1000,1000",
                             "open,secret,0", "open,secret,1", "access,f,2", "access,f,4"],
    "noatime_needs_ownership": ["open,f,0x40000", "become,1000,1000", "open,f,0x40000", "open,f,0",
                                "creat,mine,0644", "open,mine,0x40000"],
    "seteuid_access_uses_the_real_uid": ["seteuid,1000", "access,secret,4", "faccessat2,secret,4,0x200",
                                         "open,secret,0"],
}


@pytest.mark.parametrize("ops", CASES.values(), ids=CASES.keys())
def test_matches_native(build_c, tmp_path, ops):
    exe = build_c("fs_ops.c", "-static")
    root = tmp_path / "t"
    want = native_ops(exe, root, ops)
    native_tree = same_tree(root)
    got = model_ops(exe, root, ops)
    assert got.splitlines() == want.splitlines()
    assert same_tree(root) == native_tree, "the layout differs after the run"


def test_stat_of_an_untouched_tree_matches_native_to_the_inode(build_c, tmp_path):
    """Read-only operations on one layout: inode numbers, device, times and blocks are
    the host's own."""
    exe = build_c("fs_ops.c", "-static")
    ops = ["statfull,f", "statfull,dir", "lstatfull,lnk", "statfull,..",
           "open,f,0", "fstatfull", "open,dir,0", "fstatfull", "getdents,4096",
           "statx,f,0,0x7ff", "statx,dir,0,0xfff", "statx,lnk,0x100,0x7ff", "statx,lnk,0,0x1",
           "statx,dir,0x2000,0x7ff", "statx,f,0,0x0", "stat,/proc/self/exe", "open,/proc/self/exe,0",
           "fstat"]
    w = make_layout(tmp_path / "t")
    for d in (w, w / "dir"):                         # relatime: the first reads set the atimes
        os.listdir(d)
    (w / "f").read_bytes()
    os.readlink(w / "lnk")
    want = subprocess.run([exe, *ops], capture_output=True, timeout=60, cwd=w).stdout.decode()
    got = model_ops(exe, tmp_path / "t", ops, fresh=False)
    assert got.splitlines() == want.splitlines()


def test_empty_and_null_path_names_as_native(build_c, tmp_path):
    exe = build_c("empty_paths.c", "-static")
    w = make_layout(tmp_path / "t")
    want = subprocess.run([exe], capture_output=True, timeout=60, cwd=w).stdout.decode()
    got = model_ops(exe, tmp_path / "t", [], fresh=False)
    assert got.splitlines() == want.splitlines()
