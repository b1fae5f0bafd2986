"""The frame-pointer half of unwinding (where a file has no CFI) and the backtrace verb.

CFI unwinding is :mod:`emu.debug.unwind`; this is what it falls back to: ``push rbp;
mov rbp, rsp`` prologues, with a prologue check for the innermost frame (frameless
functions are assumed not to have pushed anything), and the uretprobe's pending return
instances to see through hijacked return addresses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from emu.debug.disasm import symbol_of
from emu.debug.stops import Frame
from emu.inspect import pending_returns, trampoline_vaddr
from kernel_model.mm.mm_types import PROT_EXEC, GuestFault

if TYPE_CHECKING:
    from emu.debug.disasm import Insn
    from emu.debug.unwind import Unwinder
    from emu.machine import Machine


class FrameWalker:
    """The :class:`~emu.debug.stepper.Stepper`'s frames (``bt``, ``finish``)."""

    if TYPE_CHECKING:
        # what it uses of the Stepper (emu/debug/stepper.py) and its other parts: declared
        # for the type checker only, so every lookup still finds the one definition
        machine: Machine
        unwinder: Unwinder
        past_main: bool

        def require_alive(self, message: str = ...) -> None: ...
        def original_insn(self, addr: int) -> Insn: ...

    def backtrace(self, max_frames: int = 64) -> list[Frame]:
        """Frames, innermost first, unwound with each file's ``.eh_frame`` CFI (the
        frame-pointer heuristics where a file has none); a saved return address that is
        the uretprobe trampoline shows the return instance's original one.  Like gdb's,
        the list ends at ``main`` unless :attr:`past_main`, and at the entry function
        (:mod:`emu.debug.unwind`)."""
        self.require_alive("No stack.")
        return self.unwinder.frames(max_frames, self.past_main, Frame)

    def _pending_returns(self):
        """(the uretprobe trampoline's address, the task's pending return instances,
        newest first), or (None, []) before the task met a uretprobe."""
        tramp = trampoline_vaddr(self.machine.process)
        pending = pending_returns(self.machine.task)
        if tramp is None or pending is None:
            return None, []
        return tramp, pending

    def _frame0_slot(self, regs) -> tuple[int | None, int]:
        """Where frame 0's return address is saved, and the caller's rbp."""
        rip, rsp, rbp = regs.rip, regs.rsp, regs.rbp
        try:
            insn = self.original_insn(rip)
        except GuestFault:
            return None, 0
        if insn.mnemonic in ("ret", "retq"):
            return rsp, rbp
        hit = symbol_of(self.machine, rip)
        pro = None
        if hit is not None:
            try:
                pro = self._prologue(rip - hit[1])
            except GuestFault:
                pro = None
        if pro is not None:
            push_at, mov_at, _ = pro
            if rip <= push_at:
                return rsp, rbp
            if rip <= mov_at:  # rbp pushed, not yet the frame pointer
                return rsp + 8, rbp
            return self._rbp_slot(rbp)
        # No prologue at the symbol: a frameless function, or a label inside a function
        # (every label of an assembly guest is a symbol).  Trust [rsp] if it looks like
        # a return address, else the frame pointer.
        try:
            if self._is_return_address(self.machine.mem.read_u64(rsp)):
                return rsp, rbp
        except GuestFault:
            pass
        return self._rbp_slot(rbp)

    def _is_return_address(self, addr: int) -> bool:
        """``addr`` follows a call instruction (or is the uretprobe trampoline)."""
        tramp, _ = self._pending_returns()
        if tramp is not None and addr == tramp:
            return True
        vma = self.machine.mem.find_vma(addr)
        if vma is None or not vma.prot & PROT_EXEC:
            return False
        for k in (5, 2, 3, 6, 7, 4):
            try:
                insn = self.original_insn(addr - k)
            except GuestFault:
                continue
            if insn.mnemonic == "call" and insn.size == k:
                return True
        return False

    def _rbp_slot(self, rbp: int) -> tuple[int | None, int]:
        try:
            return rbp + 8, self.machine.mem.read_u64(rbp)
        except GuestFault:
            return None, 0

    def _prologue(self, start: int):
        """``(push_at, mov_at, body)`` for ``[endbr64;] push rbp; mov rbp, rsp``."""
        insn = self.original_insn(start)
        if insn.mnemonic == "endbr64":
            insn = self.original_insn(insn.next)
        if (insn.mnemonic, insn.op_str) != ("push", "rbp"):
            return None
        mov = self.original_insn(insn.next)
        if (mov.mnemonic, mov.op_str) != ("mov", "rbp, rsp"):
            return None
        return insn.address, mov.address, mov.next
