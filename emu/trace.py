"""``from emu.trace import Tracer`` keeps working: the tracer lives in
:mod:`emu.frontends.trace`."""

from emu.frontends.trace import FORMATS, Tracer

__all__ = ["FORMATS", "Tracer"]
