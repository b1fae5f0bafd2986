"""bpf(2) (kernel_model/bpf/syscall.py) as Linux 6.18 answers it, called the way the guest
calls it: ``union bpf_attr`` in guest memory, the result in rax.  The expected values are
the host kernel's (6.18, as root) for the same attributes; the mmap of a ring buffer's
descriptor (kernel_model/mm/mmap.py) is checked against the ring's own state."""

from __future__ import annotations

import errno as E
import os
import struct

import pytest

from emu import Machine
from kernel_model.bpf import insn as I
from kernel_model.bpf.syscall import finish_log

MAP_CREATE, LOOKUP, UPDATE, DELETE, NEXT_KEY, PROG_LOAD = 0, 1, 2, 3, 4, 5
PROG_NEXT_ID, MAP_NEXT_ID, INFO, BTF_LOAD, FREEZE, LINK_CREATE, BIND_MAP = 11, 12, 15, 18, 22, 28, 35
HASH, ARRAY, RINGBUF = 1, 2, 27
KPROBE, SOCKET_FILTER = 2, 1
ENOTSUPP = 524
PAGE = 4096
ATTR, KEY, VALUE, INSNS, LICENSE, LOG, INFO_BUF, NAME, BTF = (0x1000 * i for i in range(9))


class Guest:
    """A machine's first task (root unless told otherwise) with a scratch area: each
    call writes its attribute bytes at ``ATTR`` and makes the syscall as the guest does."""

    def __init__(self, uid: int = 0):
        self.m = Machine.from_elf("/bin/true", uid=uid, gid=uid)
        self.task = self.m.task
        self.base = self.m.syscalls.sys_mmap(self.task, None, 0, 16 * PAGE, 3, 0x22, 0xFFFFFFFF, 0)

    def at(self, off: int) -> int:
        return self.base + off

    def put(self, off: int, data: bytes) -> int:
        self.m.mem.write(self.base + off, data)
        return self.base + off

    def get(self, off: int, n: int) -> bytes:
        return self.m.mem.read(self.base + off, n)

    def bpf(self, cmd: int, attr: bytes, size: int | None = None) -> int:
        self.put(ATTR, attr)
        return self.m.syscalls.sys_bpf(self.task, None, cmd, self.base + ATTR, len(attr) if size is None else size)

    def file(self, fd: int):
        return self.task.process.files.get(fd)

    # -- attribute builders -----------------------------------------------------------
    def map_create(self, mtype=HASH, key=4, value=8, entries=4, flags=0, name=b"m", btf_fd=0, key_id=0, value_id=0):
        attr = struct.pack("<7I16s5I", mtype, key, value, entries, flags, 0, 0, name, 0, btf_fd, key_id, value_id, 0)
        return self.bpf(MAP_CREATE, attr.ljust(72, b"\0"))

    def elem(self, cmd: int, fd: int, key: bytes | None, value: bytes | None = None, flags: int = 0) -> int:
        kp = self.put(KEY, key) if key is not None else 0
        vp = self.put(VALUE, value) if value is not None else self.at(VALUE)
        if cmd == DELETE:
            return self.bpf(cmd, struct.pack("<IIQ", fd, 0, kp))
        return self.bpf(cmd, struct.pack("<IIQQQ", fd, 0, kp, vp, flags))

    def prog_load(self, insns, *, ptype=KPROBE, level=0, log_size=0, log=False, flags=0, name=b"p", attach=0, size=128):
        code = I.encode(insns)
        self.put(INSNS, code)
        self.put(LICENSE, b"GPL\0")
        attr = bytearray(size)
        logp = self.at(LOG) if log else 0
        struct.pack_into(
            "<IIQQIIQII",
            attr,
            0,
            ptype,
            len(code) // 8,
            self.at(INSNS),
            self.at(LICENSE),
            level,
            log_size,
            logp,
            0,
            flags,
        )
        attr[48:64] = name.ljust(16, b"\0")
        struct.pack_into("<I", attr, 68, attach)
        return self.bpf(PROG_LOAD, bytes(attr))

    def info(self, fd: int, length: int) -> tuple[int, bytes]:
        ret = self.bpf(INFO, struct.pack("<IIQ", fd, length, self.at(INFO_BUF)))
        return ret, self.get(INFO_BUF, length)


