"""BPF programs as uprobe consumers (kernel_model/trace/bpf_trace.py): the perf-event
path's args buffer, return probes and task filter, the uprobe_multi link's consumers,
cookies and handler return values, uprobe.session programs, and what attaching refuses,
per kernel profile where the kernel changed.  The programs are
guest_programs/bpf/test_attach.bpf.c and test_session.bpf.c at probed(s, n) of
tests/c/bpf_calls.c, which returns 2 * (n + 1) + 1."""

from __future__ import annotations

import pytest

from emu import Machine
from kernel_model.trace import events as ev
from kernel_model.trace.bpf_trace import BpfAttachError

EINVAL = 22
SESSION_COOKIE = 0xC0DE0000  # test_session.bpf.c's COOKIE_BASE


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("bpf_calls.c", "-static", name="bpf_calls")  # static: no ld.so to run, 3x faster


@pytest.fixture(scope="module")
def attach_obj(build_bpf):
    return build_bpf("test_attach.bpf.c")


@pytest.fixture(scope="module")
def session_obj(build_bpf):
    return build_bpf("test_session.bpf.c")


def ints(obj, name: str, size: int) -> list[int]:
    raw = obj.variable(name)
    return [int.from_bytes(raw[i : i + size], "little") for i in range(0, len(raw), size)]


def hits(obj, name: str = "entry_hits") -> int:
    return ints(obj, name, 4)[0]


def machine(guest, *argv: str, kernel: str = "latest") -> Machine:
    return Machine.from_elf(guest, argv=[guest, *argv], kernel=kernel)


def finish(m: Machine) -> None:
    result = m.run()
    assert (result.reason, result.exit_code) == ("exit", 0), result.describe()
    assert m.kernel.bpf.errors == [], m.kernel.bpf.errors


# ----------------------------------------------------------------------------- the perf-event path


@pytest.mark.parametrize(
    ("kernel", "ret", "fills"),
    [("6.9", 0, 3), ("6.9", 1, 3), ("6.10", 0, 0), ("6.10", 1, 3), ("6.18", 0, 0), ("6.18", 1, 3)],
)
def test_perf_path_fills_the_args_buffer_per_hit_before_6_10_and_for_non_zero_returns_after(
    guest, attach_obj, kernel, ret, fills
):
    """6.9's uprobe_dispatcher stores the args before any consumer runs; from 6.10
    (1b8f85defbc8) only a program's non-zero return, which goes on to the perf sample,
    makes __uprobe_perf_func prepare the buffer."""
    m = machine(guest, "calls", "3", kernel=kernel)
    obj = m.bpf.load(attach_obj, attach={"count_entry": f"{guest}:probed"}, rodata={"ret_value": ret})
    finish(m)
    assert hits(obj) == 3
    assert m.counters.args_buffer_fills == fills, f"{kernel}, program returns {ret}"


def test_perf_path_uprobe_sees_the_arguments(guest, attach_obj):
    m = machine(guest, "calls", "3")
    obj = m.bpf.load(attach_obj, attach={"count_entry": f"{guest}:probed"})
    finish(m)
    assert ints(obj, "args", 8)[:4] == [0, 1, 2, 0]


def test_perf_path_uretprobe_runs_at_return_with_rax_the_return_value(guest, attach_obj):
    m = machine(guest, "calls", "3")
    obj = m.bpf.load(attach_obj, attach={"count_return": f"{guest}:probed"})
    finish(m)
    assert (hits(obj), hits(obj, "return_hits")) == (0, 3)
    assert ints(obj, "rcs", 8)[:4] == [3, 5, 7, 0]


@pytest.mark.parametrize(("kernel", "ret", "fills"), [("6.9", 0, 3), ("6.9", 1, 3), ("6.10", 0, 0), ("6.10", 1, 3)])
def test_perf_path_uretprobe_fills_the_args_buffer_at_return_before_6_10(guest, attach_obj, kernel, ret, fills):
    """6.9's uretprobe_dispatcher fills the buffer before anything else; from 6.10 a
    fill per non-zero return of the program.  (6.9's entry dispatcher fills too - the
    model counts that fill for tracefs and BPF return probes alike: not at all.)"""
    m = machine(guest, "calls", "3", kernel=kernel)
    obj = m.bpf.load(attach_obj, attach={"count_return": f"{guest}:probed"}, rodata={"ret_value": ret})
    finish(m)
    assert hits(obj, "return_hits") == 3
    assert m.counters.args_buffer_fills == fills, f"{kernel}, program returns {ret}"


