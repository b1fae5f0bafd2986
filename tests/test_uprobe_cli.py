"""Entry probes from the shell: ``uprobe-emu run -e SPEC PROGRAM``.

One ftrace line per hit (stderr, or ``--events FILE``); the guest's output and status
are those of the unprobed run; a spec the kernel or the parser refuses is one line and
exit status 2.  The guest is the built-in ``uprobe_targets``.
"""

from __future__ import annotations

import re

import pytest
from cli_helpers import cli, one_line_error

from emu import Machine

GUEST = "guest:uprobe_targets"
ROUNDS = 4
LINE = re.compile(
    r"^\s*(?P<comm>\S+)-(?P<pid>\d+)\s+\[000\] d\.\.1\.\s+\d+\.\d{6}: "
    r"(?P<event>\S+): \((?P<ip>0x[0-9a-f]+)\)(?P<args>.*)$"
)


@pytest.fixture(scope="module")
def symbols():
    m = Machine.from_guest("uprobe_targets")
    names = (
        "target_nop",
        "target_nop5",
        "target_push",
        "target_call",
        "target_jmp",
        "target_jcc",
        "target_riprel",
        "target_ret",
        "target_lock",
    )
    return {n: m.resolve(n) for n in names}


@pytest.fixture(scope="module")
def plain_status():
    p = cli("run", GUEST, str(ROUNDS))
    assert p.stderr == b"", p.stderr
    return p.returncode


def hit_lines(text: str) -> list[re.Match]:
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        assert m, f"not an ftrace line: {line!r}"
        out.append(m)
    return out


CLASS_TARGETS = [
    "target_nop",
    "target_nop5",
    "target_push",
    "target_call",
    "target_jmp",
    "target_jcc",
    "target_riprel",
    "target_ret",
]


@pytest.fixture(scope="module")
def every_class_run():
    """One run with one event per instruction class: ev_<target>."""
    args = []
    for t in CLASS_TARGETS:
        args += ["-e", f"p:cls/ev_{t} {GUEST}:{t}"]
    return cli("run", *args, GUEST, str(ROUNDS))


@pytest.mark.parametrize("target", CLASS_TARGETS)
def test_one_ftrace_line_per_hit_at_the_probe_address(target, every_class_run, symbols):
    lines = [ln for ln in hit_lines(every_class_run.stderr.decode()) if ln["event"] == f"ev_{target}"]
    assert [int(ln["ip"], 16) for ln in lines] == [symbols[target]] * ROUNDS, (
        f"{target}: expected {ROUNDS} lines at {symbols[target]:#x}, got {[ln.group(0) for ln in lines]}"
    )
    assert {ln["comm"] for ln in lines} == {"guest:uprobe_ta"}, "comm is the 15-char task name"
    assert len({ln["pid"] for ln in lines}) == 1


def test_probed_guest_keeps_its_output_and_status(every_class_run, plain_status):
    assert every_class_run.returncode == plain_status, (
        f"status: expected the unprobed {plain_status}, got {every_class_run.returncode}"
    )
    assert every_class_run.stdout == b""


def test_lines_come_in_hit_order(every_class_run):
    events = [ln["event"] for ln in hit_lines(every_class_run.stderr.decode())]
    assert events == [f"ev_{t}" for t in CLASS_TARGETS] * ROUNDS, events


def test_fetchargs_print_the_registers_at_the_probe(symbols):
    """r13 (the running sum) is 21 per round when target_riprel is called."""
    p = cli("run", "-e", f"p:a/rr {GUEST}:target_riprel sum=%r13 ip=%ip", GUEST, "2")
    lines = hit_lines(p.stderr.decode())
    args = [ln["args"].strip() for ln in lines]
    ip = symbols["target_riprel"]
    assert args == [f"sum=0x15 ip={ip:#x}", f"sum=0x2a ip={ip:#x}"], args


def test_spec_forms_name_the_probes_they_say(symbols):
    """bare PATH:SYMBOL, bpftrace uprobe:PATH:SYMBOL, tracefs p PATH:SYMBOL without a
    name, and p PATH:0xOFFSET (file offset; the text segment maps offset 0 at 0x400000)."""
    forms = {
        "target_nop": f"{GUEST}:target_nop",
        "target_push": f"uprobe:{GUEST}:target_push",
        "target_ret": f"p {GUEST}:target_ret",
        "target_jmp": f"p {GUEST}:{symbols['target_jmp'] - 0x400000:#x}",
    }
    args = [a for spec in forms.values() for a in ("-e", spec)]
    p = cli("run", *args, GUEST, str(ROUNDS))
    ips = [int(ln["ip"], 16) for ln in hit_lines(p.stderr.decode())]
    for target in forms:
        assert ips.count(symbols[target]) == ROUNDS, f"{forms[target]!r}: {p.stderr.decode()}"
    assert len(ips) == len(forms) * ROUNDS


def test_events_file_gets_the_lines_and_stderr_stays_clean(tmp_path, symbols, plain_status):
    out = tmp_path / "events.txt"
    p = cli("run", "-e", f"p:a/push {GUEST}:target_push", "--events", str(out), "--counters", GUEST, str(ROUNDS))
    assert p.returncode == plain_status
    lines = hit_lines(out.read_text())
    assert [int(ln["ip"], 16) for ln in lines] == [symbols["target_push"]] * ROUNDS
    err = p.stderr.decode().splitlines()
    assert all(re.match(r"^\w+: ", line) for line in err), f"stderr holds only the counters: {err}"
    counters = dict(re.findall(r"^(\w+): (\d+)$", p.stderr.decode(), re.M))
    want = {"bp_traps": "4", "emulated": "4", "uprobe_hits": "4", "text_writes": "1"}
    assert {k: counters.get(k) for k in want} == want and "db_traps" not in counters, counters


BAD_SPECS = {
    "refused-lock-prefix": (f"p:a/l {GUEST}:target_lock", "ENOTSUPP"),
    "unknown-symbol": (f"p:a/x {GUEST}:no_such_symbol", "no_such_symbol"),
    "offset-past-eof": (f"p:a/x {GUEST}:0x999999", "EINVAL"),
    "bad-register": (f"p:a/x {GUEST}:target_nop %rax", "register"),
    "missing-path": ("p:a/x /no/such/file:0x10", "no such file or directory"),
}


@pytest.mark.parametrize("name", list(BAD_SPECS), ids=list(BAD_SPECS))
def test_bad_spec_is_one_line_and_exit_2(name):
    spec, fragment = BAD_SPECS[name]
    p = cli("run", "-e", spec, GUEST, str(ROUNDS))
    line = one_line_error(p)
    assert fragment in line, line
    assert p.stdout == b""


def test_duplicate_event_name_is_one_line_and_exit_2():
    spec = f"p:a/dup {GUEST}:target_nop"
    line = one_line_error(cli("run", "-e", spec, "-e", spec, GUEST, "1"))
    assert "a/dup" in line and "exists" in line, line
