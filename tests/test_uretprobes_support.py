"""Shared guests and helpers for the uretprobe tests (test_uretprobes_*.py), plus the
baseline checks that every guest behaves as described when nothing is probed.

The guests are our own keystone programs that reproduce what the kernel's
``uprobe_syscall`` selftests observe (prog_tests/uprobe_syscall.c): a register
snapshot harness around a trigger function, a fake copy of the uretprobe trampoline,
recursion, tail calls, and a trampoline-address leak.
"""

from __future__ import annotations

import pytest

from emu import Machine
from kernel_model.arch.x86.kernel import uprobes as arch_x86
from kernel_model.arch.x86.ptrace import PT_REGS_ORDER

# ----------------------------------------------------------------------------- matrix

# (kernel profile, trampoline it uses): 6.10 = int3 trampoline, 6.11+ = syscall 335
TRAMPOLINE_PROFILES = [
    pytest.param("6.10", id="6.10-int3"),
    pytest.param("6.11", id="6.11-syscall"),
    pytest.param("6.18", id="6.18-syscall"),
    pytest.param("latest", id="latest-syscall"),
]
ALLOCS = ["kmalloc", "array64", "pool"]

# Session consumers exist from 6.13; the int3 trampoline there is the 6.18 profile with
# the trampoline switch overridden (what a compat task gets).
SESSION_PROFILES = [
    pytest.param("6.18", {"uretprobe_trampoline": "int3"}, id="6.18-int3"),
    pytest.param("6.13", {}, id="6.13-syscall"),
    pytest.param("6.18", {}, id="6.18-syscall"),
    pytest.param("latest", {}, id="latest-syscall"),
]

NR_URETPROBE = 335
MAX_DEPTH = 64


def machine(src: str, kernel: str, alloc: str | None = None, **overrides) -> Machine:
    if alloc is not None:
        overrides["ri_alloc"] = alloc
    return Machine.from_asm(src, kernel=kernel, **overrides)


def is_int3(m: Machine) -> bool:
    return m.profile.uretprobe_trampoline == "int3"


def trampoline_vaddr(m: Machine) -> int:
    return m.uprobes.mm(m.process).xol_area.vaddr


def exit_asm(reg: str = "rax") -> str:
    """exit_group(reg & 0xff) — keeps r12..r15 for the test to read."""
    return f"""
    mov rdi, {reg}
    mov eax, 231
    syscall
"""


def fmt_regs(d: dict) -> str:
    return ", ".join(f"{k}={v:#x}" for k, v in d.items())


def diff_regs(expected: dict, actual: dict, names=None) -> dict:
    """{name: (expected, actual)} for every slot that differs."""
    names = names or expected.keys()
    return {n: (expected[n], actual[n]) for n in names if expected[n] != actual[n]}


def fmt_diff(diff: dict) -> str:
    return "; ".join(f"{n}: expected {e:#x}, got {a:#x}" for n, (e, a) in diff.items())


def leaked(m: Machine) -> list:
    """Return instances still pending on the (only) task."""
    ut = m.task.utask
    return [] if ut is None else list(ut.return_instances)


def assert_ri_balanced(m: Machine) -> None:
    """Every return instance obtained from the policy went back to it."""
    c, ut, policy = m.counters, m.task.utask, m.profile.ri_alloc
    assert leaked(m) == [] and ut.depth == 0, f"pending return instances at exit: {leaked(m)}, depth {ut.depth}"
    if policy == "kmalloc":
        assert c.ri_allocated == c.ri_freed, f"kmalloc: allocated {c.ri_allocated} != freed {c.ri_freed}"
    elif policy == "pool":
        assert len(ut.ri_pool) == c.ri_allocated, (
            f"pool: {c.ri_allocated} allocated but {len(ut.ri_pool)} back in the pool"
        )
    else:
        assert len(ut.ri_array) == MAX_DEPTH, f"array64: {len(ut.ri_array)} of {MAX_DEPTH} instances back in the array"


# ----------------------------------------------------------------------------- regs harness
#
# harness_X(before=rdi, after=rsi): stores every general register at its struct pt_regs
# offset into `before` (plus eflags and rsp), calls trigger X, and stores the registers as
# the caller sees them right after the return into `after`.  Nothing but the call itself
# runs between the two snapshots (pushfq/push/mov/pop do not touch the flags).

PT_OFF = {name: 8 * i for i, name in enumerate(PT_REGS_ORDER)}
GPRS = ("r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx", "rdx", "rsi", "rdi")
# The 17 slots a user program can snapshot; orig_rax, rip, cs, ss stay 0 in both buffers
# (as in the selftest harness).
USER_SLOTS = GPRS + ("eflags", "rsp")

