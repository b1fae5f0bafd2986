"""The Linux x86_64 syscall ABI and the ordinary syscalls a static guest needs.

Arguments come in rdi, rsi, rdx, r10, r8, r9; the result goes to rax (negative errno on
failure).  The machine has already done what the ``syscall`` instruction does (rcx, r11).
Only modeled syscalls exist: anything else returns -ENOSYS and is counted and reported by
number and name.  Guests are sandboxed: no host file is reachable unless the user grants
a directory, and then only inside it (see :mod:`emu.grant`).  Descriptors and open files
are :mod:`emu.files` objects: a per-process table of refcounted descriptions.
"""

from __future__ import annotations

import errno as E
import os
import random
import struct


from .errors import InputError
from .fd_syscalls import FdSyscalls
from .files import FdTable, HostFile, HostInput, OpenFile, OutputSink, PipeInput, SeqFile, stat_bytes
from .grant import GrantedDir
from .identity_syscalls import IdentitySyscalls
from .memory import (MMAP_MIN_ADDR, PAGE_SIZE, PROT_EXEC, PROT_READ, PROT_WRITE, TASK_SIZE,
                     GuestFault, MemoryLimitExceeded, page_down, page_up)
from .process_syscalls import ProcessSyscalls
from .signal_syscalls import SignalSyscalls
from .syscall_names import SYSCALL_NAMES

MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS = 0x01, 0x02, 0x10, 0x20
MAP_FIXED_NOREPLACE = 0x100000
PROT_GROWSDOWN, PROT_GROWSUP = 0x01000000, 0x02000000
MADV_DONTNEED = 4
# madvise_behavior_valid(): the advice values the kernel accepts
MADV_VALID = frozenset((0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                        23, 24, 25, 100, 101, 102, 103))
ARCH_SET_GS, ARCH_SET_FS, ARCH_GET_FS, ARCH_GET_GS = 0x1001, 0x1002, 0x1003, 0x1004
AT_FDCWD = -100
O_ACCMODE, O_WRONLY, O_RDWR, O_CREAT, O_EXCL, O_TRUNC, O_APPEND, O_DIRECTORY = \
    3, 1, 2, 0o100, 0o200, 0o1000, 0o2000, 0o200000
AT_EMPTY_PATH = 0x1000
SEEK_MAX = 4                                       # SEEK_HOLE
MAX_RW_COUNT = 1 << 24                             # most bytes one write() copies (a short write)
DEFAULT_MEM_TOTAL = 4 << 30                        # the modeled machine's RAM (sysinfo)
CLOCK_EPOCH_NS = 1_767_225_600 * 1_000_000_000    # 2026-01-01T00:00:00Z
CLOCK_TICK_NS = 1_000                              # each clock read advances 1 us
RLIM_INFINITY = 0xFFFFFFFFFFFFFFFF
RLIMIT_STACK, RLIMIT_NOFILE = 3, 7


def _neg(err: int) -> int:
    return -err


def _fd(value: int) -> int:
    """A descriptor argument as the kernel reads it: an unsigned int (a negative one
    matches no slot)."""
    return value & 0xFFFFFFFF


def _off(value: int) -> int:
    """An loff_t argument: signed 64-bit."""
    return value - (1 << 64) if value >> 63 else value


def guest_exe_view(path: str) -> str:
    """/proc/self/exe as the guest sees it: the executable's path as the user named
    it, made absolute against the guest's working directory ``/`` (never the host's
    working directory); a built-in ``guest:NAME`` has no path and keeps its name."""
    if path.startswith("guest:"):
        return path
    return os.path.normpath("/" + path) if not path.startswith("/") else os.path.normpath(path)