@pytest.mark.parametrize("kernel", ["6.9", "6.18"])
def test_pid_filtered_uretprobe_runs_at_the_parents_returns_and_leaves_the_child(guest, attach_obj, kernel):
    """The child's entry hit gets UPROBE_HANDLER_REMOVE from the entry dispatcher (the
    perf filter does not want its mm): no return probe there, the breakpoint removed -
    one child hit, then the parent's two calls return 3 and 5."""
    m = machine(guest, "fork", kernel=kernel)
    obj = m.bpf.load(attach_obj, attach={"count_return": f"{guest}:probed"}, pid=m.process.pid)
    finish(m)
    assert hits(obj, "return_hits") == 2
    assert ints(obj, "rcs", 8)[:3] == [3, 5, 0]
    assert m.counters.uprobe_hits == 3


@pytest.mark.parametrize("kernel", ["6.9", "6.18"])
def test_pid_filter_counts_the_parent_only_and_removes_the_breakpoint_in_the_child(guest, attach_obj, kernel):
    """The forked child inherits the breakpoint; at its first hit the perf event's filter
    does not want its mm (uprobe_perf_filter), the handler answers UPROBE_HANDLER_REMOVE
    and the breakpoint leaves the child: 1 child hit, then the parent's 2."""
    m = machine(guest, "fork", kernel=kernel)
    parent = m.process.pid
    obj = m.bpf.load(attach_obj, attach={"count_entry": f"{guest}:probed"}, pid=parent)
    finish(m)
    assert hits(obj) == 2
    assert ints(obj, "tgids", 4)[:3] == [parent, parent, 0]
    assert m.counters.uprobe_hits == 3
    # 6.9 fills the args buffer before the filter refuses the child's hit
    assert m.counters.args_buffer_fills == {"6.9": 3, "6.18": 0}[kernel]


def test_without_a_pid_filter_the_child_and_the_parent_count(guest, attach_obj):
    m = machine(guest, "fork")
    parent = m.process.pid
    obj = m.bpf.load(attach_obj, attach={"count_entry": f"{guest}:probed"})
    result = m.run()
    child = int(result.stdout.decode().split("child ")[1].split()[0])
    assert hits(obj) == 5
    assert ints(obj, "tgids", 4)[:6] == [child] * 3 + [parent] * 2 + [0]


def test_pid_filter_follows_the_process_through_exec(guest, attach_obj):
    m = machine(guest, "exec")
    pid = m.process.pid
    obj = m.bpf.load(attach_obj, attach={"count_entry": f"{guest}:probed"}, pid=pid)
    finish(m)
    assert hits(obj) == 3, "one call before the exec, two after it"
    assert ints(obj, "tgids", 4)[:4] == [pid, pid, pid, 0]


# ----------------------------------------------------------------------------- uprobe_multi


def _multi(m: Machine, guest: str, obj, prog: str, funcs: list[str], **kw):
    file, _ = m.uprobes.targets.resolve_target(f"{guest}:{funcs[0]}")
    offsets = [m.uprobes.targets.resolve_target(f"{guest}:{f}")[1] for f in funcs]
    return m.kernel.bpf.attach_uprobe_multi(obj.programs[prog], file, offsets, **kw), offsets


def test_uprobe_multi_registers_one_consumer_per_offset(guest, attach_obj):
    m = machine(guest, "calls", "3")
    obj = m.bpf.load(attach_obj)
    link, offsets = _multi(m, guest, obj, "multi_entry", ["probed", "callee"], cookies=[11, 22])
    tree = m.kernel.uprobes.tree
    assert sorted(off for _, off in tree) == sorted(offsets)
    for uc, off in zip(link.consumers, offsets):
        (uprobe,) = [u for (_, o), u in tree.items() if o == off]
        assert list(uprobe.consumers) == [uc]


def test_uprobe_multi_cookies_are_per_offset(guest, attach_obj):
    m = machine(guest, "calls", "3")
    obj = m.bpf.load(attach_obj)
    _multi(m, guest, obj, "multi_entry", ["probed", "callee"], cookies=[11, 22])
    finish(m)
    assert dict(obj.maps["by_cookie"]) == {11: 3, 22: 3}


def test_uretprobe_multi_runs_at_return_with_the_return_value(guest, attach_obj):
    m = machine(guest, "calls", "3")
    obj = m.bpf.load(attach_obj, attach={"multi_return": f"{guest}:probed"})
    finish(m)
    assert ints(obj, "rcs", 8)[:4] == [3, 5, 7, 0]


