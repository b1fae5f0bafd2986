"""Each profile follows its own kernel's handler_chain.

Two switches, read from kernel/events/uprobes.c of each release:

* ``remove_rechecks_filter`` - cc01bd044e6a "uprobes: travers uprobe's consumer list
  locklessly under SRCU protection" (6.12): when every handler returned
  UPROBE_HANDLER_REMOVE, handler_chain re-checks ``filter_chain()`` and unapplies only
  if no consumer wants the mm.  Up to 6.11 it unapplied whenever there were consumers
  and all of them answered REMOVE (``if (remove && uprobe->consumers)``).
* ``handler_chain_rc`` - 4d756095d399 "uprobe: Add support for session consumer"
  (6.13): ``remove &= rc == UPROBE_HANDLER_REMOVE`` and a return instance only for the
  consumers that answered neither REMOVE nor IGNORE.  Up to 6.12: ``remove &= rc``
  (bit 0 of every rc) and ``if (need_prep && !remove) prepare_uretprobe()``, where
  ``need_prep`` is "some consumer has a ret_handler" - one return probe for all
  ret_handlers, including those of consumers that answered REMOVE themselves.

Every test is parametrized over the profiles (the expected side written out per
release) and each side is also reached by overriding the switch on a profile of the
other side.
"""

from __future__ import annotations

import pytest

from emu import Machine
from kernel_model.kernel.events.uprobes import UPROBE_HANDLER_IGNORE, UPROBE_HANDLER_REMOVE
from kernel_model.profiles import KernelProfile

PROFILES = KernelProfile.names()
BEFORE_6_12 = {"6.9", "6.10", "6.11"}  # no filter re-check on REMOVE
BEFORE_6_13 = {"6.9", "6.10", "6.11", "6.12"}  # rc as a bitmask, need_prep
ROUNDS = 5

# ROUNDS calls of f(i) = 2i + 1 (i = 0..ROUNDS-1); exits with their sum, 25.
CALLS = f"""
_start:
    xor r12, r12
    xor r13, r13
again:
    mov rdi, r12
    call f
    add r13, rax
    inc r12
    cmp r12, {ROUNDS}
    jne again
    mov rdi, r13
    mov eax, 231
    syscall
f:
    lea rax, [rdi + rdi + 1]
    ret
"""
SUM = ROUNDS * ROUNDS


def run_f(kernel, *consumers, **overrides):
    """Run CALLS with consumers on f (each a dict of register() keywords)."""
    m = Machine.from_asm(CALLS, kernel=kernel, **overrides)
    ucs = [m.uprobes.register("f", **kw) for kw in consumers]
    r = m.run(max_insns=100_000)
    assert (r.reason, r.exit_code) == ("exit", SUM), r.describe()
    return m, ucs


LEA_REX_W = 0x48  # first byte of f's lea: what REMOVE restores
INT3 = 0xCC


def f_byte(m) -> int:
    return m.mem.read(m.resolve("f"), 1)[0]


class LetsGo:
    """A filter that wants the process until a handler answers through ``answer``."""

    def __init__(self):
        self.wants = True

    def __call__(self, proc):
        return self.wants


def answer(rc, lets_go: LetsGo | None = None):
    """An entry handler returning ``rc``; with ``lets_go`` its filter stops wanting the
    process first (so only the REMOVE rule decides)."""

    def handler(ctx):
        if lets_go is not None:
            lets_go.wants = False
        return rc

    return handler


def letting_go(rc, **kw) -> dict:
    f = LetsGo()
    return dict(handler=answer(rc, f), filter=f, **kw)


# ============================================================================ remove_rechecks_filter


def test_profiles_recheck_the_filter_from_6_12():
    got = {p: KernelProfile.get(p).remove_rechecks_filter for p in PROFILES}
    want = {p: p not in BEFORE_6_12 for p in PROFILES}
    assert got == want


@pytest.mark.parametrize("profile", PROFILES)
def test_remove_from_a_filterless_consumer(profile):
    """Up to 6.11 REMOVE takes the int3 out after the first hit; from 6.12 the
    filterless consumer (it wants every mm) vetoes its own REMOVE."""
    m, (uc,) = run_f(profile, dict(handler=answer(UPROBE_HANDLER_REMOVE)))
    want = (1, LEA_REX_W) if profile in BEFORE_6_12 else (ROUNDS, INT3)
    got = (uc.hits, f_byte(m))
    assert got == want, f"{profile}: expected (hits, byte at f) {want}, got {got}"


