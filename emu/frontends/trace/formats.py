"""The trace's output formats: one small class per format, which the
:class:`~emu.frontends.trace.tracer.Tracer` calls.

The tracer is the engine (hooks, activation, counting, task switches, the decode cache,
the pending instruction and its register snapshot, buffering); a format turns that into
lines.  A format object is created by the tracer for itself and reads the tracer's
pending-instruction state (``_prev``, ``_pe``, ``_mw``, ``_buf`` ...): the two are one
unit split by concern, not independent components.  What a format provides:

``make_hook()``
    the per-instruction code hook ``(uc, addr, size, user_data)`` (one marked
    ``native`` is added to the machine as it is; the tracer wraps the others).
``header()`` / ``start(cur, addr)`` / ``trailer(reason, off_cpu)``
    the format's first line(s), the line for the first register snapshot, the end.
``effects(cur)`` / ``drop_effects()`` / ``task_ends()``
    the pending instruction's effects read after the hook (at the end of the trace),
    the pending instruction closed without effects (its task ended inside it), and the
    task's open state closed.
``event(kind, text, info)`` / ``switch(task, text)``
    a model event (text from :mod:`.describe`) and a task switch marker.
``save_task()`` / ``load_task(state)``
    the format's per-task state when tasks switch (``per_task`` formats only).

Register snapshots are one Python int each (see :func:`slots`).
"""

from __future__ import annotations

import json

from emu.debug.disasm import symbol_of
from emu.frontends.trace.describe import instant_name, jsonable
from emu.inspect import GPR_NAMES

RIP = GPR_NAMES.index("rip")
RSP = GPR_NAMES.index("rsp")
NREGS = len(GPR_NAMES)
IDX = tuple(range(NREGS))
REG_FMT = tuple(n + "=%#x" for n in GPR_NAMES)
# Tenet's x86_64 register set (no flags, no segment bases)
TENET_REGS = tuple(i for i, n in enumerate(GPR_NAMES) if n not in ("eflags", "fs_base", "gs_base"))

# A register snapshot is one Python int: the batch buffer read as 20 little-endian
# 64-bit slots.  XOR with the previous snapshot and walking its set slots is the
# cheapest diff CPython offers (one C call instead of twenty comparisons).
M64 = (1 << 64) - 1
RIP_SH = 64 * RIP
NORIP = ((1 << (64 * NREGS)) - 1) & ~(M64 << RIP_SH)
LOW = tuple((1 << (64 * i)) - 1 for i in range(NREGS))  # slots below i
TENET_DIFF = sum(M64 << (64 * i) for i in TENET_REGS if i != RIP)

FLUSH_AT = 1024  # buffered pieces before a write
CALL, RET = 1, 2  # an entry's control-transfer kind (chrome spans)


def slots(x: int) -> list[int]:
    """Indexes of the non-zero 64-bit slots of ``x``, ascending."""
    out = []
    while x:
        i = (x.bit_length() - 1) >> 6
        out.append(i)
        x &= LOW[i]
    out.reverse()
    return out


def reg(snap: int, i: int) -> int:
    """Register ``i`` of a snapshot."""
    return (snap >> (64 * i)) & M64


def dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


class Format:
    """What every format does by default: nothing."""

    name = ""
    default_mem = False  # record memory writes unless told otherwise
    hooks_mem = True  # memory writes can be recorded at all
    per_task = True  # each task keeps its own pending instruction and snapshot

    def __init__(self, tracer):
        self.t = tracer

    def make_hook(self):
        return self.hook

    def hook(self, uc, addr, size, _ud) -> None:
        raise NotImplementedError

    def header(self) -> None:
        pass

    def start(self, cur: int, addr: int) -> None:
        pass

    def effects(self, cur: int) -> None:
        pass

    def drop_effects(self) -> None:
        pass

    def task_ends(self) -> None:
        pass

    def event(self, kind: str, text: str, info: dict) -> None:
        pass

    def switch(self, task, text: str) -> None:
        pass

    def save_task(self):
        return None

    def load_task(self, state) -> None:
        pass

    def trailer(self, reason: str, off_cpu: dict) -> None:
        pass


