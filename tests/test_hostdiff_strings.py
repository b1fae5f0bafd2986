"""String fetchargs whose bytes are not one plain line (tests/c/string_args.c).

What the host kernel prints (measured on Linux 6.18, print_type_string's ``"%s"``): the
string's bytes as they are - a newline splits the event's line in the trace file, a tab,
\\x01 and DEL stay raw, quotes and backslashes are not escaped.  The model's trace
buffer holds the same line.  ``diff`` joins a line without a trace line's head to the
event before it, so the value compares whole, and shows control bytes escaped in its
report; the instruction trace (one event per line) shows them escaped too.
"""

from __future__ import annotations

import io

import pytest
from cli_helpers import cli
from test_hostdiff import needs_tracefs, our_probes_left

from emu import Machine
from emu.frontends import hostdiff
from emu.frontends.hostdiff import Event, RunRecord
from emu.frontends.trace import Tracer

# the strings takes() gets, as the kernel prints them after "s="
VALUES = ['"a\nb"', '"tab\there\x01\x7f\u00e9 end"', '""', '"quote"back\\slash"', '"\\xff\n"']


@pytest.fixture(scope="module")
def exe(build_c):
    return build_c("string_args.c", name="string_args")


def spec(exe):
    return f"p:g/s {exe}:takes s=+0(%di):string"


def test_the_models_trace_line_holds_the_strings_bytes_as_the_host_prints_them(exe):
    m = Machine.from_elf(exe, argv=[exe])
    ev = m.uprobes.add_event(spec(exe))
    assert m.run(timeout=60).exit_code == 0
    got = [line.split(") s=", 1)[1] for line in m.uprobes.trace.lines_of(ev)]
    assert got == VALUES, f"model {got!r}\n host {VALUES!r}"


def test_the_instruction_trace_shows_a_newline_escaped_in_one_line(exe):
    m = Machine.from_elf(exe, argv=[exe])
    out = io.StringIO()
    t = Tracer(m, "text", out)
    m.uprobes.add_event(spec(exe), output=t.ftrace_output())
    m.run(timeout=60)
    t.close()
    ftrace = [line.split(") s=", 1)[1] for line in out.getvalue().splitlines() if "# ftrace:" in line]
    assert ftrace == ['"a\\x0ab"', '"tab\\x09here\\x01\\x7f\u00e9 end"', '""', '"quote"back\\slash"', '"\\xff\\x0a"'], (
        ftrace
    )


HOST_TEXT = (
    "# tracer: nop\n#\n"
    '           strnl-18469   [001] DBZff 19363.643924: ev0: (0x558893668139) s="a\nb"\n'
    '           strnl-18469   [001] DBZff 19363.643940: ev0: (0x558893668139) s="t\x0bv"\n'
    '           strnl-18469   [001] DBZff 19363.643945: ev0: (0x558893668139) s=""\n'
)


def test_a_line_without_a_trace_head_continues_the_event_before_it():
    args = [rec["args"] for rec in hostdiff.parse_trace(HOST_TEXT)]
    assert args == [' s="a\nb"', ' s="t\x0bv"', ' s=""'], args


def test_the_divergence_report_shows_control_bytes_escaped():
    a = RunRecord("exit 0", b"", [Event("s", "entry", 0x1139, None, ' s="a\nb"')])
    b = RunRecord("exit 0", b"", [Event("s", "entry", 0x1139, None, ' s="a\tc"')])
    report = hostdiff.compare(a, b)
    assert report[1:] == ['  > host : s entry (0x1139) s="a\\x0ab"', '  > model: s entry (0x1139) s="a\\x09c"'], report


@needs_tracefs
def test_diff_compares_strings_with_newlines_whole(exe):
    probes, _ = hostdiff.resolve_specs(exe, [spec(exe)])
    native = hostdiff.run_native(exe, [exe], probes, b"", 60)
    model = hostdiff.run_model(exe, [exe], probes, b"", hostdiff.host_profile_name(), 10**9)
    assert hostdiff.compare(native, model) == []
    for side, rec in (("host", native), ("model", model)):
        got = [e.args for e in rec.events]
        assert got == [" s=" + v for v in VALUES], f"{side}: {got!r}"
    assert our_probes_left() == []


@needs_tracefs
def test_cli_diff_agrees_on_strings_with_newlines(exe):
    p = cli("diff", "-e", spec(exe), exe)
    assert p.returncode == 0 and p.stdout.decode().startswith("agree: "), p.stdout + p.stderr
    assert ", 5 events" in p.stdout.decode(), p.stdout
