"""The Machine's public execution API: step(), code and memory hooks over an address
range (translations dropped when added), stop and resume, registers by name."""

import io
import re

import pytest

from emu import Machine
from emu.frontends.trace import Tracer

# f is translated (and run) before the trace starts at `mark`, then called again.
CALLED_TWICE = """
_start:
    xor eax, eax
    call f
mark:
    call f
    mov eax, 60
    xor edi, edi
    syscall
f:
    add rax, 1
    add rbx, 2
    ret
"""


def _trace_lines(text: str) -> list[tuple[str, str]]:
    """(mnemonic line, effects line or "") for each traced instruction."""
    out = []
    for line in text.splitlines():
        if re.match(r"^  [0-9a-f]+:\t", line):
            out.append([line.split("\t")[-1].strip(), ""])
        elif line.startswith("    ") and not line.startswith("    #") and out:
            out[-1][1] = line.strip()
    return [tuple(x) for x in out]


def test_trace_from_symbol_sees_blocks_translated_before_the_start():
    m = Machine.from_asm(CALLED_TWICE)
    out = io.StringIO()
    with Tracer(m, "text", out, start="mark"):
        assert m.run().exit_code == 0
    got = _trace_lines(out.getvalue())
    want = [
        ("call   0x401015 <f>", "rsp=0x7ffffffdddf8 rip=0x401015"),
        ("add    rax, 1", "rax=0x2"),
        ("add    rbx, 2", "rbx=0x4"),
        ("ret", "rsp=0x7ffffffdde00 rip=0x40100c"),
        ("mov    eax, 0x3c", "rax=0x3c"),
        ("xor    edi, edi", "eflags=0x246"),
        ("syscall", ""),
    ]
    assert got == want, f"expected {want}\n got {got}"


LOOP = """
_start:
    mov ecx, 5
    xor ebx, ebx
again:
    add ebx, 3
    dec ecx
    jnz again
    mov edi, ebx
    mov eax, 60
    syscall
"""


def test_step_executes_one_instruction_with_its_register_effects():
    m = Machine.from_asm(LOOP)
    start = m.pc
    assert m.step() is None
    assert (m.pc, m.regs.rcx) == (start + 5, 5), f"after mov ecx, 5: rip {m.pc:#x} rcx {m.regs.rcx}"
    assert m.step() is None and m.pc == start + 7
    assert m.step() is None and m.regs.rbx == 3, f"expected rbx 3, got {m.regs.rbx}"


def test_step_to_the_end_returns_the_exit_result():
    m = Machine.from_asm(LOOP)
    n, result = 0, None
    while result is None:
        result = m.step()
        n += 1
    # mov, xor, 5 x (add, dec, jnz), mov, mov, syscall
    assert (result.reason, result.exit_code, n) == ("exit", 15, 20), (
        f"expected exit 15 after 20 steps, got {result.reason} {result.exit_code} after {n}"
    )


@pytest.mark.parametrize("how", ["run", "step"])
@pytest.mark.parametrize(
    "body,sig,addr,detail",
    [
        ("hlt", 11, 0, "general protection (hlt)"),
        ("mov qword ptr [0x10], rax", 11, 0x10, "write fault"),
        ("ud2", 4, None, "invalid opcode"),
    ],
)
def test_step_handles_faults_as_run_does(how, body, sig, addr, detail):
    m = Machine.from_asm(f"_start:\n    nop\nbad:\n    {body}\n")
    bad = m.resolve("bad")
    if how == "run":
        r = m.run()
    else:
        r = None
        for _ in range(10):
            r = m.step()
            if r is not None:
                break
    want_addr = bad if addr is None else addr
    got = (r.reason, r.signal, r.rip, r.fault_addr, r.detail)
    assert got == ("signal", sig, bad, want_addr, detail), f"{how}: got {got}"


def test_code_hook_added_after_translation_sees_every_later_instruction():
    m = Machine.from_asm(LOOP)
    again = m.resolve("again")
    first = m.add_code_hook(lambda a, s: m.stop("first pass"), again, again)
    assert m.run().reason == "stopped"
    m.remove_hook(first)
    assert m.step() is None  # add ebx, 3 of iteration 1
    m.run(max_insns=6)  # the loop body is translated now
    hits = []
    m.add_code_hook(lambda a, s: hits.append(a), again, again)
    r = m.run()
    assert r.exit_code == 15
    assert hits == [again] * 2, f"expected the 2 remaining iterations, got {len(hits)} hits"


