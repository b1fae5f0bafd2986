"""Start-up: a command imports what it needs when it needs it.

``uprobe-emu --help`` builds the parser of every command, and must not load the machine,
Unicorn or any command's code to do it; a run without probes must not load the
disassembler.  Each check runs a fresh interpreter and reads ``sys.modules``."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

# What only a command's work needs: none of it is loaded to parse a command line.
HEAVY = (
    "unicorn",
    "capstone",
    "keystone",
    "elftools",
    "rich",
    "matplotlib",
    "emu.machine",
    "emu.engine",
    "kernel_model.kernel.kernel",
    "emu.frontends.launch",
    "emu.frontends.bench.cli",
    "emu.frontends.trace.cli",
    "emu.frontends.stepper.shell",
    "emu.frontends.gdbstub.cli",
    "emu.frontends.sweep.cli",
    "emu.frontends.hostdiff",
    "emu.debug.stepper",
)
FRONTEND_PACKAGES = (
    "emu.frontends.bench",
    "emu.frontends.gdbstub",
    "emu.frontends.stepper",
    "emu.frontends.sweep",
    "emu.frontends.trace",
)


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    return set(json.loads(out.stdout.splitlines()[-1]))


def heavy_in(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_building_the_whole_parser_loads_no_command():
    loaded = loaded_after("from emu.frontends.cli import build_parser\nbuild_parser()")
    assert heavy_in(loaded) == [], f"building the parser loaded {heavy_in(loaded)}"


def test_help_loads_no_command():
    loaded = loaded_after(
        "import sys\nfrom emu.frontends.cli import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])"
    )
    assert heavy_in(loaded) == [], f"--help loaded {heavy_in(loaded)}"


@pytest.mark.parametrize("command", ["run", "trace", "step", "gdbserver", "diff", "sweep", "bench"])
def test_a_usage_error_loads_no_command(command):
    loaded = loaded_after(
        "import contextlib, io\nfrom emu.frontends.cli import main\n"
        "with contextlib.redirect_stderr(io.StringIO()):\n"
        f"    code = main([{command!r}, '--no-such-option'])\n"
        "assert code == 2, code"
    )
    assert heavy_in(loaded) == [], f"{command} --no-such-option loaded {heavy_in(loaded)}"


def test_a_run_without_probes_loads_no_disassembler():
    loaded = loaded_after("from emu.frontends.cli import main\nassert main(['run', '/bin/true']) == 0")
    assert "emu.machine" in loaded and "unicorn" in loaded, "the run did not load the machine"
    assert "capstone" not in loaded, "a run without probes loaded Capstone"


def test_a_probe_loads_the_disassembler_when_it_is_analysed():
    loaded = loaded_after(
        "from emu.frontends.cli import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stderr(io.StringIO()):\n"
        "    assert main(['run', '-e', 'uprobe:libc:malloc', '/bin/true']) == 0"
    )
    assert "capstone" in loaded, "analysing a probed instruction did not load Capstone"


@pytest.mark.parametrize("package", FRONTEND_PACKAGES)
def test_a_front_end_package_loads_nothing_until_a_name_is_asked_for(package):
    loaded = loaded_after(f"import {package}")
    assert heavy_in(loaded) == [], f"import {package} loaded {heavy_in(loaded)}"


@pytest.mark.parametrize("package", FRONTEND_PACKAGES + ("emu.inspect",))
def test_every_exported_name_resolves(package):
    mod = importlib.import_module(package)
    missing = [name for name in mod.__all__ if not hasattr(mod, name)]
    assert missing == [], f"{package}.__all__ names {missing}, which it cannot give"


@pytest.mark.parametrize("package", FRONTEND_PACKAGES)
def test_an_unknown_name_is_an_attribute_error_naming_it(package):
    mod = importlib.import_module(package)
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'no_such_name'"):
        mod.no_such_name  # noqa: B018


@pytest.mark.parametrize("package", FRONTEND_PACKAGES)
def test_dir_lists_the_exported_names(package):
    mod = importlib.import_module(package)
    assert set(mod.__all__) <= set(dir(mod)), f"dir({package}) lacks {set(mod.__all__) - set(dir(mod))}"


def test_the_trace_formats_the_parser_offers_are_the_writers():
    from emu.frontends.trace.args import FORMAT_NAMES
    from emu.frontends.trace.formats import FORMATS

    assert FORMAT_NAMES == FORMATS, f"--format offers {FORMAT_NAMES}, the writers are {FORMATS}"


def test_the_bench_scenarios_the_parser_lists_are_the_scenarios():
    from emu.frontends.bench.args import SCENARIO_NAMES
    from emu.frontends.bench.scenarios import SCENARIOS

    assert SCENARIO_NAMES == tuple(SCENARIOS), f"--help lists {SCENARIO_NAMES}, the bench has {tuple(SCENARIOS)}"


def test_the_stepper_interval_the_parser_shows_is_the_debuggers():
    import inspect

    from emu.debug import DEFAULT_STEPPER_INTERVAL
    from emu.debug.reverse import ReverseStepper
    from emu.frontends.cli import build_parser

    default = inspect.signature(ReverseStepper.__init__).parameters["interval"].default
    step = build_parser().parse_args(["step", "guest:hello"])
    assert step.checkpoint_interval == default == DEFAULT_STEPPER_INTERVAL
