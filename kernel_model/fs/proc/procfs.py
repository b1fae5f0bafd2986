"""The guest's ``/proc`` (fs/proc): one directory per guest process in its pid
namespace (the machine's processes only), the ``self``/``thread-self`` links, and the
few system-wide files a libc or a shell reads.

Nothing is made at open.  Each file is produced as the kernel produces it, at read
time (:class:`ProcFileNode`'s ``kind``): the single_open files (status, stat, comm,
personality, limits, uptime, loadavg, meminfo, filesystems) print their whole text at
the first read and again when a read or seek returns to offset 0
(:mod:`kernel_model.fs.proc.seq_file`); maps (:mod:`kernel_model.fs.proc.task_mmu`),
mounts and cpuinfo are seq_files of many records, each printed when the reading
reaches it; cmdline, environ, auxv and the two audit ids have no seq_file and are made
anew at every read.  What each file shows and what it leaves out, because the
model has nothing honest to say there:

* ``<pid>/status`` (proc_pid_status, in :mod:`kernel_model.fs.proc.array`): Name, Umask, State, Tgid, Ngid, Pid, PPid,
  TracerPid, Uid, Gid, FDSize, Groups, NStgid, NSpid, NSpgid, Kthread; the Vm lines
  the mappings decide - VmSize, VmLck, VmPin, VmData, VmStk, VmExe, VmLib, VmSwap -
  and HugetlbPages; CoreDumping, untag_mask; Threads, SigQ, SigPnd, ShdPnd, SigBlk,
  SigIgn, SigCgt; Cpus_allowed(_list) of the one modeled CPU.  Left out: NSsid (no
  sessions), VmPeak/VmHWM (no high-water marks), VmRSS/Rss* (residency is not
  modeled), VmPTE (no page tables), THP_enabled, the capability sets, NoNewPrivs,
  Seccomp, the speculation lines, Mems_allowed and the context-switch counts.
* ``<pid>/stat`` (do_task_stat, likewise): every field in its place; the ones the model keeps
  no count of are 0 (session, page faults, CPU times, rss), as getrusage says 0.
  FDSize and stat's flags follow the kernel's rules (see :func:`max_fds`).
* ``<pid>/cmdline`` (get_mm_cmdline): the argv strings from the guest's memory, with
  the setproctitle rule; ``environ`` (0400) likewise; ``auxv`` (0400, the exec's
  auxiliary vector); ``cwd`` and ``root`` (links to the working directory and ``/``);
  ``comm`` (0644: writing renames the thread, comm_write); ``maps`` (show_map_vma's
  lines, the ``[vsyscall]`` gate last); ``exe`` (the
  executable's guest path); ``mounts``; ``fd/`` (magic links:
  readlink gives the description's name, opening one opens the file again: a new
  description of the same pipe, a file with a path by that path, a modeled file
  anew); ``task/<tid>/`` with status, comm, cmdline, stat and maps.  /proc/PID is the
  thread-group leader's view: once the leader has exited (before its threads) it has
  no mm, descriptors or fs_struct there, as in the kernel.
* ``uptime`` (the virtual clock; idle time is not modeled: 0.00), ``loadavg`` (no
  load average is computed: 0.00; running/total tasks and the last pid are real),
  ``meminfo`` (MemTotal/MemFree/MemAvailable as sysinfo computes them, no buffers,
  cache or swap), ``mounts`` (-> self/mounts), ``filesystems`` (filesystems_proc_show:
  the host kernel's registered types, see :func:`filesystems_text`; libselinux and
  systemd read it), ``cpuinfo`` (one entry per CPU: :mod:`kernel_model.arch.x86.kernel.cpu.proc`).

Opening for writing: EACCES for an unprivileged guest (mode 0444), as the kernel's
permission check says; a root guest's open succeeds and write() is EINVAL for a
``<pid>`` file and EIO for a top-level one (no write operation), as on Linux.
"""

from __future__ import annotations

import errno as E
import functools
import os
import re
import stat as S
import struct
from types import MappingProxyType

from kernel_model.arch.x86.kernel.cpu.proc import cpuinfo_text
from kernel_model.fs.file import (
    READ_CHUNK,
    SEEK_CUR,
    SEEK_SET,
    HostInput,
    OutputSink,
    PipeInput,
    SeqFile,
    attrs_stat_bytes,
)
from kernel_model.fs.fs_types import Attrs, SpecialNode
from kernel_model.fs.libfs import DirNode, LinkNode, access_mode, keep_open_flags, may_open
from kernel_model.fs.pipe import PipeEnd
from kernel_model.fs.proc.array import (
    NSEC,
    PAGE_SIZE,
    RLIM_INFINITY,
    leader,
    live_threads,
    nr_threads,
    process_alive,
    stat_text,
    status_text,
    task_has_mm,
)
from kernel_model.fs.proc.seq_file import RecordOps, SeqFileState, SingleOps
from kernel_model.fs.proc.task_mmu import MapsOps
from kernel_model.mm.mm_types import GuestFault

