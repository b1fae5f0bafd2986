"""Read-only questions about a machine and its modeled kernel, for front ends and the
debugger core.

Front ends see the kernel model's state through these functions and the typed event
stream (:mod:`kernel_model.trace.events`), so they neither walk its structures nor
compare its internal states; each function says which kernel structure it reads.  The
few names re-exported here are the kernel's vocabulary a front end needs to talk about
what it sees (register names, a memory fault, signal and syscall names, the
environment a program starts with).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from emu.lazy_exports import lazy_exports
from kernel_model.arch.x86.entry.syscall_64 import SYSCALL_NAMES
from kernel_model.arch.x86.ptrace import GPR_NAMES, format_eflags
from kernel_model.errors import RegistrationError
from kernel_model.include.linux.cpumask import NR_CPUS, parse_nr_cpus
from kernel_model.kernel.sched_slice import MAX_SLICE, MIN_SLICE, parse_slice
from kernel_model.kernel.signals import signal_name
from kernel_model.mm.mm_types import PROT_EXEC, PROT_WRITE, GuestFault

if TYPE_CHECKING:
    from kernel_model.arch.x86.kernel.uprobes import MAX_UINSN_BYTES
    from kernel_model.fs.binfmt_elf import DEFAULT_ENV

__all__ = [
    "DEFAULT_ENV",
    "GPR_NAMES",
    "GuestFault",
    "MAX_SLICE",
    "MIN_SLICE",
    "MAX_UINSN_BYTES",
    "NR_CPUS",
    "format_eflags",
    "parse_nr_cpus",
    "parse_slice",
    "signal_name",
    "syscall_name",
    "registered_uprobes",
    "optimized_call_size",
    "grace_periods",
    "engine_capabilities",
    "describe_engine",
    "is_runnable",
    "in_single_step",
    "trampoline_vaddr",
    "pending_returns",
    "xol_fixups",
    "is_writable",
    "is_writable_code",
    "uprobe_refusal",
    "process_auxv",
    "process_exe_link",
]

# Names whose modules load Unicorn, Capstone or the loader: imported when first used, so
# a command line that only parses its arguments (``--help``) does not load them.  The
# functions below that read kernel structures import their modules where they run: by
# then a machine exists and has loaded them.
__getattr__, _dir = lazy_exports(
    __name__,
    {
        "MAX_UINSN_BYTES": "kernel_model.arch.x86.kernel.uprobes",
        "DEFAULT_ENV": "kernel_model.fs.binfmt_elf",
    },
)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_dir()))


# -- the engine ---------------------------------------------------------------------------


def engine_capabilities() -> list[dict]:
    """``[{"name", "ok", "detail"}]``: which of the engine's speed tricks work on this host
    and Unicorn build (the register window, the native block quantum, the instruction
    counter, the exception state)."""
    from emu.engine.capabilities import engine_capabilities as capabilities

    return capabilities()


def describe_engine(caps: list[dict]) -> str:
    """One line: ``engine: register window in place, ...`` with each fallback named."""
    from emu.engine.capabilities import describe

    return describe(caps)


# -- uprobes ---------------------------------------------------------------------------


def registered_uprobes(machine) -> list:
    """Every uprobe registered on the machine (the ``uprobes_tree``), each with its
    ``file``, ``offset``, ``consumers``, ``hits`` and analysis (``arch``)."""
    return list(machine.kernel.uprobes.tree.values())


def grace_periods(machine) -> dict:
    """The grace periods unregistrations have waited for so far, by RCU flavor
    (``synchronize_srcu(&uprobes_srcu)``, ``synchronize_rcu_tasks_trace()``,
    ``synchronize_srcu(&uretprobes_srcu)``: ``uprobe_unregister_sync``)."""
    return machine.kernel.uprobes.sync.grace_periods()


def optimized_call_size(machine, uprobe, vaddr: int) -> int | None:
    """How many bytes at ``vaddr`` the optimized probe's ``call`` into the uprobe
    trampoline covers (6.18+ ``swbp_optimize``); None when the site is not optimized."""
    optimizer = machine.kernel.optimizer
    return optimizer.design.size if optimizer.is_optimized(machine.process, uprobe, vaddr) else None


def is_runnable(task) -> bool:
    """The task can run (``TASK_RUNNING``): neither sleeping in a syscall nor dead."""
    return task.state == "running"


def in_single_step(task) -> bool:
    """The task is single-stepping a probed instruction out of line: between
    ``pre_ssout`` and the #DB that ends it (``utask->state == UTASK_SSTEP``)."""
    from kernel_model.kernel.events.uprobes_types import UTASK_SSTEP

    utask = task.utask
    return utask is not None and utask.state == UTASK_SSTEP


