"""The CPU's MMU on Unicorn: guest paging on, the machine's RAM as physical memory,
TLB flushes and translation-cache drops by virtual address.

Why paging at all: without it Unicorn treats every page as executable, and since 2.1.2
a store to an executable page always takes the self-modifying-code slow path
(``notdirty_write`` keeps ``TLB_NOTDIRTY`` set for pages whose TLB entry is executable),
so every guest store cost about 16 times a load.  With 4-level paging, ``EFER.NXE`` and
NX on data pages, stores to data pages take the fast path again.  The page tables are
the kernel model's (``kernel_model.arch.x86.mm.pgtable``); this module only points
CR3 at them and tells the CPU when they changed.

The CPU runs the guest at CPL 0 (Unicorn's flat 64-bit setup), so ``CR0.WP`` makes
read-only pages read-only for it too.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from typing import Any

from unicorn import (
    UC_ARCH_X86,
    UC_CTL_IO_WRITE,
    UC_CTL_TB_FLUSH,
    UC_CTL_TB_REMOVE_CACHE,
    UC_CTL_TLB_FLUSH,
    UC_MODE_64,
    UC_PROT_ALL,
    UcError,
)
from unicorn import x86_const as X
from unicorn.unicorn_py3.unicorn import Uc, uclib  # Uc: see emu.engine.regfile

from emu.engine.regfile import cpu_window_layout

_MSR_EFER = 0xC000_0080
_EFER_SCE, _EFER_LME, _EFER_LMA, _EFER_NXE = 1 << 0, 1 << 8, 1 << 10, 1 << 11
_CR0_PE, _CR0_WP, _CR0_PG = 1 << 0, 1 << 16, 1 << 31
_CR4_PAE = 1 << 5

# uc_ctl requests as the binding encodes them (write; number of arguments << 26)
_CTL_TLB_FLUSH = (UC_CTL_IO_WRITE << 30) | UC_CTL_TLB_FLUSH
_CTL_TB_FLUSH = (UC_CTL_IO_WRITE << 30) | UC_CTL_TB_FLUSH
_CTL_TB_REMOVE_CACHE = (UC_CTL_IO_WRITE << 30) | (2 << 26) | UC_CTL_TB_REMOVE_CACHE


def map_ram(uc, zone) -> None:
    """Make a zone of the machine's RAM physical memory of ``uc`` (one region per zone)."""
    uc.mem_map_ptr(zone.phys, zone.size, UC_PROT_ALL, zone.host)


def enable_paging(uc, cr3: int) -> None:
    """Long mode with 4-level paging rooted at ``cr3``, NX enabled, CR0.WP set."""
    uc.msr_write(_MSR_EFER, uc.msr_read(_MSR_EFER) | _EFER_SCE | _EFER_LME | _EFER_LMA | _EFER_NXE)
    uc.reg_write(X.UC_X86_REG_CR4, uc.reg_read(X.UC_X86_REG_CR4) | _CR4_PAE)
    uc.reg_write(X.UC_X86_REG_CR3, cr3)
    uc.reg_write(X.UC_X86_REG_CR0, uc.reg_read(X.UC_X86_REG_CR0) | _CR0_PE | _CR0_WP | _CR0_PG)


def set_cr3(uc, cr3: int) -> None:
    uc.reg_write(X.UC_X86_REG_CR3, cr3)


def fault_address(uc) -> int:
    """CR2: the linear address of the last page fault."""
    return uc.reg_read(X.UC_X86_REG_CR2)


def _ctl(uc, request: int, *args) -> None:
    status = uclib.uc_ctl(uc._uch, request, *args)
    if status:
        raise UcError(status)


def flush_tlb(uc) -> None:
    """flush_tlb_mm: every cached translation of ``uc`` (and its jump cache) goes."""
    if uc is not None and uc._uch is not None:
        _ctl(uc, _CTL_TLB_FLUSH)


def flush_tb(uc) -> None:
    """Every translated block of ``uc`` goes."""
    if uc is not None and uc._uch is not None:
        _ctl(uc, _CTL_TB_FLUSH)


def drop_code(uc, va: int, n: int) -> None:
    """Drop the translated blocks of [va, va+n) on ONE present executable page:
    Unicorn finds the frame through the TLB (a page it cannot fetch from is skipped)."""
    _ctl(uc, _CTL_TB_REMOVE_CACHE, ctypes.c_uint64(va), ctypes.c_uint64(va + n))