PROC_DEV = os.makedev(0, 21)  # st_dev of this machine's procfs (0:21, as `stat /proc`)
PROC_ROOT_INO = 1
SELF_INO, THREAD_SELF_INO, MOUNTS_LINK_INO = 0xF0000000, 0xF0000001, 0xF0000002
# proc_alloc_inum numbers the other top-level entries in initcall order, so their values
# depend on what a build registers before them (6.18 hosts differ by one here); these
# are one 6.18 build's, in the order every build creates them
TOP_INOS = MappingProxyType(
    {
        "uptime": 0xF0000031,
        "loadavg": 0xF000002E,
        "meminfo": 0xF000002F,
        "filesystems": 0xF000005C,
        "cpuinfo": 0xF0000025,
    }
)
PROC_BLKSIZE = 1024
FD_LINK_SIZE = 64  # proc_fd_instantiate: i_size of an fd link
O_ACCMODE, O_WRONLY, O_RDWR, O_NONBLOCK = 3, 1, 2, 0o4000


def cmdline_bytes(proc, task) -> bytes:
    """get_mm_cmdline: arg_start..arg_end from the guest's memory.  When the NUL ending
    the arguments was overwritten (setproctitle), get_mm_proctitle: the text from
    arg_start up to and with its first NUL, at most a page, running on into the
    environment only when it lies right after the arguments."""
    if not task_has_mm(proc, task) or proc.arg_end <= proc.arg_start:
        return b""
    mem, start, end = proc.mem, proc.arg_start, proc.arg_end
    env_end = proc.env_end if proc.env_start == end and proc.env_end >= proc.env_start else end
    if _read(mem, end - 1, 1) not in (b"", b"\0"):
        page = _read(mem, start, min(PAGE_SIZE, env_end - start))
        nul = page.find(b"\0")
        return page[: nul + 1] if nul >= 0 else page
    return _read(mem, start, end - start)


def environ_bytes(proc, task) -> bytes:
    """environ_read: env_start..env_end from the guest's memory (empty without an mm)."""
    if not task_has_mm(proc, task) or proc.env_end <= proc.env_start:
        return b""
    return _read(proc.mem, proc.env_start, proc.env_end - proc.env_start)


def auxv_bytes(machine, proc, task) -> bytes:
    """proc_pid_auxv: mm->saved_auxv, the (type, value) pairs exec put on the stack,
    AT_NULL included; empty without an mm."""
    auxv = getattr(machine, "auxv", None)
    if not task_has_mm(proc, task) or not auxv:
        return b""
    pairs = [(k, v) for k, v in auxv.items() if k != 0] + [(0, 0)]
    return struct.pack(f"<{2 * len(pairs)}Q", *(x for pair in pairs for x in pair))


def fs_link(proc, task, path: str) -> str | int:
    """proc_cwd_link / proc_root_link: the directory's guest path (the process's
    fs_struct); ENOENT once the task has exited."""
    return path if task_has_mm(proc, task) else -E.ENOENT


def _read(mem, addr: int, n: int) -> bytes:
    """access_remote_vm: as many bytes as are mapped from ``addr``."""
    out = bytearray()
    while n > 0:
        step = min(n, PAGE_SIZE - (addr % PAGE_SIZE))
        try:
            out += mem.read(addr, step)
        except GuestFault:  # an unmapped page ends the copy
            break
        addr += step
        n -= step
    return bytes(out)


def mounts_text(machine) -> str:
    """show_vfsmnt over the guest's mount table, in mount order: the sysroot at /
    (read-only unless / itself is granted), each granted directory read-write at its
    path, then proc and devtmpfs.  A host directory's source and type are those of the
    host filesystem holding it.  The empty directory hiding /sys is not a filesystem
    of its own and is not listed."""
    vfs = machine.syscalls.vfs
    table = _host_mounts()
    lines = [_host_mount_line(table, vfs.root)]
    for point, mnt in vfs.mounts.items():
        if mnt.node is None:
            lines.append(_host_mount_line(table, mnt))
        elif point in SPECIAL_MOUNT_LINES:
            lines.append(SPECIAL_MOUNT_LINES[point])
    return "".join(lines)


