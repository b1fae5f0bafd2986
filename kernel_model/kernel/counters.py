"""Exact event counters: part of the API, asserted by tests, used by the benchmark."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields


@dataclass
class Counters:
    bp_traps: int = 0  # #BP (int3) traps taken
    db_traps: int = 0  # #DB (single-step) traps taken
    syscalls: Counter = field(default_factory=Counter)  # by number
    unknown_syscalls: Counter = field(default_factory=Counter)
    xol_singlesteps: int = 0  # instructions executed out of line
    emulated: int = 0  # probed instructions emulated without single-step
    uprobe_hits: int = 0  # handle_swbp / sys_uprobe entries that found a uprobe
    uretprobe_hits: int = 0  # return instances consumed by handle_trampoline
    ri_allocated: int = 0  # return_instance allocations (kmalloc / array fill)
    ri_reused: int = 0  # return_instances taken from a pool
    ri_freed: int = 0
    ri_dropped_depth: int = 0  # nested instances omitted at MAX_URETPROBE_DEPTH
    ri_peak_bytes: int = 0
    optimized: int = 0
    unoptimized: int = 0
    optimize_failed: int = 0
    uprobe_syscalls: int = 0  # sys_uprobe (336) entries from a trampoline
    text_writes: int = 0
    page_faults: int = 0  # user #PF the kernel handled or turned into SIGSEGV
    args_buffer_fills: int = 0
    signals: Counter = field(default_factory=Counter)

    def snapshot(self) -> dict:
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = dict(v) if isinstance(v, Counter) else v
        return out

    def add_delta(self, before: dict, after: dict) -> None:
        """Add ``after - before`` (two snapshots of another Counters) to these counters."""
        for name, a in after.items():
            b = before.get(name)
            mine = getattr(self, name)
            if isinstance(mine, Counter):
                for k, v in a.items():
                    d = v - (b or {}).get(k, 0)
                    if d:
                        mine[k] += d
            else:
                setattr(self, name, mine + a - (b or 0))

    def reset(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Counter):
                v.clear()
            else:
                setattr(self, f.name, 0)
