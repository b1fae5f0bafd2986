"""The descriptors ``bpf()`` hands out and what the syscall shares with perf events:
anonymous-inode files for maps, programs, links and BTF objects (``bpf_map_fops`` and
friends), the verifier log's finishing rules, the object info structures
(``bpf_*_get_info_by_fd``) and the uprobe target checks (``kern_path`` of the probed file,
``uprobe_register``'s offset rules).  :mod:`kernel_model.bpf.syscall` is the syscall that
uses them, :mod:`kernel_model.kernel.events.core` the perf event of the uprobe PMU.
"""

from __future__ import annotations

import errno as E
import hashlib
import struct

from kernel_model.bpf import insn as I
from kernel_model.bpf.bpf_types import BPF_MAP_TYPE_RINGBUF, BpfProg
from kernel_model.errors import EmuError, RegistrationError
from kernel_model.fs.eventpoll import (
    ANON_INODE_DEV,
    ANON_INODE_INO,
    ANON_INODE_MODE,
    EPOLLERR,
    EPOLLIN,
    EPOLLRDNORM,
)
from kernel_model.fs.file import HostFile, OpenFile, stat_bytes
from kernel_model.include.linux.errno import neg
from kernel_model.kernel.wait import WaitQueue

BPF_OBJ_NAME_LEN = 16
BPF_LOG_LEVEL1, BPF_LOG_LEVEL2, BPF_LOG_STATS, BPF_LOG_FIXED = 1, 2, 4, 8
BPF_LOG_MASK = 15
BTF_HDR_SIZE = 24  # sizeof(struct btf_header)
BPF_F_UPROBE_MULTI_RETURN = 1
ENOTSUPP = 524
# enum bpf_link_type, enum bpf_perf_event_type
BPF_LINK_TYPE_PERF_EVENT, BPF_LINK_TYPE_UPROBE_MULTI = 7, 12
BPF_PERF_EVENT_UPROBE, BPF_PERF_EVENT_URETPROBE = 1, 2
# sizeof the info structs in 6.18
MAP_INFO_SIZE, PROG_INFO_SIZE, LINK_INFO_SIZE, BTF_INFO_SIZE = 104, 232, 64, 32


def bpf_obj_name(raw: bytes) -> str | None:
    """``bpf_obj_name_cpy``: a NUL-terminated name of letters, digits, '_' and '.'
    within the 16 bytes; None where the kernel says EINVAL."""
    nul = raw.find(b"\0")
    if nul < 0:
        return None
    name = raw[:nul]
    if not all(chr(c).isalnum() and c < 0x80 or c in b"_." for c in name):
        return None
    return name.decode()


def finish_log(text: str, log_level: int, size: int) -> tuple[bytes, int, bool]:
    """``bpf_vlog_finalize``: what lands in a ``size``-byte user log buffer, the
    ``log_true_size`` (the whole log plus its NUL) and whether it was cut short
    (ENOSPC).  The default rotating log keeps the end, ``BPF_LOG_FIXED`` the start."""
    data = text.encode()
    true_size = len(data) + 1 if data else 0
    if not size or not data:
        return b"", true_size, False
    if len(data) <= size - 1:
        return data + b"\0", true_size, False
    kept = data[: size - 1] if log_level & BPF_LOG_FIXED else data[len(data) - (size - 1) :]
    return kept + b"\0", true_size, True


def log_attr_valid(level: int, ubuf: int, size: int) -> bool:
    """``bpf_verifier_log_attr_valid``: buffer and size together, a level with a
    buffer, known level bits, a size below 2^30."""
    if bool(ubuf) != bool(size):
        return False
    if ubuf and level == 0:
        return False
    if level & ~BPF_LOG_MASK:
        return False
    return size <= 0xFFFFFFFF >> 2


