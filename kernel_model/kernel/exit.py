"""Exit (kernel/exit.c): ``do_group_exit``, ``do_exit`` of every task of a process and
``release_task`` - the address space of an exited process is freed once the CPU has left
it - and the syscalls: exit, exit_group, wait4 and waitid, with what a task's or a child's
exit does to the others: CLONE_CHILD_CLEARTID's futex wake, exit_files, the vfork parent's
resumption, a waiting parent's wake-up and the parent's SIGCHLD (do_notify_parent, in
:class:`kernel_model.kernel.signal.SignalSyscalls`).
"""

from __future__ import annotations

import errno as E
import struct

from kernel_model.fs.file import FdTable
from kernel_model.include.linux.errno import ERESTARTSYS, neg
from kernel_model.include.linux.syscalls import pid_t, syscall
from kernel_model.kernel.kernel_base import KernelBase
from kernel_model.kernel.signals import RunResult
from kernel_model.mm.mm_types import MemoryLimit

CLD_EXITED, CLD_KILLED = 1, 2
SIGCHLD = 17
WNOHANG = 1
WSTOPPED, WEXITED, WCONTINUED, WNOWAIT = 2, 4, 8, 0x01000000
P_ALL, P_PID, P_PGID = 0, 1, 2


class ExitSyscalls:
    """Exiting and reaping."""

    def __init__(self, sc):
        self.m = sc.m
        self.futex = sc.futex
        self.signal = sc.signal

    @syscall(60, "exit")
    def sys_exit(self, task, regs, code, *_):
        proc = task.process
        live = [t for t in proc.tasks if t.state != "dead"]
        if len(live) <= 1:
            self.m.exit_group(code & 0xFF, task)
            return None
        self.m.task_exit(task)  # the machine leaves emu_start for the next task
        return None

    @syscall(231, "exit_group")
    def sys_exit_group(self, task, regs, code, *_):
        self.m.exit_group(code & 0xFF, task)

    def task_exited(self, task) -> None:
        """CLONE_CHILD_CLEARTID: zero the tid word and wake one futex waiter."""
        if task.clear_child_tid and task.process.exit_result is None:
            try:
                task.process.mem.write_user(task.clear_child_tid, b"\0\0\0\0")
            except Exception:  # noqa: BLE001 - a bad pointer is the guest's problem
                pass
            self.futex.futex_wake(task.process, task.clear_child_tid, 1)
        task.process.tasks = [t for t in task.process.tasks if t.state != "dead"] or task.process.tasks
        if all(t.state == "dead" for t in task.process.tasks):
            self._exit_files(task.process)

    def _exit_files(self, proc) -> None:
        """exit_files: the last task of a process drops its descriptor table (its open
        files lose a reference each; shared ones stay open for the others)."""
        table, proc.files = proc.files, FdTable()
        if isinstance(table, FdTable):
            table.put()

    def child_exited(self, proc) -> None:
        """exit_notify for a process that died: first the wait bookkeeping (a vfork
        parent resumes, a waiting parent is woken), then the parent's exit signal
        (do_notify_parent)."""
        self._wake_waiters(proc)
        self.signal.do_notify_parent(proc)

    def _wake_waiters(self, proc) -> None:
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

    @syscall(61, "wait4", partial="exited children only; rusage is not written")
    def sys_wait4(self, task, regs, pid, status, options, rusage, *_):
        pid = pid_t(pid)
        parent = task.process
        if not any(pid in (-1, 0) or c.pid == pid for c in parent.children):
            return neg(E.ECHILD)
        res = self._reap(task, parent, (pid, status))
        if res is not None:
            return res
        if options & WNOHANG:
            return 0
        task.wait_args = (pid, status)
        self.m.block(task, "wait4", interrupt=neg(ERESTARTSYS))  # do_wait
        return None

    @syscall(247, "waitid", partial="exited children only (no stopped or continued ones)")
    def sys_waitid(self, task, regs, idtype, id_, infop, options, rusage, *_):
        """kernel_waitid: P_ALL / P_PID / P_PGID children that exited (WEXITED; stopped
        and continued children are not modeled), their siginfo in ``infop``; WNOHANG
        with none ready zeroes it and returns 0; WNOWAIT leaves the zombie."""
        if (
            options & ~(WNOHANG | WEXITED | WSTOPPED | WCONTINUED | WNOWAIT | 0xE0000000)
            or not options & (WEXITED | WSTOPPED | WCONTINUED)
            or idtype not in (P_ALL, P_PID, P_PGID)
        ):
            return neg(E.EINVAL)
        id_ = pid_t(id_)
        if idtype != P_ALL and id_ <= 0:
            return neg(E.EINVAL)
        args = (idtype, id_, infop, options)
        if not [c for c in task.process.children if self._waitid_match(c, idtype, id_)]:
            return neg(E.ECHILD)
        if self._waitid_reap(task.process, *args):
            return 0
        if options & WNOHANG:
            if infop:
                task.process.mem.write_user(infop, b"\0" * 12)  # si_signo, si_errno, si_code
                task.process.mem.write_user(infop + 16, b"\0" * 12)  # si_pid, si_uid, si_status
            return 0
        task.wait_args = args
        self.m.block(task, "waitid", interrupt=neg(ERESTARTSYS))
        return None

    @staticmethod
    def _waitid_match(child, idtype, id_) -> bool:
        return idtype == P_ALL or (idtype == P_PID and child.pid == id_) or (idtype == P_PGID and child.pgid == id_)

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


