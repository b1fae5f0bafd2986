"""The small syscalls of kernel/sys.c: uname, umask, prctl's task name, getrusage,
times, sysinfo, getcpu (the task's CPU), the pid getters, and process groups and sessions
(setpgid/getpgid/getpgrp/getsid/setsid).

Sessions: ``Process.sid`` holds the session id as a guest pid; the first process's
session leader is the invoking shell, outside the guest's pid namespace, so its sid is 0
(what ``pid_vnr`` answers for a pid the namespace cannot see).  A process is a session
leader (``signal->leader``) when its sid is its own pid.
"""

from __future__ import annotations

import errno as E
import struct

from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import int_arg, syscall
from kernel_model.kernel.pid import find_process_by_vpid, process_of_tid

PER_LINUX32, PER_MASK = 0x0008, 0x00FF
TASK_COMM_LEN = 16
PR_SET_NAME, PR_GET_NAME = 15, 16
USER_HZ = 100  # clock_t ticks per second (times, AT_CLKTCK)
HZ = 250  # the modeled kernel's tick (Debian's CONFIG_HZ)
TICK_NSEC = 1_000_000_000 // HZ
INITIAL_JIFFIES = (1 << 32) - 300 * HZ  # jiffies wrap 5 minutes after boot (linux/jiffies.h)
RUSAGE_SELF, RUSAGE_CHILDREN, RUSAGE_THREAD = 0, -1, 1
RUSAGE_SIZE = 144  # sizeof(struct rusage)
TMS_SIZE = 32  # sizeof(struct tms)


