"""perf_event_open of the uprobe PMU (kernel_model/kernel/events/core.py) as Linux 6.18
answers it, and a BPF program on the event (PERF_EVENT_IOC_SET_BPF, BPF_LINK_CREATE of
type BPF_PERF_EVENT).  Expected values are the host kernel's (6.18, root) for the same
calls; the sysfs files are what the host shows."""

from __future__ import annotations

import errno as E
import struct

import pytest

from emu import Machine
from kernel_model.bpf import insn as I

PAGE = 4096
ATTR, PATH, INSNS, LICENSE, BPF_ATTR, INFO, NAME = (0x1000 * i for i in range(7))
UPROBE = 8
ENABLE, DISABLE, SET_BPF = 0x2400, 0x2401, 0x40042408
CLOEXEC = 8
PROBED = b"/bin/ls"  # a file the test guest (/bin/true) does not map: registering installs nothing


class Guest:
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

    def open(
        self, *, ptype=UPROBE, size=136, config=0, path=PROBED, off=0x4000, bits=0, pid=0, cpu=-1, group=-1, flags=0
    ):
        attr = bytearray(max(size, 136))
        struct.pack_into("<IIQ", attr, 0, ptype, size, config)
        struct.pack_into("<Q", attr, 40, bits)
        upath = self.put(PATH, path + b"\0") if path is not None else 0
        struct.pack_into("<QQ", attr, 56, upath, off)
        self.put(ATTR, bytes(attr))
        return self.m.syscalls.sys_perf_event_open(
            self.task, None, self.at(ATTR), pid & 0xFFFFFFFF, cpu & 0xFFFFFFFF, group & 0xFFFFFFFF, flags
        )

    def ioctl(self, fd: int, cmd: int, arg: int = 0) -> int:
        return self.m.syscalls.sys_ioctl(self.task, None, fd, cmd, arg)

    def bpf(self, cmd: int, attr: bytes) -> int:
        self.put(BPF_ATTR, attr)
        return self.m.syscalls.sys_bpf(self.task, None, cmd, self.at(BPF_ATTR), len(attr))

    def prog(self, ptype: int = 2, attach: int = 0) -> int:
        code = I.encode([I.mov64_imm(0, 0), I.exit_insn()])
        self.put(INSNS, code)
        self.put(LICENSE, b"GPL\0")
        attr = bytearray(128)
        struct.pack_into("<IIQQ", attr, 0, ptype, 2, self.at(INSNS), self.at(LICENSE))
        struct.pack_into("<I", attr, 68, attach)
        return self.bpf(5, bytes(attr))

    def map(self) -> int:
        return self.bpf(0, struct.pack("<7I16s5I", 1, 4, 8, 4, 0, 0, 0, b"", 0, 0, 0, 0, 0).ljust(72, b"\0"))


@pytest.fixture
def g():
    return Guest()


@pytest.mark.parametrize(
    "name, text",
    [("type", "8\n"), ("format/retprobe", "config:0\n"), ("format/ref_ctr_offset", "config:32-63\n")],
)
def test_the_uprobe_pmu_in_sysfs(g, name, text):
    f = g.m.syscalls.open_guest_path(g.task, f"/sys/bus/event_source/devices/uprobe/{name}", 0)
    assert f.read(100, None) == text.encode()


def test_an_event_is_an_anon_inode_descriptor(g):
    fd = g.open()
    f = g.task.process.files.get(fd)
    assert (f.proc_link(), fd in g.task.process.files.cloexec) == ("anon_inode:[perf_event]", False)


def test_perf_flag_fd_cloexec(g):
    fd = g.open(flags=CLOEXEC)
    assert fd in g.task.process.files.cloexec


@pytest.mark.parametrize(
    "kw, want",
    [
        ({"flags": 16}, -E.EINVAL),
        ({"path": None}, -E.EINVAL),
        ({"path": b""}, -E.EINVAL),
        ({"path": b"/nonexistent"}, -E.ENOENT),
        ({"path": b"/tmp"}, -E.EINVAL),
        ({"off": 1 << 30}, -E.EINVAL),
        ({"config": 1 << 32}, -E.EINVAL),
        ({"pid": -1, "cpu": -1}, -E.EINVAL),
        ({"pid": 999999}, -E.ESRCH),
        ({"cpu": 9999}, -E.EINVAL),
        ({"ptype": 0x1234}, -E.ENOENT),
        ({"bits": 1 << 40}, -E.EINVAL),
        ({"bits": 1 << 37}, -E.EINVAL),
        ({"bits": 1 << 35}, -E.EINVAL),
        ({"group": 999}, -E.EBADF),
        ({"pid": -1, "cpu": 0, "flags": 4}, -E.EINVAL),
    ],
    ids=[
        "unknown flag",
        "no path",
        "empty path",
        "missing file",
        "directory",
        "offset past the end",
        "odd ref_ctr_offset",
        "no task no cpu",
        "no such pid",
        "no such cpu",
        "unknown type",
        "reserved bit",
        "sigtrap without remove_on_exec",
        "inherit_thread without inherit",
        "closed group fd",
        "cgroup mode without pid",
    ],
)
def test_open_errors(g, kw, want):
    assert g.open(**kw) == want


@pytest.mark.parametrize("size, want", [(0, "fd"), (200, "fd"), (32, -E.E2BIG)])
def test_attr_sizes(g, size, want):
    """0 is PERF_ATTR_SIZE_VER0; a size past the kernel's struct with a zero tail is
    fine; below VER0 is E2BIG with the kernel's size (136) written back."""
    got = g.open(size=size)
    if want == "fd":
        assert got >= 3, f"expected a descriptor, got {got}"
    else:
        assert (got, struct.unpack("<I", g.get(ATTR + 4, 4))[0]) == (want, 136)


