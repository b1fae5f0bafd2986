"""Small kernel-model defects: the forked child's XOL area size, the USDT semaphore
write going through ``Memory``, and the cost profiles held without module state."""

from __future__ import annotations

import pytest
from uprobe_helpers import guest

from emu import Machine
from emu.frontends.bench import costmodel
from kernel_model.trace.events import RefCtrUpdate

SEMA_LOOP = guest(
    """
    mov r12d, 3
again:
probe:
    nop
    dec r12d
    jnz again
    mov eax, 39
    syscall
""",
    data="sema:\n    .short 0",
)


# ------------------------------------------------------------------ dup_xol_work


@pytest.mark.parametrize("slots", [2, 5])
def test_forked_child_xol_area_has_the_configured_slot_count(build_c, slots):
    """dup_xol_work creates the child's area as get_xol_area does: with the slot count
    configured on the uprobes subsystem, not the default 32."""
    m = Machine.from_elf(build_c("fork_pending.c", "-static", name="fork_pending"), kernel="6.18", seed=0)
    m.uprobes.xol_slots = slots
    seen = {}

    def ret(ctx):
        area = ctx.task.process.mm_uprobes.xol_area
        seen[ctx.task.process.pid] = (area.nslots, len(area.slots))

    m.uprobes.register("fork_inside", ret_handler=ret)
    r = m.run()
    assert r.reason == "exit", r.describe()
    assert seen == {1000: (slots, slots), 1001: (slots, slots)}, (
        f"(nslots, len(slots)) per pid: expected {slots} for parent and child, got {seen}"
    )


# ------------------------------------------------------------------ update_ref_ctr


def _semaphore(m):
    addr = m.resolve("sema")
    return addr, m.mem.find_vma(addr).offset_of(addr)


def test_semaphore_updates_are_published_on_the_event_stream():
    """update_ref_ctr writes through Memory and the event stream shows each change:
    0 -> 1 at register, 1 -> 0 at unregister."""
    m = Machine.from_asm(SEMA_LOOP)
    addr, off = _semaphore(m)
    seen = []
    m.events.subscribe(seen.append, RefCtrUpdate)
    uc = m.uprobes.register("probe", handler=lambda ctx: 0, ref_ctr_offset=off)
    m.uprobes.unregister(uc)
    pid = m.process.pid
    assert seen == [RefCtrUpdate(pid, addr, 0, 1), RefCtrUpdate(pid, addr, 1, 0)], seen
    assert m.mem.read(addr, 2) == b"\0\0"


# ------------------------------------------------------------------ cost profiles


def test_cost_profiles_are_read_only_and_fitted_once():
    a, b = costmodel.machines(), costmodel.machines()
    assert a is b, "fitted once"
    with pytest.raises(TypeError):
        a["mine"] = a["intel-2025"]  # no module-level dict to change
    assert not hasattr(costmodel, "_MACHINES")
