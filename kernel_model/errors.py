"""The package's exception hierarchy.

Everything a user can get wrong (a path, an ELF, a symbol, a probe spec) raises a
subclass of :class:`EmuError`; the CLI turns any of them into one readable line and
exit code 2.  Guest faults are *not* exceptions: they become signals in the run result,
as the kernel would deliver them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernel_model.kernel.signals import RunResult


class EmuError(Exception):
    """Root of every error this package raises on purpose."""


class InputError(EmuError):
    """Bad input from the user: a missing file, bad arguments, bad assembly."""


class ElfError(InputError):
    """A file that cannot be loaded: not ELF, wrong architecture, dynamic, truncated."""


class SymbolError(InputError):
    """An unknown symbol or an address/offset that maps to nothing."""


class ProbeSpecError(InputError):
    """A probe spec that does not parse.  ``position`` is the 0-based column."""

    def __init__(self, message: str, spec: str = "", position: int | None = None):
        self.spec = spec
        self.position = position
        where = f" (at column {position + 1} of {spec!r})" if position is not None and spec else ""
        super().__init__(f"{message}{where}")


class RegistrationError(EmuError):
    """uprobe registration failed the way the kernel fails it.

    ``errno_name`` is the kernel's errno name (``EINVAL``, ``ENOTSUPP``, ``EEXIST``,
    ``ENOEXEC``, ``EIO``, ``ENOENT``) so tests can assert on it.
    """

    def __init__(self, errno_name: str, message: str):
        self.errno_name = errno_name
        super().__init__(f"{errno_name}: {message}")


class GuestSignalError(EmuError):
    """Raised only when a caller asked ``run(raise_on_signal=True)``."""

    def __init__(self, result: RunResult) -> None:
        self.result = result
        super().__init__(result.describe())


class UnsupportedError(EmuError):
    """A guest asked for something the machine does not model."""


def printable(text: str) -> str:
    """``text`` made safe for one terminal line: every character that is not printable
    (C0/C1 controls, DEL, newlines, tabs, unassigned or format code points; also a
    surrogate left by ``surrogateescape`` from undecodable bytes) becomes ``\\xNN``,
    ``\\uNNNN`` or ``\\UNNNNNNNN``, and a backslash stays as is.

    Error messages quote paths, symbol names, ELF strings (PT_INTERP, DT_NEEDED, note
    names) and probe specs; any of them can carry terminal escape sequences, so every
    error printer goes through this one function.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape_char(c) for c in text)


def _escape_char(c: str) -> str:
    n = ord(c)
    if 0xDC80 <= n <= 0xDCFF:  # an undecodable byte (surrogateescape)
        return f"\\x{n - 0xDC00:02x}"
    if n < 0x100:
        return f"\\x{n:02x}"
    return f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"
