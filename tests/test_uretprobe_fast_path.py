"""The return side specialised for its common case (``Uretprobes.handle_trampoline``
and ``specialize_ret_chain``, the entry's ``Uprobes._ret_only_chain``): the newest
return instance alone or over a live caller's frame, one return-only consumer.  It
must be transparent: the same guest through the specialised and the general paths
(``Uprobes.specialized`` off) ends with the same registers and memory, the same
counters, consumer passes, return-instance depths and trace output - with the
``uretprobe`` syscall (6.11+) and with the int3 trampoline (older kernels)."""

from __future__ import annotations

import pytest
from uprobe_helpers import final_state, guest

from emu import Machine
from kernel_model.kernel.events.uretprobes import Uretprobes

ITERATIONS = 4
# per iteration: target recursing 3 deep (three plain returns, each over a live
# caller frame), then wrapper tail-calling target (a chained pair: the general path)
PLAIN_PER_ITERATION, CHAINED_PER_ITERATION = 3, 1

SRC = guest(
    f"""
    mov r12d, {ITERATIONS}
    xor ebx, ebx
again:
    mov r13d, 2
    call target
    add rbx, rax
    add rbx, rcx
    add rbx, r11
    call wrapper
    add rbx, rax
    dec r12d
    jnz again
""",
    tail="""
target:
    test r13d, r13d
    jz leaf
    dec r13d
    call target
leaf:
    lea rax, [r12 + 7]
    mov rcx, 0x3c3c
    mov r11, 0x4b4b
    ret
wrapper:
    xor r13d, r13d
    jmp target
""",
)

KERNELS = ["6.9", "6.10", "6.11", "6.12", "6.13", "latest"]


def _offset(m, sym: str) -> int:
    return m.process.exe.elf.vaddr_to_offset(m.resolve(sym))


def _run(kernel: str, consumer: str, specialized: bool, monkeypatch) -> dict:
    m = Machine.from_asm(SRC, kernel=kernel)
    m.kernel.uprobes.specialized = specialized
    general = [0]
    real = Uretprobes.uprobe_handle_trampoline

    def counted(self, task, regs, sync=None):
        general[0] += 1
        return real(self, task, regs, sync)

    monkeypatch.setattr(Uretprobes, "uprobe_handle_trampoline", counted)
    seen = []

    def record(ctx):
        utask = ctx.task.utask
        r = ctx.regs
        seen.append((ctx.func, r.rip, r.rsp, r.rax, r.rcx, r.r11, r.eflags, len(utask.return_instances), utask.depth))
        return 0

    passes = []
    for sym in ("target", "wrapper"):
        if consumer == "handler":
            passes.append(m.uprobes.register(sym, ret_handler=record))
        else:
            passes.append(
                m.uprobes.add_event(
                    f"r:grp/{sym} {m.process.exe.path}:{_offset(m, sym):#x}",
                    ftrace=consumer == "ftrace",
                    programs=[record],
                )
            )
    r = m.run(max_insns=200_000)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    hits = [(p.hits, getattr(p, "nhit", None)) for p in passes]
    lines = [p.lines for p in passes] if consumer == "ftrace" else None
    utask = m.task.utask
    return {
        "state": final_state(m),
        "counters": m.counters.snapshot(),
        "seen": seen,
        "hits": hits,
        "lines": lines,
        "depth": (utask.depth, len(utask.return_instances)),
        "general": general[0],
    }


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("consumer", ["handler", "program", "ftrace"])
def test_the_specialised_return_path_does_what_the_general_one_does(monkeypatch, kernel, consumer):
    fast = _run(kernel, consumer, True, monkeypatch)
    general = _run(kernel, consumer, False, monkeypatch)
    returns = ITERATIONS * (PLAIN_PER_ITERATION + CHAINED_PER_ITERATION)
    assert general["general"] == returns, "the general run did not take the general trampoline"
    assert fast["general"] == ITERATIONS * CHAINED_PER_ITERATION, (
        f"the common case took the general trampoline ({fast['general']} of {returns} returns)"
    )
    for key in ("counters", "seen", "hits", "lines", "depth"):
        assert fast[key] == general[key], (key, fast[key], general[key])
    assert fast["state"] == general["state"]
    # and what both did is right: every return handled, the rcx/r11 of the callee
    # restored across the trampoline, nothing left on the return-instance stack
    assert fast["counters"]["uretprobe_hits"] == ITERATIONS * 5
    assert len(fast["seen"]) == ITERATIONS * 5 and fast["depth"] == (0, 0)
    assert {s[4:6] for s in fast["seen"]} == {(0x3C3C, 0x4B4B)}
    expected = sum((i + 7) * 2 + 0x3C3C + 0x4B4B for i in range(1, ITERATIONS + 1))
    assert fast["state"]["regs"]["rbx"] == expected


@pytest.mark.parametrize("kernel", ["6.9", "latest"])
def test_a_second_consumer_takes_the_general_return_chain(kernel):
    m = Machine.from_asm(SRC, kernel=kernel)
    core = m.kernel.uprobes
    a = m.uprobes.register("target", ret_handler=lambda ctx: 0)
    one = core.uret.specialize_ret_chain(a.uprobe)
    assert one.__name__ == "handle_uretprobe_chain_one"
    b = m.uprobes.register("target", ret_handler=lambda ctx: 0)
    assert a.uprobe.ret_chain is None, "a consumer coming clears the return chain"
    assert core.uret.specialize_ret_chain(a.uprobe) == core.uret.handle_uretprobe_chain
    m.uprobes.unregister(b)
    m.uprobes.unregister(a)
    s = m.uprobes.register("target", handler=lambda ctx: 0, ret_handler=lambda ctx: 0)
    assert core.uret.specialize_ret_chain(s.uprobe) == core.uret.handle_uretprobe_chain, "a session consumer"


@pytest.mark.parametrize("kernel", ["6.11", "latest"])
def test_a_disabled_return_consumer_is_skipped_on_both_paths(monkeypatch, kernel):
    out = []
    for specialized in (True, False):
        m = Machine.from_asm(SRC, kernel=kernel)
        m.kernel.uprobes.specialized = specialized
        calls = []
        uc = m.uprobes.register("target", ret_handler=lambda ctx, calls=calls: calls.append(ctx.regs.rax))
        uc.enabled = False
        r = m.run(max_insns=200_000)
        assert r.reason == "exit", r.describe()
        out.append((calls, m.counters.snapshot(), final_state(m)))
    assert out[0] == out[1] and out[0][0] == []
