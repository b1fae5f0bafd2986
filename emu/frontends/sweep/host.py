"""``sweep --host``: the same batched sweep under the host kernel's own uprobes.

Each batch is one native run of the program through :func:`emu.frontends.hostdiff.run_native`
- the probes go through tracefs with every field validated, one ``write()`` per
definition, in a probe group and trace instance of our own that are removed whatever
happens (error, Ctrl-C, fatal signals; a SIGKILLed run's leftovers by the next run) -
and the bisection is the model's (:func:`emu.frontends.sweep.bisect.bisect`).

What a native run shows is compared as the model's runs are compared
(:func:`emu.frontends.sweep.compare.compare`), but for registers and memory, which the
host does not let us see: the exit status or signal, stdout, stderr, and each task's
syscalls (raw_syscalls in the run's own trace instance, the child and its descendants
only; tasks matched in the order they were created, tid order).  The kernel's own
``uretprobe``/``uprobe`` syscalls (335/336, made from its trampoline pages) are left
out, as the model leaves them out; natively their caller cannot be seen, so every 335/336
is.  Of a syscall, what is deterministic compares:

* its number always;
* its six argument registers and its return value only when the run is laid out
  without ASLR (:func:`run_native` decides: a program with an interpreter), since under
  ASLR a pointer differs from run to run; and even then not a field that two unprobed
  native runs disagree on (a tid from ``set_tid_address``, a pid, a time) - two
  references are run, as the model's side runs two, and what differs between them is
  not compared and is said.

A run whose trace buffer lost events (``per_cpu/cpuN/stats``) has its syscalls left
out of its comparison (counted and said).  The model's verdicts are projected on what
the host compares (:func:`~emu.frontends.sweep.compare.host_view`) and the two are
put side by side where they disagree.  The native runs are UNSANDBOXED, AS ROOT.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field

from emu.frontends.host_tracefs import HostKernelError, Tracefs
from emu.frontends.hostdiff import ResolvedProbe, run_native
from emu.frontends.sweep.bisect import bisect
from emu.frontends.sweep.classify import FAITHFUL, classify
from emu.frontends.sweep.compare import KERNEL_SYSCALLS, MASKED, Divergence, Noise, RunDigest, compare, host_view
from emu.inspect import MAX_UINSN_BYTES, uprobe_refusal
from emu.probes.symbols import load_elf_file
from guest_programs import write_guest
from kernel_model.errors import InputError
from kernel_model.profiles import KernelProfile

RET = "ret"  # the return value's position in NativeNoise.fields


@dataclass
class HostSweep:
    release: str
    kernel: str  # the model profile compared with
    reference: str
    sites: int = 0  # probed natively (the model's refusals left out)
    command: tuple = ()  # PROGRAM ARGS as the user gave them (for repro lines)
    batches: int = 0
    runs: int = 0
    found: list = field(default_factory=list)  # (Site, class, Divergence)
    disagreements: list = field(default_factory=list)  # (Site, host Divergence|None, model Divergence|None)
    compared: str = ""  # what of the syscalls compares (NativeNoise.compared)
    not_compared: str = ""  # what two unprobed native runs disagree on
    incomplete: int = 0  # probed runs whose trace lost events (syscalls not compared)
    refused: dict = field(default_factory=dict)  # site key -> why the kernel refuses it
    executed: int = 0  # native runs made now (the references included)
    reused: int = 0  # native runs read back from --jsonl on --resume
    store_path: str = ""

    @property
    def unclassified(self) -> list:
        return [f for f in self.found if f[1] not in FAITHFUL] + self.disagreements

    def repro(self, site) -> str:
        return shlex.join(["uprobe-emu", "sweep", "--host", "--site", site.key, *self.command])

    def lines(self) -> list[str]:
        out = [
            f"host {self.release} vs model {self.kernel}: native reference {self.reference}, "
            f"{self.sites} sites, {self.batches} batches, {self.runs} native runs, {len(self.found)} divergences, "
            f"{len(self.disagreements)} disagreements with the model",
            f"  host compares: exit status or signal, stdout, stderr, syscalls ({self.compared})",
        ]
        if self.not_compared:
            out.append(f"  not compared (differs between two unprobed native runs): {self.not_compared}")
        if self.incomplete:
            out.append(f"  syscalls not compared in {self.incomplete} run(s): the trace buffer lost events")
        if self.refused:
            out.append(
                f"  {len(self.refused)} site(s) not probed natively: the kernel's "
                f"arch_uprobe_analyze_insn() refuses them (first: "
                f"{next(iter(self.refused))}: {next(iter(self.refused.values()))})"
            )
        if self.reused:
            out.append(f"  {self.reused} native run(s) reused from {self.store_path}, {self.executed} run now")
        for site, cls, d in self.found:
            out.append(f"  [host] {cls}: {site.describe()}")
            out.append(f"      first: {d.first}")
            out += [f"      also:  {line}" for line in d.details[1:]]
            out.append(f"      repro: {self.repro(site)}")
        for site, h, m in self.disagreements:
            out.append(f"  DISAGREE {site.describe()}")
            out.append(f"      host : {h.first if h else 'transparent'}")
            out.append(f"      model: {m.first if m else 'transparent'}")
            out.append(
                "      repro: "
                + shlex.join(["uprobe-emu", "diff", "-e", f"p:sweep/site {site.path}:{site.offset:#x}", *self.command])
            )
        return out

    def to_json(self) -> dict:
        return {
            "release": self.release,
            "kernel": self.kernel,
            "reference": self.reference,
            "sites": self.sites,
            "batches": self.batches,
            "runs": self.runs,
            "syscalls_compared": self.compared,
            "not_compared": self.not_compared,
            "incomplete_runs": self.incomplete,
            "executed": self.executed,
            "reused": self.reused,
            "refused": self.refused,
            "divergences": [{"site": s.to_json(), "class": c, "divergence": d.to_json()} for s, c, d in self.found],
            "disagreements": [
                {"site": s.to_json(), "host": h.to_json() if h else None, "model": m.to_json() if m else None}
                for s, h, m in self.disagreements
            ],
        }


def kernel_refusal(site, profile) -> str | None:
    """Why the kernel would refuse a probe at ``site`` (``arch_uprobe_analyze_insn()``
    on the 16 bytes ``prepare_uprobe()`` copies from the file), or None.  The model's
    sweep learns that only for a file mapped when it registers (the program); in a
    library mapped later the refusal is silent there, as in the kernel for a file no
    process maps yet - but ld.so and libc are mapped by other processes, so the
    kernel analyses at once and a refused probe fails the whole batch's enable
    (ENOTSUPP).  Such a site is left out of the native runs, and said."""
    try:
        with open(site.path, "rb") as f:
            f.seek(site.offset)
            insn = f.read(MAX_UINSN_BYTES)
    except OSError:
        insn = site.raw  # guest:NAME: its bytes as the sweep read them
    return uprobe_refusal(insn, profile, site.vaddr)


def native_file(program) -> tuple[str, str | None]:
    """A file the host can execute: guest:NAME is written out as an ELF."""
    if not program.path.startswith("guest:"):
        return program.path, None
    tmpdir = tempfile.mkdtemp(prefix="uemu-sweep-")
    path = os.path.join(tmpdir, program.path[len("guest:") :])
    write_guest(program.path[len("guest:") :], path)
    os.chmod(path, 0o755)
    return path, tmpdir


def native_digest(rec) -> tuple[RunDigest, bool]:
    """A native :class:`~emu.frontends.hostdiff.RunRecord` as a digest the model's
    comparison reads (no registers, no memory), and whether its trace is complete.
    Tasks are numbered 1, 2, ... in tid order (creation order): two runs' tids differ;
    the kernel's own 335/336 are left out."""
    calls = rec.syscalls or {}
    tasks = {n: [c for c in calls[tid] if c[0] not in KERNEL_SYSCALLS] for n, tid in enumerate(sorted(calls), 1)}
    return RunDigest(rec.status, rec.stdout, rec.stderr, tasks), rec.lost_events == 0


