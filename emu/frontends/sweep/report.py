"""What a sweep tells its user: a summary table, each divergence with its site, the
first point where the runs part and a command reproducing it, ``--json``, the JSONL
stream of case results (``--jsonl``) that ``--resume`` continues from, and a progress
bar.  The exit status is 1 when a divergence is not a known kernel-faithful one."""

from __future__ import annotations

import json
import os
import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kernel_model.errors import InputError

EXIT_CLEAN, EXIT_DIVERGED = 0, 1


# What a reference record's description fields are called in a note
DESCRIPTION_NAMES = {
    "program": "program path",
    "sha256": "binary (SHA-256 differs)",
    "argv": "argv",
    "stdin": "stdin",
    "sysroot": "sysroot",
    "seed": "seed",
    "max_insns": "instruction budget",
    "kernel": "kernel profile",
    "overrides": "profile overrides",
    "mode": "--sites",
    "sites_file": "--sites file content",
    "libraries": "--libraries",
    "site_specs": "--site list",
    "cpus": "--cpus",
}


class CaseStore:
    """Case results, one JSON object per line, appended (and flushed) as each case
    finishes; with ``resume`` the lines already there are read back, so the cases they
    record are not run again.  The reference runs of each sweep are a line of their
    own (``"reference"``: the key of their description), reused the same way, and so
    are ``sweep --host``'s native references and batches (``"host_reference"``,
    ``"host_case"``).  A truncated last line (the sweep was killed while writing it)
    is ignored."""

    def __init__(self, path: str, resume: bool = False):
        self.path = path
        self.records: dict = {}
        self.references: dict = {}
        self.host: dict = {"host_reference": {}, "host_case": {}}  # sweep --host's runs
        if resume and os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as f:
                    for line in f:
                        try:
                            rec = json.loads(line)
                        except json.JSONDecodeError:
                            continue
                        if isinstance(rec, dict) and "case" in rec:
                            self.records[rec["case"]] = rec
                        elif isinstance(rec, dict):
                            for kind in ("reference", *self.host):
                                if kind in rec:
                                    self._kind(kind)[rec[kind]] = rec
            except OSError as e:
                raise InputError(f"sweep: cannot read {path!r}: {e.strerror}") from None
        try:
            self.file = open(path, "a" if resume else "w", encoding="utf-8")
        except OSError as e:
            raise InputError(f"sweep: cannot write {path!r}: {e.strerror}") from None
        self.resumed = len(self.records)
        self.resuming = resume

    def get(self, case_id: str):
        return self.records.get(case_id)

    def put(self, record: dict, case=None) -> None:
        if case is not None:
            record = dict(record, sites=[f"{p}:{o:#x}" + ("%return" if k == "r" else "") for p, o, k in case.sites])
        self.records[record["case"]] = record
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def reference(self, key: str):
        return self.references.get(key)

    def reference_changes(self, description: dict) -> list[str] | None:
        """What differs between ``description`` and the closest reference recorded
        for the same kernel profile and overrides (None: none is): why the reference
        runs are run again."""
        best = None
        for rec in self.references.values():
            old = rec.get("description", {})
            if (old.get("kernel"), old.get("overrides")) != (description["kernel"], description["overrides"]):
                continue
            diff = [DESCRIPTION_NAMES.get(k, k) for k in description if old.get(k) != description[k]]
            if best is None or len(diff) < len(best):
                best = diff
        return best

    def put_reference(self, record: dict) -> None:
        self.put_kind("reference", record)

    def _kind(self, kind: str) -> dict:
        return self.references if kind == "reference" else self.host[kind]

    def get_kind(self, kind: str, key: str):
        """A record of ``kind`` (reference, host_reference, host_case) by its key."""
        return self._kind(kind).get(key)

    def put_kind(self, kind: str, record: dict) -> None:
        self._kind(kind)[record[kind]] = record
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class ProgressBar:
    """A rich progress bar on stderr (only on a terminal): cases done of cases known;
    the total grows as the bisection plans more rounds."""

    def __init__(self, enabled: bool | None = None):
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.bar = (
            Progress(
                TextColumn("sweep"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            if enabled
            else None
        )
        self.task = None
        if self.bar:
            self.bar.start()
            self.task = self.bar.add_task("sweep", total=0)

    def add(self, n: int) -> None:
        if self.bar and self.task is not None:
            self.bar.update(self.task, total=(self.bar.tasks[0].total or 0) + n)

    def advance(self) -> None:
        if self.bar and self.task is not None:
            self.bar.advance(self.task)

    def close(self) -> None:
        if self.bar:
            self.bar.stop()


def summary_table(sweeps: list, title: str) -> Table:
    t = Table(title=title)
    for col in ("kernel", "sites", "refused", "batches", "runs", "runs/site", "divergences", "time", "sites/s"):
        t.add_column(col, justify="left" if col in ("kernel", "divergences") else "right")
    for s in sweeps:
        n = len(s.sites)
        by = ", ".join(f"{k} {v}" for k, v in sorted(s.by_class().items())) or "none"
        t.add_row(
            s.kernel,
            str(n),
            str(len(s.refused)),
            str(s.batches),
            str(s.runs),
            f"{s.runs / n:.4f}" if n else "-",
            by,
            f"{s.seconds:.2f}s",
            f"{n / s.seconds:.0f}" if s.seconds else "-",
        )
    return t


def divergence_lines(sweep) -> list[str]:
    out = []
    for d in sweep.divergences:
        head = "interaction of " if len(d.sites) > 1 else ""
        tag = "kernel-faithful" if d.faithful else "UNCLASSIFIED"
        out.append(
            f"[{sweep.kernel}] {d.cls} ({tag}): {head}"
            + "; ".join(s.describe() for s in d.sites[:4])
            + (f" ... ({len(d.sites)} sites)" if len(d.sites) > 4 else "")
        )
        out.append(f"    first: {d.divergence.first}")
        for line in d.divergence.details[1:]:
            out.append(f"    also:  {line}")
        out.append(f"    repro: {d.repro}")
    return out


def print_report(sweeps: list, title: str, out=None) -> None:
    console = Console(file=out or sys.stdout, width=160)
    console.print(summary_table(sweeps, title))
    for s in sweeps:
        if s.reference_note:
            console.print(
                f"[{s.kernel}] reference runs: {s.reference_note}", markup=False, highlight=False, soft_wrap=True
            )
        if s.noise.describe():
            console.print(
                f"[{s.kernel}] not compared (differs between two unprobed runs): {s.noise.describe()}",
                markup=False,
                highlight=False,
            )
        for line in divergence_lines(s):
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def exit_status(sweeps: list, host=None) -> int:
    bad = any(s.unclassified for s in sweeps) or (host is not None and host.unclassified)
    return EXIT_DIVERGED if bad else EXIT_CLEAN


def write_json(path: str, doc: dict) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
    except OSError as e:
        raise InputError(f"sweep: cannot write --json {path!r}: {e.strerror}") from None
