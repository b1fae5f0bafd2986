"""`uprobe-emu run` and `uprobe-emu guests` from the shell."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time

import pytest
from cli_helpers import cli, one_line_error


def test_run_builtin_guest_passes_output_and_status():
    p = cli("run", "guest:hello")
    assert (p.returncode, p.stdout) == (0, b"hello, world\n")


def test_run_exit_status_is_the_guests():
    assert cli("run", "guest:exit42").returncode == 42


def test_run_passes_guest_arguments():
    assert cli("run", "guest:fib", "10").returncode == 55


def test_run_stdin_file(tmp_path):
    f = tmp_path / "in.txt"
    f.write_bytes(b"from a file\n")
    p = cli("run", "--stdin", str(f), "guest:echo")
    assert p.stdout == b"from a file\n"


def test_signal_death_is_128_plus_signal_with_one_report_line():
    p = cli("run", "guest:segv")
    assert p.returncode == 128 + signal.SIGSEGV
    err = p.stderr.decode().strip().splitlines()
    assert len(err) == 1
    assert "SIGSEGV" in err[0] and "<_start+0x7>" in err[0] and "fault address 0x10" in err[0]


def test_budget_exhaustion_exit_code(tmp_path):
    p = cli("run", "--max-insns", "1000", "guest:fib", "100000000")
    assert p.returncode == 124 and b"instruction budget" in p.stderr


@pytest.mark.parametrize(
    "args,fragment",
    [
        (("run", "/nonexistent/prog"), "no such file"),
        (("run", "guest:nope"), "unknown built-in guest 'nope'"),
        (("run",), "PROGRAM is missing"),
        (("frobnicate",), "invalid choice"),
        (("run", "--kernel", "9.99", "guest:hello"), "unknown kernel profile '9.99'"),
        (("run", "--max-insns", "lots", "guest:hello"), "not a number"),
    ],
    ids=["missing-file", "unknown-guest", "no-program", "bad-command", "bad-kernel", "bad-number"],
)
def test_bad_input_is_one_line_and_exit_2(args, fragment):
    assert fragment in one_line_error(cli(*args))


def test_not_an_elf_is_one_line(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    assert "not an ELF" in one_line_error(cli("run", str(f)))


def test_dynamic_elf_with_a_missing_interpreter_is_one_line(build_c, tmp_path):
    data = bytearray(open(build_c("hello.c", name="hello_dynamic"), "rb").read())
    at = data.find(b"/lib64/ld-linux-x86-64.so.2\0")
    data[at : at + 12] = b"/nonexistent"
    exe = tmp_path / "dyn"
    exe.write_bytes(bytes(data))
    assert (
        one_line_error(cli("run", str(exe)))
        == f"uprobe-emu: error: {exe}: cannot load its interpreter /nonexistentnux-x86-64.so.2: "
        "no such file or directory"
    )


def test_wrong_architecture_is_one_line(tmp_path, build_c):
    data = bytearray(open(build_c("hello.c", "-static"), "rb").read())
    data[18:20] = (183).to_bytes(2, "little")  # EM_AARCH64
    f = tmp_path / "arm"
    f.write_bytes(bytes(data))
    assert "not an x86_64 ELF" in one_line_error(cli("run", str(f)))


def test_guests_lists_and_writes_elves_objdump_reads(tmp_path):
    p = cli("guests", "--write", str(tmp_path))
    assert p.returncode == 0 and b"guest:hello" in p.stdout
    objdump = shutil.which("objdump")
    assert objdump, "objdump (binutils) is required"
    out = subprocess.run([objdump, "-d", str(tmp_path / "hello")], capture_output=True, text=True)
    assert "<_start>:" in out.stdout and "syscall" in out.stdout


def test_written_guest_symbols_are_read_by_gdb(tmp_path):
    gdb = shutil.which("gdb")
    assert gdb, "gdb is required"
    cli("guests", "--write", str(tmp_path))
    out = subprocess.run(
        [gdb, "-batch", "-nx", "-ex", "info address fib_loop", str(tmp_path / "fib")], capture_output=True, text=True
    )
    assert 'Symbol "fib_loop" is at 0x' in out.stdout, out.stdout + out.stderr


def test_ctrl_c_stops_a_running_guest_cleanly():
    exe = shutil.which("uprobe-emu")
    proc = subprocess.Popen(
        [exe, "run", "--max-insns", "0", "--timeout", "60", "guest:fib", "100000000000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert b"Traceback" not in err and b"interrupted" in err
