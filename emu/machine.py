"""The machine: an x86_64 Linux process environment with the uprobes kernel model,
on an emulated CPU - the public face of the project.

A thin facade: the CPU is the engine (:mod:`emu.engine.cpu`, the only code that
knows Unicorn), the processes, tasks, traps, syscalls, signals and the run loop are
the modeled kernel (:class:`kernel_model.kernel.kernel.Kernel`).  The machine builds
both, wires the replay (:mod:`emu.replay.checkpoint`) and the guest's output, and
gives the tests and front ends one API: ``run``/``step``/``stop``, ``regs``/``mem``,
``counters``, ``uprobes``, ``events``, hooks, symbols, checkpoints.

The kernel model and the syscall handlers see the machine as their context: the
kernel's operations (``send_sig``, ``block``, ``wake``...) and its state (``task``,
``processes``...) are reachable through it.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from emu.engine.cpu import Cpu, Hook, HookHandle
from emu.engine.memory import Memory
from emu.engine.quantum import instruction_counter_available
from emu.engine.regfile import SnapshotReader
from emu.interrupt import Interruptible
from emu.kernel_view import kernel_method, kernel_state
from emu.machine_types import OutputBuffer, RegsView
from emu.probes.user_api import UserUprobes
from emu.replay.checkpoint import (
    DEFAULT_INTERVAL,
    DEFAULT_MAX_CHECKPOINTS,
    Checkpoint,
    CheckpointError,
    Recorder,
    restore_checkpoint,
    take_checkpoint,
)
from kernel_model.errors import GuestSignalError, InputError, SymbolError
from kernel_model.fs.binfmt_elf import file_identity, load_image
from kernel_model.fs.elf import load_elf_file, parse_elf
from kernel_model.include.linux.cpumask import check_nr_cpus
from kernel_model.kernel.counters import Counters
from kernel_model.kernel.cred import Cred
from kernel_model.kernel.kernel import Kernel
from kernel_model.kernel.locking.access_log import AccessLog
from kernel_model.kernel.sched_slice import MAX_SLICE, MIN_SLICE, check_slice
from kernel_model.kernel.signals import RunResult
from kernel_model.kernel.syscalls import Syscalls
from kernel_model.kernel.task import Process, Task
from kernel_model.mm.filemap import PageCache
from kernel_model.mm.mm_types import DEFAULT_MAX_MEMORY, MappedFile, MemoryLimit
from kernel_model.trace import events as ev

if TYPE_CHECKING:
    from collections.abc import Callable

    from emu.engine.cpu import Uc
    from emu.engine.interface import RegisterAccess
    from emu.engine.memhook import PagedMemHook
    from emu.engine.regfile import RegisterFile
    from emu.probes.bpf_api import UserBpf
    from kernel_model.fs.elf import ElfImage
    from kernel_model.fs.file import OpenFile
    from kernel_model.kernel.sched import Scheduler
    from kernel_model.profiles import KernelProfile, SwitchValue

# No instruction budget by default: Unicorn's native counter is a per-instruction hook
# inside Unicorn that slows the tightest loops up to about 20-fold; the wall-clock
# timeout bounds runs.
DEFAULT_MAX_INSNS = None
DEFAULT_TIMEOUT = 120.0
# Bytes of each of stdout/stderr a Machine keeps (when it keeps them at all).
DEFAULT_OUTPUT_LIMIT = 16 << 20

__all__ = ["Machine", "Hook", "RunResult", "instruction_counter_available", "DEFAULT_TIMEOUT"]


def _check_limits(max_insns: object, timeout: object) -> None:
    """run()'s limits: a budget is a count >= 0, a timeout a finite number >= 0 (None
    or 0: none).  Unicorn would take nan/inf as a conversion error mid-run."""
    if max_insns is not None and (isinstance(max_insns, bool) or not isinstance(max_insns, int) or max_insns < 0):
        raise InputError(f"max_insns must be an instruction count >= 0 or None, not {max_insns!r}")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout < 0
    ):
        raise InputError(f"timeout must be a finite number of seconds >= 0 or None, not {timeout!r}")


class Machine:
    """An x86_64 Linux process on Unicorn with the uprobes kernel model around it.

    Build one with :meth:`from_elf`, :meth:`from_asm` or :meth:`from_guest`; then
    ``run()``, ``step()``, read ``regs``/``mem``/``counters``, and register probes with
    ``uprobes``.

    ``stdin``: bytes (fd 0 is a pipe holding them) or a host descriptor read lazily;
    ``stdio``: "pipe" (default: fds 0-2 are pipes, deterministic) or "host" (fds 1/2 are
    described as the host's own: tty, file or pipe); ``mem_total``: the RAM sysinfo
    reports (default 4 GiB).  See :mod:`kernel_model.fs.file`.
    """

    checkpoint_keep = ("events", "recorder", "passthrough", "capture_output", "page_cache", "sigint")

    def __init__(
        self,
        *,
        kernel: str = "latest",
        stdin: bytes | int = b"",
        passthrough: bool = False,
        sysroot: str = "/",
        grant_dirs: list[str] | tuple[str, ...] = (),
        grant_dir: str | None = None,
        cwd: str | None = None,
        seed: int = 0,
        comm: str = "guest",
        stdio: str = "pipe",
        mem_total: int | None = None,
        max_memory: int | None = DEFAULT_MAX_MEMORY,
        capture_output: bool | None = None,
        output_limit: int | None = DEFAULT_OUTPUT_LIMIT,
        uid: int | None = None,
        gid: int | None = None,
        groups: list[int] | None = None,
        sched_slice: tuple[int, int] = (MIN_SLICE, MAX_SLICE),
        cpus: int = 1,
        realtime_ns: int | None = None,
        rlimits: list[tuple[int, int]] | None = None,
        first_pid: int = 1000,
        **kernel_overrides: SwitchValue,
    ) -> None:
        """``max_memory``: bytes of guest mappings over all its processes (None: no
        limit); past it mmap/brk/fork get ENOMEM and loading fails.  ``capture_output``:
        keep the guest's stdout/stderr in ``stdout``/``stderr`` (default: only when not
        passing it through), at most ``output_limit`` bytes each.  ``uid``/``gid``/
        ``groups``: the first task's credentials (default: the invoking user's; see
        :meth:`kernel_model.kernel.sys.Cred.initial`).  ``sysroot``: the host directory
        the guest sees read-only at ``/``; ``grant_dirs`` (``grant_dir``: one, an alias):
        host directories mounted writable at their own paths; ``cwd``: the guest's
        working directory (default the invoking process's when visible, else ``/``);
        see :mod:`kernel_model.fs.namei`.  ``sched_slice``: (MIN, MAX) translated blocks of a time
        slice while several tasks are runnable (see :mod:`kernel_model.kernel.sched`; short slices such
        as (1, 40) shake out races, long ones cost less).  ``cpus``: the machine's CPU count (1-256),
        each task on one of them at a time, as its affinity allows.  ``realtime_ns``: the guest's
        CLOCK_REALTIME at boot, ns since the epoch (default 2026-01-01T00:00:00Z).  ``rlimits``: the
        first process's (soft, hard) per RLIMIT_* (default the kernel's INIT_RLIMITS).  ``first_pid``: the
        first process's pid (2 to pid_max - 1), the next ones counting up from it."""
        if not isinstance(sched_slice, (tuple, list)) or len(sched_slice) != 2:
            raise InputError(f"sched_slice must be (MIN, MAX) in blocks, not {sched_slice!r}")
        sched_slice = check_slice(*sched_slice)
        cpus = check_nr_cpus(cpus)
        if max_memory is not None and max_memory <= 0:
            raise InputError(f"max_memory must be positive, not {max_memory}")
        self.counters = Counters()
        self.mem_limit = MemoryLimit(max_memory)
        self.page_cache = PageCache()  # one MappedFile per (st_dev, st_ino)
        self.events = ev.EventBus()  # the typed event stream (kernel_model.trace.events)
        self.engine = Cpu()
        self.kernel = Kernel(self, kernel, **kernel_overrides)
        self.kernel.start_kernel(
            self.engine,
            mem_limit=self.mem_limit,
            seed=seed,
            sched_slice=sched_slice,
            comm=comm,
            cred=Cred.initial(uid, gid, groups),
            cpus=cpus,
            first_pid=first_pid,
        )
        self.passthrough = passthrough
        self.capture_output = (not passthrough) if capture_output is None else capture_output
        self.stdout = OutputBuffer(output_limit)
        self.stderr = OutputBuffer(output_limit)
        self.symbols: dict[str, int] = {}
        if isinstance(grant_dirs, str):
            grants = [grant_dirs]
        elif isinstance(grant_dirs, (list, tuple)):
            grants = list(grant_dirs)
        else:
            raise InputError(f"grant_dirs must be a list of directories, not {grant_dirs!r}")
        if grant_dir is not None:
            grants.append(grant_dir)
        self.syscalls = Syscalls(
            self,
            stdin=stdin,
            sysroot=sysroot,
            grant_dirs=grants,
            cwd=cwd,
            seed=seed,
            stdio=stdio,
            mem_total=mem_total,
            realtime_ns=realtime_ns,
            rlimits=rlimits,
        )
        self.kernel.attach_syscalls(self.syscalls)
        self.sigint: str | None = None  # set by interruptible() on Ctrl-C
        self.recorder: Recorder | None = None  # drives run()/step() while attached

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_elf(
        cls,
        path: str,
        argv: list[str] | None = None,
        env: list[str] | None = None,
        *,
        image: ElfImage | None = None,
        **kw: Any,
    ) -> Machine:
        """``image``: the program's ELF as :func:`emu.probes.symbols.load_elf_file` read it
        before (a sweep loads each binary once for its many machines)."""
        image = image if image is not None else load_elf_file(path)
        m = cls(comm=os.path.basename(path)[:15], **kw)
        dev, ino, d_path = file_identity(path)
        load_image(m, image, MappedFile(path, image.data, image, dev=dev, ino=ino, d_path=d_path), argv or [path], env)
        return m

    @classmethod
    def from_bytes(
        cls, data: bytes, path: str, argv: list[str] | None = None, env: list[str] | None = None, **kw: Any
    ) -> Machine:
        image = parse_elf(data, path)
        m = cls(comm=os.path.basename(path)[:15], **kw)
        load_image(m, image, MappedFile(path, image.data, image), argv or [path], env)
        return m

    @classmethod
    def from_asm(cls, source: str, *, path: str = "asm-guest", argv: list[str] | None = None, **kw: Any) -> Machine:
        from emu.asm import asm_to_elf  # Keystone is loaded by the guests that need it

        elf, _ = asm_to_elf(source)
        return cls.from_bytes(elf, path, argv=argv, **kw)

    @classmethod
    def from_guest(cls, name: str, argv: list[str] | None = None, **kw: Any) -> Machine:
        from guest_programs import build_guest  # the built-in guests load when one is asked for

        elf, path = build_guest(name)
        return cls.from_bytes(elf, path, argv=argv or [path], **kw)

    @classmethod
    def from_program(cls, program: str, argv: list[str] | None = None, **kw: Any) -> Machine:
        """A CLI PROGRAM: ``guest:NAME`` or a path to an ELF (static, or dynamic with its
        interpreter in the sysroot)."""
        if program.startswith("guest:"):
            return cls.from_guest(program[len("guest:") :], argv=argv, **kw)
        return cls.from_elf(program, argv=argv, **kw)

    # ------------------------------------------------------------------ the kernel's, through the machine
    task: Task = kernel_state("task")
    tasks: list[Task] = kernel_state("tasks")
    all_tasks: list[Task] = kernel_state("all_tasks")
    processes: list[Process] = kernel_state("processes")
    main_process: Process = kernel_state("main_process")
    scheduler: Scheduler = kernel_state("scheduler")
    exited: bool = kernel_state("exited")
    last_result: RunResult | None = kernel_state("last_result")
    _retired_mms: list[Memory] = kernel_state("_retired_mms")
    current_cpu = kernel_method(Kernel.current_cpu)
    read_regs = kernel_method(Kernel.read_regs)
    write_regs = kernel_method(Kernel.write_regs)
    fpu_init = kernel_method(Kernel.fpu_init)
    fpu_restore = kernel_method(Kernel.fpu_restore)
    symbolize = kernel_method(Kernel.symbolize)
    send_sig = kernel_method(Kernel.send_sig)
    send_process_sig = kernel_method(Kernel.send_process_sig)
    signal_wake_up = kernel_method(Kernel.signal_wake_up)
    signal_pending = kernel_method(Kernel.signal_pending)
    pending_set = kernel_method(Kernel.pending_set)
    dequeue_signal = kernel_method(Kernel.dequeue_signal)
    block = kernel_method(Kernel.block)
    wake = kernel_method(Kernel.wake)
    yield_cpu = kernel_method(Kernel.yield_cpu)
    interrupted = kernel_method(Kernel.interrupted)
    select_task = kernel_method(Kernel.select_task)
    new_process = kernel_method(Kernel.new_process)
    new_task = kernel_method(Kernel.new_task)
    new_mm = kernel_method(Kernel.mm_alloc)
    discard_process = kernel_method(Kernel.discard_process)
    init_task_context = kernel_method(Kernel.copy_thread)
    de_thread = kernel_method(Kernel.de_thread)
    exec_mmap = kernel_method(Kernel.exec_mmap)
    exit_group = kernel_method(Kernel.exit_group)
    process_exit = kernel_method(Kernel.do_group_exit)
    task_exit = kernel_method(Kernel.do_exit)

    # the current task's address space: one property call, as handlers read memory often
    @property
    def process(self) -> Process:
        """The process of the task on the CPU."""
        return self.kernel.task.process

    @property
    def mem(self) -> Memory:
        return self.kernel.task.process.mem

    @property
    def uc(self) -> Uc:
        """The engine CPU of the current address space (a Unicorn instance)."""
        uc: Uc = self.kernel.task.process.cpu  # (opaque to the kernel)
        return uc

    @property
    def regfile(self) -> RegisterAccess:
        return self.kernel.task.process.cpu_regs

    @property
    def uprobes(self) -> UserUprobes:
        """The uprobes as users drive them: targets resolved (``emu.probes``), then
        handed to the kernel's core (``self.kernel.uprobes``)."""
        api = self.__dict__.get("_uprobes")
        if api is None:
            api = self._uprobes = UserUprobes(self)
        return api

    @property
    def bpf(self) -> UserBpf:
        """BPF objects loaded as libbpf tools load them (:mod:`emu.probes.bpf_api`);
        the BPF code is imported at the first use."""
        api = self.__dict__.get("_bpf")
        if api is None:
            from emu.probes.bpf_api import UserBpf  # imported on first use: start-up cost

            api = self._bpf = UserBpf(self)
        return api

    @property
    def regs(self) -> RegsView:
        return RegsView(self)

    @property
    def profile(self) -> KernelProfile:
        return self.kernel.profile

    @property
    def icount(self) -> int:
        """Instructions retired by counted runs and steps (the replay's clock)."""
        return self.engine.icount

    @property
    def running(self) -> bool:
        """Inside an engine run (a hook is running)."""
        return self.engine.running

    @property
    def pc(self) -> int:
        """The current task's rip."""
        return self.engine.pc(self.uc)

    def mapped_file(self, path: str) -> MappedFile:
        """The page-cache file (inode) behind a guest path, opened through the guest's
        view: the uprobe key of a program before anything maps it (a probe registered
        on it is installed when an execve maps it)."""
        f = self.syscalls.open_guest_path(self.task, path, os.O_RDONLY)
        if isinstance(f, int):
            raise InputError(f"{path}: {os.strerror(-f)}")
        try:
            st = os.fstat(f.fd)
            hit = self.page_cache.lookup(st.st_dev, st.st_ino)
            if hit is not None and hit.elf is not None:
                return hit
            data = b"".join(iter(lambda: os.read(f.fd, 1 << 20), b""))
            host = os.readlink(f"/proc/self/fd/{f.fd}")
        finally:
            f.get().put()
        image = parse_elf(data, host)
        return self.page_cache.add(
            MappedFile(host, image.data, image, dev=st.st_dev, ino=st.st_ino, d_path=f.guest_path)
        )

    def guest_output(self, fd: int, data: bytes) -> None:
        """What the guest writes to fd 1/2: passed through to the host's, and kept
        (bounded) only when capture was asked for.  A recorder replaying history
        swallows what the host was already given."""
        if self.capture_output:
            (self.stdout if fd == 1 else self.stderr).keep(data)
        if self.recorder is not None:
            data = self.recorder.fresh_output(fd, data)
        if self.passthrough and data:
            os.write(fd, data)

    # ------------------------------------------------------------------ symbols
    def load_bias(self, file: MappedFile) -> int:
        return getattr(file, "load_bias", 0)

    def resolve(self, name: str) -> int:
        """Address of a symbol of the main executable (load bias applied)."""
        exe = self.process.exe
        if exe is None or exe.elf is None:
            raise SymbolError(f"unknown symbol {name!r}: no executable loaded")
        return exe.elf.resolve(name).value + self.load_bias(exe)

    # ------------------------------------------------------------------ running
    def run(
        self,
        max_insns: int | None = DEFAULT_MAX_INSNS,
        timeout: float | None = DEFAULT_TIMEOUT,
        *,
        raise_on_signal: bool = False,
    ) -> RunResult:
        """Run until the main process exits or dies of a signal, the instruction budget
        is spent, or the timeout.

        ``max_insns`` is an exact instruction budget (Unicorn's native counter: no Python
        hook, but up to about 20x slower on the tightest loops); ``None`` (the default)
        runs at full speed, bounded by ``timeout`` (wall-clock seconds) only.
        With one task the guest runs in one ``emu_start``; with several, the
        deterministic scheduler (seeded) gives them time slices counted in translated
        blocks (:mod:`kernel_model.kernel.sched`), one ``emu_start`` each.
        """
        if self.exited:
            raise InputError("the guest has already exited")
        _check_limits(max_insns, timeout)
        if self.recorder is not None and not self.recorder.driving:
            return self.recorder.run(max_insns, timeout, raise_on_signal=raise_on_signal)
        self.kernel.begin(self.sigint)  # Ctrl-C inside interruptible() sticks
        result = self._end(self.kernel.run(max_insns, timeout, counted=self.recorder is not None))
        if raise_on_signal and result.reason == "signal":
            raise GuestSignalError(result)
        return result

    def step(self) -> RunResult | None:
        """Execute exactly one instruction of the current task, with the traps, probes
        and faults handled exactly as in :meth:`run` (the same hooks and fault path).
        Returns the RunResult when the guest ended (exit, fatal signal), else None.

        A ``hlt`` is not executed: a user task gets #GP for it (SIGSEGV at the hlt), as
        ``run`` reports it.  A probed instruction's int3 is one step: the kernel model's
        out-of-line step that follows is the next."""
        if self.exited:
            raise InputError("the guest has already exited")
        if self.recorder is not None and not self.recorder.driving:
            return self.recorder.step()
        self.kernel.begin(self.sigint)
        result = self.kernel.step()
        return None if result is None else self._end(result)

    def _end(self, result: RunResult) -> RunResult:
        result.stdout, result.stderr = bytes(self.stdout), bytes(self.stderr)
        return self.kernel.end_run(result)

    def stop(self, detail: str = "stop requested") -> None:
        """Ask a running guest to stop at the next opportunity (thread-safe): the run
        (or step) returns a "stopped" result and the task is left at the instruction it
        was about to execute; the next :meth:`run` or :meth:`step` resumes there.  A
        stop asked for while the guest does not run applies to nothing: each run starts
        without one."""
        self.kernel.request_stop(detail)

    # ------------------------------------------------------------------ reverse execution
    def record(self, *, interval: int | None = None, max_checkpoints: int | None = None) -> Recorder:
        """Attach an :class:`emu.replay.checkpoint.Recorder` (reverse execution): from now on
        every run and step is counted, checkpointed every ``interval`` instructions
        and can be replayed (``recorder.seek(n)``).  Returns the recorder."""
        return Recorder(
            self, interval=interval or DEFAULT_INTERVAL, max_checkpoints=max_checkpoints or DEFAULT_MAX_CHECKPOINTS
        )

    def record_accesses(self, on: bool = True) -> AccessLog | None:
        """Record the kernel's shared-memory accesses on the probe paths from now on
        (:mod:`kernel_model.kernel.locking.access_log`: one record per lock, refcount,
        RCU read side and shared counter access, per CPU), for a contention model to
        price; ``on=False`` stops.  Returns the log (``.streams[cpu]``, ``.counts()``)."""
        sync = self.kernel.uprobes.sync
        log: AccessLog | None = (sync.log or AccessLog()) if on else None
        sync.log = log
        return log

    def checkpoint(self) -> Checkpoint:
        """A checkpoint of the whole machine now (see :mod:`emu.replay.checkpoint`); with a
        recorder attached it is also one of the recorder's."""
        return self.recorder.checkpoint() if self.recorder is not None else take_checkpoint(self)

    def restore(self, cp: Checkpoint) -> None:
        """Put the machine back into the state of checkpoint ``cp``."""
        if not isinstance(cp, Checkpoint):
            raise CheckpointError(f"not a checkpoint: {cp!r}")
        if self.recorder is not None:
            self.recorder.restore(cp)
        else:
            restore_checkpoint(self, cp)

    def flush_translations(self) -> None:
        """Drop every address space's translated blocks (a checkpoint was restored, or
        counting starts: blocks of an uncounted run would not count)."""
        for proc in self.processes:
            if proc.uc is not None:
                self.engine.flush(proc.uc)
        self.engine.tb_mode = None

    def revive_space(self, mem: Memory) -> tuple[Uc, RegisterFile]:
        """A released address space comes back (a checkpoint restored): ``(cpu,
        regfile)``, a new engine CPU with the trap hooks behind the same Memory."""
        return self.engine.adopt_space(mem)

    def insn_clock(self) -> int:
        """The instruction clock now: :attr:`icount` plus, inside a counted emu_start
        (a hook is running), the instructions of it so far, the current one included.
        Exact only while every run is counted (a :class:`emu.replay.checkpoint.Recorder` is
        attached)."""
        return self.engine.insn_clock(self.uc)

    # ------------------------------------------------------------------ hooks (front ends)
    def add_code_hook(
        self, fn: Callable[..., object], begin: int = 1, end: int = 0, *, process: Process | None = None
    ) -> Hook:
        """Call ``fn(address, size)`` before each instruction in [begin, end] (begin >
        end: everywhere) of ``process`` (default: the current one).  Unicorn decides at
        translation time which instructions call a hook, so the translations of the
        range are dropped now, and a hook added while the guest runs ends the current
        emu_start (the run resumes at once, with the hook in every block).

        ``fn`` may instead take the native callback's four arguments ``(handle,
        address, size, user_data)`` when it has a true ``native`` attribute (the
        tracer's hot path, one Python frame less); it must then catch its own errors
        and report them with :meth:`hook_failed`."""
        return self.engine.add_code_hook((process or self.process).uc, fn, begin, end)

    def add_mem_hook(
        self,
        fn: Callable[[str, int, int, int], object],
        begin: int = 1,
        end: int = 0,
        *,
        access: str = "write",
        process: Process | None = None,
    ) -> PagedMemHook:
        """Call ``fn(access, address, size, value)`` for each guest data access of kind
        ``access`` ("write" or "read") in [begin, end] (begin > end: everywhere)."""
        return self.engine.add_mem_hook((process or self.process).uc, fn, begin, end, access)

    def remove_hook(self, hook: HookHandle) -> None:
        """Remove a hook of :meth:`add_code_hook` / :meth:`add_mem_hook` (idempotent)."""
        self.engine.remove_hook(hook)

    def hook_failed(self, err: BaseException) -> None:
        """A front end's hook raised: stop the guest; run()/step() re-raise ``err``."""
        self.engine.hook_failed(err, self.uc)

    # ------------------------------------------------------------------ registers by name
    def reg_read(self, name: str) -> int:
        """Any register of the current task by its Unicorn name (``rax``, ``fs_base``,
        ``xmm0`` - 128-bit as an int, ``mxcsr``, ``fpcw``...)."""
        return self.engine.reg_read(self.uc, name)

    def reg_write(self, name: str, value: int) -> None:
        """Write one register by name (see :meth:`reg_read`)."""
        self.engine.reg_write(self.uc, name, value)

    def task_reg_read(self, task: Task, name: str) -> int:
        """A register of ``task`` by name, on the CPU or not (an off-CPU task's saved
        context)."""
        if task is self.task or task.context is None:
            return self.engine.reg_read(task.process.uc, name)
        return self.engine.context_reg_read(task.context, name)

    def snapshot_reader(self) -> SnapshotReader:
        """A per-instruction reader of every general register of the current process's
        CPU as one int (see :class:`SnapshotReader`)."""
        return self.engine.snapshot_reader(self.uc)

    # ------------------------------------------------------------------ Ctrl-C
    def interruptible(self) -> Interruptible:
        """Context manager: SIGINT stops the guest cleanly instead of killing the tool.

        Unicorn runs with the GIL released, so a helper thread waiting on Python's signal
        wakeup fd calls ``emu_stop`` the moment Ctrl-C arrives.
        """
        return Interruptible(self)

    def open_guest_file(self, path: str, flags: int = os.O_RDONLY) -> OpenFile | int:
        """A guest path opened as the current task would open it (filp_open through the
        guest's view: sysroot, mounts, permissions): an open file description with
        ``pread``/``fstat``/``put`` (the caller owns one reference), or a negative errno."""
        f = self.syscalls.open_guest_path(self.task, path, flags)
        return f if isinstance(f, int) else f.get()
