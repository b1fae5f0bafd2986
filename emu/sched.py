"""A deterministic scheduler: the interleaving of tasks is a pure function of a seed.

Tasks run on one Unicorn CPU in instruction-count time slices (Unicorn's native counter),
chosen with a seeded generator, so a failing interleaving replays exactly with the same
seed; ``history`` records every switch (tid sequence) for comparison.
"""

from __future__ import annotations

import random

MIN_SLICE, MAX_SLICE = 20, 400


class Scheduler:
    def __init__(self, seed: int = 0, min_slice: int = MIN_SLICE, max_slice: int = MAX_SLICE):
        self.seed = seed
        self.rng = random.Random(seed)
        self.min_slice, self.max_slice = min_slice, max_slice
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