def test_removed_hook_is_not_called_again():
    m = Machine.from_asm(LOOP)
    again = m.resolve("again")
    hits = []
    h = m.add_code_hook(lambda a, s: (hits.append(a), m.stop("hit")), again, again)
    assert m.run().reason == "stopped"
    m.remove_hook(h)
    m.remove_hook(h)  # idempotent
    assert m.run().exit_code == 15
    assert hits == [again], f"expected one hit, got {hits}"


def test_stop_in_a_hook_then_resume_runs_each_instruction_once():
    m = Machine.from_asm(LOOP)
    again = m.resolve("again")
    h = m.add_code_hook(lambda a, s: m.stop("at again"), again, again)
    r = m.run()
    assert (r.reason, r.detail, r.rip) == ("stopped", "at again", again), f"got {r}"
    assert m.regs.rbx == 0, "the hooked instruction ran before the stop"
    m.remove_hook(h)
    r = m.run()
    assert (r.reason, r.exit_code) == ("exit", 15), f"resumed run: {r}"


def test_memory_hook_reports_writes_in_its_range():
    m = Machine.from_asm("""
_start:
    lea rdi, [rip + slot]
    mov qword ptr [rdi], 0x1234
    mov byte ptr [rdi + 8], 7
    mov eax, 60
    xor edi, edi
    syscall
.data
slot:
    .quad 0, 0
""")
    slot = m.resolve("slot")
    seen = []
    m.add_mem_hook(lambda acc, a, size, v: seen.append((acc, a - slot, size, v)), slot, slot + 15)
    assert m.run().exit_code == 0
    assert seen == [("write", 0, 8, 0x1234), ("write", 8, 1, 7)], f"got {seen}"


def test_hook_errors_are_raised_by_run():
    m = Machine.from_asm(LOOP)

    def boom(a, s):
        raise ValueError("from the hook")

    m.add_code_hook(boom, m.resolve("again"), m.resolve("again"))
    with pytest.raises(ValueError, match="from the hook"):
        m.run()


def test_registers_by_name_include_sse_and_segment_bases():
    m = Machine.from_asm("""
_start:
    mov rax, 0x1122334455667788
    movq xmm3, rax
    mov eax, 60
    xor edi, edi
    syscall
""")
    m.step()
    m.step()
    assert m.reg_read("xmm3") == 0x1122334455667788, f"xmm3 = {m.reg_read('xmm3'):#x}"
    m.reg_write("fs_base", 0x5000)
    assert m.reg_read("fs_base") == 0x5000 and m.regs.fs_base == 0x5000
    assert m.task_reg_read(m.task, "xmm3") == 0x1122334455667788


def test_unknown_register_name_is_an_input_error():
    from kernel_model.errors import InputError

    m = Machine.from_asm(LOOP)
    with pytest.raises(InputError, match="unknown register 'xmm99'"):
        m.reg_read("xmm99")


def test_a_stop_asked_for_while_not_running_applies_to_nothing():
    m = Machine.from_asm(LOOP)
    m.stop("too early")
    r = m.run()
    assert (r.reason, r.exit_code) == ("exit", 15), f"got {r}"


def test_a_signal_sent_outside_a_trap_is_delivered_before_the_next_instruction():
    m = Machine.from_asm(LOOP)
    entry = m.pc
    m.send_sig(m.task, 10, detail="sent by the test")  # SIGUSR1, default action
    assert m.signal_pending(m.task)
    r = m.run()
    got = (r.reason, r.signal, r.rip, r.detail, m.regs.rcx)
    assert got == ("signal", 10, entry, "sent by the test", 0), f"got {got}"


SPIN = """
_start:
    jmp _start
"""


def test_ctrl_c_inside_interruptible_before_run_stops_the_run_at_once():
    """A Ctrl-C that lands between ``interruptible()`` and ``run()`` is not lost."""
    import os
    import signal

    m = Machine.from_asm(SPIN)
    with m.interruptible():
        os.kill(os.getpid(), signal.SIGINT)
        r = m.run(timeout=20)
    assert (r.reason, r.detail) == ("stopped", "interrupted (SIGINT)"), (r.reason, r.detail)
    r2 = m.run(timeout=0.5)
    assert r2.reason == "timeout", f"outside the block a run starts without the Ctrl-C: {r2.reason}"


@pytest.mark.parametrize(
    "kw",
    [dict(timeout=float("nan")), dict(timeout=float("inf")), dict(timeout=-1), dict(max_insns=-5), dict(max_insns=2.5)],
    ids=["timeout-nan", "timeout-inf", "timeout-negative", "budget-negative", "budget-float"],
)
def test_run_refuses_limits_unicorn_cannot_take(kw):
    from kernel_model.errors import InputError

    m = Machine.from_asm(LOOP)
    with pytest.raises(InputError, match="must be"):
        m.run(**kw)
    assert m.run().reason == "exit", "a refused run leaves the guest where it was"
