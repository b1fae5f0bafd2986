"""Built-in guests: keystone assembly sources turned into real ELF images.

``build_guest(name)`` returns (ELF bytes, "guest:NAME"); ``GUESTS`` lists them with a
one-line description.  ``write_guest(name, path)`` writes the ELF so objdump and gdb can
read it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

from emu.errors import InputError


@dataclass(frozen=True)
class Guest:
    name: str
    description: str
    source_file: str


GUESTS = {g.name: g for g in (
    Guest("hello", "writes 'hello, world' and exits 0", "hello.s"),
    Guest("exit42", "exits with status 42", "exit42.s"),
    Guest("fib", "compute-bound: iterative fibonacci mod 2^64 in a loop, exits 0", "fib.s"),
    Guest("echo", "copies stdin to stdout", "echo.s"),
    Guest("segv", "writes to an unmapped address (SIGSEGV)", "segv.s"),
)}


def guest_source(name: str) -> str:
    if name not in GUESTS:
        raise InputError(f"unknown built-in guest {name!r}; try one of: {', '.join(sorted(GUESTS))}")
    return resources.files(__package__).joinpath("asm", GUESTS[name].source_file).read_text()


@functools.lru_cache(maxsize=None)
def _build(name: str) -> bytes:
    from emu.asm import asm_to_elf
    elf, _ = asm_to_elf(guest_source(name))
    return elf


def build_guest(name: str) -> tuple[bytes, str]:
    return _build(name), f"guest:{name}"


def write_guest(name: str, path: str) -> None:
    elf, _ = build_guest(name)
    with open(path, "wb") as f:
        f.write(elf)
