"""The breakpoint fast path of a probed emulated instruction (``kernel_model.kernel.events.uprobes_fast``):
after one hit through ``exc_int3``, the engine hands the site's int3 to a specialised
``handle_swbp`` that must be transparent - the same guest with the fast paths and
with the general path only (``Uprobes.specialized`` off) ends with the same registers
and memory, the same counters, consumer passes, trace lines and events - for every
kind of consumer and every kind of probed instruction (those that do not qualify must
keep the general path), under kernels with each NOP policy, and whatever a handler
does meanwhile (read or write registers, move rip, ask for its removal, queue a
signal, add or remove consumers, start listening to events)."""

from __future__ import annotations

import pytest
from uprobe_helpers import final_state, guest

from emu import Machine
from kernel_model.arch.x86.kernel.traps import Traps
from kernel_model.kernel.events.uprobes_types import UPROBE_HANDLER_REMOVE
from kernel_model.kernel.signals import SIGNALS
from kernel_model.trace import events as ev

ITERATIONS = 6
SRC = guest(
    f"""
    mov r12d, {ITERATIONS}
again:
site_nop:
    nop
site_nop66:
    xchg ax, ax
site_jmp:
    jmp over
    ud2
over:
site_push:
    push rbx
    pop rbx
site_call:
    call leaf
site_xol:
    add r14, r12
    test r12d, 1
site_jcc:
    jnz odd
    inc r13
odd:
after:
    dec r12d
    jnz again
""",
    tail="""
leaf:
    nop
    inc r15
    ret
""",
)

SITES = ("site_nop", "site_nop66", "site_jmp", "site_push", "site_call", "site_xol", "site_jcc")
KERNELS = ("6.9", "6.17", "latest")  # the three NOP policies; int3 and syscall trampolines


def _qualifies(m, uprobe, vaddr) -> bool:
    au = uprobe.arch
    return au.ops.emulate is not None and not au.can_optimize


def _run(
    monkeypatch,
    specialized: bool,
    *,
    kernel="latest",
    site="site_nop",
    consumer="handler",
    handler=None,
    setup=None,
    **machine_options,
) -> dict:
    """One run; ``handler(ctx, n, m)`` (n: the hit's number) is the entry handler."""
    general = [0]
    real = Traps.exc_int3

    def counted(self, cpu):
        general[0] += 1
        return real(self, cpu)

    monkeypatch.setattr(Traps, "exc_int3", counted)
    m = Machine.from_asm(SRC, kernel=kernel, **machine_options)
    m.kernel.uprobes.specialized = specialized
    seen, events = [], []
    m.seen = seen

    def entry(ctx):
        seen.append((ctx.vaddr, ctx.task.tid))
        return handler(ctx, len(seen), m) if handler else 0

    def ret(ctx):
        seen.append(("ret", ctx.func, ctx.regs.rip))
        return 0

    if consumer == "handler":
        c = m.uprobes.register(site, handler=entry)
    elif consumer == "uretprobe":
        c = m.uprobes.register(site, ret_handler=ret)
    else:
        off = m.process.exe.elf.vaddr_to_offset(m.resolve(site))
        kind = "r" if consumer == "r-program" else "p"
        c = m.uprobes.add_event(
            f"{kind}:grp/probe {m.process.exe.path}:{off:#x}",
            ftrace=consumer == "ftrace",
            programs=[ret if kind == "r" else entry],
        )
    if setup:
        setup(m, c, events)
    r = m.run(max_insns=200_000)
    return {
        "end": (r.reason, r.exit_code, r.signal if hasattr(r, "signal") else None),
        "state": final_state(m),
        "counters": m.counters.snapshot(),
        "seen": seen,
        "uprobe_hits": sorted(u.hits for u in m.kernel.uprobes.tree.values()),
        "hits": (getattr(c, "hits", None), getattr(c, "nhit", None)),
        "lines": getattr(c, "lines", None),
        "events": events,
        "general": general[0],
        "machine": m,
        "consumer": c,
    }


