"""Shared helpers for the entry-probe specification tests (test_uprobe*.py).

A test guest is ``PROLOGUE + body + EPILOGUE`` (+ an optional ``.data`` part): the
prologue gives every general register a distinct value, so a register the model forgets
to restore (a rip-relative scratch register, rcx/r11 around a syscall...) shows up in the
final state; the epilogue saves the registers the exit syscall clobbers on the stack
and exits with status 0 (``guest_regs`` reads them back).  The body puts the label ``probe`` on the
instruction under test.
"""

from __future__ import annotations

from emu import Machine
from kernel_model.arch.x86.ptrace import GPR_NAMES
from kernel_model.mm.mm_types import PROT_WRITE

PROLOGUE = """
_start:
    mov rax, 0x0a0a0a0a0a0a0a0a
    mov rbx, 0x1b1b1b1b1b1b1b1b
    mov rcx, 0x0c0c0c0c0c0c0c0c
    mov rdx, 0x0d0d0d0d0d0d0d0d
    mov rsi, 0x5151515151515151
    mov rdi, 0x0d1d1d1d1d1d1d1d
    mov rbp, 0x0b0b0b0b0b0b0b0b
    mov r8, 0x0808080808080808
    mov r9, 0x0909090909090909
    mov r10, 0x1010101010101010
    mov r11, 0x1111111111111111
    mov r12, 0x1212121212121212
    mov r13, 0x1313131313131313
    mov r14, 0x1414141414141414
    mov r15, 0x1515151515151515
"""

EPILOGUE = """
done:
    push rax
    push rcx
    push rdi
    push r11
    mov eax, 231
    xor edi, edi
    syscall
"""

# The six counters every entry-probe spec pins.
PROBE_COUNTERS = ("bp_traps", "db_traps", "emulated", "xol_singlesteps", "uprobe_hits", "text_writes")

STACK_WINDOW = 0x4000  # bytes of the stack top compared between runs


def guest(body: str, data: str = "", tail: str = "") -> str:
    """A complete guest around ``body``; ``tail`` is code after the exit (call and jump
    targets); ``data`` goes into the writable data page."""
    src = PROLOGUE + body + EPILOGUE + tail
    if data:
        src += "\n.data\n" + data
    return src


def run_guest(src: str, probes=(), *, kernel: str = "latest", handler=None, max_insns: int = 200_000, **overrides):
    """Build ``src``, register a consumer on every target in ``probes``, run it.

    Returns (machine, result, consumers).  ``handler`` defaults to one that changes
    nothing and returns 0.
    """
    m = Machine.from_asm(src, kernel=kernel, **overrides)
    fn = handler or (lambda ctx: 0)
    consumers = [m.uprobes.register(t, handler=fn) for t in probes]
    r = m.run(max_insns=max_insns)
    return m, r, consumers


def probe_counters(m) -> dict:
    c = m.counters
    return {k: getattr(c, k) for k in PROBE_COUNTERS}


def expected_counters(hits: int, how: str, installs: int = 1) -> dict:
    """Counters of ``hits`` hits on one probe that is ``"emulated"`` or ``"xol"``."""
    xol = hits if how == "xol" else 0
    return dict(
        bp_traps=hits,
        db_traps=xol,
        emulated=hits if how == "emulated" else 0,
        xol_singlesteps=xol,
        uprobe_hits=hits,
        text_writes=installs,
    )


def guest_regs(m) -> dict:
    """The registers at ``done:`` of a guest that exited through EPILOGUE (rax, rcx, rdi
    and r11 from the stack, rsp before the pushes), or the live registers of a guest
    that stopped anywhere else."""
    regs = m.read_regs().as_dict()
    if m.last_result is None or m.last_result.reason != "exit":
        return regs
    sp = regs["rsp"]
    words = [int.from_bytes(m.mem.read(sp + 8 * i, 8), "little") for i in range(4)]
    regs["r11"], regs["rdi"], regs["rcx"], regs["rax"] = words
    regs["rsp"] = sp + 32
    return regs


def final_state(m) -> dict:
    """Registers (all of them, eflags included) and the writable memory a guest can
    change: every writable mapping except the stack, plus the top of the stack."""
    regs = guest_regs(m)
    mem = {}
    for vma in m.mem.vmas:
        if not vma.prot & PROT_WRITE:
            continue
        if vma.name == "[stack]":
            mem["[stack-top]"] = m.mem.read(vma.end - STACK_WINDOW, STACK_WINDOW)
        else:
            mem[f"{vma.start:#x}"] = m.mem.read(vma.start, vma.size)
    return {"regs": regs, "mem": mem}


def regs_diff(expected: dict, actual: dict, names=GPR_NAMES) -> str:
    """'rax: expected 0x1, got 0x2; ...' for the registers that differ."""
    out = [f"{n}: expected {expected[n]:#x}, got {actual[n]:#x}" for n in names if expected[n] != actual[n]]
    return "; ".join(out) or "registers equal"


def mem_diff(expected: dict, actual: dict) -> str:
    out = []
    for where in sorted(set(expected) | set(actual)):
        a, b = expected.get(where, b""), actual.get(where, b"")
        if a != b:
            first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            out.append(
                f"{where}+{first:#x}: expected {a[first : first + 8].hex(' ')}, got {b[first : first + 8].hex(' ')}"
            )
    return "; ".join(out) or "memory equal"


def assert_same_state(expected: dict, actual: dict, what: str = "") -> None:
    prefix = f"{what}: " if what else ""
    assert expected["regs"] == actual["regs"], prefix + regs_diff(expected["regs"], actual["regs"])
    assert expected["mem"] == actual["mem"], prefix + mem_diff(expected["mem"], actual["mem"])
