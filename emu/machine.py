"""The machine: one Unicorn CPU, the process and its tasks, traps, syscalls, runs.

The machine hides every Unicorn quirk the rest of the project must not know about
(DESIGN section 3): translated blocks that survive ``mem_write`` (see ``Memory.text_poke``),
the ``syscall`` hook's rip that Unicorn advances by 2 after the hook returns, Unicorn's
``syscall`` that clobbers neither rcx nor r11, and the binding's per-call cost (registers
are read in one native batch per trap, written back only when changed).

Hooks installed: interrupts, invalid memory, invalid instructions, and the ``syscall``,
``in`` and ``out`` instructions - none of them runs per instruction.  Traps are handled
inside the hook and execution continues in the same ``emu_start``; only the end of the
run (exit, fatal signal, stop request) leaves it.
"""

from __future__ import annotations

import os
import signal as host_signal
import threading
import time

from unicorn import (UC_ARCH_X86, UC_HOOK_INSN, UC_HOOK_INSN_INVALID, UC_HOOK_INTR,
                     UC_HOOK_MEM_INVALID, UC_MODE_64, Uc, UcError)
from unicorn import unicorn_const as UCC
from unicorn import x86_const as X

from .counters import Counters
from .errors import InputError
from .memory import GuestFault, MappedFile, Memory
from .regs import RF, TF, PtRegs, RegisterFile
from .signals import SIGNALS, RunResult
from .task import Process, Task

# emu_start's "until": a non-canonical address no guest can reach.
_NEVER = 0xDEAD_BEEF_0000_0000
DEFAULT_MAX_INSNS = 2_000_000_000
DEFAULT_TIMEOUT = 120.0

SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGSEGV = (SIGNALS[n] for n in
                                            ("SIGILL", "SIGTRAP", "SIGBUS", "SIGFPE", "SIGSEGV"))

_MEM_ACCESS = {
    UCC.UC_MEM_READ_UNMAPPED: "read", UCC.UC_MEM_WRITE_UNMAPPED: "write",
    UCC.UC_MEM_FETCH_UNMAPPED: "fetch", UCC.UC_MEM_READ_PROT: "read",
    UCC.UC_MEM_WRITE_PROT: "write", UCC.UC_MEM_FETCH_PROT: "fetch",
}


class _Stop(Exception):
    """Internal: leave the current emu_start with a result."""


class RegsView:
    """``machine.regs``: live attribute access to the current task's registers."""

    def __init__(self, machine: "Machine"):
        object.__setattr__(self, "_m", machine)

    def __getattr__(self, name):
        return getattr(self._m.read_regs(), name)

    def __setattr__(self, name, value):
        regs = self._m.read_regs()
        setattr(regs, name, value)
        self._m.write_regs(regs)

    def snapshot(self) -> PtRegs:
        return self._m.read_regs()

    def __repr__(self):
        return repr(self._m.read_regs())


class Machine:
    """An x86_64 Linux process on Unicorn with the uprobes kernel model around it.

    Build one with :meth:`from_elf`, :meth:`from_asm` or :meth:`from_guest`; then
    ``run()``, ``step()``, read ``regs``/``mem``/``counters``, and register probes with
    ``uprobes``.
    """

    def __init__(self, *, kernel: str = "latest", stdin: bytes = b"", passthrough: bool = False,
                 grant_dir: str | None = None, seed: int = 0, comm: str = "guest",
                 **kernel_overrides):
        from kernel_model.kernel import Kernel  # the modeled kernel owns traps 1/3, 335, 336
        from .syscalls import Syscalls

        self.uc = Uc(UC_ARCH_X86, UC_MODE_64)
        self.counters = Counters()
        self.mem = Memory(self.uc, self.counters)
        self.regfile = RegisterFile(self.uc)
        self.process = Process(pid=1000, mem=self.mem, comm=comm)
        self.task = Task(tid=1000, process=self.process)
        self.process.tasks.append(self.task)
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.passthrough = passthrough
        self.symbols: dict[str, int] = {}
        self.syscalls = Syscalls(self, stdin=stdin, grant_dir=grant_dir, seed=seed)
        self.kernel = Kernel(self, kernel, **kernel_overrides)
        self._result: RunResult | None = None
        self._pending_fault: tuple[str, int] | None = None
        self._stop_requested: str | None = None
        self.insn_count: int | None = None
        self.exited = False
        self.last_result: RunResult | None = None
        self.listeners: list = []        # callables(kind, **info): syscalls, signals
        self._install_hooks()

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_elf(cls, path: str, argv: list[str] | None = None, env: list[str] | None = None,
                 **kw) -> "Machine":
        from .elf import load_elf_file
        from .loader import load_image
        image = load_elf_file(path)
        m = cls(comm=os.path.basename(path)[:15], **kw)
        load_image(m, image, MappedFile(path, image.data, image), argv or [path], env)
        return m

    @classmethod
    def from_bytes(cls, data: bytes, path: str, argv: list[str] | None = None,
                   env: list[str] | None = None, **kw) -> "Machine":
        from .elf import parse_elf
        from .loader import load_image
        image = parse_elf(data, path)
        m = cls(comm=os.path.basename(path)[:15], **kw)
        load_image(m, image, MappedFile(path, image.data, image), argv or [path], env)
        return m

    @classmethod
    def from_asm(cls, source: str, *, path: str = "asm-guest", argv: list[str] | None = None,
                 **kw) -> "Machine":
        from .asm import asm_to_elf
        elf, _ = asm_to_elf(source)
        return cls.from_bytes(elf, path, argv=argv, **kw)

    @classmethod
    def from_guest(cls, name: str, argv: list[str] | None = None, **kw) -> "Machine":
        from guest_programs import build_guest
        elf, path = build_guest(name)
        return cls.from_bytes(elf, path, argv=argv or [path], **kw)

    @classmethod
    def from_program(cls, program: str, argv: list[str] | None = None, **kw) -> "Machine":
        """A CLI PROGRAM: ``guest:NAME`` or a path to a static ELF."""
        if program.startswith("guest:"):
            return cls.from_guest(program[len("guest:"):], argv=argv, **kw)
        return cls.from_elf(program, argv=argv, **kw)

    # ------------------------------------------------------------------ properties
    @property
    def uprobes(self):
        return self.kernel.uprobes

    @property
    def regs(self) -> RegsView:
        return RegsView(self)

    @property
    def profile(self):
        return self.kernel.profile

    # ------------------------------------------------------------------ registers
    def read_regs(self) -> PtRegs:
        return PtRegs(self.regfile.read_all(), self.task.orig_rax)

    def write_regs(self, regs: PtRegs) -> None:
        self.regfile.write(regs.changed())
        self.task.orig_rax = regs.orig_rax

    # ------------------------------------------------------------------ symbols
    def symbolize(self, addr: int) -> str | None:
        """``name+0xoff`` for an address in a mapped ELF, or the mapping name."""
        vma = self.mem.find_vma(addr)
        if vma is None:
            return None
        if vma.file is not None and vma.file.elf is not None:
            elf = vma.file.elf
            link = addr - self.load_bias(vma.file)
            hit = elf.symbolize(link)
            if hit:
                name, off = hit
                return f"{name}+{off:#x}" if off else name
        return vma.name or (vma.file.path if vma.file else None)

    def load_bias(self, file: MappedFile) -> int:
        return getattr(file, "load_bias", 0)

    def resolve(self, name: str) -> int:
        """Address of a symbol of the main executable (load bias applied)."""
        from .errors import SymbolError
        exe = self.process.exe
        if exe is None or exe.elf is None:
            raise SymbolError(f"unknown symbol {name!r}: no executable loaded")
        return exe.elf.resolve(name).value + self.load_bias(exe)

    # ------------------------------------------------------------------ hooks
    def _install_hooks(self) -> None:
        uc = self.uc
        uc.hook_add(UC_HOOK_INTR, self._on_interrupt)
        uc.hook_add(UC_HOOK_MEM_INVALID, self._on_mem_invalid)
        uc.hook_add(UC_HOOK_INSN_INVALID, self._on_insn_invalid)
        uc.hook_add(UC_HOOK_INSN, self._on_syscall, None, 1, 0, X.UC_X86_INS_SYSCALL)
        uc.hook_add(UC_HOOK_INSN, self._on_port_io, None, 1, 0, X.UC_X86_INS_IN)
        uc.hook_add(UC_HOOK_INSN, self._on_port_io, None, 1, 0, X.UC_X86_INS_OUT)
        self._hooks_extra: list = []

    def _finish(self, result: RunResult) -> None:
        if self._result is None:
            self._result = result
        self.uc.emu_stop()

    def _guard(self, fn, *args):
        """Run a hook body; Python errors inside Unicorn callbacks are kept and re-raised
        after emu_start returns (Unicorn would otherwise swallow them)."""
        try:
            return fn(*args)
        except _Stop:
            self.uc.emu_stop()
        except BaseException as e:  # noqa: BLE001 - re-raised in run()
            self._hook_error = e
            self.uc.emu_stop()
        return None

    def _on_interrupt(self, uc, intno, _data):
        self._guard(self._interrupt, intno)

    def _interrupt(self, intno: int) -> None:
        regs = self.read_regs()
        task = self.task
        if intno == 3:
            self.counters.bp_traps += 1
            self.kernel.do_int3(task, regs)
        elif intno == 1:
            self.counters.db_traps += 1
            self.kernel.do_debug(task, regs)
        elif intno == 0:
            self.kernel.fixup_fault(task, regs)
            self.force_sig(task, SIGFPE, addr=regs.rip, detail="integer divide error", regs=regs)
            return
        elif intno == 0x80:
            # int $0x80 enters the ia32 syscall table, which this model does not provide
            self.counters.unknown_syscalls["int80:" + str(regs.rax & 0xFFFFFFFF)] += 1
            regs.rax = -38  # -ENOSYS
        else:
            # int $n with a kernel-only gate: #GP, reported at the int instruction
            regs.rip -= 2
            self.kernel.fixup_fault(task, regs)
            self.force_sig(task, SIGSEGV, addr=0, detail=f"general protection (int ${intno:#x})",
                           regs=regs)
            return
        self.write_regs(regs)

    def _on_mem_invalid(self, uc, access, addr, size, value, _data):
        self._pending_fault = (_MEM_ACCESS.get(access, "access"), addr)
        return False

    def _on_insn_invalid(self, uc, _data):
        self._pending_fault = ("ill", 0)
        return False

    def _on_port_io(self, uc, *args):
        self._guard(self._port_io)
        return 0

    def _port_io(self) -> None:
        regs = self.read_regs()
        self.force_sig(self.task, SIGSEGV, addr=0, detail="general protection (port I/O)", regs=regs)

    def _on_syscall(self, uc, _data):
        self._guard(self._syscall)

    def _syscall(self) -> None:
        """The ``syscall`` instruction as the hardware and entry_SYSCALL_64 do it."""
        regs = self.read_regs()
        nxt = regs.rip + 2
        regs.rcx = nxt                    # hardware: rcx <- next rip
        regs.r11 = regs.eflags & ~RF      # hardware: r11 <- rflags
        regs.rip = nxt
        regs.orig_rax = regs.rax
        nr = regs.rax
        self.counters.syscalls[nr] += 1
        if self.listeners:
            self.emit("syscall", task=self.task, nr=nr, rip=nxt - 2,
                      args=(regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9))
        self.syscalls.dispatch(self.task, regs)
        if self.listeners:
            self.emit("syscall_return", task=self.task, nr=nr, ret=regs.rax, rip=regs.rip)
        if self._result is not None:
            return
        # Return to user: SYSRET when rcx/r11 still match rip/flags, else the IRET path;
        # either way the task resumes with pt_regs as the kernel left them.
        regs.orig_rax = -1
        changes = regs.changed()
        # Unicorn adds 2 to rip after this hook returns: resume at X by writing X - 2.
        changes[16] = (regs.rip - 2) & 0xFFFFFFFFFFFFFFFF
        self.regfile.write(changes)
        self.task.orig_rax = -1

    def emit(self, kind: str, **info) -> None:
        for fn in self.listeners:
            fn(kind, **info)

    # ------------------------------------------------------------------ signals
    def force_sig(self, task: Task, signo: int, *, addr: int | None = None, detail: str = "",
                  regs: PtRegs | None = None) -> None:
        """Deliver a signal.  Guest signal handlers are not modeled: every signal takes
        its default action, which for the signals the machine raises is to terminate."""
        regs = regs or self.read_regs()
        self.counters.signals[signo] += 1
        if self.listeners:
            self.emit("signal", task=task, signo=signo, addr=addr, rip=regs.rip, detail=detail)
        self._finish(RunResult("signal", signal=signo, fault_addr=addr, rip=regs.rip,
                               rip_symbol=self.symbolize(regs.rip), detail=detail))
        raise _Stop()

    def exit_group(self, code: int) -> None:
        self.exited = True
        self._finish(RunResult("exit", exit_code=code & 0xFF))
        raise _Stop()

    def stop(self, detail: str = "stop requested") -> None:
        """Ask a running guest to stop at the next opportunity (thread-safe)."""
        self._stop_requested = detail
        self.uc.emu_stop()

    # ------------------------------------------------------------------ running
    def run(self, max_insns: int | None = DEFAULT_MAX_INSNS, timeout: float | None = DEFAULT_TIMEOUT,
            *, raise_on_signal: bool = False) -> RunResult:
        """Run until exit, a fatal signal, the instruction budget or the timeout.

        ``max_insns`` uses Unicorn's native instruction counter (no Python hook);
        ``None`` runs without a budget, bounded by ``timeout`` (wall-clock seconds) only.
        """
        if self.exited:
            raise InputError("the guest has already exited")
        self._result = None
        self._hook_error = None
        self._stop_requested = None
        start = time.perf_counter()
        count = int(max_insns) if max_insns else 0
        timeout_us = int(timeout * 1_000_000) if timeout else 0
        self._pending_fault = None
        rip = self.uc.reg_read(X.UC_X86_REG_RIP)
        try:
            self.uc.emu_start(rip, _NEVER, timeout=timeout_us, count=count)
        except UcError as e:
            if self._result is None and self._hook_error is None:
                self._fault_to_signal(e)
        if self._hook_error is not None:
            err, self._hook_error = self._hook_error, None
            raise err
        result = self._result or self._classify_stop(start, timeout, count)
        result.stdout, result.stderr = bytes(self.stdout), bytes(self.stderr)
        self.last_result = result
        if raise_on_signal and result.reason == "signal":
            from .errors import GuestSignalError
            raise GuestSignalError(result)
        return result

    def _fault_to_signal(self, err: UcError) -> None:
        regs = self.read_regs()
        kind, addr = self._pending_fault or ("ill", 0)
        self._pending_fault = None
        self.kernel.fixup_fault(self.task, regs)
        self.write_regs(regs)
        try:
            if kind == "ill":
                self.force_sig(self.task, SIGILL, addr=regs.rip, detail="invalid opcode", regs=regs)
            else:
                self.force_sig(self.task, SIGSEGV, addr=addr, detail=f"{kind} fault", regs=regs)
        except _Stop:
            pass

    def _classify_stop(self, start: float, timeout: float | None, count: int) -> RunResult:
        rip = self.uc.reg_read(X.UC_X86_REG_RIP)
        if self._stop_requested:
            return RunResult("stopped", rip=rip, rip_symbol=self.symbolize(rip),
                             detail=self._stop_requested)
        # Unicorn stops on hlt, which a user task cannot execute: #GP -> SIGSEGV.
        try:
            if self.mem.read(rip - 1, 1) == b"\xf4":
                regs = self.read_regs()
                regs.rip = rip - 1
                self.write_regs(regs)
                try:
                    self.force_sig(self.task, SIGSEGV, addr=0, detail="general protection (hlt)",
                                   regs=regs)
                except _Stop:
                    pass
                return self._result
        except GuestFault:
            pass
        elapsed = time.perf_counter() - start
        if timeout and elapsed >= timeout * 0.99:
            return RunResult("timeout", rip=rip, rip_symbol=self.symbolize(rip))
        if count:
            return RunResult("budget", rip=rip, rip_symbol=self.symbolize(rip), insns=count)
        return RunResult("stopped", rip=rip, rip_symbol=self.symbolize(rip), detail="emulation stopped")

    # ------------------------------------------------------------------ Ctrl-C
    def interruptible(self):
        """Context manager: SIGINT stops the guest cleanly instead of killing the tool.

        Unicorn runs with the GIL released, so a helper thread waiting on Python's signal
        wakeup fd calls ``emu_stop`` the moment Ctrl-C arrives.
        """
        return _Interruptible(self)


class _Interruptible:
    def __init__(self, machine: Machine):
        self.m = machine

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            self.active = False
            return self
        self.active = True
        self.r, self.w = os.pipe()
        os.set_blocking(self.w, False)
        self.old_fd = host_signal.set_wakeup_fd(self.w)
        self.old_handler = host_signal.signal(host_signal.SIGINT, lambda *_: None)
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def _watch(self):
        while True:
            data = os.read(self.r, 64)
            if not data or b"\xff" in data:
                return
            if host_signal.SIGINT in data:
                self.m.stop("interrupted (SIGINT)")

    def __exit__(self, *exc):
        if not self.active:
            return False
        host_signal.set_wakeup_fd(self.old_fd)
        host_signal.signal(host_signal.SIGINT, self.old_handler)
        os.write(self.w, b"\xff")
        self.thread.join(1)
        os.close(self.r)
        os.close(self.w)
        return False
