"""Signals as a tracer sees them: the stub stops at a signal of the guest before it acts
(``T<sig>``, gdb's signal numbers), serves the signal's 128-byte x86_64 siginfo_t as
``qXfer:siginfo:read`` and reports the death at the next resume; a real gdb prints
``$_siginfo`` from it."""

from __future__ import annotations

import re
import struct

import pytest
from gdb_client import RawClient, Stub
from test_gdbstub import gdb_session, write_elf

from emu import Machine
from emu.frontends.gdbstub import unescape_binary
from emu.frontends.gdbstub.signals import gdb_signal, linux_signal

SI_USER, SI_KERNEL, SI_TKILL = 0, 0x80, -6
SEGV_MAPERR, SEGV_ACCERR = 1, 2
MODEL_UID = 1000  # the uid the kernel model puts in a sent signal's siginfo

# each guest faults (or sends itself a signal) at the label `here`
GUESTS = {
    "maperr": "_start:\n    mov rax, 0xdead0\nhere:\n    mov qword ptr [rax], 1\n",
    "accerr": "_start:\n    lea rax, [rip + _start]\nhere:\n    mov byte ptr [rax], 1\n",
    "ud2": "_start:\n    nop\nhere:\n    ud2\n",
    "divide": "_start:\n    xor ecx, ecx\n    mov eax, 1\n    cdq\nhere:\n    div ecx\n",
    "kill": "_start:\n    mov eax, 39\n    syscall\n    mov edi, eax\n    mov esi, 15\n    mov eax, 62\n"
    "    syscall\nhere:\n    hlt\n",
    "tgkill": "_start:\n    mov eax, 39\n    syscall\n    mov edi, eax\n    mov esi, eax\n    mov edx, 10\n"
    "    mov eax, 234\n    syscall\nhere:\n    hlt\n",
}


def expected(name: str, m: Machine) -> tuple[int, bytes]:
    """(Linux signal, siginfo bytes) the guest's signal must come with."""
    here = m.resolve("here")
    pid = m.process.pid
    fault = lambda signo, code, addr: (signo, struct.pack("<iiiiQ", signo, 0, code, 0, addr))  # noqa: E731
    sent = lambda signo, code: (signo, struct.pack("<iiiiiI", signo, 0, code, 0, pid, MODEL_UID))  # noqa: E731
    return {
        "maperr": lambda: fault(11, SEGV_MAPERR, 0xDEAD0),
        "accerr": lambda: fault(11, SEGV_ACCERR, m.resolve("_start")),
        "ud2": lambda: fault(4, 1, here),  # ILL_ILLOPC at the instruction
        "divide": lambda: fault(8, 1, here),  # FPE_INTDIV at the instruction
        "kill": lambda: sent(15, SI_USER),
        "tgkill": lambda: sent(10, SI_TKILL),
    }[name]()


def read_siginfo(c: RawClient) -> bytes:
    reply = c.ask(b"qXfer:siginfo:read::0,200")
    assert reply[:1] == b"l", f"siginfo in one reply, got {reply[:20]!r}"
    return unescape_binary(reply[1:])


@pytest.mark.parametrize("name", list(GUESTS))
def test_the_stop_reply_and_the_siginfo_of_the_signal(tmp_path, name):
    m = Machine.from_elf(write_elf(tmp_path, GUESTS[name], name))
    signo, head = expected(name, m)
    stub = Stub(m)
    c = RawClient(stub.port)
    assert b"qXfer:siginfo:read+" in c.ask(b"qSupported:swbreak+").split(b";")
    reply = c.ask(b"c")
    want = b"T%02xthread:%x;" % (gdb_signal(signo), m.task.tid)
    assert reply == want, f"expected {want!r}, got {reply!r}"
    info = read_siginfo(c)
    assert len(info) == 128, len(info)
    assert info == head.ljust(128, b"\0"), f"expected {head.hex()}..., got {info[: len(head)].hex()}"
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == [], stub.errors


