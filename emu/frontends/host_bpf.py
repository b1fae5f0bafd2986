"""The host kernel's BPF, driven from Python: what ``diff -b`` runs natively to compare a
BPF object's maps and ring buffer records with the model's.

It loads an object as libbpf would - the same parse and relocations the model uses
(:mod:`kernel_model.bpf.object`), then ``bpf(BPF_MAP_CREATE)``, the global data written
and ``.rodata`` frozen, ``bpf(BPF_PROG_LOAD)``, and per program a uprobe perf event
(``perf_event_open`` of the uprobe PMU, whose type is read from
``/sys/bus/event_source/devices/uprobe/type``) with ``PERF_EVENT_IOC_SET_BPF``.  Maps are
read back with ``BPF_MAP_GET_NEXT_KEY``/``BPF_MAP_LOOKUP_ELEM``, a ring buffer through
its mmap'ed pages.  Every descriptor is closed at the end, which detaches everything:
nothing stays in the host kernel.  Needs root (CAP_BPF and CAP_PERFMON).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
from dataclasses import dataclass, field

from emu.probes.bpf_api import BPF_MAP_TYPE_RINGBUF, BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE, Insn
from kernel_model.errors import EmuError

SYS_BPF, SYS_PERF_EVENT_OPEN = 321, 298
BPF_MAP_CREATE, BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM = 0, 1, 2
BPF_MAP_GET_NEXT_KEY, BPF_PROG_LOAD, BPF_MAP_FREEZE = 4, 5, 22
PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_SET_BPF = 0x2400, 0x40042408
PERF_FLAG_FD_CLOEXEC = 1 << 3
UPROBE_TYPE_FILE = "/sys/bus/event_source/devices/uprobe/type"
_ATTR_SIZE = 144  # union bpf_attr as passed (zero tail beyond what each command uses)
_PERF_ATTR_SIZE = 136  # PERF_ATTR_SIZE_VER8

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class HostBpfError(EmuError):
    """The host kernel refused a step, with its errno and (for a load) the verifier log."""

    def __init__(self, message: str, errno: int = 0, log: str = ""):
        self.errno, self.log = errno, log
        super().__init__(message)


def _bpf(cmd: int, attr: bytes) -> int:
    buf = ctypes.create_string_buffer(attr.ljust(_ATTR_SIZE, b"\0"), _ATTR_SIZE)
    ret = _libc.syscall(SYS_BPF, cmd, buf, _ATTR_SIZE)
    if ret < 0:
        return -ctypes.get_errno()
    return ret


def _addr(buf) -> int:
    return ctypes.addressof(buf)


@dataclass
class HostMap:
    name: str
    fd: int
    map_type: int
    key_size: int
    value_size: int
    max_entries: int
    ring: mmap.mmap | None = None
    data: mmap.mmap | None = None

    def items(self) -> list[tuple[bytes, bytes]]:
        """Every (key, value) in the kernel's get_next_key order."""
        out: list[tuple[bytes, bytes]] = []
        key = ctypes.create_string_buffer(max(self.key_size, 1))
        nxt = ctypes.create_string_buffer(max(self.key_size, 1))
        val = ctypes.create_string_buffer(max(self.value_size, 1) * 1)
        have_key = False
        while True:
            attr = struct.pack("<IxxxxQQQ", self.fd, _addr(key) if have_key else 0, _addr(nxt), 0)
            if _bpf(BPF_MAP_GET_NEXT_KEY, attr) < 0:
                return out
            ctypes.memmove(key, nxt, self.key_size)
            have_key = True
            attr = struct.pack("<IxxxxQQQ", self.fd, _addr(key), _addr(val), 0)
            if _bpf(BPF_MAP_LOOKUP_ELEM, attr) == 0:
                out.append((key.raw[: self.key_size], val.raw[: self.value_size]))

    def ring_records(self) -> list[bytes]:
        """The records a ring buffer holds, consumed as libbpf's ringbuf__process_ring
        does (discarded ones skipped, consumer_pos advanced)."""
        if self.ring is None or self.data is None:
            return []
        mask = self.max_entries - 1
        out = []
        cons = struct.unpack_from("<Q", self.ring, 0)[0]
        prod = struct.unpack_from("<Q", self.data, 0)[0]
        page = mmap.PAGESIZE
        while cons < prod:
            off = page + (cons & mask)
            length, _pgoff = struct.unpack_from("<II", self.data, off)
            if length & (1 << 31):  # busy: not committed yet
                break
            size = length & ~((1 << 31) | (1 << 30))
            if not length & (1 << 30):
                out.append(bytes(self.data[off + 8 : off + 8 + size]))
            cons += (size + 8 + 7) & ~7
        struct.pack_into("<Q", self.ring, 0, cons)
        return out


