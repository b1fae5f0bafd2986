"""The tracer: the engine of tracing.  It hooks the machine through the Machine API
(a code hook on the start address, then a whole-address-space code hook, memory-write
hooks), activates at ``start=``, counts instructions, follows task switches, keeps the
pending instruction and its register snapshot, caches formatted decodes and buffers the
output; a format object (:mod:`.formats`) writes the lines and :mod:`.describe` words
the model's events.
"""

from __future__ import annotations

import os
import sys

from emu.debug.disasm import Disassembler, format_objdump_line, symbol_of
from emu.frontends.trace.describe import describe, generic
from emu.frontends.trace.formats import CALL, FORMAT_CLASSES, FORMATS, RET, RSP, dumps, reg
from emu.inspect import GuestFault, is_writable_code, optimized_call_size, signal_name, xol_fixups
from kernel_model.errors import EmuError, InputError, SymbolError, printable

_XOL_SLOT_BYTES = 128
_END_SYSCALLS = (60, 231)  # exit, exit_group: the single task ends
_MAP_SYSCALLS = (9, 10, 25)  # mmap, mprotect, mremap: a pending --from may be mapped now


class _Entry:
    """One traced address, formatted once (until the text there changes)."""

    __slots__ = (
        "addr",
        "size",
        "line",
        "header",
        "func",
        "at_start",
        "kind",
        "region",
        "kernel",
        "label",
        "asm",
        "json",
    )

    def __init__(self, addr, size, line, label, func, at_start, kind, region, kernel, asm, json_):
        self.addr, self.size, self.line, self.label = addr, size, line, label
        self.header = f"\n{addr:016x} <{label}>:\n" if label else f"\n{addr:016x}:\n"
        self.func, self.at_start, self.kind = func, at_start, kind
        self.region, self.kernel, self.asm, self.json = region, kernel, asm, json_


