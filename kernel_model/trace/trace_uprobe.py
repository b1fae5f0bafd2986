"""trace_uprobe: tracefs ``p:``/``r:`` events as uprobe consumers, and their output.

Models kernel/trace/trace_uprobe.c: an event is a consumer whose dispatcher fetches the
arguments into the per-CPU ``uprobe_cpu_buffer`` and writes an ftrace line.  Whether the
buffer is filled on every hit (``args_buffer="always"``, before 6.10) or only when an
ftrace/perf consumer needs it (``"lazy"``, 6.10+: program-only events never fill it) is a
profile switch; ``counters.args_buffer_fills`` shows which happened.

An event is created on a file already looked up (:meth:`TraceEvents.trace_uprobe_create`,
what ``__trace_uprobe_create()`` does after ``kern_path``); the tools' spellings of a
location (symbols, bpftrace names, USDT) are resolved to (file, offset) before that, by
``emu.probes``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from kernel_model.errors import ProbeSpecError
from kernel_model.kernel.events.uprobes_types import UPROBE_HANDLER_REMOVE, UprobeConsumer
from kernel_model.trace.trace_probe import (
    ProbeSpec,
    default_event_name,
    format_listing,
    format_profile_line,
    format_trace_line,
)


class _FetchCtx:
    """The FetchContext probe_spec's fetchargs read from at a hit.

    ``bp_addr`` and ``probe_offset`` are ``struct uprobe_dispatch_data``'s ``bp_addr``
    (the probed address; for a return probe the function's entry, as
    ``uretprobe_dispatcher()`` sets it) and ``tu->offset``.
    """

    def __init__(self, ctx, bp_addr: int, probe_offset: int):
        self._ctx = ctx
        self._base = bp_addr - probe_offset
        self.comm = ctx.task.comm

    def reg(self, name: str) -> int:
        return getattr(self._ctx.regs, name) & 0xFFFFFFFFFFFFFFFF

    def read(self, addr: int, n: int) -> bytes:
        return self._ctx.machine.mem.read_user(addr, n)

    def read_cstring(self, addr: int, limit: int) -> bytes:
        return self._ctx.machine.mem.read_cstring(addr, limit)

    def file_offset_to_vaddr(self, offset: int) -> int:
        """``translate_user_vaddr()`` (FETCH_OP_FOFFS): the vaddr that file offset 0 would
        have if the whole file were mapped like the probed page, plus ``offset``.  A data
        segment whose vaddr-offset delta differs from the text's (busybox, most PIEs) is
        therefore *not* where the kernel reads: it reads what lies at that address."""
        return (self._base + offset) & 0xFFFFFFFFFFFFFFFF


@dataclass(eq=False)
class TraceEvent:
    spec: ProbeSpec
    group: str
    event: str
    path: str
    offset: int
    consumer: UprobeConsumer | None = None
    ftrace: bool = True  # write lines to the trace output
    programs: list = field(default_factory=list)  # BPF-like callables(ctx)
    # trace_uprobe->nhit: one shared counter (``nhit``) before 6.12, one per CPU
    # (``nhits[cpu]``) from 6.12 (10cdb82aa77f) on a machine of several CPUs
    nhit: int = 0
    nhits: list = field(default_factory=list)
    owner: "TraceEvents | None" = field(default=None, repr=False)

    @property
    def hits(self) -> int:
        """``nhit`` as ``uprobe_profile`` shows it: the sum over CPUs."""
        return self.nhit + sum(self.nhits)

    @property
    def name(self) -> str:
        return f"{self.group}/{self.event}"

    @property
    def lines(self) -> list[str]:
        """This event's lines in the trace buffer (see :attr:`TraceEvents.lines`)."""
        return [] if self.owner is None else self.owner.lines_of(self)


