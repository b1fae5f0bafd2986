"""The contention model: a discrete-event simulation of CPUs sharing cache lines."""

import pytest

from emu.frontends.bench.contention import ATOMIC, LOCK, MB, READ, UNLOCK, WRITE, Prices, Topology, simulate

ONE_SOCKET = Topology(1, 8, 1)
PLAIN = Prices(
    local=0.0, atomic=0.0, mb=0.0, xfer_core=50.0, xfer_socket=200.0, contend=0.0, ht=1.0, turbo=0.0, scale=1.0
)


def _same(n, work, ops):
    return [(work, ops)] * n


def test_one_cpu_without_sharing_runs_at_its_private_cost():
    assert simulate([(250.0, ())], ONE_SOCKET, PLAIN) == pytest.approx(4.0)


def test_private_lines_scale_linearly():
    progs = [(100.0, ((WRITE, ("percpu", c)), (MB, None))) for c in range(8)]
    one = simulate(progs[:1], ONE_SOCKET, PLAIN)
    assert simulate(progs, ONE_SOCKET, PLAIN) == pytest.approx(8 * one, rel=0.01)


def test_one_shared_atomic_caps_throughput_at_one_transfer_per_trigger():
    got = simulate(_same(8, 10.0, ((ATOMIC, "ref"),)), ONE_SOCKET, PLAIN)
    assert got == pytest.approx(1000 / 50.0, rel=0.05)


def test_read_shared_line_is_not_a_bottleneck():
    got = simulate(_same(8, 100.0, ((READ, "tree"),)), ONE_SOCKET, PLAIN)
    assert got == pytest.approx(80.0, rel=0.02)


def test_contention_makes_throughput_fall_past_the_peak():
    p = PLAIN.replace(contend=0.2)
    curve = [simulate(_same(n, 100.0, ((ATOMIC, "ref"),)), ONE_SOCKET, p) for n in (1, 2, 4, 8)]
    assert curve[3] < max(curve), curve


def test_spinlock_serializes_its_critical_section():
    # the critical section is an atomic on another line, 50 ns away each time
    progs = _same(4, 10.0, ((LOCK, "lock"), (ATOMIC, "inside"), (UNLOCK, "lock")))
    got = simulate(progs, ONE_SOCKET, PLAIN)
    assert got < 1000 / 100.0 + 0.5, got


def test_crossing_sockets_costs_more():
    two = Topology(2, 4, 1)
    progs = _same(8, 10.0, ((ATOMIC, "ref"),))
    assert simulate(progs, two, PLAIN) < simulate(progs, ONE_SOCKET, PLAIN)


def test_sibling_threads_share_their_core_transfers():
    ht = Topology(1, 4, 2)  # CPUs 4-7 are the siblings of 0-3
    progs = _same(8, 10.0, ((ATOMIC, "ref"),))
    four = simulate(progs[:4], ht, PLAIN)
    assert simulate(progs, ht, PLAIN) > four * 1.2


def test_busy_sibling_slows_private_work():
    ht = Topology(1, 1, 2)
    got = simulate(_same(2, 100.0, ()), ht, PLAIN.replace(ht=1.5))
    assert got == pytest.approx(2 * 1000 / 150.0, rel=0.01)


def test_turbo_slows_every_core_when_all_are_busy():
    got = simulate(_same(8, 100.0, ()), ONE_SOCKET, PLAIN.replace(turbo=0.25))
    assert got == pytest.approx(8 * 1000 / 125.0, rel=0.01)


def test_same_input_same_result():
    progs = [(50.0, ((ATOMIC, "a"), (READ, ("b", c)), (ATOMIC, "a"))) for c in range(6)]
    assert simulate(progs, ONE_SOCKET, PLAIN) == simulate(progs, ONE_SOCKET, PLAIN)


def test_more_cpus_than_the_topology_is_refused():
    with pytest.raises(ValueError, match="9 CPUs on a 8-CPU topology"):
        simulate(_same(9, 1.0, ()), ONE_SOCKET, PLAIN)


def test_cpu_placement_fills_cores_then_sibling_threads():
    t = Topology(2, 20, 2)
    assert (t.place(0), t.place(19), t.place(20), t.place(40), t.place(79)) == (
        (0, 0, 0),
        (0, 19, 0),
        (1, 20, 0),
        (0, 0, 1),
        (1, 39, 1),
    )


def test_jitter_is_seeded():
    progs = _same(4, 400.0, ((ATOMIC, "a"), (READ, "b"), (ATOMIC, "a")))
    p = PLAIN.replace(jitter=0.1)
    assert simulate(progs, ONE_SOCKET, p, seed=1) == simulate(progs, ONE_SOCKET, p, seed=1)
    assert simulate(progs, ONE_SOCKET, p, seed=1) != simulate(progs, ONE_SOCKET, p, seed=2)


def test_jitter_keeps_the_average_private_cost():
    got = simulate([(100.0, ())], ONE_SOCKET, PLAIN.replace(jitter=0.2), measure=2000)
    assert got == pytest.approx(10.0, rel=0.02)
