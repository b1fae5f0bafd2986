"""The stepper's shell, split as CPython splits bdb and pdb:

- the stepping engine (:class:`Stepper`, its breakpoints, stop events and frames; no UI)
  is the debugger core, :mod:`emu.debug` (the gdb stub drives it too);
- :mod:`~emu.frontends.stepper.shell`: the gdb-like command shell (:class:`StepperShell`)
  and the ``uprobe-emu step`` command (:func:`add_cli`, :func:`cmd_step`).

The CLI imports this package for its ``add_cli``.
"""

from emu.debug.format import INFO_REGISTERS, format_register, natural, register_line
from emu.debug.stepper import Breakpoint, Frame, Stepper, StepperError, StopEvent, Watchpoint
from emu.frontends.stepper.shell import HELP, StepperShell, add_cli, cmd_step

__all__ = ["Stepper", "StepperShell", "StopEvent", "Breakpoint", "Watchpoint", "Frame", "StepperError",
           "format_register", "register_line", "natural", "INFO_REGISTERS", "HELP",
           "add_cli", "cmd_step"]
