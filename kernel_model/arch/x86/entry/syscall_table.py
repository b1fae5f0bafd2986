"""The syscall table (arch/x86/entry/syscall_64.c's ``sys_call_table``): every handler
the model provides, collected from the ``@syscall`` marks of the subsystems' components
(:mod:`kernel_model.include.linux.syscalls`), and what is generated from it - each
machine's dispatch table, the documentation's syscall table and the ENOSYS message of a
syscall the model does not provide.

uretprobe (335) and uprobe (336) are uprobes' own: the kernel model registers them per
profile (``Syscalls.register``), so the registry lists them with the profiles that
have them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType, MethodType
from typing import Any

from kernel_model.arch.x86.entry.syscall_64 import SYSCALL_NAMES
from kernel_model.arch.x86.kernel.process_64 import ArchPrctlSyscalls
from kernel_model.block.ioprio import IoprioSyscalls
from kernel_model.bpf.sys_bpf import BpfSyscalls
from kernel_model.drivers.char.random import RandomSyscalls
from kernel_model.fs.d_path import DPathSyscalls
from kernel_model.fs.eventpoll import EventpollSyscalls
from kernel_model.fs.exec import ExecSyscalls
from kernel_model.fs.fadvise import FadviseSyscalls
from kernel_model.fs.fcntl import FcntlSyscalls
from kernel_model.fs.file import FileSyscalls
from kernel_model.fs.ioctl import IoctlSyscalls
from kernel_model.fs.namei_syscalls import NameiSyscalls
from kernel_model.fs.open import OpenSyscalls
from kernel_model.fs.pipe import PipeSyscalls
from kernel_model.fs.read_write import ReadWriteSyscalls
from kernel_model.fs.readdir import ReaddirSyscalls
from kernel_model.fs.select import SelectSyscalls
from kernel_model.fs.stat import StatSyscalls
from kernel_model.fs.statfs import StatfsSyscalls
from kernel_model.fs.sync import SyncSyscalls
from kernel_model.fs.utimes import UtimesSyscalls
from kernel_model.fs.xattr import XattrSyscalls
from kernel_model.include.linux.syscalls import SyscallDef
from kernel_model.kernel.cred import CredSyscalls
from kernel_model.kernel.events.perf_syscall import PerfEventSyscalls
from kernel_model.kernel.exec_domain import PersonalitySyscalls
from kernel_model.kernel.exit import ExitSyscalls
from kernel_model.kernel.fork import ProcessSyscalls
from kernel_model.kernel.futex import FutexSyscalls
from kernel_model.kernel.resource import RlimitSyscalls
from kernel_model.kernel.rseq import RseqSyscalls
from kernel_model.kernel.sched_syscalls import SchedSyscalls
from kernel_model.kernel.signal import SignalSyscalls
from kernel_model.kernel.sys import SysSyscalls
from kernel_model.kernel.time.hrtimer import HrtimerSyscalls
from kernel_model.kernel.time.itimer import ItimerSyscalls
from kernel_model.kernel.time.time import TimeSyscalls
from kernel_model.mm.madvise import MadviseSyscalls
from kernel_model.mm.mmap import MmapSyscalls
from kernel_model.mm.mprotect import MprotectSyscalls
from kernel_model.mm.mremap import MremapSyscalls
from kernel_model.net.socket import SocketSyscalls

# The components whose marked methods are syscalls, in the order the modeled kernel's
# directories list them.
COMPONENTS = (
    ArchPrctlSyscalls,
    IoprioSyscalls,
    RandomSyscalls,
    NameiSyscalls,
    OpenSyscalls,
    ReadWriteSyscalls,
    StatSyscalls,
    StatfsSyscalls,
    XattrSyscalls,
    FadviseSyscalls,
    ReaddirSyscalls,
    SyncSyscalls,
    DPathSyscalls,
    UtimesSyscalls,
    FcntlSyscalls,
    IoctlSyscalls,
    SelectSyscalls,
    EventpollSyscalls,
    FileSyscalls,
    PipeSyscalls,
    ExecSyscalls,
    ProcessSyscalls,
    ExitSyscalls,
    FutexSyscalls,
    SchedSyscalls,
    SignalSyscalls,
    CredSyscalls,
    SysSyscalls,
    PersonalitySyscalls,
    RlimitSyscalls,
    RseqSyscalls,
    TimeSyscalls,
    HrtimerSyscalls,
    ItimerSyscalls,
    MmapSyscalls,
    MremapSyscalls,
    MprotectSyscalls,
    MadviseSyscalls,
    SocketSyscalls,
    BpfSyscalls,
    PerfEventSyscalls,
)


@dataclass(frozen=True)
class Entry:
    """A registered syscall: its definition, the module that holds its handler and, for
    one only some kernel profiles have, which."""

    sysdef: SyscallDef
    module: str
    profiles: str | None = None

    @property
    def nr(self) -> int:
        return self.sysdef.nr

    @property
    def name(self) -> str:
        return self.sysdef.name


# Registered by the kernel model itself, on the profiles that have them.
UPROBES_SYSCALLS = (
    Entry(SyscallDef(335, "uretprobe"), "kernel_model.kernel.events.uretprobes", "6.11 and later"),
    Entry(SyscallDef(336, "uprobe"), "kernel_model.arch.x86.kernel.uprobes_optimize", "6.18 and later"),
)


def marked(cls):
    """(function, SyscallDef) for each syscall mark on ``cls``'s methods."""
    seen = set()
    for fn in vars(cls).values():
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for sysdef in getattr(fn, "syscalls", ()):
            yield fn, sysdef


