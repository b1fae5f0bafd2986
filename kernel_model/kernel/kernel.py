"""The modeled kernel of one machine: its tasks and processes, the run loop, the
trap and syscall entry, signals, and the uprobes subsystem with its profile.

The kernel drives the CPU through the engine interface
(:class:`emu.engine.interface.Engine`, given to :meth:`Kernel.start_kernel`) and is
the one trap handler the engine reports to.  Its parts live where Linux has them:
the run loop in :mod:`kernel_model.kernel.sched`, task creation in
:mod:`kernel_model.kernel.fork`, exit in :mod:`kernel_model.kernel.exit`, exec's
address space in :mod:`kernel_model.fs.exec`, signal queues in
:mod:`kernel_model.kernel.signal`, signal frames and syscall restart in
:mod:`kernel_model.arch.x86.kernel.signal`, the trap handlers in
:mod:`kernel_model.arch.x86.kernel.traps`, the syscall entry and the exit to user
mode in :mod:`kernel_model.arch.x86.entry.common`.

``machine`` is the context the uprobes subsystem and the syscall handlers see (its
``counters``, ``events``, ``syscalls``, and the kernel's own operations through it);
a fake one without an engine is enough for the uprobes parts alone."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from emu.engine.interface import TrapHandler
from kernel_model.arch.x86.entry.common import UserEntry
from kernel_model.arch.x86.kernel.signal import SignalDelivery
from kernel_model.arch.x86.kernel.traps import Traps
from kernel_model.arch.x86.kernel.uprobes_optimize import Optimizer
from kernel_model.arch.x86.ptrace import PtRegs
from kernel_model.errors import InputError
from kernel_model.fs.elf import image_of, link_vaddr
from kernel_model.fs.exec import ExecMm
from kernel_model.kernel.events.uprobes import Uprobes
from kernel_model.kernel.events.uprobes_fork import copy_process, dup_mmap, uprobe_free_utask, uprobe_mmap, vma_dontcopy
from kernel_model.kernel.exit import TaskExit
from kernel_model.kernel.fork import TaskCreation
from kernel_model.kernel.sched import RunQueue, Scheduler
from kernel_model.kernel.signal import SignalSending
from kernel_model.kernel.signals import SIGNALS
from kernel_model.mm.mm_types import PROT_WRITE, GuestFault
from kernel_model.profiles import KernelProfile
from kernel_model.trace.events import RefCtrUpdate
from kernel_model.trace.trace_uprobe import TraceEvents

if TYPE_CHECKING:
    from emu.engine.interface import Engine, RegisterAccess
    from emu.engine.memory import Memory
    from emu.machine import Machine
    from kernel_model.kernel.cred import Cred
    from kernel_model.kernel.syscalls import Syscalls
    from kernel_model.kernel.task import Process
    from kernel_model.mm.mm_types import MemoryLimit
    from kernel_model.profiles import SwitchValue
    from kernel_model.trace.bpf_trace import BpfTrace

SIGTRAP = SIGNALS["SIGTRAP"]
PID_MAX_DEFAULT = 1 << 22  # pid_max on a 64-bit machine of more than 32 CPUs (PID_MAX_LIMIT)


class Kernel(Traps, UserEntry, SignalDelivery, SignalSending, RunQueue, TaskCreation, ExecMm, TaskExit, TrapHandler):
    """One modeled kernel: made with its profile and uprobes subsystem, booted on an
    engine by :meth:`start_kernel` (the tasks, the run loop and the trap handler
    from then on), given its syscall table by :meth:`attach_syscalls`."""

    def __init__(self, machine: Machine, profile: str | KernelProfile = "latest", **overrides: SwitchValue) -> None:
        self.machine = machine
        self.profile = profile if isinstance(profile, KernelProfile) else KernelProfile.get(profile, **overrides)
        self.uprobes = Uprobes(self)
        self.optimizer = Optimizer(self)
        self.trace = TraceEvents(self.uprobes)
        self.uprobes.trace = self.trace
        # Until attach_syscalls / start_kernel: None (a kernel driven without a CPU, as in the
        # uprobes unit tests, checks for it); the parts see them typed as set (KernelBase).
        self.syscalls = None  # type: ignore[assignment]
        self.engine = None  # type: ignore[assignment]

    def start_kernel(
        self,
        engine: Engine,
        *,
        mem_limit: MemoryLimit,
        seed: int,
        sched_slice: tuple[int, int],
        comm: str,
        cred: Cred,
        cpus: int = 1,
        first_pid: int = 1000,
    ) -> None:
        """Boot on ``engine``: the first process and its task (pid ``first_pid``), on the CPU.
        The engine reports its traps here from now on."""
        self.engine = engine
        engine.set_trap_handler(self)
        self.counters = self.machine.counters
        self.events = self.machine.events
        self.mem_limit = mem_limit
        self.scheduler = Scheduler(seed, *sched_slice, cpus=cpus)
        self.trace.set_nr_cpu_ids(cpus)
        self.processes = []  # live processes (and zombies until reaped)
        self.tasks = []  # live tasks
        self.all_tasks = []
        if isinstance(first_pid, bool) or not isinstance(first_pid, int) or not 2 <= first_pid < PID_MAX_DEFAULT:
            raise InputError(f"first_pid must be an integer 2-{PID_MAX_DEFAULT - 1}, not {first_pid!r}")
        self._next_pid = first_pid
        self._released = []  # exited processes whose mm is still to free
        self._retired_mms = []  # address spaces an execve left
        self.task = self.new_task(self.new_process(comm=comm), cred=cred)
        self.main_process = self.task.process
        self.scheduler.curr[0] = self.task  # the first task starts on CPU 0
        self._acct = self.counters.snapshot()
        self.exited = False
        self.last_result = None
        self._result = None  # the run's end, once decided
        self._last_fault = [None, 0]  # (address, rip) of the last page fault, spurious repeats of it
        self._stop_requested = None
        self._switch_requested = False
        self._in_syscall = False
        self._run_deadline = None  # the wall-clock end of the current run
        self._db_after_syscall = None  # (task, rip): see do_syscall_64
        self._slice_carry = None  # (task, insns left, insns run, multi): see run

    @property
    def bpf(self) -> BpfTrace:
        """The machine's BPF state (maps, programs, links; :mod:`kernel_model.trace.bpf_trace`),
        made at first use: a machine that loads no BPF program never imports the BPF code."""
        state = self.__dict__.get("_bpf")
        if state is None:
            from kernel_model.trace.bpf_trace import BpfTrace  # imported on first use: start-up cost

            state = self._bpf = BpfTrace(self)
        return state

    def attach_syscalls(self, syscalls: Syscalls) -> None:
        """The syscall table the entry dispatches to; the uprobes syscalls join it."""
        self.syscalls = syscalls
        self.scheduler.clock = [syscalls.clock_ns] * self.scheduler.nr_cpu_ids  # every CPU boots now
        if self.profile.has_uretprobe_syscall:
            syscalls.register(335, self.uprobes.uret.sys_uretprobe)
        if self.profile.has_uprobe_syscall:
            syscalls.register(336, self.optimizer.sys_uprobe)

    # -- the task on the CPU -------------------------------------------------------
    @property
    def process(self) -> Process:
        return self.task.process

    @property
    def cpu(self) -> Any:
        """The engine CPU of the current task's address space (an opaque handle)."""
        return self.task.process.cpu

    @property
    def mem(self) -> Memory:
        return self.task.process.mem

    @property
    def cpu_regs(self) -> RegisterAccess:
        return self.task.process.cpu_regs

    def read_regs(self) -> PtRegs:
        return PtRegs(self.cpu_regs.read_all(), self.task.orig_rax)

    def write_regs(self, regs: PtRegs) -> None:
        self.cpu_regs.write(regs.changed())
        self.task.orig_rax = regs.orig_rax

    def fpu_init(self, features: int | None = None) -> None:
        """The current task's FPU components in ``features`` (default: all the user
        features) to their initial state."""
        if features is None:
            self.engine.fpu.init(self.cpu)
        else:
            self.engine.fpu.init(self.cpu, features)

    def fpu_restore(self, image: bytes, xfeatures: int, *, fx_only: bool) -> bool:
        """XRSTOR (FXRSTOR when ``fx_only``) ``image`` into the current task's FPU;
        False, nothing changed, where the instruction would fault."""
        fpu = self.engine.fpu
        return fpu.fxrstor(self.cpu, image) if fx_only else fpu.xrstor(self.cpu, image, xfeatures)

    def symbolize(self, addr: int) -> str | None:
        """``name+0xoff`` for an address in a mapped ELF, or the mapping name."""
        vma = self.mem.find_vma(addr)
        if vma is None:
            return None
        file = vma.file
        image = image_of(file) if file is not None else None
        if file is not None and image is not None:
            hit = image.symbolize(link_vaddr(file, vma, addr))
            if hit:
                name, off = hit
                lib = (
                    ""
                    if getattr(file, "load_bias", None) is not None
                    else f" in {os.path.basename(file.d_path or file.path)}"
                )
                return (f"{name}+{off:#x}" if off else name) + lib
        return vma.name or (file.path if file else None)

    # -- trap notifiers -------------------------------------------------------------
    def do_int3(self, task, regs) -> None:
        """#BP from user mode: uprobes first (uprobe_pre_sstep_notifier), else SIGTRAP.
        (``Uprobes.handle_int3``, one frame shorter: the notifier, then handle_swbp.)"""
        uprobes = self.uprobes
        if uprobes.uprobe_pre_sstep_notifier(task) and uprobes.handle_swbp(
            task, regs, (regs.rip - 1) & 0xFFFFFFFFFFFFFFFF
        ):
            return
        self.machine.send_sig(task, SIGTRAP, detail="breakpoint trap (int3)")

    def do_debug(self, task, regs) -> None:
        """#DB from user mode: a uprobes single-step completes, else SIGTRAP."""
        if self.uprobes.handle_debug(task, regs):
            return
        self.machine.send_sig(task, SIGTRAP, detail="trace trap (single-step)")

    def fixup_fault(self, task, regs) -> None:
        """A fault is about to become a signal: abort an out-of-line step first so the
        signal is reported at the probed address (arch_uprobe_abort_xol)."""
        self.uprobes.abort_xol_on_fault(task, regs)

    # -- process lifecycle -------------------------------------------------------
    def copy_process(self, parent_task, child_task, *, share_mm: bool, vfork: bool) -> None:
        """uprobe_copy_process: pending return instances for fork/vfork children."""
        copy_process(self.uprobes, parent_task, child_task, share_mm=share_mm, vfork=vfork)

    def exec_mm(self, task) -> None:
        """What exec does to uprobes state, once the new image is mapped: exec_mmap's
        mm_release frees the task's utask with its pending return instances
        (``uprobe_free_utask``, in mm_release in every modeled release); the old mm's
        state (MMF_HAS_UPROBES, the [uprobes] XOL area) went with the old mm
        (``uprobe_clear_state`` at its __mmput) and the new mm starts without any; the
        mappings load_elf_binary made get their probes through ``uprobe_mmap``."""
        uprobe_free_utask(self.uprobes, task)
        uprobe_mmap(self.uprobes, task.process)

    def vma_dontcopy(self, vma) -> bool:
        return vma_dontcopy(self.profile, vma)

    def dup_mmap(self, parent, child) -> None:
        dup_mmap(self.uprobes, parent, child)

    # -- mappings ------------------------------------------------------------------
    def uprobe_mmap(self, proc, vma) -> None:
        """A file VMA appeared in ``proc`` (mmap_region / elf_map / vma_complete):
        uprobes installs its inode's probes there (``uprobe_mmap``)."""
        self.uprobes.uprobe_mmap(proc, vma)

    def uprobe_munmap(self, proc, vma, start: int, end: int) -> None:
        """[start, end) of a file VMA is being unmapped (``uprobe_munmap``)."""
        self.uprobes.uprobe_munmap(proc, vma, start, end)

    # -- USDT semaphores ---------------------------------------------------------
    def find_ref_ctr(self, proc, uprobe) -> tuple[int, int] | None:
        """(address, value) of the USDT semaphore in the file's writable mapping."""
        if not uprobe.ref_ctr_offset:
            return None
        for vma in proc.mem.vmas:
            if (
                vma.file is uprobe.file
                and vma.prot & PROT_WRITE
                and vma.pgoff <= uprobe.ref_ctr_offset < vma.pgoff + vma.size
            ):
                addr = vma.vaddr_of(uprobe.ref_ctr_offset)
                try:
                    return addr, int.from_bytes(proc.mem.read(addr, 2), "little", signed=True)
                except GuestFault:
                    return None
        return None

    def ref_ctr_update(self, proc, uprobe, delta: int) -> bool:
        """``update_ref_ctr``: the 16-bit semaphore at ``ref_ctr_offset`` rises on install
        and falls on removal.  Going below zero is refused (-EINVAL, "ref_ctr going
        negative"): returns False and writes nothing."""
        found = self.find_ref_ctr(proc, uprobe)
        if found is None:
            return True
        addr, cur = found
        if cur + delta < 0:
            return False
        new = cur + delta
        try:
            # __update_ref_ctr: get_user_pages_remote(FOLL_WRITE), a write the mapping allows
            proc.mem.write_user(addr, (new & 0xFFFF).to_bytes(2, "little"))
        except GuestFault:
            return False
        events = self.machine.events
        if events:
            events.publish(RefCtrUpdate(proc.pid, addr, cur, new))
        return True

    def ref_ctr_can_decrement(self, proc, uprobe) -> bool:
        found = self.find_ref_ctr(proc, uprobe)
        return found is None or found[1] > 0
