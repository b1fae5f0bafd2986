"""Where cases run: in this process, on a local process pool, or on a Ray cluster.

Every runner calls the same function, :func:`emu.frontends.sweep.case.run_case`, on the
same picklable :class:`~emu.frontends.sweep.case.Case`; ``run(cases, done)`` returns the
results in order and calls ``done(result)`` as each arrives (the progress bar, the JSONL
stream).  Ray is an optional extra (``pip install 'uprobe-emu[ray]'``) imported only by
:class:`RayRunner`; its workers are actors, each with its own
:class:`~emu.frontends.sweep.case.CaseRunner`, so a loaded guest stays warm there across
cases and rounds.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing
from typing import Any

from emu.frontends.sweep.case import CaseRunner, run_cases
from kernel_model.errors import EmuError, InputError


class SerialRunner:
    name = "serial"
    workers = 1

    def __init__(self):
        self.runner = CaseRunner()

    def run(self, cases: list, done=None) -> list:
        out = []
        for c in cases:
            out.append(self.runner.run(c))
            if done:
                done(out[-1])
        return out

    def close(self) -> None:
        pass


class PoolRunner:
    """``--jobs N``: a pool of N worker processes (forked: they inherit the parent's
    loaded modules).  A round's cases go out in chunks, each chunk on one fresh
    :class:`CaseRunner`, so a worker parses the program once per chunk."""

    name = "pool"

    def __init__(self, jobs: int):
        if jobs < 1:
            raise InputError(f"--jobs must be at least 1, not {jobs}")
        self.workers = jobs
        self.pool = cf.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"))

    def run(self, cases: list, done=None) -> list:
        size = max(1, -(-len(cases) // (self.workers * 2)))
        chunks = [cases[i : i + size] for i in range(0, len(cases), size)]
        futures = {self.pool.submit(run_cases, ch): n for n, ch in enumerate(chunks)}
        results: list = [None] * len(chunks)
        for f in cf.as_completed(futures):
            results[futures[f]] = f.result()
            for r in results[futures[f]]:
                if done:
                    done(r)
        return [r for chunk in results for r in chunk]

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)


class RayRunner:
    """``--ray ADDRESS|auto``: one actor per CPU of the cluster (``ray.init(address)``;
    an already initialised Ray, e.g. a test's local one, is used as it is)."""

    name = "ray"

    def __init__(self, address: str | None = "auto", workers: int | None = None):
        try:
            import ray
        except ImportError:
            raise EmuError("--ray needs Ray: pip install 'uprobe-emu[ray]'") from None
        self.ray = ray
        if not ray.is_initialized():
            try:
                ray.init(address=address, log_to_driver=False, include_dashboard=False, logging_level=logging.ERROR)
            except (ConnectionError, ValueError, RuntimeError) as e:
                raise EmuError(
                    f"cannot connect to the Ray cluster at {address!r}: "
                    f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
                ) from None
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = max(1, workers or cpus)
        actor: Any = ray.remote(num_cpus=1)(CaseActor)
        self.actors: list[Any] = [actor.remote() for _ in range(self.workers)]

    def run(self, cases: list, done=None) -> list:
        ray = self.ray
        results: list = [None] * len(cases)
        todo = list(enumerate(cases))
        busy: dict = {}
        free = list(self.actors)
        while todo or busy:
            while todo and free:
                n, c = todo.pop(0)
                a = free.pop()
                busy[a.run.remote(c)] = (n, a)
            ready, _ = ray.wait(list(busy), num_returns=1)
            for ref in ready:
                n, a = busy.pop(ref)
                results[n] = ray.get(ref)
                free.append(a)
                if done:
                    done(results[n])
        return results

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []


class CaseActor:
    """A Ray actor: a :class:`CaseRunner` that stays (and keeps its loaded guests)."""

    def __init__(self):
        self.runner = CaseRunner()

    def run(self, case):
        return self.runner.run(case)

    def executed(self) -> int:
        return self.runner.executed

    def images(self) -> int:
        """How many program images this actor has loaded."""
        return len(self.runner.images)


def make_runner(jobs: int = 1, ray: str | None = None):
    if ray is not None:
        return RayRunner(None if ray == "local" else ray)
    return SerialRunner() if jobs <= 1 else PoolRunner(jobs)
