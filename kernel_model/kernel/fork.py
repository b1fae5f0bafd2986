"""Process and thread creation (kernel/fork.c): clone, fork, vfork, clone3 and
set_tid_address (exit and wait are in :mod:`kernel_model.kernel.exit`, futex in
:mod:`kernel_model.kernel.futex`).

fork gives the child a copy of the address space (its own Unicorn instance), minus the
mappings the kernel marks VM_DONTCOPY (the [uprobes] XOL page; the [uprobes-trampoline]
page on 6.18-7.1); threads (CLONE_VM) share the process; vfork shares the address space
and suspends the parent until the child exits. Sleeping syscalls block the task and the
scheduler runs another one. Descriptor tables follow copy_files/exit_files
(:class:`kernel_model.fs.file.FdTable`).
"""

from __future__ import annotations

import errno as E
import struct

from kernel_model.include.linux.errno import neg
from kernel_model.include.linux.syscalls import syscall
from kernel_model.kernel.counters import Counters
from kernel_model.kernel.kernel_base import KernelBase
from kernel_model.kernel.task import Process, Task
from kernel_model.mm.mm_types import MemoryLimitExceeded
from kernel_model.trace.events import Clone

SIGCHLD = 17
CLONE_VM, CLONE_FS, CLONE_FILES, CLONE_SIGHAND = 0x100, 0x200, 0x400, 0x800
CLONE_VFORK, CLONE_PARENT, CLONE_THREAD = 0x4000, 0x8000, 0x10000
CLONE_SETTLS, CLONE_PARENT_SETTID, CLONE_CHILD_CLEARTID = 0x80000, 0x100000, 0x200000
CLONE_CHILD_SETTID = 0x1000000


class ProcessSyscalls:
    """clone/fork/vfork on the machine's tasks."""

    def __init__(self, sc):
        self.m = sc.m

    @syscall(57, "fork")
    def sys_fork(self, task, regs, *_):
        return self._clone(task, regs, SIGCHLD, 0, 0, 0, 0)

    @syscall(58, "vfork")
    def sys_vfork(self, task, regs, *_):
        return self._clone(task, regs, CLONE_VM | CLONE_VFORK | SIGCHLD, 0, 0, 0, 0)

    @syscall(56, "clone")
    def sys_clone(self, task, regs, flags, stack, ptid, ctid, tls, *_):
        return self._clone(task, regs, flags, stack, ptid, ctid, tls)

    @syscall(435, "clone3", partial="always ENOSYS: glibc falls back to clone")
    def sys_clone3(self, task, regs, *_):
        return neg(E.ENOSYS)  # glibc falls back to clone()

    def _clone(self, task, regs, flags, stack, ptid, ctid, tls):
        m = self.m
        parent = task.process
        thread = bool(flags & CLONE_THREAD)
        if thread and not flags & CLONE_VM:
            return neg(E.EINVAL)
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
                child_proc.files.put()  # the copied fd table goes with the child
                m.discard_process(child_proc)
                return neg(E.ENOMEM)  # dup_mmap past the memory limit
        if not thread:
            child_proc.exit_signal = flags & 0xFF  # CSIGNAL: SIGCHLD for fork/vfork
        child = m.new_task(child_proc, comm=task.comm, cred=task.cred)  # dup_task_struct, copy_creds
        child.sigmask = task.sigmask  # copy_process: the blocked mask is inherited
        child.cpus_mask = task.cpus_mask  # dup_task_struct: the affinity is inherited,
        child.cpu = task.cpu  # and sched_fork starts it on the parent's CPU
        if not flags & CLONE_VM or flags & CLONE_VFORK:
            child.sigaltstack = task.sigaltstack  # a new thread starts without one
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
        m.kernel.copy_process(task, child, share_mm=bool(flags & CLONE_VM), vfork=bool(flags & CLONE_VFORK))
        if flags & CLONE_VFORK:
            child_proc.vfork_parent_task = task  # the parent sleeps until the child exits
            task.vfork_child_tid = child.tid
            m.block(task, "vfork")
        if m.events:
            m.events.publish(Clone(task, child, flags))
        m.yield_cpu()  # reschedule: the child may run first
        return child.tid

    def _inherit(self, parent, child, flags: int = 0) -> None:
        child.exe, child.exe_path = parent.exe, parent.exe_path
        child.mapped_files = list(parent.mapped_files)
        child.brk_start, child.brk = parent.brk_start, parent.brk
        child.sighand.action = dict(parent.sighand.action)
        child.fs.pwd, child.fs.umask = parent.fs.pwd, parent.fs.umask  # copy_fs (CLONE_FS not modeled)
        child.signal.rlim = None if parent.signal.rlim is None else list(parent.signal.rlim)  # copy_signal
        child.personality = parent.personality
        child.pgid, child.sid = parent.pgid, parent.sid  # copy_process: the parent's group and session
        for f in ("start_stack", "arg_start", "arg_end", "env_start", "env_end"):  # dup_mm
            setattr(child, f, getattr(parent, f))
        # copy_files: CLONE_FILES shares the table, otherwise dup_fd copies it and every
        # open file description gains a reference (closing one side leaves the other)
        child.files = parent.files.share() if flags & CLONE_FILES else parent.files.fork()

    def _copy_mm(self, parent, child) -> None:
        """dup_mmap: every mapping but the VM_DONTCOPY ones, with the parent's bytes
        (breakpoints and optimized sites included)."""
        m = self.m
        for vma in parent.mem.vmas:
            if m.kernel.vma_dontcopy(vma):
                continue
            new = child.mem.map(
                vma.start,
                vma.size,
                vma.prot,
                vma.name,
                file=vma.file,
                pgoff=vma.pgoff,
                special=vma.special,
                mayprot=vma.mayprot,
            )
            child.mem.copy_pages_from(parent.mem, vma.start, vma.end)
            new.flags, new.shared = set(vma.flags), vma.shared
        m.kernel.dup_mmap(parent, child)

    def _set_child_context(self, parent_task, child, cregs) -> None:
        """The child's CPU state: the parent's, with the child's differences."""
        self.m.init_task_context(child, cregs)

    @syscall(218, "set_tid_address")
    def sys_set_tid_address(self, task, regs, tidptr, *_):
        task.clear_child_tid = tidptr
        return task.tid


