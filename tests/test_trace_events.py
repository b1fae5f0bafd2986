"""tracefs events on a running guest: fetchargs, ftrace lines, listings, args buffer."""

from __future__ import annotations

import io

import pytest

from emu import Machine, ProbeSpecError

GUEST = """
_start:
    lea rdi, [rip + msg]
    mov rsi, -2
    mov rdx, 0x1234
    push 0x55
    call func
    mov rdi, rax
    mov eax, 231
    syscall
func:
    push rbp
    mov rbp, rsp
    mov rax, 0x77
    pop rbp
    ret
.data
msg:
    .ascii "probe me"
    .byte 0
value:
    .quad 0x1122334455667788
"""


def run_with(*specs, kernel="latest", ftrace=True, programs=()):
    m = Machine.from_asm(GUEST, kernel=kernel, path="/bin/tgt")
    evs = [m.uprobes.add_event(s, ftrace=ftrace, programs=programs) for s in specs]
    r = m.run()
    assert r.exit_code == 0x77
    return m, evs


def payload(line: str) -> str:
    return line.split(": ", 1)[1]


@pytest.mark.parametrize(
    "arg,expected",
    [
        ("%di", "arg1=0x402000"),
        ("%si:s64", "arg1=-2"),
        ("%si:s8", "arg1=-2"),
        ("%si:u8", "arg1=254"),
        ("%dx:x16", "arg1=0x1234"),
        ("%dx:u32", "arg1=4660"),
        ("+0(%di):string", 'arg1="probe me"'),
        ("+0(%di):u8", "arg1=112"),
        ("+0(%di):char", "arg1='p'"),
        ("@0x402009", "arg1=0x1122334455667788"),
        ("@+0x2009:x32", "arg1=0x55667788"),
        ("$stack0", "arg1=0x40101c"),
        ("$stack1", "arg1=0x55"),
        ("+8(%sp):u64", "arg1=85"),
        ("$comm", 'arg1="tgt"'),
        ("\\42", "arg1=0x2a"),
        ("val=%dx", "val=0x1234"),
        ("+0(+0(%sp)):x8", "arg1=0x48"),
        ("+0(%ax):u64", "arg1=0"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 20 else None,
)
def test_entry_fetcharg_formats_like_the_kernel(arg, expected):
    m, (ev,) = run_with(f"p:t/e /bin/tgt:func {arg}")
    assert ev.lines == [f"{ev.lines[0].split(': ', 1)[0]}: e: (0x401026) {expected}"], ev.lines


def test_string_from_an_unreadable_address_prints_fault():
    m, (ev,) = run_with("p:t/e /bin/tgt:func +0(%ax):string")
    assert payload(ev.lines[0]) == "e: (0x401026) arg1=(fault)"


def test_return_event_prints_return_and_function_addresses():
    m, (ev,) = run_with("r:t/r /bin/tgt:func $retval rv=%ax:u8")
    assert payload(ev.lines[0]) == "r: (0x40101c <- 0x401026) arg1=0x77 rv=119"


def test_retval_on_an_entry_probe_is_rejected():
    m = Machine.from_asm(GUEST, path="/bin/tgt")
    with pytest.raises(ProbeSpecError) as e:
        m.uprobes.add_event("p:t/e /bin/tgt:func $retval")
    assert "retval" in str(e.value).lower()


def test_line_prefix_is_the_ftrace_format():
    m, (ev,) = run_with("p:t/e /bin/tgt:func")
    line = ev.lines[0]
    assert line.startswith("             tgt-1000    [000] d..1. ")
    assert line.endswith(": e: (0x401026)")


def test_default_event_name_and_group():
    m, (ev,) = run_with("p /bin/tgt:0x1026")
    assert (ev.group, ev.event) == ("uprobes", "p_tgt_0x1026")
    assert m.kernel.trace.uprobe_events() == "p:uprobes/p_tgt_0x1026 /bin/tgt:0x0000000000001026\n"


def test_listing_and_profile():
    m, evs = run_with("p:grp/ent /bin/tgt:func %di %ax", "r:grp/ret /bin/tgt:func $retval")
    assert m.kernel.trace.uprobe_events().splitlines() == [
        "p:grp/ent /bin/tgt:0x0000000000001026 arg1=%di arg2=%ax",
        "r:grp/ret /bin/tgt:0x0000000000001026 arg1=$retval",
    ]
    profile = m.kernel.trace.uprobe_profile().splitlines()
    assert profile == [f"  /bin/tgt {'ent':<44} {1:>15}", f"  /bin/tgt {'ret':<44} {1:>15}"]


def test_delete_removes_the_event_and_its_breakpoint():
    m = Machine.from_asm(GUEST, path="/bin/tgt")
    m.uprobes.add_event("p:grp/ent /bin/tgt:func")
    func = m.resolve("func")
    assert m.mem.read(func, 1) == b"\xcc"
    m.uprobes.add_event("-:grp/ent")
    assert m.mem.read(func, 1) == b"\x55"
    assert m.kernel.trace.uprobe_events() == ""


def test_duplicate_event_name_is_an_error():
    m = Machine.from_asm(GUEST, path="/bin/tgt")
    m.uprobes.add_event("p:grp/ent /bin/tgt:func")
    with pytest.raises(ProbeSpecError):
        m.uprobes.add_event("p:grp/ent /bin/tgt:_start")


def test_events_are_written_to_the_output_stream():
    out = io.StringIO()
    m = Machine.from_asm(GUEST, path="/bin/tgt")
    m.uprobes.add_event("p:t/e /bin/tgt:func", output=out)
    m.run()
    assert out.getvalue().count(": e: (0x401026)") == 1


# ------------------------------------------------------------ per-CPU args buffer


@pytest.mark.parametrize(
    "kernel,ftrace,fills",
    [
        ("6.9", True, 1),
        ("6.9", False, 1),  # always filled before 6.10
        ("6.10", True, 1),
        ("6.10", False, 0),  # lazily: only for an ftrace consumer
        ("latest", False, 0),
    ],
    ids=["6.9-ftrace", "6.9-program-only", "6.10-ftrace", "6.10-program-only", "latest-program-only"],
)
def test_args_buffer_is_filled_per_profile(kernel, ftrace, fills):
    seen = []
    m, (ev,) = run_with(
        "p:t/e /bin/tgt:func %di", kernel=kernel, ftrace=ftrace, programs=[lambda ctx: seen.append(ctx.regs.rdi)]
    )
    assert seen == [0x402000], "the program ran either way"
    assert m.counters.args_buffer_fills == fills
    assert len(ev.lines) == (1 if ftrace else 0)


def test_cli_events_file(tmp_path):
    from cli_helpers import cli

    out = tmp_path / "events.txt"
    p = cli("run", "-e", "p:f/loop guest:fib:fib_loop %ax %bx", "--events", str(out), "guest:fib", "4")
    assert p.returncode == 3 and p.stderr == b""
    lines = out.read_text().splitlines()
    assert [payload(ln) for ln in lines] == [
        "loop: (0x401036) arg1=0x0 arg2=0x1",
        "loop: (0x401036) arg1=0x1 arg2=0x1",
        "loop: (0x401036) arg1=0x1 arg2=0x2",
        "loop: (0x401036) arg1=0x2 arg2=0x3",
    ]


def test_cli_bad_spec_is_one_line():
    from cli_helpers import cli, one_line_error

    line = one_line_error(cli("run", "-e", "p:f/loop guest:fib:fib_loop %zz", "guest:fib"))
    assert "zz" in line
