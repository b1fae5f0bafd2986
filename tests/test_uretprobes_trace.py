"""Return probes through the tracefs interface: ``r:`` events, ``$retval``, the
``PATH:SYMBOL%return`` and ``uretprobe:PATH:SYMBOL`` forms, from Python and from the CLI.

The kernel side: trace_uprobe.c's uretprobe_dispatcher() and print_uprobe_event().
"""

from __future__ import annotations

import re

import pytest
from cli_helpers import cli
from test_uretprobes_support import NR_URETPROBE, TAIL_GUEST, TRAMPOLINE_PROFILES, call_loop_guest, is_int3, machine

from emu import Machine
from emu.asm import asm_to_elf

N = 3
# f(i) = 2i + 1 for i = 0..2
RETVALS = [1, 3, 5]
LINE = re.compile(
    r"^\s*(?P<comm>\S+)-(?P<pid>\d+)\s+\[000\] d\.\.1\.\s+\d+\.\d{6}: "
    r"(?P<event>\S+): \(0x(?P<ip>[0-9a-f]+) <- 0x(?P<func>[0-9a-f]+)\)(?P<args>.*)$"
)


def parse(lines):
    out = []
    for line in lines:
        mo = LINE.match(line)
        assert mo, f"not a return-probe trace line: {line!r}"
        out.append((mo["event"], int(mo["ip"], 16), int(mo["func"], 16), mo["args"].strip()))
    return out


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_r_event_with_retval_records_return_address_function_and_value(kernel):
    m = machine(call_loop_guest(N), kernel)
    ev = m.uprobes.add_event("r:grp/fret asm-guest:f $retval")
    r = m.run(max_insns=100_000)
    assert r.exit_code == N * N
    after_f, f = m.resolve("after_f"), m.resolve("f")
    expected = [("fret", after_f, f, f"arg1={v:#x}") for v in RETVALS]
    assert parse(ev.lines) == expected
    assert ev.name == "grp/fret" and ev.hits == N
    assert m.counters.syscalls[NR_URETPROBE] == (0 if is_int3(m) else N)


@pytest.mark.parametrize("spec", ["asm-guest:f%return", "uretprobe:asm-guest:f", "r asm-guest:f", "ur:asm-guest:f"])
def test_return_probe_spellings_make_the_same_event(spec):
    m = machine(call_loop_guest(N), "6.18")
    ev = m.uprobes.add_event(spec)
    m.run(max_insns=100_000)
    assert ev.spec.is_return
    assert ev.event == "f__return", "a probe on a symbol is named as perf names it"
    assert [(e, ip, fn) for e, ip, fn, _ in parse(ev.lines)] == [(ev.event, m.resolve("after_f"), m.resolve("f"))] * N
    assert m.uprobes.trace.uprobe_events().startswith(f"r:uprobes/{ev.event} asm-guest:")


def test_named_retval_with_type():
    m = machine(call_loop_guest(N), "6.18")
    ev = m.uprobes.add_event("r:grp/typed asm-guest:f ret=$retval:s32")
    m.run(max_insns=100_000)
    assert [a for *_, a in parse(ev.lines)] == [f"ret={v}" for v in RETVALS]


def test_retval_on_an_entry_probe_is_refused():
    from kernel_model.errors import EmuError

    m = machine(call_loop_guest(N), "6.18")
    with pytest.raises(EmuError, match="retval"):
        m.uprobes.add_event("p:grp/bad asm-guest:f $retval")


@pytest.mark.parametrize("kernel", TRAMPOLINE_PROFILES)
def test_tail_call_return_events_innermost_first(kernel):
    m = machine(TAIL_GUEST, kernel)
    m.uprobes.add_event("r:grp/a asm-guest:tail_a $retval")
    m.uprobes.add_event("r:grp/b asm-guest:tail_b $retval")
    m.run(max_insns=100_000)
    after_a = m.resolve("after_a")
    assert parse(m.uprobes.trace.lines) == [
        ("b", after_a, m.resolve("tail_b"), "arg1=0x10"),
        ("a", after_a, m.resolve("tail_a"), "arg1=0x10"),
    ]


