#!/usr/bin/env python3
"""The fidelity corpus: ``uprobe-emu diff`` over a list of real programs and probe specs.

A benchmark of the model's fidelity, not a test: each case of the corpus file (TOML,
``[[case]]`` tables with ``name``, ``program`` = [argv...], ``events`` = [spec...],
optional ``stdin`` text, ``by_design`` = "why a divergence here is the model's right
answer", and ``build`` = a C or Go source of this repository built first, whose
executable ``{exe}`` stands for in ``program`` and ``events``) runs as
``uprobe-emu diff -e SPEC ... -- PROGRAM ARGS...`` with a timeout, as root on the
host's tracefs.  Each case ends as one of:

* ``agree``: the host and the model agree (exit status, output, events);
* ``by-design``: they diverge where the corpus says why the model is right;
* ``diverge``: they diverge, with diff's first divergence line;
* ``lost``: the host's trace buffer lost events, so nothing was compared;
* ``error``: diff refused the case (its one error line);
* ``timeout``: the case did not end in time (diff is killed with its process group).

Prints a line per case and the totals: agreement is (agree + by-design) over the cases
that ran to a verdict.  ``--json FILE`` writes every result, ``--only NAME,...`` and
``--skip NAME,...`` pick cases, ``--uprobe-emu PATH`` picks the command.

    sudo python tools/diff_corpus.py [tools/diff_corpus.toml] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

DEFAULT_CORPUS = Path(__file__).with_name("diff_corpus.toml")
ROOT = Path(__file__).resolve().parent.parent
VERDICTS = ("agree", "by-design", "diverge", "lost", "error", "timeout")


def load_corpus(path: Path) -> list[dict]:
    """The cases, checked: a clear error for a malformed corpus, never a traceback."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise SystemExit(f"diff_corpus: cannot read {path}: {e}") from None
    cases = data.get("case", [])
    for i, c in enumerate(cases):
        if not isinstance(c.get("name"), str) or not c.get("program") or not c.get("events"):
            raise SystemExit(f"diff_corpus: case {i + 1} of {path} needs name, program and events")
    names = [c["name"] for c in cases]
    if len(set(names)) != len(names):
        raise SystemExit(f"diff_corpus: {path} names a case twice")
    return cases


def command_line(tool: list[str], case: dict, stdin_file: str | None) -> list[str]:
    argv = [*tool, "diff"]
    for spec in case["events"]:
        argv += ["-e", spec]
    if stdin_file is not None:
        argv += ["--stdin", stdin_file]
    return [*argv, "--", *case["program"]]


def verdict_of(returncode: int, out: str, err: str, case: dict) -> tuple[str, str]:
    """(verdict, detail) from diff's exit status and output."""
    text = out + err
    if "lost" in text.lower() and returncode not in (0, 1):
        return "lost", _first_line(text, "lost")
    if returncode == 0 and out.startswith("agree"):
        return "agree", out.splitlines()[0]
    if returncode == 1:
        first = next((ln for ln in out.splitlines()[1:] if ln.strip()), out.splitlines()[0] if out else "")
        if case.get("by_design"):
            return "by-design", f"{case['by_design']} ({first.strip()})"
        return "diverge", first.strip()
    return "error", (err.strip().splitlines() or [f"exit {returncode}"])[-1]


def _first_line(text: str, word: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if word in ln.lower()), word)


def built(case: dict, workdir: Path) -> dict:
    """The case with ``{exe}`` replaced by its ``build`` source compiled (gcc -O1 -g)."""
    if "build" not in case:
        return case
    src = ROOT / case["build"]
    exe = workdir / src.stem
    if not exe.exists():
        if src.suffix == ".go":  # a static Go program (go build without cgo)
            env = {**os.environ, "CGO_ENABLED": "0", "GOCACHE": str(workdir / "gocache"), "GOPATH": str(workdir)}
            subprocess.run(["go", "build", "-o", str(exe), str(src)], check=True, env=env, cwd=workdir)
        else:
            subprocess.run(["gcc", "-O1", "-g", "-pthread", "-o", str(exe), str(src)], check=True)
    return {
        **case,
        "program": [a.replace("{exe}", str(exe)) for a in case["program"]],
        "events": [e.replace("{exe}", str(exe)) for e in case["events"]],
    }


def run_case(tool: list[str], case: dict, timeout: float, workdir: Path) -> dict:
    case = built(case, workdir)
    stdin_file = None
    if "stdin" in case:
        stdin_file = str(workdir / f"{case['name']}.stdin")
        Path(stdin_file).write_text(case["stdin"])
    argv = command_line(tool, case, stdin_file)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=workdir,
        start_new_session=True,
        errors="replace",
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        verdict, detail = verdict_of(proc.returncode, out, err, case)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        verdict, detail = "timeout", f"no verdict in {timeout:.0f} s"
    return {
        "name": case["name"],
        "verdict": verdict,
        "detail": detail,
        "seconds": round(time.monotonic() - t0, 2),
        "command": argv,
    }


def summary(results: list[dict]) -> dict:
    counts = {v: sum(r["verdict"] == v for r in results) for v in VERDICTS}
    ran = counts["agree"] + counts["by-design"] + counts["diverge"]
    return {
        "counts": counts,
        "agreement": (counts["agree"] + counts["by-design"]) / ran if ran else None,
        "verdicts": ran,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--uprobe-emu", default=shutil.which("uprobe-emu") or "uprobe-emu", metavar="PATH")
    ap.add_argument("--timeout", type=float, default=180.0, metavar="S")
    ap.add_argument("--only", default="", metavar="NAME,...")
    ap.add_argument("--skip", default="", metavar="NAME,...")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    cases = load_corpus(args.corpus)
    only, skip = set(filter(None, args.only.split(","))), set(filter(None, args.skip.split(",")))
    unknown = (only | skip) - {c["name"] for c in cases}
    if unknown:
        print(f"diff_corpus: no case named {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    cases = [c for c in cases if (not only or c["name"] in only) and c["name"] not in skip]
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"diff-corpus-{os.getpid()}"
    workdir.mkdir()
    results = []
    try:
        for case in cases:
            r = run_case([args.uprobe_emu], case, args.timeout, workdir)
            results.append(r)
            print(f"{r['verdict']:<10} {r['name']:<28} {r['seconds']:>7.1f} s  {r['detail']}", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    s = summary(results)
    rate = "n/a" if s["agreement"] is None else f"{s['agreement']:.0%}"
    print(
        f"\n{len(results)} cases: "
        + ", ".join(f"{n} {v}" for v, n in s["counts"].items() if n)
        + f"; agreement {rate} of {s['verdicts']} verdicts"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": s, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