RET0 = [I.mov64_imm(0, 0), I.exit_insn()]


@pytest.fixture
def g():
    return Guest()


# -- __sys_bpf ---------------------------------------------------------------------------------
def test_an_unknown_command_is_einval(g):
    assert g.bpf(1000, bytes(8)) == -E.EINVAL


def test_an_attr_larger_than_a_page_is_e2big(g):
    assert g.bpf(MAP_CREATE, bytes(8), size=PAGE + 1) == -E.E2BIG


@pytest.mark.parametrize("tail, want", [(b"\0", "fd"), (b"\1", -E.E2BIG)])
def test_bytes_past_the_kernels_union_must_be_zero(g, tail, want):
    attr = struct.pack("<7I16s5I", HASH, 4, 8, 4, 0, 0, 0, b"", 0, 0, 0, 0, 0).ljust(199, b"\0") + tail
    got = g.bpf(MAP_CREATE, attr)
    assert got >= 3 if want == "fd" else got == want, f"expected {want}, got {got}"


@pytest.mark.parametrize(
    "cmd, last_end, base",
    [
        (FREEZE, 4, -E.EBADF),
        (DELETE, 16, -E.EBADF),
        (NEXT_KEY, 24, -E.EBADF),
        (INFO, 16, -E.EBADFD),
        (LINK_CREATE, 60, -E.EBADF),
    ],
    ids=["map_freeze", "map_delete_elem", "map_get_next_key", "obj_get_info_by_fd", "link_create"],
)
def test_a_byte_past_the_commands_last_field_is_einval(g, cmd, last_end, base):
    """CHECK_ATTR: the attributes name descriptor 999 (not open: the command's own
    answer is ``base``); a non-zero byte just past the command's last field is EINVAL
    before that."""
    attr = bytearray(168)
    struct.pack_into("<I", attr, 0, 999)
    if cmd == LINK_CREATE:
        attr[:12] = struct.pack("<III", g.prog_load(RET0), 999, 41)
    clean = g.bpf(cmd, bytes(attr))
    attr[last_end] = 1
    assert (clean, g.bpf(cmd, bytes(attr))) == (base, -E.EINVAL)


def test_an_attr_pointer_into_nothing_is_efault(g):
    assert g.m.syscalls.sys_bpf(g.task, None, MAP_CREATE, 8, 72) == -E.EFAULT


@pytest.mark.parametrize("cmd", [MAP_CREATE, PROG_LOAD, BTF_LOAD, MAP_NEXT_ID])
def test_creating_objects_needs_root(cmd):
    g = Guest(uid=1000)
    attrs = {
        MAP_CREATE: struct.pack("<7I16s5I", HASH, 4, 8, 4, 0, 0, 0, b"", 0, 0, 0, 0, 0).ljust(72, b"\0"),
        PROG_LOAD: bytes(128),
        BTF_LOAD: bytes(36),
        MAP_NEXT_ID: bytes(8),
    }
    assert g.bpf(cmd, attrs[cmd]) == -E.EPERM


# -- maps ---------------------------------------------------------------------------------------
def test_a_map_is_an_anon_inode_descriptor_closed_on_exec(g):
    fd = g.map_create()
    assert (g.file(fd).proc_link(), fd in g.task.process.files.cloexec) == ("anon_inode:bpf-map", True)


def test_a_map_descriptor_stats_as_the_anonymous_inode(g):
    """anon_inodefs' one inode: mode 0600 with no file type, owned by root."""
    fd = g.map_create()
    mode, uid = struct.unpack_from("<II", g.file(fd).fstat(), 24)
    assert (oct(mode), uid) == ("0o600", 0)


@pytest.mark.parametrize("name", [b"a-b", b"a" * 16])
def test_a_bad_map_name_is_einval(g, name):
    assert g.map_create(name=name) == -E.EINVAL


@pytest.mark.parametrize("btf_fd, want", [(0, -E.EINVAL), (99, -E.EBADF)])
def test_btf_type_ids_need_a_btf_descriptor(g, btf_fd, want):
    """fd 0 is open but not BTF (EINVAL); 99 is not open (EBADF)."""
    assert g.map_create(btf_fd=btf_fd, key_id=1) == want


