"""The debugger core (the bdb half), shared by the stepper shell and the gdb stub.

:mod:`.stepper` is the stepping engine (:class:`~emu.debug.stepper.Stepper`: stops,
breakpoints, watchpoints, frames; no UI), :mod:`.reverse` steps it backwards over the
replay's checkpoints, :mod:`.unwind` unwinds with ``.eh_frame`` CFI, :mod:`.disasm`
decodes guest code, :mod:`.format` is gdb's register names and ``info registers`` lines.
"""

# Instructions between the reverse debugger's checkpoints while the stepper or the gdb
# stub records (their --checkpoint-interval); here, beside no code, so a command line can
# show it without loading the debugger.
DEFAULT_STEPPER_INTERVAL = 200_000
