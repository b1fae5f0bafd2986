"""Time travel for the tracer: "seek to instruction N" and "which instruction last wrote
this register / this address?", answered by replaying the recorded history
(:class:`emu.replay.checkpoint.Recorder`).

:class:`TraceSeek` records a machine from its first instruction.  :meth:`TraceSeek.seek`
goes to any instruction of the history, either way.  :meth:`TraceSeek.last_write` finds
the latest instruction before now that wrote a register of the current task or bytes of
its address space: it replays the history one checkpoint interval at a time, newest
first, with a code hook on every instruction of that process (for the search only - the
normal run has none).  An instruction counts as a writer when the value it leaves differs
from the one before it (which also catches what the kernel writes: a syscall's result,
a read() into a buffer, a signal frame), or when it is a store to the address
(a memory-write hook) or lists the register among its written operands (capstone) -
a write of the same value.

``uprobe-emu trace --seek N [--last-write rax|ADDR[:SIZE]]... PROGRAM`` runs to
instruction N, answers the queries on stderr and traces from there on.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from capstone import CS_ARCH_X86, CS_MODE_64, Cs, CsError

from emu.debug.disasm import symbol_of
from emu.debug.format import subreg
from emu.inspect import GuestFault
from emu.replay.checkpoint import DEFAULT_INTERVAL, CheckpointError
from kernel_model.errors import InputError

_MAX_SIZE = 64


@dataclass
class LastWrite:
    """The instruction that last wrote a watched register or address before ``before``."""

    what: str
    position: int  # the instruction's index in the run (0: the first)
    rip: int
    symbol: str | None
    text: str  # its disassembly
    old: int  # the value before it ran
    new: int  # the value it left
    before: int  # the position the question was asked at

    def describe(self) -> str:
        where = f"{self.rip:#x}" + (f" <{self.symbol}>" if self.symbol else "")
        return (
            f"last write to {self.what} before instruction {self.before}: instruction "
            f"{self.position} at {where}: {self.text} ({self.old:#x} -> {self.new:#x})"
        )


class _Watch:
    """What is watched: a register of one task, or bytes of one address space."""

    def __init__(self, machine, what):
        self.m = machine
        self.task = machine.task
        self.mem = machine.mem
        if isinstance(what, int) or (isinstance(what, str) and what[:1].isdigit()):
            addr, size = _parse_address(what)
            self.kind, self.addr, self.size = "mem", addr, size
            self.name = f"{addr:#x}" + (f":{size}" if size != 1 else "")
            try:
                self.mem.read(addr, size)
            except GuestFault:
                raise InputError(f"{self.name} is not mapped in the guest now") from None
        else:
            name = str(what).lstrip("$").lower()
            full, shift, bits = subreg(name)
            if full is None:
                raise InputError(f"unknown register {what!r}")
            self.kind, self.full, self.shift, self.bits, self.name = "reg", full, shift, bits, name

    def read(self) -> int:
        if self.kind == "mem":
            try:
                return int.from_bytes(self.mem.read(self.addr, self.size), "little")
            except GuestFault:
                return -1
        value = self.m.task_reg_read(self.task, self.full)
        return (value >> self.shift) & ((1 << self.bits) - 1)


def _parse_address(what) -> tuple[int, int]:
    if isinstance(what, int):
        return what, 1
    text, _, size = what.partition(":")
    try:
        addr, n = int(text, 0), int(size, 0) if size else 1
    except ValueError:
        raise InputError(f"bad address {what!r} (ADDR or ADDR:SIZE)") from None
    if not 1 <= n <= _MAX_SIZE or addr < 0:
        raise InputError(f"bad address {what!r}: SIZE is 1..{_MAX_SIZE}")
    return addr, n


class TraceSeek:
    """Seek and last-write queries over one machine (recorded from now on)."""

    def __init__(self, machine, *, interval: int = DEFAULT_INTERVAL):
        self.m = machine
        self.rec = machine.recorder if machine.recorder is not None else machine.record(interval=interval)
        self._cs = Cs(CS_ARCH_X86, CS_MODE_64)
        self._cs.detail = True
        self._writes: dict = {}  # (addr, bytes) -> (text, set of full registers written)

    @property
    def position(self) -> int:
        return self.rec.position

    def seek(self, n: int) -> None:
        """Go to instruction ``n``: back by replay, forward by running (recorded)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InputError(f"an instruction number is >= 0, not {n!r}")
        if n > self.rec.end:
            if self.m.exited:
                raise InputError(f"the guest ended at instruction {self.rec.end}, before {n}")
            self.rec.seek(self.rec.end)
            self.m.run(max_insns=n - self.rec.position, timeout=None)
            if self.rec.position != n:
                raise InputError(f"the guest ended at instruction {self.rec.position}, before {n}")
            return
        try:
            self.rec.seek(n)
        except CheckpointError as e:
            raise InputError(str(e)) from None

    def last_write(self, what) -> LastWrite | None:
        """The latest instruction before now that wrote ``what`` (a register name of
        the current task, an address or ``"ADDR:SIZE"`` of its address space); None if
        nothing in the recorded history did.  The machine stays where it is."""
        watch = _Watch(self.m, what)
        rec = self.rec
        now = rec.position
        hi = now
        try:
            for cp in sorted((c for c in rec.checkpoints if c.position < now), key=lambda c: -c.position):
                found = self._search(watch, cp, hi)
                if found is not None:
                    pos, rip, old, new = found
                    return LastWrite(watch.name, pos, rip, self._symbol(rip), self._text(rip), old, new, now)
                hi = cp.position
            return None
        finally:
            rec.seek(now)

    # ------------------------------------------------------------------ search
    def _search(self, watch: _Watch, cp, hi: int):
        """(position, rip, old, new) of the last write in [cp, hi), or None."""
        rec, m = self.rec, self.m
        rec.replay_from(cp, cp.position)
        state: dict[str, Any] = {"value": watch.read(), "last": None, "hit": None}

        def on_insn(addr, _size):
            if m.task is not watch.task and watch.kind == "reg":
                return
            pos = m.insn_clock() - 1
            value = watch.read()
            last = state["last"]
            if value != state["value"] and last is not None:
                state["hit"] = (last[0], last[1], state["value"], value)
            elif last is not None and last[2]:
                state["hit"] = (last[0], last[1], state["value"], value)  # the same value again
            state["value"] = value
            state["last"] = (pos, addr, watch.kind == "reg" and self._writes_reg(addr, watch.full))

        def on_store(_access, addr, size, _value):
            last = state["last"]
            if addr < watch.addr + watch.size and watch.addr < addr + size and last is not None:
                state["last"] = (last[0], last[1], True)

        proc = watch.task.process
        hooks = [m.add_code_hook(on_insn, 1, 0, process=proc)]
        if watch.kind == "mem":
            hooks.append(
                m.add_mem_hook(on_store, watch.addr, watch.addr + watch.size - 1, access="write", process=proc)
            )
        try:
            rec.seek(hi)
        finally:
            for h in hooks:
                m.remove_hook(h)
        last = state["last"]
        if last is not None:
            value = watch.read()
            if value != state["value"] or last[2]:
                state["hit"] = (last[0], last[1], state["value"], value)
        return state["hit"]

    def _decode(self, addr: int):
        try:
            code = self.m.mem.read(addr, 15)
        except GuestFault:
            return None
        key = (addr, code)
        hit = self._writes.get(key)
        if hit is None:
            try:
                insn = next(self._cs.disasm(code, addr, 1), None)
            except CsError:
                insn = None
            if insn is None:
                hit = ("(bad)", frozenset())
            else:
                try:
                    written = {subreg(insn.reg_name(r))[0] for r in insn.regs_access()[1]}
                except CsError:
                    written = set()
                hit = (f"{insn.mnemonic} {insn.op_str}".strip(), frozenset(written))
            self._writes[key] = hit
        return hit

    def _writes_reg(self, addr: int, full: str) -> bool:
        hit = self._decode(addr)
        return hit is not None and full in hit[1]

    def _text(self, addr: int) -> str:
        hit = self._decode(addr)
        return hit[0] if hit is not None else "??"

    def _symbol(self, addr: int) -> str | None:
        hit = symbol_of(self.m, addr)
        if hit is None:
            return None
        name, off = hit
        return f"{name}+{off:#x}" if off else name


class LateSink:
    """A file-like sink for tracefs lines whose destination comes later (the probes
    are registered before ``--seek`` runs, the tracer after it)."""

    def __init__(self, target):
        self.target = target

    def write(self, text: str) -> int:
        return self.target.write(text)

    def flush(self) -> None:
        self.target.flush()


def apply_cli(m, seek_to: int | None, queries: list, interval: int, err=None) -> None:
    """``trace --seek N --last-write WHAT...``: go to N, answer each query on ``err``."""
    err = err if err is not None else sys.stderr
    ts = TraceSeek(m, interval=interval)
    if seek_to is not None:
        ts.seek(seek_to)
    for q in queries:
        hit = ts.last_write(q)
        if hit is None:
            print(f"uprobe-emu: last write to {q}: none since the start", file=err)
        else:
            print(f"uprobe-emu: {hit.describe()}", file=err)
    err.flush()


__all__ = ["TraceSeek", "LastWrite", "LateSink", "apply_cli"]
