"""perf_event_open for the uprobe PMU (kernel/events/core.c, kernel/trace/trace_event_perf.c).

The one PMU modeled is ``uprobe`` (its type is :data:`PERF_TYPE_UPROBE`, which
``/sys/bus/event_source/devices/uprobe/type`` shows, with the ``retprobe`` (config:0) and
``ref_ctr_offset`` (config:32-63) format fields): ``config1`` points at the probed
file's path, ``config2`` is the offset in it.  Opening one checks what
``perf_copy_attr``, ``sys_perf_event_open``, ``perf_uprobe_init`` and ``uprobe_register``
check, in their order, and gives an anonymous-inode file (``anon_inode:[perf_event]``).

A BPF program is attached to the event by ``PERF_EVENT_IOC_SET_BPF`` or a
``BPF_LINK_CREATE`` of type BPF_PERF_EVENT (:mod:`kernel_model.bpf.syscall`): the
machine's BPF state registers the uprobe with the program as its consumer
(:meth:`kernel_model.trace.bpf_trace.BpfTrace.attach_uprobe`).  The program runs while
the event is enabled (``attr.disabled`` clear, or ``PERF_EVENT_IOC_ENABLE``): disabling
unregisters the consumer, enabling registers it again.  The ``pid`` argument limits hits
to that process (the event's task; it follows the task across exec), -1 takes every
process.
"""

from __future__ import annotations

import errno as E
import struct
from typing import Any

from kernel_model.bpf.bpf_files import AnonInodeFile, BpfProgFile, attach_errno, check_uprobe_offsets, lookup_probe_file
from kernel_model.bpf.bpf_types import BPF_PROG_TYPE_KPROBE
from kernel_model.errors import EmuError
from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import fd_arg, int_arg, pid_t
from kernel_model.include.uapi.linux.perf_event import PERF_TYPE_UPROBE
from kernel_model.kernel.pid import find_process_by_vpid
from kernel_model.mm.mm_types import PAGE_SIZE, GuestFault

PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT = 0, 1, 2
PERF_ATTR_SIZE_VER0 = 64
PERF_ATTR_SIZE = 136  # sizeof(struct perf_event_attr) in 6.18 (PERF_ATTR_SIZE_VER8)
PERF_FLAG_FD_NO_GROUP, PERF_FLAG_FD_OUTPUT, PERF_FLAG_PID_CGROUP, PERF_FLAG_FD_CLOEXEC = 1, 2, 4, 8
PERF_FLAG_ALL = PERF_FLAG_FD_NO_GROUP | PERF_FLAG_FD_OUTPUT | PERF_FLAG_PID_CGROUP | PERF_FLAG_FD_CLOEXEC
PERF_SAMPLE_MAX = 1 << 25
PERF_FORMAT_MAX = 1 << 5
PERF_PROBE_CONFIG_IS_RETPROBE = 1
PERF_UPROBE_REF_CTR_OFFSET_SHIFT = 32
PATH_MAX = 4096
# bits of the attr's flags word
ATTR_DISABLED, ATTR_INHERIT, ATTR_EXCLUDE_KERNEL, ATTR_FREQ = 1 << 0, 1 << 1, 1 << 5, 1 << 10
ATTR_ENABLE_ON_EXEC, ATTR_NAMESPACES = 1 << 12, 1 << 28
ATTR_INHERIT_THREAD, ATTR_REMOVE_ON_EXEC, ATTR_SIGTRAP = 1 << 35, 1 << 36, 1 << 37
ATTR_RESERVED_1 = ~((1 << 38) - 1) & 0xFFFFFFFFFFFFFFFF
PERF_SAMPLE_WEIGHT, PERF_SAMPLE_WEIGHT_STRUCT = 1 << 14, 1 << 24
PERF_SAMPLE_REGS_INTR, PERF_SAMPLE_PHYS_ADDR = 1 << 18, 1 << 19
SAMPLE_RATE_MAX = 100_000  # kernel.perf_event_max_sample_rate's default
PERF_EVENT_PARANOID = 2  # kernel.perf_event_paranoid's default
# ioctls: _IO('$', n) and the _IOW ones libbpf and perf use
PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_DISABLE, PERF_EVENT_IOC_REFRESH, PERF_EVENT_IOC_RESET = (
    0x2400,
    0x2401,
    0x2402,
    0x2403,
)
PERF_EVENT_IOC_ID = 0x80082407
PERF_EVENT_IOC_SET_BPF = 0x40042408
BPF_TRACE_KPROBE_MULTI, BPF_TRACE_UPROBE_MULTI = 42, 48
BPF_TRACE_KPROBE_SESSION, BPF_TRACE_UPROBE_SESSION = 55, 56