def test_a_nonzero_tail_past_the_kernels_struct_is_e2big(g):
    attr = bytearray(200)
    struct.pack_into("<II", attr, 0, UPROBE, 200)
    struct.pack_into("<QQ", attr, 56, g.put(PATH, PROBED + b"\0"), 0x4000)
    attr[190] = 1
    g.put(ATTR, bytes(attr))
    got = g.m.syscalls.sys_perf_event_open(g.task, None, g.at(ATTR), 0, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    assert (got, struct.unpack("<I", g.get(ATTR + 4, 4))[0]) == (-E.E2BIG, 136)


def test_a_system_wide_event_on_cpu_0(g):
    assert g.open(pid=-1, cpu=0) >= 3


def test_an_unprivileged_open_is_eacces():
    assert Guest(uid=1000).open() == -E.EACCES


@pytest.mark.parametrize("cmd, arg, want", [(0x2499, 0, -E.ENOTTY), (SET_BPF, 999, -E.EBADF), (SET_BPF, 0, -E.EINVAL)])
def test_ioctl_errors(g, cmd, arg, want):
    fd = g.open()
    assert g.ioctl(fd, cmd, arg) == want


def test_set_bpf_attaches_the_program(g):
    fd, prog = g.open(), g.prog()
    assert (g.ioctl(fd, SET_BPF, prog), len(g.m.kernel.bpf.links_by_id)) == (0, 1)


def test_a_second_program_is_eexist(g):
    fd, prog = g.open(), g.prog()
    g.ioctl(fd, SET_BPF, prog)
    assert g.ioctl(fd, SET_BPF, g.prog()) == -E.EEXIST


@pytest.mark.parametrize("ptype, attach", [(1, 0), (2, 48)], ids=["socket filter", "uprobe_multi program"])
def test_a_program_of_another_kind_is_einval(g, ptype, attach):
    fd = g.open()
    assert g.ioctl(fd, SET_BPF, g.prog(ptype, attach)) == -E.EINVAL


def test_a_map_descriptor_is_not_a_program(g):
    fd = g.open()
    assert g.ioctl(fd, SET_BPF, g.map()) == -E.EINVAL


def test_a_disabled_event_runs_its_program_only_once_enabled(g):
    """attr.disabled: the uprobe's consumer is registered at PERF_EVENT_IOC_ENABLE and
    unregistered at DISABLE."""
    fd = g.open(bits=1)
    links = g.m.kernel.bpf.links_by_id
    g.ioctl(fd, SET_BPF, g.prog())
    states = [len(links)]
    g.ioctl(fd, ENABLE)
    states.append(len(links))
    g.ioctl(fd, DISABLE)
    states.append(len(links))
    assert states == [0, 1, 0]


def test_closing_the_event_detaches_the_program(g):
    fd = g.open()
    g.ioctl(fd, SET_BPF, g.prog())
    g.task.process.files.close(fd)
    assert len(g.m.kernel.bpf.links_by_id) == 0


def perf_link(g, prog: int, event: int, cookie: int = 0) -> int:
    return g.bpf(28, struct.pack("<IIIIQ", prog, event, 41, 0, cookie).ljust(64, b"\0"))


def test_link_create_of_a_perf_event_reports_the_uprobe(g):
    """bpf_link_info for a perf event link: BPF_LINK_TYPE_PERF_EVENT, a uprobe (or
    uretprobe, config bit 0) with the path as given, the offset and the cookie."""
    fd = g.open(config=1, off=0x4010)
    link = perf_link(g, g.prog(), fd, cookie=0xC0FFEE)
    info = bytearray(64)
    struct.pack_into("<QI", info, 24, g.at(NAME), 64)
    g.put(INFO, bytes(info))
    ret = g.bpf(15, struct.pack("<IIQ", link, 64, g.at(INFO)))
    out = g.get(INFO, 64)
    ltype, ptype = struct.unpack_from("<I", out, 0)[0], struct.unpack_from("<I", out, 16)[0]
    name_len, offset, cookie = struct.unpack_from("<IIQ", out, 32)
    got = (ret, ltype, ptype, g.m.mem.read_cstring(g.at(NAME)), name_len, offset, cookie)
    assert got == (0, 7, 2, PROBED, len(PROBED) + 1, 0x4010, 0xC0FFEE)


def test_a_too_short_name_buffer_is_enospc(g):
    fd = g.open()
    link = perf_link(g, g.prog(), fd)
    info = bytearray(64)
    struct.pack_into("<QI", info, 24, g.at(NAME), 4)
    g.put(INFO, bytes(info))
    ret = g.bpf(15, struct.pack("<IIQ", link, 64, g.at(INFO)))
    assert (ret, g.get(NAME, 4)) == (-E.ENOSPC, PROBED[:3] + b"\0")


def test_closing_the_link_detaches_the_program(g):
    fd = g.open()
    link = perf_link(g, g.prog(), fd)
    g.task.process.files.close(link)
    assert len(g.m.kernel.bpf.links_by_id) == 0


def test_the_link_keeps_the_event_when_its_descriptor_closes(g):
    """The link holds a reference to the perf event's file (bpf_perf_link_attach's
    perf_file): closing the event's descriptor leaves the program attached."""
    fd = g.open()
    perf_link(g, g.prog(), fd)
    g.task.process.files.close(fd)
    assert len(g.m.kernel.bpf.links_by_id) == 1
