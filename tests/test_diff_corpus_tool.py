"""tools/diff_corpus.py: the shipped corpus loads, diff's outcomes are sorted into the
verdicts the report counts, and a malformed corpus is one error line."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "diff_corpus.py"


@pytest.fixture(scope="module")
def corpus_tool():
    spec = importlib.util.spec_from_file_location("diff_corpus", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_shipped_corpus_loads_with_unique_names(corpus_tool):
    cases = corpus_tool.load_corpus(corpus_tool.DEFAULT_CORPUS)
    assert len(cases) >= 20
    for c in cases:
        built = c["program"][0] == "{exe}"
        assert built == ("build" in c) and (built or c["program"][0].startswith("/")), c
        assert not built or (corpus_tool.ROOT / c["build"]).is_file(), c


@pytest.mark.parametrize(
    "rc, out, err, case, want",
    [
        (0, "agree: host 6.18 vs model 6.18: exit 0\n", "", {}, "agree"),
        (1, "DIVERGE (host 6.18 vs model 6.18)\nstdout differs at byte 3\n", "", {}, "diverge"),
        (1, "DIVERGE (host)\nstdout differs\n", "", {"by_design": "the model's clock"}, "by-design"),
        (2, "", "uprobe-emu: error: unknown symbol 'x'\n", {}, "error"),
        (3, "", "diff: the host's trace buffer lost 12 events\n", {}, "lost"),
    ],
)
def test_outcomes_are_sorted_into_verdicts(corpus_tool, rc, out, err, case, want):
    assert corpus_tool.verdict_of(rc, out, err, case)[0] == want


def test_a_divergence_reports_diffs_first_line(corpus_tool):
    verdict, detail = corpus_tool.verdict_of(1, "DIVERGE (host)\n\nstdout differs at byte 3\nmore\n", "", {})
    assert (verdict, detail) == ("diverge", "stdout differs at byte 3")


def test_agreement_counts_by_design_over_verdicts(corpus_tool):
    results = [{"verdict": v} for v in ("agree", "by-design", "diverge", "diverge", "error", "timeout")]
    s = corpus_tool.summary(results)
    assert (s["verdicts"], s["agreement"]) == (4, 0.5)


@pytest.mark.parametrize(
    "text",
    [
        "[[case]]\nname = 'a'\n",
        "[[case\n",
        "[[case]]\nname='a'\nprogram=['/x']\nevents=['e']\n[[case]]\nname='a'\nprogram=['/x']\nevents=['e']\n",
    ],
)
def test_a_malformed_corpus_is_one_error_line(tmp_path, text):
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    p = subprocess.run([sys.executable, str(TOOL), str(bad)], capture_output=True, text=True)
    assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr
