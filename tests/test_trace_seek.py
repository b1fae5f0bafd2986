"""The tracer's time travel (emu.frontends.trace.seek): seek to instruction N, and the
last instruction that wrote a register or an address, found by replaying the history
from checkpoints - a guest store, the same value stored again, a syscall's result, a
probed instruction executed out of line."""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli, one_line_error

from emu import Machine
from emu.frontends.trace.seek import TraceSeek
from kernel_model.errors import InputError

# positions: 0 mov rax,1; 1 mov rbx,2; 2 add rbx,3; 3 mov rax,7; 4 mov ecx,0;
# 5..3004 the loop (inc, cmp, jne) x1000; 3005 mov rax,7 again; 3006..3010 read(0, buf, 4);
# 3011 store to buf+8; 3012.. exit
GUEST = """
_start:
    mov rax, 1
    mov rbx, 2
    add rbx, 3
    mov rax, 7
    mov ecx, 0
loop:
    inc ecx
    cmp ecx, 1000
    jne loop
again:
    mov rax, 7
    xor edi, edi
    lea rsi, [rip + buf]
after_lea:
    mov edx, 4
    xor eax, eax
    syscall
store:
    mov qword ptr [rsi + 8], rbx
    mov eax, 60
    xor edi, edi
    syscall
.data
buf:
    .quad 0
    .quad 0
"""
END = 3012  # the instruction after the store


@pytest.fixture
def traced():
    m = Machine.from_asm(GUEST, stdin=b"abcd")
    ts = TraceSeek(m, interval=400)
    m.run(max_insns=END)
    assert m.pc == m.resolve("store") + 4, hex(m.pc)
    return m, ts


def test_last_write_of_a_register_written_long_before_is_found_across_checkpoints(traced):
    m, ts = traced
    hit = ts.last_write("rbx")
    assert (hit.position, hit.rip, hit.text, hit.old, hit.new) == (2, m.resolve("_start") + 14, "add rbx, 3", 2, 5), (
        hit.describe()
    )
    assert ts.position == END and m.pc == m.resolve("store") + 4  # the query does not move


def test_a_write_of_the_same_value_counts(traced):
    m, ts = traced
    ts.seek(3006)
    hit = ts.last_write("rax")
    assert (hit.position, hit.rip, hit.old, hit.new) == (3005, m.resolve("again"), 7, 7), hit.describe()


def test_a_syscall_result_is_the_kernel_writing_the_register(traced):
    m, ts = traced
    hit = ts.last_write("eax")
    assert (hit.text, hit.old, hit.new) == ("syscall", 0, 4), hit.describe()


def test_last_write_of_memory_the_kernel_filled_is_the_syscall(traced):
    m, ts = traced
    buf = m.resolve("buf")
    hit = ts.last_write(f"{buf:#x}:4")
    assert (hit.text, hit.old, hit.new) == ("syscall", 0, int.from_bytes(b"abcd", "little")), hit.describe()


def test_last_write_of_memory_a_store_wrote(traced):
    m, ts = traced
    hit = ts.last_write(f"{m.resolve('buf') + 8:#x}:8")
    assert (hit.position, hit.rip, hit.new) == (3011, m.resolve("store"), 5), hit.describe()


def test_bytes_nothing_wrote_since_the_start_have_no_last_write(traced):
    m, ts = traced
    assert ts.last_write(f"{m.resolve('buf') + 16:#x}:8") is None


@pytest.mark.parametrize("n", [1, 5, 399, 400, 1234, 3006])
def test_seek_back_and_forth_reaches_the_state_of_a_run_of_n_instructions(traced, n):
    m, ts = traced
    ref = Machine.from_asm(GUEST, stdin=b"abcd")
    ref.run(max_insns=n)
    ts.seek(n)
    assert tuple(m.read_regs().values()) == tuple(ref.read_regs().values())
    ts.seek(END)
    assert m.pc == m.resolve("store") + 4


@pytest.mark.parametrize("what, message", [("zz", "unknown register"), ("0x10", "not mapped"), ("0x401000:0", "SIZE")])
def test_bad_queries_are_input_errors(traced, what, message):
    _, ts = traced
    with pytest.raises(InputError, match=message):
        ts.last_write(what)


def test_a_probed_instruction_writes_from_its_out_of_line_slot(build_c):
    path = build_c("replay.c", "-static", "-pthread", name="replay")
    m = Machine.from_elf(path, seed=1)
    hits = []
    m.uprobes.register("work", handler=lambda c: hits.append(m.insn_clock()))
    ts = TraceSeek(m, interval=2000)
    m.run()
    ts.seek(hits[0] + 1)  # the int3, then the out-of-line step of mov eax, 1
    assert m.pc == m.resolve("work") + 5, hex(m.pc)
    hit = ts.last_write("rax")
    vma = m.mem.find_vma(hit.rip)
    assert (hit.text, hit.new, vma.name) == ("mov eax, 1", 1, "[uprobes]"), hit.describe()


def test_cli_seek_starts_the_trace_at_instruction_n_and_answers_last_write(tmp_path):
    from emu.asm import asm_to_elf

    elf, _ = asm_to_elf(GUEST)
    exe = tmp_path / "g"
    exe.write_bytes(elf)
    proc = cli(
        "trace",
        "--seek",
        "3005",
        "--last-write",
        "rbx",
        "--format",
        "jsonl",
        "--count",
        "1",
        "--checkpoint-interval",
        "500",
        str(exe),
    )
    assert proc.returncode == 0, proc.stderr.decode()
    err = proc.stderr.decode()
    assert (
        "last write to rbx before instruction 3005: instruction 2 at 0x40100e <_start+0xe>: "
        "add rbx, 3 (0x2 -> 0x5)" in err
    ), err
    rows = [json.loads(line) for line in proc.stdout.decode().splitlines() if line.startswith("{")]
    insns = [r for r in rows if r.get("type") == "insn"]
    assert [r["sym"] for r in insns] == ["again"], rows  # instruction 3005 is the first traced


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seek", "99999"], "before 99999"),
        (["--seek", "3", "--last-write", "xyz"], "unknown register"),
    ],
)
def test_cli_bad_seek_requests_are_one_line_errors(tmp_path, args, message):
    from emu.asm import asm_to_elf

    elf, _ = asm_to_elf(GUEST)
    exe = tmp_path / "g"
    exe.write_bytes(elf)
    assert message in one_line_error(cli("trace", *args, str(exe)))
