"""The ``bpf()`` syscall (kernel/bpf/syscall.c): ``union bpf_attr`` read from the guest
as ``__sys_bpf`` reads it, the commands a libbpf tool tracing uprobes uses, and the
descriptors they hand out.

``__sys_bpf`` first checks the size the guest passes (``bpf_check_uarg_tail_zero``:
more than a page is E2BIG, bytes past the kernel's ``union bpf_attr`` must be zero),
copies at most ``sizeof(union bpf_attr)`` bytes (zero-filled past the guest's size) and
dispatches; each command checks that the bytes past its own last field are zero
(``CHECK_ATTR``: EINVAL).  The layouts and last fields are Linux 6.18's
``include/uapi/linux/bpf.h``.  Creating maps, loading programs and BTF needs CAP_BPF
(root here: the kernel's ``kernel.unprivileged_bpf_disabled`` is 2 by default); the
object ids need CAP_SYS_ADMIN.

Maps, programs, links and BTF objects are anonymous-inode files (``anon_inode:bpf-map``
and so on in ``/proc/PID/fd``); the objects themselves live in the machine's BPF state
(``kernel.bpf``, :class:`kernel_model.trace.bpf_trace.BpfTrace`).  A ring buffer map's
descriptor can be polled (readable while ``producer_pos != consumer_pos``,
``ringbuf_map_poll_kern``) and mmap()ed (:mod:`kernel_model.mm.mmap`).
"""

from __future__ import annotations

import errno as E
import struct

from kernel_model.bpf import insn as I
from kernel_model.bpf.bpf_files import (
    BPF_F_UPROBE_MULTI_RETURN,
    BTF_INFO_SIZE,
    ENOTSUPP,
    LINK_INFO_SIZE,
    MAP_INFO_SIZE,
    PROG_INFO_SIZE,
    BpfLinkFile,
    BpfMapFile,
    BpfProgFile,
    BtfFile,
    attach_errno,
    bpf_obj_name,
    btf_check_header,
    btf_info,
    check_uprobe_offsets,
    find_tgid,
    finish_log,
    link_info,
    log_attr_valid,
    lookup_probe_file,
    map_info,
    prog_info,
    prog_tag,
)
from kernel_model.bpf.bpf_types import (
    BPF_MAP_TYPE_RINGBUF,
    BPF_PERF_EVENT,
    BPF_PROG_TYPE_KPROBE,
    BPF_TRACE_UPROBE_MULTI,
    BPF_TRACE_UPROBE_SESSION,
    PERCPU_MAP_TYPES,
    BpfProg,
)
from kernel_model.errors import EmuError
from kernel_model.fs.file import OpenFile
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import fd_arg, int_arg
from kernel_model.mm.mm_types import PAGE_SIZE, GuestFault

# enum bpf_cmd
(
    BPF_MAP_CREATE,
    BPF_MAP_LOOKUP_ELEM,
    BPF_MAP_UPDATE_ELEM,
    BPF_MAP_DELETE_ELEM,
    BPF_MAP_GET_NEXT_KEY,
    BPF_PROG_LOAD,
    BPF_OBJ_PIN,
    BPF_OBJ_GET,
    BPF_PROG_ATTACH,
    BPF_PROG_DETACH,
    BPF_PROG_TEST_RUN,
    BPF_PROG_GET_NEXT_ID,
    BPF_MAP_GET_NEXT_ID,
    BPF_PROG_GET_FD_BY_ID,
    BPF_MAP_GET_FD_BY_ID,
    BPF_OBJ_GET_INFO_BY_FD,
) = range(16)
BPF_BTF_LOAD = 18
BPF_MAP_FREEZE = 22
BPF_LINK_CREATE = 28
BPF_LINK_GET_NEXT_ID = 31
BPF_PROG_BIND_MAP = 35

