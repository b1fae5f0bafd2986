"""Building this repository's BPF C programs (``guest_programs/bpf/*.bpf.c``) with clang,
as the kernel's selftests build theirs: ``-target bpf`` at cpu v3 (32-bit jumps and ALU,
atomics that fetch), libbpf's ``bpf_tracing.h`` told the architecture, and the multiarch
include directory for ``asm/types.h``.  Objects are cached by the source's hash, so a
bench or a test builds each once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from kernel_model.errors import EmuError

CLANG_FLAGS = ("-O2", "-g", "-target", "bpf", "-mcpu=v3", "-D__TARGET_ARCH_x86")


class BpfBuildError(EmuError):
    """clang is missing or refused a source."""


def source_path(name: str) -> Path:
    """The path of ``guest_programs/bpf/NAME`` in the installed package."""
    path = Path(str(resources.files("guest_programs") / "bpf" / name))
    if not path.is_file():
        raise BpfBuildError(f"no BPF source {name!r} in guest_programs/bpf")
    return path


def _multiarch() -> str:
    gcc = shutil.which("gcc")
    if gcc is not None:
        out = subprocess.run([gcc, "-print-multiarch"], capture_output=True, text=True).stdout.strip()
        if out:
            return out
    return "x86_64-linux-gnu"


def clang_command(source: Path | str, out: Path | str, *flags: str) -> list[str]:
    clang = shutil.which("clang")
    if clang is None:
        raise BpfBuildError("building a BPF program needs clang (Debian: apt-get install clang libbpf-dev)")
    return [clang, *CLANG_FLAGS, f"-I/usr/include/{_multiarch()}", *flags, "-c", str(source), "-o", str(out)]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "uprobe-emu" / "bpf"


def build(source: Path | str, out_dir: Path | str | None = None, *flags: str) -> Path:
    """The object of ``source``: built with clang into ``out_dir`` (default: the cache
    directory) unless an object of the same source and flags is there already."""
    source = Path(source)
    try:
        text = source.read_bytes()
    except OSError as e:
        raise BpfBuildError(f"cannot read {str(source)!r}: {e.strerror}") from None
    key = hashlib.sha256(text + "\0".join((*CLANG_FLAGS, *flags)).encode()).hexdigest()[:16]
    directory = Path(out_dir) if out_dir is not None else cache_dir()
    out = directory / f"{source.name.removesuffix('.c')}-{key}.o"
    if out.is_file():
        return out
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BpfBuildError(f"cannot create {str(directory)!r}: {e.strerror}") from None
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    res = subprocess.run(clang_command(source, tmp, *flags), capture_output=True, text=True)
    if res.returncode != 0:
        tmp.unlink(missing_ok=True)
        first = next((ln for ln in res.stderr.splitlines() if "error" in ln), res.stderr.strip()[:300])
        raise BpfBuildError(f"clang could not build {source.name}: {first}")
    os.replace(tmp, out)
    return out
