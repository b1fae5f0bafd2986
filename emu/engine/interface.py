"""The engine as the kernel model sees it: what the modeled kernel drives the CPU
through, and what the CPU reports back.  No Unicorn here - the kernel model imports
this module only, never the engine that implements it (:mod:`emu.engine.cpu`).

An address space is one engine CPU (``cpu``: an opaque handle the kernel keeps in
``Process.cpu``) with its memory (``Process.mem``: the mm, guest memory and VMAs,
:class:`emu.engine.memory.Memory`) and register file (``Process.cpu_regs``,
:class:`RegisterAccess`); the kernel reads and writes guest state through those two
and the operations below.

Traps come back to ONE :class:`TrapHandler`, registered once with
:meth:`Engine.set_trap_handler`: the engine's native callbacks call its bound methods
directly (no dispatch in between: the int3 of a probe hit costs one Python frame
before the kernel's ``do_int3``).  A handler's exception is kept and re-raised by
:meth:`Engine.raise_hook_error` after the CPU stopped; a guest memory fault inside a
handler (:class:`kernel_model.mm.mm_types.GuestFault`) goes to
:meth:`TrapHandler.trap_access_fault`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import IntEnum
from typing import Protocol


class Vector(IntEnum):
    """The exception vectors the engine tells apart (any other vector is a software
    ``int $n``, reported with its number)."""

    DE = 0  # divide error
    DB = 1  # debug: single-step (TF)
    BP = 3  # breakpoint: int3
    GP = 13  # general protection fault (a non-canonical address, a privileged instruction)
    PF = 14  # page fault (CR2: the address)


# What a breakpoint fast path returns when the registers were stored by the trap's
# general end (see :meth:`Engine.set_breakpoint_fast_path`): nothing for the engine to store.
REGISTERS_STORED = -1

# The ``kind`` of :meth:`TrapHandler.exc_fault`: an invalid instruction, or an access
# to memory that is not mapped or not allowed.
INVALID_OPCODE = "ill"
FAULT_ACCESSES = ("read", "write", "fetch", "access")


class TrapHandler(ABC):
    """The receiver of every trap of the engine (the kernel's IDT entries)."""

    @abstractmethod
    def exc_int3(self, cpu) -> None:
        """#BP on ``cpu`` (the CPU the trap happened on; rip is after the int3)."""

    @abstractmethod
    def exc_debug(self, cpu) -> None:
        """#DB on ``cpu``: the single-step trap TF asks for."""

    @abstractmethod
    def exc_interrupt(self, cpu, vector: int) -> None:
        """Any other vector: #DE, ``int $n``."""

    @abstractmethod
    def exc_page_fault(self, cpu, address: int, error_code: int | None) -> bool:
        """#PF on ``cpu`` at ``address`` (CR2) with the CPU's ``error_code`` (None where
        the engine cannot read it); rip is at the faulting instruction, which
        runs again unless the handler moved it.  True when the fault was a data access
        that was handled: the instruction had started (it was counted) and runs again."""

    @abstractmethod
    def exc_general_protection(self, cpu) -> None:
        """#GP raised by an instruction (not ``int $13``); rip is at it."""

    @abstractmethod
    def do_syscall_64(self) -> None:
        """The ``syscall`` instruction of the task on the CPU (entry_SYSCALL_64)."""

    @abstractmethod
    def exc_port_io(self) -> None:
        """``in`` / ``out``: a user task has no I/O privilege (#GP)."""

    @abstractmethod
    def exc_fault(self, kind: str, addr: int) -> None:
        """The CPU stopped on a fault: ``kind`` is :data:`INVALID_OPCODE` or one of
        :data:`FAULT_ACCESSES` at ``addr``."""

    @abstractmethod
    def trap_access_fault(self, fault, at_breakpoint: bool) -> None:
        """A trap handler touched guest memory that is not there (``fault``, a
        GuestFault); ``at_breakpoint``: it was handling an int3."""


class RegisterAccess(Protocol):
    """An address space's register file (``Process.cpu_regs``): the registers of the
    task on its CPU as ``pt_regs`` (:class:`kernel_model.arch.x86.ptrace.PtRegs`).
    The trap paths get them lazily (only rip and TF read at once) and write back only
    what changed."""

    def read_all(self) -> list:
        """Every general register, in ``GPR_NAMES`` order."""

    def write(self, changes: dict, *, in_trap: bool = False) -> None:
        """Write ``changes`` (index -> value); ``in_trap``: from a ``syscall`` hook,
        whose rip the engine advances by 2 after it returns."""

    def trap_regs(self, orig_rax: int):
        """The registers at a trap, lazily (a ``PtRegs``)."""

    def write_back(self, regs) -> None:
        """Store what a trap handler changed in ``trap_regs``' registers."""

    def syscall_entry(self) -> tuple:
        """``(regs, args)`` at a ``syscall`` instruction, as the hardware leaves
        them (rcx, r11 <- rip, rflags)."""

    def syscall_exit(self, regs) -> None:
        """The registers a syscall returns with (SYSRET or IRET)."""


class Fpu(ABC):
    """XSAVE-family instructions on a CPU's FPU state (images as
    :mod:`kernel_model.arch.x86.kernel.fpu` describes them)."""

    @abstractmethod
    def xsave(self, cpu) -> bytes:
        """The user features' XSAVE image."""

    @abstractmethod
    def xrstor(self, cpu, image: bytes, rfbm: int) -> bool:
        """XRSTOR; False (nothing changed) where the instruction would #GP."""

    @abstractmethod
    def fxrstor(self, cpu, image: bytes) -> bool:
        """FXRSTOR of the legacy region; False on a reserved MXCSR bit."""

    @abstractmethod
    def init(self, cpu, features: int = ...) -> None:
        """The components in ``features`` to their initial state."""

    @abstractmethod
    def copy(self, src, dst) -> None:
        """``dst`` gets ``src``'s FPU registers (fpu_clone)."""


class Quantum(ABC):
    """The time slice of the task on the CPU, counted in translated blocks."""

    @property
    @abstractmethod
    def native(self) -> bool:
        """False: slices are instruction counts instead."""

    @property
    @abstractmethod
    def armed(self) -> bool:
        """The running emu_start has a slice."""

    @abstractmethod
    def arm(self, blocks: int | None) -> None:
        """The next start may run ``blocks`` blocks (None: no limit)."""

    @abstractmethod
    def attach(self, cpu) -> None:
        """Count blocks on ``cpu``."""

    @abstractmethod
    def detach(self, cpu) -> None:
        """Stop counting blocks on ``cpu`` (nothing runs per block afterwards)."""

    @abstractmethod
    def shorten(self, blocks: int) -> None:
        """Let at most ``blocks`` more blocks of the running slice run."""

    @abstractmethod
    def expired(self) -> bool:
        """Did the last run end because its slice was used up?"""

    @abstractmethod
    def ran(self) -> int:
        """Blocks the last run executed."""


class Engine(ABC):
    """The CPU the kernel model runs tasks on.

    Attributes the kernel uses: ``fpu`` (:class:`Fpu`), ``quantum``
    (:class:`Quantum`), ``running`` (inside :meth:`start`: a trap handler is
    running), ``in_step`` (the start is a single step), ``stopped_by_hook`` (the
    running start was ended on purpose), ``hook_error`` (a handler's exception, to
    re-raise), ``pending_fault`` (the fault a start is ending on), ``in_code_hook`` /
    ``stop_precounted`` (a front end's hook runs / stopped the CPU before its
    instruction ran), and the instruction clock of counted runs: ``icount``,
    ``emu_base`` / ``emu_count`` (the clock and the count of the running start)."""

    fpu: Fpu
    quantum: Quantum
    running: bool
    in_step: bool
    stopped_by_hook: bool
    hook_error: BaseException | None
    pending_fault: tuple | None
    in_code_hook: bool
    stop_precounted: bool
    icount: int
    emu_base: int
    emu_count: int

    @abstractmethod
    def set_trap_handler(self, handler: TrapHandler) -> None:
        """Where every trap goes, for every CPU made after this call."""

    @abstractmethod
    def new_space(self, counters, limit):
        """``(cpu, mem, regfile)``: an empty address space with its own CPU, its FPU
        in the initial state; ``counters`` / ``limit`` are its memory's."""

    @abstractmethod
    def hooked(self, mem) -> bool:
        """Does a front end's hook still hold ``mem``'s address space (it is freed
        only once the hooks are gone)?"""

    # -- running -------------------------------------------------------------------
    @abstractmethod
    def start(self, cpu, rip: int, timeout: float | None, count: int, blocks: int | None) -> bool:
        """Run ``cpu`` from ``rip`` for at most ``count`` instructions (0: no limit),
        ``blocks`` translated blocks (None: no limit) and ``timeout`` seconds; True
        when a trap handler or a fault ended it."""

    @abstractmethod
    def stop(self, cpu) -> None:
        """From a trap handler: end the running start on purpose (the kernel decided)."""

    @abstractmethod
    def emu_stop(self, cpu) -> None:
        """Ask the running start to end (a reschedule): not counted as a stop by a hook."""

    @abstractmethod
    def raise_hook_error(self) -> None:
        """Re-raise a trap handler's exception, once."""

    @abstractmethod
    def insns_run(self, count: int, stopped_early: bool, cpu) -> int:
        """Instructions the last counted start executed."""

    @abstractmethod
    def timed_out(self, cpu) -> bool:
        """Did the running start's timeout fire?"""

    @abstractmethod
    def translation_mode(self, cpu, mode: str) -> None:
        """ "step" or "run": counted single steps and free runs need different
        translations."""

    @abstractmethod
    def flush(self, cpu) -> None:
        """Drop ``cpu``'s translated blocks (and its breakpoint fast paths: a restored
        checkpoint or rewritten code makes them stale)."""

    @abstractmethod
    def set_breakpoint_fast_path(self, cpu, vaddr: int, handler) -> bool:
        """Send the int3 at ``vaddr`` on ``cpu`` to ``handler()`` before
        :meth:`TrapHandler.exc_int3`, when TF is clear.  ``handler`` returns the
        address to resume at (the engine stores it in rip), :data:`REGISTERS_STORED`
        (the trap ended the general way, the registers are stored) or None: it did
        nothing, and ``exc_int3`` runs.
        False when the engine cannot (no CPU state in place): every trap goes to
        ``exc_int3``."""

    @abstractmethod
    def breakpoint_fast_path(self, cpu, vaddr: int):
        """The handler set for ``vaddr`` on ``cpu``, or None."""

    @abstractmethod
    def clear_breakpoint_fast_path(self, cpu, vaddr: int) -> None:
        """Forget the fast path of ``vaddr`` (if any)."""

    # -- registers and CPU state ---------------------------------------------------------
    @abstractmethod
    def pc(self, cpu) -> int:
        """rip."""

    @abstractmethod
    def reg_read(self, cpu, name: str) -> int:
        """Any register by name (``rax``, ``fs_base``, ``xmm0``...)."""

    @abstractmethod
    def reg_write(self, cpu, name: str, value: int) -> None:
        """Write one register by name."""

    @abstractmethod
    def context_save(self, cpu):
        """The CPU state (an immutable object) of a task leaving the CPU."""

    @abstractmethod
    def context_restore(self, cpu, context) -> None:
        """Give ``cpu`` a saved CPU state back."""

    @abstractmethod
    def context_reg_read(self, context, name: str) -> int:
        """A register of a saved CPU state by name."""

    # -- decoding what the CPU does not report ---------------------------------------
    @abstractmethod
    def skips_tf_trap(self, mem, rip: int) -> int:
        """Length of an instruction at ``rip`` after which the CPU raises no
        single-step #DB though TF asks for one (0: none)."""

    @abstractmethod
    def is_hlt(self, mem, rip: int) -> bool:
        """Is the instruction at ``rip`` a ``hlt``?"""

    @abstractmethod
    def hlt_before(self, mem, rip: int, count: int) -> bool:
        """Did the last start end silently on a ``hlt`` just before ``rip``?"""
