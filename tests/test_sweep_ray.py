"""The same sweep on a local Ray (started here with 2 CPUs) as on the process pool:
the same cases, the same findings."""

from __future__ import annotations

import pytest

import ray  # Ray is a test dependency (.ci/run installs '.[test,ray]')

from emu.frontends.sweep.runners import PoolRunner, RayRunner
from sweep_helpers import findings, guest_program, sweep


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.mark.parametrize("guest,kernel", [("uprobe_targets", "6.18"), ("bench_trigger", "latest")])
def test_ray_finds_what_the_pool_finds(local_ray, guest, kernel):
    prog = guest_program(guest)
    on_ray = RayRunner()
    assert on_ray.workers == 2
    got = sweep(prog, kernel, runner=on_ray)
    want = sweep(prog, kernel, runner=PoolRunner(2))
    assert findings(got) == findings(want) and findings(want)
    assert (got.batches, got.runs, got.executed, sorted(got.refused)) == \
        (want.batches, want.runs, want.executed, sorted(want.refused))


def test_ray_actors_keep_the_loaded_guest_warm(local_ray, build_c):
    exe = build_c("hello.c", "-static")
    from emu.frontends.sweep.case import Case, Program
    prog = Program.of(exe, [exe])
    runner = RayRunner()
    try:
        cases = [Case(prog, "6.18", (), ((exe, off, "p"),)) for off in (0x1000, 0x1001, 0x1002, 0x1003)]
        runner.run(cases)
        images = ray.get([a.images.remote() for a in runner.actors])
    finally:
        runner.close()
    assert sorted(images) == [1, 1], f"each actor parses the program once: {images}"
