"""Event names as perf gives them, and deleting events from the command line.

``perf probe -x PATH SYMBOL`` names the event after the symbol and a return probe
``SYMBOL__return`` (``get_new_event_name()``, tools/perf/util/probe-event.c); a name that
already exists is refused (-EEXIST) unless perf is forced.  A probe on a file offset keeps
the kernel's ``p_<file>_0x<offset>`` (``__trace_uprobe_create()``).
"""

from __future__ import annotations

import pytest
from cli_helpers import cli, one_line_error

from emu import Machine, ProbeSpecError
from emu.asm import asm_to_elf
from emu.probes.probe_spec import perf_event_name

N = 3
GUEST = f"""
_start:
    xor r12, r12
    xor r13, r13
loop:
    mov rdi, r12
    call f
after_f:
    add r13, rax
    inc r12
    cmp r12, {N}
    jne loop
    mov rdi, r13
    mov eax, 231
    syscall
f:
    lea rax, [rdi + rdi + 1]
    ret
"""
STATUS = sum(2 * i + 1 for i in range(N))


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    elf, _ = asm_to_elf(GUEST)
    path = tmp_path_factory.mktemp("naming") / "tgt"
    path.write_bytes(elf)
    path.chmod(0o755)
    return str(path)


def events_of(stderr: bytes) -> list[str]:
    """Event names of the ftrace lines in `stderr`."""
    return [line.split(": ")[1] for line in stderr.decode().splitlines() if ": (0x" in line]


# ------------------------------------------------------------------ perf's rule


@pytest.mark.parametrize(
    "symbol,is_return,expected",
    [
        ("malloc", False, "malloc"),
        ("malloc", True, "malloc__return"),
        ("foo.isra.0", False, "foo"),  # dot suffixes are cut
        ("foo.cold", True, "foo__return"),
        (".hidden_fn", False, "hidden_fn"),  # a leading dot is dropped
        ("memcpy@GLIBC_2.2.5", False, "memcpy"),  # version suffix cut
        ("a" * 63, False, "a" * 63),  # 63 bytes + NUL fill perf's buffer
    ],
)
def test_perf_event_name(symbol, is_return, expected):
    assert perf_event_name(symbol, is_return) == expected


@pytest.mark.parametrize(
    "symbol,is_return,message",
    [
        ("a" * 64, False, "too long"),
        ("a" * 56, True, "too long"),  # 56 + "__return" = 64
        ("foo$bar", False, "invalid event name"),
    ],
)
def test_perf_event_name_refusals(symbol, is_return, message):
    with pytest.raises(ProbeSpecError, match=message):
        perf_event_name(symbol, is_return)


# ------------------------------------------------------------------ in a machine


@pytest.mark.parametrize(
    "specs,names",
    [
        (["/bin/tgt:f", "/bin/tgt:f%return"], ["f", "f__return"]),
        (["uprobe:/bin/tgt:f", "uretprobe:/bin/tgt:f"], ["f", "f__return"]),
        (["p /bin/tgt:f", "r /bin/tgt:f"], ["f", "f__return"]),
        (["p:grp/ /bin/tgt:f", "r:grp/ /bin/tgt:f"], ["f", "f__return"]),
        (["p:grp/mine /bin/tgt:f", "/bin/tgt:f%return"], ["mine", "f__return"]),
    ],
)
def test_entry_and_return_probe_on_one_symbol_do_not_clash(specs, names):
    m = Machine.from_asm(GUEST, path="/bin/tgt")
    evs = [m.uprobes.add_event(s) for s in specs]
    r = m.run()
    assert r.exit_code == STATUS
    assert [ev.event for ev in evs] == names
    assert [len(ev.lines) for ev in evs] == [N, N], [ev.lines for ev in evs]
    assert [line.split(": ")[1] for line in m.uprobes.trace.lines] == names * N


def test_an_offset_probe_keeps_the_kernels_default_name():
    m = Machine.from_asm(GUEST, path="/bin/tgt")
    off = m.resolve("f") - 0x400000
    ev = m.uprobes.add_event(f"r /bin/tgt:{off:#x}")
    assert ev.event == f"p_tgt_{off:#x}"


def test_a_second_probe_with_the_same_perf_name_is_refused():
    m = Machine.from_asm(GUEST, path="/bin/tgt")
    m.uprobes.add_event("/bin/tgt:f")
    with pytest.raises(ProbeSpecError, match="uprobes/f already exists"):
        m.uprobes.add_event("uprobe:/bin/tgt:f")


def test_streamed_lines_are_not_kept():
    import io

    out = io.StringIO()
    m = Machine.from_asm(GUEST, path="/bin/tgt")
    ev = m.uprobes.add_event("/bin/tgt:f", output=out)
    m.run()
    assert out.getvalue().count(": f: (0x") == N
    assert (m.uprobes.trace.lines, ev.lines) == ([], []), "a streamed line stays in memory"


# ------------------------------------------------------------------ CLI


def test_cli_entry_and_return_on_one_symbol(exe):
    p = cli("run", "-e", f"{exe}:f", "-e", f"{exe}:f%return", exe)
    assert p.returncode == STATUS, p.stderr.decode()
    assert events_of(p.stderr) == ["f", "f__return"] * N


@pytest.mark.parametrize("flag", ["-e", "--event"])
def test_cli_accepts_a_delete_request(exe, flag):
    p = cli("run", "-e", f"p:grp/ev {exe}:f", flag, "-:grp/ev", exe)
    assert p.returncode == STATUS, p.stderr.decode()
    assert events_of(p.stderr) == [], "the deleted event still printed"


def test_cli_delete_without_group_deletes_from_any_group(exe):
    p = cli("run", "-e", f"{exe}:f", "-e", f"{exe}:f%return", "-e", "-:f", exe)
    assert p.returncode == STATUS, p.stderr.decode()
    assert events_of(p.stderr) == ["f__return"] * N


def test_cli_delete_of_an_unknown_event_is_one_line(exe):
    line = one_line_error(cli("run", "-e", "-:grp/nosuch", exe))
    assert "nosuch" in line, line


def test_cli_clash_is_one_line(exe):
    line = one_line_error(cli("run", "-e", f"{exe}:f", "-e", f"uprobe:{exe}:f", exe))
    assert "uprobes/f already exists" in line, line
