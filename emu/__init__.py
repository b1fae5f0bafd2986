"""uprobe-emu: an x86_64 machine on Unicorn with the Linux uprobes subsystem modeled.

    from emu import Machine
    m = Machine.from_guest("hello")
    result = m.run()
"""

from .errors import (ElfError, EmuError, GuestSignalError, InputError, ProbeSpecError,
                     RegistrationError, SymbolError, UnsupportedError)
from .machine import Machine
from .signals import RunResult

__all__ = ["Machine", "RunResult", "EmuError", "InputError", "ElfError", "SymbolError",
           "ProbeSpecError", "RegistrationError", "GuestSignalError", "UnsupportedError"]
__version__ = "0.1.0"
