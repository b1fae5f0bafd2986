"""Bare-Unicorn baselines for the bench: the same guest loop on a Unicorn instance with
no machine around it, to time what the engine itself costs.

Machine-side (it is the one place besides :mod:`emu.machine` and :mod:`emu.memory` that
may use Unicorn): the bench deliberately times raw Unicorn, and gets it from here.
"""

from __future__ import annotations

import ctypes
import time

import unicorn
from unicorn import (UC_ARCH_X86, UC_HOOK_CODE, UC_HOOK_INSN, UC_HOOK_INTR, UC_MODE_64, UC_PROT_EXEC,
                     UC_PROT_READ, UC_PROT_WRITE, Uc)
from unicorn import x86_const as X
from unicorn.unicorn_py3.unicorn import uclib

from .errors import EmuError

STACK_TOP = 0x7FF000010000


def unicorn_version() -> str:
    return getattr(unicorn, "__version__", "?")


def _bare_uc(file, int3_site: str | None = None) -> Uc:
    """``file`` (a MappedFile of the bench guest) loaded as the loader lays it out."""
    uc = Uc(UC_ARCH_X86, UC_MODE_64)
    for seg in file.elf.segments:          # the loader's layout: text r-x, data rw-
        start = seg.vaddr & ~0xFFF
        end = (seg.vaddr + seg.memsz + 0xFFF) & ~0xFFF
        prot = (UC_PROT_READ if seg.flags & 4 else 0) | (UC_PROT_WRITE if seg.flags & 2 else 0) | \
            (UC_PROT_EXEC if seg.flags & 1 else 0)
        uc.mem_map(start, end - start, prot)
        uc.mem_write(seg.vaddr, file.data[seg.offset:seg.offset + seg.filesz])
    uc.mem_map(STACK_TOP - 0x10000, 0x10000, UC_PROT_READ | UC_PROT_WRITE)
    if int3_site:
        uc.mem_write(file.elf.resolve(int3_site).value, b"\xcc")
    return uc


MODES = ("none", "int3", "int3-native", "code-hook", "syscall")
_INTR_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p)


def _empty_hook(*_args) -> None:
    return None


def bare_run(file, loop: int, n: int, mode: str = "none") -> float:
    """Seconds for ``n`` iterations of the bench guest's loop on a bare Uc.  ``mode``:
    ``none`` (no hook), ``int3`` (nop loop, the nop replaced by int3, an empty
    UC_HOOK_INTR through the binding), ``int3-native`` (the same with the empty callback
    registered natively, as the machine registers its trap hooks: the floor of any
    Python trap handler), ``code-hook`` (the nop loop unchanged, a one-address
    UC_HOOK_CODE on the nop calling an empty Python function: Qiling's
    ``hook_address``, a probe without any semantics), ``syscall`` (an empty
    UC_HOOK_INSN on syscall)."""
    if mode not in MODES:
        raise EmuError(f"unknown baseline mode {mode!r} ({', '.join(MODES)})")
    int3 = mode in ("int3", "int3-native")
    uc = _bare_uc(file, "uprobe_target_nop" if int3 else None)
    keep = None
    if int3:
        loop = 2
    if mode == "int3":
        uc.hook_add(UC_HOOK_INTR, lambda uc, intno, data: None)
    elif mode == "int3-native":
        keep = _INTR_CB(_empty_hook)
        handle = ctypes.c_size_t()
        if uclib.uc_hook_add(uc._uch, ctypes.byref(handle), UC_HOOK_INTR, ctypes.cast(keep, ctypes.c_void_p),
                             None, ctypes.c_uint64(1), ctypes.c_uint64(0)):
            raise EmuError("cannot add the native interrupt hook")
    elif mode == "code-hook":
        site = file.elf.resolve("uprobe_target_nop").value
        uc.hook_add(UC_HOOK_CODE, _empty_hook, None, site, site)
        loop = 2
    elif mode == "syscall":
        uc.hook_add(UC_HOOK_INSN, lambda uc, data: None, None, 1, 0, X.UC_X86_INS_SYSCALL)
    done = file.elf.resolve("bench_done").value
    sp = STACK_TOP - 0x100
    uc.mem_write(sp, done.to_bytes(8, "little"))
    uc.reg_write(X.UC_X86_REG_RSP, sp)
    uc.reg_write(X.UC_X86_REG_R12, n)
    uc.reg_write(X.UC_X86_REG_R14, loop)
    start = file.elf.resolve("dispatch").value
    t0 = time.perf_counter()
    uc.emu_start(start, done)
    dt = time.perf_counter() - t0
    del keep                                 # the native callback outlived the run
    if uc.reg_read(X.UC_X86_REG_R12) != 0:
        raise EmuError("bare Unicorn baseline did not complete its loop")
    return dt