@dataclass(frozen=True)
class NativeNoise:
    """What of two native runs is not compared: whole parts two unprobed runs disagree
    on, and of the syscalls (when their numbers agree) each field they disagree on,
    ``(task, index, argument position | "ret")``; under ASLR (``randomized``) every
    argument and return value."""

    randomized: bool
    parts: frozenset = frozenset()
    fields: frozenset = frozenset()

    @property
    def compared(self) -> str:
        if "syscalls" in self.parts:
            return "not compared: two unprobed runs make different ones"
        if self.randomized:
            return "numbers only: the run is laid out with ASLR"
        return "numbers, arguments and return values" + (
            f" but {len(self.fields)} field(s) that differ between two unprobed runs" if self.fields else ""
        )

    def describe(self) -> str:
        return ", ".join(sorted(self.parts - {"syscalls"}))

    def to_json(self) -> dict:
        return {
            "randomized": self.randomized,
            "parts": sorted(self.parts),
            "fields": sorted([list(f) for f in self.fields], key=repr),
        }

    @staticmethod
    def from_json(d: dict) -> "NativeNoise":
        return NativeNoise(d["randomized"], frozenset(d["parts"]), frozenset(tuple(f) for f in d["fields"]))

    def mask(self, syscalls: dict) -> dict:
        """``syscalls`` with each field left out replaced by :data:`MASKED`."""
        out = {}
        for task, calls in syscalls.items():
            out[task] = [self._mask_call(task, i, c) for i, c in enumerate(calls)]
        return out

    def _mask_call(self, task, i, call):
        nr, args, ret = call
        if self.randomized:
            return nr, (MASKED,) * len(args), None if ret is None else MASKED
        args = tuple(MASKED if (task, i, j) in self.fields else a for j, a in enumerate(args))
        return nr, args, MASKED if (task, i, RET) in self.fields else ret


