"""The Linux x86_64 syscall ABI and the ordinary syscalls a static guest needs.

Arguments come in rdi, rsi, rdx, r10, r8, r9; the result goes to rax (negative errno on
failure).  The machine has already done what the ``syscall`` instruction does (rcx, r11).
Only modeled syscalls exist: anything else returns -ENOSYS and is counted and reported by
number and name.  Guests see the host's files through a filesystem view: a read-only
sysroot, writable granted directories, modeled /proc (see :mod:`kernel_model.fs.namei`).  Descriptors and open files
are :mod:`kernel_model.fs.file` objects: a per-process table of refcounted descriptions.
"""

from __future__ import annotations

import errno as E
import os
import random
import struct


from kernel_model.errors import InputError
from kernel_model.fs.exec import ExecSyscalls
from kernel_model.fs.fd_syscalls import FdSyscalls
from kernel_model.fs.file import FdTable, HostInput, OpenFile, OutputSink, PipeInput
from kernel_model.fs.dev import DevFs
from kernel_model.fs.fs_syscalls import FsSyscalls
from kernel_model.kernel.sys import IdentitySyscalls
from kernel_model.kernel.resource import LimitSyscalls
from kernel_model.kernel.sys_pgrp import MiscSyscalls
from kernel_model.mm.mmap import MmSyscalls
from kernel_model.mm.mm_types import PAGE_SIZE, PROT_READ, PROT_WRITE, TASK_SIZE, GuestFault, MemoryLimitExceeded, page_up
from kernel_model.kernel.fork import ProcessSyscalls
from kernel_model.fs.proc.procfs import ProcFs
from kernel_model.kernel.signal import SignalSyscalls
from kernel_model.arch.x86.entry.syscall_64 import SYSCALL_NAMES
from kernel_model.fs.namei import EmptyDir, Vfs

MADV_DONTNEED = 4
# madvise_behavior_valid(): the advice values the kernel accepts
MADV_VALID = frozenset((0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                        23, 24, 25, 100, 101, 102, 103))
ARCH_SET_GS, ARCH_SET_FS, ARCH_GET_FS, ARCH_GET_GS = 0x1001, 0x1002, 0x1003, 0x1004
PER_LINUX32, PER_MASK = 0x0008, 0x00FF
DEFAULT_MEM_TOTAL = 4 << 30                        # the modeled machine's RAM (sysinfo)
CLOCK_EPOCH_NS = 1_767_225_600 * 1_000_000_000    # 2026-01-01T00:00:00Z
CLOCK_TICK_NS = 1_000                              # each clock read advances 1 us
COARSE_RES_NS = 4_000_000                          # CLOCK_*_COARSE resolution: one jiffy at HZ=250


def _neg(err: int) -> int:
    return -err


def _fd(value: int) -> int:
    """A descriptor argument as the kernel reads it: an unsigned int (a negative one
    matches no slot)."""
    return value & 0xFFFFFFFF


