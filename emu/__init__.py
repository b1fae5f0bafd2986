"""uprobe-emu: an x86_64 machine on Unicorn with the Linux uprobes subsystem modeled.

from emu import Machine
m = Machine.from_guest("hello")
result = m.run()
"""

from kernel_model.errors import (
    ElfError,
    EmuError,
    GuestSignalError,
    InputError,
    ProbeSpecError,
    RegistrationError,
    SymbolError,
    UnsupportedError,
)
from kernel_model.kernel.signals import RunResult

__all__ = [
    "Machine",
    "RunResult",
    "EmuError",
    "InputError",
    "ElfError",
    "SymbolError",
    "ProbeSpecError",
    "RegistrationError",
    "GuestSignalError",
    "UnsupportedError",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    """``emu.Machine`` is imported on first use (PEP 562): the kernel model imports
    ``emu``'s leaf modules without loading the machine and Unicorn."""
    if name == "Machine":
        from emu.machine import Machine

        return Machine
    raise AttributeError(f"module 'emu' has no attribute {name!r}")
