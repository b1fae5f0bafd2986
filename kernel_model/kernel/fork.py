"""Process and thread syscalls: clone, fork, vfork, exit, wait4, futex, sched_yield
(nanosleep lives with the timers in :mod:`kernel_model.kernel.signal`).

A mixin of :class:`kernel_model.kernel.syscalls.Syscalls`.  fork gives the child a copy of the address
space (its own Unicorn instance), minus the mappings the kernel marks VM_DONTCOPY (the
[uprobes] XOL page; the [uprobes-trampoline] page on 6.18-7.1); threads (CLONE_VM) share
the process; vfork shares the address space and suspends the parent until the child
exits.  Sleeping syscalls block the task and the scheduler runs another one.  Descriptor
tables follow copy_files/exit_files (:class:`kernel_model.fs.file.FdTable`).
"""

from __future__ import annotations

import errno as E
import struct

from kernel_model.trace.events import Clone
from kernel_model.fs.file import FdTable
from kernel_model.kernel.counters import Counters
from kernel_model.kernel.task import Process, Task
from kernel_model.mm.mm_types import MemoryLimitExceeded

CLONE_VM, CLONE_FS, CLONE_FILES, CLONE_SIGHAND = 0x100, 0x200, 0x400, 0x800
CLONE_VFORK, CLONE_PARENT, CLONE_THREAD = 0x4000, 0x8000, 0x10000
CLONE_SETTLS, CLONE_PARENT_SETTID, CLONE_CHILD_CLEARTID = 0x80000, 0x100000, 0x200000
CLONE_CHILD_SETTID = 0x1000000
SIGCHLD = 17
WNOHANG = 1
WSTOPPED, WEXITED, WCONTINUED, WNOWAIT = 2, 4, 8, 0x01000000
P_ALL, P_PID, P_PGID = 0, 1, 2
CLD_EXITED, CLD_KILLED = 1, 2
FUTEX_WAIT, FUTEX_WAKE, FUTEX_WAIT_BITSET, FUTEX_WAKE_BITSET = 0, 1, 9, 10
FUTEX_CMD_MASK = ~(128 | 256)          # FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME
FUTEX_CLOCK_REALTIME = 256
ERESTARTSYS, ERESTART_RESTARTBLOCK = 512, 516   # a signal interrupted the wait (include/linux/errno.h)
NSEC = 1_000_000_000
CLOCK_EPOCH_NS = 1_767_225_600 * NSEC    # kernel_model.kernel.syscalls' CLOCK_REALTIME at boot (CLOCK_MONOTONIC 0)


def _neg(err: int) -> int:
    return -err


