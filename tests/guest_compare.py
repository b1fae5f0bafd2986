"""Run one command natively and in the model under the same conditions, for tests that
compare the two byte for byte.

Both runs get: the working directory ``cwd`` (granted to the guest), the environment
``uprobe-emu`` gives a guest (``kernel_model.fs.binfmt_elf.DEFAULT_ENV``), ``stdin`` bytes on a pipe,
stdout and stderr as pipes, the model's descriptor limit (RLIMIT_NOFILE 1024/4096, what
``prlimit64`` answers in the model) and no core dumps (the model writes none, so
``WCOREDUMP`` is clear).  The result is ``(status, stdout, stderr)``
with status ``"exit N"`` or ``"signal N"``.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from emu import Machine
from kernel_model.fs.binfmt_elf import DEFAULT_ENV

BUSYBOX = "/bin/busybox"
BASH = "/bin/bash-static"
MODEL_NOFILE = (1024, 4096)


def require(path: str) -> str:
    """The Debian busybox-static / bash-static binaries: ``.ci/run`` installs them, so a
    missing one is a broken setup, not a reason to skip."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"{path} is missing: install the Debian packages busybox-static and bash-static (.ci/run does)")
    return path


def _model_limits() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, MODEL_NOFILE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the model dumps no core


def native(argv: list[str], cwd: Path, stdin: bytes = b"") -> tuple[str, bytes, bytes]:
    p = subprocess.run(
        argv,
        cwd=cwd,
        input=stdin,
        capture_output=True,
        timeout=60,
        env=dict(e.split("=", 1) for e in DEFAULT_ENV),
        preexec_fn=_model_limits,
    )
    status = f"exit {p.returncode}" if p.returncode >= 0 else f"signal {-p.returncode}"
    return status, p.stdout, p.stderr


@contextmanager
def _in_dir(path: Path):
    """The guest starts in the directory the machine is made in (as under strace)."""
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def model_machine(argv: list[str], cwd: Path, stdin: bytes = b"") -> Machine:
    with _in_dir(cwd):
        return Machine.from_elf(argv[0], argv=argv, grant_dir=str(cwd), stdin=stdin)


def model(argv: list[str], cwd: Path, stdin: bytes = b"") -> tuple[str, bytes, bytes]:
    m = model_machine(argv, cwd, stdin)
    r = m.run(timeout=60)
    if r.reason == "exit":
        status = f"exit {r.exit_code}"
    elif r.reason == "signal":
        status = f"signal {r.signal}"
    else:
        status = r.describe()
    return status, r.stdout, r.stderr


def fresh_dir(path: Path, files: dict[str, bytes]) -> Path:
    """``path`` emptied and filled with ``files`` (name -> bytes; a name ending in / is
    a directory)."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    for name, data in files.items():
        target = path / name
        if name.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return path


def show(label: str, got: tuple, want: tuple) -> str:
    return f"{label}:\n  native {want!r}\n  model  {got!r}"