# Values trigger_all leaves in every register it can set, and its flags
# (CF PF AF ZF SF DF OF + the always-one bit 1).
ALL_VALUES = {r: 0xA5A5_0000_0000_0000 | (i + 1) << 8 | (i + 1) for i, r in enumerate(GPRS)}
ALL_FLAGS = 0xCD7
KEEP_RAX = 0xDEADBEEF
START_FLAGS = 0x8C5  # CF PF SF OF, set by _start before the harnesses run
START_VALUES = {r: 0x5A00_0000_0000_0000 | (i + 1) << 16 | 0x1234 for i, r in enumerate(GPRS)}


def _harness(name: str, trigger: str) -> str:
    out = [f"{name}:"]
    out += [f"    mov qword ptr [rdi + {PT_OFF[r]}], {r}" for r in GPRS]
    out += [
        "    pushfq",
        f"    pop qword ptr [rdi + {PT_OFF['eflags']}]",
        f"    mov qword ptr [rdi + {PT_OFF['rsp']}], rsp",
        "    push rsi",
        f"    call {trigger}",
        f"{name}_ret:",  # the real return address of the trigger
        "    pushfq",
        "    push rax",
        "    mov rax, qword ptr [rsp + 16]",
    ]
    out += [f"    mov qword ptr [rax + {PT_OFF[r]}], {r}" for r in GPRS if r != "rax"]
    out += [
        f"    pop qword ptr [rax + {PT_OFF['rax']}]",
        f"    pop qword ptr [rax + {PT_OFF['eflags']}]",
        "    lea rsp, [rsp + 8]",
        f"    mov qword ptr [rax + {PT_OFF['rsp']}], rsp",
        "    ret",
    ]
    return "\n".join(out) + "\n"


def _buffers(*names: str) -> str:
    return "".join(f"{n}:\n" + "    .quad 0\n" * len(PT_REGS_ORDER) for n in names)


REGS_GUEST = (
    "_start:\n"
    "    pushfq\n    pop rax\n    and rax, -0xcd6\n"  # clear the arithmetic flags and DF
    f"    or rax, {START_FLAGS:#x}\n    push rax\n    popfq\n"
    + "".join(f"    mov {r}, {START_VALUES[r]:#x}\n" for r in GPRS if r not in ("rdi", "rsi"))
    + "    lea rdi, [rip + before_keep]\n    lea rsi, [rip + after_keep]\n"
    "    call harness_keep\n"
    "    lea rdi, [rip + before_all]\n    lea rsi, [rip + after_all]\n"
    "    call harness_all\n"
    "    mov eax, 231\n    xor edi, edi\n    syscall\n"
    + _harness("harness_keep", "uretprobe_regs_trigger")
    + _harness("harness_all", "trigger_all")
    + "uretprobe_regs_trigger:\n"
    f"    mov rax, {KEEP_RAX:#x}\n"
    "    ret\n"
    "trigger_all:\n"
    f"    push {ALL_FLAGS:#x}\n    popfq\n"
    + "".join(f"    mov {r}, {v:#x}\n" for r, v in ALL_VALUES.items())
    + "    ret\n"
    ".data\n" + _buffers("before_keep", "after_keep", "before_all", "after_all")
)


def read_pt_regs(m: Machine, label: str) -> dict:
    raw = m.mem.read(m.resolve(label), 8 * len(PT_REGS_ORDER))
    return {n: int.from_bytes(raw[8 * i : 8 * i + 8], "little") for i, n in enumerate(PT_REGS_ORDER)}


def run_regs_guest(kernel: str, alloc: str | None = None, probe=None, **overrides):
    """Run REGS_GUEST; ``probe(m)`` registers consumers first.  Returns (m, result,
    {buffer: 21-slot dict})."""
    m = machine(REGS_GUEST, kernel, alloc, **overrides)
    if probe is not None:
        probe(m)
    r = m.run(max_insns=1_000_000)
    snaps = {b: read_pt_regs(m, b) for b in ("before_keep", "after_keep", "before_all", "after_all")}
    return m, r, snaps


# ----------------------------------------------------------------------------- other guests

# The selftest's fake trampoline: a byte-for-byte copy of the 6.18 XOL slot 0, called
# from an ordinary function (uretprobe_syscall_call).
FAKE_TRAMPOLINE_GUEST = (
    "_start:\n"
    "    call uretprobe_syscall_call\n"
    "    mov eax, 231\n    xor edi, edi\n    syscall\n"
    "uretprobe_syscall_call_1:\n"
    "    .byte " + ", ".join(f"{b:#04x}" for b in arch_x86.URETPROBE_TRAMPOLINE + b"\xcc") + "\n"
    "uretprobe_syscall_call:\n"
    "    call uretprobe_syscall_call_1\n"
    "uretprobe_syscall_call_ret:\n"
    "    ret\n"
)

# syscall 335 straight from ordinary code
PLAIN_URETPROBE_SYSCALL = """
_start:
    mov rcx, 0x1111
    mov eax, 335
    syscall
after_335:
    mov rdi, rax
    mov eax, 231
    syscall
"""