def test_update_then_lookup_returns_the_value(g):
    fd = g.map_create()
    assert g.elem(UPDATE, fd, b"\1\0\0\0", b"abcdefgh") == 0
    assert (g.elem(LOOKUP, fd, b"\1\0\0\0", bytes(8)), g.get(VALUE, 8)) == (0, b"abcdefgh")


@pytest.mark.parametrize(
    "cmd, key, flags, want",
    [
        (LOOKUP, b"\7\0\0\0", 0, -E.ENOENT),
        (LOOKUP, b"\7\0\0\0", 1, -E.EINVAL),
        (LOOKUP, b"\7\0\0\0", 4, -E.EINVAL),
        (UPDATE, b"\7\0\0\0", 3, -E.EINVAL),
        (DELETE, b"\7\0\0\0", 0, -E.ENOENT),
        (NEXT_KEY, None, 0, -E.ENOENT),
    ],
)
def test_element_errors_on_an_empty_hash(g, cmd, key, flags, want):
    fd = g.map_create()
    assert g.elem(cmd, fd, key, bytes(8), flags) == want


def test_get_next_key_walks_every_key_then_enoent(g):
    fd = g.map_create()
    for k in (1, 2, 3):
        g.elem(UPDATE, fd, struct.pack("<I", k), bytes(8))
    seen, key = [], None
    while g.elem(NEXT_KEY, fd, key) == 0:
        key = g.get(VALUE, 4)
        seen.append(struct.unpack("<I", key)[0])
    assert sorted(seen) == [1, 2, 3]


def test_a_descriptor_that_is_not_a_map_is_einval(g):
    assert g.elem(LOOKUP, 1, b"\0\0\0\0") == -E.EINVAL


def test_a_closed_descriptor_is_ebadf(g):
    assert g.elem(LOOKUP, 77, b"\0\0\0\0") == -E.EBADF


@pytest.mark.parametrize("cmd, want", [(LOOKUP, -ENOTSUPP), (NEXT_KEY, -ENOTSUPP), (UPDATE, -ENOTSUPP)])
def test_a_ring_buffer_has_no_elements(g, cmd, want):
    fd = g.map_create(RINGBUF, 0, 0, PAGE)
    assert g.elem(cmd, fd, None, bytes(8)) == want


def test_a_key_pointer_for_a_map_without_keys_is_einval(g):
    fd = g.map_create(RINGBUF, 0, 0, PAGE)
    assert g.elem(LOOKUP, fd, b"\0") == -E.EINVAL


@pytest.mark.parametrize("cmd", [UPDATE, DELETE, FREEZE])
def test_a_frozen_map_is_not_writable(g, cmd):
    """map_get_sys_perms: no FMODE_CAN_WRITE once frozen - a second freeze is EPERM too."""
    fd = g.map_create()
    assert g.bpf(FREEZE, struct.pack("<I", fd)) == 0
    got = g.bpf(FREEZE, struct.pack("<I", fd)) if cmd == FREEZE else g.elem(cmd, fd, b"\1\0\0\0", bytes(8))
    assert got == -E.EPERM


# -- programs ----------------------------------------------------------------------------------
def test_a_program_is_an_anon_inode_descriptor(g):
    fd = g.prog_load(RET0)
    assert g.file(fd).proc_link() == "anon_inode:bpf-prog"


@pytest.mark.parametrize(
    "kw, want",
    [
        ({"flags": 1 << 12}, -E.EINVAL),
        ({"log_size": 4096, "log": True}, -E.EINVAL),
        ({"level": 16, "log_size": 4096, "log": True}, -E.EINVAL),
        ({"name": b"a b"}, -E.EINVAL),
    ],
)
def test_prog_load_attribute_errors(g, kw, want):
    assert g.prog_load(RET0, **kw) == want


def test_no_instructions_is_e2big(g):
    assert g.prog_load([]) == -E.E2BIG


def test_a_log_level_without_a_buffer_loads(g):
    assert g.prog_load(RET0, level=1) >= 3


def full_log(g) -> tuple[int, bytes]:
    """A rejected program's verifier log with a buffer large enough, and the errno."""
    ret = g.prog_load([I.exit_insn()], level=1, log_size=4096, log=True, size=148)
    return ret, g.m.mem.read_cstring(g.at(LOG), 4096)