class _FtraceOut:
    """File-like sink for tracefs event lines (``-e SPEC``): they become trace events
    while tracing, and go to ``fallback`` (as written) otherwise.  Each write is one
    event's line: a string fetcharg holding a newline or other control bytes is part
    of it, and the trace (one event per line) shows them escaped (``\\x0a``)."""

    def __init__(self, tracer, fallback=None):
        self.tracer, self.fallback = tracer, fallback

    def write(self, text: str) -> int:
        if not self.tracer.active:
            if self.fallback is not None:
                self.fallback.write(text)
            return len(text)
        line = text[:-1] if text.endswith("\n") else text
        if line:
            self.tracer._on_event("ftrace", line=printable(line))
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
        start: where tracing begins: an address, or ``SYMBOL[+OFF]`` - a symbol of
            the program, else of the first file the process maps that defines it (a
            library's symbol waits for the library, as a pending gdb breakpoint) - or
            ``PATH:SYMBOL[+OFF]`` of any file (``libc:malloc``, resolved as a probe
            spec's PATH is); None traces from the next instruction.  Like a uprobe, a
            file's symbol is reached in whichever mapping of the file runs it, after an
            execve too (a bare symbol then names one of the new program's).
        count: trace at most this many instructions (the guest keeps running untraced).
        mem: also record the guest's memory writes (default: only for ``tenet``).

    The trace is flushed and finished when the guest exits or is killed, when
    ``count`` is reached (flushed), and at :meth:`close` (or the end of a ``with``
    block), which a run that ends on its budget, timeout or a stop request needs.
    """

    def __init__(
        self, machine, fmt: str = "text", out=None, *, start=None, count: int | None = None, mem: bool | None = None
    ):
        if fmt not in FORMATS:
            raise InputError(f"unknown trace format {fmt!r}; choose one of: {', '.join(FORMATS)}")
        if count is not None and count < 0:
            raise InputError("the instruction count must not be negative")
        self.machine = machine
        self.fmt = fmt
        self.count = count
        fmt_cls = FORMAT_CLASSES[fmt]
        self.mem_writes = fmt_cls.default_mem if mem is None else bool(mem)
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
        self.sync_stdout = out is sys.stdout  # keep the guest's passthrough output in place
        self.insns = 0  # instructions traced so far
        self.active = False
        self.finished = False
        self.end_reason = ""
        self._dis = Disassembler(machine)
        self._entries: dict[int, _Entry] = {}
        self._buf: list[str] = []
        self._prev: int | None = None  # register snapshot (rip slot: expected next)
        self._pe: _Entry | None = None  # the instruction whose effects are pending
        self._func = None
        self._skip = None
        self._mw: list = []  # memory the pending insn wrote (see _collect_mw)
        self._in_sys_uprobe = False
        self._code_hook = None
        self._mem_hook = None
        self._smc_hooks: list = []
        self._start_hooks: dict = {}  # address -> the code hook waiting there
        self._no_symbol: set = set()  # files known not to define a bare start
        self._header_written = False
        self._mm = machine.mem  # identifies the traced address space
        self._proc = machine.process  # the traced process (its threads share the CPU)
        self._task = machine.task  # the task whose trace state is loaded
        self._tstate: dict = {}  # off-CPU tasks: their pending trace state
        self._read = machine.snapshot_reader()
        self._limit = count if count is not None else 1 << 62
        self._format = fmt_cls(self)  # writes the lines (see .formats)
        self._hook = self._format.make_hook()
        self._listening = False
        self._started = False
        self._in_event = 0
        machine.mem.text_write_listeners.append(self._invalidate)
        self._start_spec = start
        self.start_addr: int | None = None
        if start is None:
            self._activate()
        else:
            self._start = self._resolve(start)
            self._arm_start()
            if (
                self._start[0] == "name"
                and not self._start_hooks
                and machine.process.exe is not None
                and machine.process.exe.elf is not None
                and machine.process.exe.elf.interp is None
            ):
                machine.resolve(self._start[1])  # a static program: its error now
            # the trace follows execve and mmap before it starts (re-arming the start)
            self._listening = machine.events.subscribe(self._on_model_event)

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

    def __exit__(self, *exc) -> None:
        self.close()

    def ftrace_output(self, fallback=None):
        """A file-like object for ``uprobes.add_event(..., output=)``: tracefs lines
        become ``ftrace`` events of this trace (``fallback`` gets them while not tracing)."""
        return _FtraceOut(self, fallback)

    # ------------------------------------------------------------------ lifecycle
    def _resolve(self, start) -> tuple:
        """``("addr", address)``, ``("file", file, offset)`` for ``PATH:SYMBOL[+OFF]``
        (:meth:`emu.probes.targets.ProbeTargets.resolve_target`, as a probe spec), or
        ``("name", symbol, delta)`` for a bare symbol (found at each :meth:`_arm_start`)."""
        if isinstance(start, int):
            return ("addr", start)
        text = str(start).strip()
        try:
            return ("addr", int(text, 0))
        except ValueError:
            pass
        if ":" in text:
            return ("file",) + self.machine.uprobes.resolve_target(text)
        name, _, off = text.partition("+")
        try:
            delta = int(off, 0) if off else 0
        except ValueError:
            raise SymbolError(f"bad offset {off!r} in {text!r}") from None
        return ("name", name.strip(), delta)

    def _start_vaddrs(self) -> list[int]:
        """Where the start is in the traced process's address space now."""
        kind = self._start[0]
        if kind == "addr":
            return [self._start[1]]
        proc = self._proc
        uprobes = self.machine.uprobes
        if kind == "file":
            return uprobes.vaddr_of(proc, self._start[1], self._start[2])
        name, delta = self._start[1], self._start[2]
        exe = proc.exe
        for f in dict.fromkeys(([exe] if exe is not None else []) + list(proc.mapped_files)):
            if f in self._no_symbol:
                continue
            try:
                elf = uprobes.file_elf(f)
                if elf is None:
                    raise SymbolError(f"{f.path} has no symbols")
                if f is exe:
                    return [elf.resolve(name).value + self.machine.load_bias(exe) + delta]
                offset = elf.vaddr_to_offset(elf.resolve(name).value + delta)
            except EmuError:
                self._no_symbol.add(f)
                continue
            return uprobes.vaddr_of(proc, f, offset)
        return []

    def _arm_start(self) -> None:
        """A code hook at each address where the start is mapped (and not hooked yet)."""
        if self.active or self.finished:
            return
        m = self.machine
        for addr in self._start_vaddrs():
            if addr not in self._start_hooks:
                if self.start_addr is None:
                    self.start_addr = addr
                self._start_hooks[addr] = m.add_code_hook(self._on_start, addr, addr, process=self._proc)

    def _disarm_start(self) -> None:
        for hook in self._start_hooks.values():
            self.machine.remove_hook(hook)
        self._start_hooks.clear()

    def _on_start(self, addr, size):
        if self.active or self.finished:
            return
        self.start_addr = addr
        self._disarm_start()
        # Adding the whole-space hook drops every translation and restarts the run, so
        # blocks translated before the start (a loop body, a function called earlier)
        # are traced too.  The new hook may also run for this very instruction: trace
        # it here, once.
        self._activate()
        self._hook(None, addr, size, None)
        self._skip = addr

    def _activate(self) -> None:
        self.active = True
        self._prev = None
        self._add_hooks()
        self._started = True
        if not self._listening:
            self._listening = self.machine.events.subscribe(self._on_model_event)
        if not self._header_written:
            self._write_header()

    def _add_hooks(self) -> None:
        """The whole-space code hook (and memory-write hooks) in the traced address space."""
        m = self.machine
        proc = self._proc
        hook = self._hook
        if not getattr(hook, "native", False):

            def hook(address, size, _h=hook):
                _h(None, address, size, None)

        self._code_hook = m.add_code_hook(hook, process=proc)
        if self.mem_writes and self._format.hooks_mem:
            self._mem_hook = m.add_mem_hook(self._on_mem_write, process=proc)
        # Guest stores into writable code (no text poke tells us): watch those mappings.
        self._smc_hooks = [
            m.add_mem_hook(self._on_code_write, v.start, v.end - 1, process=proc)
            for v in proc.mem.vmas
            if is_writable_code(v)
        ]

    def _remove_hooks(self) -> None:
        m = self.machine
        for h in [self._code_hook, self._mem_hook, *self._smc_hooks]:
            if h is not None:
                m.remove_hook(h)
        self._code_hook = self._mem_hook = None
        self._smc_hooks = []

    def _follow_exec(self, task, filename: str) -> None:
        """The traced process ran execve (the ``exec`` event, sched_process_exec): its
        old address space is gone.  The pending instruction (the ``syscall``) ends
        without register effects, the trace rebinds to the new mm - register reader,
        decodes, symbols, text-write listeners, hooks - and goes on in the new image,
        whose first instruction starts with a full register line; a start not reached
        yet is looked for in the new image."""
        was_active = self.active
        if was_active:
            self._effects_none()
            self._remove_hooks()
        else:
            self._disarm_start()
        old = self._mm.text_write_listeners
        for fn in (self._invalidate, self._dis.invalidate):
            while fn in old:
                old.remove(fn)
        m = self.machine
        self._mm = self._proc.mem
        self._mm.text_write_listeners.append(self._invalidate)
        self._dis = Disassembler(m)
        self._entries.clear()
        self._tstate = {t: st for t, st in self._tstate.items() if getattr(t, "state", "") != "dead"}
        self._read = m.snapshot_reader()
        self._hook = self._format.make_hook()
        self._func = None
        self._prev = self._pe = None
        if was_active:
            self._format.event(
                "exec",
                describe("exec", {"task": task, "filename": filename}) or "exec",
                {"task": task, "filename": filename},
            )
            self._add_hooks()
        else:
            self._arm_start()

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
        self._disarm_start()
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
        if not effects:  # the task ended inside the instruction
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
            kind = CALL
        elif mnem.startswith("ret"):
            kind = RET
        if region is not None:
            label, kernel, base = region
            func = label
            off = addr - base
            at_start = off == 0
            hlabel = label + (f"+{off:#x}" if off else "")
            mark = label[len("[uprobes] ") :] if label.startswith("[uprobes] ") else label.strip("[]")
            note = f"  # [{mark}]"
        else:
            kernel = False
            sym = symbol_of(self.machine, addr)
            if sym is not None:
                func, off = sym
                at_start = off == 0
                hlabel = self._dis.symbolize(addr)  # "malloc+0x14 in libc.so.6" in a library
            else:
                vma = self.machine.mem.find_vma(addr)
                func = vma.name if vma is not None and vma.name else None
                at_start = False
                hlabel = func
            note = self._probe_note(addr, insn)
            if note and kind == 0:
                up = self._uprobe_at(addr)
                if up is not None and up.arch is not None and up.arch.kind == "call" and mnem == "int3":
                    kind = CALL  # an emulated call: the probe enters the callee
        if note:
            first, nl, rest = line.partition("\n")
            line = first + note + nl + rest
        js = '{"type":"insn","addr":"%#x","sym":%s,"bytes":"%s","asm":%s' % (
            addr,
            dumps(hlabel),
            insn.bytes.hex(),
            dumps(asm),
        )
        if region is not None:
            js += ',"region":' + dumps(region[0])
        elif note:
            js += ',"note":' + dumps(note.strip()[2:])
        if func is not None:
            func = sys.intern(func)
        e = _Entry(
            addr, insn.size, line + "\n", hlabel, func, at_start, kind, region[0] if region else None, kernel, asm, js
        )
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
            if optimized_call_size(self.machine, up, addr) is not None:
                return "  # optimized uprobe"
        except Exception:  # noqa: BLE001 - a trace must not fail on a lookup
            pass
        return ""

    # ------------------------------------------------------------------ memory writes
    def _on_mem_write(self, access, addr, size, value):
        if size <= 8:
            self._mw.append((addr, (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")))
        else:
            self._mw.append((addr, size))  # read after the instruction

    # ------------------------------------------------------------------ tasks
    def _switch(self, task) -> None:
        """Another task of the traced process is on the CPU (threads share it; the
        machine switches them between time slices).  Each task keeps its own pending
        instruction, register snapshot and format state; a marker shows the switch.
        Tenet's single state stream just continues (its next line carries the
        difference)."""
        old = self._task
        fmt = self._format
        if fmt.per_task:
            if getattr(old, "state", "running") != "dead":
                self._tstate[old] = (self._prev, self._pe, fmt.save_task())
            self._prev, self._pe, state = self._tstate.pop(task, (None, None, None))
            fmt.load_task(state)
        self._task = task
        self._func = None
        fmt.switch(task, f"task {task.tid} ({task.comm}) is on the CPU")

    def _ours(self, task) -> bool:
        """Does ``task`` run on the traced CPU (the traced process, its threads, a
        vfork child borrowing its mm)?  Forked processes have a CPU of their own."""
        return task is None or getattr(task.process, "mem", self._mm) is self._mm

    def _collect_mw(self, cur: int) -> list:
        """Memory written by the pending instruction - by the CPU (the write hook) and
        by the kernel model on the task's behalf - as (addr, bytes).  An entry's address
        None means "at rsp after the instruction"; an int instead of bytes means "read
        that many bytes now"."""
        out = []
        mem = self.machine.mem
        for addr, data in self._mw:
            if addr is None:
                addr = reg(cur, RSP)
            if isinstance(data, int):
                try:
                    data = mem.read(addr, data)
                except GuestFault:
                    continue
            out.append((addr, data))
        self._mw.clear()
        return out

    # ------------------------------------------------------------------ pending instruction
    def _slow_start(self, cur: int, addr: int):
        """First instruction of the trace (the start snapshot) or the repeated call for
        the start instruction; returns the snapshot to diff against, or None to skip."""
        if self._skip is not None:
            skip, self._skip = self._skip, None
            if skip == addr:
                return None
        if self._prev is None:
            self._format.start(cur, addr)
            self._prev = cur
        return self._prev

    def _effects_now(self, cur: int) -> None:
        """The pending instruction's effects, from a register read outside the hook."""
        if self._prev is None:
            return
        self._format.effects(cur)
        self._prev = None
        self._pe = None

    def _effects_none(self) -> None:
        """Close the pending instruction without register effects (exit)."""
        self._format.task_ends()
        if self._prev is None:
            return
        self._format.drop_effects()
        self._mw.clear()
        self._prev = None
        self._pe = None

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
        self._format.header()

    def _write_trailer(self, reason: str) -> None:
        self._format.trailer(reason, {task: state[-1] for task, state in self._tstate.items()})

    # ------------------------------------------------------------------ model events
    def _on_model_event(self, event) -> None:
        """An ``kernel_model.trace.events`` event: rendered by its kind name and fields.  An exec of
        the traced process moves the trace to the new image; before the start, a
        mapping syscall of the traced process may have mapped the start's file."""
        kind = event.kind
        if kind == "exec" and not self.finished:
            task = event.task
            if task.process is self._proc:
                self._in_event += 1
                try:
                    self._follow_exec(task, event.filename)
                finally:
                    self._in_event -= 1
                return
            if self.active and task is self._task:  # a vfork child leaves this CPU
                self._effects_none()
                info = {"task": task, "filename": event.filename}
                self._format.event("exec", (describe("exec", info) or "exec") + " (it leaves this trace)", info)
                return
        elif (
            kind == "syscall_return"
            and not self.active
            and not self.finished
            and event.nr in _MAP_SYSCALLS
            and event.task.process is self._proc
        ):
            self._arm_start()
            return
        self._on_event(kind, **event.fields())

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
            return  # another process: not on this trace
        if kind == "syscall" and info.get("nr") == 336:
            self._in_sys_uprobe = True  # its uprobe_hit comes from the syscall
        elif kind == "syscall_return" and "nr" in info:
            self._in_sys_uprobe = False
        try:
            text = describe(kind, info, self._where, self._in_sys_uprobe)
        except (KeyError, AttributeError, TypeError, ValueError):
            text = generic(kind, info)  # an event whose fields changed shape
        if text is None:
            return
        self._format.event(kind, text, info)
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
                self._effects_none()  # a thread ends; the process goes on
            elif proc is self._proc:
                self._finish("guest exited", effects=False)
            else:
                self._effects_none()  # a vfork child on this CPU exits
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
            if au is not None and "call" in xol_fixups(au):
                self._mw.append((None, 8))
        elif kind == "sys_uretprobe":
            self._mw.append((None, 24))
        elif kind == "sys_uprobe":
            self._mw.append((None, 32))


def _live_tasks(proc) -> int:
    return sum(1 for t in getattr(proc, "tasks", ()) if getattr(t, "state", "running") != "dead")
