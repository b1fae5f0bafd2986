"""Small types of the machine facade (:mod:`emu.machine`): the guest's output the machine
keeps, and the live view of the current task's registers (``machine.regs``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emu.machine import Machine
    from kernel_model.arch.x86.ptrace import PtRegs


class OutputBuffer(bytearray):
    """A guest stream the machine keeps: at most ``limit`` bytes (later bytes are
    counted in ``dropped``, not kept)."""

    def __init__(self, limit: int | None) -> None:
        super().__init__()
        self.limit = limit
        self.dropped = 0

    def keep(self, data: bytes) -> None:
        room = len(data) if self.limit is None else max(0, self.limit - len(self))
        self.extend(data[:room])
        self.dropped += len(data) - min(room, len(data))


class RegsView:
    """``machine.regs``: live attribute access to the current task's registers."""

    _m: Machine

    def __init__(self, machine: Machine) -> None:
        object.__setattr__(self, "_m", machine)

    def __getattr__(self, name: str) -> int:
        value: int = getattr(self._m.read_regs(), name)
        return value

    def __setattr__(self, name: str, value: int) -> None:
        regs = self._m.read_regs()
        setattr(regs, name, value)
        self._m.write_regs(regs)

    def snapshot(self) -> PtRegs:
        return self._m.read_regs()

    def __repr__(self) -> str:
        return repr(self._m.read_regs())