def test_a_rejected_program_is_eacces_with_its_log_and_true_size(g):
    ret, log = full_log(g)
    true_size = struct.unpack("<I", g.get(ATTR + 140, 4))[0]
    assert (ret, b"R0 !read_ok" in log, true_size) == (-E.EACCES, True, len(log) + 1)


@pytest.mark.parametrize("level, keep", [(1, "end"), (9, "start")])
def test_a_short_log_keeps_the_rotating_end_or_the_fixed_start(g, level, keep):
    """bpf_vlog_finalize: ENOSPC; the default log keeps its last bytes, BPF_LOG_FIXED its
    first; log_true_size is the whole log's size either way."""
    _, log = full_log(g)
    ret = g.prog_load([I.exit_insn()], level=level, log_size=16, log=True, size=148)
    want = (log[-15:] if keep == "end" else log[:15]) + b"\0"
    assert (ret, g.get(LOG, 16), struct.unpack("<I", g.get(ATTR + 140, 4))[0]) == (-E.ENOSPC, want, len(log) + 1)


@pytest.mark.parametrize(
    "text, level, size, want",
    [
        ("abc\n", 1, 16, (b"abc\n\0", 5, False)),
        ("abcdef", 1, 4, (b"def\0", 7, True)),
        ("abcdef", 9, 4, (b"abc\0", 7, True)),
        ("", 1, 8, (b"", 0, False)),
    ],
)
def test_finish_log(text, level, size, want):
    assert finish_log(text, level, size) == want


def test_prog_info_reports_type_name_tag_and_bound_maps(g):
    """bpf_prog_get_info_by_fd: the tag is SHA-256 of the instructions (6.18), the map a
    BPF_PROG_BIND_MAP added is counted; jited_prog_len 0 (an interpreted program)."""
    prog = g.prog_load(RET0, name=b"kp")
    mfd = g.map_create()
    assert g.bpf(BIND_MAP, struct.pack("<III", prog, mfd, 0)) == 0
    ret, info = g.info(prog, 232)
    ptype, _, tag, jited, xlated = struct.unpack_from("<II8sII", info, 0)
    nr_maps, name, gpl = struct.unpack_from("<I", info, 52)[0], info[64:80], struct.unpack_from("<I", info, 84)[0]
    assert (ret, ptype, tag.hex(), jited, xlated, nr_maps, name.rstrip(b"\0"), gpl) == (
        0,
        KPROBE,
        "59f4a931744dcdc6",
        0,
        16,
        1,
        b"kp",
        1,
    )


@pytest.mark.parametrize("flags, swap, want", [(1, False, -E.EINVAL), (0, True, -E.EINVAL)])
def test_prog_bind_map_errors(g, flags, swap, want):
    prog, mfd = g.prog_load(RET0), g.map_create()
    assert g.bpf(BIND_MAP, struct.pack("<III", mfd if swap else prog, mfd, flags)) == want


# -- object info and ids -------------------------------------------------------------------------
def test_map_info_fields_and_the_length_written_back(g):
    fd = g.map_create(HASH, 4, 8, 64, name=b"sizes")
    ret, info = g.info(fd, 200)
    mtype, mid, key, value, entries, flags = struct.unpack_from("<6I", info, 0)
    written = struct.unpack("<I", g.get(ATTR + 4, 4))[0]
    assert (ret, mtype, mid > 0, key, value, entries, flags, info[24:40].rstrip(b"\0"), written) == (
        0,
        HASH,
        True,
        4,
        8,
        64,
        0,
        b"sizes",
        104,
    )


def test_info_with_a_nonzero_tail_past_the_struct_is_e2big(g):
    fd = g.map_create()
    g.put(INFO_BUF + 150, b"\1")
    assert g.bpf(INFO, struct.pack("<IIQ", fd, 200, g.at(INFO_BUF))) == -E.E2BIG


@pytest.mark.parametrize("fd, want", [(999, -E.EBADFD), (0, -E.EINVAL)])
def test_info_of_a_closed_or_foreign_descriptor(g, fd, want):
    assert g.info(fd, 8)[0] == want


def test_map_ids_in_order_then_enoent(g):
    a, b = g.map_create(), g.map_create()
    ids = [struct.unpack_from("<I", g.info(fd, 8)[1], 4)[0] for fd in (a, b)]
    got, start = [], 0
    while g.bpf(MAP_NEXT_ID, struct.pack("<II", start, 0)) == 0:
        start = struct.unpack("<I", g.get(ATTR + 4, 4))[0]
        got.append(start)
    assert got == ids


