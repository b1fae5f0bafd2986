"""Batch, then bisect only what diverges (adaptive group testing).

All sites are probed in a few large batches; a clean batch clears every site in it in
one run.  A diverging batch is split in halves, and only the halves that diverge again
are split further, until single sites remain: a program with k diverging sites among n
costs about ``n / batch + 2 k log2(batch)`` runs instead of n.  Each round's groups are
independent cases, handed to the runner together, so a pool or a cluster runs them in
parallel.  A group that diverges while neither of its halves does is an interaction
(two probes together change the run, neither alone does): reported as such.

A probe that never hits changes nothing but the text bytes, so a diverging group whose
run reports which of its sites were hit is split into the hit sites and the others
(instead of halves): in a large program the few thousand executed boundaries are
bisected, and the rest is cleared in one more run.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Found:
    sites: tuple  # indices into the site list (one, or a whole group)
    verdict: object  # what evaluate() returned for that group
    interaction: bool = False


@dataclass
class BisectResult:
    found: list = field(default_factory=list)
    batches: int = 0
    runs: int = 0
    rounds: int = 0


def make_batches(n: int, size: int) -> list[tuple]:
    size = max(1, size)
    return [tuple(range(i, min(n, i + size))) for i in range(0, n, size)]


def bisect(n: int, batch: int, evaluate) -> BisectResult:
    """``evaluate(groups)`` -> one ``(verdict, hit)`` per group, for a whole round at
    once: verdict None when the probed run did what the reference did; ``hit`` the
    positions in the group of the sites that were hit (None: unknown)."""
    out = BisectResult()
    pending = make_batches(n, batch)
    out.batches = len(pending)
    parents: dict = {}  # child group -> (parent group, its verdict)
    while pending:
        out.rounds += 1
        answers = evaluate(pending)
        verdicts = [v for v, _ in answers]
        out.runs += len(pending)
        diverged = {g for g, v in zip(pending, verdicts) if v is not None}
        nxt = []
        for g, (v, hit) in zip(pending, answers):
            if v is None:
                continue
            if len(g) == 1:
                out.found.append(Found(g, v))
                continue
            for child in split(g, hit):
                parents[child] = (g, v)
                nxt.append(child)
        for parent, v in _interactions(pending, diverged, parents):
            out.found.append(Found(parent, v, interaction=True))
        pending = nxt
    out.found.sort(key=lambda f: f.sites)
    return out


def split(group: tuple, hit) -> tuple:
    """The hit sites and the others, when both are there; else two halves."""
    if hit is not None and 0 < len(hit) < len(group):
        chosen = set(hit)
        return (tuple(group[i] for i in sorted(chosen)), tuple(s for i, s in enumerate(group) if i not in chosen))
    half = len(group) // 2
    return group[:half], group[half:]


def _interactions(groups, diverged, parents):
    """Parents whose two halves (both in this round) came out clean."""
    seen = {}
    for g in groups:
        if g in parents:
            seen.setdefault(parents[g][0], []).append(g)
    for parent, children in seen.items():
        if len(children) == 2 and not any(c in diverged for c in children):
            yield parent, next(v for c, (p, v) in parents.items() if p == parent)