def native_noise(a: RunDigest, b: RunDigest, randomized: bool) -> NativeNoise:
    parts = {p for p in ("outcome", "stdout", "stderr") if getattr(a, p) != getattr(b, p)}
    x, y = a.syscalls, b.syscalls
    if set(x) != set(y) or any([c[0] for c in x[t]] != [c[0] for c in y[t]] for t in x):
        return NativeNoise(randomized, frozenset(parts | {"syscalls"}))
    fields: set[tuple] = set()
    for t in x:
        for i, (p, q) in enumerate(zip(x[t], y[t])):
            fields |= {(t, i, j) for j, (u, v) in enumerate(zip(p[1], q[1])) if u != v}
            if p[2] != q[2]:
                fields.add((t, i, RET))
    return NativeNoise(randomized, frozenset(parts), frozenset(fields))


def compare_native(ref: RunDigest, got: RunDigest, noise: NativeNoise, complete: bool = True) -> Divergence | None:
    """The model's comparison on what a native run shows: ``noise``'s fields masked on
    both sides, its parts (and, from a trace that lost events, the syscalls) left out."""
    parts = noise.parts | (set() if complete else {"syscalls"})
    return compare(
        RunDigest(ref.outcome, ref.stdout, ref.stderr, noise.mask(ref.syscalls)),
        RunDigest(got.outcome, got.stdout, got.stderr, noise.mask(got.syscalls)),
        Noise(frozenset(parts)),
    )


def native_run(path, program, probes, timeout) -> tuple[RunDigest, bool, list]:
    """One native run (``probes``: none for a reference): its digest, whether its
    trace is complete, and the names of the events it hit."""
    rec = run_native(path, list(program.argv), probes, program.stdin, timeout, syscalls=True)
    digest, complete = native_digest(rec)
    return digest, complete, [e.name for e in rec.events]


def host_description(program) -> dict:
    """What a native run depends on: the running kernel and the program (path, SHA-256,
    argv, stdin).  Its hash keys the native runs a resumed sweep may reuse."""
    u = os.uname()
    return {
        "release": u.release,
        "version": u.version,
        "program": program.path,
        "sha256": program.sha256,
        "argv": list(program.argv),
        "stdin": hashlib.sha256(program.stdin).hexdigest(),
    }


def _key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


class NativeRuns:
    """The native side of a host sweep: the references and each batch's verdict, read
    back from a :class:`~emu.frontends.sweep.report.CaseStore` when it recorded them
    for the same :func:`host_description` (a resumed sweep), else run and recorded."""

    def __init__(self, path, program, timeout, out: HostSweep, store=None):
        self.path, self.program, self.timeout, self.out, self.store = path, program, timeout, out, store
        self.key = _key(host_description(program))

    def reference(self) -> tuple[RunDigest, NativeNoise]:
        known = self.store.get_kind("host_reference", self.key) if self.store else None
        if known is not None:
            try:
                ref, noise = RunDigest.from_json(known["digest"]), NativeNoise.from_json(known["noise"])
                self.out.reused += 2
                return ref, noise
            except (KeyError, TypeError, ValueError):
                pass  # a damaged record: run them again
        ref, noise = native_reference(self.path, self.program, self.timeout)
        self.out.executed += 2
        if self.store:
            self.store.put_kind(
                "host_reference",
                {
                    "host_reference": self.key,
                    "description": host_description(self.program),
                    "digest": ref.to_json(),
                    "noise": noise.to_json(),
                },
            )
        return ref, noise

    def verdict(self, sites, ref, noise):
        case = _key(self.key, [s.key for s in sites])
        known = self.store.get_kind("host_case", case) if self.store else None
        if known is not None and not {"divergence", "hit", "complete"} <= set(known):
            known = None  # a damaged record: run it again
        if known is None:
            d, hit, complete = native_verdict(self.path, self.program, sites, ref, noise, self.timeout)
            self.out.executed += 1
            known = {
                "host_case": case,
                "divergence": d.to_json() if d else None,
                "hit": hit,
                "complete": complete,
                "sites": [s.key for s in sites],
            }
            if self.store:
                self.store.put_kind("host_case", known)
        else:
            self.out.reused += 1
        self.out.incomplete += not known["complete"]
        d = known["divergence"]
        return (Divergence.from_json(d) if d else None), known["hit"]