@pytest.mark.parametrize("attr", [struct.pack("<II", 0x7FFFFFFF, 0), struct.pack("<III", 0, 0, 1)])
def test_next_id_errors(g, attr):
    assert g.bpf(MAP_NEXT_ID, attr) == -E.EINVAL


# -- BTF ------------------------------------------------------------------------------------------
INT_TYPE = struct.pack("<III", 1, 0x01000000, 4) + struct.pack("<I", 32)
GOOD_BTF = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, 16, 16, 5) + INT_TYPE + b"\0int\0"


def btf_load(g, blob: bytes, *, level=0, flags=0) -> int:
    g.put(BTF, blob)
    logp = g.at(LOG) if level else 0
    attr = struct.pack("<QQIIIII", g.at(BTF), logp, len(blob), 4096 if level else 0, level, 0, flags)
    return g.bpf(BTF_LOAD, attr.ljust(36, b"\0"))


def test_btf_loads_as_an_anon_inode_and_reports_its_size(g):
    fd = btf_load(g, GOOD_BTF)
    ret, info = g.info(fd, 32)
    assert (g.file(fd).proc_link(), ret, struct.unpack_from("<I", info, 8)[0]) == ("anon_inode:btf", 0, 45)


def test_bad_btf_magic_is_einval_with_the_kernels_header_log(g):
    ret = btf_load(g, b"\0\0" + GOOD_BTF[2:], level=1)
    want = (
        b"magic: 0x0\nversion: 1\nflags: 0x0\nhdr_len: 24\ntype_off: 0\ntype_len: 16\nstr_off: 16\n"
        b"str_len: 5\nbtf_total_size: 45\nInvalid magic"
    )
    assert (ret, g.m.mem.read_cstring(g.at(LOG), 4096), struct.unpack("<I", g.get(ATTR + 28, 4))[0]) == (
        -E.EINVAL,
        want,
        126,
    )


@pytest.mark.parametrize(
    "blob, flags",
    [(b"", 0), (GOOD_BTF[:24], 0), (GOOD_BTF, 1)],
    ids=["empty", "header only", "flags"],
)
def test_btf_errors_are_einval(g, blob, flags):
    assert btf_load(g, blob, flags=flags) == -E.EINVAL


# -- links ----------------------------------------------------------------------------------------
def link_attr(prog: int, target: int, attach: int, flags: int = 0) -> bytes:
    return struct.pack("<IIII", prog, target, attach, flags).ljust(64, b"\0")


@pytest.mark.parametrize(
    "case, want",
    [
        ("closed prog", -E.EBADF),
        ("map as prog", -E.EINVAL),
        ("closed target", -E.EBADF),
        ("map as target", -E.EBADF),
        ("flags", -E.EINVAL),
        ("attach type", -E.EINVAL),
        ("multi type on a perf program", -E.EINVAL),
        ("socket filter", -E.EINVAL),
    ],
)
def test_link_create_errors(g, case, want):
    prog, mfd, sf = g.prog_load(RET0), g.map_create(), g.prog_load(RET0, ptype=SOCKET_FILTER)
    attr = {
        "closed prog": link_attr(999, 0, 41),
        "map as prog": link_attr(mfd, 0, 41),
        "closed target": link_attr(prog, 999, 41),
        "map as target": link_attr(prog, mfd, 41),
        "flags": link_attr(prog, mfd, 41, 1),
        "attach type": link_attr(prog, mfd, 7),
        "multi type on a perf program": link_attr(prog, 0, 48),
        "socket filter": link_attr(sf, mfd, 41),
    }[case]
    assert g.bpf(LINK_CREATE, attr) == want


def multi_attr(g, prog, path: bytes | None, offsets, cnt=None, flags=0, pid=0, link_flags=0) -> bytes:
    pp = g.put(NAME, path + b"\0") if path is not None else 0
    op = g.put(KEY, struct.pack(f"<{len(offsets)}q", *offsets)) if offsets else 0
    n = len(offsets) if cnt is None else cnt
    return struct.pack("<IIIIQQQQIIi", prog, 0, 48, link_flags, pp, op, 0, 0, n, flags, pid).ljust(64, b"\0")


