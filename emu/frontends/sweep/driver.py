"""One sweep of one program under one kernel profile: the reference run, the sites, the
batched bisection on a runner, the classification of what diverged.

The reference (unprobed) run executes here, twice (what the two disagree on is not
compared): its finished machine also tells which libraries the program mapped
(``--libraries``), so the sites are enumerated from it.  Every probed case then goes to
the runner; with a :class:`~emu.frontends.sweep.report.CaseStore` a case already
recorded (an interrupted sweep's JSONL) is not run again - its verdict is read back -
and neither are the reference runs: their digest, what they disagree on and the sites
are recorded under a key made of the whole description (:func:`reference_description`)
and reused when a resumed sweep's description is the same.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time
from dataclasses import dataclass, field

from emu.frontends.sweep.bisect import bisect
from emu.frontends.sweep.case import Case, CaseRunner
from emu.frontends.sweep.classify import FAITHFUL, UNCLASSIFIED, classify
from emu.frontends.sweep.compare import Divergence, Noise, RunDigest, compare, noise_between
from emu.frontends.sweep.sites import SITE_MODES, Site, enumerate_sites
from kernel_model.profiles import KernelProfile


@dataclass
class SiteDivergence:
    sites: list  # the Site (one; several for an interaction)
    cls: str
    divergence: Divergence
    repro: str

    @property
    def faithful(self) -> bool:
        return self.cls in FAITHFUL

    def to_json(self) -> dict:
        return {
            "class": self.cls,
            "sites": [s.to_json() for s in self.sites],
            "divergence": self.divergence.to_json(),
            "repro": self.repro,
        }


@dataclass
class KernelSweep:
    kernel: str
    reference: str  # the unprobed run's outcome
    noise: Noise = Noise()  # what two unprobed runs disagree on
    sites: list = field(default_factory=list)
    refused: dict = field(default_factory=dict)
    batches: int = 0
    runs: int = 0  # probed runs the bisection needed
    executed: int = 0  # of them, run now (not read back on --resume)
    divergences: list = field(default_factory=list)
    seconds: float = 0.0
    overrides: tuple = ()
    ref_digest: object = field(default=None, repr=False)  # the reference run's RunDigest
    reference_runs: int = 2  # 0: the recorded reference was reused
    reference_note: str = ""  # how --resume dealt with the reference runs

    def by_class(self) -> dict:
        out: dict = {}
        for d in self.divergences:
            out[d.cls] = out.get(d.cls, 0) + 1
        return out

    @property
    def unclassified(self) -> list:
        return [d for d in self.divergences if not d.faithful]

    def to_json(self) -> dict:
        return {
            "kernel": self.kernel,
            "reference": self.reference,
            "not_compared": self.noise.describe(),
            "sites": len(self.sites),
            "refused": self.refused,
            "batches": self.batches,
            "runs": self.runs,
            "executed": self.executed,
            "reference_runs": self.reference_runs,
            "seconds": round(self.seconds, 3),
            "by_class": self.by_class(),
            "divergences": [d.to_json() for d in self.divergences],
        }


def default_repro(program, kernel: str, sites) -> str:
    words = ["uprobe-emu", "sweep", "--kernel", kernel] + (["--cpus", str(program.cpus)] if program.cpus != 1 else [])
    for s in sites:
        words += ["--site", s.key]
    return shlex.join([*words, program.path, *program.argv[1:]])


def reference_description(program, kernel: str, overrides: tuple, mode: str, libraries: bool, site_specs) -> dict:
    """Everything the reference runs and the site list depend on: the program (path,
    SHA-256, argv, stdin, sysroot, seed, budget), the profile and its overrides, and
    the sites asked for (a --sites FILE by its content's SHA-256)."""
    d = {
        "program": program.path,
        "sha256": program.sha256,
        "argv": list(program.argv),
        "stdin": hashlib.sha256(program.stdin).hexdigest(),
        "sysroot": program.sysroot,
        "seed": program.seed,
        "max_insns": program.max_insns,
        "kernel": kernel,
        "overrides": [[k, v] for k, v in overrides],
        "mode": mode,
        "sites_file": _file_sha256(mode) if mode not in SITE_MODES else None,
        "libraries": libraries,
        "site_specs": list(site_specs or []),
    }
    if program.cpus != 1:
        d["cpus"] = program.cpus  # one CPU: the description (and key) sweeps always had
    return json.loads(json.dumps(d, default=repr))  # as the JSONL gives it back


def description_key(description: dict) -> str:
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()[:20]


def _file_sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read(16 << 20)).hexdigest()
    except OSError:
        return None  # read_site_file() says why, when the sites are read


