"""SYSCALL_DEFINE for the model (include/linux/syscalls.h): a handler is registered
where its subsystem lives with ``@syscall(nr, name)``, and ``partial="..."`` says in one
line what of it is not modeled.  The decorator only marks the function; the table
(:mod:`kernel_model.arch.x86.entry.syscall_table`) collects the marks, builds each
machine's dispatch table and renders the documentation from them.

The argument helpers are the casts SYSCALL_DEFINE's wrappers make (``__SC_CAST``): the
guest passes 64-bit registers, a handler reads an ``int``, ``unsigned int`` fd,
``pid_t`` or ``loff_t`` out of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_model.arch.x86.entry.syscall_64 import SYSCALL_NAMES


@dataclass(frozen=True)
class SyscallDef:
    """One syscall the model provides: its number, name, and for one not fully
    modeled a one-line note on what is missing."""

    nr: int
    name: str
    partial: str | None = None

    @property
    def status(self) -> str:
        return "supported" if self.partial is None else "partial"


def syscall(nr: int, name: str, *, partial: str | None = None):
    """Mark a handler as syscall ``nr``; one handler may carry several marks (the
    socket calls that all answer ENOTSOCK)."""
    if SYSCALL_NAMES.get(nr) != name:
        raise ValueError(f"syscall {nr} is {SYSCALL_NAMES.get(nr)!r}, not {name!r}")
    if partial is not None and (not partial or "\n" in partial):
        raise ValueError(f"{name}: the partial note is one non-empty line")

    def mark(fn):
        fn.syscalls = (*getattr(fn, "syscalls", ()), SyscallDef(nr, name, partial))
        return fn

    return mark


def fd_arg(value: int) -> int:
    """A descriptor argument as the kernel reads it: an unsigned int (a negative one
    matches no slot)."""
    return value & 0xFFFFFFFF


def int_arg(value: int) -> int:
    """A C ``int`` argument: the low 32 bits, signed."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >> 31 else value


def pid_t(value: int) -> int:
    """A pid argument as the kernel reads it: a signed 32-bit int."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >> 31 else value


def loff_t(value: int) -> int:
    """A file offset or length argument: a signed 64-bit ``loff_t``."""
    return value - (1 << 64) if value >> 63 else value