@pytest.mark.parametrize(
    "kw, want",
    [
        ({"path": None}, -E.EINVAL),
        ({"cnt": 0}, -E.EINVAL),
        ({"flags": 2}, -E.EINVAL),
        ({"link_flags": 1}, -E.EINVAL),
        ({"pid": -1}, -E.EINVAL),
        ({"cnt": (1 << 20) + 1}, -E.E2BIG),
        ({"path": b"/nonexistent"}, -E.ENOENT),
        ({"path": b"/tmp"}, -E.EBADF),
        ({"pid": 999999}, -E.ESRCH),
        ({"offsets": [-1]}, -E.EINVAL),
        ({"offsets": [1 << 40]}, -E.EINVAL),
    ],
)
def test_uprobe_multi_errors(g, kw, want):
    prog = g.prog_load(RET0, attach=48)
    args = {"path": b"/bin/ls", "offsets": [0x1000, 0x1010], **kw}
    assert g.bpf(LINK_CREATE, multi_attr(g, prog, **args)) == want


def test_uprobe_multi_link_is_a_bpf_link_with_its_info(g):
    """The link's info: its type, the file as d_path names it (the host's /bin may be
    a link to usr/bin), the count, flags and pid."""
    prog = g.prog_load(RET0, attach=48)
    fd = g.bpf(LINK_CREATE, multi_attr(g, prog, b"/bin/ls", [0x1000, 0x1010]))
    real = os.path.realpath("/bin/ls").encode()
    g.put(INFO_BUF, struct.pack("<IIIIQQQQIIII", 0, 0, 0, 0, g.at(NAME), 0, 0, 0, 64, 0, 0, 0))
    ret = g.bpf(INFO, struct.pack("<IIQ", fd, 64, g.at(INFO_BUF)))
    info = g.get(INFO_BUF, 64)
    ltype, path_size, count, flags, pid = struct.unpack_from("<I", info, 0) + struct.unpack_from("<IIII", info, 48)
    assert (g.file(fd).proc_link(), ret, ltype, g.m.mem.read_cstring(g.at(NAME)), path_size, count, flags, pid) == (
        "anon_inode:bpf_link",
        0,
        12,
        real,
        len(real) + 1,
        2,
        0,
        0,
    )


def test_a_multi_link_on_an_instruction_uprobes_cannot_probe_is_enotsupp(g):
    """/bin/true is mapped by the guest: registering installs at once (valid_vma wants
    VM_MAYEXEC only), and the byte at the offset found first is an opcode x86_64 has
    not (uprobes' ENOTSUPP)."""
    with open("/bin/true", "rb") as f:
        data = f.read(0x2000)
    off = next(i for i in range(0x40, 0x2000) if data[i] in (0x06, 0x07, 0x0E, 0x16, 0x17, 0x1E, 0x1F, 0x27))
    prog = g.prog_load(RET0, attach=48)
    assert g.bpf(LINK_CREATE, multi_attr(g, prog, b"/bin/true", [off])) == -ENOTSUPP


def test_closing_a_multi_link_unregisters_its_uprobes(g):
    prog = g.prog_load(RET0, attach=48)
    fd = g.bpf(LINK_CREATE, multi_attr(g, prog, b"/bin/ls", [0x1000]))
    bpf = g.m.kernel.bpf
    before = len(bpf.links_by_id)
    g.task.process.files.close(fd)
    assert (before, len(bpf.links_by_id)) == (1, 0)


# -- a ring buffer's mmap ------------------------------------------------------------------------
def ring(g, entries=PAGE):
    fd = g.map_create(RINGBUF, 0, 0, entries, name=b"rb")
    return fd, g.file(fd).map


def mmap(g, fd, length, prot, flags=0x01, off=0) -> int:
    return g.m.syscalls.sys_mmap(g.task, None, 0, length, prot, flags, fd, off)


