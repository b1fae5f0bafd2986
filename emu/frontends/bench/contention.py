"""A discrete-event simulation of N CPUs running one probe-trigger loop each.

Input: each CPU's *trigger program* - the private work of one trigger (ns, from the
single-CPU cost model) and the exact sequence of shared-memory accesses the kernel's
code made for it (recorded by the emulator, CPU by CPU:
``Machine.record_accesses``).  Output: triggers per second over all CPUs, as the
kernel's ``bench -p N -a trig-*`` reports them.

The memory model is a MESI-like directory per cache line, kept per *physical core*
(hardware threads of one core share its L1/L2, so a line that moves between siblings
does not cross the interconnect):

* a load of a line the core holds costs ``local``; otherwise the line is fetched
  from the nearest holder (``xfer_core`` inside a socket, ``xfer_socket`` across)
  and the core joins its sharers;
* a store or an atomic needs the line exclusive: a transfer unless the core is the
  only holder, and an atomic pays ``atomic`` on top, keeping the line that long (a
  locked operation does not let the line go before it completes);
* the hardware threads of one core share its requests: a thread asking for a line its
  core is already waiting for rides on that transfer (both threads' locked operations
  complete while the line is in the core), which is why contended throughput *rises*
  again once producers land on sibling threads;
* one line moves one transfer at a time: requests queue in arrival order, and a
  transfer takes longer the more requests wait behind it (``contend`` per waiter:
  the snoop and retry traffic of a hot line), which is what makes throughput *fall*
  past the peak instead of flattening;
* ``mb`` (a full barrier) costs its price and touches no line;
* a spinlock is a line plus an owner: the acquirer waits for the release, then the
  line comes to it;
* a CPU whose hardware sibling also runs a producer does its private work ``ht``
  times slower (the two threads share one core's pipeline);
* a socket's clock drops as more of its cores are busy (turbo: ``turbo`` is the
  single-core clock over the all-core clock, minus one, interpolated linearly in the
  number of busy cores), which slows the core-bound prices (work, ``atomic``, ``mb``,
  ``local``), not the line transfers.

Real CPUs never run in lockstep: interrupts, misses on private data and branch
mispredictions make each trigger's private work vary (``jitter``), which keeps
identical simulated CPUs from settling into a collision-free rhythm no machine keeps.
Everything is deterministic: the variation comes from a seeded generator and ties go
to the lower CPU number.  Throughput is measured
between the moments all CPUs together completed ``warmup`` and ``warmup + measure``
triggers per CPU.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass

INF = float("inf")

# operation codes of a trigger program
READ, WRITE, ATOMIC, MB, LOCK, UNLOCK = range(6)
OP_OF_KIND = {"read": READ, "write": WRITE, "atomic": ATOMIC, "mb": MB, "lock": LOCK, "unlock": UNLOCK}


@dataclass(frozen=True)
class Topology:
    """Sockets x cores per socket x threads per core, and how Linux numbers the CPUs:
    ``"linear"`` fills every socket's cores first, then the second hardware thread of
    each (CPU i: core i % cores_total, thread i // cores_total) - the enumeration of
    two-socket Xeons, and the order the kernel's bench pins producers in."""

    sockets: int
    cores_per_socket: int
    threads_per_core: int

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core

    def place(self, cpu: int) -> tuple[int, int, int]:
        """(socket, physical core id, hardware thread) of CPU ``cpu``."""
        cores = self.sockets * self.cores_per_socket
        core = cpu % cores
        return core // self.cores_per_socket, core, cpu // cores


@dataclass(frozen=True)
class Prices:
    """ns per event (``ht`` is a factor)."""

    local: float = 0.5
    atomic: float = 8.0
    mb: float = 8.0
    xfer_core: float = 60.0
    xfer_socket: float = 150.0
    contend: float = 0.1
    ht: float = 1.5
    turbo: float = 0.0
    jitter: float = 0.0  # each trigger's private work varies uniformly by +-this fraction
    scale: float = 1.0  # private work: the cost model's ns times this

    def replace(self, **kw) -> "Prices":
        d = dict(self.__dict__)
        d.update(kw)
        return Prices(**d)


class _Line:
    __slots__ = ("free_at", "pending", "holder", "waiters", "visits")

    def __init__(self):
        self.free_at = 0.0  # when its last queued transfer completes
        self.pending: deque = deque()  # completion times of queued transfers
        self.holder = -1  # spinlock: CPU holding it
        self.waiters: deque = deque()  # spinlock: CPUs waiting, in order
        # core -> [when its copy arrives, when it is taken away (INF: still there),
        # exclusive]: the directory, in the order the transfers were queued
        self.visits: dict = {}


def simulate(
    programs: list[tuple[float, tuple]],
    topo: Topology,
    prices: Prices,
    *,
    warmup: int = 20,
    measure: int = 100,
    seed: int = 0,
) -> float:
    """Total triggers per microsecond (= M/s) of ``len(programs)`` CPUs, CPU i running
    ``programs[i] = (work_ns, ((op, line), ...))`` in a loop.  ``line`` is any hashable
    naming a cache line (None for ``MB``)."""
    n = len(programs)
    if n == 0:
        return 0.0
    if n > topo.cpus:
        raise ValueError(f"{n} CPUs on a {topo.cpus}-CPU topology")
    place = [topo.place(c) for c in range(n)]
    busy_cores: dict[int, int] = {}
    for _, core, _ in place:
        busy_cores[core] = busy_cores.get(core, 0) + 1
    socket_of_core = {core: sock for sock, core, _ in place}
    per_socket: dict[int, int] = {}
    for sock in socket_of_core.values():
        per_socket[sock] = per_socket.get(sock, 0) + 1
    span = max(1, topo.cores_per_socket - 1)
    clock = [1.0 + prices.turbo * (per_socket[place[c][0]] - 1) / span for c in range(n)]
    work = [
        programs[c][0] * prices.scale * clock[c] * (prices.ht if busy_cores[place[c][1]] > 1 else 1.0) for c in range(n)
    ]
    ops = [programs[c][1] for c in range(n)]
    lines: dict = {}
    atomic_of = [prices.atomic * clock[c] for c in range(n)]
    mb_of = [prices.mb * clock[c] for c in range(n)]
    local = prices.local
    x_core, x_sock, contend = prices.xfer_core, prices.xfer_socket, prices.contend

    def xfer(line: _Line, core: int, t: float, exclusive: bool, hold: float = 0.0) -> float:
        """Bring ``line`` to ``core`` (shared or exclusive) asking at ``t`` and keep it
        there ``hold`` ns (a locked operation's own time: the line cannot leave during
        it); returns when the access is done.  A core whose copy is still there at
        ``t``, or on its way, uses it: this is how a hardware thread rides on its
        sibling's transfer."""
        visit = line.visits.get(core)
        if visit is not None and t <= visit[1] and (visit[2] or not exclusive):
            done = (visit[0] if visit[0] > t else t) + local + hold
            if exclusive and done > line.free_at:
                line.free_at = done
            return done
        others = [h for h, v in line.visits.items() if v[1] == INF and h != core]
        if not others:
            cost = local if visit is not None and visit[1] == INF else x_core  # an upgrade / from the LLC
        else:
            sock = socket_of_core[core]
            far = [socket_of_core[h] != sock for h in others]
            # a store invalidates every copy (the farthest answers last); a load is
            # served by the nearest one
            cost = x_sock if (any(far) if exclusive else all(far)) else x_core
        pending = line.pending
        while pending and pending[0] <= t:
            pending.popleft()
        cost *= 1.0 + contend * len(pending)
        start = line.free_at if line.free_at > t else t
        arrive = start + cost
        done = arrive + hold
        line.free_at = done if exclusive else arrive
        pending.append(line.free_at)
        for h in others:
            v = line.visits[h]
            if exclusive:
                v[1] = start  # its copy is invalidated
            else:
                v[2] = False  # an owner's copy becomes shared
        line.visits[core] = [arrive, INF, exclusive]
        return done

    pos = [0] * n  # next op index (len = trigger done)
    done_count = [0] * n
    target_lo, target_hi = n * warmup, n * (warmup + measure)
    total = 0
    t_lo = t_hi = None
    # each CPU starts its first trigger with its private work; ``jitter`` varies each
    # trigger's (a seeded generator: the same seed, the same result)
    rng = random.Random(seed)
    jit = prices.jitter

    def private(c: int) -> float:
        return work[c] * (1.0 + jit * (2.0 * rng.random() - 1.0)) if jit else work[c]

    heap = [(private(c), c) for c in range(n)]
    heapq.heapify(heap)
    while heap:
        t, c = heapq.heappop(heap)
        prog = ops[c]
        i = pos[c]
        core = place[c][1]
        # run ops without other CPUs' involvement (barriers) inline
        while i < len(prog) and prog[i][0] == MB:
            t += mb_of[c]
            i += 1
        if i == len(prog):
            total += 1
            done_count[c] += 1
            if t_lo is None and total >= target_lo:
                t_lo = t
            if total >= target_hi:
                t_hi = t
                break
            pos[c] = 0
            heapq.heappush(heap, (t + private(c), c))
            continue
        op, key = prog[i]
        line = lines.get(key)
        if line is None:
            line = lines[key] = _Line()
        pos[c] = i + 1
        if op == READ:
            t = xfer(line, core, t, False)
        elif op == WRITE:
            t = xfer(line, core, t, True)
        elif op == ATOMIC:
            t = xfer(line, core, t, True, atomic_of[c])
        elif op == LOCK:
            if line.holder >= 0:
                line.waiters.append(c)  # parked until the release
                continue
            line.holder = c
            t = xfer(line, core, t, True, atomic_of[c])
        elif op == UNLOCK:
            line.holder = -1
            t = xfer(line, core, t, True)
            if line.waiters:
                w = line.waiters.popleft()
                line.holder = w
                tw = xfer(line, place[w][1], t, True, atomic_of[w])
                heapq.heappush(heap, (tw, w))
        heapq.heappush(heap, (t, c))
    if t_lo is None or t_hi is None or t_hi <= t_lo:
        return 0.0
    return (target_hi - target_lo) / (t_hi - t_lo) * 1000.0
