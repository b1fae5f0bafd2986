"""``sweep --host``: the same batched sweep under the host kernel's own uprobes.

Each batch is one native run of the program through :func:`emu.frontends.hostdiff.run_native`
- the probes go through tracefs with every field validated, one ``write()`` per
definition, in a probe group and trace instance of our own that are removed whatever
happens (error, Ctrl-C, fatal signals; a SIGKILLed run's leftovers by the next run) -
and the bisection is the model's (:func:`emu.frontends.sweep.bisect.bisect`).  Natively
only the exit status or signal and stdout are observed (:data:`compare.HOST_PARTS`); the
model's verdicts are projected on the same parts and the two are put side by side
where they disagree.  The native runs are UNSANDBOXED, AS ROOT.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field

from emu.elf import load_elf_file
from emu.errors import InputError
from emu.frontends.hostdiff import HostKernelError, ResolvedProbe, Tracefs, run_native
from emu.frontends.sweep.bisect import bisect
from emu.frontends.sweep.classify import FAITHFUL, classify
from emu.frontends.sweep.compare import Divergence, host_view
from emu.loader import DEFAULT_ENV
from guest_programs import write_guest
from kernel_model.profiles import KernelProfile


@dataclass
class HostSweep:
    release: str
    kernel: str                    # the model profile compared with
    reference: str
    sites: int = 0                 # probed natively (the model's refusals left out)
    command: tuple = ()            # PROGRAM ARGS as the user gave them (for repro lines)
    batches: int = 0
    runs: int = 0
    found: list = field(default_factory=list)          # (Site, class, Divergence)
    disagreements: list = field(default_factory=list)  # (Site, host Divergence|None, model Divergence|None)

    @property
    def unclassified(self) -> list:
        return [f for f in self.found if f[1] not in FAITHFUL] + self.disagreements

    def lines(self) -> list[str]:
        out = [f"host {self.release} vs model {self.kernel}: native reference {self.reference}, "
               f"{self.sites} sites, {self.batches} batches, {self.runs} native runs, {len(self.found)} divergences, "
               f"{len(self.disagreements)} disagreements with the model"]
        for site, cls, d in self.found:
            out.append(f"  [host] {cls}: {site.describe()}")
            out.append(f"      first: {d.first}")
        for site, h, m in self.disagreements:
            out.append(f"  DISAGREE {site.describe()}")
            out.append(f"      host : {h.first if h else 'transparent'}")
            out.append(f"      model: {m.first if m else 'transparent'}")
            out.append("      repro: " + shlex.join(["uprobe-emu", "diff", *self.command[:1], "-e",
                                                     f"p:sweep/site {site.path}:{site.offset:#x}",
                                                     "--", *self.command[1:]]))
        return out

    def to_json(self) -> dict:
        return {"release": self.release, "kernel": self.kernel, "reference": self.reference,
                "sites": self.sites,
                "batches": self.batches, "runs": self.runs,
                "divergences": [{"site": s.to_json(), "class": c, "divergence": d.to_json()}
                                for s, c, d in self.found],
                "disagreements": [{"site": s.to_json(), "host": h.to_json() if h else None,
                                   "model": m.to_json() if m else None}
                                  for s, h, m in self.disagreements]}


def native_file(program) -> tuple[str, str | None]:
    """A file the host can execute: guest:NAME is written out as an ELF."""
    if not program.path.startswith("guest:"):
        return program.path, None
    tmpdir = tempfile.mkdtemp(prefix="uemu-sweep-")
    path = os.path.join(tmpdir, program.path[len("guest:"):])
    write_guest(program.path[len("guest:"):], path)
    os.chmod(path, 0o755)
    return path, tmpdir


def native_reference(path: str, argv, stdin: bytes, timeout) -> tuple[str, bytes]:
    """The unprobed native run, as run_native runs a probed one: the model's
    environment, and without ASLR (``setarch -R``) for a program with an interpreter."""
    cmd = [path, *argv[1:]]
    if load_elf_file(path).interp is not None:
        cmd = ["setarch", "x86_64", "-R", *cmd]
    env = dict(item.split("=", 1) for item in DEFAULT_ENV)
    try:
        p = subprocess.run(cmd, input=stdin, capture_output=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise HostKernelError(f"the native reference run did not finish in {timeout} s") from None
    status = f"signal {signal.Signals(-p.returncode).name}" if p.returncode < 0 else \
        f"exit {p.returncode}"
    return status, p.stdout


def _host_status(status: str) -> str:
    return status                          # "exit N" | "signal NAME": the model's spelling


def native_verdict(path, program, sites, ref, timeout) -> tuple[Divergence | None, list | None]:
    """The verdict of one native run with ``sites`` probed, and which of them hit
    (from the trace: each site is its own event)."""
    probes = [ResolvedProbe(s.key, f"s{i}", s.kind, s.offset, s.vaddr, "",
                            None if s.path == program.path else s.path)
              for i, s in enumerate(sites)]
    try:
        rec = run_native(path, list(program.argv), probes, program.stdin, timeout)
    except HostKernelError as e:
        if "did not finish" not in str(e):
            raise
        return Divergence(["outcome"], f"outcome: reference {ref[0]}, probed timeout", [str(e)]), None
    names = {e.name for e in rec.events}
    hit = [i for i, s in enumerate(sites) if s.key in names]
    parts, details = [], []
    if _host_status(rec.status) != ref[0]:
        parts.append("outcome")
        details.append(f"outcome: reference {ref[0]}, probed {rec.status}")
    if rec.stdout != ref[1]:
        a, b = ref[1], rec.stdout
        i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
        parts.append("stdout")
        details.append(f"stdout at byte {i}: reference {a[max(0, i - 16):i + 16]!r}, "
                       f"probed {b[max(0, i - 16):i + 16]!r}")
    return (Divergence(parts, details[0], details) if parts else None), hit


def host_sweep(program, model, *, batch: int = 0, timeout: float = 60.0,
               unoptimized_clean=None) -> HostSweep:
    """Sweep ``model.sites`` natively; compare with the model sweep ``model``."""
    if program.sysroot != "/":
        raise InputError("sweep --host: the host runs the program in its own /, not a --sysroot")
    Tracefs().close()                      # root and uprobe_events, before any run
    path, tmpdir = native_file(program)
    try:
        ref = native_reference(path, program.argv, program.stdin, timeout)
        # what the model's arch_uprobe_analyze_insn() refuses, the kernel's refuses too
        # (silently, at mmap time): not worth a tracefs event each
        sites = [s for s in model.sites if f"{s.path}:{s.offset:#x}" not in model.refused]
        out = HostSweep(os.uname().release, model.kernel, ref[0], len(sites),
                        (program.path, *program.argv[1:]))

        def evaluate(groups):
            return [native_verdict(path, program, [sites[i] for i in g], ref, timeout)
                    for g in groups]

        res = bisect(len(sites), batch or 256, evaluate)
        out.batches, out.runs = res.batches, res.runs
        profile = KernelProfile.get(model.kernel)
        host_found = {}
        for f in res.found:
            site = sites[f.sites[0]]
            cls = classify(site, profile, f.verdict,
                           unoptimized_clean and (lambda s=site: unoptimized_clean(s)))
            out.found.append((site, cls, f.verdict))
            host_found[site.key] = f.verdict
        model_found = {d.sites[0].key: host_view(d.divergence) for d in model.divergences
                       if len(d.sites) == 1}
        model_found = {k: v for k, v in model_found.items() if v is not None}
        by_key = {s.key: s for s in sites}
        for key in sorted(set(host_found) ^ set(model_found)):
            out.disagreements.append((by_key[key], host_found.get(key), model_found.get(key)))
        return out
    finally:
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
