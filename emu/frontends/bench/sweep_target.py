"""``bench --sweep``: the sweep target, timed.  ``sweep --libraries --sites insn`` of
``/bin/true`` - every instruction boundary of the program, ld.so and libc probed, many
sites per run and the diverging batches bisected - on a local pool of ``workers``
processes, as a user would run it; the wall-clock minutes against the target, with
the runs it took and the cost of one run (what a faster sweep has to cut)."""

from __future__ import annotations

import os
import time

from emu.frontends.sweep.case import Program
from emu.frontends.sweep.driver import Sweeper
from emu.frontends.sweep.runners import make_runner
from kernel_model.errors import EmuError

SWEEP_PROGRAM = "/bin/true"
SWEEP_MINUTES_TARGET = 5.0


def run_sweep_target(workers: int, kernel: str = "latest", progress=None) -> dict:
    """Sweep :data:`SWEEP_PROGRAM` with its libraries at every instruction; the figures
    of the run and the target row."""
    if not os.path.isfile(SWEEP_PROGRAM):
        raise EmuError(f"--sweep: {SWEEP_PROGRAM} not found")
    program = Program.of(SWEEP_PROGRAM, [SWEEP_PROGRAM])
    runner = make_runner(workers)
    task = progress.add_task(f"sweep {SWEEP_PROGRAM} --libraries", total=None) if progress else None
    t0 = time.perf_counter()
    try:
        sweep = Sweeper(program, runner).sweep(kernel, mode="insn", libraries=True)
    finally:
        runner.close()
        if progress:
            progress.remove_task(task)
    seconds = time.perf_counter() - t0
    runs = sweep.runs + sweep.reference_runs
    minutes = seconds / 60
    row = {
        "target": f"sweep --libraries --sites insn of {SWEEP_PROGRAM}, minutes ({workers} workers)",
        "value": minutes,
        "op": "<=",
        "limit": SWEEP_MINUTES_TARGET,
        "ok": minutes <= SWEEP_MINUTES_TARGET,
        "note": f"{len(sweep.sites):,} sites, {runs:,} runs, {seconds * 1000 * workers / max(runs, 1):.0f} ms "
        f"of a worker per run; {len(sweep.divergences):,} divergences, "
        f"{len(sweep.unclassified)} unclassified",
    }
    return {
        "program": SWEEP_PROGRAM,
        "kernel": kernel,
        "workers": workers,
        "seconds": seconds,
        "sites": len(sweep.sites),
        "runs": runs,
        "divergences": len(sweep.divergences),
        "unclassified": len(sweep.unclassified),
        "targets": [row],
    }