def _assert_same(fast: dict, general: dict) -> None:
    for key in ("end", "counters", "seen", "uprobe_hits", "hits", "lines", "events"):
        assert fast[key] == general[key], f"{key}: fast path {fast[key]!r}, general path {general[key]!r}"
    assert fast["state"] == general["state"], "final registers or memory differ"


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("consumer", ["handler", "program", "ftrace"])
@pytest.mark.parametrize("site", SITES)
def test_every_site_kind_and_consumer_gives_what_the_general_path_gives(monkeypatch, kernel, consumer, site):
    fast = _run(monkeypatch, True, kernel=kernel, site=site, consumer=consumer)
    general = _run(monkeypatch, False, kernel=kernel, site=site, consumer=consumer)
    _assert_same(fast, general)
    hits = fast["counters"]["uprobe_hits"]
    assert hits == ITERATIONS and general["general"] == hits, (hits, general["general"])
    m = fast["machine"]
    uprobe = next(iter(m.kernel.uprobes.tree.values()))
    if _qualifies(m, uprobe, m.resolve(site)):
        assert fast["general"] == 1, f"only the first hit may take exc_int3 ({fast['general']} of {hits} did)"
    else:
        assert fast["general"] == hits, f"{site} does not qualify, yet {hits - fast['general']} hits went fast"


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("site", ["site_nop", "site_jmp", "site_push", "site_call", "site_jcc"])
def test_every_emulated_class_qualifies_under_every_nop_policy(monkeypatch, kernel, site):
    fast = _run(monkeypatch, True, kernel=kernel, site=site)
    assert fast["general"] == 1, f"{site} under {kernel}: {fast['general']} hits took exc_int3"


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("consumer", ["uretprobe", "r-program"])
def test_a_return_probe_entry_on_a_nop_gives_what_the_general_path_gives(monkeypatch, kernel, consumer):
    fast = _run(monkeypatch, True, kernel=kernel, site="leaf", consumer=consumer)
    general = _run(monkeypatch, False, kernel=kernel, site="leaf", consumer=consumer)
    _assert_same(fast, general)
    assert fast["counters"]["uretprobe_hits"] == ITERATIONS
    assert [s[0] for s in fast["seen"]] == ["ret"] * ITERATIONS
    # the int3 trampoline (before 6.11) traps through exc_int3 at every return
    returns = ITERATIONS if fast["machine"].profile.uretprobe_trampoline == "int3" else 0
    assert fast["general"] == 1 + returns, (
        f"the entry of a uretprobe on a nop: {fast['general'] - returns} hits took exc_int3"
    )


def _reads(ctx, n, m):
    r = ctx.regs  # fetched at this first access on the fast path: what the general path had
    m.seen.append(("regs", r.rip, r.rsp, r.rax, r.rbx, r.r12, r.eflags, r.tf, r.orig_rax))
    return 0


def _writes_rbx(ctx, n, m):
    ctx.regs.rbx = (ctx.regs.rbx + n) & 0xFFFFFFFFFFFFFFFF
    return 0


def _sets_rip(ctx, n, m):
    if n % 2:
        ctx.regs.rip = m.resolve("after")
    return 0


def _sets_tf(ctx, n, m):
    if n == 3:
        ctx.regs.eflags |= 0x100
    return 0


def _removes(ctx, n, m):
    return UPROBE_HANDLER_REMOVE if n == 3 else 0


def _signals(ctx, n, m):
    if n == 4:
        m.send_sig(ctx.task, SIGNALS["SIGUSR1"])
    return 0


def _signals_the_process(ctx, n, m):
    if n == 4:
        m.kernel.send_process_sig(ctx.task.process, SIGNALS["SIGUSR1"])
    return 0


def _sets_orig_rax(ctx, n, m):
    if n == 2:
        ctx.regs.orig_rax = 39
    return 0


def _adds_consumer(ctx, n, m):
    if n == 2:
        m.uprobes.register(m.symbolize_site(ctx.vaddr), handler=lambda c: m.seen.append(("second", c.vaddr)))
    return 0


def _unregisters_itself(ctx, n, m):
    if n == 3:
        m.uprobes.unregister(ctx.consumer)
    return 0


def _unregisters_itself_at_its_first_hit(ctx, n, m):
    """The last consumer gone during the general hit that would install the fast path."""
    if n == 1:
        m.uprobes.unregister(ctx.consumer)
    return 0


def _replaces_itself(ctx, n, m):
    if n == 3:
        site = m.symbolize_site(ctx.vaddr)
        m.uprobes.unregister(ctx.consumer)
        m.uprobes.register(site, handler=lambda c: m.seen.append(("new", c.vaddr)))
    return 0


def _disables_itself(ctx, n, m):
    if n == 2:
        ctx.consumer.enabled = False
    return 0


def _listens(ctx, n, m):
    if n == 3:
        m.events.subscribe(lambda e: m.listened.append(type(e).__name__), ev.UprobeHit, ev.HandlerRan, ev.Emulated)
    return 0


HANDLERS = [
    _reads,
    _writes_rbx,
    _sets_rip,
    _sets_tf,
    _removes,
    _signals,
    _signals_the_process,
    _sets_orig_rax,
    _adds_consumer,
    _unregisters_itself,
    _unregisters_itself_at_its_first_hit,
    _replaces_itself,
    _disables_itself,
    _listens,
]


