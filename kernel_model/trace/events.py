"""The machine's event stream: one typed event per thing the machine or the modeled
kernel does that a front end may want to see (a probe hit, an XOL step, a text poke, a
syscall, a signal...).

One :class:`EventBus` per machine (``machine.events``); the kernel model reaches it
through its machine.  Emit sites are written ``if bus: bus.publish(Ev(...))`` so that no
event object is built while nobody listens (the probe path is hot).  Subscribers name
the event classes they want: ``bus.subscribe(fn, UprobeHit, XolStep)``; no classes
means every event.

This module is a leaf: it imports nothing from the project (and not Unicorn), so the
kernel model and every front end may import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, TypeVar

if TYPE_CHECKING:
    from typing import dataclass_transform
else:

    def dataclass_transform(**_kwargs):
        """The marker tells the type checker only (and Python 3.10 has no typing.dataclass_transform)."""
        return lambda fn: fn


class Event:
    """Base of all events.  ``kind`` is the stable short name used in trace output."""

    __slots__ = ()
    kind: ClassVar[str] = "event"
    __match_args__: ClassVar[tuple[str, ...]] = ()  # the field names (set by @dataclass)

    def fields(self) -> dict[str, Any]:
        """The event's fields as a dict (for generic renderers)."""
        return {name: getattr(self, name) for name in self.__match_args__}


_E = TypeVar("_E", bound=Event)


@dataclass_transform(frozen_default=True)
def _event(kind: str) -> Callable[[type[_E]], type[_E]]:
    """Declare an event class: a frozen, slotted dataclass with a ``kind`` name."""

    def wrap(cls: type[_E]) -> type[_E]:
        cls.kind = kind
        return dataclass(frozen=True, slots=True)(cls)

    return wrap


# ----------------------------------------------------------------- machine: syscalls, signals


@_event("syscall")
class Syscall(Event):
    task: object
    nr: int
    rip: int
    args: tuple[int, ...]


@_event("syscall_return")
class SyscallReturn(Event):
    task: object
    nr: int
    ret: int
    rip: int


@_event("signal")
class Signal(Event):
    task: object
    signo: int
    addr: int | None
    rip: int
    detail: str


@_event("signal_handler")
class SignalHandler(Event):
    task: object
    signo: int
    handler: int
    frame: int


@_event("clone")
class Clone(Event):
    task: object
    child: object
    flags: int


@_event("exec")
class Exec(Event):
    """The kernel's ``sched_process_exec`` tracepoint (exec_binprm, once the new image
    is loaded): ``task`` runs ``filename`` in a new address space; ``old_tid`` is its
    tid before de_thread gave it the leader's."""

    task: object
    old_tid: int
    filename: str


@_event("unicorn_quirk")
class UnicornQuirk(Event):
    task: object
    what: str


# ----------------------------------------------------------------- uprobes: entry, XOL


@_event("text_poke")
class TextPoke(Event):
    vaddr: int
    data: bytes
    why: str


@_event("uprobe_hit")
class UprobeHit(Event):
    task: object
    uprobe: object
    vaddr: int


@_event("handler")
class HandlerRan(Event):
    task: object
    consumer: object
    rc: object
    vaddr: int


@_event("ip_changed")
class IpChanged(Event):
    task: object
    vaddr: int
    new_ip: int


@_event("emulated")
class Emulated(Event):
    task: object
    uprobe: object
    new_ip: int


@_event("xol_area")
class XolAreaMapped(Event):
    vaddr: int


@_event("xol_restart")
class XolRestart(Event):
    task: object
    uprobe: object


@_event("xol_wait")
class XolWait(Event):
    task: object
    uprobe: object


@_event("xol_step")
class XolStep(Event):
    task: object
    uprobe: object
    slot: int
    xol_vaddr: int


@_event("xol_done")
class XolDone(Event):
    task: object
    uprobe: object
    new_ip: int


@_event("ref_ctr")
class RefCtrUpdate(Event):
    """``update_ref_ctr``: the USDT semaphore of process ``pid`` at ``vaddr`` changed."""

    pid: int
    vaddr: int
    old: int
    new: int


# ----------------------------------------------------------------- uretprobes


@_event("uretprobe_depth")
class UretprobeDepth(Event):
    task: object
    uprobe: object


@_event("uretprobe_hijack")
class UretprobeHijack(Event):
    task: object
    uprobe: object
    stack: int
    orig: int
    chained: bool
    tramp: int


@_event("ri_discarded")
class RiDiscarded(Event):
    task: object
    ri: object


@_event("ret_handler")
class RetHandlerRan(Event):
    task: object
    consumer: object
    func: int
    ret: int


@_event("uretprobe_return")
class UretprobeReturn(Event):
    task: object
    new_ip: int


@_event("sys_uretprobe")
class SysUretprobe(Event):
    task: object


# ----------------------------------------------------------------- optimized sites


@_event("trampoline_mapped")
class TrampolineMapped(Event):
    vaddr: int


@_event("optimize_failed")
class OptimizeFailed(Event):
    vaddr: int


@_event("optimized")
class Optimized(Event):
    vaddr: int
    tramp: int


@_event("sys_uprobe")
class SysUprobe(Event):
    task: object
    vaddr: int


# ----------------------------------------------------------------- the bus

# A subscriber takes the events of the classes it subscribed to: typed ``Any`` so that a
# function annotated with one event class (``def on_hit(ev: UprobeHit)``) qualifies.
Subscriber = Callable[[Any], object]


class EventBus:
    """Subscribers by handle; ``bool(bus)`` (and the plain attribute ``active``, which
    a hot path reads without a call) is False while nobody listens.

    ``publish`` walks a snapshot, so a subscriber may unsubscribe itself (or another)
    while an event is being delivered; an unsubscribed one is not called again."""

    checkpoint_by_reference = True  # its subscribers are the front ends'

    __slots__ = ("_subs", "_snapshot", "_next", "gate", "active")

    def __init__(self) -> None:
        self._subs: dict[int, tuple[Subscriber, tuple[type[Event], ...] | None]] = {}  # handle -> (fn, types)
        self._snapshot: tuple[tuple[int, tuple[Subscriber, tuple[type[Event], ...] | None]], ...] = ()
        self._next = 1
        self.gate: Callable[[Event], bool] | None = None  # False drops the event (a replay's repeats)
        self.active = False

    def __bool__(self) -> bool:
        return bool(self._subs)

    def __len__(self) -> int:
        return len(self._subs)

    def subscribe(self, fn: Subscriber, *types: type[Event]) -> int:
        """Call ``fn(event)`` for events of the given classes (all when none given)."""
        for t in types:
            if not (isinstance(t, type) and issubclass(t, Event)):
                raise TypeError(f"subscribe: {t!r} is not an Event class")
        handle = self._next
        self._next += 1
        self._subs[handle] = (fn, tuple(types) or None)
        self._snapshot = tuple(self._subs.items())
        self.active = True
        return handle

    def unsubscribe(self, handle: int) -> None:
        """Forget a subscription; unknown handles are ignored (idempotent)."""
        if self._subs.pop(handle, None) is not None:
            self._snapshot = tuple(self._subs.items())
            self.active = bool(self._subs)

    def publish(self, event: Event) -> None:
        if self.gate is not None and not self.gate(event):
            return
        subs = self._subs
        for handle, (fn, types) in self._snapshot:
            if (types is None or isinstance(event, types)) and handle in subs:
                fn(event)