class TextFormat(Format):
    """``objdump -d`` lines, changed registers, ``# event`` lines."""

    name = "text"

    def make_hook(self):
        """The per-instruction callback: a closure over everything it touches that does
        not change while tracing (one call per instruction, the hot path)."""
        t = self.t
        rd = t._read
        fn, uch, ids, ptrs, nregs, rbuf = rd.fn, rd.uch, rd.ids, rd.ptrs, rd.n, rd.buf
        frombytes = int.from_bytes
        buf = t._buf
        append = buf.append
        get = t._entries.get
        make = t._entry
        write = t.out.write
        limit = t._limit
        effects_text = self.effects_text
        fmts, low, norip, ripsh = REG_FMT, LOW, NORIP, RIP_SH
        m = t.machine

        def hook(_uc, addr, size, _ud):
            try:
                if m.task is not t._task:
                    t._switch(m.task)
                if fn(uch, ids, ptrs, nregs):
                    raise RuntimeError("uc_reg_read_batch failed")
                cur = frombytes(rbuf, "little")
                p = t._prev
                if p is None or t._skip is not None:
                    p = t._slow_start(cur, addr)
                    if p is None:
                        return
                n = t.insns
                if n >= limit:
                    t._effects_now(cur)
                    t._stop_counting()
                    return
                t.insns = n + 1
                x = cur ^ p
                if t._mw:
                    append(effects_text(cur, x))
                elif x:
                    parts = []
                    while x:
                        i = (x.bit_length() - 1) >> 6
                        parts.append(fmts[i] % rbuf[i])
                        x &= low[i]
                    parts.reverse()
                    append("    " + " ".join(parts) + "\n")
                # the rip slot holds the fall-through address: rip shows only on a jump
                t._prev = (cur & norip) | ((addr + size) << ripsh)
                e = get(addr) or make(addr)
                if e.size != size:
                    e = t._redecode(addr)
                t._pe = e
                if e.at_start or e.func is not t._func:
                    t._func = e.func
                    append(e.header)
                append(e.line)
                if len(buf) > FLUSH_AT:
                    write("".join(buf))
                    buf.clear()
            except BaseException as e:  # noqa: BLE001 - re-raised by Machine.run
                m.hook_failed(e)

        hook.native = True
        return hook

    def header(self) -> None:
        t = self.t
        t._buf.append(f"# uprobe-emu trace: {t._title()} (kernel {t.machine.profile.name}, pid {t._pid})\n")

    def start(self, cur: int, addr: int) -> None:
        self.t._buf.append("# registers: " + " ".join([REG_FMT[i] % reg(cur, i) for i in IDX]) + "\n")

    def effects_text(self, cur: int, x: int) -> str:
        """``    reg=val ... [addr]=val`` for the pending instruction (``x``: the changed
        slots), with its memory writes."""
        parts = [REG_FMT[i] % reg(cur, i) for i in slots(x)]
        for addr, data in self.t._collect_mw(cur):
            if len(data) <= 8:
                parts.append(f"[{addr:#x}]={int.from_bytes(data, 'little'):#x}")
            else:
                parts.append(f"[{addr:#x}]={data.hex()}")
        return "    " + " ".join(parts) + "\n" if parts else ""

    def effects(self, cur: int) -> None:
        line = self.effects_text(cur, cur ^ self.t._prev)
        if line:
            self.t._buf.append(line)

    def event(self, kind, text, info) -> None:
        self.t._buf.append("    # " + text + "\n")

    def switch(self, task, text) -> None:
        self.t._buf.append(f"\n# {text}\n")

    def trailer(self, reason, off_cpu) -> None:
        self.t._buf.append(f"# end: {self.t.insns} instructions traced ({reason})\n")