def pid_t(value: int) -> int:
    """A pid argument as the kernel reads it: a signed 32-bit int."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >> 31 else value


class ProcessSyscalls:
    """clone/fork/vfork/exit/wait4/futex on the machine's tasks."""

    # -- creation -------------------------------------------------------------------
    def sys_fork(self, task, regs, *_):
        return self._clone(task, regs, SIGCHLD, 0, 0, 0, 0)

    def sys_vfork(self, task, regs, *_):
        return self._clone(task, regs, CLONE_VM | CLONE_VFORK | SIGCHLD, 0, 0, 0, 0)

    def sys_clone(self, task, regs, flags, stack, ptid, ctid, tls, *_):
        return self._clone(task, regs, flags, stack, ptid, ctid, tls)

    def sys_clone3(self, task, regs, *_):
        return _neg(E.ENOSYS)              # glibc falls back to clone()

    def _clone(self, task, regs, flags, stack, ptid, ctid, tls):
        m = self.m
        parent = task.process
        thread = bool(flags & CLONE_THREAD)
        if thread and not flags & CLONE_VM:
            return _neg(E.EINVAL)
        if thread:
            child_proc = parent
        elif flags & CLONE_VM:
            child_proc = m.new_process(comm=task.comm, share_mm=parent, parent=parent)
            self._inherit(parent, child_proc, flags)
        else:
            child_proc = m.new_process(comm=task.comm, parent=parent)
            self._inherit(parent, child_proc, flags)
            try:
                self._copy_mm(parent, child_proc)
            except MemoryLimitExceeded:
                child_proc.fds.put()               # the copied fd table goes with the child
                m.discard_process(child_proc)
                return _neg(E.ENOMEM)          # dup_mmap past the memory limit
        if not thread:
            child_proc.exit_signal = flags & 0xFF      # CSIGNAL: SIGCHLD for fork/vfork
        child = m.new_task(child_proc, comm=task.comm, cred=task.cred)   # dup_task_struct, copy_creds
        child.sigmask = task.sigmask                # copy_process: the blocked mask is inherited
        if not flags & CLONE_VM or flags & CLONE_VFORK:
            child.sigaltstack = task.sigaltstack    # a new thread starts without one
        # the child resumes after the syscall with rax = 0 (the parent's regs otherwise)
        cregs = regs.copy()
        cregs.rax = 0
        if stack:
            cregs.rsp = stack
        if flags & CLONE_SETTLS:
            cregs.fs_base = tls
        cregs.orig_rax = -1
        self._set_child_context(task, child, cregs)
        if flags & CLONE_PARENT_SETTID and ptid:
            parent.mem.write_user(ptid, struct.pack("<I", child.tid))
        if flags & CLONE_CHILD_SETTID and ctid:
            child_proc.mem.write_user(ctid, struct.pack("<I", child.tid))
        if flags & CLONE_CHILD_CLEARTID:
            child.clear_child_tid = ctid
        m.kernel.copy_process(task, child, share_mm=bool(flags & CLONE_VM),
                              vfork=bool(flags & CLONE_VFORK))
        if flags & CLONE_VFORK:
            child_proc.vfork_parent_task = task     # the parent sleeps until the child exits
            task.vfork_child_tid = child.tid
            m.block(task, "vfork")
        if m.events:
            m.events.publish(Clone(task, child, flags))
        m.yield_cpu()                    # reschedule: the child may run first
        return child.tid

    def _inherit(self, parent, child, flags: int = 0) -> None:
        child.exe, child.exe_path = parent.exe, parent.exe_path
        child.files = list(parent.files)
        child.brk_start, child.brk = parent.brk_start, parent.brk
        child.sigactions = dict(parent.sigactions)
        child.cwd, child.umask = parent.cwd, parent.umask       # copy_fs (CLONE_FS not modeled)
        child.rlimits = None if parent.rlimits is None else list(parent.rlimits)   # copy_signal
        child.personality = parent.personality
        child.pgid, child.sid = parent.pgid, parent.sid         # copy_process: the parent's group and session
        for f in ("start_stack", "arg_start", "arg_end", "env_start", "env_end"):   # dup_mm
            setattr(child, f, getattr(parent, f))
        # copy_files: CLONE_FILES shares the table, otherwise dup_fd copies it and every
        # open file description gains a reference (closing one side leaves the other)
        child.fds = parent.fds.share() if flags & CLONE_FILES else parent.fds.fork()

    def _copy_mm(self, parent, child) -> None:
        """dup_mmap: every mapping but the VM_DONTCOPY ones, with the parent's bytes
        (breakpoints and optimized sites included)."""
        m = self.m
        for vma in parent.mem.vmas:
            if m.kernel.vma_dontcopy(vma):
                continue
            new = child.mem.map(vma.start, vma.size, vma.prot, vma.name, file=vma.file,
                                pgoff=vma.pgoff, special=vma.special, mayprot=vma.mayprot)
            child.mem.copy_pages_from(parent.mem, vma.start, vma.end)
            new.flags, new.shared = set(vma.flags), vma.shared
        m.kernel.dup_mmap(parent, child)

    def _set_child_context(self, parent_task, child, cregs) -> None:
        """The child's CPU state: the parent's, with the child's differences."""
        self.m.init_task_context(child, cregs)

    # -- exit and wait ------------------------------------------------------------------
    def sys_exit(self, task, regs, code, *_):
        proc = task.process
        live = [t for t in proc.tasks if t.state != "dead"]
        if len(live) <= 1:
            self.m.exit_group(code & 0xFF, task)
            return None
        self.m.task_exit(task)          # the machine leaves emu_start for the next task
        return None

    def sys_exit_group(self, task, regs, code, *_):
        self.m.exit_group(code & 0xFF, task)

    def task_exited(self, task) -> None:
        """CLONE_CHILD_CLEARTID: zero the tid word and wake one futex waiter."""
        if task.clear_child_tid and task.process.exit_result is None:
            try:
                task.process.mem.write_user(task.clear_child_tid, b"\0\0\0\0")
            except Exception:   # noqa: BLE001 - a bad pointer is the guest's problem
                pass
            self._futex_wake(task.process, task.clear_child_tid, 1)
        task.process.tasks = [t for t in task.process.tasks if t.state != "dead"] or task.process.tasks
        if all(t.state == "dead" for t in task.process.tasks):
            self._exit_files(task.process)

    def _exit_files(self, proc) -> None:
        """exit_files: the last task of a process drops its descriptor table (its open
        files lose a reference each; shared ones stay open for the others)."""
        table, proc.fds = proc.fds, FdTable()
        if isinstance(table, FdTable):
            table.put()

    def child_exited(self, proc) -> None:
        """A child process died: a vfork parent resumes, a waiting parent is woken."""
        if proc.vfork_parent_task is not None:
            ptask = proc.vfork_parent_task
            proc.vfork_parent_task = None
            self.m.wake(ptask, getattr(ptask, "vfork_child_tid", proc.pid))
        parent = proc.parent
        if parent is None:
            return
        for t in parent.tasks:
            if t.state == "blocked" and t.blocked_on == "wait4":
                res = self._reap(t, parent, t.wait_args)
                if res is not None:
                    self.m.wake(t, res)
            elif t.state == "blocked" and t.blocked_on == "waitid":
                if self._waitid_reap(parent, *t.wait_args):
                    self.m.wake(t, 0)

    def _status_word(self, result) -> int:
        if result.reason == "exit":
            return (result.exit_code & 0xFF) << 8
        return result.signal & 0x7F

    def _reap(self, task, parent, args) -> int | None:
        pid, status_ptr = args
        for child in parent.children:
            if child.exit_result is None:
                continue
            if pid not in (-1, 0) and child.pid != pid:
                continue
            if status_ptr:
                parent.mem.write_user(status_ptr, struct.pack("<i", self._status_word(child.exit_result)))
            parent.children.remove(child)
            if child in self.m.processes:
                self.m.processes.remove(child)
            return child.pid
        return None

    def sys_wait4(self, task, regs, pid, status, options, rusage, *_):
        pid = pid_t(pid)
        parent = task.process
        if not any(pid in (-1, 0) or c.pid == pid for c in parent.children):
            return _neg(E.ECHILD)
        res = self._reap(task, parent, (pid, status))
        if res is not None:
            return res
        if options & WNOHANG:
            return 0
        task.wait_args = (pid, status)
        self.m.block(task, "wait4", interrupt=_neg(ERESTARTSYS))        # do_wait
        return None

    def sys_waitid(self, task, regs, idtype, id_, infop, options, rusage, *_):
        """kernel_waitid: P_ALL / P_PID / P_PGID children that exited (WEXITED; stopped
        and continued children are not modeled), their siginfo in ``infop``; WNOHANG
        with none ready zeroes it and returns 0; WNOWAIT leaves the zombie."""
        if options & ~(WNOHANG | WEXITED | WSTOPPED | WCONTINUED | WNOWAIT | 0xE0000000) \
                or not options & (WEXITED | WSTOPPED | WCONTINUED) or idtype not in (P_ALL, P_PID, P_PGID):
            return _neg(E.EINVAL)
        id_ = pid_t(id_)
        if idtype != P_ALL and id_ <= 0:
            return _neg(E.EINVAL)
        args = (idtype, id_, infop, options)
        if not [c for c in task.process.children if self._waitid_match(c, idtype, id_)]:
            return _neg(E.ECHILD)
        if self._waitid_reap(task.process, *args):
            return 0
        if options & WNOHANG:
            if infop:
                task.process.mem.write_user(infop, b"\0" * 12)        # si_signo, si_errno, si_code
                task.process.mem.write_user(infop + 16, b"\0" * 12)   # si_pid, si_uid, si_status
            return 0
        task.wait_args = args
        self.m.block(task, "waitid", interrupt=_neg(ERESTARTSYS))
        return None

    @staticmethod
    def _waitid_match(child, idtype, id_) -> bool:
        return idtype == P_ALL or (idtype == P_PID and child.pid == id_) or \
            (idtype == P_PGID and child.pgid == id_)

    def _waitid_reap(self, parent, idtype, id_, infop, options) -> bool:
        """wait_task_zombie for waitid: True when an exited child was found."""
        if not options & WEXITED:
            return False
        for child in parent.children:
            if child.exit_result is None or not self._waitid_match(child, idtype, id_):
                continue
            res = child.exit_result
            code, status = (CLD_EXITED, res.exit_code) if res.reason == "exit" else (CLD_KILLED, res.signal)
            if infop:
                parent.mem.write_user(infop, struct.pack("<iii", SIGCHLD, 0, code))
                parent.mem.write_user(infop + 16, struct.pack("<iIi", child.pid, 1000, status or 0))
            if not options & WNOWAIT:
                parent.children.remove(child)
                if child in self.m.processes:
                    self.m.processes.remove(child)
            return True
        return False

    # -- futex ------------------------------------------------------------------------
    def sys_futex(self, task, regs, uaddr, op, val, timeout, uaddr2, val3):
        cmd = op & FUTEX_CMD_MASK
        proc = task.process
        if cmd in (FUTEX_WAIT, FUTEX_WAIT_BITSET):
            deadline = None
            if timeout:
                sec, nsec = struct.unpack("<qq", proc.mem.read_user(timeout, 16))
                if sec < 0 or not 0 <= nsec < NSEC:
                    return _neg(E.EINVAL)
                if cmd == FUTEX_WAIT:                   # relative, on CLOCK_MONOTONIC
                    deadline = self.clock_ns + sec * NSEC + nsec
                else:                                   # absolute; MONOTONIC unless CLOCK_REALTIME
                    base = 0 if op & FUTEX_CLOCK_REALTIME else CLOCK_EPOCH_NS
                    deadline = base + sec * NSEC + nsec
            return self._futex_wait(task, uaddr, val, deadline)
        if cmd in (FUTEX_WAKE, FUTEX_WAKE_BITSET):
            return self._futex_wake(proc, uaddr, val)
        return _neg(E.ENOSYS)

    def _futex_wait(self, task, uaddr, val, deadline: int | None) -> int | None:
        """futex_wait: -EAGAIN unless the word still holds ``val``; then sleep until a
        FUTEX_WAKE (0), the deadline on the virtual clock (-ETIMEDOUT) or a signal:
        -ERESTARTSYS without a timeout, else -ERESTART_RESTARTBLOCK whose
        restart_syscall (futex_wait_restart) waits again until the same deadline."""
        proc = task.process
        cur = struct.unpack("<I", proc.mem.read_user(uaddr, 4))[0]
        if cur != val & 0xFFFFFFFF:
            return _neg(E.EAGAIN)
        if deadline is not None and deadline <= self.clock_ns:
            self.m.yield_cpu()
            return _neg(E.ETIMEDOUT)
        task.futex_key = (id(proc.mem), uaddr)
        task.futex_timeout = None
        if deadline is None:
            self.m.block(task, "futex", interrupt=_neg(ERESTARTSYS))
            return None
        state = {"done": False}
        token = self._sleep_on(task)
        task.futex_timeout = state

        def expire() -> None:
            if not state["done"] and self._still_asleep(task, token):
                state["done"] = True
                self.m.wake(task, _neg(E.ETIMEDOUT))

        def interrupted() -> int:
            state["done"] = True
            task.restart_block = lambda t: self._futex_wait(t, uaddr, val, deadline)
            return _neg(ERESTART_RESTARTBLOCK)

        pending = self._timeouts()
        pending[:] = [e for e in pending if not e[3]["done"]]
        pending.append((deadline, task.tid, expire, state))
        self.m.block(task, "futex", interrupt=interrupted)
        return None

    def _futex_wake(self, proc, uaddr, n) -> int:
        key = (id(proc.mem), uaddr)
        woken = 0
        for t in sorted(self.m.tasks, key=lambda t: t.tid):
            if woken >= n:
                break
            if t.state == "blocked" and t.blocked_on == "futex" and getattr(t, "futex_key", None) == key:
                timed = getattr(t, "futex_timeout", None)
                if timed is not None:
                    timed["done"] = True          # its deadline is no deadline any more
                    t.futex_timeout = None
                self.m.wake(t, 0)
                woken += 1
        return woken

    def sys_sched_yield(self, task, regs, *_):
        self.m.yield_cpu()
        return 0

    def sys_getpid(self, task, regs, *_):
        return task.process.pid

    def sys_gettid(self, task, regs, *_):
        return task.tid

    def sys_getppid(self, task, regs, *_):
        return task.process.ppid



