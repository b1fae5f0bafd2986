"""The uprobes as a user drives them: ``machine.uprobes``.

The kernel's core (:class:`kernel_model.kernel.events.uprobes.Uprobes`) registers a
consumer on (file, offset) and writes ``uprobe_events`` lines that name a file offset.
What users write - ``m.uprobes.register("func", ...)``, ``-e 'uprobe:libc:malloc'``,
``p:grp/ev /bin/prog:main+4 %di``, ``usdt:PATH:PROVIDER:NAME`` - is resolved here first,
as perf, bpftrace and libbpf do before they call into the kernel
(:mod:`emu.probes.targets`, :mod:`emu.probes.probe_spec`, :mod:`emu.probes.usdt`).

Everything else (``tree``, ``uret``, ``trace``, ``xol_slots``, ``unregister``...) is the
core's, reached through this object unchanged: reading or setting an attribute this class
does not define reads or sets the core's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from emu.probes.probe_spec import parse_user_spec, perf_event_name
from emu.probes.targets import ProbeTargets
from emu.probes.usdt import find_usdt_notes, parse_usdt_spec, usdt_attach_offsets
from kernel_model.kernel.events.uprobes_types import UprobeConsumer

if TYPE_CHECKING:
    from emu.machine import Machine

_OWN = frozenset({"core", "targets"})


class UserUprobes:
    """``machine.uprobes``: probe targets resolved, then handed to the kernel's core."""

    def __init__(self, machine: Machine) -> None:
        object.__setattr__(self, "core", machine.kernel.uprobes)
        object.__setattr__(self, "targets", ProbeTargets(machine))

    def __getattr__(self, name):
        if name.startswith("__") or name in _OWN:  # (an object being restored or copied)
            raise AttributeError(name)
        return getattr(self.core, name)

    def __setattr__(self, name, value):
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.core, name, value)

    # -- targets -------------------------------------------------------------------
    @property
    def notes(self) -> list[str]:
        """Remarks on registrations (IFUNC targets), for the CLI to print."""
        return self.targets.notes

    def resolve_target(self, target):
        return self.targets.resolve_target(target)

    def find_file(self, path: str):
        return self.targets.find_file(path)

    def open_file(self, path: str):
        return self.targets.open_file(path)

    def file_elf(self, file):
        return self.targets.file_elf(file)

    def symbol_offset(self, file, name: str, delta: int = 0):
        return self.targets.symbol_offset(file, name, delta)

    # -- consumers -----------------------------------------------------------------
    def register(
        self,
        target,
        handler=None,
        ret_handler=None,
        filter=None,
        *,
        ref_ctr_offset: int = 0,
        name: str = "",
        is_trace: bool = False,
    ) -> UprobeConsumer:
        """``uprobe_register`` on whatever ``target`` names (see
        :meth:`ProbeTargets.resolve_target`): returns the consumer (pass it to
        :meth:`unregister`)."""
        file, offset = self.targets.resolve_target(target)
        return self.core.uprobe_register(
            file, offset, UprobeConsumer(handler, ret_handler, filter, name=name, is_trace=is_trace), ref_ctr_offset
        )

    def register_usdt(self, spec: str, handler=None, ret_handler=None, filter=None) -> list:
        """Attach a consumer to every site of ``usdt:PATH:[PROVIDER:]NAME`` (libbpf's
        nop-combo rule and semaphores included); returns the consumers."""
        path, provider, name = parse_usdt_spec(spec)
        file = self.targets.find_file(path)
        self.targets.file_elf(file)
        core = self.core
        out = []
        for note in find_usdt_notes(file, provider, name):
            offset, ref = usdt_attach_offsets(file, note, core.profile)
            out.append(core.uprobe_register(file, offset, UprobeConsumer(handler, ret_handler, filter), ref))
        return out

    # -- tracefs events ------------------------------------------------------------
    def add_event(self, spec: str, *, output=None, ftrace: bool = True, programs=(), filter=None):
        """Create a tracefs event from a ``p:``/``r:``/symbol/bpftrace/``usdt:`` spec;
        ``filter(process) -> bool`` limits it to some processes (perf/bpftrace -p)."""
        kw = dict(output=output, ftrace=ftrace, programs=programs, filter=filter)
        text = spec.strip()
        if text.startswith(("usdt:", "U:")):
            return self._add_usdt(text, **kw)
        parsed = parse_user_spec(spec)
        trace = self.core.trace
        if parsed.is_delete:
            trace.remove(parsed.event, parsed.group)
            return None
        file, offset = self.targets.resolve_spec(parsed)
        # perf names a probe on a symbol after it (``malloc``, ``malloc__return``)
        event = parsed.event or (
            perf_event_name(parsed.symbol, parsed.is_return) if parsed.symbol is not None else None
        )
        return trace.trace_uprobe_create(parsed, file, offset, event=event, **kw)

    def _add_usdt(self, text: str, **kw):
        """``usdt:PATH:[PROVIDER:]NAME``: one event per note site, named PROVIDER_NAME."""
        path, provider, name = parse_usdt_spec(text)
        file = self.targets.find_file(path)
        self.targets.file_elf(file)
        first = None
        for i, note in enumerate(find_usdt_notes(file, provider, name)):
            offset, ref = usdt_attach_offsets(file, note, self.core.profile)
            event = f"{note.provider}_{note.name}" + (f"_{i}" if i else "")
            ref_part = f"({ref:#x})" if ref else ""
            ev = self.add_event(f"p:usdt/{event} {file.path}:{offset:#x}{ref_part}", **kw)
            first = first or ev
        return first

    def add_events(self, specs, *, output=None, filter=None) -> list:
        return [self.add_event(s, output=output, filter=filter) for s in specs]

    def remove_event(self, event: str, group: str | None = None) -> None:
        self.core.trace.remove(event, group)
