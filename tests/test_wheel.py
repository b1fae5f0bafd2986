"""The project as a package: a wheel built from the checkout (``python -m build``) carries the code, the
guests' sources, the type markers and the licence, installs in a fresh virtual
environment and runs a guest there - the installed copy, not the checkout."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import emu

ROOT = Path(__file__).resolve().parent.parent
DEPENDENCIES = ("unicorn", "capstone", "keystone", "elftools", "rich")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    p = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    (whl,) = out.glob("uprobe_emu-*.whl")
    return whl


def test_the_wheel_carries_code_guests_type_markers_and_licence(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    want = {
        "emu/console.py",
        "kernel_model/kernel/events/uprobes_fast.py",
        "guest_programs/asm/hello.s",
        "emu/py.typed",
        "kernel_model/py.typed",
        f"uprobe_emu-{emu.__version__}.dist-info/licenses/LICENSE",
    }
    assert want <= names, sorted(want - names)
    assert not any(n.startswith("tests/") for n in names), "the tests are not part of the package"


def test_the_wheel_installs_in_a_fresh_venv_and_runs_a_guest(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    p = subprocess.run(
        [str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    # then the dependencies, from this environment (no download): their directories go
    # after the fresh venv's own site-packages, which holds the wheel's copy of the project
    # (added after the install, so pip does not take this environment's copy for it)
    dirs = sorted({os.path.dirname(os.path.dirname(importlib.util.find_spec(d).origin)) for d in DEPENDENCIES})
    Path(site, "uprobe_emu_test_deps.pth").write_text("\n".join(dirs) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    where = subprocess.run(
        [str(py), "-c", "import emu, kernel_model; print(emu.__file__, kernel_model.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=env,
    ).stdout.split()
    assert all(w.startswith(site) for w in where), where
    exe = venv / "bin" / "uprobe-emu"
    version = subprocess.run(
        [str(exe), "--version"], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
    )
    assert version.stdout == f"uprobe-emu {emu.__version__}\n", version
    run = subprocess.run([str(exe), "run", "guest:hello"], capture_output=True, timeout=120, cwd=tmp_path, env=env)
    assert (run.returncode, run.stdout) == (0, b"hello, world\n"), (run.returncode, run.stdout, run.stderr[-2000:])