class TaskExit(KernelBase):
    """Exit: part of :class:`kernel_model.kernel.kernel.Kernel`."""

    def exit_group(self, code: int, task=None) -> None:
        """exit_group(code): the whole process of ``task`` (default: the current one)
        exits with ``code``."""
        self.do_group_exit((task or self.task).process, RunResult("exit", exit_code=code & 0xFF))

    def do_group_exit(self, proc, result: RunResult) -> None:
        """do_group_exit: every task of ``proc`` dies with ``result``; the parent can
        reap it; the run ends with the main process."""
        proc.exit_result = result
        for t in list(proc.tasks):
            self.do_exit(t)
        if proc is not self.main_process and proc.mm_owner is None:
            self._released.append(proc)  # exit_mmap, once the CPU is not running it
        if proc is self.main_process:
            self.exited = True
            self._finish(result)
        else:
            self.syscalls.child_exited(proc)
            if proc is self.task.process:  # the running task died: leave the engine's run
                self.engine.stop(self.cpu)

    def do_exit(self, task) -> None:
        """do_exit of one task.  uprobe_free_utask would free its uprobes state; the
        model keeps it on the dead task so tests can inspect what was still pending."""
        if task.state == "dead":
            return
        task.state = "dead"
        if task in self.tasks:
            self.tasks.remove(task)
        self.syscalls.task_exited(task)

    def _finish(self, result: RunResult) -> None:
        if self._result is None:
            self._result = result
        self.engine.stop(self.cpu)

    def release_task_mms(self) -> None:
        """release_task: free the address space (CPU and host pages) of every exited
        process, except one whose CPU still runs; a zombie keeps only its exit status,
        as after the kernel's exit_mm."""
        keep = []
        for proc in self._released:
            if proc.cpu is self.task.process.cpu or any(
                p.mm_owner is proc and p.exit_result is None for p in self.processes
            ):
                keep.append(proc)
                continue
            proc.mem.release()
            for t in proc.tasks:
                t.context = None
            proc.cpu = proc.cpu_regs = None  # type: ignore[assignment]  # released with its mm
        self._released = keep
        if not self.engine.running:
            # an address space a front end still hooks stays until its hooks are gone
            for mem in self._retired_mms:
                if not self.engine.hooked(mem):
                    mem.release()
            self._retired_mms = [mem for mem in self._retired_mms if not mem.released]

    def retire_mm(self, mem) -> None:
        """mmput of an address space an exec left: its bytes are free for the new image
        now; the host pages go once the CPU has left it."""
        mem.limit.uncharge(mem.total)
        mem.limit = MemoryLimit(None)
        self._retired_mms.append(mem)
