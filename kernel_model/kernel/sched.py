"""A deterministic scheduler: the interleaving of tasks is a pure function of a seed.

Tasks run on one Unicorn CPU in time slices whose lengths a seeded generator draws, so a
failing interleaving replays exactly with the same seed; ``history`` records every switch
(tid sequence) for comparison.

A slice is counted in *translated blocks* (QEMU TBs: straight-line runs of guest code
ending at a branch), not in instructions.  Why: Unicorn's own instruction counter
(``emu_start(count=N)``) is a code hook on every instruction, which makes guest code
15-20 times slower and so made any threaded guest that much slower than the same work
on one thread; a block hook costs one call per block.  ``emu.machine.BlockQuantum`` is
that hook, an 18-byte native callback (no Python frame per block) that counts down and calls
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

import random

from kernel_model.errors import InputError

# Default slice lengths in translated blocks (a block of compiled code is 3.5-6 instructions).
MIN_SLICE, MAX_SLICE = 10_000, 100_000
# The slice of a task that is alone runnable: long (~1M instructions), as nobody waits;
# a wake-up cuts it to a seeded slice (see emu.machine.BlockQuantum.shorten).
ALONE_SLICE = 1 << 18
# Virtual time a block takes: it counts as this many instructions of INSN_NS each.
BLOCK_INSNS = 4
MAX_SLICE_LIMIT = 1 << 40


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