class SysSyscalls:
    """uname, umask, prctl, usage and the ids of processes, groups and sessions."""

    def __init__(self, sc):
        self.m = sc.m
        self.clock = sc.clock
        self.mem_total = sc.mem_total

    @syscall(63, "uname")
    def sys_uname(self, task, regs, buf, *_):
        fields = [
            b"Linux",
            b"uprobe-emu",
            self.m.kernel.profile.release.encode() + b"-uprobe-emu",
            b"#1 SMP PREEMPT_DYNAMIC",
            b"x86_64",
            b"(none)",
        ]
        if task.process.personality & PER_MASK == PER_LINUX32:
            fields[4] = b"i686"  # override_architecture
        self.m.mem.write_user(buf, b"".join(f.ljust(65, b"\0") for f in fields))
        return 0

    @syscall(95, "umask")
    def sys_umask(self, task, regs, mask, *_):
        old, task.process.fs.umask = task.process.fs.umask, mask & 0o777
        return old

    @syscall(157, "prctl", partial="PR_SET_NAME and PR_GET_NAME; other options are ENOSYS, counted as prctl(N)")
    def sys_prctl(self, task, regs, option, arg2, *_):
        """PR_SET_NAME/PR_GET_NAME on the calling thread's ``comm`` (TASK_COMM_LEN 16:
        15 bytes and a NUL; a name that is not UTF-8 reads back with U+FFFD).  Other options are not modeled: ENOSYS,
        counted as
        ``prctl(N)`` among the unknown syscalls."""
        option = int_arg(option)
        if option == PR_SET_NAME:
            raw = self.m.mem.read_cstring(arg2, TASK_COMM_LEN - 1)[: TASK_COMM_LEN - 1]
            task.comm = raw.decode("utf-8", "replace")
            return 0
        if option == PR_GET_NAME:
            name = task.comm.encode("utf-8")[: TASK_COMM_LEN - 1]
            self.m.mem.write_user(arg2, name.ljust(TASK_COMM_LEN, b"\0"))
            return 0
        self.m.counters.unknown_syscalls[f"157:prctl({option})"] += 1
        return neg(E.ENOSYS)

    @syscall(98, "getrusage", partial="every field is 0 (no CPU time accounting)")
    def sys_getrusage(self, task, regs, who, ru, *_):
        """getrusage: the model keeps no CPU time, page faults or context switches of
        its own (no per-instruction accounting on the hot path), so every field is 0
        for RUSAGE_SELF, RUSAGE_CHILDREN and RUSAGE_THREAD alike."""
        if int_arg(who) not in (RUSAGE_SELF, RUSAGE_CHILDREN, RUSAGE_THREAD):
            return neg(E.EINVAL)
        self.m.mem.write_user(ru, bytes(RUSAGE_SIZE))
        return 0

    @syscall(100, "times", partial="the tms fields are 0; the result is the virtual clock's uptime")
    def sys_times(self, task, regs, buf, *_):
        """times: the tms fields (user/system time of the process and its children) are
        0 as in getrusage; the result is jiffies_64_to_clock_t(get_jiffies_64()): the
        jiffies of the virtual clock's uptime, counted from INITIAL_JIFFIES, in USER_HZ
        ticks."""
        if buf:
            self.m.mem.write_user(buf, bytes(TMS_SIZE))
        jiffies = INITIAL_JIFFIES + self.clock.boot_clock_ns() // TICK_NSEC
        return jiffies * TICK_NSEC // (1_000_000_000 // USER_HZ)

    @syscall(99, "sysinfo", partial="load averages are 0, no swap")
    def sys_sysinfo(self, task, regs, info, *_):
        """do_sysinfo: the modeled machine's memory (``mem_total``, no swap, free =
        total minus what the guest's processes have mapped), uptime on the virtual
        clock (rounded up), idle load, and the live tasks.  mem_unit is 1: on a 64-bit
        kernel the byte counts always fit (the kernel's 2.2-compatibility scaling)."""
        ns = self.clock.ns - self.clock.boot_ns
        uptime = ns // 1_000_000_000 + (1 if ns % 1_000_000_000 else 0)
        used = sum(
            v.size
            for mem in {id(p.mem): p.mem for p in self.m.processes if p.exit_result is None}.values()
            for v in mem.vmas
        )
        free = max(0, self.mem_total - used)
        procs = min(len(self.m.tasks), 0xFFFF)
        data = struct.pack("<q3Q6QHH4xQQI4x", uptime, 0, 0, 0, self.mem_total, free, 0, 0, 0, 0, procs, 0, 0, 0, 1)
        self.m.mem.write_user(info, data)
        return 0

    @syscall(309, "getcpu")
    def sys_getcpu(self, task, regs, cpu, node, *_):
        """getcpu(): the CPU the task runs on (``raw_smp_processor_id()``), in NUMA
        node 0, the machine's one node."""
        for ptr, value in ((cpu, task.cpu), (node, 0)):
            if ptr:
                self.m.mem.write_user(ptr, struct.pack("<I", value))
        return 0

    @syscall(39, "getpid")
    def sys_getpid(self, task, regs, *_):
        return task.process.pid

    @syscall(186, "gettid")
    def sys_gettid(self, task, regs, *_):
        return task.tid

    @syscall(110, "getppid")
    def sys_getppid(self, task, regs, *_):
        return task.process.ppid

    @syscall(121, "getpgid")
    def sys_getpgid(self, task, regs, pid, *_):
        """getpgid: the group of the caller (pid 0) or of any guest process or thread."""
        pid &= 0xFFFFFFFF
        p = task.process if pid == 0 else find_process_by_vpid(self.m, pid)
        if p == "thread":
            p = process_of_tid(self.m, pid)
        return neg(E.ESRCH) if p is None else p.pgid

    @syscall(111, "getpgrp")
    def sys_getpgrp(self, task, regs, *_):
        return task.process.pgid

    @syscall(109, "setpgid")
    def sys_setpgid(self, task, regs, pid, pgid, *_):
        """kernel/sys.c setpgid: only the caller or one of its children, never a session
        leader, and only into a group of the caller's session."""
        me = task.process
        pid, pgid = int_arg(pid) or me.pid, int_arg(pgid)
        pgid = pgid or pid
        if pgid < 0:
            return -E.EINVAL
        p = find_process_by_vpid(self.m, pid)
        if p is None:
            return -E.ESRCH
        if p == "thread":
            return -E.EINVAL
        if p.parent is me:
            if p.sid != me.sid:
                return -E.EPERM
            # (EACCES for a child that has exec'd: there is no execve)
        elif p is not me:
            return -E.ESRCH
        if p.sid == p.pid:
            return -E.EPERM
        if pgid != pid and not any(g.pgid == pgid and g.sid == me.sid for g in self.m.processes):
            return -E.EPERM
        p.pgid = pgid
        return 0

    @syscall(124, "getsid")
    def sys_getsid(self, task, regs, pid, *_):
        """The session of the caller (pid 0) or of any task's process."""
        pid = int_arg(pid)
        p = task.process if pid == 0 else find_process_by_vpid(self.m, pid)
        if p == "thread":
            p = process_of_tid(self.m, pid)
        return -E.ESRCH if p is None else p.sid

    @syscall(112, "setsid")
    def sys_setsid(self, task, regs, *_):
        """ksys_setsid: not for a session leader, nor when a process group with the
        caller's pid exists (it would then lead a group it is not in)."""
        me = task.process
        if me.sid == me.pid or any(p.pgid == me.pid for p in self.m.processes):
            return -E.EPERM
        me.sid = me.pgid = me.pid
        return me.pid