class Sweeper:
    """Sweeps ``program`` on ``runner``; ``store`` (optional) streams and resumes."""

    def __init__(self, program, runner, *, store=None, progress=None, batch: int = 0, repro=None):
        self.program, self.runner, self.store, self.progress = program, runner, store, progress
        self.batch = batch
        self.repro = repro or default_repro

    def sweep(
        self, kernel: str, overrides: tuple = (), *, mode: str = "insn", libraries: bool = False, site_specs=None
    ) -> KernelSweep:
        t0 = time.perf_counter()
        profile = KernelProfile.get(kernel, **dict(overrides))
        out = self.reference(
            Case(self.program, kernel, overrides, ()),
            reference_description(self.program, kernel, overrides, mode, libraries, site_specs),
            lambda m: enumerate_sites(m, mode, libraries=libraries, program=m.process.exe.path, site_specs=site_specs),
        )
        sites, ref_digest = out.sites, out.ref_digest
        batch = self.batch or max(1, -(-len(sites) // max(1, self.runner.workers)))

        def evaluate(groups):
            cases = [Case(self.program, kernel, overrides, tuple(sites[i].probe for i in g)) for g in groups]
            return self._verdicts(cases, ref_digest, out)

        res = bisect(len(sites), batch, evaluate) if sites else None
        if res is not None:
            out.batches, out.runs = res.batches, res.runs
            for f in res.found:
                group = [sites[i] for i in f.sites]
                if f.interaction:
                    cls = UNCLASSIFIED
                else:
                    cls = classify(
                        group[0], profile, f.verdict, lambda g=group: self.transparent_without_optimizer(g[0], out)
                    )
                out.divergences.append(SiteDivergence(group, cls, f.verdict, self.repro(self.program, kernel, group)))
        out.seconds = time.perf_counter() - t0
        return out

    def reference(self, case: Case, description: dict, sites_of) -> KernelSweep:
        """The reference: the two unprobed runs and the sites (``sites_of(machine)``),
        read back from the store when it recorded them for the same ``description``,
        else run (and recorded)."""
        key = description_key(description)
        known = self.store.reference(key) if self.store else None
        if known is not None:
            try:
                return KernelSweep(
                    case.kernel,
                    known["digest"]["outcome"],
                    Noise.from_json(known["noise"]),
                    [Site.from_json(s) for s in known["sites"]],
                    overrides=case.overrides,
                    ref_digest=RunDigest.from_json(known["digest"]),
                    reference_runs=0,
                    reference_note=f"reused from {self.store.path}",
                )
            except (KeyError, TypeError, ValueError):
                pass  # a damaged record: run them again
        local = CaseRunner()
        m, ref = local.execute(case)
        again = local.run(case)
        out = KernelSweep(
            case.kernel,
            ref.digest.outcome,
            noise_between(ref.digest, again.digest),
            sites_of(m),
            overrides=case.overrides,
            ref_digest=ref.digest,
        )
        if self.store:
            changed = self.store.reference_changes(description)
            if changed:
                out.reference_note = f"run again: the ones in {self.store.path} were for another " + ", ".join(changed)
            elif changed is not None:
                out.reference_note = f"run again: their record in {self.store.path} is damaged"
            elif self.store.resuming:
                out.reference_note = f"run: {self.store.path} has none for this kernel profile"
            self.store.put_reference(
                {
                    "reference": key,
                    "kernel": case.kernel,
                    "description": description,
                    "digest": ref.digest.to_json(),
                    "noise": out.noise.to_json(),
                    "sites": [s.to_json() for s in out.sites],
                }
            )
        return out

    def transparent_without_optimizer(self, site, out: KernelSweep) -> bool:
        """Is ``site`` alone transparent under ``out``'s profile with ``optimize=None``?
        (Tells the nop5 design's red-zone clobber from an emulation error.)"""
        ov = tuple(dict(out.overrides, optimize=None).items())
        case = Case(self.program, out.kernel, ov, (site.probe,))
        return self._verdicts([case], out.ref_digest, out)[0][0] is None

    def _verdicts(self, cases: list, ref_digest, out: KernelSweep) -> list:
        """Divergence | None per case, from the store when recorded, else run."""
        known = {c.id: self.store.get(c.id) for c in cases} if self.store else {}
        todo = [c for c in cases if known.get(c.id) is None]
        if self.progress:
            self.progress.add(len(todo))

        def done(result):
            d = compare(ref_digest, result.digest, out.noise)
            rec = {
                "case": result.case_id,
                "kernel": out.kernel,
                "diverged": d is not None,
                "divergence": d.to_json() if d else None,
                "refused": result.refused,
                "hits": result.digest.hits,
                "hit": list(result.hit),
                "seconds": round(result.seconds, 4),
            }
            known[result.case_id] = rec
            if self.store:
                self.store.put(rec, [c for c in todo if c.id == result.case_id][0])
            if self.progress:
                self.progress.advance()

        self.runner.run(todo, done)
        out.executed += len(todo)
        verdicts = []
        for c in cases:
            rec = known[c.id]
            out.refused.update(rec["refused"])
            d = rec["divergence"]
            verdicts.append((Divergence.from_json(d) if d else None, rec.get("hit")))
        return verdicts