def native_reference(path, program, timeout) -> tuple[RunDigest, NativeNoise]:
    """Two unprobed native runs: the reference and what of it is not compared."""
    randomized = load_elf_file(path).interp is None  # run_native's no_randomize rule
    try:
        (ref, ok1, _), (again, ok2, _) = (native_run(path, program, [], timeout) for _ in range(2))
    except HostKernelError as e:
        if "did not finish" in str(e):
            raise HostKernelError(f"the native reference run did not finish in {timeout} s") from None
        raise
    noise = native_noise(ref, again, randomized)
    if not (ok1 and ok2):
        noise = NativeNoise(randomized, noise.parts | {"syscalls"}, noise.fields)
    return ref, noise


def native_verdict(path, program, sites, ref, noise, timeout):
    """The verdict of one native run with ``sites`` probed, which of them hit (from
    the trace: each site is its own event; None: unknown) and whether its trace is
    complete."""
    probes = [
        ResolvedProbe(s.key, f"s{i}", s.kind, s.offset, s.vaddr, "", None if s.path == program.path else s.path)
        for i, s in enumerate(sites)
    ]
    try:
        got, complete, names = native_run(path, program, probes, timeout)
    except HostKernelError as e:
        if "did not finish" not in str(e):
            raise
        return Divergence(["outcome"], f"outcome: reference {ref.outcome}, probed timeout", [str(e)]), None, True
    hit = [i for i, s in enumerate(sites) if s.key in set(names)]
    return compare_native(ref, got, noise, complete), hit, complete


def host_sweep(
    program, model, *, batch: int = 0, timeout: float = 60.0, unoptimized_clean=None, store=None
) -> HostSweep:
    """Sweep ``model.sites`` natively; compare with the model sweep ``model``.  With
    ``store`` (``--jsonl``) the native runs are recorded, and on ``--resume`` those
    recorded for the same kernel and program are not run again."""
    if program.sysroot != "/":
        raise InputError("sweep --host: the host runs the program in its own /, not a --sysroot")
    Tracefs().close()  # root and uprobe_events, before any run
    path, tmpdir = native_file(program)
    try:
        # what the model's arch_uprobe_analyze_insn() refuses, the kernel's refuses too
        # (silently, at mmap time): not worth a tracefs event each
        profile = KernelProfile.get(model.kernel)
        candidates = [s for s in model.sites if f"{s.path}:{s.offset:#x}" not in model.refused]
        refused = {s.key: why for s in candidates if (why := kernel_refusal(s, profile))}
        sites = [s for s in candidates if s.key not in refused]
        out = HostSweep(
            os.uname().release,
            model.kernel,
            "",
            len(sites),
            (program.path, *program.argv[1:]),
            store_path=store.path if store else "",
            refused=refused,
        )
        native = NativeRuns(path, program, timeout, out, store)
        ref, noise = native.reference()
        out.reference, out.compared, out.not_compared = ref.outcome, noise.compared, noise.describe()

        def evaluate(groups):
            return [native.verdict([sites[i] for i in g], ref, noise) for g in groups]

        res = bisect(len(sites), batch or 256, evaluate)
        out.batches, out.runs = res.batches, res.runs
        host_found = {}
        for f in res.found:
            site = sites[f.sites[0]]
            cls = classify(site, profile, f.verdict, unoptimized_clean and (lambda s=site: unoptimized_clean(s)))
            out.found.append((site, cls, f.verdict))
            host_found[site.key] = f.verdict
        model_found = {
            d.sites[0].key: host_view(d.divergence, noise.parts, noise.randomized)
            for d in model.divergences
            if len(d.sites) == 1
        }
        model_found = {k: v for k, v in model_found.items() if v is not None}
        by_key = {s.key: s for s in sites}
        for key in sorted(set(host_found) ^ set(model_found)):
            out.disagreements.append((by_key[key], host_found.get(key), model_found.get(key)))
        return out
    finally:
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
