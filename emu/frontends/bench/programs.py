"""``bench --programs``: real workloads in the model next to their native time.

* ``glibc-startup``: ``/bin/true``, a dynamic glibc start-up (ld.so maps and relocates
  libc, runs the initializers, exits);
* ``malloc-loop``: a C loop of malloc/free pairs built with gcc at bench time, with entry
  uprobes on libc's ``malloc`` and ``free`` (``libc:malloc``, as bpftrace names them);
* ``shell-pipeline``: ``/bin/sh -c 'echo a | /bin/cat'`` (fork, pipe, execve, wait).

Each is timed in the model (wall time of ``Machine.run``, best of ``repeat``) and natively
(``subprocess.run``, best of ``repeat``); the report gives the slowdown and the model's
events per second - syscalls plus probe hits, the events the model handles in Python.
A workload whose ingredient is missing (no gcc, no /bin/sh) is listed as ``n/a`` with
the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

from emu.machine import Machine
from kernel_model.errors import EmuError

MALLOC_LOOP_C = r"""
#include <stdlib.h>
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 2000;
    volatile long sum = 0;
    for (long i = 0; i < n; i++) {
        char *p = malloc(16 + (i & 255));
        p[0] = (char)i;
        sum += p[0];
        free(p);
    }
    return sum == -1;
}
"""
MALLOC_ITERATIONS = 2000
PROGRAMS = ("glibc-startup", "malloc-loop", "shell-pipeline")


def _native_seconds(argv: list[str], repeat: int) -> float:
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = subprocess.run(argv, capture_output=True, timeout=120)
        dt = time.perf_counter() - t0
        if res.returncode != 0:
            raise EmuError(f"{' '.join(argv)} exited {res.returncode} natively")
        best = dt if best is None else min(best, dt)
    return best


def _model_run(argv: list[str], probes: tuple, kernel: str) -> dict:
    m = Machine.from_elf(argv[0], argv=argv, kernel=kernel)
    hits = [0]

    def count(_ctx):
        hits[0] += 1

    for spec in probes:
        m.uprobes.register(spec, handler=count)
    t0 = time.perf_counter()
    r = m.run(timeout=300)
    dt = time.perf_counter() - t0
    if r.reason != "exit" or r.exit_code != 0:
        raise EmuError(f"{' '.join(argv)} in the model: {r.describe()}")
    syscalls = sum(m.counters.syscalls.values())
    return {"seconds": dt, "syscalls": syscalls, "probe_hits": hits[0], "bp_traps": m.counters.bp_traps,
            "stdout": bytes(r.stdout)}


def _build_malloc_loop(tmp: str) -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise EmuError("gcc not found")
    src, exe = os.path.join(tmp, "malloc_loop.c"), os.path.join(tmp, "malloc_loop")
    with open(src, "w") as f:
        f.write(MALLOC_LOOP_C)
    res = subprocess.run([gcc, "-O1", "-o", exe, src], capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise EmuError(f"gcc failed: {res.stderr.strip().splitlines()[-1] if res.stderr.strip() else res.returncode}")
    return exe


def _workload(name: str, tmp: str) -> tuple[list[str], tuple]:
    if name == "glibc-startup":
        return ["/bin/true"], ()
    if name == "malloc-loop":
        return [_build_malloc_loop(tmp), str(MALLOC_ITERATIONS)], ("libc:malloc", "libc:free")
    if name == "shell-pipeline":
        if not os.path.exists("/bin/sh"):
            raise EmuError("/bin/sh not found")
        return ["/bin/sh", "-c", "echo a | /bin/cat"], ()
    raise EmuError(f"unknown program workload {name!r} ({', '.join(PROGRAMS)})")


def run_programs(kernel: str = "latest", repeat: int = 3, progress=None) -> list[dict]:
    """Each workload in the model (best of ``repeat``) and natively (best of ``repeat``)."""
    rows = []
    tmp = tempfile.mkdtemp(prefix="uemu-bench-programs-")
    task = progress.add_task("programs", total=len(PROGRAMS)) if progress else None
    try:
        for name in PROGRAMS:
            if progress:
                progress.update(task, description=f"program {name}")
            row = {"program": name}
            try:
                argv, probes = _workload(name, tmp)
                runs = [_model_run(argv, probes, kernel) for _ in range(repeat)]
                best = min(runs, key=lambda r: r["seconds"])
                native = _native_seconds(argv, repeat)
                events = best["syscalls"] + best["probe_hits"]
                row.update(status="ok", argv=[os.path.basename(argv[0])] + argv[1:], probes=list(probes),
                           model_seconds=best["seconds"], native_seconds=native,
                           slowdown=best["seconds"] / native if native > 0 else None,
                           syscalls=best["syscalls"], probe_hits=best["probe_hits"], events=events,
                           events_per_second=events / best["seconds"] if best["seconds"] > 0 else None,
                           consistent=all((r["syscalls"], r["probe_hits"]) == (best["syscalls"], best["probe_hits"])
                                          for r in runs))
            except (EmuError, OSError, subprocess.SubprocessError) as e:
                row.update(status="n/a", reason=str(e))
            rows.append(row)
            if progress:
                progress.advance(task)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows
