"""A deterministic scheduler: the interleaving of tasks is a pure function of a seed.

Tasks run on one Unicorn CPU in time slices whose lengths a seeded generator draws, so a
failing interleaving replays exactly with the same seed; ``history`` records every switch
(tid sequence) for comparison.

A slice is counted in *translated blocks* (QEMU TBs: straight-line runs of guest code
ending at a branch), not in instructions.  Why: Unicorn's own instruction counter
(``emu_start(count=N)``) is a code hook on every instruction, which makes guest code
15-20 times slower and so made any threaded guest that much slower than the same work
on one thread; a block hook costs one call per block.  :class:`BlockQuantum` is that
hook, an 18-byte native callback (no Python frame per block) that counts down and calls
``uc_emu_stop`` at zero, so the slice ends at a block boundary: where it ends depends
only on the guest's code path, never on the host's speed.  On hosts where the callback
cannot be made (not x86-64 Linux, or no executable memory) slices fall back to
Unicorn's instruction counter: still deterministic, just slower.

As CFS's minimum granularity does, the default slices are long (10,000-100,000 blocks,
40-400 us of virtual time, a fraction of a millisecond of the host's) so that switching
(~0.1 ms of Python and Unicorn work) costs little; short slices shake out races
(``Machine(sched_slice=(1, 40))``, ``--sched-slice 1:40``).
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import platform
import random
import struct
import sys
import weakref

from unicorn import UC_HOOK_BLOCK
from unicorn.unicorn_py3.unicorn import uclib

from .errors import InputError

# Default slice lengths in translated blocks (a block of compiled code is 3.5-6 instructions).
MIN_SLICE, MAX_SLICE = 10_000, 100_000
# The slice of a task that is alone runnable: long (~1M instructions), as nobody waits;
# a wake-up cuts it to a seeded slice (see BlockQuantum.shorten).
ALONE_SLICE = 1 << 18
# Virtual time a block takes: it counts as this many instructions of INSN_NS each.
BLOCK_INSNS = 4
MAX_SLICE_LIMIT = 1 << 40
# The counter value of a disarmed quantum: never reaches zero.
_DISARMED = 1 << 62


def check_slice(min_slice, max_slice) -> tuple[int, int]:
    """Slice bounds: integers with 1 <= min <= max <= 2**40 (a zero-length slice would
    never let a task make progress; the counter is 64 bits)."""
    for v in (min_slice, max_slice):
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError(f"slice lengths are block counts, not {v!r}")
    if not 1 <= min_slice <= max_slice <= MAX_SLICE_LIMIT:
        raise InputError(f"slice lengths must satisfy 1 <= MIN <= MAX <= 2**40, not {min_slice}:{max_slice}")
    return min_slice, max_slice


def parse_slice(text: str) -> tuple[int, int]:
    """``MIN:MAX`` (or one number N for N:N), in translated blocks."""
    lo, sep, hi = text.partition(":")
    try:
        bounds = (int(lo, 0), int(hi if sep else lo, 0))
    except ValueError:
        raise InputError(f"a slice is MIN:MAX in blocks, e.g. 1:40, not {text!r}") from None
    return check_slice(*bounds)


class Scheduler:
    """The seeded choices: who runs next, and for how many blocks."""

    def __init__(self, seed: int = 0, min_slice: int = MIN_SLICE, max_slice: int = MAX_SLICE):
        self.seed = seed
        self.rng = random.Random(seed)
        self.min_slice, self.max_slice = check_slice(min_slice, max_slice)
        self.history: list[int] = []

    def slice(self) -> int:
        return self.rng.randint(self.min_slice, self.max_slice)

    def pick(self, tasks) -> object | None:
        runnable = sorted((t for t in tasks if t.state == "running"), key=lambda t: t.tid)
        if not runnable:
            return None
        return runnable[0] if len(runnable) == 1 else self.rng.choice(runnable)

    def record(self, task) -> None:
        self.history.append(task.tid)


@functools.cache
def _block_stub() -> tuple[mmap.mmap, int] | None:
    """The native block hook: ``void cb(uc, address, size, int64_t *left)``
    decrements ``*left`` and tail-calls ``uc_emu_stop(uc)`` once it is <= 0.  x86-64
    System V only (uc in rdi, user_data in rcx); None where that is not the host ABI
    or the host refuses executable memory.  The page is immutable once made."""
    if platform.machine() not in ("x86_64", "AMD64") or not sys.platform.startswith("linux"):
        return None
    stop = ctypes.cast(uclib.uc_emu_stop, ctypes.c_void_p).value
    code = (b"\x48\xff\x09"                            # dec qword ptr [rcx]
            b"\x7e\x01"                                # jle 1f
            b"\xc3"                                    # ret
            b"\x48\xb8" + struct.pack("<Q", stop) +    # 1: movabs rax, uc_emu_stop
            b"\xff\xe0")                               # jmp rax
    try:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except OSError:
        return None
    page.write(code)
    return page, ctypes.addressof(ctypes.c_char.from_buffer(page))


class BlockQuantum:
    """The time slice of the task on the CPU, in translated blocks: one native
    ``UC_HOOK_BLOCK`` per Unicorn instance (added the first time a slice runs on it)
    and one counter for all of them (one CPU).  ``arm(n)`` lets exactly n blocks run:
    the hook stops the CPU at the start of block n + 1, before it executes, so the
    task resumes there."""

    def __init__(self):
        stub = _block_stub()
        self._stub = stub[1] if stub else None
        self._left = ctypes.c_int64(_DISARMED)
        self._armed = _DISARMED
        self._hooked = weakref.WeakSet()

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
        status = uclib.uc_hook_add(uc._uch, ctypes.byref(handle), UC_HOOK_BLOCK,
                                   ctypes.c_void_p(self._stub), ctypes.c_void_p(ctypes.addressof(self._left)),
                                   ctypes.c_uint64(1), ctypes.c_uint64(0))
        if status:
            raise RuntimeError(f"uc_hook_add(UC_HOOK_BLOCK) failed: {status}")
        uc.ctl_flush_tb()
        self._hooked.add(uc)

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

    def expired(self) -> bool:
        """Did the last emu_start end because its slice was used up?"""
        return self.armed and self._left.value <= 0

    def ran(self) -> int:
        """Blocks the last emu_start executed (a block a trap ended counts)."""
        started = self._armed - self._left.value
        return started - 1 if self._left.value <= 0 else started