class JsonlFormat(Format):
    """One JSON object per line; an instruction's events follow its ``insn`` object."""

    name = "jsonl"

    def __init__(self, tracer):
        super().__init__(tracer)
        self.pe_i = 0  # the pending instruction's index
        self.events = []  # lines of the events of the pending instruction

    def hook(self, uc, addr, size, _):
        t = self.t
        if t.machine.task is not t._task:
            t._switch(t.machine.task)
        cur = t._read()
        if t._prev is None or t._skip is not None:
            if t._slow_start(cur, addr) is None:
                return
        n = t.insns
        if n >= t._limit:
            t._effects_now(cur)
            t._stop_counting()
            return
        t.insns = n + 1
        self.flush_pending(cur)
        t._prev = (cur & NORIP) | ((addr + size) << RIP_SH)
        e = t._entries.get(addr) or t._entry(addr)
        if e.size != size:
            e = t._redecode(addr)
        t._pe = e
        self.pe_i = n
        buf = t._buf
        if len(buf) > FLUSH_AT:
            t.out.write("".join(buf))
            buf.clear()

    def start(self, cur: int, addr: int) -> None:
        self.t._buf.append(
            '{"type":"start","addr":"%#x","regs":{%s}}\n'
            % (addr, ",".join(['"%s":"%#x"' % (GPR_NAMES[i], reg(cur, i)) for i in IDX]))
        )

    def flush_pending(self, cur: int) -> None:
        """The pending instruction's ``insn`` object (registers it changed, memory it
        wrote), then its events."""
        t = self.t
        e = t._pe
        buf = t._buf
        if e is not None:
            obj = e.json + ',"i":%d,"regs":{%s}' % (
                self.pe_i,
                ",".join(['"%s":"%#x"' % (GPR_NAMES[i], reg(cur, i)) for i in slots(cur ^ t._prev)]),
            )
            if t._mw:
                obj += ',"mem":[%s]' % ",".join(
                    ['{"addr":"%#x","data":"%s"}' % (a, d.hex()) for a, d in t._collect_mw(cur)]
                )
            buf.append(obj + "}\n")
        if self.events:
            buf.extend(self.events)
            self.events.clear()

    def effects(self, cur: int) -> None:
        self.flush_pending(cur)

    def drop_effects(self) -> None:
        self.flush_pending(self.t._prev)

    def event(self, kind, text, info) -> None:
        t = self.t
        obj = {"type": "event", "i": self.pe_i if t._pe is not None else t.insns, "event": kind, "text": text}
        obj.update(jsonable(info, kind))
        line = dumps(obj) + "\n"
        if t._pe is not None:
            self.events.append(line)
        else:
            t._buf.append(line)

    def switch(self, task, text) -> None:
        self.t._buf.append(
            dumps({"type": "event", "i": self.t.insns, "event": "switch", "text": text, "tid": task.tid}) + "\n"
        )

    def save_task(self):
        return self.pe_i, self.events

    def load_task(self, state) -> None:
        self.pe_i, self.events = state if state is not None else (0, [])

    def trailer(self, reason, off_cpu) -> None:
        self.t._buf.append(dumps({"type": "end", "insns": self.t.insns, "reason": reason}) + "\n")


class TenetFormat(Format):
    """Tenet's delta lines: the state before each instruction."""

    name = "tenet"
    default_mem = True
    per_task = False  # one state stream: the next line carries the difference

    def hook(self, uc, addr, size, _):
        t = self.t
        cur = t._read()
        if t._skip is not None:
            skip, t._skip = t._skip, None
            if skip == addr:
                return
        n = t.insns
        if n >= t._limit:
            t._effects_now(cur)
            t._stop_counting()
            return
        t.insns = n + 1
        self.line(cur, addr)
        t._prev = cur
        buf = t._buf
        if len(buf) > FLUSH_AT:
            t.out.write("".join(buf))
            buf.clear()

    def line(self, cur: int, addr: int) -> None:
        """One Tenet line: the state before the instruction at ``addr``: the registers
        the previous instruction changed, rip, and the previous instruction's writes
        (the first line: every register)."""
        t = self.t
        p = t._prev
        idx = [i for i in TENET_REGS if i != RIP] if p is None else slots((cur ^ p) & TENET_DIFF)
        parts = [REG_FMT[i] % reg(cur, i) for i in idx]
        parts.append("rip=%#x" % addr)
        if t._mw:
            parts.extend(["mw=%#x:%s" % (a, d.hex()) for a, d in t._collect_mw(cur)])
        t._buf.append(",".join(parts) + "\n")

    def effects(self, cur: int) -> None:
        # one line per instruction: the last one's effects would need a line for an
        # instruction never traced
        self.t._mw.clear()