def btf_check_header(data: bytes) -> tuple[int, str]:
    """btf_parse_hdr: the header as ``btf_verifier_log_hdr`` logs it, then its checks
    in the kernel's order and words; (0 or a negative errno, the log so far)."""
    if len(data) < 8:
        return neg(E.EINVAL), "hdr_len not found\n"
    magic, version, flags, hdr_len = struct.unpack_from("<HBBI", data, 0)
    if len(data) < hdr_len:
        return neg(E.EINVAL), "btf_header not found\n"
    if hdr_len > BTF_HDR_SIZE and any(data[BTF_HDR_SIZE:hdr_len]):
        return neg(E.E2BIG), "Unsupported btf_header\n"
    fields = struct.unpack_from("<4I", data[8:hdr_len].ljust(16, b"\0"), 0)
    log = (
        f"magic: 0x{magic:x}\nversion: {version}\nflags: 0x{flags:x}\nhdr_len: {hdr_len}\n"
        f"type_off: {fields[0]}\ntype_len: {fields[1]}\nstr_off: {fields[2]}\nstr_len: {fields[3]}\n"
        f"btf_total_size: {len(data)}\n"
    )
    if magic != 0xEB9F:
        return neg(E.EINVAL), log + "Invalid magic"
    if version != 1:
        return neg(ENOTSUPP), log + "Unsupported version"
    if flags:
        return neg(ENOTSUPP), log + "Unsupported flags"
    if len(data) == hdr_len:
        return neg(E.EINVAL), log + "No data"
    return 0, log


def prog_tag(insns: list) -> bytes:
    """``bpf_prog_calc_tag``: SHA-256 of the instructions with the map fds of ``lddw``
    zeroed, first 8 bytes (SHA-1 before 6.18)."""
    out = []
    skip = False
    for insn in insns:
        if skip:
            out.append(insn._replace(imm=0))
            skip = False
            continue
        if insn.code == I.BPF_LD | I.BPF_DW | I.BPF_IMM and insn.src in (I.BPF_PSEUDO_MAP_FD, I.BPF_PSEUDO_MAP_VALUE):
            out.append(insn._replace(imm=0))
            skip = True
            continue
        out.append(insn)
    return hashlib.sha256(I.encode(out)).digest()[:8]


class AnonInodeFile(OpenFile):
    """A file of the anonymous inode (fs/anon_inodes.c's ``anon_inode_getfile``): what
    bpf() and perf_event_open hand out, named ``anon_inode:NAME`` in /proc/PID/fd."""

    readable = writable = True
    anon_name = "[unknown]"

    def proc_link(self):
        return f"anon_inode:{self.anon_name}"

    def fstat(self):
        return stat_bytes(ANON_INODE_MODE, dev=ANON_INODE_DEV, ino=ANON_INODE_INO, uid=0, gid=0)

    def read(self, count, interrupted):
        return -E.EINVAL

    def write(self, data):
        return -E.EINVAL


class BpfMapFile(AnonInodeFile):
    """A map's descriptor (``bpf_map_fops``).  A ring buffer's has a wait queue its
    commits wake (``rb->waitq``) and polls readable while records are pending."""

    anon_name = "bpf-map"

    def __init__(self, bpf_map):
        super().__init__()
        self.map = bpf_map
        self.wait_queue = ringbuf_wait_queue(bpf_map) if bpf_map.map_type == BPF_MAP_TYPE_RINGBUF else None

    def poll(self):
        """bpf_map_poll: the map type's ``map_poll``, EPOLLERR for a map without."""
        m = self.map
        if m.map_type != BPF_MAP_TYPE_RINGBUF:
            return EPOLLERR
        return EPOLLIN | EPOLLRDNORM if m.producer_pos != m.consumer_pos else 0


def ringbuf_wait_queue(ring) -> WaitQueue:
    """The ring's ``waitq``, made once and run by each wake-up a commit makes."""
    queue = getattr(ring, "wait_queue", None)
    if queue is None:
        queue = ring.wait_queue = WaitQueue()
        ring.on_wakeup = queue.wake_up
    return queue


class BpfProgFile(AnonInodeFile):
    anon_name = "bpf-prog"

    def __init__(self, prog: BpfProg, info: dict):
        super().__init__()
        self.prog = prog
        self.info = info  # what bpf_prog_get_info_by_fd reports beyond the BpfProg