@pytest.mark.parametrize("kernel", ["6.9", "latest"])
@pytest.mark.parametrize("site", ["site_nop", "site_jmp", "site_push", "site_jcc"])
@pytest.mark.parametrize("handler", HANDLERS, ids=lambda h: h.__name__.strip("_"))
def test_whatever_a_handler_does_the_paths_agree(monkeypatch, kernel, site, handler):
    runs = []
    for specialized in (True, False):

        def setup(m, c, events):
            m.listened = events
            m.symbolize_site = {m.resolve(site): site}.get

        runs.append(_run(monkeypatch, specialized, kernel=kernel, site=site, handler=handler, setup=setup))
    _assert_same(*runs)
    if handler in (_signals, _signals_the_process):
        assert runs[0]["end"][0] != "exit" or runs[0]["end"][1] != 0, "SIGUSR1 should end the guest"
    if handler is _writes_rbx:
        assert (
            runs[0]["state"]["regs"]["rbx"] == (0x1B1B1B1B1B1B1B1B + sum(range(1, ITERATIONS + 1))) & 0xFFFFFFFFFFFFFFFF
        )
    if handler is _listens:
        assert runs[0]["events"], "the handler's subscription saw nothing"


@pytest.mark.parametrize("kernel", ["6.9", "latest"])
@pytest.mark.parametrize("directed", ["thread", "process"])
def test_a_signal_queued_between_hits_is_delivered_at_the_next_hit_on_both_paths(monkeypatch, kernel, directed):
    """A signal queued outside any kernel entry (here by a front end's code hook, as
    another CPU would) waits for the task's next entry: the next probe hit, whose exit
    to user mode delivers it - SIGUSR1 ends the guest there, before its later hits."""

    def setup(m, c, events):
        sent = []

        def hook(addr, size):
            if not sent and m.counters.uprobe_hits == 3:
                sent.append(addr)
                if directed == "thread":
                    m.send_sig(m.task, SIGNALS["SIGUSR1"])
                else:
                    m.kernel.send_process_sig(m.task.process, SIGNALS["SIGUSR1"])

        m.add_code_hook(hook, m.resolve("site_push"), m.resolve("site_push"))

    runs = [_run(monkeypatch, specialized, kernel=kernel, setup=setup) for specialized in (True, False)]
    _assert_same(*runs)
    assert runs[0]["counters"]["uprobe_hits"] == 4, "SIGUSR1 was not delivered at the hit after it was queued"


def test_without_the_cpu_state_in_place_every_hit_takes_exc_int3(monkeypatch):
    monkeypatch.setattr("emu.engine.regfile.cpu_window_layout", lambda: None)
    fast = _run(monkeypatch, True)
    assert fast["general"] == ITERATIONS, "no fast path can be set without the register window"
    monkeypatch.undo()
    general = _run(monkeypatch, False)
    _assert_same(fast, general)


def test_a_restored_checkpoint_drops_the_fast_paths_and_counts_again(monkeypatch):
    m = Machine.from_asm(SRC)
    calls = []
    m.uprobes.register("site_nop", handler=lambda ctx: calls.append(ctx.vaddr))
    cp = m.checkpoint()
    first = m.run(max_insns=200_000)
    counted = (m.counters.snapshot(), list(calls))
    engine, cpu = m.kernel.engine, m.process.cpu
    assert engine.breakpoint_fast_path(cpu, m.resolve("site_nop")) is not None, "the run set no fast path"
    m.restore(cp)
    assert engine.breakpoint_fast_path(cpu, m.resolve("site_nop")) is None, "a restore keeps a fast path"
    del calls[:]
    second = m.run(max_insns=200_000)
    assert (first.reason, first.exit_code) == (second.reason, second.exit_code) == ("exit", 0)
    assert (m.counters.snapshot(), calls) == counted


BAD_STACK_SRC = guest("""
    mov r12d, 3
again:
    cmp r12d, 1
    jne good
    mov rsp, 0x10000
good:
site_push:
    push rbx
    pop rbx
    dec r12d
    jnz again
""")


@pytest.mark.parametrize("kernel", ["6.9", "latest"])
def test_a_push_whose_emulation_faults_steps_out_of_line_on_both_paths(monkeypatch, kernel):
    """The third hit's push cannot be emulated (rsp points nowhere): the fast path hands
    it to the general end, which single-steps the push out of line, where it faults -
    SIGSEGV at the probed address, as through the general path."""
    runs = []
    real = Traps.exc_int3
    for specialized in (True, False):
        general = [0]

        def counted(self, cpu, general=general):
            general[0] += 1
            return real(self, cpu)

        monkeypatch.setattr(Traps, "exc_int3", counted)
        m = Machine.from_asm(BAD_STACK_SRC, kernel=kernel)
        m.kernel.uprobes.specialized = specialized
        c = m.uprobes.register("site_push", handler=lambda ctx: 0)
        r = m.run(max_insns=10_000)
        runs.append(((r.reason, r.signal, r.describe()), m.counters.snapshot(), c.hits, general[0]))
    (fast_end, fast_counters, fast_hits, fast_general), (end, counters, hits, general_traps) = runs
    assert (fast_end, fast_counters, fast_hits) == (end, counters, hits)
    assert "SIGSEGV" in end[2] and hits == 3, end
    assert counters["xol_singlesteps"] == 1 and counters["emulated"] == 2, counters  # the step began
    assert (fast_general, general_traps) == (1, 3), (fast_general, general_traps)