@pytest.mark.parametrize("profile", PROFILES)
def test_remove_from_a_consumer_whose_filter_still_wants_the_process(profile):
    m, (uc,) = run_f(profile, dict(handler=answer(UPROBE_HANDLER_REMOVE), filter=lambda p: True))
    want = 1 if profile in BEFORE_6_12 else ROUNDS
    assert uc.hits == want, f"{profile}: expected {want} hits, got {uc.hits}"


@pytest.mark.parametrize("profile", PROFILES)
def test_remove_with_another_consumers_filter_wanting_the_process(profile):
    """Both answer REMOVE; only the second one's filter lets go of the process."""
    m, ucs = run_f(
        profile, dict(handler=answer(UPROBE_HANDLER_REMOVE), filter=lambda p: True), letting_go(UPROBE_HANDLER_REMOVE)
    )
    want = [1, 1] if profile in BEFORE_6_12 else [ROUNDS, ROUNDS]
    assert [u.hits for u in ucs] == want


@pytest.mark.parametrize("profile", PROFILES)
def test_remove_when_every_filter_lets_go_removes_on_every_profile(profile):
    """The control: with no consumer wanting the mm both sides unapply at once."""
    m, (uc,) = run_f(profile, letting_go(UPROBE_HANDLER_REMOVE))
    assert (uc.hits, f_byte(m)) == (1, LEA_REX_W)


@pytest.mark.parametrize(
    "profile,value,hits",
    [
        ("6.18", False, 1),
        ("latest", False, 1),
        ("6.9", True, ROUNDS),
        ("6.11", True, ROUNDS),
    ],
)
def test_remove_rechecks_filter_override(profile, value, hits):
    m, (uc,) = run_f(profile, dict(handler=answer(UPROBE_HANDLER_REMOVE)), remove_rechecks_filter=value)
    assert uc.hits == hits, f"{profile} with remove_rechecks_filter={value}: expected {hits}, got {uc.hits}"


# ============================================================================ handler_chain_rc


def test_profiles_read_rc_exactly_from_6_13():
    got = {p: KernelProfile.get(p).handler_chain_rc for p in PROFILES}
    want = {p: "bitmask" if p in BEFORE_6_13 else "exact" for p in PROFILES}
    assert got == want


@pytest.mark.parametrize("profile", PROFILES)
def test_rc_3_is_a_remove_only_before_6_13(profile):
    """rc 3 (REMOVE | IGNORE bits): ``remove &= rc`` keeps bit 0, ``rc == REMOVE`` does
    not.  The filter lets go, so a REMOVE unapplies on every profile."""
    m, (uc,) = run_f(profile, letting_go(3))
    want = (1, LEA_REX_W) if profile in BEFORE_6_13 else (ROUNDS, INT3)
    got = (uc.hits, f_byte(m))
    assert got == want, f"{profile}: expected (hits, byte at f) {want}, got {got}"


@pytest.mark.parametrize("profile", PROFILES)
def test_rc_3_with_a_ret_handler(profile):
    """Before 6.13 rc 3 is a REMOVE from every consumer: no return probe.  From 6.13 it
    is neither REMOVE nor IGNORE: a return instance, the ret_handler runs per call."""
    rets = []
    m, _ = run_f(profile, letting_go(3, ret_handler=lambda c: rets.append(c.regs.rax)))
    want = [] if profile in BEFORE_6_13 else [2 * i + 1 for i in range(ROUNDS)]
    assert rets == want, f"{profile}: expected return values {want}, got {rets}"


@pytest.mark.parametrize("profile", PROFILES)
def test_removing_consumers_ret_handler_runs_while_another_keeps_the_probe(profile):
    """A answers REMOVE and has a ret_handler; B (entry only) answers 0, so the probe
    stays.  Before 6.13 need_prep (A has a ret_handler) && !remove (B) prepares the
    return probe and A's ret_handler runs at every return; from 6.13 A's REMOVE keeps
    it out of the return instance and no return probe is set up at all."""
    rets = []
    m, (a, b) = run_f(
        profile,
        dict(handler=answer(UPROBE_HANDLER_REMOVE), ret_handler=lambda c: rets.append(c.regs.rax)),
        dict(handler=answer(0)),
    )
    want = [2 * i + 1 for i in range(ROUNDS)] if profile in BEFORE_6_13 else []
    assert rets == want, f"{profile}: expected A's ret_handler to see {want}, got {rets}"
    assert (a.hits, b.hits) == (ROUNDS, ROUNDS)
    assert m.counters.uretprobe_hits == len(want)