@dataclass
class HostObject:
    maps: list[HostMap] = field(default_factory=list)
    prog_fds: dict[str, int] = field(default_factory=dict)
    event_fds: list[int] = field(default_factory=list)

    def close(self) -> None:
        for fd in self.event_fds:
            os.close(fd)
        for fd in self.prog_fds.values():
            os.close(fd)
        for m in self.maps:
            if m.ring is not None:
                m.ring.close()
            if m.data is not None:
                m.data.close()
            os.close(m.fd)
        self.event_fds, self.prog_fds, self.maps = [], {}, []


def create_map(name: str, map_type: int, key_size: int, value_size: int, max_entries: int, flags: int) -> HostMap:
    attr = struct.pack("<7I16s", map_type, key_size, value_size, max_entries, flags, 0, 0, name.encode()[:15])
    fd = _bpf(BPF_MAP_CREATE, attr)
    if fd < 0:
        raise HostBpfError(f"the host kernel refused map {name!r}: {os.strerror(-fd)}", -fd)
    m = HostMap(name, fd, map_type, key_size, value_size, max_entries)
    if map_type == BPF_MAP_TYPE_RINGBUF:
        page = mmap.PAGESIZE
        m.ring = mmap.mmap(fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        m.data = mmap.mmap(fd, page + 2 * max_entries, mmap.MAP_SHARED, mmap.PROT_READ, offset=page)
    return m


def update_elem(m: HostMap, key: bytes, value: bytes, flags: int = 0) -> None:
    k = ctypes.create_string_buffer(key, max(len(key), 1))
    v = ctypes.create_string_buffer(value, max(len(value), 1))
    ret = _bpf(BPF_MAP_UPDATE_ELEM, struct.pack("<IxxxxQQQ", m.fd, _addr(k), _addr(v), flags))
    if ret < 0:
        raise HostBpfError(f"the host kernel refused an update of map {m.name!r}: {os.strerror(-ret)}", -ret)


def freeze(m: HostMap) -> None:
    ret = _bpf(BPF_MAP_FREEZE, struct.pack("<I", m.fd))
    if ret < 0:
        raise HostBpfError(f"the host kernel refused to freeze map {m.name!r}: {os.strerror(-ret)}", -ret)


def load_prog(name: str, insns: list[Insn], map_fds: list[int], license: str, prog_type: int, attach_type: int) -> int:
    """``BPF_PROG_LOAD`` of instructions whose map references are indices into the
    object's maps (``BPF_PSEUDO_MAP_FD``/``MAP_VALUE`` imm), turned into the host fds."""
    code = b"".join(
        (
            insn._replace(imm=map_fds[insn.imm])
            if insn.src in (BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE) and insn.code == 0x18
            else insn
        ).encode()
        for insn in insns
    )
    ibuf = ctypes.create_string_buffer(code, len(code))
    lic = ctypes.create_string_buffer(license.encode() + b"\0")
    log = ctypes.create_string_buffer(1 << 20)
    attr = struct.pack(
        "<IIQQIIQII16sII",
        prog_type,
        len(insns),
        _addr(ibuf),
        _addr(lic),
        1,
        len(log),
        _addr(log),
        0,
        0,
        name.encode()[:15],
        0,
        attach_type,
    )
    fd = _bpf(BPF_PROG_LOAD, attr)
    if fd < 0:
        text = log.value.decode(errors="replace")
        raise HostBpfError(f"the host kernel refused program {name!r}: {os.strerror(-fd)}", -fd, text)
    return fd


def uprobe_pmu_type() -> int:
    try:
        with open(UPROBE_TYPE_FILE) as f:
            return int(f.read())
    except (OSError, ValueError) as e:
        raise HostBpfError(f"no uprobe PMU on this host ({UPROBE_TYPE_FILE}: {e})") from None


def attach_uprobe(prog_fd: int, path: str, offset: int, *, retprobe: bool, pid: int) -> int:
    """A uprobe perf event on (path, offset) for ``pid`` (-1: every process, on CPU 0 as
    libbpf opens it) with the program attached and enabled; its fd."""
    cpath = ctypes.create_string_buffer(os.fsencode(path) + b"\0")
    attr = bytearray(_PERF_ATTR_SIZE)
    struct.pack_into("<IIQ", attr, 0, uprobe_pmu_type(), _PERF_ATTR_SIZE, 1 if retprobe else 0)
    struct.pack_into("<QQ", attr, 56, _addr(cpath), offset)  # config1 (uprobe_path), config2 (probe_offset)
    abuf = ctypes.create_string_buffer(bytes(attr), len(attr))
    fd = _libc.syscall(SYS_PERF_EVENT_OPEN, abuf, pid, 0 if pid == -1 else -1, -1, PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        raise HostBpfError(f"perf_event_open of a uprobe on {path}:{offset:#x}: {os.strerror(err)}", err)
    for req, arg in ((PERF_EVENT_IOC_SET_BPF, prog_fd), (PERF_EVENT_IOC_ENABLE, 0)):
        if _libc.ioctl(fd, req, arg) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise HostBpfError(f"attaching the program to {path}:{offset:#x}: {os.strerror(err)}", err)
    return fd