def trampoline_vaddr(process) -> int | None:
    """The uretprobe trampoline's address in ``process``: slot 0 of its ``[uprobes]``
    XOL area (``uprobe_get_trampoline_vaddr``); None before the area exists."""
    mm = process.mm_uprobes
    area = mm.xol_area if mm is not None else None
    return area.vaddr if area is not None else None


def pending_returns(task) -> list | None:
    """The task's pending return instances (``utask->return_instances``), newest first:
    each has the hijacked ``stack`` slot, the ``orig_ret_vaddr`` and the ``func``.
    None while the task has no uprobes state (``current->utask``: it never met a probe)."""
    utask = task.utask
    return list(reversed(utask.return_instances)) if utask is not None else None


def xol_fixups(arch_uprobe) -> tuple[str, ...]:
    """The fixups ``arch_uprobe_post_xol`` applies after an out-of-line step of the
    analysed instruction: ``"ip"``, ``"call"`` (a return address pushed) and
    ``"setf"``, in that order."""
    from kernel_model.arch.x86.lib.insn import FIX_CALL, FIX_IP, FIX_SETF

    fixups = arch_uprobe.fixups
    return tuple(name for bit, name in ((FIX_IP, "ip"), (FIX_CALL, "call"), (FIX_SETF, "setf")) if fixups & bit)


def uprobe_refusal(insn: bytes, profile, vaddr: int) -> str | None:
    """Why the kernel would refuse a probe on ``insn`` (the bytes ``prepare_uprobe()``
    copies from the file: :data:`MAX_UINSN_BYTES`) at ``vaddr`` under ``profile``
    (``arch_uprobe_analyze_insn()``), or None when it accepts it."""
    from kernel_model.arch.x86.kernel.uprobes import arch_uprobe_analyze_insn

    try:
        arch_uprobe_analyze_insn(insn, nop_policy=profile.nop_emulation, optimize=profile.optimize, vaddr=vaddr)
    except RegistrationError as e:
        return str(e)
    return None


# -- mappings ---------------------------------------------------------------------------


def is_writable(vma) -> bool:
    """The mapping is writable (VM_WRITE)."""
    return bool(vma.prot & PROT_WRITE)


def is_writable_code(vma) -> bool:
    """A mapping the program may both execute and store into (not a special one such
    as ``[uprobes]``): where self-modifying code can happen without a text poke."""
    return bool(vma.prot & PROT_EXEC and vma.prot & PROT_WRITE and not vma.special)


# -- /proc --------------------------------------------------------------------------------


def process_auxv(machine, process, task) -> bytes:
    """``/proc/PID/auxv`` of ``process``: the (type, value) pairs exec put on its stack
    (``proc_pid_auxv``)."""
    from kernel_model.fs.proc.procfs import auxv_bytes

    return auxv_bytes(machine, process, task)


def process_exe_link(machine, process, task) -> str | int:
    """``/proc/PID/exe`` of ``process``: the executable's path in the guest's view
    (``proc_exe_link``), or a negative errno."""
    from kernel_model.fs.proc.procfs import exe_link

    return exe_link(machine, process, task)


def process_rlimits(machine, process) -> list[tuple[int, int]]:
    """``signal->rlim`` of ``process``: (soft, hard) per resource in RLIMIT_* order, as
    getrlimit reports them (RLIM_INFINITY is 2**64 - 1)."""
    return list(machine.syscalls.rlimits_of(process))


# -- names --------------------------------------------------------------------------------


def syscall_name(nr: int, default: str = "?") -> str:
    """The x86_64 syscall ``nr``'s name (``syscall_64.tbl``), else ``default``."""
    return SYSCALL_NAMES.get(nr, default)