@pytest.mark.parametrize("name", ["maperr", "ud2", "divide"])
def test_the_stop_shows_the_faulting_instruction(tmp_path, name):
    """rip is the instruction that faulted (it did not complete), as ptrace shows it."""
    m = Machine.from_elf(write_elf(tmp_path, GUESTS[name], name))
    stub = Stub(m)
    c = RawClient(stub.port)
    c.ask(b"c")
    rip = struct.unpack("<Q", bytes.fromhex(c.ask(b"p10").decode()))[0]
    assert rip == m.resolve("here"), f"rip {rip:#x}, expected {m.resolve('here'):#x}"
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == [], stub.errors


def test_the_death_follows_at_the_next_resume(tmp_path):
    m = Machine.from_elf(write_elf(tmp_path, GUESTS["maperr"], "maperr"))
    stub = Stub(m)
    c = RawClient(stub.port)
    assert c.ask(b"c").startswith(b"T0b")
    assert c.ask(b"vCont;C0b") == b"X0b"
    assert c.ask(b"c") == b"X0b", "the end, again"
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == [], stub.errors


def test_a_signal_passed_with_qpasssignals_does_not_stop(tmp_path):
    """gdb's `handle SIGUSR1 nostop` (QPassSignals lists gdb's number 0x1e): the guest
    dies of it without a stop before."""
    m = Machine.from_elf(write_elf(tmp_path, GUESTS["tgkill"], "tgkill"))
    stub = Stub(m)
    c = RawClient(stub.port)
    assert c.ask(b"QPassSignals:zz") == b"E01"
    assert c.ask(b"QPassSignals:e;1e") == b"OK"
    assert c.ask(b"c") == b"X1e"
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == [], stub.errors


def test_at_a_breakpoint_there_is_no_siginfo(tmp_path):
    m = Machine.from_elf(write_elf(tmp_path, GUESTS["maperr"], "maperr"))
    stub = Stub(m)
    c = RawClient(stub.port)
    assert c.ask(b"Z0,%x,1" % m.resolve("here")) == b"OK"
    assert c.ask(b"c").startswith(b"T05swbreak:")
    assert c.ask(b"qXfer:siginfo:read::0,80") == b"E01"
    assert c.ask(b"qXfer:siginfo:read:x:0,80") == b"E00"
    assert c.ask(b"qXfer:siginfo:write::0:00") == b""
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == [], stub.errors


@pytest.mark.parametrize(
    "linux, gdb", [(11, 11), (7, 10), (10, 30), (12, 31), (17, 20), (19, 17), (31, 12), (34, 46), (64, 78)]
)
def test_signal_numbers_are_gdbs_on_the_wire(linux, gdb):
    assert (gdb_signal(linux), linux_signal(gdb)) == (gdb, linux)


@pytest.mark.parametrize("name, code", [("maperr", "SEGV_MAPERR"), ("accerr", "SEGV_ACCERR")])
def test_gdb_prints_siginfo_with_the_exact_fault_address(tmp_path, name, code):
    m = Machine.from_elf(write_elf(tmp_path, GUESTS[name], name))
    addr = "0xdead0" if name == "maperr" else f"{m.resolve('_start'):#x} <_start>"
    out = gdb_session(
        m,
        write_elf(tmp_path, GUESTS[name], name),
        [
            "continue",
            "p $_siginfo.si_signo",
            "p $_siginfo.si_code",
            "p $_siginfo._sifields._sigfault.si_addr",
            "p $pc",
            "kill",
        ],
    )
    assert "Program received signal SIGSEGV, Segmentation fault." in out, out
    want = f"$1 = 11\n$2 = {1 if code == 'SEGV_MAPERR' else 2}\n$3 = (void *) {addr}\n"
    assert want in out, out
    assert re.search(rf"^\$4 = \(void \(\*\)\(\)\) {m.resolve('here'):#x} <here>$", out, re.M), out


def test_gdb_sees_the_sender_of_a_kill(tmp_path):
    m = Machine.from_elf(write_elf(tmp_path, GUESTS["kill"], "kill"))
    out = gdb_session(
        m,
        write_elf(tmp_path, GUESTS["kill"], "kill"),
        ["continue", "p $_siginfo.si_code", "p $_siginfo._sifields._kill", "continue"],
    )
    assert "Program received signal SIGTERM, Terminated." in out, out
    assert f"$1 = 0\n$2 = {{si_pid = {m.process.pid}, si_uid = {MODEL_UID}}}\n" in out, out
    assert "Program terminated with signal SIGTERM, Terminated." in out, out