def mountinfo_text(machine) -> str:
    """show_mountinfo over the same mount table as :func:`mounts_text`: ``ID PARENT
    MAJ:MIN ROOT POINT OPTIONS - TYPE SOURCE SUPER-OPTIONS``.  A host directory's line
    is the host's line of the mount holding it (its device, filesystem type, source and
    super options; ROOT the directory within that filesystem), with the guest's mount
    point and the guest's read-only or read-write; proc and devtmpfs are the model's own
    (0:21 and 0:6, as their files' st_dev).  Mount ids count from 21 in mount order, the
    root's parent being 1 (the namespace's hidden rootfs), as a fresh namespace numbers
    them."""
    vfs = machine.syscalls.vfs
    host = _host_mountinfo()
    mounts = [vfs.root] + [mnt for point, mnt in vfs.mounts.items() if mnt.node is None or point in SPECIAL_MOUNTINFO]
    lines = []
    for i, mnt in enumerate(mounts):
        mnt_id, parent = 21 + i, (1 if i == 0 else 21)
        opts = ("rw" if mnt.node is not None or mnt.writable else "ro") + ",relatime"
        if mnt.node is not None:
            dev, fstype, source, sopts = SPECIAL_MOUNTINFO[mnt.point]
            root = "/"
        else:
            dev, root, fstype, source, sopts = _host_mountinfo_of(host, mnt.host)
        point = "/" if i == 0 else mnt.point
        lines.append(
            f"{mnt_id} {parent} {dev} {_octal_escape(root)} {_octal_escape(point)} {opts} - "
            f"{fstype} {_octal_escape(source)} {sopts}\n"
        )
    return "".join(lines)


# the model's own filesystems in mountinfo: (MAJ:MIN, type, source, super options)
SPECIAL_MOUNTINFO = MappingProxyType(
    {"/proc": ("0:21", "proc", "proc", "rw"), "/dev": ("0:6", "devtmpfs", "devtmpfs", "rw,mode=755")}
)


def _host_mountinfo() -> list[list[str]]:
    try:
        with open("/proc/self/mountinfo") as f:
            return [line.split() for line in f]
    except OSError:
        return []


def _host_mountinfo_of(rows: list[list[str]], path: str) -> tuple[str, str, str, str, str]:
    """(MAJ:MIN, ROOT, type, source, super options) of the host mount holding ``path``
    (its longest mount point), ROOT being ``path`` within that filesystem."""
    real = os.path.realpath(path)
    best: list[str] | None = None
    for row in rows:
        if len(row) < 10 or "-" not in row[6:]:
            continue
        point = _octal_unescape(row[4])
        if (real == point or real.startswith(point.rstrip("/") + "/")) and (
            best is None or len(point) > len(_octal_unescape(best[4]))
        ):
            best = row
    if best is None:
        st = os.stat(real)
        return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", real, "unknown", "none", "rw"
    sep = best.index("-", 6)
    point = _octal_unescape(best[4])
    within = real[len(point.rstrip("/")) :] or "/"
    root = _octal_unescape(best[3]).rstrip("/") + within if within != "/" else _octal_unescape(best[3])
    fstype, source, sopts = best[sep + 1], _octal_unescape(best[sep + 2]), best[sep + 3]
    return best[2], root or "/", fstype, source, sopts


SPECIAL_MOUNT_LINES = MappingProxyType(
    {"/proc": "proc /proc proc rw,relatime 0 0\n", "/dev": "devtmpfs /dev devtmpfs rw,relatime,mode=755 0 0\n"}
)


def filesystems_text(machine) -> str:
    """filesystems_proc_show: every registered filesystem type in registration order,
    ``nodev\tNAME`` for one that needs no block device, else ``\tNAME``.

    The list is the host's /proc/filesystems as it is at the read.  The registered
    types are a property of the kernel (its config and the modules it loaded), not of
    what is mounted, and the modeled kernel is the host's kernel: a program deciding
    from this file (libselinux looks for selinuxfs, systemd and mount(8) for the
    types they may use) must find what it finds natively, byte for byte.  Only when
    the host's file cannot be read does the model fall back to the types its own
    mount table shows (proc and devtmpfs ``nodev``, the host filesystems beside them
    as the mounts name them)."""
    try:
        with open("/proc/filesystems", "rb") as f:
            host = f.read()
    except OSError:
        host = b""
    if host:
        return host.decode("latin-1")
    types = dict.fromkeys(line.split(" ")[2] for line in mounts_text(machine).splitlines() if line.count(" ") >= 2)
    nodev = {"proc", "devtmpfs", "tmpfs", "overlay", "sysfs", "ramfs", "fuse"}
    return "".join(f"{'nodev' if name in nodev else ''}\t{name}\n" for name in types)


def _host_mount_line(table, mnt) -> str:
    src, fstype = _host_fs(table, mnt.host)
    opts = "rw" if mnt.writable else "ro"
    return f"{_octal_escape(src)} {_octal_escape(mnt.point)} {fstype} {opts},relatime 0 0\n"


