"""Process (a thread group) and Task (a thread of execution), with what Linux keeps
apart from ``task_struct`` in structures of their own (include/linux/sched.h,
fs_struct.h, fdtable.h, sched/signal.h): ``fs`` (the working directory and umask),
``files`` (the descriptor table, :class:`kernel_model.fs.file.FdTable`), ``sighand``
(the signal actions), ``signal`` (the process-wide pending signals, ITIMER_REAL, the
resource limits) and, on the task, ``cred``.

Designed for many tasks from the start: a Task holds its registers while it is not on
the CPU, its uprobes task state (``utask``, owned by the kernel model) and a reference to
its Process; a Process holds the address space, the files it maps and the per-mm uprobes
state (``mm_uprobes``, owned by the kernel model).  One task runs at first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from kernel_model.mm.mm_types import MappedFile

if TYPE_CHECKING:
    from emu.engine.interface import RegisterAccess
    from emu.engine.memory import Memory
    from kernel_model.fs.file import FdTable
    from kernel_model.kernel.counters import Counters
    from kernel_model.kernel.cred import Cred
    from kernel_model.kernel.events.uprobes_types import MmUprobes, UprobeTask
    from kernel_model.kernel.signals import RunResult


class PendingSignal(NamedTuple):
    """One queued signal (the kernel's ``struct sigqueue``): ``addr`` is si_addr of a
    fault, ``code`` the si_code, ``force`` marks a kernel-raised signal that a blocked
    mask cannot hold back (force_sig_fault), ``info`` a prebuilt siginfo (SIGCHLD)."""

    signo: int
    addr: int | None = None
    detail: str = ""
    code: int | None = None
    force: bool = True
    info: bytes | None = None


@dataclass(eq=False)
class FsStruct:
    """``struct fs_struct``: where relative paths start and the creation mask."""

    pwd: str = "/"  # a guest path (kernel_model.fs.namei)
    umask: int = 0o022


@dataclass(eq=False)
class SighandStruct:
    """``struct sighand_struct``: the signal actions, signo -> raw 32-byte sigaction."""

    action: dict[int, bytes] = field(default_factory=dict)


@dataclass(eq=False)
class SignalStruct:
    """``struct signal_struct``: what the threads of a process share about signals."""

    shared_pending: list[PendingSignal] = field(default_factory=list)  # process-directed (kill)
    real_timer: tuple[int, int] | None = None  # ITIMER_REAL: (expiry ns, interval ns)
    rlim: list[Any] | None = None  # the resource limits (kernel_model.kernel.resource); None: INIT_RLIMITS


@dataclass(eq=False)
class Process:
    pid: int
    mem: Memory  # the address space (mm_struct)
    comm: str = "guest"
    exe: MappedFile | None = None
    exe_path: str = ""
    ppid: int = 1
    pgid: int = 0
    sid: int = 0  # session id (0: its leader is outside the guest)
    mapped_files: list[MappedFile] = field(default_factory=list)  # the files it maps
    brk_start: int = 0
    brk: int = 0
    sighand: SighandStruct = field(default_factory=SighandStruct)
    mm_uprobes: MmUprobes | None = None  # kernel model per-mm state
    # The descriptor table (files_struct), the engine CPU of the address space (opaque to
    # the kernel: it hands it to the engine) and its register file, and the counters: set
    # as the process is made (fork, the first process), None only until then.
    files: FdTable = None  # type: ignore[assignment]
    tasks: list[Task] = field(default_factory=list)
    cpu: Any = None
    cpu_regs: RegisterAccess = None  # type: ignore[assignment]
    parent: Process | None = None
    children: list[Process] = field(default_factory=list)
    exit_result: RunResult | None = None  # once dead (zombie until reaped)
    mm_owner: Process | None = None  # vfork child: whose mm it borrows
    vfork_parent_task: Task | None = None
    counters: Counters = None  # type: ignore[assignment]
    signal: SignalStruct = field(default_factory=SignalStruct)
    exit_signal: int = 0  # sent to the parent at exit (clone's low byte)
    fs: FsStruct = field(default_factory=FsStruct)
    personality: int = 0  # task->personality (PER_LINUX)
    start_stack: int = 0  # mm->start_stack: argc's address at exec
    arg_start: int = 0  # mm->arg_start..arg_end: the argv strings
    arg_end: int = 0
    env_start: int = 0  # mm->env_start..env_end: the envp strings
    env_end: int = 0

    def __post_init__(self) -> None:
        if not self.pgid:
            self.pgid = self.pid

    @property
    def uc(self) -> Any:
        """The engine CPU under its former name (tests compare address spaces by it)."""
        return self.cpu


@dataclass(eq=False)
class Task:
    tid: int
    process: Process
    context: Any = None  # the engine's saved CPU state while off-CPU (opaque)
    utask: UprobeTask | None = None  # kernel model per-task state (uprobe_task)
    clear_child_tid: int = 0
    robust_list: int = 0
    rseq: int = 0
    sigmask: int = 0
    orig_rax: int = -1
    exit_code: int | None = None
    state: str = "running"  # running | blocked | dead
    blocked_on: str | None = None
    pending_rax: int | None = None  # syscall result delivered at wake-up
    slices: int = 0
    counters: Counters = None  # type: ignore[assignment]  # set by new_task
    on_resume: Callable[[], object] | None = None  # kernel work to finish when next switched in
    pending_signals: list[PendingSignal] = field(default_factory=list)  # see Kernel.send_sig (kernel.signal)
    comm: str = ""  # the thread's name (task->comm): prctl(PR_SET_NAME)
    thread_fault: tuple[int, int, int] | None = None  # (trap_nr, error_code, cr2) of its last #PF (thread_struct)
    cred: Cred = None  # type: ignore[assignment]  # task->cred, set by new_task
    saved_sigmask: int | None = None  # rt_sigsuspend's mask to restore after delivery
    sigaltstack: tuple[int, int, int] | None = None  # (ss_sp, ss_size, SS_AUTODISARM bit) or None (disabled)
    start_time_ns: int = 0  # start_boottime: ns since boot on the virtual clock
    # rt_sigtimedwait sleeping: (set, deadline ns | None, &info, real_blocked)
    sigwait: tuple[int, int | None, int, int] | None = None
    sleep_interrupt: Any = None  # the sleeping syscall's result if a signal wakes it (Kernel.block)
    restart_block: Callable[[Task], int] | None = None  # restart_syscall's continuation of a sleep, or None
    last_enosys: int | None = None  # the number of its last syscall if the model lacks it
    cpu: int = 0  # the CPU it runs or last ran on (task_cpu())
    cpus_mask: int = 1  # the CPUs it may run on (p->cpus_mask), bit i for CPU i
    rseq_cpu: int = -1  # the CPU its registered rseq area says (kernel.rseq)

    @property
    def cpus_allowed(self) -> int:
        """The affinity mask under its older name (``cpus_allowed``)."""
        return self.cpus_mask

    def __post_init__(self) -> None:
        if not self.comm:
            self.comm = self.process.comm
