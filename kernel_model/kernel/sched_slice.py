"""The bounds of a task's time slice while several tasks can run, and their parsing.

A leaf of the scheduler (:mod:`kernel_model.kernel.sched`), so a command line can check
``--sched-slice`` and print the defaults without loading the scheduler.
"""

from __future__ import annotations

from kernel_model.errors import InputError

# Default slice lengths in translated blocks (a block of compiled code is 3.5-6 instructions).
MIN_SLICE, MAX_SLICE = 10_000, 100_000
MAX_SLICE_LIMIT = 1 << 40


def check_slice(min_slice: object, max_slice: object) -> tuple[int, int]:
    """Slice bounds: integers with 1 <= min <= max <= 2**40 (a zero-length slice would
    never let a task make progress; the counter is 64 bits)."""
    for v in (min_slice, max_slice):
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError(f"slice lengths are block counts, not {v!r}")
    assert isinstance(min_slice, int) and isinstance(max_slice, int)
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
