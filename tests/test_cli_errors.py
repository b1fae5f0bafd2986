"""Bad command-line input: exit 2 and one readable line, never a traceback, and never a
raw control byte from a path, a spec or a file on the terminal."""

from __future__ import annotations

import os

import pytest
from cli_helpers import cli, one_line_error

from guest_programs import write_guest
from kernel_model.errors import printable


@pytest.fixture(scope="module")
def hello(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("clierr") / "hello")
    write_guest("hello", path)
    os.chmod(path, 0o755)
    return path


# ------------------------------------------------------------------ numbers


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "1e999", "soon"])
@pytest.mark.parametrize("command", ["run", "trace", "step", "gdbserver"])
def test_timeout_must_be_finite_and_not_negative(command, value):
    line = one_line_error(cli(command, f"--timeout={value}", "guest:hello"))
    assert "--timeout" in line and value in line, line


def test_diff_timeout_must_be_finite(hello):
    line = one_line_error(cli("diff", "-e", f"p {hello}:0x1000", "--timeout", "nan", hello))
    assert "--timeout" in line and "nan" in line, line


def test_instruction_budget_is_not_negative():
    line = one_line_error(cli("run", "--max-insns=-5", "guest:hello"))
    assert "--max-insns" in line, line


@pytest.mark.parametrize("value", ["99999", "65536", "-1", "http"])
def test_gdbserver_port_is_0_to_65535(value):
    line = one_line_error(cli("gdbserver", f"--port={value}", "guest:hello"))
    assert "--port" in line and value in line, line


@pytest.mark.parametrize(
    "args,option",
    [
        (["--seconds", "nan"], "--seconds"),
        (["--seconds", "0"], "--seconds"),
        (["--repeat", "0"], "--repeat"),
        (["--warmup", "-1"], "--warmup"),
        (["--iterations", "-3"], "--iterations"),
    ],
)
def test_bench_numbers(args, option):
    line = one_line_error(cli("bench", *args, timeout=30))
    assert option in line, line


# ------------------------------------------------------------------ files


def test_guests_write_into_an_uncreatable_directory():
    line = one_line_error(cli("guests", "--write", "/proc/uprobe-emu-guests"))
    assert "/proc/uprobe-emu-guests" in line, line


def test_guests_write_below_a_file(tmp_path):
    f = tmp_path / "plain"
    f.write_text("")
    line = one_line_error(cli("guests", "--write", str(f / "sub")))
    assert "cannot write the guests" in line, line


def test_diff_stdin_file_missing(hello, tmp_path):
    missing = str(tmp_path / "no-such-input")
    line = one_line_error(cli("diff", "--stdin", missing, "-e", f"p {hello}:0x1000", hello))
    assert missing in line and "--stdin" in line, line


def test_diff_of_a_file_without_execute_permission(hello, tmp_path):
    copy = tmp_path / "noexec"
    copy.write_bytes(open(hello, "rb").read())
    copy.chmod(0o644)
    line = one_line_error(cli("diff", "-e", f"p {copy}:0x1000", str(copy)))
    assert "not executable" in line, line


def test_diff_of_a_directory(tmp_path):
    line = one_line_error(cli("diff", "-e", f"p {tmp_path}:0x1000", str(tmp_path)))
    assert str(tmp_path) in line, line


def test_bench_json_to_a_bad_path_fails_before_the_run():
    """The full default benchmark takes minutes; the error must come first."""
    line = one_line_error(cli("bench", "--json", "/nonexistent-dir/report.json", timeout=30))
    assert "/nonexistent-dir/report.json" in line, line


def test_bench_json_to_a_directory_fails_before_the_run(tmp_path):
    line = one_line_error(cli("bench", "--json", str(tmp_path), timeout=30))
    assert "--json" in line, line


# ------------------------------------------------------------------ control bytes


@pytest.mark.parametrize(
    "raw,shown",
    [
        ("a\x1b[31mb", "a\\x1b[31mb"),
        ("two\nlines", "two\\x0alines"),
        ("tab\there", "tab\\x09here"),
        ("bell\x07\x7f", "bell\\x07\\x7f"),
        ("c1\x9b", "c1\\x9b"),
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("byte\udcff", "byte\\xff"),  # undecodable byte (surrogateescape)
        ("plain é ü", "plain é ü"),
    ],
)
def test_printable_escapes_what_a_terminal_would_interpret(raw, shown):
    assert printable(raw) == shown


def _no_raw_controls(proc) -> str:
    line = one_line_error(proc)
    err = proc.stderr.decode(errors="surrogateescape").rstrip("\n")
    assert all(c.isprintable() for c in err), repr(err)
    return line


def test_a_missing_program_with_escape_sequences_in_its_name(tmp_path):
    name = str(tmp_path / "evil\x1b]0;pwned\x07\nname")
    line = _no_raw_controls(cli("run", name))
    assert "evil\\x1b]0;pwned\\x07\\x0aname" in line, line


def test_an_elf_string_with_escape_sequences(build_c, tmp_path):
    """PT_INTERP comes from the file and is quoted in the error."""
    data = bytearray(open(build_c("hello.c"), "rb").read())
    interp = b"/lib64/ld-linux-x86-64.so.2"
    at = data.find(interp)
    assert at > 0, "the dynamic hello has no PT_INTERP string"
    data[at : at + 7] = b"\x1b[2J//"[:7].ljust(7, b"/")
    evil = tmp_path / "dyn"
    evil.write_bytes(bytes(data))
    line = _no_raw_controls(cli("run", str(evil)))
    assert "\\x1b[2J" in line, line


def test_a_probe_spec_with_control_bytes():
    line = _no_raw_controls(cli("run", "-e", "p:g/e\x1b[1m guest:hello:0x1000", "guest:hello"))
    assert "\\x1b" in line, line


def test_an_argparse_error_quoting_a_control_byte():
    line = _no_raw_controls(cli("run", "--kernel", "6.1\x1b[5m", "guest:hello"))
    assert "\\x1b[5m" in line, line


def test_an_endless_stdin_file_is_refused_by_diff_not_read_into_memory(hello):
    """diff holds stdin for both runs; ``run`` reads it lazily (tests/test_stdio.py)."""
    line = one_line_error(cli("diff", "--stdin", "/dev/zero", "-e", f"p {hello}:0x1000", hello, timeout=60))
    assert "/dev/zero" in line and "MiB" in line, line


@pytest.mark.parametrize("delay", [0.15, 0.3, 1.0])
def test_ctrl_c_while_the_tool_starts_or_runs_is_one_line_and_130(delay):
    """Importing the tool takes a while; a Ctrl-C then is no traceback either.  The
    guest waits on its stdin (kept open), so only the signal can end the run."""
    import shutil
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(
        [shutil.which("uprobe-emu"), "run", "/bin/busybox", "cat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    finally:
        proc.kill()
    err = proc.stderr.read().decode()
    assert proc.returncode == 130 and "Traceback" not in err, (proc.returncode, err)
    assert len(err.strip().splitlines()) == 1, err