class BtfFile(AnonInodeFile):
    anon_name = "btf"

    def __init__(self, data: bytes, btf_id: int):
        super().__init__()
        self.data, self.id = data, btf_id


class BpfLinkFile(AnonInodeFile):
    """A link's descriptor: closing the last reference detaches it (``bpf_link_release``).
    ``event`` is the perf event of a BPF_PERF_EVENT link."""

    anon_name = "bpf_link"

    def __init__(self, bpf, link, *, event=None, link_id: int = 0, path: str = ""):
        super().__init__()
        self.bpf, self.link, self.event = bpf, link, event
        self.id = link_id or (link.id if link is not None else 0)
        self.path = path  # a uprobe_multi link's file as d_path names it

    def release(self):
        """bpf_perf_link_release (the program leaves the event, the event's file loses
        the reference the link held) or the uprobe_multi link's unregistration."""
        if self.event is not None:
            self.event.detach_prog()
            self.event.put()
        elif self.link is not None:
            self.bpf.detach(self.link)


def btf_info(mem, f: BtfFile, given: bytes) -> bytes | int:
    """btf_get_info_by_fd: the blob copied where the guest asked (ENOSPC when its
    buffer is shorter), its size and id."""
    ubtf, ulen = struct.unpack_from("<QI", given, 0)
    if ubtf and ulen:
        mem.write_user(ubtf, f.data[:ulen])
        if ulen < len(f.data):
            return neg(E.ENOSPC)
    return struct.pack("<QII", ubtf, len(f.data), f.id).ljust(BTF_INFO_SIZE, b"\0")


def map_info(f: BpfMapFile) -> bytes:
    m = f.map
    name = m.name.encode()[: BPF_OBJ_NAME_LEN - 1].ljust(BPF_OBJ_NAME_LEN, b"\0")
    out = bytearray(MAP_INFO_SIZE)
    struct.pack_into("<6I", out, 0, m.map_type, m.id, m.key_size, m.value_size, m.max_entries, m.map_flags)
    out[24:40] = name
    struct.pack_into("<II", out, 68, m.btf_key_type_id, m.btf_value_type_id)
    return bytes(out)


def prog_info(mem, f: BpfProgFile, given: bytes) -> bytes:
    """bpf_prog_get_info_by_fd: what an interpreted (never JITed) program reports;
    the map ids and translated instructions copied where the guest asked."""
    prog, info = f.prog, f.info
    out = bytearray(PROG_INFO_SIZE)
    xlated = info["xlated"]
    map_ids = [m.id for m in prog.maps]
    struct.pack_into("<II", out, 0, prog.prog_type, prog.id)
    out[8:16] = info["tag"]
    struct.pack_into("<II", out, 16, 0, len(xlated))
    ulen = struct.unpack_from("<I", given, 20)[0]
    uptr = struct.unpack_from("<Q", given, 32)[0]
    if ulen and uptr:
        mem.write_user(uptr, xlated[: min(ulen, len(xlated))])
    struct.pack_into("<QII", out, 40, info["load_time"], info["uid"], len(map_ids))
    n_ids = struct.unpack_from("<I", given, 52)[0]
    ids_ptr = struct.unpack_from("<Q", given, 56)[0]
    if n_ids and ids_ptr:
        mem.write_user(ids_ptr, b"".join(struct.pack("<I", i) for i in map_ids[:n_ids]))
    struct.pack_into("<Q", out, 32, uptr)
    struct.pack_into("<Q", out, 56, ids_ptr)
    out[64:80] = prog.name.encode()[: BPF_OBJ_NAME_LEN - 1].ljust(BPF_OBJ_NAME_LEN, b"\0")
    struct.pack_into("<I", out, 84, int(prog.gpl_compatible))
    struct.pack_into("<I", out, 128, info["btf_id"])
    struct.pack_into("<Q", out, 200, getattr(prog, "run_cnt", 0))
    struct.pack_into("<I", out, 216, len(prog.insns))
    return bytes(out)


def link_info(mem, f: BpfLinkFile, given: bytes) -> bytes | int:
    """bpf_link_get_info_by_fd for the two uprobe links: the perf event's file
    name (copied into the guest's buffer, ENOSPC when it does not fit), offset,
    cookie and ref_ctr_offset, or the uprobe_multi link's path, count and flags."""
    out = bytearray(LINK_INFO_SIZE)
    link = f.link
    prog_id = link.prog.id if link is not None else f.event.prog.id if f.event and f.event.prog else 0
    if f.event is not None:
        ev = f.event
        struct.pack_into("<III", out, 0, BPF_LINK_TYPE_PERF_EVENT, f.id, prog_id)
        struct.pack_into("<I", out, 16, BPF_PERF_EVENT_URETPROBE if ev.retprobe else BPF_PERF_EVENT_UPROBE)
        uname, ulen = struct.unpack_from("<QI", given, 24)
        if bool(uname) != bool(ulen):
            return neg(E.EINVAL)
        path = ev.path.encode()
        err = 0
        if uname:
            if ulen >= len(path) + 1:
                mem.write_user(uname, path + b"\0")
            else:
                mem.write_user(uname, path[: ulen - 1] + b"\0")
                err = neg(E.ENOSPC)
        if err:
            return err
        struct.pack_into("<QII", out, 24, uname, len(path) + 1, ev.offset)
        struct.pack_into("<QQ", out, 40, ev.cookie, ev.ref_ctr_offset)
        return bytes(out)
    struct.pack_into("<III", out, 0, BPF_LINK_TYPE_UPROBE_MULTI, f.id, prog_id)
    upath, _, _, _, path_size = struct.unpack_from("<QQQQI", given, 16)
    path = (f.path or link.path).encode()
    if upath and path_size:
        if path_size < len(path) + 1:
            return neg(E.ENOSPC)
        mem.write_user(upath, path + b"\0")
    struct.pack_into("<Q", out, 16, upath)
    flags = BPF_F_UPROBE_MULTI_RETURN if link.retprobe else 0
    struct.pack_into("<IIII", out, 48, len(path) + 1, len(link.offsets), flags, link.pid or 0)
    return bytes(out)


def find_tgid(machine, pid: int) -> int | None:
    """find_vpid + PIDTYPE_TGID: the process ``pid`` names (a thread's tid names its
    process), as its pid; None when there is none."""
    for p in machine.processes:
        if p.pid == pid or any(t.tid == pid for t in p.tasks):
            return p.pid
    return None


def lookup_probe_file(machine, task, path: str, *, not_regular: int):
    """kern_path(LOOKUP_FOLLOW) of a probe's path as ``task`` sees it: the page
    cache's file (the inode uprobes key on), or a negative errno (``not_regular`` for
    a directory or another file that is not regular)."""
    if not path:
        return neg(E.ENOENT)
    f = machine.syscalls.open_guest_path(task, path, 0)
    if isinstance(f, int):
        return f
    f.get()
    try:
        if not isinstance(f, HostFile) or not f.is_regular:
            return neg(not_regular)
        return machine.page_cache.file_of(f.fd, path, f.guest_path or path)
    finally:
        f.put()


def registration_errno(err: RegistrationError) -> int:
    """The negative errno of a uprobe registration the kernel model refused (an
    instruction it cannot probe is ENOTSUPP, 524)."""
    if err.errno_name == "ENOTSUPP":
        return neg(ENOTSUPP)
    return neg(getattr(E, err.errno_name, E.EINVAL))


def check_uprobe_offsets(file, offset: int, ref_ctr_offset: int) -> int:
    """uprobe_register's checks: the offset not past the file's end (a negative
    ``loff_t`` is not), a 2-byte aligned reference counter offset; 0 or -EINVAL."""
    if offset > file.size:
        return neg(E.EINVAL)
    if ref_ctr_offset & 1:
        return neg(E.EINVAL)
    return 0


def attach_errno(err: EmuError) -> int:
    """The negative errno of an attach the BPF state or the uprobes core refused (an
    instruction uprobes cannot probe is ENOTSUPP, 524)."""
    if isinstance(err, RegistrationError):
        return registration_errno(err)
    value = getattr(err, "errno", None)
    if not isinstance(value, int):
        raise err
    return neg(value)
