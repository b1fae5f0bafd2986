"""Reverse stepping over a :class:`~emu.debug.stepper.Stepper`: gdb's
``reverse-stepi``, ``reverse-nexti``/``reverse-step`` and ``reverse-continue``, done the
way the machine allows it - it is deterministic, so going back is restoring the nearest
earlier checkpoint and replaying forward to the instruction wanted
(:class:`emu.replay.checkpoint.Recorder`).

The stops are the forward stepper's: the kernel model's transitional states (the int3
trap, the out-of-line step in ``[uprobes]``, a trampoline, between the two instructions
of an optimized nop10 site) are never a stop going backwards either, so ``reverse-stepi``
over a probed instruction lands on it, and ``stepi`` from there runs its handlers once,
as the first time.

``reverse-continue`` runs backwards to the latest earlier instant at which execution was
about to execute an enabled breakpoint's instruction; the search replays the history one
checkpoint interval at a time, newest first, with a code hook on each breakpoint address
(only during the search).  With no such instant, execution goes back to the start of the
recorded history, and the stop says so (gdb's "No more reverse-execution history.").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from emu.debug import DEFAULT_STEPPER_INTERVAL
from emu.debug.stepper import Stepper, StepperError, StopEvent
from emu.replay.checkpoint import DEFAULT_MAX_CHECKPOINTS, CheckpointError, Recorder
from kernel_model.mm.mm_types import GuestFault

if TYPE_CHECKING:
    from emu.engine.cpu import HookHandle

# Stepping back replays up to one interval per stop: keep it short for a debugger.
HISTORY_START = "history-start"  # StopEvent.reason at the start of the recording
_CALL_SIZES = (5, 2, 3, 6, 7, 4)


class ReverseStepper:
    """The reverse verbs of one stepper; :meth:`of` makes (once) the recorder that
    records the machine from now on."""

    def __init__(
        self,
        stepper: Stepper,
        *,
        interval: int = DEFAULT_STEPPER_INTERVAL,
        max_checkpoints: int = DEFAULT_MAX_CHECKPOINTS,
    ):
        self.s = stepper
        m = stepper.machine
        self.rec = (
            m.recorder if m.recorder is not None else Recorder(m, interval=interval, max_checkpoints=max_checkpoints)
        )

    @classmethod
    def of(cls, stepper: Stepper, **kw) -> "ReverseStepper":
        """The stepper's reverse verbs (made, and recording started, on first use)."""
        rs = getattr(stepper, "reverse", None)
        if rs is None:
            rs = stepper.reverse = cls(stepper, **kw)
        return rs

    # ------------------------------------------------------------------ verbs
    def reverse_stepi(self, count: int = 1) -> StopEvent:
        """Go back ``count`` guest instructions (a probed one counts as one)."""
        self._check_count(count)
        for _ in range(count):
            if not self._back_one():
                return self._stop(HISTORY_START, "reverse-stepi")
        return self._stop("step", "reverse-stepi")

    def reverse_step(self, count: int = 1) -> StopEvent:
        """Go back ``count`` instructions of this frame (gdb ``reverse-nexti``): a call
        made just before runs backwards as one instruction, its whole callee undone."""
        self._check_count(count)
        for _ in range(count):
            here = self.s.machine.read_regs()
            if not self._back_one():
                return self._stop(HISTORY_START, "reverse-step")
            if self._returned_to(here):
                call = self._call_before(here.rip)
                if call is not None:
                    hit = self._last_hit({call}, lambda m, here=here: m.read_regs().rsp == here.rsp)
                    if hit is not None:
                        self.rec.seek(hit[0])
        return self._stop("step", "reverse-step")

    def reverse_continue(self) -> StopEvent:
        """Run backwards to the previous breakpoint hit or watchpoint trigger, or to the
        start of history.  A watchpoint stops where a forward run reported it: right
        after the accessing instruction (as rr does), so ``continue`` goes on from there."""
        s = self.s
        addrs = {bp.address for bp in s.breakpoints.values() if bp.enabled}
        watching = any(wp.enabled for wp in s.watchpoints.values())
        hit = self._last_hit(addrs, watch=watching) if addrs or watching else None
        if hit is None:
            self.rec.seek(self.rec.start)
            return self._stop(HISTORY_START, "reverse-continue")
        position, trigger = hit
        self.rec.seek(position)
        if trigger is not None:
            wp, addr = trigger
            wp.hits += 1
            ev = self._stop("watchpoint", "reverse-continue")
            ev.watchpoint, ev.data_addr = wp, addr
            return ev
        bp = s._enabled_bp_at(s.rip)
        if bp is not None:
            bp.hits += 1
        return self._stop("breakpoint", "reverse-continue", bp)

    def seek(self, position: int) -> StopEvent:
        """Go to instruction ``position`` of the recorded history (either way)."""
        try:
            self.rec.seek(position)
        except CheckpointError as e:
            raise StepperError(str(e)) from None
        return self._stop("step", "seek")

    # ------------------------------------------------------------------ machinery
    @staticmethod
    def _check_count(count: int) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise StepperError(f"bad count {count!r}")

    def _back_one(self) -> bool:
        """Back to the start of the previous guest instruction; False at the start."""
        rec = self.rec
        pos = rec.position
        if pos <= rec.start:
            return False
        pos -= 1
        rec.seek(pos)
        while pos > rec.start and self._mid_instruction():
            pos -= 1
            rec.seek(pos)
        return True

    def _mid_instruction(self) -> bool:
        """A state stepping never stops in: the kernel model's, or inside a patched
        probe site (between an optimized nop10 site's lea and call)."""
        s = self.s
        if s.machine.exited:
            return False
        rip = s.rip
        if s._transitional(rip):
            return True
        for vaddr in s.probe_sites():
            if vaddr < rip < vaddr + 10:
                try:
                    orig = s.original_insn(vaddr)
                except GuestFault:
                    continue
                if rip < vaddr + orig.size and s.machine.mem.read(vaddr, orig.size) != orig.bytes:
                    return True
        return False

    def _returned_to(self, here) -> bool:
        """Is the instruction we just went back to a return into ``here``'s frame?"""
        s = self.s
        try:
            insn = s.original_insn(s.rip)
        except GuestFault:
            return False
        return insn.mnemonic in ("ret", "retq") and s.machine.read_regs().rsp + 8 == here.rsp

    def _call_before(self, ret_addr: int) -> int | None:
        """The address of the call instruction that returns to ``ret_addr``."""
        for k in _CALL_SIZES:
            try:
                insn = self.s.original_insn(ret_addr - k)
            except GuestFault:
                continue
            if insn.mnemonic == "call" and insn.size == k:
                return ret_addr - k
        return None

    def _last_hit(self, addrs: set, predicate=None, *, watch: bool = False):
        """The latest instruction position before now at which execution was about to
        run one of ``addrs`` (and ``predicate(machine)`` held), or - with ``watch`` -
        had just made an access one of the stepper's watchpoints triggers on.  Returns
        ``(position, trigger)``, trigger ``(watchpoint, address)`` or None for a code
        hit; None if there is none in the recorded history.  The machine is left at the
        current position."""
        rec, s, m = self.rec, self.s, self.s.machine
        now = rec.position
        hi = now
        for cp in sorted((c for c in rec.checkpoints if c.position < now), key=lambda c: -c.position):
            hits: list[tuple] = []

            def seen(_addr, _size, hits=hits, hi=hi):
                at = m.insn_clock() - 1  # the clock counts the instruction about to run
                if at < hi and (predicate is None or predicate(m)):
                    hits.append((at, None))

            def accessed(access, addr, size, _value, hits=hits, hi=hi):
                at = m.insn_clock()  # the state after the accessing instruction
                if at <= hi and at < now and (not hits or hits[-1][0] != at or hits[-1][1] is None):
                    wp = s.watch_match(access, addr, size)
                    if wp is not None:
                        hits.append((at, (wp, addr)))

            proc = getattr(m, "main_process", m.process)
            rec.replay_from(cp, cp.position)
            hooks: list[HookHandle] = [m.add_code_hook(seen, a, a, process=proc) for a in addrs]
            if watch:
                for wp in s.watchpoints.values():
                    if wp.enabled:
                        lo = max(0, wp.address - 15)  # the widest access reaching the bytes
                        hooks += [
                            m.add_mem_hook(accessed, lo, wp.address + wp.size - 1, access=kind, process=proc)
                            for kind in ("read", "write")
                        ]
            try:
                rec.seek(hi)
            finally:
                for h in hooks:
                    m.remove_hook(h)
            if hits:
                rec.seek(now)
                return max(hits, key=lambda h: h[0])
            hi = cp.position
        rec.seek(now)
        return None

    def _stop(self, reason: str, verb: str, bp=None) -> StopEvent:
        s = self.s
        s.exited = bool(s.machine.exited)
        s._sites = None  # the text may differ from before the seek
        return s._event(reason, verb, bp=bp)


__all__ = ["ReverseStepper", "DEFAULT_STEPPER_INTERVAL", "HISTORY_START"]