class Syscalls(SignalSyscalls, IdentitySyscalls, ProcessSyscalls, FdSyscalls):
    """The syscall table of one machine.  ``register(nr, fn)`` adds or overrides an
    entry (the kernel model registers uretprobe/uprobe, 335/336)."""

    def __init__(self, machine, *, stdin: bytes | int = b"", grant_dir: str | None = None, seed: int = 0,
                 stdio: str = "pipe", mem_total: int | None = None):
        self.m = machine
        mem_total = DEFAULT_MEM_TOTAL if mem_total is None else mem_total
        if not isinstance(mem_total, int) or mem_total < PAGE_SIZE:
            raise InputError(f"mem_total must be at least {PAGE_SIZE} bytes, not {mem_total!r}")
        self.grant = GrantedDir(grant_dir) if grant_dir else None
        self.grant_dir = self.grant.root if self.grant else None
        self.mem_total = mem_total
        machine.main_process.fds = self._stdio_table(stdin, stdio)
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
    def dispatch(self, task, regs) -> None:
        nr = regs.rax
        fn = self.table.get(nr)
        if fn is None:
            name = SYSCALL_NAMES.get(nr, "?")
            self.m.counters.unknown_syscalls[f"{nr}:{name}"] += 1
            regs.rax = _neg(E.ENOSYS)
            return
        v = regs._v                         # rdi, rsi, rdx, r10, r8, r9 (see regs.GPR_NAMES)
        args = (v[5], v[4], v[3], v[10], v[8], v[9])
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
        if pid in (0, task.process.pid):
            return task.process.pgid
        return _neg(E.ESRCH)

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
        self.mem.write_user(buf, b"".join(f.ljust(65, b"\0") for f in fields))
        return 0

    def sys_prlimit64(self, task, regs, pid, resource, new, old, *_):
        if old:
            cur = (8 << 20, RLIM_INFINITY) if resource == RLIMIT_STACK else \
                  (1024, 4096) if resource == RLIMIT_NOFILE else (RLIM_INFINITY, RLIM_INFINITY)
            self.mem.write_user(old, struct.pack("<QQ", *cur))
        return 0

    def sys_getrlimit(self, task, regs, resource, old, *_):
        return self.sys_prlimit64(task, regs, 0, resource, 0, old)

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

    def sys_mmap(self, task, regs, addr, length, prot, flags, fd, off):
        """do_mmap's checks in the kernel's order, for anonymous private mappings."""
        if off & (PAGE_SIZE - 1):
            return _neg(E.EINVAL)
        if length == 0:
            return _neg(E.EINVAL)
        length = page_up(length)
        if length > TASK_SIZE:
            return _neg(E.ENOMEM)                # PAGE_ALIGN wrapped, or larger than user space
        if prot & ~(PROT_READ | PROT_WRITE | PROT_EXEC):
            return _neg(E.EINVAL)
        if not flags & MAP_ANONYMOUS:
            return _neg(E.EACCES)   # file mappings are not modeled: the guest is sandboxed
        if flags & MAP_SHARED:
            return _neg(E.EINVAL)   # only anonymous private mappings are modeled
        if flags & (MAP_FIXED | MAP_FIXED_NOREPLACE):
            if addr & (PAGE_SIZE - 1):
                return _neg(E.EINVAL)
            if addr > TASK_SIZE - length:
                return _neg(E.ENOMEM)
            if addr < MMAP_MIN_ADDR:
                return _neg(E.EPERM)             # security_mmap_addr: below vm.mmap_min_addr
            if flags & MAP_FIXED_NOREPLACE and not self.mem.is_free(addr, addr + length):
                return _neg(E.EEXIST)
            where = addr
        else:
            where = self.mem.get_unmapped_area(length, hint=addr or None)
            if where is None:
                return _neg(E.ENOMEM)
        try:
            self.mem.map(where, length, prot, "")
        except MemoryLimitExceeded:
            return _neg(E.ENOMEM)
        return where

    def sys_munmap(self, task, regs, addr, length, *_):
        """do_vmi_munmap: special mappings ([uprobes], the trampoline) can be unmapped
        too, as on the host kernel (they are not sealed without
        CONFIG_MSEAL_SYSTEM_MAPPINGS)."""
        if addr & (PAGE_SIZE - 1) or addr > TASK_SIZE or length > TASK_SIZE - addr:
            return _neg(E.EINVAL)
        length = page_up(length)
        if length == 0:
            return _neg(E.EINVAL)
        self.mem.unmap(addr, length)
        return 0

    def sys_mprotect(self, task, regs, addr, length, prot, *_):
        """do_mprotect_pkey: EACCES when a mapping would gain a permission outside its
        VM_MAY* bits (the kernel's answer for [uprobes] made readable or writable, and
        for [uprobes-trampoline] made writable)."""
        if addr & (PAGE_SIZE - 1):
            return _neg(E.EINVAL)
        if prot & ~(PROT_READ | PROT_WRITE | PROT_EXEC | PROT_GROWSDOWN | PROT_GROWSUP):
            return _neg(E.EINVAL)
        prot &= PROT_READ | PROT_WRITE | PROT_EXEC
        if length == 0:
            return 0
        end = page_up(addr + length)
        if end <= addr or end > 1 << 64:
            return _neg(E.ENOMEM)
        if not self.mem.may_protect(addr, end - addr, prot):
            return _neg(E.EACCES)
        return 0 if self.mem.protect(addr, end - addr, prot) else _neg(E.ENOMEM)

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

    # ------------------------------------------------------------------ I/O
    def sys_read(self, task, regs, fd, buf, count, *_):
        f = self._file(task, fd)
        if f is None or not f.readable:
            return _neg(E.EBADF)
        if f.is_pipe:
            return self.pipe_read(task, f, buf, min(count, MAX_RW_COUNT))
        if isinstance(f, HostInput):
            return self.host_read(task, f, buf, min(count, MAX_RW_COUNT))     # may sleep
        data = f.read(min(count, MAX_RW_COUNT), self.interrupted)
        if isinstance(data, int):
            return data
        if data:
            self.mem.write_user(buf, data)
        return len(data)

    def sys_write(self, task, regs, fd, buf, count, *_):
        f = self._file(task, fd)
        if f is None or not f.writable:
            return _neg(E.EBADF)
        if count == 0:
            return 0
        data = self.mem.read_user(buf, min(count, MAX_RW_COUNT))
        return self.pipe_write(task, f, data) if f.is_pipe else f.write(data)

    def sys_writev(self, task, regs, fd, iov, iovcnt, *_):
        f = self._file(task, fd)
        if f is None or not f.writable:
            return _neg(E.EBADF)
        if iovcnt > 1024:
            return _neg(E.EINVAL)
        data = bytearray()
        for i in range(iovcnt):
            base, ln = struct.unpack("<QQ", self.mem.read_user(iov + 16 * i, 16))
            if ln >> 63:
                return _neg(E.EINVAL)
            ln = min(ln, MAX_RW_COUNT - len(data))
            if ln:
                data += self.mem.read_user(base, ln)
        if not data:
            return 0
        return self.pipe_write(task, f, bytes(data)) if f.is_pipe else f.write(bytes(data))

    def sys_pread64(self, task, regs, fd, buf, count, off, *_):
        f = self._file(task, fd)
        if f is None:
            return _neg(E.EBADF)
        if _off(off) < 0:
            return _neg(E.EINVAL)
        data = f.pread(min(count, MAX_RW_COUNT), _off(off))
        if isinstance(data, int):
            return data
        if data:
            self.mem.write_user(buf, data)
        return len(data)

    def sys_lseek(self, task, regs, fd, off, whence, *_):
        f = self._file(task, fd)
        if f is None:
            return _neg(E.EBADF)
        if whence & 0xFFFFFFFF > SEEK_MAX:
            return _neg(E.EINVAL)
        return f.lseek(_off(off), whence)

    def sys_close(self, task, regs, fd, *_):
        return task.process.fds.close(_fd(fd))

    def sys_ioctl(self, task, regs, fd, cmd, arg, *_):
        f = self._file(task, fd)
        if f is None:
            return _neg(E.EBADF)
        return f.ioctl(cmd & 0xFFFFFFFF, arg, self.mem)

    def sys_fstat(self, task, regs, fd, statbuf, *_):
        f = self._file(task, fd)
        if f is None:
            return _neg(E.EBADF)
        st = f.fstat()
        if isinstance(st, int):
            return st
        self.mem.write_user(statbuf, st)
        return 0

    def sys_newfstatat(self, task, regs, dirfd, path, statbuf, flags, *_):
        name = self.mem.read_cstring(path) if path else b""
        if name == b"" and flags & AT_EMPTY_PATH:
            return self.sys_fstat(task, regs, dirfd, statbuf)
        rel = self._granted(task, dirfd, name)
        if isinstance(rel, int):
            return rel
        st = self.grant.stat(rel)
        if isinstance(st, int):
            return st
        self.mem.write_user(statbuf, stat_bytes(st.st_mode, size=st.st_size, ino=st.st_ino,
                                                nlink=st.st_nlink))
        return 0

    def sys_readlink(self, task, regs, path, buf, size, *_):
        return self._readlink(task, self.mem.read_cstring(path), buf, size)

    def sys_readlinkat(self, task, regs, dirfd, path, buf, size, *_):
        return self._readlink(task, self.mem.read_cstring(path), buf, size)

    def _readlink(self, task, name: bytes, buf: int, size: int) -> int:
        if size & 0xFFFFFFFF == 0 or (size & 0xFFFFFFFF) >> 31:
            return _neg(E.EINVAL)
        if name in (b"/proc/self/exe", b"/proc/%d/exe" % task.process.pid):
            target = guest_exe_view(task.process.exe_path).encode()[:size]
            self.mem.write_user(buf, target)
            return len(target)
        return _neg(E.ENOENT)

    # ------------------------------------------------------------------ sandboxed files
    def _granted(self, task, dirfd: int, name: bytes) -> str | int:
        """The guest path as a path relative to the granted root, or an errno: no grant
        (EACCES), an empty name (ENOENT), a bad directory descriptor (EBADF/ENOTDIR)."""
        if self.grant is None:
            return _neg(E.EACCES)
        if name == b"":
            return _neg(E.ENOENT)
        text = os.fsdecode(name)
        base = ""
        if not text.startswith("/") and _fd(dirfd) != _fd(AT_FDCWD):
            d = self._file(task, dirfd)
            if d is None:
                return _neg(E.EBADF)
            if not isinstance(d, HostFile) or not d.is_dir:
                return _neg(E.ENOTDIR)
            base = d.guest_path
        return self.grant.guest_relative(text, base)

    def sys_openat(self, task, regs, dirfd, path, flags, mode, *_):
        name = self.mem.read_cstring(path)
        if name in (b"/proc/self/maps", b"/proc/%d/maps" % task.process.pid):
            return self._open_maps(task, flags)
        rel = self._granted(task, dirfd, name)
        if isinstance(rel, int):
            return rel
        allowed = O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC | O_APPEND | O_DIRECTORY
        acc = flags & O_ACCMODE
        if acc == O_ACCMODE:
            return _neg(E.EINVAL)
        hfd = self.grant.open(rel, flags & allowed, mode & 0o777)
        if hfd < 0:
            return hfd
        return task.process.fds.install(HostFile(hfd, rel, acc), 0)

    def sys_open(self, task, regs, path, flags, mode, *_):
        return self.sys_openat(task, regs, AT_FDCWD, path, flags, mode)

    def _open_maps(self, task, flags: int) -> int:
        """/proc/self/maps (proc_pid_maps_operations): a read-only seq_file, mode 0444,
        so the unprivileged guest cannot open it for writing."""
        if flags & O_ACCMODE != 0:
            return _neg(E.EACCES)
        f = SeqFile(self.mem.maps().encode(), ino=0x1000 + task.process.pid)
        return task.process.fds.install(f, 0)

    def sys_access(self, task, regs, path, mode, *_):
        rel = self._granted(task, AT_FDCWD, self.mem.read_cstring(path))
        if isinstance(rel, int):
            return rel
        st = self.grant.stat(rel)
        if isinstance(st, int):
            return st
        if mode & 1 and not st.st_mode & 0o111:      # X_OK
            return _neg(E.EACCES)
        return 0

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
