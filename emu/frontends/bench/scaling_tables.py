"""The published multi-CPU uprobes tables, and which kernel column each row is.

All were measured on one machine type - Intel Xeon Gold 6138 @ 2.0 GHz, 2 sockets x 20
cores x 2 hardware threads - with the BPF selftests bench (``./bench -w3 -d5 -p$N -a
trig-<scenario>``: N producer threads, each pinned to its own CPU, a BPF program
counting hits; total M/s).  Figures are copied as published.

* ``S1`` - Andrii Nakryiko, "uprobes: switch to RCU Tasks Trace flavor for better
  performance" (linux-trace-kernel, 2024-09): the 6.11-era baseline (treelock rwlock,
  ``get_uprobe``/``put_uprobe`` per hit), the SRCU series of 6.12, and RCU Tasks Trace
  on top of it (the return probe still held its uprobe by a refcount).  **Fitted.**
* ``S2`` - Andrii Nakryiko, "uprobes: add speculative lockless VMA-to-inode-to-uprobe
  resolution" (2024-10): 6.13 before and after the ``mm_lock_seq`` speculation (6.14).
  A check.
* ``S3`` - the same author's SRCU vs SRCU-lite vs RCU Tasks Trace comparison (2024-09),
  with the lockless VMA lookup applied; the SRCU row was not published.  A check.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class ScalingRow:
    label: str
    column: str  # a bench kernel column: profile[:switch=value,...]
    scenario: str
    values: tuple  # M/s per CPU count, in the table's order


@dataclass(frozen=True)
class ScalingTable:
    id: str
    title: str
    source: str
    cpus: tuple
    rows: tuple
    comparisons: tuple = ()  # (before label, after label): after / before is checked

    def row(self, label: str) -> ScalingRow:
        return next(r for r in self.rows if r.label == label)

    def value(self, label: str, n: int) -> float:
        return self.row(label).values[self.cpus.index(n)]


_BASE, _SRCU, _TT = "6.11", "6.12", "6.12:uprobe_lifetime=rcu_tasks_trace"
_SPEC = "6.13:vma_lookup=speculative"

TABLES = MappingProxyType(
    {
        t.id: t
        for t in (
            ScalingTable(
                "S1",
                "baseline vs SRCU vs RCU Tasks Trace",
                "A. Nakryiko, 'uprobes: switch to RCU Tasks Trace flavor for better performance', 2024-09",
                (1, 2, 4, 8, 16, 32, 64),
                (
                    ScalingRow(
                        "baseline uprobe-nop", _BASE, "uprobe-nop", (3.032, 3.452, 3.663, 3.718, 3.344, 2.288, 3.205)
                    ),
                    ScalingRow(
                        "baseline uretprobe-nop",
                        _BASE,
                        "uretprobe-nop",
                        (1.979, 2.361, 2.309, 2.253, 2.007, 1.624, 2.149),
                    ),
                    ScalingRow(
                        "SRCU uprobe-nop", _SRCU, "uprobe-nop", (3.276, 4.125, 7.713, 8.097, 6.501, 4.398, 6.452)
                    ),
                    ScalingRow(
                        "SRCU uretprobe-nop", _SRCU, "uretprobe-nop", (2.055, 2.677, 4.561, 5.291, 5.065, 3.622, 3.723)
                    ),
                    ScalingRow(
                        "RCU-TT uprobe-nop", _TT, "uprobe-nop", (3.396, 4.271, 8.499, 10.355, 7.615, 4.430, 6.887)
                    ),
                    ScalingRow(
                        "RCU-TT uretprobe-nop", _TT, "uretprobe-nop", (2.174, 2.853, 4.913, 5.883, 5.147, 3.738, 4.397)
                    ),
                ),
                (
                    ("baseline uprobe-nop", "SRCU uprobe-nop"),
                    ("SRCU uprobe-nop", "RCU-TT uprobe-nop"),
                    ("baseline uretprobe-nop", "SRCU uretprobe-nop"),
                    ("SRCU uretprobe-nop", "RCU-TT uretprobe-nop"),
                ),
            ),
            ScalingTable(
                "S2",
                "speculative lockless VMA lookup (6.14), uprobe-nop",
                "A. Nakryiko, 'uprobes: add speculative lockless VMA-to-inode-to-uprobe resolution', 2024-10",
                (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 24, 32, 40, 48, 56, 64, 72, 80),
                (
                    ScalingRow(
                        "before",
                        "6.13",
                        "uprobe-nop",
                        (
                            3.384,
                            5.456,
                            7.863,
                            9.442,
                            11.036,
                            10.884,
                            7.897,
                            10.021,
                            9.932,
                            8.369,
                            8.678,
                            7.392,
                            5.326,
                            5.426,
                            5.262,
                            6.121,
                            6.252,
                            7.644,
                            7.781,
                            8.992,
                        ),
                    ),
                    ScalingRow(
                        "after",
                        _SPEC,
                        "uprobe-nop",
                        (
                            3.534,
                            6.701,
                            10.031,
                            13.003,
                            16.274,
                            19.563,
                            22.696,
                            24.534,
                            30.475,
                            33.371,
                            38.864,
                            41.476,
                            64.696,
                            85.054,
                            101.979,
                            110.518,
                            117.737,
                            124.613,
                            133.239,
                            142.037,
                        ),
                    ),
                ),
                (("before", "after"),),
            ),
            ScalingTable(
                "S3",
                "SRCU-lite vs RCU Tasks Trace (lockless VMA lookup applied), uprobe-nop",
                "A. Nakryiko, SRCU vs SRCU-lite vs RCU Tasks Trace for uprobes, 2024-09",
                (1, 2, 3, 4, 8, 16, 32, 40, 64, 80),
                (
                    ScalingRow(
                        "RCU Tasks Trace",
                        _SPEC,
                        "uprobe-nop",
                        (3.574, 6.735, 10.102, 13.087, 24.622, 41.752, 84.973, 102.229, 125.537, 143.091),
                    ),
                    ScalingRow(
                        "SRCU-lite",
                        _SPEC + ",uprobe_lifetime=srcu_lite",
                        "uprobe-nop",
                        (3.446, 6.411, 9.563, 12.454, 23.172, 39.793, 79.616, 96.851, 119.432, 135.162),
                    ),
                ),
                (("SRCU-lite", "RCU Tasks Trace"),),
            ),
        )
    }
)

FIT_TABLE = "S1"
CHECK_TABLES = ("S2", "S3")