# ============================================================================ tasks


class TaskCreation(KernelBase):
    """Processes and tasks coming into being (copy_process, alloc_pid, copy_thread):
    part of :class:`kernel_model.kernel.kernel.Kernel`."""

    def new_process(
        self, *, comm: str = "guest", share_mm: Process | None = None, parent: Process | None = None
    ) -> Process:
        """A process with its own address space (one engine CPU), or sharing
        ``share_mm``'s (vfork)."""
        pid = self.alloc_pid()
        if share_mm is not None:
            cpu, mem, regfile = share_mm.cpu, share_mm.mem, share_mm.cpu_regs
        else:
            cpu, mem, regfile = self.mm_alloc()
        proc = Process(
            pid=pid,
            mem=mem,
            comm=comm,
            cpu=cpu,
            cpu_regs=regfile,
            parent=parent,
            ppid=parent.pid if parent else 1,
            counters=Counters(),
        )
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
            proc.cpu = proc.cpu_regs = None  # type: ignore[assignment]  # released with its mm

    def new_task(self, process: Process, tid: int | None = None, *, comm: str = "", cred=None) -> Task:
        task = Task(
            tid=tid if tid is not None else (process.pid if not process.tasks else self.alloc_pid()),
            process=process,
            comm=comm,
            cred=cred,
        )
        task.counters = Counters()
        task.cpus_mask = self.scheduler.online_mask  # init_task's: every CPU
        clock = self.syscalls  # None while the first task is made
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
            engine.fpu.copy(self.cpu, cpu)  # fpu_clone: a forked child keeps the FPU registers
        proc.cpu_regs.write({i: v for i, v in enumerate(regs.values())})
        engine.reg_write(cpu, "rip", regs.rip)
        task.context = engine.context_save(cpu)
        if shared:
            engine.context_restore(cpu, saved)
        task.orig_rax = -1