@pytest.mark.parametrize(
    "length, prot, flags, off, want",
    [
        (PAGE, 3, 0x02, 0, -E.EINVAL),
        (PAGE, 3, 0x01, PAGE, -E.EPERM),
        (2 * PAGE, 3, 0x01, 0, -E.EPERM),
        (4 * PAGE, 1, 0x01, PAGE, -E.EINVAL),
    ],
    ids=["private", "writable producer page", "writable two pages", "past the ring"],
)
def test_ring_mmap_errors(g, length, prot, flags, off, want):
    """ringbuf_map_mmap_kern: only the consumer page may be writable; the mapping must
    be shared and fit the consumer page, producer page and the data twice."""
    fd, _ = ring(g)
    assert mmap(g, fd, length, prot, flags, off) == want


def test_records_the_kernel_commits_are_in_the_guests_mapping(g):
    fd, rb = ring(g)
    ro = mmap(g, fd, PAGE + 2 * PAGE, 1, off=PAGE)
    assert rb.output(b"hello!!!") == 0
    prod, hdr, data = (
        struct.unpack("<Q", g.m.mem.read(ro, 8))[0],
        g.m.mem.read(ro + PAGE, 8),
        g.m.mem.read(ro + PAGE + 8, 8),
    )
    assert (prod, struct.unpack("<I", hdr[:4])[0], data) == (16, 8, b"hello!!!")


def test_the_consumer_position_the_guest_writes_is_the_kernels(g):
    fd, rb = ring(g)
    rw = mmap(g, fd, PAGE, 3)
    g.m.mem.write_user(rw, struct.pack("<Q", 48))
    assert rb.consumer_pos == 48


def test_a_wrapped_record_reads_whole_through_the_second_data_copy(g):
    """The data pages are mapped twice back to back: a record crossing the end of the
    ring reads contiguously past it."""
    fd, rb = ring(g)
    rw, ro = mmap(g, fd, PAGE, 3), mmap(g, fd, PAGE + 2 * PAGE, 1, off=PAGE)
    assert rb.output(bytes(PAGE - 40)) == 0
    g.m.mem.write_user(rw, struct.pack("<Q", rb.producer_pos))  # consumed
    payload = bytes(range(64))
    assert rb.output(payload) == 0
    start = ro + PAGE + (PAGE - 32) + 8
    assert g.m.mem.read(start, 64) == payload


def test_the_ring_descriptor_polls_readable_while_records_wait(g):
    fd, rb = ring(g)
    f = g.file(fd)
    before = f.poll()
    rb.output(b"12345678")
    assert (before, f.poll()) == (0, 0x41)


def test_a_forked_child_shares_the_ring_pages(g):
    fd, rb = ring(g)
    ro = mmap(g, fd, 3 * PAGE, 1, off=PAGE)
    regs, _ = g.task.process.cpu_regs.syscall_entry()
    child = g.m.syscalls.sys_fork(g.task, regs)
    proc = next(p for p in g.m.processes if p.pid == child)
    rb.output(b"after fork")
    assert proc.mem.read(ro + PAGE + 8, 10) == b"after fork"


def test_the_read_only_ring_mapping_cannot_become_writable(g):
    """bpf_map_mmap clears VM_MAYWRITE of a read-only mapping: mprotect to writable is
    EACCES."""
    fd, _ = ring(g)
    ro = mmap(g, fd, 3 * PAGE, 1, off=PAGE)
    assert g.m.syscalls.sys_mprotect(g.task, None, ro, PAGE, 3) == -E.EACCES


def test_the_ring_mappings_in_proc_maps(g):
    """Both mappings are shared ('s'), at their mmap offsets, named as the kernel names
    a BPF map's."""
    fd, _ = ring(g)
    rw, ro = mmap(g, fd, PAGE, 3), mmap(g, fd, 3 * PAGE, 1, off=PAGE)
    lines = {v.start: v.maps_line().split() for v in g.m.mem.vmas if v.start in (rw, ro)}
    got = [(f[1], f[2], f[-1]) for f in (lines[rw], lines[ro])]
    assert got == [("rw-s", "00000000", "anon_inode:bpf-map"), ("r--s", "00001000", "anon_inode:bpf-map")]


def test_a_ring_larger_than_a_zone_of_ram_cannot_be_mapped(g):
    """The model's limit: a ring's pages move into one zone of guest RAM (64 MiB), so a
    32 MiB ring (its data twice, plus three pages) is ENOMEM to mmap."""
    fd, _ = ring(g, 32 << 20)
    assert mmap(g, fd, PAGE, 3) == -E.ENOMEM
