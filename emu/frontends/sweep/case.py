"""A sweep's unit of work: a small picklable :class:`Case` and the one function that
runs it, :func:`run_case`, wherever it runs (this process, a pool worker, a Ray actor).

A case names the program by path (or ``guest:NAME``) and by the SHA-256 of its bytes -
a worker whose file differs refuses it rather than sweep another binary -, its
arguments and stdin, the kernel profile with any switch overrides, the seed, and the
sites to probe (file, offset, kind).  Its id is a hash of all of that, so a resumed
sweep recognises the cases it already ran.

:class:`CaseRunner` keeps parsed program images between cases: a worker loads each
program once (the ELF parse costs more than a short run).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from emu.frontends.sweep.compare import RunDigest, SyscallRecorder, digest
from emu.machine import Machine
from emu.probes.symbols import load_elf_file
from guest_programs import build_guest
from kernel_model.errors import InputError, RegistrationError


@dataclass(frozen=True)
class Program:
    path: str  # host path, or guest:NAME
    argv: tuple
    stdin: bytes = b""
    sha256: str = ""
    sysroot: str = "/"
    seed: int = 0
    max_insns: int | None = None
    cpus: int = 1  # the machine's CPUs (Machine(cpus=N))
    timeout: float | None = 120.0

    @staticmethod
    def of(path: str, argv, stdin: bytes = b"", **kw) -> "Program":
        return Program(path, tuple(argv), stdin, program_sha256(path), **kw)


def program_bytes(path: str) -> bytes:
    if path.startswith("guest:"):
        return build_guest(path[len("guest:") :])[0]
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None


def program_sha256(path: str) -> str:
    return hashlib.sha256(program_bytes(path)).hexdigest()


@dataclass(frozen=True)
class Case:
    program: Program
    kernel: str
    overrides: tuple = ()  # ((switch, value), ...): KernelProfile.get(**overrides)
    sites: tuple = ()  # ((path, offset, kind), ...); none: the reference run

    @property
    def id(self) -> str:
        p = self.program
        text = repr(
            (
                p.path,
                p.sha256,
                p.argv,
                hashlib.sha256(p.stdin).hexdigest(),
                p.sysroot,
                p.seed,
                p.max_insns,
                self.kernel,
                self.overrides,
                self.sites,
            )
            + ((p.cpus,) if p.cpus != 1 else ())
        )  # one CPU: the ids sweeps always had
        return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass
class CaseResult:
    case_id: str
    digest: RunDigest
    refused: dict = field(default_factory=dict)  # "path:0xoff" -> reason
    seconds: float = 0.0
    hit: tuple = ()  # indices of the case's sites that were hit


def nop_handler(ctx):
    """A consumer that changes nothing: what the sweep checks is that probing alone
    (the int3, the emulation or the out-of-line step, the return hijack) changes
    nothing."""
    return None


class CaseRunner:
    """Runs cases; keeps each program's parsed image (checked against the case's
    SHA-256 once)."""

    def __init__(self):
        self.images: dict = {}
        self.executed = 0

    def image(self, program: Program):
        key = (program.path, program.sha256)
        if key not in self.images:
            if program.sha256 and program_sha256(program.path) != program.sha256:
                raise InputError(f"{program.path}: not the binary the sweep was planned on (SHA-256 differs)")
            self.images[key] = None if program.path.startswith("guest:") else load_elf_file(program.path)
        return self.images[key]

    def machine(self, case: Case) -> Machine:
        p = case.program
        kw = dict(
            kernel=case.kernel, stdin=p.stdin, sysroot=p.sysroot, seed=p.seed, cpus=p.cpus, **dict(case.overrides)
        )
        image = self.image(p)
        if image is None:
            return Machine.from_guest(p.path[len("guest:") :], argv=list(p.argv), **kw)
        return Machine.from_elf(p.path, argv=list(p.argv), image=image, **kw)

    def run(self, case: Case) -> CaseResult:
        return self.execute(case)[1]

    def execute(self, case: Case) -> tuple[Machine, CaseResult]:
        """Run ``case``; the finished machine too (the sweep's reference run reads the
        files it mapped)."""
        t0 = time.perf_counter()
        self.executed += 1
        m = self.machine(case)
        consumers: list = []
        refused: dict[str, str] = {}
        for path, offset, kind in case.sites:
            try:
                handlers: dict[str, Any] = {"ret_handler": nop_handler} if kind == "r" else {"handler": nop_handler}
                consumers.append(m.uprobes.register((path, offset), **handlers))
            except RegistrationError as e:
                consumers.append(None)
                refused[f"{path}:{offset:#x}"] = str(e)
        rec = SyscallRecorder(m)
        result = m.run(max_insns=case.program.max_insns, timeout=case.program.timeout)
        hit = tuple(i for i, c in enumerate(consumers) if c is not None and c.hits)
        hits = sum(c.hits for c in consumers if c is not None)
        return m, CaseResult(case.id, digest(m, result, rec, hits), refused, time.perf_counter() - t0, hit)


def run_case(case: Case, runner: CaseRunner | None = None) -> CaseResult:
    """The one case function: every runner calls it."""
    return (runner or CaseRunner()).run(case)


def run_cases(cases: list) -> list:
    """A chunk of cases on one (fresh) runner: a pool worker's unit."""
    runner = CaseRunner()
    return [runner.run(c) for c in cases]