class TraceEvents:
    """The tracefs interface of one machine: add/remove events, read them back."""

    def __init__(self, uprobes):
        self.uprobes = uprobes
        self.machine = uprobes.machine
        self.events: list[TraceEvent] = []
        self.output = None  # file-like for trace lines; None = keep only
        self._log: list[tuple[TraceEvent, str]] = []
        # the lazy args buffer seed: "always" fills it for every hit (profiles are frozen)
        self._always_buffer = uprobes.profile.args_buffer == "always"
        self._nr_cpu_ids = 1
        self._percpu_nhit = False  # per-CPU nhit counters (set_nr_cpu_ids)
        self._sync = uprobes.sync

    @property
    def lines(self) -> list[str]:
        """The ``trace`` buffer: every line not streamed to an ``output``, in order.

        Each line is stored once (with its event); a line written to ``output`` is not
        kept, so a long run that streams its events does not grow in memory.
        """
        return [line for _, line in self._log]

    def lines_of(self, ev: TraceEvent) -> list[str]:
        """The buffered lines of one event (``TraceEvent.lines``)."""
        return [line for e, line in self._log if e is ev]

    def trace_uprobe_create(
        self,
        spec: ProbeSpec,
        file,
        offset: int,
        *,
        event: str | None = None,
        output=None,
        ftrace: bool = True,
        programs=(),
        filter=None,
    ) -> TraceEvent:
        """``__trace_uprobe_create()`` once the path is looked up (``kern_path``): an
        event on (file, offset) named ``event``, else ``spec.event``, else as
        the kernel names one (``p_busybox_0xebf0``).  A second event with the same
        name is refused, as ``register_trace_uprobe()`` does (-EEXIST)."""
        event = event or spec.event or default_event_name("p", file.path, offset)
        group = spec.group or "uprobes"
        if any(e.group == group and e.event == event for e in self.events):
            raise ProbeSpecError(
                f"event {group}/{event} already exists (name this probe: p:{group}/EVENT ...)", spec.text, 0
            )
        ev = TraceEvent(spec, group, event, file.path, offset, ftrace=ftrace, programs=list(programs), owner=self)
        if output is not None:
            self.output = output
        dispatch = functools.partial(self._dispatch, ev)  # no Python frame of its own
        handler = None if spec.is_return else dispatch
        ret_handler = dispatch if spec.is_return else None
        uc = UprobeConsumer(handler, ret_handler, filter, name=ev.name, is_trace=True)
        if filter is None and not ftrace and not self._always_buffer:
            if handler is not None:
                uc.fast_handler = self._program_dispatcher(ev, dispatch)
            else:
                uc.fast_ret_handler = self._program_dispatcher(ev, dispatch)
        ev.consumer = self.uprobes.uprobe_register(file, offset, uc, spec.ref_ctr_offset or 0)
        self.events.append(ev)
        return ev

    def remove(self, event: str, group: str | None = None) -> None:
        for ev in list(self.events):
            if ev.event == event and (group is None or ev.group == group):
                self.uprobes.unregister(ev.consumer)
                self.events.remove(ev)
                return
        raise ProbeSpecError(f"no event named {event!r}", event, 0)

    def set_nr_cpu_ids(self, n: int) -> None:
        """The machine's CPUs: a profile with per-CPU ``nhits`` keeps one counter per
        CPU when there is more than one (one CPU's counter is the shared one)."""
        self._nr_cpu_ids = n
        self._percpu_nhit = self.uprobes.profile.nhit == "percpu" and n > 1

    # -- the dispatcher ---------------------------------------------------------
    def _program_dispatcher(self, ev: TraceEvent, general):
        """``uprobe_dispatcher`` (``uretprobe_dispatcher`` for a return event: the same
        work) for an event whose consumers are programs only
        (no ftrace lines, no filter) on a kernel with the lazy args buffer: ``nhit``
        and the programs, which is all :meth:`_dispatch` does for it unless ``nhit``
        is per CPU on a machine of several or the machine records its accesses - then
        it hands over to ``general``."""
        sync = self._sync

        def dispatch_programs(ctx) -> int:
            if self._percpu_nhit or sync.log is not None:
                return general(ctx)
            ev.nhit += 1
            for prog in ev.programs:
                prog(ctx)
            return 0

        return dispatch_programs

    def _dispatch(self, ev: TraceEvent, ctx) -> int:
        flt = ev.consumer.filter if ev.consumer is not None else None
        if flt is not None and not flt(ctx.task.process.mm_owner or ctx.task.process):
            # uprobe_perf_func: a hit in an mm the event does not want (a forked child's
            # inherited int3) is not recorded and asks for the breakpoint's removal
            return UPROBE_HANDLER_REMOVE
        if self._percpu_nhit:
            nhits = ev.nhits
            if not nhits:
                nhits.extend([0] * self._nr_cpu_ids)
            nhits[ctx.task.cpu] += 1
        else:
            ev.nhit += 1
        for prog in ev.programs:
            prog(ctx)
        if self._sync.log is not None:
            self._sync.uprobe_dispatcher(ctx.task, ev, ev.ftrace or self._always_buffer, ctx.is_return)
        if not ev.ftrace and not self._always_buffer:
            return 0  # no ftrace consumer and a lazy buffer: not filled
        counters = self.machine.counters
        counters.args_buffer_fills += 1
        fctx = _FetchCtx(ctx, ctx.func if ctx.is_return else ctx.vaddr, ev.offset)
        values = [(arg, arg.fetch(fctx)) for arg in ev.spec.args]
        if not ev.ftrace:
            return 0
        ts = self.machine.syscalls.boot_clock_ns(advance=1000) / 1e9
        if ctx.is_return:
            ip, func = ctx.regs.rip, ctx.func
        else:
            ip, func = ctx.vaddr, None
        line = format_trace_line(
            comm=ctx.task.comm,
            pid=ctx.task.tid,
            cpu=ctx.task.cpu,
            timestamp=ts,
            event=ev.event,
            ip=ip,
            func=func,
            args=values,
        )
        if self.output is None:
            self._log.append((ev, line))
        else:
            self.output.write(line + "\n")
            self.output.flush()
        return 0

    # -- tracefs files ----------------------------------------------------------
    def uprobe_events(self) -> str:
        out = []
        for ev in self.events:
            spec = ev.spec
            listed = ProbeSpec(
                spec.kind,
                ev.group,
                ev.event,
                ev.path,
                offset=ev.offset,
                ref_ctr_offset=spec.ref_ctr_offset,
                args=spec.args,
            )
            out.append(format_listing(listed, ev.offset))
        return "".join(line + "\n" for line in out)

    def uprobe_profile(self) -> str:
        return "".join(format_profile_line(ev.path, ev.event, ev.hits) + "\n" for ev in self.events)
