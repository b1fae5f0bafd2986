"""What the parts of :class:`kernel_model.kernel.kernel.Kernel` know of each other.

The kernel is one object assembled from parts that live where Linux has them (the run
loop in ``kernel/sched.py``, the trap handlers in ``arch/x86/kernel/traps.py``, the
syscall entry in ``arch/x86/entry/common.py``...), the way Linux's files share the
globals and functions of one kernel image.  Each part is a class that
:class:`~kernel_model.kernel.kernel.Kernel` inherits; each reads the kernel's state and
calls the others through ``self``.

:class:`KernelBase` is the base of every part and declares that shared state and those
cross-part operations for the type checker.  At run time it holds nothing: the
attributes are bare annotations (no class attribute is made) and the operations are
declared under ``TYPE_CHECKING`` only, so every lookup still finds the one definition in
its part, with no extra call on the hot paths.  This module imports nothing at run time
and so puts no import cycle between the parts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emu.engine.interface import Engine, RegisterAccess
    from emu.engine.memory import Memory
    from emu.engine.regfile import RegisterFile
    from emu.machine import Machine
    from kernel_model.arch.x86.kernel.uprobes_optimize import Optimizer
    from kernel_model.arch.x86.ptrace import PtRegs
    from kernel_model.kernel.counters import Counters
    from kernel_model.kernel.events.uprobes import Uprobes
    from kernel_model.kernel.sched import Scheduler
    from kernel_model.kernel.signals import RunResult
    from kernel_model.kernel.syscalls import Syscalls
    from kernel_model.kernel.task import Process, Task
    from kernel_model.mm.mm_types import MemoryLimit
    from kernel_model.profiles import KernelProfile
    from kernel_model.trace.events import EventBus
    from kernel_model.trace.trace_uprobe import TraceEvents


class KernelBase:
    """The kernel's shared state (set by ``Kernel.__init__``, ``start_kernel`` and
    ``attach_syscalls``) and, for the type checker only, the operations one part of
    the kernel calls in another."""

    __slots__ = ()

    machine: Machine
    profile: KernelProfile
    uprobes: Uprobes
    optimizer: Optimizer
    trace: TraceEvents
    syscalls: Syscalls  # from attach_syscalls
    engine: Engine  # from start_kernel; None before (a kernel driven without a CPU)
    counters: Counters
    events: EventBus
    mem_limit: MemoryLimit
    scheduler: Scheduler
    processes: list[Process]  # live processes (and zombies until reaped)
    tasks: list[Task]  # live tasks
    all_tasks: list[Task]
    task: Task  # the task on the CPU
    main_process: Process
    exited: bool
    last_result: RunResult | None
    _next_pid: int
    _released: list[Process]  # exited processes whose mm is still to free
    _retired_mms: list[Memory]  # address spaces an execve left
    _acct: dict[str, Any]
    _result: RunResult | None  # the run's end, once decided
    _last_fault: list[Any]  # [(address, rip) or None, repeats] of the last page fault
    _stop_requested: str | None
    _switch_requested: bool
    _in_syscall: bool
    _run_deadline: float | None  # the wall-clock end of the current run
    _db_after_syscall: tuple[Task, int] | None
    _slice_carry: tuple[Task, int | None, int, bool] | None

    if TYPE_CHECKING:
        # -- kernel.py
        @property
        def process(self) -> Process: ...
        @property
        def cpu(self) -> Any: ...
        @property
        def mem(self) -> Memory: ...
        @property
        def cpu_regs(self) -> RegisterAccess: ...
        def read_regs(self) -> PtRegs: ...
        def write_regs(self, regs: PtRegs) -> None: ...
        def symbolize(self, addr: int) -> str | None: ...
        def do_int3(self, task: Task, regs: PtRegs) -> None: ...
        def do_debug(self, task: Task, regs: PtRegs) -> None: ...
        def fixup_fault(self, task: Task, regs: PtRegs) -> None: ...
        def exec_mm(self, task: Task) -> None: ...
        def copy_process(self, parent_task: Task, child_task: Task, *, share_mm: bool, vfork: bool) -> None: ...
        def dup_mmap(self, parent: Process, child: Process) -> None: ...
        def fpu_init(self, features: int | None = None) -> None: ...

        # -- arch/x86/entry/common.py
        def exit_to_user_mode_loop(self, task: Task, regs: PtRegs) -> bool: ...
        def write_back_in_trap(self, regs: PtRegs) -> None: ...
        def _resume_exit_work(self, task: Task) -> bool: ...

        # -- arch/x86/kernel/signal.py
        @staticmethod
        def restart_code(regs: PtRegs) -> int | None: ...
        def arch_do_signal_or_restart(self, task: Task, regs: PtRegs) -> None: ...

        # -- arch/x86/kernel/traps.py
        def stack_limit(self, task: Task) -> int: ...

        # -- kernel/signal.py
        def send_sig(
            self,
            task: Task,
            signo: int,
            *,
            addr: int | None = None,
            detail: str = "",
            code: int | None = None,
            force: bool = True,
            info: bytes | None = None,
        ) -> None: ...
        def signal_wake_up(self, task: Task) -> None: ...
        def signal_pending(self, task: Task) -> bool: ...
        def next_signal(self, task: Task, wanted: int | None = None) -> tuple[list[Any], int] | None: ...
        def force_sigsegv(self, task: Task, signo: int, why: str) -> None: ...

        # -- kernel/sched.py
        def wake(self, task: Task, rax: int | None) -> None: ...
        def block(self, task: Task, reason: str, *, interrupt: Any = None) -> None: ...

        # -- kernel/fork.py
        def mm_alloc(self) -> tuple[Any, Memory, RegisterFile]: ...
        def new_process(
            self, *, comm: str = "guest", share_mm: Process | None = None, parent: Process | None = None
        ) -> Process: ...
        def new_task(self, process: Process, tid: int | None = None, *, comm: str = "", cred: Any = None) -> Task: ...

        # -- kernel/exit.py
        def do_exit(self, task: Task) -> None: ...
        def do_group_exit(self, proc: Process, result: RunResult) -> None: ...
        def release_task_mms(self) -> None: ...
        def retire_mm(self, mem: Memory) -> None: ...