def test_entry_and_return_events_interleave_in_call_order():
    m = machine(call_loop_guest(2), "6.18")
    m.uprobes.add_event("p:grp/in asm-guest:f x=%di")
    m.uprobes.add_event("r:grp/out asm-guest:f $retval")
    m.run(max_insns=100_000)
    payload = [line.split(": ", 1)[1] for line in m.uprobes.trace.lines]
    f, ret = m.resolve("f"), m.resolve("after_f")
    assert payload == [
        f"in: ({f:#x}) x=0x0",
        f"out: ({ret:#x} <- {f:#x}) arg1=0x1",
        f"in: ({f:#x}) x=0x1",
        f"out: ({ret:#x} <- {f:#x}) arg1=0x3",
    ]


# ----------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def loop_elf(tmp_path_factory):
    elf, _ = asm_to_elf(call_loop_guest(N))
    path = tmp_path_factory.mktemp("uret") / "loopguest"
    path.write_bytes(elf)
    return str(path)


@pytest.mark.parametrize("kernel", ["6.10", "6.18"])
@pytest.mark.parametrize("spec", ["r:grp/fret {p}:f $retval", "{p}:f%return", "uretprobe:{p}:f"])
def test_cli_return_probe_prints_one_line_per_return(loop_elf, spec, kernel):
    proc = cli("run", "-e", spec.format(p=loop_elf), "--kernel", kernel, "--counters", loop_elf)
    err = proc.stderr.decode()
    assert proc.returncode == N * N, err
    lines = [line for line in err.splitlines() if "<-" in line]
    m = Machine.from_elf(loop_elf)
    parsed = parse(lines)
    assert [(ip, fn) for _, ip, fn, _ in parsed] == [(m.resolve("after_f"), m.resolve("f"))] * N
    if "$retval" in spec:
        assert [a for *_, a in parsed] == [f"arg1={v:#x}" for v in RETVALS]
    assert f"uretprobe_hits: {N}" in err
    if kernel == "6.10":
        assert f"bp_traps: {2 * N}" in err and "335" not in err
    else:
        assert f"bp_traps: {N}" in err and f"335: {N}" in err


def test_cli_return_probes_on_a_gcc_guest_with_longjmp(build_c, tmp_path):
    """A static gcc guest: `r:` on leaf with $retval and `%return` on outer; frames
    abandoned by longjmp print nothing."""
    exe = build_c("uretprobe_longjmp.c", "-static")
    out = tmp_path / "events.txt"
    proc = cli(
        "run",
        "-e",
        f"r:lj/leaf {exe}:leaf $retval:s32",
        "-e",
        f"{exe}:outer%return",
        "-e",
        f"r:lj/inner {exe}:inner",
        "--events-file",
        str(out),
        exe,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout == b"total=1008\n"
    events = [(e, a) for e, _, _, a in parse(out.read_text().splitlines())]
    assert events == [("leaf", "arg1=0"), ("leaf", "arg1=2"), ("leaf", "arg1=4"), ("outer__return", "")], events


@pytest.mark.parametrize("kernel", ["6.10", "latest"])
@pytest.mark.parametrize(
    "spec",
    [
        "r:grp/push guest:uprobe_targets:target_push $retval",
        "guest:uprobe_targets:target_push%return",
        "uretprobe:guest:uprobe_targets:target_push",
    ],
)
def test_cli_return_probe_on_a_builtin_guest(spec, kernel):
    """`uprobe-emu run -e SPEC guest:NAME`: one return line per call (one call per round),
    each naming the function and its real return address; the guest's status is the
    unprobed one."""
    rounds = 3
    plain = Machine.from_guest("uprobe_targets", argv=["uprobe_targets", str(rounds)]).run()
    proc = cli("run", "-e", spec, "--kernel", kernel, "guest:uprobe_targets", str(rounds))
    err = proc.stderr.decode()
    assert proc.returncode == plain.exit_code, err
    m = Machine.from_guest("uprobe_targets")
    func = m.resolve("target_push")
    parsed = parse([line for line in err.splitlines() if "<-" in line])
    assert len(parsed) == rounds, err
    assert {fn for _, _, fn, _ in parsed} == {func}
    [ip] = {ip for _, ip, _, _ in parsed}
    assert m.mem.read(ip - 5, 1) == b"\xe8", f"{ip:#x} does not follow a call"