# CPUX86State after ``dr[8]``: ``union { cpu_breakpoint[4]; cpu_watchpoint[4] }`` then
# ``int old_exception``; before it ``int error_code; int exception_is_int;
# target_ulong exception_next_eip``.
_DR_TO_OLD_EXCEPTION = 8 * 8 + 4 * 8
_DR_TO_ERROR_CODE = -16
_DR_TO_IS_INT = -12


def _env(uc) -> int | None:
    layout = cpu_window_layout()
    if layout is None:
        return None
    uch = uc._uch.value if isinstance(uc._uch, ctypes.c_void_p) else int(uc._uch)
    cpu = ctypes.c_uint64.from_address(uch + layout[0]).value  # type: ignore[operator]  # a live handle
    return cpu + layout[1] if cpu else None


@functools.cache
def _debug_registers_offset() -> int | None:
    """Where ``env.dr[0]`` is, from ``env.regs``: found once on a scratch instance
    by writing patterns to DR0-DR3 through the API and looking for them in the CPU
    state; None if not found (then the fields after it are not used)."""
    uc = Uc(UC_ARCH_X86, UC_MODE_64)
    uc.ctl_set_tcg_buffer_size(1 << 20)  # never runs: not the default 1 GiB of address space
    uc.reg_read(X.UC_X86_REG_RAX)  # the CPU exists from here on
    env = _env(uc)
    if env is None:
        return None
    patterns = [0x0DB6_0000_0000_0000 | k << 40 | 0xD0D0 + k for k in range(4)]
    for k, value in enumerate(patterns):
        uc.reg_write(X.UC_X86_REG_DR0 + k, value)
    image = ctypes.string_at(env, 1 << 16)
    want = struct.pack("<4Q", *patterns)
    off = image.find(want)
    while off >= 0 and off % 8:
        off = image.find(want, off + 1)
    if off < 0 or struct.unpack_from("<i", image, off + _DR_TO_OLD_EXCEPTION)[0] != -1:
        return None
    return off


def exception_state_known() -> bool:
    """Can the engine read the #PF error code and end an exception's delivery?"""
    return _debug_registers_offset() is not None


class _ExceptionFields:
    """``env->error_code``, ``env->exception_is_int`` and ``env->old_exception`` of one
    instance, in place (found once per instance: the CPU state does not move)."""

    __slots__ = ("error_code", "is_int", "old_exception")

    def __init__(self, at: int):
        self.error_code = ctypes.c_int32.from_address(at + _DR_TO_ERROR_CODE)
        self.is_int = ctypes.c_int32.from_address(at + _DR_TO_IS_INT)
        self.old_exception = ctypes.c_int32.from_address(at + _DR_TO_OLD_EXCEPTION)


def _fields(uc) -> _ExceptionFields | None:
    fields: Any = getattr(uc, "uemu_exception_fields", False)  # found once, kept on the instance
    if fields is False:
        off = _debug_registers_offset()
        env = _env(uc) if off is not None else None
        fields = uc.uemu_exception_fields = _ExceptionFields(env + off) if env is not None and off is not None else None
    return fields


def error_code(uc) -> int | None:
    """``env->error_code`` of the exception being reported (None where unknown)."""
    fields = _fields(uc)
    return None if fields is None else fields.error_code.value & 0xFFFF_FFFF


def exception_is_int(uc) -> bool:
    """Was the exception being reported raised by an ``int $n`` instruction
    (``env->exception_is_int``), not by a fault?  True where unknown."""
    fields = _fields(uc)
    return fields is None or bool(fields.is_int.value)


def exception_delivered(uc) -> None:
    """The exception was handled: ``env->old_exception = -1``, as do_interrupt does
    once it delivered one.  Unicorn hands exceptions to its interrupt hook instead of
    delivering them, so without this the next #PF would be a double fault (#DF), the
    one after a triple fault that silently stops the CPU.  Also needed before every
    ``emu_start``: the one before ended by dropping the translations at its ``until``
    address, which Unicorn looks up through the MMU - a non-canonical or unmapped
    address raises an exception nobody delivers."""
    fields = _fields(uc)
    if fields is not None:
        fields.old_exception.value = -1