@pytest.mark.parametrize("profile", PROFILES)
def test_ignore_keeps_the_return_probe_only_before_6_13(profile):
    """UPROBE_HANDLER_IGNORE (2) exists from 6.13; before, ``remove &= 2`` just means
    "not REMOVE" and the return probe is prepared as for 0."""
    rets = []
    m, (uc,) = run_f(
        profile, dict(handler=answer(UPROBE_HANDLER_IGNORE), ret_handler=lambda c: rets.append(c.regs.rax))
    )
    want = [2 * i + 1 for i in range(ROUNDS)] if profile in BEFORE_6_13 else []
    assert rets == want, f"{profile}: expected {want}, got {rets}"
    assert uc.hits == ROUNDS


@pytest.mark.parametrize("profile", PROFILES)
def test_every_consumer_removing_sets_up_no_return_probe(profile):
    """The control: all answer REMOVE - no return probe on either side (need_prep &&
    !remove is false; per consumer, nobody wants one)."""
    rets = []
    m, _ = run_f(profile, letting_go(UPROBE_HANDLER_REMOVE, ret_handler=lambda c: rets.append(1)))
    assert rets == [] and m.counters.ri_allocated == 0


@pytest.mark.parametrize(
    "profile,value,hits",
    [
        ("6.18", "bitmask", 1),
        ("latest", "bitmask", 1),
        ("6.9", "exact", ROUNDS),
        ("6.11", "exact", ROUNDS),
    ],
)
def test_handler_chain_rc_override(profile, value, hits):
    m, (uc,) = run_f(profile, letting_go(3), handler_chain_rc=value)
    assert uc.hits == hits, f"{profile} with handler_chain_rc={value}: expected {hits}, got {uc.hits}"


@pytest.mark.parametrize("profile", ["6.9", "6.11"])
def test_exact_override_also_drops_the_removing_consumers_return(profile):
    rets = []
    run_f(
        profile,
        dict(handler=answer(UPROBE_HANDLER_REMOVE), ret_handler=lambda c: rets.append(1)),
        dict(handler=answer(0)),
        handler_chain_rc="exact",
    )
    assert rets == []


def test_bad_switch_value_is_a_clear_error():
    from kernel_model.errors import InputError

    with pytest.raises(InputError, match="handler_chain_rc"):
        KernelProfile.get("6.18", handler_chain_rc="mask")


def test_latest_is_7_3():
    """``latest`` is the newest modeled release, 7.3 (nop10, -EPROTO, trampolines
    copied on fork: 554ba38456da, d9a48e77f6fe), with its ``uname -r``."""
    latest, v73 = KernelProfile.get("latest"), KernelProfile.get("7.3")
    assert ({s: getattr(latest, s) for s in KernelProfile.SWITCHES}, latest.release) == (
        {s: getattr(v73, s) for s in KernelProfile.SWITCHES},
        "7.3.0",
    )


@pytest.mark.parametrize(
    "switch,before,after",
    [
        ("remove_rechecks_filter", "6.11", "6.12"),
        ("handler_chain_rc", "6.12", "6.13"),
        ("optimize", "7.2", "7.3"),
        ("uprobe_syscall_outside", "7.2", "7.3"),
        ("trampolines_copied_on_fork", "7.2", "7.3"),
        ("treelock", "6.9", "6.10"),
        ("perf_filter", "6.9", "6.10"),
        ("treelock", "6.11", "6.12"),
        ("uprobe_lifetime", "6.11", "6.12"),
        ("consumers_lock", "6.11", "6.12"),
        ("nhit", "6.11", "6.12"),
        ("uprobe_lifetime", "6.12", "6.13"),
        ("uretprobe_lifetime", "6.12", "6.13"),
        ("vma_lookup", "6.13", "6.14"),
        ("sstep_siglock", "6.14", "6.15"),
        ("uretprobe_lifetime", "7.2", "7.3"),
        ("bpf_uprobe_session", "6.12", "6.13"),
        ("bpf_uprobe_multi_rc", "6.12", "6.13"),
    ],
)
def test_a_switch_changes_in_the_release_that_landed_it(switch, before, after):
    """The release a change landed in differs from the one before it in that switch
    (6.12 and 7.2 have profiles of their own for this)."""
    a, b = getattr(KernelProfile.get(before), switch), getattr(KernelProfile.get(after), switch)
    assert a != b, f"{switch}: {before} has {a!r}, {after} has {b!r}"