# ============================================================================ tasks

class TaskCreation:
    """Processes and tasks coming into being (copy_process, alloc_pid, copy_thread):
    part of :class:`kernel_model.kernel.kernel.Kernel`."""

    def new_process(self, *, comm: str = "guest", share_mm: Process | None = None,
                    parent: Process | None = None) -> Process:
        """A process with its own address space (one engine CPU), or sharing
        ``share_mm``'s (vfork)."""
        pid = self.alloc_pid()
        if share_mm is not None:
            cpu, mem, regfile = share_mm.cpu, share_mm.mem, share_mm.cpu_regs
        else:
            cpu, mem, regfile = self.mm_alloc()
        proc = Process(pid=pid, mem=mem, comm=comm, cpu=cpu, cpu_regs=regfile, parent=parent,
                       ppid=parent.pid if parent else 1, counters=Counters())
        if share_mm is not None:
            proc.mm_uprobes = share_mm.mm_uprobes
            proc.mm_owner = share_mm
        self.processes.append(proc)
        if parent is not None:
            parent.children.append(proc)
        return proc

    def mm_alloc(self):
        """mm_alloc: an empty address space - (cpu, mem, regfile) - with the FPU in its
        initial state."""
        return self.engine.new_space(self.counters, self.mem_limit)

    def discard_process(self, proc: Process) -> None:
        """Undo :meth:`new_process` for a fork that failed before the child existed."""
        if proc in self.processes:
            self.processes.remove(proc)
        if proc.parent is not None and proc in proc.parent.children:
            proc.parent.children.remove(proc)
        if proc.mm_owner is None:
            proc.mem.release()
            proc.cpu = proc.cpu_regs = None

    def new_task(self, process: Process, tid: int | None = None, *, comm: str = "",
                 cred=None) -> Task:
        task = Task(tid=tid if tid is not None else (process.pid if not process.tasks else self.alloc_pid()),
                    process=process, comm=comm, cred=cred)
        task.counters = Counters()
        clock = self.syscalls                   # None while the first task is made
        task.start_time_ns = clock.boot_clock_ns() if clock is not None else 0
        process.tasks.append(task)
        self.tasks.append(task)
        self.all_tasks.append(task)
        return task

    def alloc_pid(self) -> int:
        pid = self._next_pid
        self._next_pid += 1
        return pid

    def copy_thread(self, task: Task, regs) -> None:
        """copy_thread: give a new task (fork/clone child) the CPU state ``regs``."""
        engine = self.engine
        proc = task.process
        cpu = proc.cpu
        shared = cpu is self.cpu
        saved = engine.context_save(cpu) if shared else None
        if not shared:
            engine.fpu.copy(self.cpu, cpu)     # fpu_clone: a forked child keeps the FPU registers
        proc.cpu_regs.write({i: v for i, v in enumerate(regs.values())})
        engine.reg_write(cpu, "rip", regs.rip)
        task.context = engine.context_save(cpu)
        if shared:
            engine.context_restore(cpu, saved)
        task.orig_rax = -1
