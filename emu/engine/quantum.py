"""Counting what Unicorn executes: the time slice in translated blocks
(:class:`BlockQuantum`, a native block hook) and the instruction count of an
``emu_start`` (Unicorn's ``uc_struct.emu_counter``, found by :func:`emu_counter_offset`)."""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import struct
import sys
import weakref

from unicorn import UC_ARCH_X86, UC_HOOK_BLOCK, UC_MODE_64, UcError
from unicorn.unicorn_py3.unicorn import Uc, uclib  # Uc: see emu.engine.regfile

from emu.engine.interface import Quantum


@functools.cache
def emu_counter_offset() -> int | None:
    """Where Unicorn keeps the instruction count of the current ``emu_start``
    (``uc_struct.emu_counter``, which its ``count`` hook increments before each
    instruction).  The binding does not expose it, so it is found once by running known
    counts on a scratch instance; None if the layout is not recognised."""
    counts = (37, 101, 555)
    dumps = []
    for n in counts:
        uc = Uc(UC_ARCH_X86, UC_MODE_64)
        uc.ctl_set_tcg_buffer_size(4 << 20)  # a scratch: not the default 1 GiB of address space
        uc.mem_map(0x1000, 0x1000)
        uc.mem_write(0x1000, b"\x90" * 0x1000)
        uc.emu_start(0x1000, 0x2000, count=n)
        dumps.append(ctypes.string_at(uc._uch, 4096))
    for off in range(0, 4096 - 16, 8):
        if all(struct.unpack_from("<QQ", d, off) == (n + 1, n) for d, n in zip(dumps, counts)):
            return off
    return None


def instruction_counter_available() -> bool:
    """Can runs be counted exactly (reverse execution needs it)?"""
    return emu_counter_offset() is not None


def refund_instruction(uc: Uc) -> None:
    """The instruction a handled fault interrupted runs again: Unicorn's count hook
    counts it once more, so the count of the current ``emu_start`` gives one back."""
    off = emu_counter_offset()
    if off is None:
        return
    at = ctypes.cast(uc._uch, ctypes.c_void_p).value + off  # type: ignore[operator]  # a live handle
    counter = ctypes.c_uint64.from_address(at)
    if counter.value:
        counter.value -= 1


def emu_counter(uc: Uc) -> int | None:
    """The instruction count of ``uc``'s current (or last) ``emu_start``; None where
    the counter was not found."""
    off = emu_counter_offset()
    if off is None:
        return None
    base = ctypes.cast(uc._uch, ctypes.c_void_p).value
    return struct.unpack("<Q", ctypes.string_at(base + off, 8))[0]  # type: ignore[operator]  # a live handle


# The counter value of a disarmed quantum: never reaches zero.
_DISARMED = 1 << 62


@functools.cache
def _block_stub() -> tuple[mmap.mmap, int] | None:
    """The native block hook: ``void cb(uc, address, size, int64_t *left)``
    decrements ``*left`` and tail-calls ``uc_emu_stop(uc)`` once it is <= 0.  x86-64
    System V only (uc in rdi, user_data in rcx); None where that is not the host ABI
    or the host refuses executable memory.  The page is immutable once made."""
    if not sys.platform.startswith("linux") or os.uname().machine != "x86_64":
        return None
    stop = ctypes.cast(uclib.uc_emu_stop, ctypes.c_void_p).value
    code = (
        b"\x48\xff\x09"  # dec qword ptr [rcx]
        b"\x7e\x01"  # jle 1f
        b"\xc3"  # ret
        b"\x48\xb8"
        + struct.pack("<Q", stop)  # 1: movabs rax, uc_emu_stop
        + b"\xff\xe0"
    )  # jmp rax
    try:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except OSError:
        return None
    page.write(code)
    return page, ctypes.addressof(ctypes.c_char.from_buffer(page))


class BlockQuantum(Quantum):
    """The time slice of the task on the CPU, in translated blocks: one native
    ``UC_HOOK_BLOCK`` per Unicorn instance (added when several tasks share the CPU,
    removed again once one is left: :meth:`detach`) and one counter for all of them
    (one CPU).  ``arm(n)`` lets exactly n blocks run: the hook stops the CPU at the
    start of block n + 1, before it executes, so the task resumes there.

    Which instances carry the hook is the state of the live Unicorn instances, which a
    checkpoint's restore keeps (``Memory.uc``): it is kept with them, not rolled back."""

    checkpoint_keep = ("_hooked",)

    def __init__(self):
        stub = _block_stub()
        self._stub = stub[1] if stub else None
        self._left = ctypes.c_int64(_DISARMED)
        self._armed = _DISARMED
        self._hooked = weakref.WeakKeyDictionary()  # Unicorn instance -> its hook's handle

    @property
    def native(self) -> bool:
        """False: slices are counted by Unicorn's instruction counter instead."""
        return self._stub is not None

    def attach(self, uc) -> None:
        """Count blocks on ``uc``.  Unicorn decides at translation time which blocks
        call a block hook, so the translations made before are dropped."""
        if uc in self._hooked:
            return
        handle = ctypes.c_size_t()
        status = uclib.uc_hook_add(
            uc._uch,
            ctypes.byref(handle),
            UC_HOOK_BLOCK,
            ctypes.c_void_p(self._stub),
            ctypes.c_void_p(ctypes.addressof(self._left)),
            ctypes.c_uint64(1),
            ctypes.c_uint64(0),
        )
        if status:
            raise UcError(status)
        uc.ctl_flush_tb()
        self._hooked[uc] = handle.value

    def detach(self, uc) -> None:
        """Stop counting blocks on ``uc`` (one task is left: no slices).  The blocks
        translated with the hook would still call into Unicorn's hook dispatch at each
        block, so they are dropped too; nothing runs per block afterwards."""
        handle = self._hooked.pop(uc, None)
        if handle is None or uc._uch is None:
            return
        status = uclib.uc_hook_del(uc._uch, ctypes.c_size_t(handle))
        if status:
            raise UcError(status)
        uc.ctl_flush_tb()

    def attached(self, uc) -> bool:
        """Is the block hook on ``uc``?"""
        return uc in self._hooked

    def arm(self, blocks: int | None) -> None:
        """The next emu_start may run ``blocks`` blocks (None: no limit)."""
        self._armed = _DISARMED if blocks is None else blocks + 1
        self._left.value = self._armed

    @property
    def armed(self) -> bool:
        return self._armed != _DISARMED

    def shorten(self, blocks: int) -> None:
        """From a hook inside the running slice: let at most ``blocks`` more blocks run
        (the blocks already run still count in :meth:`ran`)."""
        if self.armed and self._left.value > blocks + 1:
            self._armed -= self._left.value - (blocks + 1)
            self._left.value = blocks + 1

    def refund(self) -> None:
        """The block a handled fault interrupted starts again: that start is not a block
        of the slice."""
        self._left.value += 1

    def expired(self) -> bool:
        """Did the last emu_start end because its slice was used up?"""
        return self.armed and self._left.value <= 0

    def ran(self) -> int:
        """Blocks the last emu_start executed (a block a trap ended counts)."""
        started = self._armed - self._left.value
        return started - 1 if self._left.value <= 0 else started