def _collect() -> MappingProxyType:
    entries: dict[int, Entry] = {}
    for cls in COMPONENTS:
        for _, sysdef in marked(cls):
            if sysdef.nr in entries:
                raise ValueError(
                    f"syscall {sysdef.nr} ({sysdef.name}) is registered twice: "
                    f"{entries[sysdef.nr].module} and {cls.__module__}"
                )
            entries[sysdef.nr] = Entry(sysdef, cls.__module__)
    for entry in UPROBES_SYSCALLS:
        entries[entry.nr] = entry
    return MappingProxyType(dict(sorted(entries.items())))


REGISTRY = _collect()


def build_table(components) -> dict[int, Callable[..., Any]]:
    """One machine's dispatch table: nr -> the handler bound to its component.  Every
    component class must have exactly one instance among ``components``."""
    kinds = [type(c) for c in components]
    if len(kinds) != len(COMPONENTS) or set(kinds) != set(COMPONENTS):
        raise ValueError("the components must be one instance of each of COMPONENTS")
    table: dict[int, Callable[..., Any]] = {}
    for comp in components:
        for fn, sysdef in marked(type(comp)):
            table[sysdef.nr] = MethodType(fn, comp)
    return table


def module_path(module: str) -> str:
    return module.replace(".", "/") + ".py"


def render_markdown() -> str:
    """The documentation's syscall table: one row per registered syscall, by number."""
    rows = ["| nr | syscall | status | handler |", "|---|---|---|---|"]
    for entry in REGISTRY.values():
        d = entry.sysdef
        status = d.status if d.partial is None else f"partial: {d.partial}"
        if entry.profiles:
            status += f" (profiles {entry.profiles})"
        rows.append(f"| {d.nr} | `{d.name}` | {status.replace('|', '/')} | `{module_path(entry.module)}` |")
    return "\n".join(rows) + "\n"


def enosys_detail(nr: int, calls: int) -> str:
    """What a run that stopped while its task retried syscall ``nr`` (``calls`` times,
    each -ENOSYS) says about it: its name, and why the model has no handler."""
    name = SYSCALL_NAMES.get(nr)
    what = f"{nr} ({name})" if name else str(nr)
    entry = REGISTRY.get(nr)
    if entry is not None and entry.profiles:
        why = f"is not modeled by this kernel profile (only by {entry.profiles})"
    else:
        why = "is not modeled"
    return f"last syscall {what} {why}: ENOSYS, {calls} times"


class HandlerSet:
    """Read-only: the handlers of some components by their ``sys_<name>``, for callers
    that pick syscalls by subsystem."""

    __slots__ = ("_by_name",)

    def __init__(self, *classes):
        by_name = {"sys_" + d.name: fn for cls in classes for fn, d in marked(cls)}
        object.__setattr__(self, "_by_name", MappingProxyType(by_name))

    def __getattr__(self, name: str):
        try:
            return self._by_name[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is read-only")


# The syscalls on paths and file contents (fs/open.c, read_write.c, stat.c, namei.c,
# readdir.c, sync.c, d_path.c, utimes.c).
FILE_SYSCALLS = HandlerSet(
    OpenSyscalls,
    ReadWriteSyscalls,
    StatSyscalls,
    NameiSyscalls,
    ReaddirSyscalls,
    SyncSyscalls,
    DPathSyscalls,
    UtimesSyscalls,
)