def _octal_escape(path: str) -> str:
    """mangle(): space, tab, newline and backslash as \\ooo."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in path)


def _host_mounts() -> list[tuple[str, str, str]]:
    try:
        with open("/proc/self/mounts") as f:
            rows = [line.split() for line in f]
    except OSError:
        return []
    return [(r[0], _octal_unescape(r[1]), r[2]) for r in rows if len(r) >= 3]


def _octal_unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda mo: chr(int(mo.group(1), 8)), field)


def _host_fs(table, path: str) -> tuple[str, str]:
    """The source and type of the host mount holding ``path`` (its longest mount point)."""
    best = ("none", "unknown", -1)
    real = os.path.realpath(path)
    for src, point, fstype in table:
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) > best[2]:
            best = (src, fstype, len(point))
    return best[0], best[1]


def meminfo_text(machine) -> str:
    """meminfo_proc_show's first lines, from the machine's memory as sysinfo reports it."""
    total, free = mem_total_free(machine)
    rows = [
        ("MemTotal", total >> 10),
        ("MemFree", free >> 10),
        ("MemAvailable", free >> 10),
        ("Buffers", 0),
        ("Cached", 0),
        ("SwapCached", 0),
        ("SwapTotal", 0),
        ("SwapFree", 0),
    ]
    return "".join(f"{(name + ':').ljust(16)}{kb:>8} kB\n" for name, kb in rows)


def mem_total_free(machine) -> tuple[int, int]:
    """do_sysinfo's totalram and freeram (bytes): the modeled RAM, minus what the live
    guest processes have mapped."""
    sc = machine.syscalls
    used = sum(
        v.size for mem in {id(p.mem): p.mem for p in machine.processes if process_alive(p)}.values() for v in mem.vmas
    )
    total = sc.mem_total // PAGE_SIZE * PAGE_SIZE
    return total, max(0, sc.mem_total - used) // PAGE_SIZE * PAGE_SIZE


def uptime_text(machine) -> str:
    ns = machine.syscalls.boot_clock_ns()
    return f"{ns // NSEC}.{ns % NSEC // (NSEC // 100):02d} 0.00\n"


def loadavg_text(machine) -> str:
    running = sum(1 for t in machine.tasks if t.state == "running")
    last_pid = max((t.tid for t in machine.all_tasks), default=0)
    return f"0.00 0.00 0.00 {running}/{len(machine.tasks)} {last_pid}\n"


# ----------------------------------------------------------------------------- files
class DirectRead:
    """A /proc file without a seq_file (proc_pid_cmdline_read, environ_read,
    auxv_read, the audit ids' read operations): every read makes the text
    anew from the task's state of that moment and copies from the file offset."""

    def __init__(self, show):
        self._show = show

    def read(self, pos: int, want: int) -> bytes | int:
        text = self._show()
        return text[pos : pos + want] if isinstance(text, bytes) else text

    def lseek(self, f_pos: int, offset: int, whence: int) -> int:
        if whence == SEEK_CUR:
            offset += f_pos
        elif whence != SEEK_SET:
            return -E.EINVAL
        return -E.EINVAL if offset < 0 else offset


class ProcSeqFile(SeqFile):
    """An open /proc text file: its reader (a :class:`SeqFileState` over the file's
    seq_operations, or a :class:`DirectRead`), the access mode of the open, the
    node's attributes for fstat and its write operation (if any).  Nothing is made
    at open: the text comes at read time, as the kernel's does."""

    def __init__(self, reader, node: "ProcFileNode", task, readable: bool, writable: bool):
        attrs = node.attrs(task)
        super().__init__(b"", attrs.ino)
        self.reader = reader
        self.node, self.task = node, task
        self.readable, self.writable = readable, writable

    def read(self, count, interrupted):
        if not self.readable:
            return -E.EBADF
        data = self.reader.read(self.pos, min(count, READ_CHUNK))
        if isinstance(data, bytes):
            self.pos += len(data)
        return data

    def pread(self, count, offset):
        if not self.readable:
            return -E.EBADF
        if offset < 0:
            return -E.EINVAL
        return self.reader.read(offset, min(count, READ_CHUNK))

    def lseek(self, offset, whence):
        """seq_lseek: a failed traverse leaves the file at offset 0."""
        new = self.reader.lseek(self.pos, offset, whence)
        if new >= 0:
            self.pos = new
        elif new != -E.EINVAL:
            self.pos = 0
        return new

    def write(self, data):
        if not self.writable:
            return -E.EBADF
        return self.node.write(self.task, data)

    def attrs(self):
        return self.node.attrs(self.task)

    def fstat(self):
        return attrs_stat_bytes(self.attrs())

    def proc_link(self):
        return self.node.path


class ProcFileNode(SpecialNode):
    """One /proc text file: ``show(reader)`` makes its text; ``owner`` is the task
    whose credentials own it (None: root, a system-wide file).  ``kind`` says how the
    kernel produces it: ``"single"`` (single_open: the whole text one seq_file record,
    made at the first read), ``"seq"`` (``show(reader)`` returns the seq_operations,
    each record made as the reading reaches it) or ``"direct"`` (no seq_file: made
    anew at every read)."""

    def __init__(
        self,
        fs: "ProcFs",
        path: str,
        ino: int,
        show,
        *,
        mode: int = 0o444,
        owner=None,
        write=None,
        no_write_errno: int = E.EINVAL,
        kind: str = "single",
    ):
        self.fs, self.path, self.ino, self.show = fs, path, ino, show
        self.mode, self.owner, self._write = S.S_IFREG | mode, owner, write
        self.no_write_errno = no_write_errno
        self.kind = kind

    def attrs(self, task):
        uid, gid = _owner_ids(self.owner)
        return self.fs.attrs(self.mode, self.ino, uid=uid, gid=gid)

    def open(self, task, flags):
        a = self.attrs(task)
        err = may_open(a.mode, flags, task.cred, a.uid, a.gid)
        if err:
            return err
        readable, writable = access_mode(flags)
        f = ProcSeqFile(self.reader(task), self, task, readable, writable)
        return keep_open_flags(f, flags)

    def reader(self, task):
        """What an open of this file reads through (the private state of one open)."""
        if self.kind == "seq":
            return SeqFileState(self.show(task))
        text = functools.partial(_as_bytes, self.show, task)
        return DirectRead(text) if self.kind == "direct" else SeqFileState(SingleOps(text))

    def write(self, task, data: bytes) -> int:
        if self._write is None:
            return -self.no_write_errno
        return self._write(task, data)


def _lines(text: str) -> list[bytes]:
    """One seq_file record per line (show_vfsmnt prints one mount a record)."""
    return [line.encode() for line in text.splitlines(keepends=True)]


def _cpuinfo_records(nr_cpus: int) -> list[bytes]:
    """show_cpuinfo's records: one CPU's entry each (c_start walks the online CPUs)."""
    return [entry.encode() + b"\n\n" for entry in cpuinfo_text(nr_cpus).split("\n\n") if entry]


def _as_bytes(show, task) -> bytes | int:
    text = show(task)
    return text.encode() if isinstance(text, str) else text


def _owner_ids(task) -> tuple[int, int]:
    """task_dump_owner: a process's files belong to its effective ids."""
    if task is None or task.cred is None:
        return 0, 0
    return task.cred.euid, task.cred.egid


class ProcLink(LinkNode):
    """A /proc symlink whose text depends on the reader (self, thread-self) or on the
    target task (exe)."""

    def __init__(self, fs, ino: int, text, owner=None, *, size: int = 0, target=None):
        super().__init__("")
        self.fs, self.ino, self.text, self.owner, self.size = fs, ino, text, owner, size
        self.target_fn = target

    def attrs(self, task):
        uid, gid = _owner_ids(self.owner)
        return self.fs.attrs(S.S_IFLNK | 0o777, self.ino, uid=uid, gid=gid, size=self.size)

    def readlink(self, task):
        return self.text(task)

    def follow(self, task):
        return self.target_fn(task) if self.target_fn is not None else self.text(task)


class FdLink(SpecialNode):
    """/proc/PID/fd/N (proc_fd_link): readlink gives the description's name; a walk
    through it reaches that open file (nd_jump_link), and opening it opens the file
    again (:func:`reopen`)."""

    def __init__(self, fs, proc, fd: int, ino: int):
        self.fs, self.proc, self.fd, self.ino = fs, proc, fd, ino

    def file(self):
        return self.proc.files.get(self.fd)

    def attrs(self, task):
        f = self.file()
        mode = S.S_IFLNK
        if f is not None and f.readable:
            mode |= 0o500
        if f is not None and f.writable:
            mode |= 0o300
        uid, gid = _owner_ids(leader(self.fs.m, self.proc))
        return self.fs.attrs(mode, self.ino, uid=uid, gid=gid, size=FD_LINK_SIZE)

    def readlink(self, task):
        f = self.file()
        return -E.ENOENT if f is None else f.proc_link()

    def follow(self, task):
        f = self.file()
        return -E.ENOENT if f is None else f

    def open(self, task, flags):
        f = self.file()
        return -E.ENOENT if f is None else reopen(self.fs.m, task, f, flags)


def reopen(machine, task, f, flags: int):
    """Open the file behind a /proc fd link again, as a path walk that jumped to its
    inode opens it: a new description each time (its own offset), with the access
    mode of this open.  A pipe end gives a new end of the same pipe (fifo_open); a
    file with a path is opened again by that path (the view's permission and
    read-only rules apply); a modeled file by its node; a stdio sink writes where the guest's output goes; the CLI's
    stdin is read
    again.  Anything else (the stdin for writing, stdout for reading): ENXIO."""
    rw = access_mode(flags)
    if isinstance(rw, int):
        return rw
    readable, writable = rw
    node = getattr(f, "node", None)
    if node is not None and not getattr(f, "guest_path", None):
        return node.open(task, flags)
    if isinstance(f, PipeEnd):
        return _pipe_end(f.pipe, readable, writable, flags & O_NONBLOCK)
    if isinstance(f, PipeInput) and not writable:
        again = PipeInput(b"", ino=f.ino)
        again.data = f.data  # the same pipe buffer
        return again
    if isinstance(f, OutputSink) and not readable:
        return OutputSink(machine, f.which, host_fd=f.host_fd, ino=f.ino)
    if isinstance(f, HostInput) and not writable:
        return _reopen_host_input(f)
    path = getattr(f, "guest_path", None)
    if path:
        return machine.syscalls.open_guest_path(task, path, flags)
    return -E.ENXIO


def _reopen_host_input(f):
    """The CLI's stdin (a host pipe, file or terminal) opened again for reading, through
    the host's own magic link to that very inode: a description of its own (a file
    reads from its start).  Never for writing: the guest may not change the user's
    --stdin file."""
    try:
        fd = os.open(f"/proc/self/fd/{f.fd}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as e:
        return -(e.errno or E.EIO)
    return HostInput(fd)


def _pipe_end(pipe, readable: bool, writable: bool, nonblock: int):
    if readable and writable:
        return DuplexPipeEnd(pipe, nonblock)
    return PipeEnd(pipe, write=writable, status_flags=nonblock)


class DuplexPipeEnd(PipeEnd):
    """A pipe opened O_RDWR through /proc (fifo_open counts it as a reader and a
    writer, so it never waits for a partner)."""

    def __init__(self, pipe, status_flags: int = 0):
        super().__init__(pipe, write=False, status_flags=status_flags)
        pipe.writers += 1
        self.writable = True

    def release(self):
        self.pipe.writers -= 1
        self.pipe.readers -= 1
        self.pipe.wake_up()

    def poll(self):
        return self.pipe.poll_mask(True) | self.pipe.poll_mask(False)


# ----------------------------------------------------------------------------- directories
class ProcDir(DirNode):
    """A /proc directory with an ``entries`` function and attributes of its own."""

    def __init__(
        self, fs, path: str, ino: int, entries, *, mode: int = 0o555, owner=None, nlink=2, size=0, parent_ino: int = 0
    ):
        self.fs, self.path, self.ino, self._entries = fs, path, ino, entries
        self.parent_ino = parent_ino
        self.mode, self.owner, self._nlink, self._size = S.S_IFDIR | mode, owner, nlink, size

    def entries(self, task):
        return self._entries(task)

    def attrs(self, task):
        uid, gid = _owner_ids(self.owner)
        nlink = self._nlink(task) if callable(self._nlink) else self._nlink
        size = self._size(task) if callable(self._size) else self._size
        return self.fs.attrs(self.mode, self.ino, uid=uid, gid=gid, nlink=nlink, size=size)


class ProcRoot(DirNode):
    """/proc (proc_root_lookup / proc_root_readdir): the system-wide files, then self
    and thread-self, then one directory per process; any thread is reachable by its
    tid although only thread-group leaders are listed."""

    path = "/proc"

    def __init__(self, fs: "ProcFs"):
        self.fs = fs
        m = fs.m
        self.static = {
            "mounts": ProcLink(fs, MOUNTS_LINK_INO, lambda t: "self/mounts", size=11),
            "uptime": ProcFileNode(
                fs, "/proc/uptime", TOP_INOS["uptime"], lambda t: uptime_text(m), no_write_errno=E.EIO
            ),
            "cpuinfo": ProcFileNode(
                fs,
                "/proc/cpuinfo",
                TOP_INOS["cpuinfo"],
                lambda t: RecordOps(lambda: _cpuinfo_records(m.scheduler.nr_cpu_ids)),
                no_write_errno=E.EIO,
                kind="seq",
            ),
            "loadavg": ProcFileNode(
                fs, "/proc/loadavg", TOP_INOS["loadavg"], lambda t: loadavg_text(m), no_write_errno=E.EIO
            ),
            "meminfo": ProcFileNode(
                fs, "/proc/meminfo", TOP_INOS["meminfo"], lambda t: meminfo_text(m), no_write_errno=E.EIO
            ),
            "filesystems": ProcFileNode(
                fs, "/proc/filesystems", TOP_INOS["filesystems"], lambda t: filesystems_text(m), no_write_errno=E.EIO
            ),
        }
        self.self_link = ProcLink(fs, SELF_INO, lambda t: str(t.process.pid))
        self.thread_self = ProcLink(fs, THREAD_SELF_INO, lambda t: f"{t.process.pid}/task/{t.tid}")

    def attrs(self, task):
        nprocs = len(self.fs.processes())
        return self.fs.attrs(S.S_IFDIR | 0o555, PROC_ROOT_INO, nlink=2 + nprocs)

    def entries(self, task):
        out = list(self.static.items())
        out += [("self", self.self_link), ("thread-self", self.thread_self)]
        out += [(str(p.pid), self.fs.pid_dir(p, leader(self.fs.m, p))) for p in self.fs.processes()]
        return out

    def lookup(self, task, name):
        if name.isdigit() and not (len(name) > 1 and name[0] == "0"):
            t = self.fs.task_by_tid(int(name))
            return -E.ENOENT if t is None else self.fs.pid_dir(t.process, t)
        return super().lookup(task, name)


class ProcFs:
    """The /proc mount of one machine.  ``root`` is its directory node; every node is
    made when looked up, from the machine's live state."""

    def __init__(self, machine):
        self.m = machine
        self.root = ProcRoot(self)

    # -- state ------------------------------------------------------------------------
    def processes(self) -> list:
        """The guest's pid namespace: its live processes and unreaped zombies."""
        return sorted(self.m.processes, key=lambda p: p.pid)

    def task_by_tid(self, tid: int):
        for p in self.m.processes:
            for t in p.tasks:
                if t.tid == tid and (t.state != "dead" or t.tid == p.pid):
                    return t
            if p.pid == tid:
                return leader(self.m, p)
        return None

    def attrs(self, mode: int, ino: int, *, uid: int = 0, gid: int = 0, nlink: int = 1, size: int = 0) -> Attrs:
        """A proc inode's attributes; times are now on the virtual clock (a proc inode
        is made when it is looked up)."""
        t = self.m.syscalls.clock_ns
        return Attrs(
            mode=mode,
            ino=ino,
            dev=PROC_DEV,
            nlink=nlink,
            uid=uid,
            gid=gid,
            size=size,
            blksize=PROC_BLKSIZE,
            blocks=0,
            atime_ns=t,
            mtime_ns=t,
            ctime_ns=t,
        )

    # -- per-process directories --------------------------------------------------------
    def pid_dir(self, proc, task, *, in_task_dir: bool = False) -> ProcDir:
        """/proc/PID (tgid_base_stuff) or /proc/PID/task/TID (tid_base_stuff)."""
        base = task.tid << 24 | (0x1000 if in_task_dir else 0)
        path = f"/proc/{proc.pid}/task/{task.tid}" if in_task_dir else f"/proc/{task.tid}"
        m = self.m

        def file(name, ino, show, **kw):
            return name, ProcFileNode(self, f"{path}/{name}", base | ino, show, owner=task, **kw)

        def entries(reader):
            out = []
            if not in_task_dir:
                out.append(("task", self.task_dir(proc, task, path, base | 1)))
            out.append(("fd", self.fd_dir(proc, task, path, base | 2)))
            out.append(file("environ", 10, lambda r: environ_bytes(proc, task), mode=0o400, kind="direct"))
            out.append(file("auxv", 13, lambda r: auxv_bytes(m, proc, task), mode=0o400, kind="direct"))
            out += [
                file("status", 3, lambda r: status_text(m, proc, task)),
                file("personality", 16, lambda r: f"{proc.personality:08x}\n", mode=0o400),
                file("limits", 17, lambda r: limits_text(m.syscalls.rlimits_of(proc))),
                file(
                    "comm", 4, lambda r: task.comm + "\n", mode=0o644, write=lambda r, data: comm_write(r, task, data)
                ),
                file("cmdline", 5, lambda r: cmdline_bytes(proc, task), kind="direct"),
                file("stat", 6, lambda r: stat_text(m, proc, task, not in_task_dir)),
                file("maps", 7, lambda r: MapsOps(lambda: proc.mem if task_has_mm(proc, task) else None), kind="seq"),
            ]
            out.append(("cwd", ProcLink(self, base | 11, lambda r: fs_link(proc, task, proc.fs.pwd), owner=task)))
            out.append(("root", ProcLink(self, base | 12, lambda r: fs_link(proc, task, "/"), owner=task)))
            out.append(
                (
                    "exe",
                    ProcLink(
                        self,
                        base | 8,
                        lambda r: exe_link(m, proc, task),
                        owner=task,
                        target=lambda r: exe_link(m, proc, task, follow=True),
                    ),
                )
            )
            out.append(file("mounts", 9, lambda r: RecordOps(lambda: _lines(mounts_text(m))), kind="seq"))
            out.append(file("mountinfo", 16, lambda r: RecordOps(lambda: _lines(mountinfo_text(m))), kind="seq"))
            # audit: no login session set one (AUDIT_UID_UNSET, AUDIT_SID_UNSET), printed "%u"
            out.append(file("loginuid", 14, lambda r: "4294967295", mode=0o644, kind="direct"))
            out.append(file("sessionid", 15, lambda r: "4294967295", kind="direct"))
            return out

        nlink = 3 if in_task_dir else 4  # pid_entry_nlink: 2 + the subdirectories
        parent = (proc.pid << 24 | 1) if in_task_dir else PROC_ROOT_INO
        return ProcDir(self, path, base, entries, owner=task, nlink=nlink, parent_ino=parent)

    def task_dir(self, proc, task, path: str, ino: int) -> ProcDir:
        def entries(reader):
            lead = leader(self.m, proc)  # listed until the group is released
            threads = [lead] + [t for t in live_threads(proc) if t is not lead]
            return [(str(t.tid), self.pid_dir(proc, t, in_task_dir=True)) for t in threads]

        return ProcDir(
            self,
            path + "/task",
            ino,
            entries,
            owner=task,
            parent_ino=ino & ~0xFFFFFF,
            nlink=lambda r: 2 + nr_threads(proc),
        )

    def fd_dir(self, proc, task, path: str, ino: int) -> ProcDir:
        """/proc/PID/fd (proc_fd_operations): mode 0500, its size the number of open
        descriptors (proc_fd_getattr), one link per descriptor in ascending order."""
        base = task.tid << 24 | 0x10000

        def entries(reader):
            if not task_has_mm(proc, task):
                return []
            return [(str(fd), FdLink(self, proc, fd, base | fd)) for fd in sorted(proc.files.fds)]

        def lookup_size(reader):
            return len(proc.files) if task_has_mm(proc, task) else 0

        return ProcDir(
            self, path + "/fd", ino, entries, mode=0o500, owner=task, size=lookup_size, parent_ino=ino & ~0xFFFFFF
        )


LIMIT_NAMES = (
    ("Max cpu time", "seconds"),
    ("Max file size", "bytes"),
    ("Max data size", "bytes"),
    ("Max stack size", "bytes"),
    ("Max core file size", "bytes"),
    ("Max resident set", "bytes"),
    ("Max processes", "processes"),
    ("Max open files", "files"),
    ("Max locked memory", "bytes"),
    ("Max address space", "bytes"),
    ("Max file locks", "locks"),
    ("Max pending signals", "signals"),
    ("Max msgqueue size", "bytes"),
    ("Max nice priority", None),
    ("Max realtime priority", None),
    ("Max realtime timeout", "us"),
)


def limits_text(rlimits) -> str:
    """proc_pid_limits: one line per resource, "unlimited" for RLIM_INFINITY."""

    def value(v):
        return "unlimited" if v == RLIM_INFINITY else str(v)

    lines = [f"{'Limit':<25} {'Soft Limit':<20} {'Hard Limit':<20} {'Units':<10}\n"]
    for (name, unit), (cur, mx) in zip(LIMIT_NAMES, rlimits):
        line = f"{name:<25} {value(cur):<20} {value(mx):<20} "
        lines.append(line + (f"{unit:<10}\n" if unit else "\n"))
    return "".join(lines)


def comm_write(reader, task, data: bytes) -> int:
    """comm_write: a thread of the same group renames ``task`` (at most 15 bytes kept,
    as set_task_comm); another process's is EINVAL.  The whole count is consumed."""
    if reader.process is not task.process:
        return -E.EINVAL
    name = data[:15].split(b"\0", 1)[0]
    task.comm = name.decode("latin-1")
    return len(data)


def exe_link(machine, proc, task, follow: bool = False) -> str | int:
    """proc_exe_link: the executable's path in the guest's view (readlink), or where a
    walk through the link goes (the file, when the guest can see it); ENOENT once the
    process has no mm (a zombie)."""
    if not task_has_mm(proc, task) or not proc.exe_path:
        return -E.ENOENT
    sc = machine.syscalls
    return sc.exe_target(proc.exe_path) if follow else sc.exe_view(proc.exe_path)