class Syscalls(MmSyscalls, SignalSyscalls, IdentitySyscalls, ProcessSyscalls, ExecSyscalls, FdSyscalls,
               FsSyscalls, MiscSyscalls, LimitSyscalls):
    """The syscall table of one machine.  ``register(nr, fn)`` adds or overrides an
    entry (the kernel model registers uretprobe/uprobe, 335/336)."""

    def __init__(self, machine, *, stdin: bytes | int = b"", sysroot: str = "/",
                 grant_dirs: list[str] | tuple = (), cwd: str | None = None, seed: int = 0,
                 stdio: str = "pipe", mem_total: int | None = None):
        self.m = machine
        mem_total = DEFAULT_MEM_TOTAL if mem_total is None else mem_total
        if not isinstance(mem_total, int) or mem_total < PAGE_SIZE:
            raise InputError(f"mem_total must be at least {PAGE_SIZE} bytes, not {mem_total!r}")
        machine.main_process.fds = self._stdio_table(stdin, stdio)   # before /dev: its terminal
        self.procfs, self.devfs = ProcFs(machine), DevFs(machine)
        self.vfs = Vfs(sysroot, grant_dirs, {"/proc": self.procfs.root, "/dev": self.devfs.root,
                                             "/sys": EmptyDir()})
        machine.main_process.cwd = self._initial_cwd(cwd)
        self.mem_total = mem_total
        self.rng = random.Random(seed)
        self.clock_ns = CLOCK_EPOCH_NS
        self.table: dict[int, callable] = {}
        for nr, name in SYSCALL_NAMES.items():
            fn = getattr(self, "sys_" + name, None)
            if fn is not None:
                self.table[nr] = fn

    def idle(self) -> bool:
        """Every task sleeps: a task reading the host's stdin waits for it (in wall
        time, until the next deadline); otherwise the virtual clock moves to the earliest
        deadline - a poll/select/nanosleep timeout, an ITIMER_REAL expiry or an
        rt_sigtimedwait timeout - and that sleeper is woken (as an idle CPU waits for the
        next timer interrupt).
        False when nothing is pending: the run ends as a deadlock."""
        poll_at, timer_at = self.next_poll_deadline_ns(), self.next_timer_ns()
        first = min((t for t in (poll_at, timer_at) if t is not None), default=None)
        if self.wait_host_input(first):
            return True                      # host input came before the next deadline
        if self.interrupted():
            return False
        if timer_at is not None and (poll_at is None or timer_at <= poll_at):
            return self.idle_wakeup() or self.expire_timeouts()
        return self.expire_timeouts() or self.idle_wakeup()

    def register(self, nr: int, fn) -> None:
        self.table[nr] = fn

    def unregister(self, nr: int) -> None:
        self.table.pop(nr, None)

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
            regs.rax = _neg(E.ENOSYS)
            return
        if args is None:
            args = (regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9)
        try:
            ret = fn(task, regs, *args)
        except GuestFault:
            ret = _neg(E.EFAULT)
        if ret is not None:
            regs.rax = ret

    def boot_clock_ns(self, advance: int = 0) -> int:
        """Nanoseconds since boot on the modeled clock (ftrace's timestamps), after moving
        it ``advance`` ns on: the one clock of the machine, shared with clock_gettime."""
        self.clock_ns += advance
        return self.clock_ns - CLOCK_EPOCH_NS

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

    # ------------------------------------------------------------------ helpers
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
                if e.errno != E.EBADF:      # a closed host stdin is a closed fd 0
                    raise InputError(f"stdin descriptor {stdin}: {e.strerror}") from None
        else:
            table.install(PipeInput(bytes(stdin)))
        for which in (1, 2):
            table.install(OutputSink(self.m, which, host_fd=which if stdio == "host" else None,
                                     ino=3 + which), which)
        return table

    def _file(self, task, fd: int) -> OpenFile | None:
        return task.process.fds.get(_fd(fd))

    def interrupted(self) -> bool:
        """Must a waiting read give up?  The run's timeout fired (Unicorn's timer
        thread) or a stop / Ctrl-C was requested."""
        return self.m.interrupted()

    # ------------------------------------------------------------------ process
    def sys_getpgid(self, task, regs, pid, *_):
        """getpgid: the group of the caller (pid 0) or of any guest process or thread."""
        pid &= 0xFFFFFFFF
        p = task.process if pid == 0 else self._process_by_pid(pid)
        if p == "thread":
            p = self._process_of_task(pid)
        return _neg(E.ESRCH) if p is None else p.pgid

    def sys_getpgrp(self, task, regs, *_):
        return task.process.pgid

    def sys_set_tid_address(self, task, regs, tidptr, *_):
        task.clear_child_tid = tidptr
        return task.tid

    def sys_set_robust_list(self, task, regs, head, length, *_):
        if length != 24:
            return _neg(E.EINVAL)
        task.robust_list = head
        return 0

    def sys_rseq(self, task, regs, rseq, length, flags, sig, *_):
        # Registration is accepted and remembered; restartable sequences are never
        # aborted because a single task is never preempted inside one.
        if flags & 1:  # RSEQ_FLAG_UNREGISTER
            task.rseq = 0
            return 0
        if task.rseq:
            return _neg(E.EBUSY)
        task.rseq = rseq
        return 0

    def sys_uname(self, task, regs, buf, *_):
        fields = [b"Linux", b"uprobe-emu", self.m.kernel.profile.release.encode() + b"-uprobe-emu",
                  b"#1 SMP PREEMPT_DYNAMIC", b"x86_64", b"(none)"]
        if task.process.personality & PER_MASK == PER_LINUX32:
            fields[4] = b"i686"                     # override_architecture
        self.mem.write_user(buf, b"".join(f.ljust(65, b"\0") for f in fields))
        return 0

    # ------------------------------------------------------------------ time / random
    def _tick(self) -> int:
        self.clock_ns += CLOCK_TICK_NS
        self.run_timers()                  # an ITIMER_REAL may expire as time passes
        return self.clock_ns

    def sys_clock_gettime(self, task, regs, clk, tp, *_):
        ns = self._tick()
        if clk not in (0, 1, 2, 3, 4, 5, 6, 7):
            return _neg(E.EINVAL)
        if clk != 0:
            ns -= CLOCK_EPOCH_NS  # monotonic-like clocks start at boot
        self.mem.write_user(tp, struct.pack("<qq", ns // 1_000_000_000, ns % 1_000_000_000))
        return 0

    def sys_clock_getres(self, task, regs, clk, res, *_):
        """posix_get_hrtimer_res: 1 ns for the high-resolution clocks, a jiffy (HZ=250)
        for the coarse ones; the clocks clock_gettime knows (the vDSO's fallback)."""
        if clk not in (0, 1, 2, 3, 4, 5, 6, 7):
            return _neg(E.EINVAL)
        if res:
            ns = COARSE_RES_NS if clk in (5, 6) else 1
            self.mem.write_user(res, struct.pack("<qq", 0, ns))
        return 0

    def sys_getcpu(self, task, regs, cpu, node, *_):
        """getcpu(): the machine has one CPU in one NUMA node."""
        for ptr in (cpu, node):
            if ptr:
                self.mem.write_user(ptr, struct.pack("<I", 0))
        return 0

    def sys_gettimeofday(self, task, regs, tv, tz, *_):
        ns = self._tick()
        if tv:
            self.mem.write_user(tv, struct.pack("<qq", ns // 1_000_000_000, (ns // 1000) % 1_000_000))
        if tz:
            self.mem.write_user(tz, b"\0" * 8)
        return 0

    def sys_time(self, task, regs, tloc, *_):
        secs = self._tick() // 1_000_000_000
        if tloc:
            self.mem.write_u64(tloc, secs)
        return secs

    def sys_getrandom(self, task, regs, buf, count, flags, *_):
        count = min(count, 1 << 25)
        self.mem.write_user(buf, self.rng.randbytes(count))
        return count

    # ------------------------------------------------------------------ memory
    def sys_brk(self, task, regs, addr, *_):
        """brk(): grow or shrink [heap]; any failure (a mapping in the way, past
        TASK_SIZE, the memory limit) leaves the break where it was (mm/mmap.c)."""
        proc = task.process
        if addr < proc.brk_start:
            return proc.brk
        old_top, new_top = page_up(proc.brk), page_up(addr)
        if new_top > TASK_SIZE:
            return proc.brk
        if new_top > old_top:
            if not self.mem.is_free(old_top, new_top):
                return proc.brk
            try:
                self.mem.map(old_top, new_top - old_top, PROT_READ | PROT_WRITE, "[heap]")
            except MemoryLimitExceeded:
                return proc.brk
        elif new_top < old_top:
            self.mem.unmap(new_top, old_top - new_top)
        proc.brk = addr
        return addr

    def sys_madvise(self, task, regs, addr, length, advice, *_):
        """madvise(): MADV_DONTNEED zeroes private anonymous pages (glibc's free relies
        on it); the other advice changes nothing the guest can see."""
        if advice not in MADV_VALID or addr & (PAGE_SIZE - 1):
            return _neg(E.EINVAL)
        end = page_up(addr + length)
        if length and end <= addr:
            return _neg(E.EINVAL)
        if end == addr:
            return 0
        if self.mem.mapped_bytes(addr, end) != end - addr:
            return _neg(E.ENOMEM)
        if advice == MADV_DONTNEED:
            self.mem.discard(addr, end - addr)
        return 0

    def sys_arch_prctl(self, task, regs, code, addr, *_):
        if code == ARCH_SET_FS:
            regs.fs_base = addr
        elif code == ARCH_SET_GS:
            regs.gs_base = addr
        elif code == ARCH_GET_FS:
            self.mem.write_u64(addr, regs.fs_base)
        elif code == ARCH_GET_GS:
            self.mem.write_u64(addr, regs.gs_base)
        else:
            return _neg(E.EINVAL)
        return 0

    # ------------------------------------------------------------------ descriptors
    def sys_close(self, task, regs, fd, *_):
        return task.process.fds.close(_fd(fd))

    def sys_ioctl(self, task, regs, fd, cmd, arg, *_):
        f = self._file(task, fd)
        if f is None:
            return _neg(E.EBADF)
        return f.ioctl(cmd & 0xFFFFFFFF, arg, self.mem)

    # ------------------------------------------------------------------ system
    def sys_sysinfo(self, task, regs, info, *_):
        """do_sysinfo: the modeled machine's memory (``mem_total``, no swap, free =
        total minus what the guest's processes have mapped), uptime on the virtual
        clock (rounded up), idle load, and the live tasks.  mem_unit is 1: on a 64-bit
        kernel the byte counts always fit (the kernel's 2.2-compatibility scaling)."""
        ns = self.clock_ns - CLOCK_EPOCH_NS
        uptime = ns // 1_000_000_000 + (1 if ns % 1_000_000_000 else 0)
        used = sum(v.size for mem in {id(p.mem): p.mem for p in self.m.processes
                                      if p.exit_result is None}.values() for v in mem.vmas)
        free = max(0, self.mem_total - used)
        procs = min(len(self.m.tasks), 0xFFFF)
        data = struct.pack("<q3Q6QHH4xQQI4x", uptime, 0, 0, 0, self.mem_total, free, 0, 0, 0, 0,
                           procs, 0, 0, 0, 1)
        self.mem.write_user(info, data)
        return 0