@pytest.mark.parametrize(
    ("kernel", "counted", "rcs"),
    [("6.11", 1, [1]), ("6.12", 3, [1, 1, 1]), ("6.13", 3, [0, 0, 0])],
)
def test_uprobe_multi_handler_returns_the_programs_value_before_6_13(guest, attach_obj, kernel, counted, rcs):
    """A program returning 1 is UPROBE_HANDLER_REMOVE up to 6.12: 6.11's handler_chain
    unapplies the breakpoint at once (one hit counted); 6.12 re-checks the filters
    first (cc01bd044e6a) and the link wants every process, so it stays; from 6.13
    (f505005bc742) the handler returns 0 whatever the program does."""
    m = machine(guest, "calls", "3", kernel=kernel)
    obj = m.bpf.load(attach_obj, attach={"multi_entry": f"{guest}:probed"}, rodata={"ret_value": 1})
    seen: list = []
    m.events.subscribe(lambda e: seen.append(e.rc), ev.HandlerRan)
    finish(m)
    assert (hits(obj), m.counters.uprobe_hits) == (counted, counted)
    assert seen == rcs


# ----------------------------------------------------------------------------- uprobe.session


@pytest.mark.parametrize("kernel", ["6.13", "6.18"])
def test_session_return_run_sees_is_return_and_the_entry_cookie(guest, session_obj, kernel):
    m = machine(guest, "calls", "3", kernel=kernel)
    obj = m.bpf.load(session_obj, attach={"session": f"{guest}:probed"})
    finish(m)
    assert (hits(obj, "entries"), hits(obj, "returns")) == (3, 3)
    assert ints(obj, "cookies_at_return", 8) == [SESSION_COOKIE + n for n in (0, 1, 2)] + [0]
    assert ints(obj, "rcs", 8) == [3, 5, 7, 0]


def test_session_entry_returning_1_skips_the_return_run(guest, session_obj):
    m = machine(guest, "calls", "3")
    obj = m.bpf.load(session_obj, attach={"session": f"{guest}:probed"}, rodata={"entry_ret": 1})
    finish(m)
    assert (hits(obj, "entries"), hits(obj, "returns")) == (3, 0)


def test_session_program_runs_at_entry_and_at_return(guest, attach_obj):
    m = machine(guest, "calls", "3", kernel="6.13")
    obj = m.bpf.load(attach_obj, attach={"plain_session": f"{guest}:probed"})
    finish(m)
    assert hits(obj) == 6, "three calls, each an entry and a return run"


def test_session_attach_on_6_12_is_einval(guest, attach_obj):
    m = machine(guest, "calls", "3", kernel="6.12")
    with pytest.raises(BpfAttachError) as err:
        m.bpf.load(attach_obj, attach={"plain_session": f"{guest}:probed"})
    assert err.value.errno == EINVAL


# ----------------------------------------------------------------------------- refusals and detach


@pytest.mark.parametrize(
    ("prog", "how"),
    [
        ("count_entry", "multi"),
        ("multi_entry", "perf"),
        ("multi_entry", "session"),
        ("plain_session", "multi"),
    ],
)
def test_a_program_loaded_for_another_attach_type_is_refused(guest, attach_obj, prog, how):
    m = machine(guest, "calls")
    obj = m.bpf.load(attach_obj)
    file, offset = m.uprobes.targets.resolve_target(f"{guest}:probed")
    kb, p = m.kernel.bpf, obj.programs[prog]
    with pytest.raises(BpfAttachError) as err:
        if how == "perf":
            kb.attach_uprobe(p, file, offset)
        else:
            kb.attach_uprobe_multi(p, file, [offset], session=how == "session")
    assert err.value.errno == EINVAL
    assert m.kernel.uprobes.tree == {}, "nothing is registered"


def test_detach_removes_the_probes(guest, attach_obj):
    """Stopped after the first hit, the object detached: the breakpoint's original
    byte (push %rbp) is back, the uprobe is unregistered, the last two calls run free."""
    m = machine(guest, "calls", "3")
    obj = m.bpf.load(attach_obj, attach={"count_entry": f"{guest}:probed"})
    probed = m.resolve("probed")
    assert m.mem.read(probed, 1) == b"\xcc"
    m.kernel.bpf.after_run = lambda: m.stop("first hit")
    assert m.run().reason == "stopped"
    m.kernel.bpf.after_run = None
    obj.detach()
    assert m.mem.read(probed, 1) == b"\x55"
    assert m.kernel.uprobes.tree == {}
    assert m.kernel.bpf.links_by_id == {}
    finish(m)
    assert (hits(obj), m.counters.uprobe_hits) == (1, 1)


def test_detach_of_a_multi_link_unregisters_every_offset(guest, attach_obj):
    m = machine(guest, "calls", "3")
    obj = m.bpf.load(attach_obj)
    link, _ = _multi(m, guest, obj, "multi_entry", ["probed", "callee"])
    m.kernel.bpf.detach(link)
    finish(m)
    assert (hits(obj), m.counters.uprobe_hits) == (0, 0)
    assert m.kernel.uprobes.tree == {}
