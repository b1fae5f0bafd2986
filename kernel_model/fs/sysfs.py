"""What the guest sees at ``/sys``: a read-only sysfs holding the CPU list of the
modeled machine (drivers/base/cpu.c's ``/sys/devices/system/cpu``) and the uprobe perf
PMU (``/sys/bus/event_source/devices/uprobe``: its ``type`` and ``format``, which libbpf
reads before ``perf_event_open``).

The host's sysfs describes the host's hardware and kernel, not the modeled machine, so
none of it is shown.  What is shown is what C libraries and tools read to count CPUs:
``online``, ``possible`` and ``present`` (``%*pbl`` lists: "0", "0-3"), read by glibc's
``get_nprocs()`` / ``sysconf(_SC_NPROCESSORS_ONLN)``, and one ``cpuN`` directory per CPU,
which ``get_nprocs_conf()`` counts.  Every CPU is possible, present and online (no
hotplug); ``kernel_max`` is NR_CPUS - 1.  Opening an attribute for writing is
EACCES, as kernfs refuses an attribute without a store method.
"""

from __future__ import annotations

import errno as E
import stat as S

from kernel_model.fs.file import SeqFile, attrs_stat_bytes
from kernel_model.fs.fs_types import Attrs, SpecialNode
from kernel_model.fs.libfs import DirNode, access_mode, keep_open_flags, may_open
from kernel_model.include.linux.cpumask import NR_CPUS, cpulist
from kernel_model.include.uapi.linux.perf_event import PERF_TYPE_UPROBE

SYSFS_DEV = 0x15
SYSFS_ATTR_SIZE = 4096  # a sysfs attribute's st_size: one page


class SysfsFile(SeqFile):
    """An open sysfs attribute: the text ``show`` made at open (sysfs_kf_seq_show)."""

    def __init__(self, text: bytes, attrs: Attrs):
        super().__init__(text, attrs.ino)
        self._attrs = attrs

    def fstat(self):
        return attrs_stat_bytes(self._attrs)


class SysfsAttr(SpecialNode):
    """One read-only attribute file (``DEVICE_ATTR_RO``): ``show()`` gives its text."""

    def __init__(self, ino: int, show):
        self.ino, self.show = ino, show

    def attrs(self, task):
        return Attrs(mode=S.S_IFREG | 0o444, ino=self.ino, dev=SYSFS_DEV, size=SYSFS_ATTR_SIZE)

    def open(self, task, flags):
        a = self.attrs(task)
        err = may_open(a.mode, flags, getattr(task, "cred", None), a.uid, a.gid)
        if err:
            return err
        _, writable = access_mode(flags)
        if writable:
            return -E.EACCES  # kernfs_fop_open: no store() (root's override too)
        return keep_open_flags(SysfsFile(self.show().encode(), a), flags)


class SysfsDir(DirNode):
    """A sysfs directory (a kobject's): fixed entries, or ``entries`` computed; its
    link count is kernfs's, 2 plus its subdirectories."""

    def __init__(self, path: str, ino: int, entries, parent_ino: int = 0, mode: int = 0o755):
        self.path, self.ino, self._entries, self.parent_ino = path, ino, entries, parent_ino
        self.mode = mode

    def entries(self, task):
        return self._entries() if callable(self._entries) else self._entries

    def attrs(self, task):
        subdirs = sum(1 for _, node in self.entries(task) if isinstance(node, SysfsDir))
        return Attrs(mode=S.S_IFDIR | self.mode, ino=self.ino, dev=SYSFS_DEV, nlink=2 + subdirs, size=0)


def sysfs_root(machine) -> SysfsDir:
    """The /sys tree of ``machine``: devices/system/cpu with the machine's CPUs."""

    def nr_cpus() -> int:
        return machine.scheduler.nr_cpu_ids

    def cpu_list() -> str:
        return cpulist((1 << nr_cpus()) - 1) + "\n"

    base = 0x1000  # CPU directories: base + cpu
    cpu_path = "/sys/devices/system/cpu"

    def cpu_entries():
        out = [(name, SysfsAttr(ino, cpu_list)) for name, ino in (("online", 20), ("possible", 21), ("present", 22))]
        out.append(("kernel_max", SysfsAttr(23, lambda: f"{NR_CPUS - 1}\n")))
        out += [(f"cpu{i}", SysfsDir(f"{cpu_path}/cpu{i}", base + i, [], parent_ino=13)) for i in range(nr_cpus())]
        return out

    cpu = SysfsDir(cpu_path, 13, cpu_entries, parent_ino=12)
    system = SysfsDir("/sys/devices/system", 12, [("cpu", cpu)], parent_ino=11)
    devices = SysfsDir("/sys/devices", 11, [("system", system)], parent_ino=1)
    return SysfsDir("/sys", 1, [("bus", _event_source_bus()), ("devices", devices)], mode=0o555)  # r-x for all


def _event_source_bus() -> SysfsDir:
    """/sys/bus/event_source/devices/uprobe: the perf PMU of uprobes (perf_uprobe's
    ``type`` and its ``PMU_FORMAT_ATTR``s: the return-probe bit and where the
    reference counter offset goes in ``config``)."""
    path = "/sys/bus/event_source/devices/uprobe"
    fmt = SysfsDir(
        f"{path}/format",
        35,
        [
            ("ref_ctr_offset", SysfsAttr(36, lambda: "config:32-63\n")),
            ("retprobe", SysfsAttr(37, lambda: "config:0\n")),
        ],
        parent_ino=33,
    )
    uprobe = SysfsDir(
        path, 33, [("format", fmt), ("type", SysfsAttr(34, lambda: f"{PERF_TYPE_UPROBE}\n"))], parent_ino=32
    )
    devs = SysfsDir("/sys/bus/event_source/devices", 32, [("uprobe", uprobe)], parent_ino=31)
    source = SysfsDir("/sys/bus/event_source", 31, [("devices", devs)], parent_ino=30)
    return SysfsDir("/sys/bus", 30, [("event_source", source)], parent_ino=1)