# rec(n) = n == 0 ? leaf(100) : leaf(rec(n - 1)); leaf(x) = x + 1.  rec(3) = 104.
REC_GUEST = """
_start:
    mov rdi, 3
    call rec
start_ret:
    mov rdi, rax
    mov eax, 231
    syscall
rec:
    push rbx
    mov rbx, rdi
    test rdi, rdi
    jz rec_base
    lea rdi, [rbx - 1]
    call rec
rec_ret:
    mov rdi, rax
    call leaf
leaf_ret_rec:
    pop rbx
    ret
rec_base:
    mov rdi, 100
    call leaf
leaf_ret_base:
    pop rbx
    ret
leaf:
    lea rax, [rdi + 1]
    ret
"""


def rec_expected(n: int, leaf_first=False):
    """Entry/return events of rec(n) in execution order: (kind, func, value, ret label).
    Entry value = rdi, return value = rax."""
    ev = []

    def leaf(x, site):
        ev.append(("entry", "leaf", x, None))
        ev.append(("return", "leaf", x + 1, site))
        return x + 1

    def rec(k, site):
        ev.append(("entry", "rec", k, None))
        r = leaf(100, "leaf_ret_base") if k == 0 else leaf(rec(k - 1, "rec_ret"), "leaf_ret_rec")
        ev.append(("return", "rec", r, site))
        return r

    rec(n, "start_ret")
    return ev


# tail_a(x) adds 10 and tail-calls tail_b(x) = x + 1 with a jmp.  _start: tail_a(5) = 16.
TAIL_GUEST = """
_start:
    mov rdi, 5
    call tail_a
after_a:
    mov rdi, rax
    mov eax, 231
    syscall
tail_a:
    add rdi, 10
    jmp tail_b
tail_b:
    lea rax, [rdi + 1]
    ret
"""


def deep_guest(n: int, times: int = 1) -> str:
    """deep(k) = k == 0 ? 0 : deep(k - 1) + 1, called as deep(n - 1) (n calls), ``times``
    times; exits with the last result."""
    return f"""
_start:
    mov r12, {times}
again:
    mov rdi, {n - 1}
    call deep
start_ret:
    dec r12
    jnz again
    mov rdi, rax
    mov eax, 231
    syscall
deep:
    test rdi, rdi
    jz deep_base
    dec rdi
    call deep
deep_ret:
    inc rax
    ret
deep_base:
    xor eax, eax
    ret
"""


# leak() returns what it finds at [rsp] on entry: with a uretprobe on it, the trampoline.
LEAK_THEN_CALL_TRAMPOLINE = """
_start:
    call leak
    mov r12, rax
    call r12
    mov eax, 231
    xor edi, edi
    syscall
leak:
    mov rax, qword ptr [rsp]
    ret
"""

# The leaked trampoline address pushed as a return address, then a jmp into a probed
# function: a chained hijack with no instance to chain to (dropped; the return SIGILLs).
LEAK_THEN_FAKE_CHAIN = """
_start:
    call leak
    push rax
    jmp chained
leak:
    mov rax, qword ptr [rsp]
    ret
chained:
    mov eax, 7
    ret
"""


def call_loop_guest(n: int) -> str:
    """Calls f(i) = 2 * i + 1 for i in 0..n-1, sums the results, exits with the sum."""
    return f"""
_start:
    xor r12, r12
    xor r13, r13
loop:
    mov rdi, r12
    call f
after_f:
    add r13, rax
    inc r12
    cmp r12, {n}
    jne loop
    mov rdi, r13
    mov eax, 231
    syscall
f:
    lea rax, [rdi + rdi + 1]
    ret
"""


# ----------------------------------------------------------------------------- baselines


def test_regs_harness_without_probes_sees_trigger_keep_change_only_rax():
    m, r, s = run_regs_guest("latest")
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    before, after = s["before_keep"], s["after_keep"]
    expected = dict(before, rax=KEEP_RAX)
    d = diff_regs(expected, after)
    assert not d, fmt_diff(d)
    assert before["rsp"] != 0 and before["eflags"] & START_FLAGS == START_FLAGS


def test_regs_harness_without_probes_sees_trigger_all_values():
    m, r, s = run_regs_guest("latest")
    after = s["after_all"]
    d = diff_regs(ALL_VALUES, after)
    assert not d, fmt_diff(d)
    assert after["eflags"] & 0xFFF == ALL_FLAGS, f"eflags {after['eflags']:#x}"
    assert after["rsp"] == s["before_all"]["rsp"]


def test_rec_guest_without_probes():
    assert Machine.from_asm(REC_GUEST).run().exit_code == 104


def test_tail_guest_without_probes():
    assert Machine.from_asm(TAIL_GUEST).run().exit_code == 16


def test_deep_guest_without_probes():
    assert Machine.from_asm(deep_guest(80)).run().exit_code == 79


def test_call_loop_guest_without_probes():
    assert Machine.from_asm(call_loop_guest(5)).run().exit_code == 25
