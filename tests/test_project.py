"""Packaging and CI contract: README's commands, .ci/run, the console script."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"^    (pip install .*)$", text, re.M)[:2]


def test_readme_starts_with_two_commands_install_run_and_test():
    main, tests = readme_commands()
    assert main.startswith("pip install . && uprobe-emu ")
    assert tests == "pip install '.[test,ray,docs]' && python -m pytest -q"


def test_ci_runs_exactly_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    _, tests = readme_commands()
    install, test_cmd = tests.split(" && ")
    assert "python -m " + install in ci or f"python -m pip install --quiet {install[len('pip install ') :]}" in ci
    assert ci[-1] == test_cmd


def test_console_script_is_installed():
    assert shutil.which("uprobe-emu"), "the uprobe-emu console script is not on PATH (pip install .)"


def test_guest_sources_ship_as_package_data():
    from importlib import resources

    import guest_programs

    for g in guest_programs.GUESTS.values():
        assert resources.files("guest_programs").joinpath("asm", g.source_file).is_file()
