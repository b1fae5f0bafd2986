"""handler_chain specialised per uprobe (``Uprobes.specialize_chain``): one entry
consumer gets a chain without the loop, a program-only trace event its dispatcher's
fast form - with the same counts, events, removals and trace results as the general
chain, which every other consumer list keeps."""

from __future__ import annotations

import pytest
from uprobe_helpers import guest

from emu import Machine
from kernel_model.kernel.events.uprobes import UPROBE_HANDLER_IGNORE, UPROBE_HANDLER_REMOVE, Uprobes

LOOP = guest(
    """
    mov r12d, 5
again:
    call target
    dec r12d
    jnz again
""",
    tail="""
target:
    nop
    ret
""",
)


def _general_only(monkeypatch):
    monkeypatch.setattr(Uprobes, "specialize_chain", lambda self, uprobe: self.handler_chain)


def _run(kernel, rc, *, enabled=True, event=False, record=False):
    m = Machine.from_asm(LOOP, kernel=kernel)
    seen = []
    if event:
        ev = m.uprobes.add_event(
            "p:grp/tgt " + m.process.exe.path + ":" + hex(m.process.exe.elf.vaddr_to_offset(m.resolve("target"))),
            ftrace=False,
            programs=[lambda ctx: seen.append(ctx.regs.r12)],
        )
        uc = ev.consumer
    else:
        uc = m.uprobes.register("target", handler=lambda ctx: seen.append(ctx.regs.r12) or rc)
    uc.enabled = enabled
    events = []
    m.events.subscribe(lambda e: events.append(type(e).__name__))
    if record:
        m.record_accesses()
    r = m.run(max_insns=100_000)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    hits = ev.hits if event else None
    return m.counters.snapshot(), seen, uc.hits, events, hits


@pytest.mark.parametrize("kernel", ["6.12", "6.13"])
@pytest.mark.parametrize("rc", [0, UPROBE_HANDLER_REMOVE, UPROBE_HANDLER_IGNORE, 3])
@pytest.mark.parametrize("enabled", [True, False])
def test_the_specialised_chain_does_what_the_general_one_does(monkeypatch, kernel, rc, enabled):
    fast = _run(kernel, rc, enabled=enabled)
    _general_only(monkeypatch)
    general = _run(kernel, rc, enabled=enabled)
    assert fast == general


@pytest.mark.parametrize("kernel", ["6.9", "6.13"])
def test_a_program_only_event_counts_and_runs_as_through_the_general_dispatcher(monkeypatch, kernel):
    fast = _run(kernel, 0, event=True)
    _general_only(monkeypatch)
    general = _run(kernel, 0, event=True)
    assert fast == general and fast[4] == 5, (fast, general)


def test_one_entry_consumer_gets_a_specialised_chain_others_the_general_one():
    m = Machine.from_asm(LOOP)
    a = m.uprobes.register("target", handler=lambda ctx: 0)
    up = a.uprobe
    core = m.kernel.uprobes
    assert core.specialize_chain(up) != core.handler_chain
    b = m.uprobes.register("target", handler=lambda ctx: 0)
    assert up.chain is None, "a consumer coming clears the chain"
    assert core.specialize_chain(up) == core.handler_chain
    m.uprobes.unregister(b)
    m.uprobes.unregister(a)
    r = m.uprobes.register("target", ret_handler=lambda ctx: 0)
    assert core.specialize_chain(r.uprobe).__name__ == "handler_chain_ret", "a return-only consumer: its own chain"
    m.uprobes.unregister(r)
    s = m.uprobes.register("target", handler=lambda ctx: 0, ret_handler=lambda ctx: 0)
    assert core.specialize_chain(s.uprobe) == core.handler_chain, "a session consumer takes the general chain"


def test_a_consumer_added_between_hits_is_called_from_the_next_hit():
    m = Machine.from_asm(LOOP)
    calls = []

    def first(ctx):
        calls.append("a")
        if len(calls) == 2:
            m.uprobes.register("target", handler=lambda c: calls.append("b"))
        return 0

    m.uprobes.register("target", handler=first)
    r = m.run(max_insns=100_000)
    assert r.reason == "exit", r.describe()
    assert calls == ["a", "a", "b", "a", "b", "a", "b", "a"], calls
