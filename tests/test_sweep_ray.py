"""The same sweep on a local Ray (started here with 2 CPUs) as on the process pool:
the same cases, the same findings; each actor keeps its loaded guest."""

from __future__ import annotations

import pytest
import ray  # Ray is a test dependency (.ci/run installs '.[test,ray]')
from sweep_helpers import findings, guest_program, sweep

from emu.frontends.sweep.runners import PoolRunner, RayRunner


@pytest.fixture(scope="module")
def ray_runner():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        runner = RayRunner()
        yield runner
        runner.close()
    finally:
        ray.shutdown()


def test_ray_finds_what_the_pool_finds(ray_runner):
    prog = guest_program("uprobe_targets")
    assert ray_runner.workers == 2
    got = sweep(prog, "6.18", runner=ray_runner, close=False)
    want = sweep(prog, "6.18", runner=PoolRunner(2))
    assert findings(got) == findings(want) and len(findings(want)) == 2
    assert (got.batches, got.runs, got.executed, sorted(got.refused)) == (
        want.batches,
        want.runs,
        want.executed,
        sorted(want.refused),
    )
    # both actors ran cases, and each loaded the program once for all of them
    assert ray.get([a.images.remote() for a in ray_runner.actors]) == [1, 1]
    assert sum(ray.get([a.executed.remote() for a in ray_runner.actors])) == got.executed