BPF_ATTR_SIZE = 168  # sizeof(union bpf_attr) in 6.18 (BPF_PROG_LOAD's keyring_id ends it)
# offsetofend(union bpf_attr, <CMD>_LAST_FIELD): CHECK_ATTR wants zeros past it
LAST_FIELD_END = {
    BPF_MAP_CREATE: 92,  # excl_prog_hash_size
    BPF_MAP_LOOKUP_ELEM: 32,  # flags
    BPF_MAP_UPDATE_ELEM: 32,
    BPF_MAP_DELETE_ELEM: 16,  # key
    BPF_MAP_GET_NEXT_KEY: 24,  # next_key
    BPF_MAP_FREEZE: 4,  # map_fd
    BPF_PROG_LOAD: 168,  # keyring_id
    BPF_PROG_GET_NEXT_ID: 8,  # next_id
    BPF_MAP_GET_NEXT_ID: 8,
    BPF_LINK_GET_NEXT_ID: 8,
    BPF_OBJ_GET_INFO_BY_FD: 16,  # info.info
    BPF_BTF_LOAD: 36,  # btf_token_fd
    BPF_LINK_CREATE: 60,  # link_create.uprobe_multi.pid
    BPF_PROG_BIND_MAP: 12,  # prog_bind_map.flags
}
# prog_flags BPF_PROG_LOAD accepts
BPF_F_STRICT_ALIGNMENT, BPF_F_ANY_ALIGNMENT, BPF_F_TEST_RND_HI32 = 1 << 0, 1 << 1, 1 << 2
BPF_F_TEST_STATE_FREQ, BPF_F_SLEEPABLE, BPF_F_XDP_HAS_FRAGS = 1 << 3, 1 << 4, 1 << 5
BPF_F_XDP_DEV_BOUND_ONLY, BPF_F_TEST_REG_INVARIANTS, BPF_F_TOKEN_FD = 1 << 6, 1 << 7, 1 << 16
PROG_FLAGS_MASK = (
    BPF_F_STRICT_ALIGNMENT
    | BPF_F_ANY_ALIGNMENT
    | BPF_F_TEST_STATE_FREQ
    | BPF_F_SLEEPABLE
    | BPF_F_TEST_RND_HI32
    | BPF_F_XDP_HAS_FRAGS
    | BPF_F_XDP_DEV_BOUND_ONLY
    | BPF_F_TEST_REG_INVARIANTS
    | BPF_F_TOKEN_FD
)
BPF_PROG_TYPE_SOCKET_FILTER, BPF_PROG_TYPE_TRACEPOINT, BPF_PROG_TYPE_PERF_EVENT = 1, 5, 7
BPF_TRACE_KPROBE_MULTI, BPF_TRACE_KPROBE_SESSION = 42, 55
BPF_F_LOCK = 4
BPF_F_RDONLY, BPF_F_WRONLY = 1 << 3, 1 << 4  # map_flags: no syscall writes / reads
BTF_MAX_SIZE = 16 * 1024 * 1024
MAX_UPROBE_MULTI_CNT = 1 << 20
PATH_MAX = 4096
INT_MAX = 0x7FFFFFFF
LICENSE_LEN = 128
SHA256_DIGEST_SIZE = 32