class PerfEventFile(AnonInodeFile):
    """A uprobe perf event (``perf_fops``): where it probes, for which process, whether
    it is enabled, and the program attached to it."""

    is_perf_event = True
    anon_name = "[perf_event]"

    def __init__(self, machine, file, path: str, offset: int, *, retprobe: bool, ref_ctr_offset: int, pid, enabled):
        super().__init__()
        self.m = machine
        self.file, self.path, self.offset = file, path, offset
        self.retprobe, self.ref_ctr_offset, self.pid = retprobe, ref_ctr_offset, pid
        self.enabled = enabled
        self.prog = None
        self.cookie = 0
        self.link: Any = None  # the BPF state's link while the program is registered
        self.link_id = 0
        self.event_id = 0

    def read(self, count, interrupted):
        return -E.ENOSPC if count < 8 else (0).to_bytes(8, "little")  # perf_read: the count (no samples here)

    def poll(self):
        return 0  # perf_poll without a ring buffer: nothing

    def release(self):
        """perf_release -> perf_event_free_bpf_prog."""
        self.detach_prog()

    # -- the program ------------------------------------------------------------------
    def set_bpf_prog(self, prog, cookie: int) -> int:
        """perf_event_set_bpf_prog on a uprobe event: a kprobe-type program not made
        for a multi link, one per event (EEXIST)."""
        if prog.prog_type != BPF_PROG_TYPE_KPROBE:
            return neg(E.EINVAL)
        multi = (BPF_TRACE_KPROBE_MULTI, BPF_TRACE_UPROBE_MULTI, BPF_TRACE_KPROBE_SESSION, BPF_TRACE_UPROBE_SESSION)
        if prog.expected_attach_type in multi:
            return neg(E.EINVAL)
        if self.prog is not None:
            return neg(E.EEXIST)
        self.prog, self.cookie = prog, cookie
        err = self._sync()
        if err:
            self.prog = None
        return err

    def detach_prog(self) -> None:
        self.prog = None
        self._sync()

    def _sync(self) -> int:
        """Register the program's uprobe while the event is enabled and has one;
        unregister it otherwise."""
        bpf = self.m.kernel.bpf
        want = self.prog is not None and self.enabled
        if want and self.link is None:
            try:
                link = bpf.attach_uprobe(
                    self.prog,
                    self.file,
                    self.offset,
                    retprobe=self.retprobe,
                    ref_ctr_offset=self.ref_ctr_offset,
                    pid=self.pid,
                    cookie=self.cookie,
                )
            except EmuError as err:
                return attach_errno(err)
            self.link = link
            self.link_id = self.link_id or link.id
        elif not want and self.link is not None:
            bpf.detach(self.link)
            self.link = None
        return 0

    def ioctl(self, cmd, arg, mem):
        """_perf_ioctl: enable, disable, reset, the event id, SET_BPF (a program
        descriptor of the calling process)."""
        if cmd == PERF_EVENT_IOC_ENABLE:
            self.enabled = True
            return self._sync()
        if cmd == PERF_EVENT_IOC_DISABLE:
            self.enabled = False
            return self._sync()
        if cmd in (PERF_EVENT_IOC_RESET, PERF_EVENT_IOC_REFRESH):
            return 0 if cmd == PERF_EVENT_IOC_RESET else neg(E.EINVAL)  # refresh: no overflow events here
        if cmd == PERF_EVENT_IOC_ID:
            try:
                mem.write_user(arg, struct.pack("<Q", self.event_id))
            except GuestFault:
                return neg(E.EFAULT)
            return 0
        if cmd == PERF_EVENT_IOC_SET_BPF:
            f = self.m.task.process.files.get(fd_arg(arg))
            if f is None:
                return neg(E.EBADF)
            if not isinstance(f, BpfProgFile):
                return neg(E.EINVAL)
            return self.set_bpf_prog(f.prog, 0)
        return neg(E.ENOTTY)


