"""One machine's syscalls: the Linux x86_64 syscall ABI, the dispatch table and the state
the subsystems share.

Arguments come in rdi, rsi, rdx, r10, r8, r9; the result goes to rax (negative errno on
failure).  The machine has already done what the ``syscall`` instruction does (rcx, r11).
Only modeled syscalls exist: the table is built from the handlers registered with
``@syscall`` in their subsystems (:mod:`kernel_model.arch.x86.entry.syscall_table`);
anything else returns -ENOSYS and is counted and reported by number and name.  Guests
see the host's files through a filesystem view: a read-only sysroot, writable granted
directories, modeled /proc (see :mod:`kernel_model.fs.namei`).  Descriptors and open files
are :mod:`kernel_model.fs.file` objects: a per-process table of refcounted descriptions.

Each subsystem is a component object holding its own state; what several share lives
here, on explicit objects: the filesystem view (``vfs``, ``procfs``, ``devfs``), the
virtual clock (``clock``), the deadlines of sleeping syscalls (``timeouts``), the seeded
random generator (``rng``) and the modeled RAM (``mem_total``).  The machine drives time
through this object too (``cpu_time_passes``, ``idle``).
"""

from __future__ import annotations

import errno as E
import os
import random
from collections.abc import Callable
from typing import Any

from kernel_model.arch.x86.entry.syscall_64 import SYSCALL_NAMES, SYSCALL_NUMBERS
from kernel_model.arch.x86.entry.syscall_table import build_table
from kernel_model.arch.x86.kernel.process_64 import ArchPrctlSyscalls
from kernel_model.block.ioprio import IoprioSyscalls
from kernel_model.bpf.sys_bpf import BpfSyscalls
from kernel_model.drivers.char.random import RandomSyscalls
from kernel_model.drivers.tty.n_tty import HostReads
from kernel_model.errors import InputError
from kernel_model.fs.d_path import DPathSyscalls
from kernel_model.fs.dev import DevFs
from kernel_model.fs.eventpoll import EventpollSyscalls
from kernel_model.fs.exec import ExecSyscalls
from kernel_model.fs.fadvise import FadviseSyscalls
from kernel_model.fs.fcntl import FcntlSyscalls
from kernel_model.fs.file import FdTable, FileSyscalls, HostInput, OutputSink, PipeInput
from kernel_model.fs.ioctl import IoctlSyscalls
from kernel_model.fs.namei import Vfs
from kernel_model.fs.namei_syscalls import NameiSyscalls
from kernel_model.fs.open import OpenSyscalls
from kernel_model.fs.pipe import PipeSyscalls
from kernel_model.fs.proc.procfs import ProcFs
from kernel_model.fs.read_write import ReadWriteSyscalls
from kernel_model.fs.readdir import ReaddirSyscalls
from kernel_model.fs.select import SelectSyscalls
from kernel_model.fs.stat import StatSyscalls
from kernel_model.fs.statfs import StatfsSyscalls
from kernel_model.fs.sync import SyncSyscalls
from kernel_model.fs.sysfs import sysfs_root
from kernel_model.fs.utimes import UtimesSyscalls
from kernel_model.fs.xattr import XattrSyscalls
from kernel_model.include.linux.errno import neg
from kernel_model.kernel.cred import CredSyscalls
from kernel_model.kernel.events.perf_syscall import PerfEventSyscalls
from kernel_model.kernel.exec_domain import PersonalitySyscalls
from kernel_model.kernel.exit import ExitSyscalls
from kernel_model.kernel.fork import ProcessSyscalls
from kernel_model.kernel.futex import FutexSyscalls
from kernel_model.kernel.resource import RlimitSyscalls, check_rlimits
from kernel_model.kernel.rseq import RseqSyscalls
from kernel_model.kernel.sched_syscalls import SchedSyscalls
from kernel_model.kernel.signal import SignalSyscalls
from kernel_model.kernel.sys import SysSyscalls
from kernel_model.kernel.time.hrtimer import HrtimerSyscalls
from kernel_model.kernel.time.itimer import ItimerSyscalls
from kernel_model.kernel.time.time import TimeSyscalls
from kernel_model.kernel.time.timekeeping import CLOCK_EPOCH_NS, INSN_NS, Timeouts, VirtualClock
from kernel_model.mm.madvise import MadviseSyscalls
from kernel_model.mm.mm_types import PAGE_SIZE, GuestFault
from kernel_model.mm.mmap import MmapSyscalls
from kernel_model.mm.mprotect import MprotectSyscalls
from kernel_model.mm.mremap import MremapSyscalls
from kernel_model.net.socket import SocketSyscalls

