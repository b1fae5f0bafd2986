"""The machine's typed event stream (``kernel_model.trace.events``): the bus itself, and the exact
sequence of events a probe hit publishes."""

from __future__ import annotations

import dataclasses

import pytest

from emu import Machine
from kernel_model.trace import events as ev
from kernel_model.trace.events import (
    Emulated,
    EventBus,
    HandlerRan,
    RetHandlerRan,
    Syscall,
    SyscallReturn,
    SysUretprobe,
    UprobeHit,
    UretprobeHijack,
    UretprobeReturn,
    XolAreaMapped,
    XolDone,
    XolStep,
)

# ------------------------------------------------------------------ the bus


def test_subscribe_by_type_gets_only_those_events():
    bus, got = EventBus(), []
    bus.subscribe(got.append, XolStep, XolDone)
    events = [XolAreaMapped(0x1000), XolStep(None, None, 1, 0x1080), XolDone(None, None, 0x2000)]
    for e in events:
        bus.publish(e)
    assert got == events[1:], got


def test_subscribe_without_types_gets_everything_in_order():
    bus, got = EventBus(), []
    bus.subscribe(got.append)
    events = [XolAreaMapped(0x1000), Syscall(None, 39, 0x401000, ())]
    for e in events:
        bus.publish(e)
    assert got == events


def test_unsubscribe_stops_delivery_and_is_idempotent():
    bus, got = EventBus(), []
    h = bus.subscribe(got.append)
    bus.publish(XolAreaMapped(1))
    bus.unsubscribe(h)
    bus.unsubscribe(h)
    bus.publish(XolAreaMapped(2))
    assert got == [XolAreaMapped(1)]


def test_a_subscriber_unsubscribed_during_delivery_is_not_called_again():
    bus, got = EventBus(), []
    handles = {}

    def first(e):
        got.append(("first", e.vaddr))
        bus.unsubscribe(handles["second"])

    handles["first"] = bus.subscribe(first)
    handles["second"] = bus.subscribe(lambda e: got.append(("second", e.vaddr)))
    bus.publish(XolAreaMapped(7))
    bus.publish(XolAreaMapped(8))
    assert got == [("first", 7), ("first", 8)], got


def test_the_bus_is_false_while_nobody_listens():
    bus = EventBus()
    assert (bool(bus), len(bus)) == (False, 0)
    h = bus.subscribe(lambda e: None)
    assert (bool(bus), len(bus)) == (True, 1)
    bus.unsubscribe(h)
    assert not bus


def test_subscribing_to_something_that_is_no_event_class_is_an_error():
    with pytest.raises(TypeError, match="not an Event class"):
        EventBus().subscribe(print, "uprobe_hit")


def test_events_are_frozen():
    e = XolAreaMapped(0x1000)
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.vaddr = 0


def test_events_module_is_a_leaf():
    """No project (or Unicorn) import: the kernel model and every front end may use it."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(ev))
    imported = {
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in getattr(n, "names", [])
    }
    assert imported <= {"__future__", "dataclasses", "typing"}, imported


# ------------------------------------------------------------------ no cost when empty

GUEST_NOP = """
_start:
probe:
    nop
    mov eax, 231
    xor edi, edi
    syscall
"""


def _count_constructions(monkeypatch) -> list:
    """Wrap every event class so that building one is counted."""
    built = []
    for name, cls in list(vars(ev).items()):
        if isinstance(cls, type) and issubclass(cls, ev.Event) and cls is not ev.Event:
            monkeypatch.setattr(ev, name, lambda *a, _cls=cls, **k: built.append(_cls) or _cls(*a, **k))
    return built


def test_no_event_is_built_while_nobody_listens(monkeypatch):
    built = _count_constructions(monkeypatch)
    m = Machine.from_asm(GUEST_NOP, kernel="6.18")
    m.uprobes.register("probe", handler=lambda c: 0)
    assert m.run().reason == "exit"
    assert built == [], f"events built with no subscriber: {built}"


def test_the_construction_counter_sees_events_when_someone_listens(monkeypatch):
    """The counterpart of the test above: the same run with one subscriber builds them."""
    built = _count_constructions(monkeypatch)
    m = Machine.from_asm(GUEST_NOP, kernel="6.18")
    m.uprobes.register("probe", handler=lambda c: 0)
    m.events.subscribe(lambda e: None)
    assert m.run().reason == "exit"
    assert built == [UprobeHit, HandlerRan, Emulated, Syscall], built


# ------------------------------------------------------------------ what a probe hit publishes

GUEST_RET = """
_start:
    call func
after:
    mov eax, 231
    xor edi, edi
    syscall
func:
    xor eax, eax
probe:
    ret
"""

GUEST_FUNC = """
_start:
    call func
after:
    mov eax, 231
    xor edi, edi
    syscall
func:
    push rbp
    pop rbp
    ret
"""


def _run(src, target, **consumer):
    m = Machine.from_asm(src, kernel="6.18")
    uc = m.uprobes.register(target, **consumer)
    seen = []
    m.events.subscribe(seen.append)
    assert m.run().reason == "exit"
    assert (type(seen[-1]), seen[-1].nr) == (Syscall, 231), f"last event: {seen[-1]}"
    return m, uc, seen[:-1]


def test_an_emulated_nop_publishes_hit_handler_emulated():
    m, uc, seen = _run(GUEST_NOP, "probe", handler=lambda c: 0)
    task, up, probe = m.task, uc.uprobe, m.resolve("probe")
    assert seen == [UprobeHit(task, up, probe), HandlerRan(task, uc, 0, probe), Emulated(task, up, probe + 1)], seen


def test_an_xol_ret_publishes_hit_handler_area_step_done():
    m, uc, seen = _run(GUEST_RET, "probe", handler=lambda c: 0)
    task, up, probe = m.task, uc.uprobe, m.resolve("probe")
    area = m.process.mm_uprobes.xol_area.vaddr
    assert seen == [
        UprobeHit(task, up, probe),
        HandlerRan(task, uc, 0, probe),
        XolAreaMapped(area),
        XolStep(task, up, 1, area + 128),
        XolDone(task, up, m.resolve("after")),
    ], seen


def test_a_uretprobe_return_publishes_hijack_then_the_trampoline_syscall():
    """6.18: the entry hit hijacks the return address (no entry handler: no HandlerRan),
    the push is emulated; the return enters sys_uretprobe (335) from the trampoline."""
    m, uc, seen = _run(GUEST_FUNC, "func", ret_handler=lambda c: None)
    task, up, func, after = m.task, uc.uprobe, m.resolve("func"), m.resolve("after")
    area = m.process.mm_uprobes.xol_area.vaddr
    assert [type(e) for e in seen] == [
        UprobeHit,
        XolAreaMapped,
        UretprobeHijack,
        Emulated,
        Syscall,
        SysUretprobe,
        RetHandlerRan,
        UretprobeReturn,
        SyscallReturn,
    ], [e.kind for e in seen]
    hit, mapped, hijack, emulated, sc, sys_uret, ret, done, sc_ret = seen
    assert (hit, mapped, emulated) == (UprobeHit(task, up, func), XolAreaMapped(area), Emulated(task, up, func + 1))
    assert (hijack.orig, hijack.tramp, hijack.chained) == (after, area, False), hijack
    assert (sc.nr, sc.rip, sys_uret) == (335, area + 11, SysUretprobe(task)), sc
    assert (ret, done) == (RetHandlerRan(task, uc, func, after), UretprobeReturn(task, after))
    assert (sc_ret.nr, sc_ret.rip) == (335, area + 13), sc_ret
