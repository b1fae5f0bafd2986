"""The stepper's shell, split as CPython splits bdb and pdb:

- the stepping engine (:class:`Stepper`, its breakpoints, stop events and frames; no UI)
  is the debugger core, :mod:`emu.debug` (the gdb stub drives it too);
- :mod:`~emu.frontends.stepper.shell`: the gdb-like command shell (:class:`StepperShell`)
  and the ``uprobe-emu step`` command (:func:`add_cli`, :func:`cmd_step`).

The CLI imports this package for its ``add_cli``.
"""

from typing import TYPE_CHECKING

from emu.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from emu.debug.format import INFO_REGISTERS, format_register, natural, register_line
    from emu.debug.stepper import Breakpoint, Frame, Stepper, StepperError, StopEvent, Watchpoint
    from emu.frontends.stepper.args import add_cli
    from emu.frontends.stepper.shell import HELP, StepperShell, cmd_step

__all__ = [
    "Stepper",
    "StepperShell",
    "StopEvent",
    "Breakpoint",
    "Watchpoint",
    "Frame",
    "StepperError",
    "format_register",
    "register_line",
    "natural",
    "INFO_REGISTERS",
    "HELP",
    "add_cli",
    "cmd_step",
]

# Imported when first asked for (PEP 562): the command line imports this package's
# argument definitions without loading the command itself.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "INFO_REGISTERS": "emu.debug.format",
        "format_register": "emu.debug.format",
        "natural": "emu.debug.format",
        "register_line": "emu.debug.format",
        "Breakpoint": "emu.debug.stepper",
        "Frame": "emu.debug.stepper",
        "Stepper": "emu.debug.stepper",
        "StepperError": "emu.debug.stepper",
        "StopEvent": "emu.debug.stepper",
        "Watchpoint": "emu.debug.stepper",
        "HELP": ".shell",
        "StepperShell": ".shell",
        "add_cli": ".args",
        "cmd_step": ".shell",
    },
)