DEFAULT_MEM_TOTAL = 4 << 30  # the modeled machine's RAM (sysinfo)


class Syscalls:
    """The syscall table of one machine.  ``register(nr, fn)`` adds or overrides an
    entry (the kernel model registers uretprobe/uprobe, 335/336)."""

    def __init__(
        self,
        machine,
        *,
        stdin: bytes | int = b"",
        sysroot: str = "/",
        grant_dirs: list[str] | tuple = (),
        cwd: str | None = None,
        seed: int = 0,
        stdio: str = "pipe",
        mem_total: int | None = None,
        realtime_ns: int | None = None,
        rlimits: list[tuple[int, int]] | None = None,
    ):
        self.m = machine
        mem_total = DEFAULT_MEM_TOTAL if mem_total is None else mem_total
        if not isinstance(mem_total, int) or mem_total < PAGE_SIZE:
            raise InputError(f"mem_total must be at least {PAGE_SIZE} bytes, not {mem_total!r}")
        machine.main_process.files = self._stdio_table(stdin, stdio)  # before /dev: its terminal
        self.procfs, self.devfs = ProcFs(machine), DevFs(machine)
        self.vfs = Vfs(
            sysroot, grant_dirs, {"/proc": self.procfs.root, "/dev": self.devfs.root, "/sys": sysfs_root(machine)}
        )
        machine.main_process.fs.pwd = self._initial_cwd(cwd)
        self.mem_total = mem_total
        self.rng = random.Random(seed)
        if realtime_ns is not None and (
            isinstance(realtime_ns, bool) or not isinstance(realtime_ns, int) or not 0 <= realtime_ns < 1 << 62
        ):
            raise InputError(f"realtime_ns must be nanoseconds since the epoch, 0 to 2**62, not {realtime_ns!r}")
        self.clock = VirtualClock(CLOCK_EPOCH_NS if realtime_ns is None else realtime_ns)
        self.timeouts = Timeouts(machine, self.clock)
        self.initial_rlimits = check_rlimits(rlimits)
        self._make_components()
        self.table: dict[int, Callable[..., Any]] = build_table(self.components)

    def _make_components(self) -> None:
        """One component per subsystem, each given the shared objects and the other
        components it calls (in that order: a component's dependencies first)."""
        self.namei = NameiSyscalls(self)
        self.pipes = PipeSyscalls(self.m)
        self.host_reads = HostReads(self)
        self.signal = SignalSyscalls(self)
        self.futex = FutexSyscalls(self)
        self.exit = ExitSyscalls(self)
        self.itimers = ItimerSyscalls(self)
        self.hrtimer = HrtimerSyscalls(self)
        self.time = TimeSyscalls(self)
        self.open = OpenSyscalls(self)
        self.rlimits = RlimitSyscalls(self, self.initial_rlimits)
        self.components = (
            ArchPrctlSyscalls(self),
            IoprioSyscalls(self),
            RandomSyscalls(self),
            self.namei,
            self.open,
            ReadWriteSyscalls(self),
            StatSyscalls(self),
            StatfsSyscalls(self),
            XattrSyscalls(self),
            FadviseSyscalls(),
            ReaddirSyscalls(self),
            SyncSyscalls(),
            DPathSyscalls(self),
            UtimesSyscalls(self),
            FcntlSyscalls(),
            IoctlSyscalls(self),
            SelectSyscalls(self),
            EventpollSyscalls(self),
            FileSyscalls(),
            self.pipes,
            ExecSyscalls(self),
            ProcessSyscalls(self),
            self.exit,
            self.futex,
            SchedSyscalls(self),
            self.signal,
            CredSyscalls(self),
            SysSyscalls(self),
            PersonalitySyscalls(),
            self.rlimits,
            RseqSyscalls(self),
            self.time,
            self.hrtimer,
            self.itimers,
            MmapSyscalls(self),
            MremapSyscalls(self),
            MprotectSyscalls(self),
            MadviseSyscalls(self),
            SocketSyscalls(),
            BpfSyscalls(self),
            PerfEventSyscalls(self),
        )

    def register(self, nr: int, fn) -> None:
        self.table[nr] = fn

    def unregister(self, nr: int) -> None:
        self.table.pop(nr, None)

    def __getattr__(self, name: str):
        """``sys_<name>``: the handler in this machine's table for that syscall, for
        callers that make one call by name outside the dispatch path (tests)."""
        nr = SYSCALL_NUMBERS.get(name[4:]) if name.startswith("sys_") else None
        if nr is None or "table" not in self.__dict__ or nr not in self.table:
            raise AttributeError(name)
        return self.table[nr]

    # ------------------------------------------------------------------ dispatch
    def dispatch(self, task, regs, nr: int | None = None, args: tuple | None = None) -> None:
        """The syscall table's entry for ``nr`` (default: rax) with ``args`` (default:
        rdi, rsi, rdx, r10, r8, r9 of ``regs``); its return value goes to rax."""
        if nr is None:
            nr = regs.rax
        fn = self.table.get(nr)
        if fn is None:
            name = SYSCALL_NAMES.get(nr, "?")
            self.m.counters.unknown_syscalls[f"{nr}:{name}"] += 1
            regs.rax = neg(E.ENOSYS)
            return
        if args is None:
            args = (regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9)
        try:
            ret = fn(task, regs, *args)
        except GuestFault:
            ret = neg(E.EFAULT)
        if ret is not None:
            regs.rax = ret

    # ------------------------------------------------------------------ time
    @property
    def clock_ns(self) -> int:
        """The virtual clock: CLOCK_REALTIME in ns."""
        return self.clock.ns

    @clock_ns.setter
    def clock_ns(self, value: int) -> None:
        self.clock.ns = value

    def boot_clock_ns(self, advance: int = 0) -> int:
        """Nanoseconds since boot on the modeled clock (ftrace's timestamps), after moving
        it ``advance`` ns on: the one clock of the machine, shared with clock_gettime."""
        return self.clock.boot_clock_ns(advance)

    def next_poll_deadline_ns(self) -> int | None:
        """The earliest deadline of a sleeping poll, select, nanosleep or futex wait."""
        return self.timeouts.next_poll_deadline_ns()

    def next_timer_ns(self) -> int | None:
        """The earliest ITIMER_REAL expiry or rt_sigtimedwait deadline, or None."""
        live = [
            p.signal.real_timer[0]
            for p in self.m.processes
            if p.exit_result is None and p.signal.real_timer is not None
        ]
        waits = [t.sigwait[1] for t in self.m.tasks if t.state == "blocked" and t.sigwait and t.sigwait[1] is not None]
        return min(live + waits, default=None)

    def cpu_time_passes(self, insns: int) -> None:
        """A task ran ``insns`` instructions while others may sleep: the virtual clock
        moves INSN_NS per instruction, and the sleeps, rt_sigtimedwait timeouts and
        ITIMER_REAL timers due by then expire - a task spinning until a sleeping one
        wakes up lets it wake, as time passes on a real CPU."""
        if not insns:
            return
        self.clock.ns += insns * INSN_NS
        self.run_expired_timers()

    def run_expired_timers(self) -> None:
        """The sleeps, rt_sigtimedwait timeouts and ITIMER_REAL timers due on the
        clock as it is now expire (the timer interrupt's work)."""
        self.timeouts.expire_due()
        self.signal.expire_sigwaits()
        self.itimers.run_timers()

    def idle_wakeup(self) -> bool:
        """Every task sleeps: jump the virtual clock to the next timer expiry (as an
        idle CPU would wait for it) and fire it.  False when no timer is armed."""
        nxt = self.next_timer_ns()
        if nxt is None:
            return False
        self.clock.ns = max(self.clock.ns, nxt)
        fired = self.itimers.run_timers()
        return self.signal.expire_sigwaits() or fired

    def idle(self) -> bool:
        """Every task sleeps: a task reading the host's stdin waits for it (in wall
        time, until the next deadline); otherwise the virtual clock moves to the earliest
        deadline - a poll/select/nanosleep timeout, an ITIMER_REAL expiry or an
        rt_sigtimedwait timeout - and that sleeper is woken (as an idle CPU waits for the
        next timer interrupt).
        False when nothing is pending: the run ends as a deadlock."""
        poll_at, timer_at = self.next_poll_deadline_ns(), self.next_timer_ns()
        first = min((t for t in (poll_at, timer_at) if t is not None), default=None)
        if self.host_reads.wait_host_input(first):
            return True  # host input came before the next deadline
        if self.interrupted():
            return False
        if timer_at is not None and (poll_at is None or timer_at <= poll_at):
            return self.idle_wakeup() or self.timeouts.expire_timeouts()
        return self.timeouts.expire_timeouts() or self.idle_wakeup()

    def poll_host_waits(self, timeout_ms: int = 0) -> bool:
        """Complete the host stdin reads whose descriptor became readable."""
        return self.host_reads.poll_host_waits(timeout_ms)

    def interrupted(self) -> bool:
        """Must a waiting read give up?  The run's timeout fired (Unicorn's timer
        thread) or a stop / Ctrl-C was requested."""
        return self.m.interrupted()

    # ------------------------------------------------------------------ processes
    def child_exited(self, proc) -> None:
        """A child process died: the wait bookkeeping, then the parent's SIGCHLD."""
        self.exit.child_exited(proc)

    def task_exited(self, task) -> None:
        """A task died: CLONE_CHILD_CLEARTID, and exit_files after the last one."""
        self.exit.task_exited(task)

    def rlimits_of(self, proc) -> list[tuple[int, int]]:
        return self.rlimits.rlimits_of(proc)

    # ------------------------------------------------------------------ files
    def open_guest_path(self, task, path: str, flags: int):
        """The kernel-internal open (filp_open) of a guest path."""
        return self.open.open_guest_path(task, path, flags)

    def _initial_cwd(self, cwd: str | None) -> str:
        """The first process's working directory: ``cwd`` (a guest path, which must be
        a directory of the view), else the invoking process's when the guest can see it
        (as under strace or qemu-user), else ``/``."""
        explicit = cwd is not None
        if not explicit:
            try:
                cwd = self.vfs.guest_path_of_host(os.getcwd()) or "/"
            except OSError:
                cwd = "/"
        elif not isinstance(cwd, str) or not cwd.startswith("/"):
            raise InputError(f"cwd must be an absolute guest path, not {cwd!r}")
        with self.vfs.nameidata(self.m.task) as nd:
            stack = nd.start(cwd)
            if isinstance(stack, int) and not explicit:
                cwd, stack = "/", nd.root()
            if isinstance(stack, int):
                raise InputError(f"cwd {cwd!r} is not a directory of the guest's view")
            self.vfs.hold_cwd(self.m.main_process, stack[-1])
            return stack[-1].path

    def exe_view(self, path: str) -> str:
        """/proc/self/exe's text: the executable's path in the guest's view (d_path of
        the file, as the host would resolve it); a program the guest cannot see by
        name keeps the name it was given, made absolute; ``guest:NAME`` keeps its name."""
        if path.startswith("guest:"):
            return path
        return self.vfs.guest_path_of_host(path) or os.path.normpath("/" + path)

    def exe_target(self, path: str) -> str | int:
        """Where a walk through /proc/self/exe goes: the executable's guest path."""
        if path.startswith("guest:"):
            return -E.ENOENT
        return self.vfs.guest_path_of_host(path) or -E.ENOENT

    @property
    def mem(self):
        return self.m.mem

    def _stdio_table(self, stdin: bytes | int, stdio: str) -> FdTable:
        """The first process's fds 0-2.  ``stdin``: bytes (a pipe holding them, then end
        of file) or a host descriptor (duplicated; read lazily).  ``stdio`` "pipe": fds 1
        and 2 are pipes (the API default, deterministic); "host": they describe the
        host's own fds 1 and 2 (the CLI: a tty, a file or a pipe, as natively)."""
        if stdio not in ("pipe", "host"):
            raise InputError(f"stdio must be 'pipe' or 'host', not {stdio!r}")
        table = FdTable()
        if isinstance(stdin, int) and not isinstance(stdin, bool):
            try:
                table.install(HostInput(os.dup(stdin)))
            except OSError as e:
                if e.errno != E.EBADF:  # a closed host stdin is a closed fd 0
                    raise InputError(f"stdin descriptor {stdin}: {e.strerror}") from None
        else:
            table.install(PipeInput(bytes(stdin)))
        for which in (1, 2):
            table.install(OutputSink(self.m, which, host_fd=which if stdio == "host" else None, ino=3 + which), which)
        return table
