"""``bench --consumer bpf``: the kernel's bench consumer, a BPF program counting hits.

``guest_programs/bpf/bench_count.bpf.c`` is ``trigger_bench.c``'s counter (one cache
line per CPU, an atomic add, return 0), built with clang at first use (cached by its
hash).  It is loaded into the machine as libbpf loads it and attached as a uprobe perf
event, so a hit costs what the kernel's ``uprobe_dispatcher`` ->
``__uprobe_perf_func`` -> program path costs: with the lazy args buffer (6.10+) and a
program returning 0 the buffer is never filled.
"""

from __future__ import annotations

import functools
import struct
from pathlib import Path

from emu.probes.bpf_build import build, source_path

SOURCE = "bench_count.bpf.c"
_COUNTER_STRIDE = 128  # struct counter is aligned(128)
_NR_COUNTERS = 256


@functools.cache
def counter_object() -> Path:
    """The counting object, built once per process (and cached on disk by clang's input)."""
    return build(source_path(SOURCE))


def attach_bpf_counter(m, target, ret: bool):
    """Load the counter into ``m`` and attach its uprobe (``ret``: uretprobe) program at
    ``target``; returns a function giving the hits counted so far (the sum over CPUs)."""
    prog = "bench_trigger_uretprobe" if ret else "bench_trigger_uprobe"
    obj = m.bpf.load(str(counter_object()), attach={prog: target})
    unpack = struct.Struct("<q").unpack_from

    def hits() -> int:
        raw = obj.variable("hits")
        return sum(unpack(raw, i * _COUNTER_STRIDE)[0] for i in range(_NR_COUNTERS))

    return hits
