"""Task and process exit (kernel/exit.c): ``do_group_exit``, ``do_exit`` of every
task of a process, and ``release_task`` - the address space of an exited process is
freed once the CPU has left it."""

from __future__ import annotations

from kernel_model.kernel.signals import RunResult
from kernel_model.mm.mm_types import MemoryLimit


class TaskExit:
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
            self._released.append(proc)     # exit_mmap, once the CPU is not running it
        if proc is self.main_process:
            self.exited = True
            self._finish(result)
        else:
            self.syscalls.child_exited(proc)
            if proc is self.task.process:      # the running task died: leave the engine's run
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
                    p.mm_owner is proc and p.exit_result is None for p in self.processes):
                keep.append(proc)
                continue
            proc.mem.release()
            for t in proc.tasks:
                t.context = None
            proc.cpu = proc.cpu_regs = None
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
