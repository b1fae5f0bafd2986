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
:class:`emu.debug.disasm.Disassembler` (and the formatted lines by the tracer), both dropped on
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

from typing import TYPE_CHECKING

from emu.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from emu.frontends.trace.args import add_cli
    from emu.frontends.trace.cli import cmd_trace
    from emu.frontends.trace.formats import FORMATS
    from emu.frontends.trace.tracer import Tracer

__all__ = ["FORMATS", "Tracer", "add_cli", "cmd_trace"]

# Imported when first asked for (PEP 562): the command line imports this package's
# argument definitions without loading the command itself.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "add_cli": ".args",
        "cmd_trace": ".cli",
        "FORMATS": ".formats",
        "Tracer": ".tracer",
    },
)