class BpfCommands:
    """bpf(2), made at a guest's first call (:mod:`.sys_bpf` is the entry)."""

    def __init__(self, sc):
        self.m = sc.m
        self.clock = sc.clock
        self._btf_ids = [0]  # the last BTF object id handed out

    @property
    def bpf(self):
        return self.m.kernel.bpf

    def sys_bpf(self, task, regs, cmd, uattr, size, *_):
        """__sys_bpf: the size check, the copy, the dispatch; an unknown command is
        EINVAL."""
        cmd, size = int_arg(cmd), size & 0xFFFFFFFF
        mem = task.process.mem
        if size > PAGE_SIZE:
            return neg(E.E2BIG)
        try:
            if size > BPF_ATTR_SIZE and any(mem.read_user(uattr + BPF_ATTR_SIZE, size - BPF_ATTR_SIZE)):
                return neg(E.E2BIG)
            n = min(size, BPF_ATTR_SIZE)
            attr = mem.read_user(uattr, n) + bytes(BPF_ATTR_SIZE - n) if n else bytes(BPF_ATTR_SIZE)
        except GuestFault:
            return neg(E.EFAULT)
        handler = self._COMMANDS.get(cmd)
        if handler is None:
            return neg(E.EINVAL)
        if any(attr[LAST_FIELD_END[cmd] :]):
            return neg(E.EINVAL)  # CHECK_ATTR
        try:
            return handler(self, task, attr, uattr, n)
        except GuestFault:
            return neg(E.EFAULT)

    # -- common steps -------------------------------------------------------------------
    @staticmethod
    def _capable(task) -> bool:
        """bpf_capable / capable(CAP_SYS_ADMIN): root."""
        return task.cred.euid == 0

    @staticmethod
    def _install(task, file: OpenFile) -> int:
        """An object's new descriptor, close-on-exec as every bpf() fd is (O_CLOEXEC)."""
        return task.process.files.install(file, 0, cloexec=True)

    @staticmethod
    def _file(task, fd: int, kind):
        """fdget + the f_op check: (file, 0), or (None, -EBADF / -EINVAL)."""
        f = task.process.files.get(fd_arg(fd))
        if f is None:
            return None, neg(E.EBADF)
        if not isinstance(f, kind):
            return None, neg(E.EINVAL)
        return f, 0

    # -- maps ---------------------------------------------------------------------------
    def _map_create(self, task, attr: bytes, uattr: int, size: int) -> int:
        """map_create: the name, the BTF descriptor when type ids are given, the
        capability, then the map type's own checks (``MapError``)."""
        map_type, key_size, value_size, max_entries, map_flags, inner_fd, numa = struct.unpack_from("<7I", attr, 0)
        name = bpf_obj_name(attr[28:44])
        btf_fd, btf_key, btf_value, btf_vmlinux = struct.unpack_from("<4I", attr, 48)
        excl_hash, excl_size = struct.unpack_from("<QI", attr, 80)
        if not self._capable(task):
            return neg(E.EPERM)
        if name is None:
            return neg(E.EINVAL)
        if bool(excl_hash) != bool(excl_size) or excl_size not in (0, SHA256_DIGEST_SIZE):
            return neg(E.EINVAL)  # an exclusive map's program hash (its exclusivity is not modeled)
        if btf_key or btf_value or btf_vmlinux:
            _, err = self._file(task, btf_fd, BtfFile)
            if err:
                return err
        from kernel_model.bpf.maps import MapError  # imported on use: maps imports the whole map layer

        try:
            bpf_map = self.bpf.map_create(
                map_type, key_size, value_size, max_entries, map_flags, name, btf_key, btf_value
            )
        except MapError as err:
            return neg(err.errno)
        return self._install(task, BpfMapFile(bpf_map))

    def _elem_map(self, task, attr: bytes):
        fd, _, key, value, flags = struct.unpack_from("<IIQQQ", attr, 0)
        f, err = self._file(task, fd, BpfMapFile)
        return (f.map if f is not None else None), err, key, value, flags

    def _read_key(self, task, bpf_map, ukey: int) -> bytes | int:
        """__bpf_copy_key: the key bytes; a pointer for a map without keys is EINVAL."""
        if bpf_map.key_size:
            return task.process.mem.read_user(ukey, bpf_map.key_size)
        return neg(E.EINVAL) if ukey else b""

    def _value_size(self, bpf_map) -> int:
        """bpf_map_value_size: per-CPU maps copy every CPU's value, each 8-byte rounded."""
        fn = getattr(bpf_map, "syscall_value_size", None)
        if fn is not None:
            return fn()
        if bpf_map.map_type in PERCPU_MAP_TYPES:
            return (bpf_map.value_size + 7) // 8 * 8 * self.bpf.nr_cpus
        return bpf_map.value_size

    def _map_lookup_elem(self, task, attr, uattr, size) -> int:
        bpf_map, err, ukey, uvalue, flags = self._elem_map(task, attr)
        if flags & ~BPF_F_LOCK:
            return neg(E.EINVAL)
        if err:
            return err
        if bpf_map.map_flags & BPF_F_WRONLY:
            return neg(E.EPERM)
        if flags & BPF_F_LOCK:
            return neg(E.EINVAL)  # no bpf_spin_lock in any value here
        key = self._read_key(task, bpf_map, ukey)
        if isinstance(key, int):
            return key
        if bpf_map.map_type == BPF_MAP_TYPE_RINGBUF:
            return neg(ENOTSUPP)
        value = bpf_map.lookup_value(key)
        if value is None:
            return neg(E.ENOENT)
        task.process.mem.write_user(uvalue, value)
        return 0

    def _map_update_elem(self, task, attr, uattr, size) -> int:
        bpf_map, err, ukey, uvalue, flags = self._elem_map(task, attr)
        if err:
            return err
        if bpf_map.frozen or bpf_map.map_flags & BPF_F_RDONLY:
            return neg(E.EPERM)  # map_get_sys_perms: no FMODE_CAN_WRITE
        key = self._read_key(task, bpf_map, ukey)
        if isinstance(key, int):
            return key
        value = task.process.mem.read_user(uvalue, self._value_size(bpf_map))
        update = getattr(bpf_map, "update_value", None)
        if update is not None:
            return update(key, value, flags)
        return bpf_map.update_elem(key, value, flags)

    def _map_delete_elem(self, task, attr, uattr, size) -> int:
        bpf_map, err, ukey, _, _ = self._elem_map(task, attr)
        if err:
            return err
        if bpf_map.frozen or bpf_map.map_flags & BPF_F_RDONLY:
            return neg(E.EPERM)
        key = self._read_key(task, bpf_map, ukey)
        if isinstance(key, int):
            return key
        delete = getattr(bpf_map, "delete_value", None)
        return delete(key) if delete is not None else bpf_map.delete_elem(key)

    def _map_get_next_key(self, task, attr, uattr, size) -> int:
        bpf_map, err, ukey, unext, _ = self._elem_map(task, attr)
        if err:
            return err
        if bpf_map.map_flags & BPF_F_WRONLY:
            return neg(E.EPERM)
        key = None
        if ukey:
            key = self._read_key(task, bpf_map, ukey)
            if isinstance(key, int):
                return key
        if bpf_map.map_type == BPF_MAP_TYPE_RINGBUF:
            return neg(ENOTSUPP)
        nxt = bpf_map.get_next_key(key)
        if nxt is None:
            return neg(E.ENOENT)
        task.process.mem.write_user(unext, nxt)
        return 0

    def _map_freeze(self, task, attr, uattr, size) -> int:
        """map_freeze: EPERM without write access (a second freeze too: a frozen map
        is not writable).  Its EBUSY while a writable mmap of the map exists is not
        modeled (munmap does not tell the map)."""
        (fd,) = struct.unpack_from("<I", attr, 0)
        f, err = self._file(task, fd, BpfMapFile)
        if err:
            return err
        bpf_map = f.map
        if bpf_map.frozen or bpf_map.map_flags & BPF_F_RDONLY:
            return neg(E.EPERM)  # map_get_sys_perms: a frozen map has no FMODE_CAN_WRITE
        bpf_map.frozen = True
        return 0

    # -- programs -----------------------------------------------------------------------
    def _prog_load(self, task, attr: bytes, uattr: int, size: int) -> int:
        """bpf_prog_load: flags, capability, instruction count, the copies from the
        guest (instructions, license, name), then the verifier; its log goes back to
        the guest's buffer as ``bpf_vlog_finalize`` leaves it."""
        prog_type, insn_cnt, uinsns, ulicense = struct.unpack_from("<IIQQ", attr, 0)
        log_level, log_size, log_buf, _kern_version, prog_flags = struct.unpack_from("<IIQII", attr, 24)
        expected_attach_type, prog_btf_fd = struct.unpack_from("<II", attr, 68)
        fd_array = struct.unpack_from("<Q", attr, 120)[0]
        if prog_flags & ~PROG_FLAGS_MASK:
            return neg(E.EINVAL)
        if prog_flags & BPF_F_TOKEN_FD:
            return neg(E.EINVAL)  # no BPF tokens (no bpffs delegation) in the model
        bpf_cap = self._capable(task)
        if not bpf_cap:
            return neg(E.EPERM)  # unprivileged_bpf_disabled
        if insn_cnt == 0 or insn_cnt > I.BPF_COMPLEXITY_LIMIT_INSNS:
            return neg(E.E2BIG)
        mem = task.process.mem
        raw = mem.read_user(uinsns, insn_cnt * 8)
        lic_bytes = mem.read_cstring(ulicense, LICENSE_LEN - 1)  # strncpy_from_user
        name = bpf_obj_name(attr[48:64])
        if name is None:
            return neg(E.EINVAL)
        if not log_attr_valid(log_level, log_buf, log_size):
            return neg(E.EINVAL)
        files = task.process.files

        def map_by_fd(fd: int):
            f = files.get(fd_arg(fd))
            return f.map if isinstance(f, BpfMapFile) else None

        maps_by_idx: list = []
        if fd_array:
            maps_by_idx = self._fd_array(task, raw, fd_array)
        prog = BpfProg(
            name,
            I.decode(raw),
            prog_type,
            expected_attach_type,
            lic_bytes.decode("latin-1"),
            sleepable=bool(prog_flags & BPF_F_SLEEPABLE),
        )
        # the verifier is large: imported at a guest's first program load
        from kernel_model.bpf.verifier import BpfVerifierError

        error = 0
        try:
            log = self.bpf.prog_load(prog, map_by_fd=map_by_fd, maps_by_idx=maps_by_idx, log_level=log_level)
        except BpfVerifierError as err:
            error, log = neg(err.errno), str(getattr(err, "log", "") or "")
        if log_level:
            data, true_size, cut = finish_log(log, log_level, log_size)
            if data and log_buf:
                mem.write_user(log_buf, data)
            if size >= 144:
                mem.write_user(uattr + 140, struct.pack("<I", true_size))
            if cut:
                error = neg(E.ENOSPC)
        if error:
            self.bpf.progs_by_id.pop(prog.id, None)
            return error
        info = {
            "load_time": self.m.syscalls.boot_clock_ns(),
            "uid": task.cred.uid,
            "btf_id": self._btf_id_of(task, prog_btf_fd),
            "tag": prog_tag(I.decode(raw)),
            "xlated": raw,
        }
        return self._install(task, BpfProgFile(prog, info))

    def _fd_array(self, task, raw: bytes, fd_array: int) -> list:
        """The maps ``lddw`` of BPF_PSEUDO_MAP_IDX(_VALUE) names by index into the
        guest's ``fd_array``."""
        top = -1
        for insn in I.decode(raw):
            if insn.code == I.BPF_LD | I.BPF_DW | I.BPF_IMM and insn.src in (
                I.BPF_PSEUDO_MAP_IDX,
                I.BPF_PSEUDO_MAP_IDX_VALUE,
            ):
                top = max(top, insn.imm)
        out = []
        for i in range(top + 1):
            (fd,) = struct.unpack("<i", task.process.mem.read_user(fd_array + 4 * i, 4))
            f = task.process.files.get(fd_arg(fd))
            out.append(f.map if isinstance(f, BpfMapFile) else None)
        return out

    @staticmethod
    def _btf_id_of(task, fd: int) -> int:
        f = task.process.files.get(fd_arg(fd)) if fd else None
        return f.id if isinstance(f, BtfFile) else 0

    def _prog_bind_map(self, task, attr, uattr, size) -> int:
        """bpf_prog_bind_map: the map joins the program's used maps (once)."""
        prog_fd, map_fd, flags = struct.unpack_from("<III", attr, 0)
        if flags:
            return neg(E.EINVAL)
        pf, err = self._file(task, prog_fd, BpfProgFile)
        if err:
            return err
        mf, err = self._file(task, map_fd, BpfMapFile)
        if err:
            return err
        if not any(m is mf.map for m in pf.prog.maps):
            pf.prog.maps.append(mf.map)
        return 0

    # -- BTF ------------------------------------------------------------------------------
    def _btf_load(self, task, attr, uattr, size) -> int:
        """bpf_btf_load -> btf_parse: the blob is kept as it came once its header and
        sections parse; the log gets the reason of a rejection."""
        ubtf, ulog, btf_size, log_size, log_level, _true, btf_flags = struct.unpack_from("<QQIIIII", attr, 0)
        if btf_flags:
            return neg(E.EINVAL)
        if not self._capable(task):
            return neg(E.EPERM)
        if btf_size > BTF_MAX_SIZE:
            return neg(E.E2BIG)
        if not log_attr_valid(log_level, ulog, log_size):
            return neg(E.EINVAL)
        data = task.process.mem.read_user(ubtf, btf_size) if btf_size else b""
        error, log = btf_check_header(data)
        if not error:
            # the BTF parser is imported here: a machine whose guest loads no BTF never does
            from kernel_model.bpf.btf import BtfError, parse

            try:
                parse(data)
            except BtfError as err:
                error, log = neg(E.EINVAL), f"{log}{err}\n"
        if log_level:
            out, true_size, cut = finish_log(log, log_level, log_size)
            if out and ulog:
                task.process.mem.write_user(ulog, out)
            if size >= 32:
                task.process.mem.write_user(uattr + 28, struct.pack("<I", true_size))
            if cut and not error:
                error = neg(E.ENOSPC)
        if error:
            return error
        self._btf_ids[0] += 1
        return self._install(task, BtfFile(data, self._btf_ids[0]))

    # -- object ids -----------------------------------------------------------------------
    def _get_next_id(self, task, attr, uattr, size, objects) -> int:
        """bpf_obj_get_next_id: the smallest id above ``start_id`` (CAP_SYS_ADMIN)."""
        start, _ = struct.unpack_from("<II", attr, 0)
        if start >= INT_MAX:
            return neg(E.EINVAL)
        if not self._capable(task):
            return neg(E.EPERM)
        ids = sorted(i for i in objects if i > start)
        if not ids:
            return neg(E.ENOENT)
        task.process.mem.write_user(uattr + 4, struct.pack("<I", ids[0]))
        return 0

    def _prog_next_id(self, task, attr, uattr, size):
        return self._get_next_id(task, attr, uattr, size, self.bpf.progs_by_id)

    def _map_next_id(self, task, attr, uattr, size):
        return self._get_next_id(task, attr, uattr, size, self.bpf.maps_by_id)

    def _link_next_id(self, task, attr, uattr, size):
        return self._get_next_id(task, attr, uattr, size, self.bpf.links_by_id)

    # -- info ---------------------------------------------------------------------------------
    def _obj_get_info_by_fd(self, task, attr, uattr, size) -> int:
        """bpf_obj_get_info_by_fd: a map's, program's, link's or BTF object's info,
        at most ``info_len`` bytes of it (bytes the guest passes past the kernel's
        struct must be zero: E2BIG); ``info_len`` is written back."""
        fd, info_len, uinfo = struct.unpack_from("<IIQ", attr, 0)
        f = task.process.files.get(fd_arg(fd))
        if f is None:
            return neg(E.EBADFD)
        if isinstance(f, BpfMapFile):
            full = MAP_INFO_SIZE
        elif isinstance(f, BpfProgFile):
            full = PROG_INFO_SIZE
        elif isinstance(f, BpfLinkFile):
            full = LINK_INFO_SIZE
        elif isinstance(f, BtfFile):
            full = BTF_INFO_SIZE
        else:
            return neg(E.EINVAL)
        mem = task.process.mem
        if info_len > PAGE_SIZE:
            return neg(E.E2BIG)
        if info_len > full and any(mem.read_user(uinfo + full, info_len - full)):
            return neg(E.E2BIG)
        n = min(info_len, full)
        given = mem.read_user(uinfo, n) + bytes(full - n) if n else bytes(full)
        out: bytes | int
        if isinstance(f, BpfMapFile):
            out = map_info(f)
        elif isinstance(f, BpfProgFile):
            out = prog_info(mem, f, given)
        elif isinstance(f, BpfLinkFile):
            out = link_info(mem, f, given)
        else:
            out = btf_info(mem, f, given)
        if isinstance(out, int):
            return out
        mem.write_user(uinfo, out[:n])
        mem.write_user(uattr + 4, struct.pack("<I", n))
        return 0

    # -- links --------------------------------------------------------------------------------
    def _link_create(self, task, attr, uattr, size) -> int:
        """link_create: the program, the attach type it may take, then the kind of
        link: a perf event's (``bpf_perf_link_attach``) or a uprobe_multi link."""
        prog_fd, target_fd, attach_type, flags = struct.unpack_from("<IIII", attr, 0)
        pf, err = self._file(task, prog_fd, BpfProgFile)
        if err:
            return err
        prog = pf.prog
        err = self._check_attach_type(prog, attach_type)
        if err:
            return err
        if prog.prog_type == BPF_PROG_TYPE_KPROBE:
            if attach_type == BPF_PERF_EVENT:
                return self._perf_link_attach(task, prog, target_fd, flags, attr)
            if attach_type in (BPF_TRACE_UPROBE_MULTI, BPF_TRACE_UPROBE_SESSION):
                return self._uprobe_multi_attach(task, prog, flags, attr)
            return neg(E.EOPNOTSUPP)  # kprobe_multi: no fprobe in the model
        if prog.prog_type in (BPF_PROG_TYPE_PERF_EVENT, BPF_PROG_TYPE_TRACEPOINT):
            return self._perf_link_attach(task, prog, target_fd, flags, attr)
        return neg(E.EINVAL)

    @staticmethod
    def _check_attach_type(prog: BpfProg, attach_type: int) -> int:
        """bpf_prog_attach_check_attach_type for the program types here."""
        if prog.prog_type == BPF_PROG_TYPE_KPROBE:
            multi = (BPF_TRACE_UPROBE_MULTI, BPF_TRACE_UPROBE_SESSION, BPF_TRACE_KPROBE_MULTI, BPF_TRACE_KPROBE_SESSION)
            if prog.expected_attach_type in multi and attach_type != prog.expected_attach_type:
                return neg(E.EINVAL)
            if attach_type != BPF_PERF_EVENT and attach_type not in multi:
                return neg(E.EINVAL)
            return 0
        if prog.prog_type in (BPF_PROG_TYPE_PERF_EVENT, BPF_PROG_TYPE_TRACEPOINT):
            return 0 if attach_type == BPF_PERF_EVENT else neg(E.EINVAL)
        return neg(E.EINVAL)

    def _perf_link_attach(self, task, prog: BpfProg, target_fd: int, flags: int, attr: bytes) -> int:
        """bpf_perf_link_attach: no flags, a perf event descriptor (EBADF otherwise),
        then perf_event_set_bpf_prog with the cookie."""
        if flags:
            return neg(E.EINVAL)
        ev = task.process.files.get(fd_arg(target_fd))
        if not getattr(ev, "is_perf_event", False):
            return neg(E.EBADF)  # perf_event_get: not perf_fops
        (cookie,) = struct.unpack_from("<Q", attr, 16)
        err = ev.set_bpf_prog(prog, cookie)
        if err:
            return err
        return self._install(task, BpfLinkFile(self.bpf, None, event=ev.get(), link_id=ev.link_id))

    def _uprobe_multi_attach(self, task, prog: BpfProg, flags: int, attr: bytes) -> int:
        """bpf_uprobe_multi_link_attach: its checks in the kernel's order, the path
        looked up (a regular file, else EBADF), the target process, the arrays read,
        then one uprobe per offset (all or none)."""
        if flags:
            return neg(E.EINVAL)
        if prog.expected_attach_type not in (BPF_TRACE_UPROBE_MULTI, BPF_TRACE_UPROBE_SESSION):
            return neg(E.EINVAL)
        upath, uoffsets, uref, ucookies, cnt, mflags, pid = struct.unpack_from("<QQQQIIi", attr, 16)
        if mflags & ~BPF_F_UPROBE_MULTI_RETURN:
            return neg(E.EINVAL)
        if not upath or not uoffsets or not cnt or pid < 0:
            return neg(E.EINVAL)
        if cnt > MAX_UPROBE_MULTI_CNT:
            return neg(E.E2BIG)
        mem = task.process.mem
        path = mem.read_cstring(upath, PATH_MAX)
        if len(path) >= PATH_MAX:
            return neg(E.ENAMETOOLONG)
        file = lookup_probe_file(self.m, task, path.decode("latin-1"), not_regular=E.EBADF)
        if isinstance(file, int):
            return file
        target = None
        if pid:
            target = find_tgid(self.m, pid)
            if target is None:
                return neg(E.ESRCH)
        offsets = struct.unpack(f"<{cnt}q", mem.read_user(uoffsets, 8 * cnt))
        if any(o < 0 for o in offsets):
            return neg(E.EINVAL)
        refs = list(struct.unpack(f"<{cnt}Q", mem.read_user(uref, 8 * cnt))) if uref else None
        cookies = list(struct.unpack(f"<{cnt}Q", mem.read_user(ucookies, 8 * cnt))) if ucookies else None
        for off, ref in zip(offsets, refs or [0] * cnt):
            err = check_uprobe_offsets(file, off, ref)
            if err:
                return err
        try:
            link = self.bpf.attach_uprobe_multi(
                prog,
                file,
                list(offsets),
                ref_ctr_offsets=refs,
                cookies=cookies,
                retprobe=bool(mflags & BPF_F_UPROBE_MULTI_RETURN),
                session=prog.expected_attach_type == BPF_TRACE_UPROBE_SESSION,
                pid=target,
            )
        except EmuError as err:
            return attach_errno(err)
        return self._install(task, BpfLinkFile(self.bpf, link, path=file.d_path or file.path))

    _COMMANDS = {
        BPF_MAP_CREATE: _map_create,
        BPF_MAP_LOOKUP_ELEM: _map_lookup_elem,
        BPF_MAP_UPDATE_ELEM: _map_update_elem,
        BPF_MAP_DELETE_ELEM: _map_delete_elem,
        BPF_MAP_GET_NEXT_KEY: _map_get_next_key,
        BPF_MAP_FREEZE: _map_freeze,
        BPF_PROG_LOAD: _prog_load,
        BPF_PROG_BIND_MAP: _prog_bind_map,
        BPF_BTF_LOAD: _btf_load,
        BPF_PROG_GET_NEXT_ID: _prog_next_id,
        BPF_MAP_GET_NEXT_ID: _map_next_id,
        BPF_LINK_GET_NEXT_ID: _link_next_id,
        BPF_OBJ_GET_INFO_BY_FD: _obj_get_info_by_fd,
        BPF_LINK_CREATE: _link_create,
    }
