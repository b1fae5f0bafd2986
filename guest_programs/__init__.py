"""Built-in guests: keystone assembly sources turned into real ELF images.

``build_guest(name)`` returns (ELF bytes, "guest:NAME"); ``GUESTS`` lists them with a
one-line description.  ``write_guest(name, path)`` writes the ELF so objdump and gdb can
read it.
"""

from __future__ import annotations

import functools
import os
import subprocess
from dataclasses import dataclass
from importlib import resources

from kernel_model.errors import InputError


@dataclass(frozen=True)
class Guest:
    name: str
    description: str
    source_file: str


GUESTS = {
    g.name: g
    for g in (
        Guest("hello", "writes 'hello, world' and exits 0", "hello.s"),
        Guest("exit42", "exits with status 42", "exit42.s"),
        Guest("fib", "compute-bound: iterative fibonacci mod 2^64 in a loop, exits with its low byte", "fib.s"),
        Guest("echo", "copies stdin to stdout", "echo.s"),
        Guest("segv", "writes to an unmapped address (SIGSEGV)", "segv.s"),
        Guest("bench_trigger", "the kernel's bench_trigger loops: bench_trigger LOOP N [WARMUP]", "bench_trigger.s"),
        Guest(
            "uprobe_targets",
            "N rounds over functions starting with each uprobe insn class "
            "(nop, nop5, push, call, jmp, jcc, rip-relative, ret)",
            "uprobe_targets.s",
        ),
    )
}


def guest_source(name: str) -> str:
    if name not in GUESTS:
        raise InputError(f"unknown built-in guest {name!r}; try one of: {', '.join(sorted(GUESTS))}")
    return resources.files(__package__).joinpath("asm", GUESTS[name].source_file).read_text()


@functools.lru_cache(maxsize=None)
def _build(name: str) -> bytes:
    from emu.asm import asm_to_elf  # the assembler loads only when a guest is built

    elf, _ = asm_to_elf(guest_source(name))
    return elf


def build_guest(name: str) -> tuple[bytes, str]:
    return _build(name), f"guest:{name}"


def write_guest(name: str, path: str) -> None:
    elf, _ = build_guest(name)
    with open(path, "wb") as f:
        f.write(elf)


# ----------------------------------------------------------------------------- corpus
# C guests whose observable results pin kernel behaviours; built with gcc on demand and
# run both natively (under the host's uprobes) and in the model (``uprobe-emu diff``).


@dataclass(frozen=True)
class CorpusGuest:
    name: str
    description: str
    source: str
    probes: tuple  # probe specs, with {exe} standing for the binary's path
    argv: tuple = ()


CORPUS = {
    g.name: g
    for g in (
        CorpusGuest(
            "optsite",
            "optimized nop sites: site bytes after hits, trampoline placement",
            "corpus_optsite.c",
            ("p {exe}:site_nop5", "p {exe}:site_66nop4", "p {exe}:site_nop4nop", "p {exe}:site_nop10"),
        ),
        CorpusGuest(
            "redzone",
            "a nop5 probe inside a leaf function that keeps data in its red zone",
            "corpus_redzone.c",
            ("p {exe}:leaf_site",),
        ),
        CorpusGuest(
            "deep",
            "80-deep recursion under a return probe: 64 return events",
            "corpus_deep.c",
            ("p {exe}:rec %di", "r {exe}:rec $retval"),
        ),
        CorpusGuest(
            "longjmp",
            "longjmp out of probed frames",
            "corpus_longjmp.c",
            ("p {exe}:outer %di", "r {exe}:outer $retval", "p {exe}:inner %di", "r {exe}:inner $retval"),
        ),
        CorpusGuest(
            "forkopt",
            "fork after optimization: the child's inherited call into an uncopied trampoline",
            "corpus_forkopt.c",
            ("p {exe}:site_nop5",),
        ),
        CorpusGuest(
            "errno_uprobe",
            "syscall 336 from ordinary code: an errno, no signal",
            "corpus_errnos.c",
            ("p {exe}:main",),
            ("uprobe",),
        ),
        CorpusGuest(
            "errno_uretprobe",
            "syscall 335 from ordinary code: SIGILL",
            "corpus_errnos.c",
            ("p {exe}:main",),
            ("uretprobe",),
        ),
    )
}


def build_corpus_guest(name: str, out_dir: str, gcc: str = "gcc") -> str:
    """Compile a corpus guest (static, -O1, frame pointers) into ``out_dir``."""
    if name not in CORPUS:
        raise InputError(f"unknown corpus guest {name!r}; try one of: {', '.join(sorted(CORPUS))}")
    g = CORPUS[name]
    src_dir = resources.files(__package__).joinpath("c")
    exe = os.path.join(out_dir, name)
    cmd = [gcc, "-O1", "-static", "-fno-omit-frame-pointer", f"-I{src_dir}", "-o", exe, str(src_dir.joinpath(g.source))]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise InputError(f"gcc failed for {name}: {res.stderr.strip().splitlines()[-1:]}")
    return exe
