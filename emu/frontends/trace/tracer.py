"""Instruction trace: every guest instruction executed, with the uprobes model's work
interleaved exactly where it happens, in four formats.

    from emu import Machine
    from emu.trace import Tracer
    m = Machine.from_guest("fib", argv=["fib", "10"])
    with open("fib.trace", "w") as f, Tracer(m, "text", f, start="fib_loop", count=1000):
        m.run()

A :class:`Tracer` adds one whole-address-space machine code hook only while it traces:
from construction, or - with ``start=`` - from the first time the guest reaches that
address (until then a hook on that one address is the only cost; adding the whole-space
hook drops every translation, so blocks the guest ran before the start are traced too);
after ``count`` instructions, at the guest's
exit or death, or at :meth:`Tracer.close` the hook is removed and the guest runs at full
speed again.  Registers are read in one native batch per instruction and diffed against
the previous instruction's snapshot; decodes are cached per address by
:class:`emu.disasm.Disassembler` (and the formatted lines by the tracer), both dropped on
every text write; output is buffered and written in chunks.

Threads of the traced process share its CPU: each keeps its own pending instruction and
register snapshot, and every switch between them is marked (``# task 1001 (comm) is on
the CPU``; a Chrome track per thread).  A ``vfork`` child borrowing the CPU is traced
the same way; a forked process has a CPU of its own and is not traced (its events are
left out).

Formats (``FORMATS``):

``text``
    ``objdump -d`` lines (capstone Intel operands) with ``<symbol>:`` headers when a
    function starts or control moves to another function or kernel-model region, each
    followed by the registers the instruction changed (``    rax=0x1 rcx=0x401005``;
    ``rip`` only when execution did not fall through) and the model's events as
    ``    # ...`` lines at the point they happen: the int3 trap at a probe, each handler,
    emulation, the XOL copy, single-step and fixups, uretprobe hijack / trampoline /
    return handlers, syscalls (335 and 336 marked ``***``), text pokes, optimization,
    signals.  Instructions the kernel model makes the CPU run - the XOL slot copy, the
    uretprobe trampoline, the ``[uprobes-trampoline]`` of optimized probes - are traced
    at their real addresses and marked (``# [XOL slot 1]``).
``jsonl``
    One JSON object per line: ``{"type": "start"}``, then ``"insn"`` objects (``i``,
    ``addr``, ``sym``, ``bytes``, ``asm``, ``regs`` changed, ``mem`` written, ``region``
    for kernel-model code) each followed by the ``"event"`` objects that happened while it
    executed (``event``, ``text``, and the event's fields), then ``{"type": "end"}``.
    Addresses and register values are hex strings.
``tenet``
    Tenet's delta format (one line per instruction: the registers the previous
    instruction changed, ``rip``, and its memory writes ``mw=ADDR:HEXBYTES``; the first
    line carries every register).  Memory writes are hooked while tracing; writes the
    kernel model makes on the task's behalf (emulated push/call, return-address hijack,
    the trampolines' saved registers) are included.
``chrome``
    Chrome trace-event JSON (``{"traceEvents": [...]}``, loadable in Perfetto and
    chrome://tracing): ``B``/``E`` spans per function (entered by ``call``, left by
    ``ret``) and per kernel-model region, instant events for probe hits, return-probe
    hits, syscalls, optimizations and signals.  ``ts`` is the instruction index.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import tempfile
import time

from kernel_model.insn_x86 import FIX_CALL, FIX_IP, FIX_SETF

from emu.frontends.cli import make_machine, print_error, report_result
from emu.disasm import Disassembler, format_objdump_line, symbol_of
from emu.errors import InputError, SymbolError
from emu.machine import Machine
from emu.memory import PROT_EXEC, PROT_WRITE, GuestFault
from emu.regs import GPR_NAMES
from emu.signals import signal_name
from emu.syscall_names import SYSCALL_NAMES

FORMATS = ("text", "jsonl", "tenet", "chrome")

_RIP = GPR_NAMES.index("rip")
_RSP = GPR_NAMES.index("rsp")
_NREGS = len(GPR_NAMES)
_IDX = tuple(range(_NREGS))
_REG_FMT = tuple(n + "=%#x" for n in GPR_NAMES)
# Tenet's x86_64 register set (no flags, no segment bases)
_TENET_REGS = tuple(i for i, n in enumerate(GPR_NAMES) if n not in ("eflags", "fs_base", "gs_base"))

# A register snapshot is one Python int: the batch buffer read as 20 little-endian
# 64-bit slots.  XOR with the previous snapshot and walking its set slots is the
# cheapest diff CPython offers (one C call instead of twenty comparisons).
_M64 = (1 << 64) - 1
_RIP_SH = 64 * _RIP
_NORIP = ((1 << (64 * _NREGS)) - 1) & ~(_M64 << _RIP_SH)
_LOW = tuple((1 << (64 * i)) - 1 for i in range(_NREGS))      # slots below i
_TENET_DIFF = sum(_M64 << (64 * i) for i in _TENET_REGS if i != _RIP)


def _slots(x: int) -> list[int]:
    """Indexes of the non-zero 64-bit slots of ``x``, ascending."""
    out = []
    while x:
        i = (x.bit_length() - 1) >> 6
        out.append(i)
        x &= _LOW[i]
    out.reverse()
    return out


def _reg(snap: int, i: int) -> int:
    return (snap >> (64 * i)) & _M64


_XOL_SLOT_BYTES = 128
_CALL, _RET = 1, 2
_FLUSH_AT = 1024          # buffered pieces before a write
_END_SYSCALLS = (60, 231)  # exit, exit_group: the single task ends

_RC_NAMES = {0: "0", 1: "UPROBE_HANDLER_REMOVE", 2: "UPROBE_HANDLER_IGNORE"}

# argument counts for the syscalls a trace line should not pad to six
_NARGS = {
    0: 3, 1: 3, 2: 3, 3: 1, 4: 2, 5: 2, 6: 2, 7: 3, 8: 3, 9: 6, 10: 3, 11: 2, 12: 1, 13: 4,
    14: 4, 16: 3, 17: 4, 18: 4, 19: 3, 20: 3, 21: 2, 24: 0, 28: 3, 32: 1, 33: 2, 35: 2,
    39: 0, 60: 1, 62: 2, 63: 1, 72: 3, 79: 2, 89: 3, 96: 2, 97: 2, 102: 0, 104: 0, 107: 0,
    108: 0, 110: 0, 111: 0, 121: 1, 131: 2, 158: 2, 186: 0, 200: 2, 201: 1, 218: 1,
    228: 2, 231: 1, 234: 3, 257: 4, 262: 4, 267: 4, 273: 2, 302: 4, 318: 3, 334: 4,
    335: 0, 336: 0,
}


def _dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _signed(v: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return v - (1 << 64) if v >> 63 else v


class _Entry:
    """One traced address, formatted once (until the text there changes)."""

    __slots__ = ("addr", "size", "line", "header", "func", "at_start", "kind", "region",
                 "kernel", "label", "asm", "json")

    def __init__(self, addr, size, line, label, func, at_start, kind, region, kernel, asm, json_):
        self.addr, self.size, self.line, self.label = addr, size, line, label
        self.header = f"\n{addr:016x} <{label}>:\n" if label else f"\n{addr:016x}:\n"
        self.func, self.at_start, self.kind = func, at_start, kind
        self.region, self.kernel, self.asm, self.json = region, kernel, asm, json_


class _FtraceOut:
    """File-like sink for tracefs event lines (``-e SPEC``): they become trace events
    while tracing, and go to ``fallback`` otherwise."""

    def __init__(self, tracer, fallback=None):
        self.tracer, self.fallback = tracer, fallback

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line:
                if self.tracer.active:
                    self.tracer._on_event("ftrace", line=line)
                elif self.fallback is not None:
                    self.fallback.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        if self.fallback is not None and not self.tracer.active:
            self.fallback.flush()


class Tracer:
    """Trace a machine's execution into ``out``.

    Args:
        machine: the :class:`emu.machine.Machine`; run it as usual after this.
        fmt: one of :data:`FORMATS`.
        out: a writable text file, a path (opened and closed by the tracer), or None
            for ``sys.stdout``.
        start: where tracing begins: a symbol, ``"symbol+off"`` or an address; None
            traces from the next instruction.
        count: trace at most this many instructions (the guest keeps running untraced).
        mem: also record the guest's memory writes (default: only for ``tenet``).

    The trace is flushed and finished when the guest exits or is killed, when
    ``count`` is reached (flushed), and at :meth:`close` (or the end of a ``with``
    block), which a run that ends on its budget, timeout or a stop request needs.
    """

    def __init__(self, machine, fmt: str = "text", out=None, *, start=None, count: int | None = None,
                 mem: bool | None = None):
        if fmt not in FORMATS:
            raise InputError(f"unknown trace format {fmt!r}; choose one of: {', '.join(FORMATS)}")
        if count is not None and count < 0:
            raise InputError("the instruction count must not be negative")
        self.machine = machine
        self.fmt = fmt
        self.count = count
        self.mem_writes = (fmt == "tenet") if mem is None else bool(mem)
        self._own_out = False
        if out is None:
            out = sys.stdout
        elif isinstance(out, (str, os.PathLike)):
            try:
                out = open(out, "w")
            except OSError as e:
                raise InputError(f"cannot write the trace to {os.fspath(out)!r}: {e.strerror}") from None
            self._own_out = True
        self.out = out
        self.sync_stdout = out is sys.stdout     # keep the guest's passthrough output in place
        self.insns = 0                           # instructions traced so far
        self.active = False
        self.finished = False
        self.end_reason = ""
        self._dis = Disassembler(machine)
        self._entries: dict[int, _Entry] = {}
        self._buf: list[str] = []
        self._prev: int | None = None            # register snapshot (rip slot: expected next)
        self._pe: _Entry | None = None           # the instruction whose effects are pending
        self._pe_i = 0                           # its index
        self._func = None
        self._skip = None
        self._mw: list = []                      # memory the pending insn wrote (see _collect_mw)
        self._events: list = []                  # jsonl: events of the pending instruction
        self._in_sys_uprobe = False
        self._code_hook = None
        self._mem_hook = None
        self._smc_hooks: list = []
        self._start_hook = None
        self._chrome_stack: list = []            # (name, cat)
        self._chrome_first = True
        self._header_written = False
        self._uc = machine.uc                    # identifies the traced address space
        self._proc = machine.process             # the traced process (its threads share the CPU)
        self._task = machine.task                # the task whose trace state is loaded
        self._tstate: dict = {}                  # off-CPU tasks: their pending trace state
        self._named = {machine.task}             # chrome: tasks with a thread_name
        self._read = machine.snapshot_reader()
        self._limit = count if count is not None else 1 << 62
        self._hook = (self._make_hook_text() if fmt == "text" else getattr(self, "_hook_" + fmt))
        self._event_fn = getattr(self, "_event_" + fmt)
        self._listening = False
        self._started = False
        self._in_event = 0
        machine.mem.text_write_listeners.append(self._invalidate)
        self._start_spec = start
        if start is None:
            self._activate()
        else:
            addr = self._resolve(start)
            self.start_addr = addr
            self._start_hook = machine.add_code_hook(self._on_start, addr, addr)

    # ------------------------------------------------------------------ public
    def close(self) -> None:
        """Finish the trace (final register effects, format trailer), flush it, and
        remove every hook; closes ``out`` if the tracer opened it."""
        if not self.finished:
            self._finish("closed" if self._started else "start never reached")
        self._unlisten()
        listeners = self.machine.mem.text_write_listeners
        for fn in (self._invalidate, self._dis.invalidate):
            while fn in listeners:
                listeners.remove(fn)
        if self._own_out and not self.out.closed:
            self.out.close()

    def __enter__(self) -> "Tracer":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def ftrace_output(self, fallback=None):
        """A file-like object for ``uprobes.add_event(..., output=)``: tracefs lines
        become ``ftrace`` events of this trace (``fallback`` gets them while not tracing)."""
        return _FtraceOut(self, fallback)

    # ------------------------------------------------------------------ lifecycle
    def _resolve(self, start) -> int:
        if isinstance(start, int):
            return start
        text = str(start).strip()
        try:
            return int(text, 0)
        except ValueError:
            pass
        name, _, off = text.partition("+")
        try:
            delta = int(off, 0) if off else 0
        except ValueError:
            raise SymbolError(f"bad offset {off!r} in {text!r}") from None
        return self.machine.resolve(name.strip()) + delta

    def _on_start(self, addr, size):
        if self.active or self.finished:
            return
        self.machine.remove_hook(self._start_hook)
        self._start_hook = None
        # Adding the whole-space hook drops every translation and restarts the run, so
        # blocks translated before the start (a loop body, a function called earlier)
        # are traced too.  The new hook may also run for this very instruction: trace
        # it here, once.
        self._activate()
        self._hook(None, addr, size, None)
        self._skip = addr

    def _activate(self) -> None:
        m = self.machine
        self.active = True
        self._prev = None
        hook = self._hook
        if not getattr(hook, "native", False):
            def hook(address, size, _h=hook):
                _h(None, address, size, None)
        self._code_hook = m.add_code_hook(hook)
        if self.mem_writes and self.fmt != "chrome":
            self._mem_hook = m.add_mem_hook(self._on_mem_write)
        # Guest stores into writable code (no text poke tells us): watch those mappings.
        self._smc_hooks = [
            m.add_mem_hook(self._on_code_write, v.start, v.end - 1)
            for v in m.mem.vmas if v.prot & PROT_EXEC and v.prot & PROT_WRITE and not v.special]
        self._started = True
        if not self._listening:
            self._listening = m.events.subscribe(self._on_model_event)
        if not self._header_written:
            self._write_header()

    def _deactivate(self) -> None:
        m = self.machine
        if self._code_hook is not None:
            m.remove_hook(self._code_hook)
            self._code_hook = None
        if self._mem_hook is not None:
            m.remove_hook(self._mem_hook)
            self._mem_hook = None
        for h in self._smc_hooks:
            m.remove_hook(h)
        self._smc_hooks = []
        if self._start_hook is not None:
            m.remove_hook(self._start_hook)
            self._start_hook = None
        self.active = False
        if not self._in_event:
            self._unlisten()

    def _unlisten(self) -> None:
        """Leave the machine's event stream (not while an event is being delivered: an
        inactive tracer's subscriber does nothing until it is removed at close)."""
        if self._listening and not self._in_event:
            self.machine.events.unsubscribe(self._listening)
            self._listening = False

    def _stop_counting(self) -> None:
        """``count`` instructions are traced: finish the last one and let the guest run."""
        self._finish(f"count of {self.count} reached")

    def _finish(self, reason: str, effects: bool = True) -> None:
        if self.finished:
            return
        if not effects:                       # the task ended inside the instruction
            self._effects_none()
        elif self.active and self._prev is not None:
            self._effects_now(self._read())
        if not self._header_written:
            self._write_header()
        self._deactivate()
        self.finished = True
        self.end_reason = reason
        self._write_trailer(reason)
        self._flush()
        try:
            self.out.flush()
        except (OSError, ValueError):
            pass

    def _flush(self) -> None:
        buf = self._buf
        if buf:
            self.out.write("".join(buf))
            buf.clear()

    # ------------------------------------------------------------------ decode cache
    def _invalidate(self, start: int, end: int) -> None:
        entries = self._entries
        if not entries:
            return
        lo = start - 15
        if end - lo <= 64:
            for a in range(lo, end):
                e = entries.get(a)
                if e is not None and a + e.size > start:
                    del entries[a]
        else:
            for a in [a for a, e in entries.items() if a < end and a + e.size > start]:
                del entries[a]

    def _region(self, addr: int):
        """(label, kernel, base) for kernel-model code, else None.  ``kernel`` is True
        for the trampolines (their call/ret are the model's, not the program's) and
        False for an XOL slot (it runs the program's own instruction)."""
        vma = self.machine.mem.find_vma(addr)
        if vma is None or not vma.special:
            return None
        if vma.name == "[uprobes]":
            slot = (addr - vma.start) // _XOL_SLOT_BYTES
            base = vma.start + slot * _XOL_SLOT_BYTES
            if slot == 0:
                return "[uprobes] uretprobe trampoline", True, base
            return f"[uprobes] XOL slot {slot}", False, base
        return vma.name, True, vma.start

    def _label(self, addr: int) -> str | None:
        """``sym+0xoff`` / region name for an address (events, headers)."""
        region = self._region(addr)
        if region is not None:
            off = addr - region[2]
            return region[0] + (f"+{off:#x}" if off else "")
        return self._dis.symbolize(addr)

    def _where(self, addr: int) -> str:
        label = self._label(addr)
        return f"{addr:#x} <{label}>" if label else f"{addr:#x}"

    def _entry(self, addr: int) -> _Entry:
        dis = self._dis
        try:
            insn = dis.decode(addr)
        except GuestFault:
            insn = dis.decode_bytes(addr, b"")
        line = format_objdump_line(insn, self._label)
        asm = f"{insn.mnemonic} {insn.op_str}".strip()
        note = ""
        kind = 0
        mnem = insn.mnemonic
        region = self._region(addr)
        if mnem == "call":
            kind = _CALL
        elif mnem.startswith("ret"):
            kind = _RET
        if region is not None:
            label, kernel, base = region
            func = label
            off = addr - base
            at_start = off == 0
            hlabel = label + (f"+{off:#x}" if off else "")
            mark = label[len("[uprobes] "):] if label.startswith("[uprobes] ") else label.strip("[]")
            note = f"  # [{mark}]"
        else:
            kernel = False
            sym = symbol_of(self.machine, addr)
            if sym is not None:
                func, off = sym
                at_start = off == 0
                hlabel = func + (f"+{off:#x}" if off else "")
            else:
                vma = self.machine.mem.find_vma(addr)
                func = vma.name if vma is not None and vma.name else None
                at_start = False
                hlabel = func
            note = self._probe_note(addr, insn)
            if note and kind == 0:
                up = self._uprobe_at(addr)
                if up is not None and up.arch is not None and up.arch.kind == "call" and mnem == "int3":
                    kind = _CALL            # an emulated call: the probe enters the callee
        if note:
            first, nl, rest = line.partition("\n")
            line = first + note + nl + rest
        js = ('{"type":"insn","addr":"%#x","sym":%s,"bytes":"%s","asm":%s' %
              (addr, _dumps(hlabel), insn.bytes.hex(), _dumps(asm)))
        if region is not None:
            js += ',"region":' + _dumps(region[0])
        elif note:
            js += ',"note":' + _dumps(note.strip()[2:])
        if func is not None:
            func = sys.intern(func)
        e = _Entry(addr, insn.size, line + "\n", hlabel, func, at_start, kind,
                   region[0] if region else None, kernel, asm, js)
        self._entries[addr] = e
        return e

    def _on_code_write(self, access, addr, size, value):
        self._dis.invalidate(addr, addr + size)
        self._invalidate(addr, addr + size)

    def _redecode(self, addr: int) -> _Entry:
        """The CPU runs an instruction of another length than the cached decode: the
        guest rewrote its own code (stores are not text pokes).  Decode again."""
        self._dis.invalidate(addr, addr + 1)
        self._entries.pop(addr, None)
        return self._entry(addr)

    def _uprobe_at(self, addr: int):
        try:
            return self.machine.uprobes.find_active_uprobe(self.machine.process, addr)
        except Exception:  # noqa: BLE001 - a trace must not fail on a lookup
            return None

    def _probe_note(self, addr: int, insn) -> str:
        up = self._uprobe_at(addr)
        if up is None or up.arch is None:
            return ""
        if insn.mnemonic == "int3":
            return f"  # uprobe: {up.arch.text}"
        try:
            if self.machine.kernel.optimizer.is_optimized(self.machine.process, up, addr):
                return "  # optimized uprobe"
        except Exception:  # noqa: BLE001 - a trace must not fail on a lookup
            pass
        return ""

    # ------------------------------------------------------------------ memory writes
    def _on_mem_write(self, access, addr, size, value):
        if size <= 8:
            self._mw.append((addr, (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")))
        else:
            self._mw.append((addr, size))          # read after the instruction

    # ------------------------------------------------------------------ tasks
    _TASK_STATE = ("_prev", "_pe", "_pe_i", "_events", "_chrome_stack")

    def _switch(self, task) -> None:
        """Another task of the traced process is on the CPU (threads share it; the
        machine switches them between time slices).  Each task keeps its own pending
        instruction and register snapshot; a marker shows the switch.  Tenet's single
        state stream just continues (its next line carries the difference)."""
        old = self._task
        if self.fmt != "tenet":
            if getattr(old, "state", "running") != "dead":
                self._tstate[old] = tuple(getattr(self, k) for k in self._TASK_STATE)
            saved = self._tstate.pop(task, None)
            if saved is None:
                saved = (None, None, 0, [], [])
            for k, v in zip(self._TASK_STATE, saved):
                setattr(self, k, v)
        self._task = task
        self._func = None
        text = f"task {task.tid} ({task.comm}) is on the CPU"
        if self.fmt == "text":
            self._buf.append(f"\n# {text}\n")
        elif self.fmt == "jsonl":
            self._buf.append(_dumps({"type": "event", "i": self.insns, "event": "switch",
                                     "text": text, "tid": task.tid}) + "\n")
        elif self.fmt == "chrome" and task not in self._named:
            self._named.add(task)
            self._chrome_emit('{"name":"thread_name","ph":"M","ts":%d,"pid":%d,"tid":%d,'
                              '"args":{"name":%s}}' % (self.insns, self._pid, task.tid,
                                                       _dumps(f"{task.comm} {task.tid}")))

    def _ours(self, task) -> bool:
        """Does ``task`` run on the traced CPU (the traced process, its threads, a
        vfork child borrowing its mm)?  Forked processes have a CPU of their own."""
        return task is None or getattr(task.process, "uc", self._uc) is self._uc

    def _collect_mw(self, cur: int) -> list:
        """Memory written by the pending instruction - by the CPU (the write hook) and
        by the kernel model on the task's behalf - as (addr, bytes).  An entry's address
        None means "at rsp after the instruction"; an int instead of bytes means "read
        that many bytes now"."""
        out = []
        mem = self.machine.mem
        for addr, data in self._mw:
            if addr is None:
                addr = _reg(cur, _RSP)
            if isinstance(data, int):
                try:
                    data = mem.read(addr, data)
                except GuestFault:
                    continue
            out.append((addr, data))
        self._mw.clear()
        return out

    # ------------------------------------------------------------------ text
    def _make_hook_text(self):
        """The per-instruction callback for ``text``: a closure over everything it
        touches that does not change while tracing (one call per instruction)."""
        rd = self._read
        fn, uch, ids, ptrs, nregs, rbuf = rd.fn, rd.uch, rd.ids, rd.ptrs, rd.n, rd.buf
        frombytes = int.from_bytes
        buf = self._buf
        append = buf.append
        get = self._entries.get
        make = self._entry
        write = self.out.write
        limit = self._limit
        fmts, low, norip, ripsh = _REG_FMT, _LOW, _NORIP, _RIP_SH
        m = self.machine

        def hook(_uc, addr, size, _ud):
            try:
                if m.task is not self._task:
                    self._switch(m.task)
                if fn(uch, ids, ptrs, nregs):
                    raise RuntimeError("uc_reg_read_batch failed")
                cur = frombytes(rbuf, "little")
                p = self._prev
                if p is None or self._skip is not None:
                    p = self._slow_start(cur, addr)
                    if p is None:
                        return
                n = self.insns
                if n >= limit:
                    self._effects_now(cur)
                    self._stop_counting()
                    return
                self.insns = n + 1
                x = cur ^ p
                if self._mw:
                    append(self._effects_text(cur, x))
                elif x:
                    parts = []
                    while x:
                        i = (x.bit_length() - 1) >> 6
                        parts.append(fmts[i] % rbuf[i])
                        x &= low[i]
                    parts.reverse()
                    append("    " + " ".join(parts) + "\n")
                # the rip slot holds the fall-through address: rip shows only on a jump
                self._prev = (cur & norip) | ((addr + size) << ripsh)
                e = get(addr) or make(addr)
                if e.size != size:
                    e = self._redecode(addr)
                self._pe = e
                if e.at_start or e.func is not self._func:
                    self._func = e.func
                    append(e.header)
                append(e.line)
                if len(buf) > _FLUSH_AT:
                    write("".join(buf))
                    buf.clear()
            except BaseException as e:  # noqa: BLE001 - re-raised by Machine.run
                m.hook_failed(e)

        hook.native = True
        return hook

    def _slow_start(self, cur: int, addr: int):
        """First instruction of the trace (the start snapshot) or the repeated call for
        the start instruction; returns the snapshot to diff against, or None to skip."""
        if self._skip is not None:
            skip, self._skip = self._skip, None
            if skip == addr:
                return None
        if self._prev is None:
            fmt = self.fmt
            if fmt == "text":
                self._buf.append("# registers: " + " ".join(
                    [_REG_FMT[i] % _reg(cur, i) for i in _IDX]) + "\n")
            elif fmt == "jsonl":
                self._buf.append('{"type":"start","addr":"%#x","regs":{%s}}\n' % (addr, ",".join(
                    ['"%s":"%#x"' % (GPR_NAMES[i], _reg(cur, i)) for i in _IDX])))
            self._prev = cur
        return self._prev

    def _effects_text(self, cur: int, x: int) -> str:
        parts = [_REG_FMT[i] % _reg(cur, i) for i in _slots(x)]
        for addr, data in self._collect_mw(cur):
            if len(data) <= 8:
                parts.append(f"[{addr:#x}]={int.from_bytes(data, 'little'):#x}")
            else:
                parts.append(f"[{addr:#x}]={data.hex()}")
        return "    " + " ".join(parts) + "\n" if parts else ""

    def _event_text(self, kind, text, info):
        self._buf.append("    # " + text + "\n")

    def _effects_now(self, cur: int) -> None:
        """The pending instruction's effects, from a register read outside the hook."""
        p = self._prev
        if p is None:
            return
        fmt = self.fmt
        if fmt == "text":
            line = self._effects_text(cur, cur ^ p)
            if line:
                self._buf.append(line)
        elif fmt == "jsonl":
            self._jsonl_flush_pending(cur)
        elif fmt == "tenet":
            self._mw.clear()         # one line per instruction: the last one's effects
            #                          would need a line for an instruction never traced
        elif fmt == "chrome":
            rip = _reg(cur, _RIP)
            self._chrome_transition(self._entries.get(rip), rip)
        self._prev = None
        self._pe = None

    def _effects_none(self) -> None:
        """Close the pending instruction without register effects (exit)."""
        if self.fmt == "chrome":
            self._chrome_close_all(self._chrome_stack, self._tid)
        if self._prev is None:
            return
        if self.fmt == "jsonl":
            self._jsonl_flush_pending(self._prev)
        self._mw.clear()
        self._prev = None
        self._pe = None

    # ------------------------------------------------------------------ jsonl
    def _hook_jsonl(self, uc, addr, size, _):
        if self.machine.task is not self._task:
            self._switch(self.machine.task)
        cur = self._read()
        if self._prev is None or self._skip is not None:
            if self._slow_start(cur, addr) is None:
                return
        n = self.insns
        if n >= self._limit:
            self._effects_now(cur)
            self._stop_counting()
            return
        self.insns = n + 1
        self._jsonl_flush_pending(cur)
        self._prev = (cur & _NORIP) | ((addr + size) << _RIP_SH)
        e = self._entries.get(addr) or self._entry(addr)
        if e.size != size:
            e = self._redecode(addr)
        self._pe = e
        self._pe_i = n
        buf = self._buf
        if len(buf) > _FLUSH_AT:
            self.out.write("".join(buf))
            buf.clear()

    def _jsonl_flush_pending(self, cur: int) -> None:
        e = self._pe
        buf = self._buf
        if e is not None:
            obj = e.json + ',"i":%d,"regs":{%s}' % (self._pe_i, ",".join(
                ['"%s":"%#x"' % (GPR_NAMES[i], _reg(cur, i)) for i in _slots(cur ^ self._prev)]))
            if self._mw:
                obj += ',"mem":[%s]' % ",".join(
                    ['{"addr":"%#x","data":"%s"}' % (a, d.hex()) for a, d in self._collect_mw(cur)])
            buf.append(obj + "}\n")
        if self._events:
            buf.extend(self._events)
            self._events.clear()

    def _event_jsonl(self, kind, text, info):
        obj = {"type": "event", "i": self._pe_i if self._pe is not None else self.insns,
               "event": kind, "text": text}
        obj.update(_jsonable(info, kind))
        line = _dumps(obj) + "\n"
        if self._pe is not None:
            self._events.append(line)
        else:
            self._buf.append(line)

    # ------------------------------------------------------------------ tenet
    def _hook_tenet(self, uc, addr, size, _):
        cur = self._read()
        if self._skip is not None:
            skip, self._skip = self._skip, None
            if skip == addr:
                return
        n = self.insns
        if n >= self._limit:
            self._effects_now(cur)
            self._stop_counting()
            return
        self.insns = n + 1
        self._tenet_line(cur, addr)
        self._prev = cur
        buf = self._buf
        if len(buf) > _FLUSH_AT:
            self.out.write("".join(buf))
            buf.clear()

    def _tenet_line(self, cur: int, addr: int) -> None:
        """One Tenet line: the state before the instruction at ``addr``: the registers
        the previous instruction changed, rip, and the previous instruction's writes
        (the first line: every register)."""
        p = self._prev
        idx = [i for i in _TENET_REGS if i != _RIP] if p is None else _slots((cur ^ p) & _TENET_DIFF)
        parts = [_REG_FMT[i] % _reg(cur, i) for i in idx]
        parts.append("rip=%#x" % addr)
        if self._mw:
            parts.extend(["mw=%#x:%s" % (a, d.hex()) for a, d in self._collect_mw(cur)])
        self._buf.append(",".join(parts) + "\n")

    def _event_tenet(self, kind, text, info):
        pass

    # ------------------------------------------------------------------ chrome
    def _hook_chrome(self, uc, addr, size, _):
        if self.machine.task is not self._task:
            self._switch(self.machine.task)
        if self._skip is not None:
            skip, self._skip = self._skip, None
            if skip == addr:
                return
        n = self.insns
        if n >= self._limit:
            self._chrome_transition(self._entries.get(addr) or self._entry(addr), addr)
            self._prev = None
            self._stop_counting()
            return
        e = self._entries.get(addr) or self._entry(addr)
        if self._prev is None:
            self._prev = []
            self._chrome_open(e.func or f"{addr:#x}", "function")
            if e.region is not None:
                self._chrome_open(e.region, "uprobes")
        else:
            self._chrome_transition(e, addr)
        self.insns = n + 1
        self._pe = e

    def _chrome_transition(self, e, addr) -> None:
        """Spans opened/closed by going from the pending instruction to ``addr``."""
        pe = self._pe
        if pe is None:
            return
        ts = self.insns
        region = e.region if e is not None else None
        if pe.region is not None and pe.region != region:
            self._chrome_close_region()
        if pe.kind == _CALL and not pe.kernel and not (e is not None and e.kernel):
            self._chrome_open(self._chrome_name(e, addr), "function")
        elif pe.kind == _RET and not pe.kernel:
            stack = self._chrome_stack
            while stack:
                name, cat = stack.pop()
                self._chrome_emit('{"name":%s,"cat":"%s","ph":"E","ts":%d,"pid":%d,"tid":%d}' % (
                    _dumps(name), cat, ts, self._pid, self._tid))
                if cat == "function":
                    break
        if region is not None and pe.region != region:
            self._chrome_open(region, "uprobes")
        elif region is None and e is not None and not self._chrome_stack:
            # the trace began inside a function that has returned: its caller becomes
            # the outermost open span
            self._chrome_open(self._chrome_name(e, addr), "function")

    def _chrome_name(self, e, addr) -> str:
        if e is not None and e.region is None and e.func:
            return e.func
        if e is None:
            hit = symbol_of(self.machine, addr)
            if hit is not None:
                return hit[0]
        return f"{addr:#x}"

    def _chrome_open(self, name, cat) -> None:
        self._chrome_stack.append((name, cat))
        self._chrome_emit('{"name":%s,"cat":"%s","ph":"B","ts":%d,"pid":%d,"tid":%d}' % (
            _dumps(name), cat, self.insns, self._pid, self._tid))

    def _chrome_close_region(self) -> None:
        stack = self._chrome_stack
        if stack and stack[-1][1] == "uprobes":
            name, cat = stack.pop()
            self._chrome_emit('{"name":%s,"cat":"%s","ph":"E","ts":%d,"pid":%d,"tid":%d}' % (
                _dumps(name), cat, self.insns, self._pid, self._tid))

    def _chrome_close_all(self, stack: list, tid: int) -> None:
        while stack:
            name, cat = stack.pop()
            self._chrome_emit('{"name":%s,"cat":"%s","ph":"E","ts":%d,"pid":%d,"tid":%d}' % (
                _dumps(name), cat, self.insns, self._pid, tid))

    def _chrome_emit(self, text: str) -> None:
        if self._chrome_first:
            self._chrome_first = False
            self._buf.append(text)
        else:
            self._buf.append(",\n" + text)
        if len(self._buf) > _FLUSH_AT:
            self._flush()

    _CHROME_INSTANTS = {"uprobe_hit", "ret_handler", "syscall", "signal", "optimized",
                        "uretprobe_depth", "ftrace"}

    def _event_chrome(self, kind, text, info):
        if kind not in self._CHROME_INSTANTS:
            return
        if kind == "uprobe_hit":
            name = "uprobe " + (self._label(info["vaddr"]) or f"{info['vaddr']:#x}")
        elif kind == "ret_handler":
            name = "uretprobe " + (self._label(info["func"]) or f"{info['func']:#x}")
        elif kind == "syscall":
            name = "syscall " + SYSCALL_NAMES.get(info["nr"], str(info["nr"]))
        elif kind == "signal":
            name = signal_name(info["signo"])
        else:
            name = kind
        args = {"text": text}
        args.update(_jsonable(info, kind))
        ts = self.insns - 1 if self._pe is not None else self.insns
        self._chrome_emit('{"name":%s,"cat":"%s","ph":"i","s":"t","ts":%d,"pid":%d,"tid":%d,'
                          '"args":%s}' % (
            _dumps(name), "syscall" if kind == "syscall" else "uprobes", max(ts, 0),
            self._pid, self._tid, _dumps(args)))

    # ------------------------------------------------------------------ header/trailer
    @property
    def _pid(self) -> int:
        return self._proc.pid

    @property
    def _tid(self) -> int:
        return self._task.tid

    def _title(self) -> str:
        m = self.machine
        exe = m.process.exe
        return exe.path if exe is not None else m.process.comm

    def _write_header(self) -> None:
        self._header_written = True
        m = self.machine
        fmt = self.fmt
        kernel = m.profile.name
        if fmt == "text":
            self._buf.append(f"# uprobe-emu trace: {self._title()} (kernel {kernel}, pid {self._pid})\n")
        elif fmt == "chrome":
            self._buf.append('{"traceEvents":[\n')
            self._chrome_emit('{"name":"process_name","ph":"M","ts":0,"pid":%d,"tid":%d,'
                              '"args":{"name":%s}}' % (self._pid, self._tid,
                                                       _dumps(f"{self._title()} (kernel {kernel})")))
            self._chrome_emit('{"name":"thread_name","ph":"M","ts":0,"pid":%d,"tid":%d,'
                              '"args":{"name":%s}}' % (self._pid, self._tid, _dumps(m.process.comm)))

    def _write_trailer(self, reason: str) -> None:
        fmt = self.fmt
        if fmt == "text":
            self._buf.append(f"# end: {self.insns} instructions traced ({reason})\n")
        elif fmt == "jsonl":
            self._buf.append(_dumps({"type": "end", "insns": self.insns, "reason": reason}) + "\n")
        elif fmt == "chrome":
            self._chrome_close_all(self._chrome_stack, self._tid)
            for task, state in self._tstate.items():
                self._chrome_close_all(state[self._TASK_STATE.index("_chrome_stack")], task.tid)
            self._buf.append('\n],"displayTimeUnit":"ns","otherData":%s}\n' % _dumps(
                {"ts_unit": "instructions", "insns": self.insns, "reason": reason,
                 "kernel": self.machine.profile.name}))

    # ------------------------------------------------------------------ model events
    def _on_model_event(self, event) -> None:
        """An ``emu.events`` event: rendered by its kind name and fields."""
        self._on_event(event.kind, **event.fields())

    def _on_event(self, kind: str, **info) -> None:
        if not self.active:
            return
        self._in_event += 1
        try:
            self._handle_event(kind, info)
        finally:
            self._in_event -= 1

    def _handle_event(self, kind: str, info: dict) -> None:
        task = info.get("task")
        if not self._ours(task):
            return                              # another process: not on this trace
        try:
            text = self._describe(kind, info)
        except (KeyError, AttributeError, TypeError, ValueError):
            text = _generic(kind, info)        # an event whose fields changed shape
        if text is None:
            return
        self._event_fn(kind, text, info)
        try:
            self._track_kernel_writes(kind, info)
        except (KeyError, AttributeError, TypeError):
            pass
        if kind == "syscall" and self.sync_stdout:
            self._flush()
            self.out.flush()
        if kind == "syscall" and info["nr"] in _END_SYSCALLS:
            proc = task.process if task is not None else self._proc
            if info["nr"] == 60 and _live_tasks(proc) > 1:
                self._effects_none()            # a thread ends; the process goes on
            elif proc is self._proc:
                self._finish("guest exited", effects=False)
            else:
                self._effects_none()            # a vfork child on this CPU exits
        elif kind == "signal":
            proc = task.process if task is not None else self._proc
            if proc is self._proc:
                self._finish(f"guest killed by {signal_name(info['signo'])}")
            else:
                self._effects_none()

    def _track_kernel_writes(self, kind, info) -> None:
        """Stack writes the kernel model makes on the task's behalf (for ``mw``)."""
        if not self.mem_writes:
            return
        if kind == "uretprobe_hijack":
            self._mw.append((info["stack"], info["tramp"].to_bytes(8, "little")))
        elif kind == "emulated":
            au = info["uprobe"].arch
            if au is not None and au.kind in ("push", "call"):
                self._mw.append((None, 8))
        elif kind == "xol_done":
            au = info["uprobe"].arch
            if au is not None and au.fixups & FIX_CALL:
                self._mw.append((None, 8))
        elif kind == "sys_uretprobe":
            self._mw.append((None, 24))
        elif kind == "sys_uprobe":
            self._mw.append((None, 32))

    def _describe(self, kind: str, info: dict) -> str | None:
        w = self._where
        if kind == "syscall":
            nr = info["nr"]
            name = SYSCALL_NAMES.get(nr, "?")
            args = ", ".join(f"{a:#x}" for a in info["args"][:_NARGS.get(nr, 6)])
            if nr == 336:
                self._in_sys_uprobe = True
            mark = "*** " if nr in (335, 336) else ""
            return f"{mark}syscall {nr} {name}({args})"
        if kind == "syscall_return":
            nr = info["nr"]
            self._in_sys_uprobe = False
            task = info.get("task")
            if getattr(task, "state", "running") == "blocked":
                return (f"syscall {nr} {SYSCALL_NAMES.get(nr, '?')} blocks: task {task.tid} "
                        f"sleeps ({getattr(task, 'blocked_on', None) or 'waiting'})")
            ret = _signed(info["ret"])
            name = SYSCALL_NAMES.get(nr, "?")
            val = f"{ret:#x}" if ret >= 0 else f"{ret} ({_errno_name(-ret)})"
            mark = "*** " if nr in (335, 336) else ""
            return f"{mark}syscall {nr} {name} returns {val}, resume at {w(info['rip'])}"
        if kind == "signal":
            text = f"signal {signal_name(info['signo'])} at rip {w(info['rip'])}"
            if info.get("addr") is not None:
                text += f", address {info['addr']:#x}"
            if info.get("detail"):
                text += f" ({info['detail']})"
            return text
        if kind == "uprobe_hit":
            up = info["uprobe"]
            via = "uprobe syscall" if self._in_sys_uprobe else "int3 trap"
            n = len(up.consumers)
            return (f"{via}: uprobe hit at {w(info['vaddr'])} ({up.file.path}:{up.offset:#x}, "
                    f"{n} consumer{'s' if n != 1 else ''})")
        if kind == "handler":
            rc = _RC_NAMES.get(info["rc"], info["rc"])
            return f"handler of {_consumer(info['consumer'])} returns {rc}"
        if kind == "emulated":
            au = info["uprobe"].arch
            what = au.text if au is not None else "instruction"
            return f"emulated '{what}' (no single-step) -> rip={w(info['new_ip'])}"
        if kind == "xol_area":
            return f"XOL area [uprobes] mapped at {info['vaddr']:#x} (slot 0: uretprobe trampoline)"
        if kind == "xol_step":
            au = info["uprobe"].arch
            what = au.text if au is not None else "instruction"
            orig = au.insn[:au.ilen] if au is not None else b""
            ixol = au.ixol[:au.ilen] if au is not None else b""
            extra = ""
            if au is not None and au.scratch:
                extra = f", rip-relative operand rewritten to use {au.scratch}"
            elif orig != ixol:
                extra = f", bytes {ixol.hex(' ')}"
            return (f"XOL: '{what}' copied to slot {info['slot']} at {info['xol_vaddr']:#x}{extra}; "
                    f"TF set, single-stepping out of line")
        if kind == "xol_done":
            au = info["uprobe"].arch
            fix = []
            if au is not None:
                if au.fixups & FIX_IP:
                    fix.append("ip")
                if au.fixups & FIX_CALL:
                    fix.append("call")
                if au.fixups & FIX_SETF:
                    fix.append("setf")
                if au.scratch:
                    fix.append(f"restore {au.scratch}")
            fixes = ", ".join(fix) if fix else "none"
            return f"#DB after the single-step: XOL fixups ({fixes}) -> rip={w(info['new_ip'])}"
        if kind == "ip_changed":
            return (f"a handler changed ip to {w(info['new_ip'])}: the probed instruction is "
                    f"skipped")
        if kind == "text_poke":
            data = info["data"]
            return f"text_poke {w(info['vaddr'])}: {bytes(data).hex(' ')} ({info.get('why', '')})"
        if kind == "uretprobe_hijack":
            chained = " (chained)" if info.get("chained") else ""
            return (f"uretprobe: return address at [{info['stack']:#x}] {w(info['orig'])} -> "
                    f"trampoline {info['tramp']:#x}{chained}")
        if kind == "uretprobe_return":
            return f"uretprobe trampoline done: return to {w(info['new_ip'])}"
        if kind == "ret_handler":
            return (f"ret_handler of {_consumer(info['consumer'])} for {w(info['func'])}, "
                    f"returning to {w(info['ret'])}")
        if kind == "ri_discarded":
            ri = info["ri"]
            return (f"return instance of {w(ri.func)} discarded (its frame at {ri.stack:#x} "
                    f"is gone)")
        if kind == "uretprobe_depth":
            return "uretprobe depth limit reached: this return is not probed"
        if kind == "sys_uretprobe":
            return "sys_uretprobe: registers restored from the trampoline's stack"
        if kind == "optimized":
            return (f"optimized: {w(info['vaddr'])} now calls the trampoline at "
                    f"{info['tramp']:#x} (next hits enter through syscall 336)")
        if kind == "trampoline_mapped":
            return f"[uprobes-trampoline] mapped at {info['vaddr']:#x}"
        if kind == "sys_uprobe":
            return f"sys_uprobe: the optimized probe at {w(info['vaddr'])}"
        if kind == "optimize_failed":
            return f"optimization of {w(info['vaddr'])} failed: it keeps its int3"
        if kind == "ftrace":
            return f"ftrace: {info['line'].strip()}"
        if kind == "clone":
            child = info["child"]
            what = "thread" if child.process is info["task"].process else f"process {child.process.pid}"
            return f"clone: new task {child.tid} ({what}), flags {info.get('flags', 0):#x}"
        if kind.startswith("_"):
            return None                        # private to the model
        return _generic(kind, info)


def _generic(kind: str, info: dict) -> str:
    """``kind field=value ...`` for an event this module has no sentence for."""
    fields = " ".join(f"{k}={v}" for k, v in _jsonable(info, kind).items())
    return f"{kind} {fields}".rstrip()


def _live_tasks(proc) -> int:
    return sum(1 for t in getattr(proc, "tasks", ()) if getattr(t, "state", "running") != "dead")


def _consumer(uc) -> str:
    name = getattr(uc, "name", "") or ""
    return f"consumer #{uc.id}" + (f" {name}" if name else "")


def _errno_name(n: int) -> str:
    return errno.errorcode.get(n, f"errno {n}")


_PLAIN_INT_KEYS = frozenset({"nr", "slot", "rc", "signo", "id"})


def _jsonable(info: dict, kind: str = "") -> dict:
    """An event's fields as JSON values (addresses as hex strings)."""
    out = {}
    for k, v in info.items():
        if k == "task":
            out["tid"] = v.tid
        elif hasattr(v, "tid"):
            out[k] = {"tid": v.tid, "pid": getattr(getattr(v, "process", None), "pid", None)}
        elif k == "uprobe":
            out["uprobe"] = {"path": v.file.path, "offset": f"{v.offset:#x}"}
        elif k == "consumer":
            out["consumer"] = {"id": v.id, "name": v.name}
        elif k == "ri":
            out["ri"] = {"func": f"{v.func:#x}", "stack": f"{v.stack:#x}"}
        elif isinstance(v, bool) or v is None or isinstance(v, str):
            out[k] = v
        elif isinstance(v, int):
            if k in _PLAIN_INT_KEYS:
                out[k] = v
            elif k == "ret" and kind == "syscall_return":
                out[k] = _signed(v)
            else:
                out[k] = f"{v:#x}"
        elif isinstance(v, (bytes, bytearray)):
            out[k] = bytes(v).hex()
        elif isinstance(v, (tuple, list)):
            out[k] = [f"{x:#x}" if isinstance(x, int) else str(x) for x in v]
        else:
            out[k] = str(v)
    return out


# ---------------------------------------------------------------------------- CLI

def add_cli(sub, add_machine_options) -> None:
    p = sub.add_parser(
        "trace", help="trace every instruction, with the uprobes model's work interleaved",
        description="Run PROGRAM [ARGS...] and write an instruction trace: objdump-style "
                    "lines with the registers each instruction changed and the kernel "
                    "model's events (text), JSON lines, Tenet deltas, or Chrome trace "
                    "events (Perfetto).  Guest arguments that start with '-' go after '--'.")
    p.add_argument("program", metavar="PROGRAM")
    p.add_argument("args", nargs="*", metavar="ARGS")
    add_machine_options(p)
    p.add_argument("--from", dest="start", metavar="SYMBOL",
                   help="start tracing when the guest reaches SYMBOL[+OFF] or an address")
    p.add_argument("--count", type=_count, metavar="N",
                   help="trace at most N instructions (the guest then runs on untraced)")
    p.add_argument("--format", dest="fmt", choices=FORMATS, default="text",
                   help="text (default), jsonl, tenet or chrome")
    p.add_argument("-o", "--output", metavar="FILE", help="write the trace here (default stdout)")
    p.add_argument("--mem", action="store_true",
                   help="also record memory writes (always on for tenet)")
    p.set_defaults(func=cmd_trace)


def _count(text: str) -> int:
    try:
        n = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return n


def cmd_trace(args) -> int:
    to_stdout = not args.output
    # A machine-readable trace on stdout keeps stdout for the trace alone; the guest's
    # own output then goes to stderr after the run.
    passthrough = not to_stdout or args.fmt == "text"
    m = make_machine(args, passthrough=passthrough)
    out = None
    if args.output:
        try:
            out = open(args.output, "w")
        except OSError as e:
            raise InputError(f"cannot write the trace to {args.output!r}: {e.strerror}") from None
    try:
        tracer = Tracer(m, args.fmt, out, start=args.start, count=args.count,
                        mem=True if args.mem else None)
        if args.event:
            m.uprobes.add_events(args.event, output=tracer.ftrace_output(sys.stderr))
        with m.interruptible():
            result = m.run(max_insns=args.max_insns or None, timeout=args.timeout or None)
        tracer.close()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise InputError(f"cannot write the trace: {e.strerror or e}") from None
    finally:
        if out is not None:
            out.close()
    if not passthrough:
        sys.stdout.flush()
        for data in (m.stdout, m.stderr):
            if data:
                sys.stderr.buffer.write(bytes(data))
        sys.stderr.flush()
    if args.start is not None and not tracer.insns:
        print_error(f"uprobe-emu: trace: {args.start} was never reached")
    return report_result(result, m)


def _bench(n: int = 500_000, fmts=("text",), repeat: int = 3) -> None:
    """``python -m emu.trace [N] [FORMAT...]``: traced instructions per second for
    guest:fib traced to a temporary file (best of ``repeat``)."""
    for fmt in fmts:
        best = float("inf")
        for _ in range(repeat):
            m = Machine.from_guest("fib", argv=["fib", "100000000"])
            with tempfile.TemporaryFile("w") as f:
                t0 = time.perf_counter()
                t = Tracer(m, fmt, f, count=n)
                m.run(max_insns=n + 10)
                t.close()
                f.flush()
                best = min(best, time.perf_counter() - t0)
        print(f"{fmt}: {n} instructions in {best:.3f} s = {n / best / 1e6:.3f} M traced insns/s")


if __name__ == "__main__":
    _bench(int(sys.argv[1]) if len(sys.argv) > 1 else 500_000, tuple(sys.argv[2:]) or ("text",))
