"""``from emu.stepper import Stepper`` keeps working: the stepper lives in
:mod:`emu.frontends.stepper`."""

from emu.frontends.stepper import Stepper, StepperError, StepperShell

__all__ = ["Stepper", "StepperError", "StepperShell"]
