"""The documentation site builds with ``mkdocs build --strict`` (no warning: a broken
link, a missing page, an API object mkdocstrings cannot find all fail), and the built
site holds the generated reference pages.

Needs the ``docs`` extra (``pip install '.[docs]'``), which CI installs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return out, done


def test_the_site_builds_strictly(site):
    _, done = site
    assert done.returncode == 0, f"mkdocs build --strict failed (pip install '.[docs]'):\n{done.stderr}"


def test_the_build_warns_of_nothing(site):
    _, done = site
    warnings = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert warnings == [], warnings


@pytest.mark.parametrize(
    "page, text",
    [
        ("reference/cli/index.html", "uprobe-emu gdbserver"),
        ("reference/profiles/index.html", "uretprobe_trampoline"),
        ("reference/syscalls/index.html", "uretprobe"),
        ("reference/api/index.html", "emu.machine.Machine"),
        ("reference/api/index.html", "RegistrationError"),
        ("reference/api/index.html", "UprobeHit"),
        ("reference/api/index.html", "call_snapshots"),
        ("architecture/index.html", "One probe hit, engine to handler and back"),
    ],
)
def test_the_site_has_the_page(site, page, text):
    out, done = site
    assert done.returncode == 0, done.stderr
    html = (out / page).read_text()
    assert text in html, f"{page} does not mention {text!r}"