class ChromeFormat(Format):
    """Chrome trace events: spans per function and kernel-model region, instants for
    the model's events; ``ts`` is the instruction index."""

    name = "chrome"
    hooks_mem = False

    def __init__(self, tracer):
        super().__init__(tracer)
        self.stack = []  # open spans: (name, cat)
        self.first = True  # no event written yet (no separator)
        self.named = {tracer._task}  # tasks with a thread_name

    def hook(self, uc, addr, size, _):
        t = self.t
        if t.machine.task is not t._task:
            t._switch(t.machine.task)
        if t._skip is not None:
            skip, t._skip = t._skip, None
            if skip == addr:
                return
        n = t.insns
        if n >= t._limit:
            self.transition(t._entries.get(addr) or t._entry(addr), addr)
            t._prev = None
            t._stop_counting()
            return
        e = t._entries.get(addr) or t._entry(addr)
        if t._prev is None:
            t._prev = []
            self.open(e.func or f"{addr:#x}", "function")
            if e.region is not None:
                self.open(e.region, "uprobes")
        else:
            self.transition(e, addr)
        t.insns = n + 1
        t._pe = e

    def transition(self, e, addr) -> None:
        """Spans opened/closed by going from the pending instruction to ``addr``."""
        t = self.t
        pe = t._pe
        if pe is None:
            return
        ts = t.insns
        region = e.region if e is not None else None
        if pe.region is not None and pe.region != region:
            self.close_region()
        if pe.kind == CALL and not pe.kernel and not (e is not None and e.kernel):
            self.open(self.span_name(e, addr), "function")
        elif pe.kind == RET and not pe.kernel:
            stack = self.stack
            while stack:
                name, cat = stack.pop()
                self.emit(
                    '{"name":%s,"cat":"%s","ph":"E","ts":%d,"pid":%d,"tid":%d}' % (dumps(name), cat, ts, t._pid, t._tid)
                )
                if cat == "function":
                    break
        if region is not None and pe.region != region:
            self.open(region, "uprobes")
        elif region is None and e is not None and not self.stack:
            # the trace began inside a function that has returned: its caller becomes
            # the outermost open span
            self.open(self.span_name(e, addr), "function")

    def span_name(self, e, addr) -> str:
        if e is not None and e.region is None and e.func:
            return e.func
        if e is None:
            hit = symbol_of(self.t.machine, addr)
            if hit is not None:
                return hit[0]
        return f"{addr:#x}"

    def open(self, name, cat) -> None:
        t = self.t
        self.stack.append((name, cat))
        self.emit(
            '{"name":%s,"cat":"%s","ph":"B","ts":%d,"pid":%d,"tid":%d}' % (dumps(name), cat, t.insns, t._pid, t._tid)
        )

    def close_region(self) -> None:
        stack = self.stack
        if stack and stack[-1][1] == "uprobes":
            t = self.t
            name, cat = stack.pop()
            self.emit(
                '{"name":%s,"cat":"%s","ph":"E","ts":%d,"pid":%d,"tid":%d}'
                % (dumps(name), cat, t.insns, t._pid, t._tid)
            )

    def close_all(self, stack: list, tid: int) -> None:
        t = self.t
        while stack:
            name, cat = stack.pop()
            self.emit(
                '{"name":%s,"cat":"%s","ph":"E","ts":%d,"pid":%d,"tid":%d}' % (dumps(name), cat, t.insns, t._pid, tid)
            )

    def emit(self, text: str) -> None:
        buf = self.t._buf
        if self.first:
            self.first = False
            buf.append(text)
        else:
            buf.append(",\n" + text)
        if len(buf) > FLUSH_AT:
            self.t._flush()

    def header(self) -> None:
        t = self.t
        kernel = t.machine.profile.name
        t._buf.append('{"traceEvents":[\n')
        self.emit(
            '{"name":"process_name","ph":"M","ts":0,"pid":%d,"tid":%d,'
            '"args":{"name":%s}}' % (t._pid, t._tid, dumps(f"{t._title()} (kernel {kernel})"))
        )
        self.emit(
            '{"name":"thread_name","ph":"M","ts":0,"pid":%d,"tid":%d,'
            '"args":{"name":%s}}' % (t._pid, t._tid, dumps(t.machine.process.comm))
        )

    def effects(self, cur: int) -> None:
        rip = reg(cur, RIP)
        self.transition(self.t._entries.get(rip), rip)

    def task_ends(self) -> None:
        self.close_all(self.stack, self.t._tid)

    def event(self, kind, text, info) -> None:
        name = instant_name(kind, info, self.t._label)
        if name is None:
            return
        t = self.t
        args = {"text": text}
        args.update(jsonable(info, kind))
        ts = t.insns - 1 if t._pe is not None else t.insns
        self.emit(
            '{"name":%s,"cat":"%s","ph":"i","s":"t","ts":%d,"pid":%d,"tid":%d,'
            '"args":%s}'
            % (dumps(name), "syscall" if kind == "syscall" else "uprobes", max(ts, 0), t._pid, t._tid, dumps(args))
        )

    def switch(self, task, text) -> None:
        if task not in self.named:
            t = self.t
            self.named.add(task)
            self.emit(
                '{"name":"thread_name","ph":"M","ts":%d,"pid":%d,"tid":%d,'
                '"args":{"name":%s}}' % (t.insns, t._pid, task.tid, dumps(f"{task.comm} {task.tid}"))
            )

    def save_task(self):
        return self.stack

    def load_task(self, state) -> None:
        self.stack = state if state is not None else []

    def trailer(self, reason, off_cpu) -> None:
        t = self.t
        self.close_all(self.stack, t._tid)
        for task, state in off_cpu.items():
            self.close_all(state, task.tid)
        t._buf.append(
            '\n],"displayTimeUnit":"ns","otherData":%s}\n'
            % dumps({"ts_unit": "instructions", "insns": t.insns, "reason": reason, "kernel": t.machine.profile.name})
        )


FORMAT_CLASSES = {cls.name: cls for cls in (TextFormat, JsonlFormat, TenetFormat, ChromeFormat)}
FORMATS = tuple(FORMAT_CLASSES)  # as emu.frontends.trace.args.FORMAT_NAMES lists them