class PerfEventOpen:
    """perf_event_open(2), made at a guest's first call (:mod:`.perf_syscall` is the entry)."""

    def __init__(self, sc):
        self.m = sc.m
        self._ids = [0]

    def sys_perf_event_open(self, task, regs, uattr, pid, cpu, group_fd, flags, *_):
        """sys_perf_event_open's checks in the kernel's order, then the uprobe PMU's."""
        pid, cpu, group_fd, flags = pid_t(pid), int_arg(cpu), int_arg(group_fd), flags & 0xFFFFFFFFFFFFFFFF
        if flags & ~PERF_FLAG_ALL:
            return neg(E.EINVAL)
        attr = self._copy_attr(task, uattr)
        if isinstance(attr, int):
            return attr
        ptype, _, config, period, sample_type, _rf, bits = struct.unpack_from("<IIQQQQQ", attr, 0)
        config1, config2 = struct.unpack_from("<QQ", attr, 56)
        root = task.cred.euid == 0
        if not bits & ATTR_EXCLUDE_KERNEL and PERF_EVENT_PARANOID > 1 and not root:
            return neg(E.EACCES)  # perf_allow_kernel
        if bits & ATTR_NAMESPACES and not root:
            return neg(E.EACCES)
        if bits & ATTR_FREQ:
            if period > SAMPLE_RATE_MAX:
                return neg(E.EINVAL)
        elif period >> 63:
            return neg(E.EINVAL)
        if sample_type & PERF_SAMPLE_PHYS_ADDR and not root:
            return neg(E.EACCES)
        if flags & PERF_FLAG_PID_CGROUP and (pid == -1 or cpu == -1):
            return neg(E.EINVAL)
        if group_fd != -1:
            g = task.process.files.get(fd_arg(group_fd))
            if not isinstance(g, PerfEventFile):
                return neg(E.EBADF)
            return neg(E.EINVAL)  # event groups are not modeled
        if flags & PERF_FLAG_PID_CGROUP:
            return neg(E.EBADF)  # no cgroup directories to name
        target = None
        if pid != -1:
            target = self._find_task(task, pid)
            if target is None:
                return neg(E.ESRCH)
        nr_cpus = self.m.scheduler.nr_cpu_ids
        if not 0 <= cpu < nr_cpus and (target is None or cpu != -1):
            return neg(E.EINVAL)  # perf_event_alloc
        if ptype != PERF_TYPE_UPROBE:
            return neg(E.ENOENT)  # perf_init_event: no PMU of that type here
        if not root:
            return neg(E.EACCES)  # perf_uprobe_event_init: perfmon_capable
        ev = self._uprobe_init(task, config, config1, config2, target, enabled=not bits & ATTR_DISABLED)
        if isinstance(ev, int):
            return ev
        self._ids[0] += 1
        ev.event_id = self._ids[0]
        return task.process.files.install(ev, 0, cloexec=bool(flags & PERF_FLAG_FD_CLOEXEC))

    @staticmethod
    def _copy_attr(task, uattr: int) -> bytes | int:
        """perf_copy_attr: the size (0 means PERF_ATTR_SIZE_VER0; outside VER0..a page,
        or non-zero bytes past the kernel's struct: E2BIG with the kernel's size written
        back), the copy, the reserved fields and the flag combinations."""
        mem = task.process.mem
        try:
            (size,) = struct.unpack("<I", mem.read_user(uattr + 4, 4))
            size = size or PERF_ATTR_SIZE_VER0
            too_big = size < PERF_ATTR_SIZE_VER0 or size > PAGE_SIZE
            if not too_big and size > PERF_ATTR_SIZE:
                too_big = any(mem.read_user(uattr + PERF_ATTR_SIZE, size - PERF_ATTR_SIZE))
            if too_big:
                mem.write_user(uattr + 4, struct.pack("<I", PERF_ATTR_SIZE))
                return neg(E.E2BIG)
            n = min(size, PERF_ATTR_SIZE)
            attr = mem.read_user(uattr, n) + bytes(PERF_ATTR_SIZE - n)
        except GuestFault:
            return neg(E.EFAULT)
        sample_type, read_format, bits = struct.unpack_from("<QQQ", attr, 24)
        (reserved_2,) = struct.unpack_from("<H", attr, 110)
        (aux_action,) = struct.unpack_from("<I", attr, 116)
        if bits & ATTR_RESERVED_1 or reserved_2 or aux_action >> 3:
            return neg(E.EINVAL)
        if sample_type & ~(PERF_SAMPLE_MAX - 1) or read_format & ~(PERF_FORMAT_MAX - 1):
            return neg(E.EINVAL)
        if sample_type & PERF_SAMPLE_WEIGHT and sample_type & PERF_SAMPLE_WEIGHT_STRUCT:
            return neg(E.EINVAL)
        if not bits & ATTR_INHERIT and bits & ATTR_INHERIT_THREAD:
            return neg(E.EINVAL)
        if bits & ATTR_REMOVE_ON_EXEC and bits & ATTR_ENABLE_ON_EXEC:
            return neg(E.EINVAL)
        if bits & ATTR_SIGTRAP and not bits & ATTR_REMOVE_ON_EXEC:
            return neg(E.EINVAL)
        return attr

    def _find_task(self, task, pid: int):
        """find_lively_task_by_vpid: 0 is the caller; a thread's tid names its process
        here (the uprobe filter compares mms)."""
        if pid == 0:
            return task.process.pid
        found = find_process_by_vpid(self.m, pid)
        if found == "thread":
            return next(p.pid for p in self.m.processes for t in p.tasks if t.tid == pid)
        if found is None or getattr(found, "exited", False):
            return None
        return found.pid

    def _uprobe_init(self, task, config: int, upath: int, offset: int, pid, *, enabled: bool):
        """perf_uprobe_init + create_local_trace_uprobe + uprobe_register's checks."""
        if not upath:
            return neg(E.EINVAL)
        try:
            raw = task.process.mem.read_cstring(upath, PATH_MAX)
        except GuestFault:
            return neg(E.EFAULT)
        if len(raw) >= PATH_MAX:
            return neg(E.E2BIG)  # strndup_user's EINVAL, reported as E2BIG
        if not raw:
            return neg(E.EINVAL)
        path = raw.decode("latin-1")
        file = lookup_probe_file(self.m, task, path, not_regular=E.EINVAL)
        if isinstance(file, int):
            return file
        ref_ctr_offset = config >> PERF_UPROBE_REF_CTR_OFFSET_SHIFT
        signed = offset - (1 << 64) if offset >> 63 else offset
        err = check_uprobe_offsets(file, signed, ref_ctr_offset)
        if err:
            return err
        return PerfEventFile(
            self.m,
            file,
            path,
            offset,
            retprobe=bool(config & PERF_PROBE_CONFIG_IS_RETPROBE),
            ref_ctr_offset=ref_ctr_offset,
            pid=pid,
            enabled=enabled,
        )
