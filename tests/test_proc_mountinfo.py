"""``/proc/PID/mountinfo`` (show_mountinfo) over the guest's own mount table: the
sysroot's line is the host's line of the filesystem holding it - device, type, source,
super options, ROOT the directory within it - with the guest's mount point and its
read-only; proc and devtmpfs carry the model's device numbers; ids count from 21."""

from __future__ import annotations

import os

from emu.machine import Machine

CAT = ("/bin/cat", "/proc/self/mountinfo")


def host_line_for(path: str) -> list[str]:
    real = os.path.realpath(path)
    best = None
    with open("/proc/self/mountinfo") as f:
        for row in (line.split() for line in f):
            point = row[4]
            if (real == point or real.startswith(point.rstrip("/") + "/")) and (
                best is None or len(point) > len(best[4])
            ):
                best = row
    assert best is not None
    return best


def model_mountinfo(**kw) -> list[list[str]]:
    m = Machine.from_elf(CAT[0], argv=list(CAT), **kw)
    assert m.run().exit_code == 0, bytes(m.stderr)
    return [line.split() for line in bytes(m.stdout).decode().splitlines()]


def test_the_root_is_the_hosts_filesystem_read_only():
    rows = model_mountinfo()
    host = host_line_for("/")
    sep = host.index("-", 6)
    assert rows[0][:6] == ["21", "1", host[2], host[3], "/", "ro,relatime"], rows[0]
    assert rows[0][rows[0].index("-") + 1 :] == host[sep + 1 : sep + 4], (rows[0], host)


def test_proc_and_dev_are_the_models_own():
    rows = model_mountinfo()
    assert rows[1] == ["22", "21", "0:21", "/", "/proc", "rw,relatime", "-", "proc", "proc", "rw"]
    assert rows[2] == ["23", "21", "0:6", "/", "/dev", "rw,relatime", "-", "devtmpfs", "devtmpfs", "rw,mode=755"]


def test_a_granted_directory_is_its_host_filesystem_read_write(tmp_path):
    rows = model_mountinfo(grant_dirs=[str(tmp_path)])
    mine = [r for r in rows if r[4] == str(tmp_path)]
    host = host_line_for(str(tmp_path))
    assert len(mine) == 1 and mine[0][2] == host[2] and mine[0][5] == "rw,relatime", (mine, host)
    within = str(tmp_path)[len(host[4].rstrip("/")) :]
    assert mine[0][3] == host[3].rstrip("/") + within, (mine[0], host)
