"""A probed ``syscall`` and the instruction after it.

What the kernel does: a probed ``syscall`` is single-stepped out of line
(``arch_uprobe_pre_xol`` sets TF; the slot holds the 16 FILE bytes from the probe, so
the instruction after the syscall follows it there, without its own int3).  The
``syscall`` instruction masks TF (MSR_SYSCALL_MASK), so no #DB follows it;
``do_syscall_64`` refuses SYSRET while TF is set in pt_regs and leaves by IRET, and
IRET's restored TF traps only after the NEXT instruction.  So that instruction also runs
in the slot, its own probe is not hit, and ``default_post_xol_op``'s FIX_IP correction
(``vaddr - xol_vaddr``) is applied to wherever it left rip: right for anything that
ignores its own address and for relative jumps, wrong for a call's pushed return
address, a rip-relative operand and a ``ret`` (the task dies).  A fault there aborts
the step: the signal reports the syscall's address, and the syscall runs again (with
rax = what it returned the first time).

Every guest is built with gcc (static, no libc); the host-kernel comparisons use
``uprobe-emu diff`` and may only be skipped under the tracefs rule of test_hostdiff.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess

import pytest
from cli_helpers import cli
from test_hostdiff import needs_tracefs, our_probes_left

from emu import Machine
from kernel_model.profiles import KernelProfile

PROFILES = KernelProfile.names()
SLOT1 = 0x80  # the first single-step slot's offset in the XOL page
BUSYBOX = "/bin/busybox"

# Five sites, each a probed getpid syscall followed by one instruction class; the
# results go to stdout as little-endian quadwords (out[0..6]).
SITES = r"""
.globl _start
.text
_start:
    lea out(%rip), %r15
    mov $39, %eax
sc1: syscall
n1: mov %rcx, %r12                  # a plain instruction: rcx/r11 as the step left them
    mov %r12, 0(%r15)
    mov %r11, 8(%r15)
    mov $39, %eax
sc2: syscall
n2: jmp t2                          # relative: the correction moves the target back
    ud2
t2: mov %rcx, 16(%r15)
    mov $39, %eax
sc3: syscall
n3: lea 0(%rip), %rax              # rip-relative: computed in the slot
    mov %rax, 24(%r15)
    mov $39, %eax
sc4: syscall
n4: call f4                         # pushes the slot's return address
    ud2
f4: pop %rax
    mov %rax, 32(%r15)
    mov $39, %eax
sc5: syscall
n5: syscall                         # a second syscall, also in the slot
n5b: mov %rcx, %r12
    mov %r12, 40(%r15)
    mov %r11, 48(%r15)
    mov $1, %eax
    mov $1, %edi
    mov %r15, %rsi
    mov $56, %edx
    syscall
    mov $60, %eax
    xor %edi, %edi
    syscall
.bss
out: .skip 64
"""
SITE_PROBES = ("sc1", "n1", "sc2", "n2", "t2", "sc3", "n3", "sc4", "n4", "f4", "sc5", "n5", "n5b")

# syscall; ret - the ret runs in the slot and the correction sends it astray.
RET = r"""
.globl _start
.text
f7: mov $39, %eax
sc7: syscall
    ret
_start:
    call f7
back:
    mov $60, %eax
    mov $7, %edi
    syscall
"""

# The instruction after the probed syscall faults in the slot; the SIGSEGV handler
# records the reported rip (out[7]) and a count (out[8]), then fixes r14 and returns.
FAULT = r"""
.globl _start
.text
segv_handler:
    mov 168(%rdx), %rax             # uc_mcontext.rip
    mov %rax, out+56(%rip)
    lea out(%rip), %rax
    mov %rax, 88(%rdx)              # uc_mcontext.r14
    incq out+64(%rip)
    ret
restorer:
    mov $15, %eax
    syscall
_start:
    sub $64, %rsp
    lea segv_handler(%rip), %rax
    mov %rax, 0(%rsp)
    movq $0x04000004, 8(%rsp)       # SA_SIGINFO | SA_RESTORER
    lea restorer(%rip), %rax
    mov %rax, 16(%rsp)
    movq $0, 24(%rsp)
    mov $13, %eax                   # rt_sigaction(SIGSEGV)
    mov $11, %edi
    mov %rsp, %rsi
    xor %edx, %edx
    mov $8, %r10d
    syscall
    lea out(%rip), %r15
    xor %r14d, %r14d
    mov $39, %eax
sc6: syscall
n6: mov (%r14), %rbx
    mov $1, %eax
    mov $1, %edi
    mov %r15, %rsi
    mov $72, %edx
    syscall
    mov $60, %eax
    xor %edi, %edi
    syscall
.bss
out: .skip 80
"""

# No probes: the guest sets TF itself; a SIGTRAP handler records the rip of the first
# six traps (then clears TF).  The syscall is stepped like any instruction, except that
# its trap comes one instruction late.
USER_TF = r"""
.globl _start
.text
trap_handler:
    mov cnt(%rip), %rax
    lea buf(%rip), %rcx
    mov 168(%rdx), %r8
    mov %r8, (%rcx,%rax,8)
    inc %rax
    mov %rax, cnt(%rip)
    cmp $6, %rax
    jb 1f
    andq $~0x100, 176(%rdx)         # uc_mcontext.eflags: stop stepping
1:  ret
restorer:
    mov $15, %eax
    syscall
_start:
    sub $64, %rsp
    lea trap_handler(%rip), %rax
    mov %rax, 0(%rsp)
    movq $0x04000004, 8(%rsp)
    lea restorer(%rip), %rax
    mov %rax, 16(%rsp)
    movq $0, 24(%rsp)
    mov $13, %eax                   # rt_sigaction(SIGTRAP)
    mov $5, %edi
    mov %rsp, %rsi
    xor %edx, %edx
    mov $8, %r10d
    syscall
    pushf
    orq $0x100, (%rsp)
    popf
p1: nop
m0: mov $39, %eax
sc: syscall
m1: mov %rax, %rbx
m2: mov %rbx, %rcx
m3: nop
m4: nop
m5: nop
m6: nop
    mov $1, %eax
    mov $1, %edi
    lea buf(%rip), %rsi
    mov $48, %edx
    syscall
    mov $60, %eax
    xor %edi, %edi
    syscall
.bss
cnt: .skip 8
buf: .skip 64
"""


# A probed fork: the child inherits rip in the parent's XOL slot and TF, but not the
# [uprobes] page (VM_DONTCOPY) nor the step (uprobe_copy_process clears its utask).
# The parent writes the child's wait status to stdout.
FORK = r"""
.globl _start
.text
_start:
    mov $57, %eax
scf: syscall
nf: test %eax, %eax
    jz child
    sub $16, %rsp
    mov $61, %eax                   # wait4(-1, &status, 0, 0)
    mov $-1, %rdi
    mov %rsp, %rsi
    xor %edx, %edx
    xor %r10d, %r10d
    syscall
    mov $1, %eax
    mov $1, %edi
    mov %rsp, %rsi
    mov $4, %edx
    syscall
    mov $60, %eax
    xor %edi, %edi
    syscall
child:
    mov $60, %eax
    mov $5, %edi
    syscall
"""


@pytest.fixture(scope="module")
def guests(tmp_path_factory):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is required to build the guests (install gcc)")
    out = tmp_path_factory.mktemp("xolsys")
    paths = {}
    for name, src in (("sites", SITES), ("ret", RET), ("fault", FAULT), ("user_tf", USER_TF), ("fork", FORK)):
        s = out / f"{name}.S"
        s.write_text(src)
        exe = out / name
        res = subprocess.run([gcc, "-nostdlib", "-static", "-o", str(exe), str(s)], capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        paths[name] = str(exe)
    return paths


def run_probed(path, names, profile="latest", argv=None):
    """Run ``path`` with a do-nothing probe on each named symbol; (machine, result,
    {name: hits})."""
    m = Machine.from_elf(path, argv=argv, kernel=profile)
    consumers = {n: m.uprobes.register(m.resolve(n), handler=lambda ctx: None) for n in names}
    r = m.run(timeout=60)
    return m, r, {n: c.hits for n, c in consumers.items()}


def quads(data: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(data) // 8}Q", data))


def slot1(m) -> int:
    return m.process.mm_uprobes.xol_area.vaddr + SLOT1


# ============================================================================ the model


@pytest.fixture(scope="module")
def sites_runs(guests):
    return {p: run_probed(guests["sites"], SITE_PROBES, p) for p in PROFILES}


@pytest.mark.parametrize("profile", PROFILES)
def test_the_instruction_after_a_probed_syscall_is_never_hit(sites_runs, profile):
    _, r, hits = sites_runs[profile]
    assert r.reason == "exit" and r.exit_code == 0, r.describe()
    want = {n: 1 for n in SITE_PROBES}
    want.update(n1=0, n2=0, n3=0, n4=0, n5=0, n5b=0)
    assert hits == want, f"expected hits {want}, got {hits}"


@pytest.mark.parametrize("profile", PROFILES)
def test_one_single_step_trap_per_probed_syscall(sites_runs, profile):
    """Seven steps (sc1..sc5, t2, f4), seven #DB: none right after a syscall (Unicorn's
    is dropped), one after the instruction that follows it - also after the second
    syscall stepped inside the slot at sc5."""
    m, _, _ = sites_runs[profile]
    got = (m.counters.xol_singlesteps, m.counters.db_traps)
    assert got == (7, 7), f"expected (xol steps, #DB traps) = (7, 7), got {got}"


@pytest.mark.parametrize("profile", PROFILES)
def test_the_follower_sees_rcx_in_the_slot_and_tf_in_r11(sites_runs, profile):
    m, r, _ = sites_runs[profile]
    got = quads(r.stdout)[:2]
    want = [slot1(m) + 2, 0x302]
    assert got == want, f"expected rcx, r11 = {[hex(v) for v in want]}, got {[hex(v) for v in got]}"


@pytest.mark.parametrize("profile", PROFILES)
def test_a_relative_jump_after_the_syscall_lands_on_its_target(sites_runs, profile):
    m, r, hits = sites_runs[profile]
    assert (hits["n2"], hits["t2"]) == (0, 1), hits
    assert quads(r.stdout)[2] == slot1(m) + 2, "t2 ran right after the step (rcx untouched)"


@pytest.mark.parametrize("profile", PROFILES)
def test_a_rip_relative_follower_computes_from_the_slot(sites_runs, profile):
    m, r, _ = sites_runs[profile]
    want = slot1(m) + 2 + 7  # lea 0(%rip) is 7 bytes, at slot + 2
    assert quads(r.stdout)[3] == want, f"expected {want:#x}, got {quads(r.stdout)[3]:#x}"


@pytest.mark.parametrize("profile", PROFILES)
def test_a_call_follower_pushes_the_slots_return_address(sites_runs, profile):
    m, r, hits = sites_runs[profile]
    want = slot1(m) + 2 + 5
    assert quads(r.stdout)[4] == want, f"expected {want:#x}, got {quads(r.stdout)[4]:#x}"
    assert hits["f4"] == 1, "the call reached f4 (its target is corrected)"


@pytest.mark.parametrize("profile", PROFILES)
def test_a_second_syscall_in_the_slot_defers_the_trap_again(sites_runs, profile):
    m, r, _ = sites_runs[profile]
    got = quads(r.stdout)[5:7]
    want = [slot1(m) + 4, 0x302]
    assert got == want, f"expected rcx, r11 = {[hex(v) for v in want]}, got {[hex(v) for v in got]}"


@pytest.mark.parametrize("profile", PROFILES)
def test_syscall_then_ret_kills_the_task_at_the_corrected_return_address(guests, profile):
    m, r, hits = run_probed(guests["ret"], ["sc7"], profile)
    slot = slot1(m)
    want = (m.resolve("back") + m.resolve("sc7") - slot) & (2**64 - 1)
    assert (r.reason, r.signal_name, r.rip) == ("signal", "SIGSEGV", want), (
        f"expected SIGSEGV at {want:#x}, got {r.describe()}"
    )
    assert hits == {"sc7": 1}


@pytest.mark.parametrize("profile", PROFILES)
def test_a_fault_after_the_syscall_reports_the_syscall_and_runs_it_again(guests, profile):
    m, r, hits = run_probed(guests["fault"], ["sc6", "n6"], profile)
    assert r.reason == "exit" and r.exit_code == 0, r.describe()
    rip_seen, faults = quads(r.stdout)[7:9]
    assert (rip_seen, faults) == (m.resolve("sc6"), 1), (
        f"expected the handler to see rip {m.resolve('sc6'):#x} once, got {rip_seen:#x} x{faults}"
    )
    assert hits == {"sc6": 2, "n6": 0}, hits
    # the restart runs the syscall again with rax = what the first one returned (the pid)
    got = (m.counters.syscalls[39], m.counters.syscalls[m.process.pid])
    assert got == (1, 1), f"expected getpid once, then syscall #pid once, got {got}"


def test_without_probes_the_same_fault_reports_the_follower(guests):
    m = Machine.from_elf(guests["fault"])
    r = m.run(timeout=60)
    assert quads(r.stdout)[7:9] == [m.resolve("n6"), 1]


def test_a_guest_stepping_over_a_syscall_traps_one_instruction_later(guests):
    """TF set by the guest, no uprobes: the traps follow each instruction except the
    syscall, whose trap comes after m1 (the instruction after it)."""
    m = Machine.from_elf(guests["user_tf"])
    r = m.run(timeout=60)
    assert r.reason == "exit" and r.exit_code == 0, r.describe()
    want = [m.resolve(n) for n in ("m0", "sc", "m2", "m3", "m4", "m5")]
    got = quads(r.stdout)
    assert got == want, f"expected traps at {[hex(a) for a in want]}, got {[hex(a) for a in got]}"


@pytest.mark.parametrize("profile", PROFILES)
def test_a_probed_fork_kills_the_child_in_the_slot_it_does_not_have(guests, profile):
    m, r, hits = run_probed(guests["fork"], ["scf", "nf"], profile)
    status = struct.unpack("<i", r.stdout)[0]
    assert (r.exit_code, status) == (0, 11), f"expected the child killed by SIGSEGV (status 11), got status {status:#x}"
    assert hits == {"scf": 1, "nf": 0}


def busybox_write_pairs() -> list[tuple[int, int]]:
    """(syscall, follower) file offsets of glibc's write wrappers in /bin/busybox:
    ``mov $1,%eax; syscall; cmp $-4096,%rax``."""
    with open(BUSYBOX, "rb") as f:
        data = f.read()
    pat = bytes.fromhex("b801000000 0f05 483d00f0ffff")
    return [(m.start() + 5, m.start() + 7) for m in re.finditer(re.escape(pat), data)]


def busybox_specs() -> list[str]:
    pairs = busybox_write_pairs()
    assert pairs, f"no write wrapper found in {BUSYBOX}"
    return [f"p {BUSYBOX}:{off:#x}" for pair in pairs for off in pair]


def test_busybox_write_wrapper_follower_is_not_hit():
    assert os.path.exists(BUSYBOX), f"{BUSYBOX} is required (Debian package busybox-static)"
    m = Machine.from_elf(BUSYBOX, argv=["busybox", "echo", "hi"], kernel="6.18")
    exe = m.process.exe
    consumers = {}
    for sc, nxt in busybox_write_pairs():
        consumers[sc] = m.uprobes.register((exe.path, sc), handler=lambda ctx: None)
        consumers[nxt] = m.uprobes.register((exe.path, nxt), handler=lambda ctx: None)
    r = m.run(timeout=60)
    assert r.stdout == b"hi\n", r.describe()
    syscall_hits = sum(consumers[sc].hits for sc, _ in busybox_write_pairs())
    follower_hits = sum(consumers[n].hits for _, n in busybox_write_pairs())
    assert (syscall_hits, follower_hits) == (1, 0), (
        f"expected 1 write-syscall hit and 0 follower hits, got {syscall_hits}, {follower_hits}"
    )


# ============================================================================ the host


def _diff(path, specs, *argv):
    p = cli("diff", *[a for s in specs for a in ("-e", s)], path, *argv, timeout=300)
    out = p.stdout.decode()
    assert p.returncode == 0, out + p.stderr.decode()
    m = re.search(r"(\d+) events$", out.strip())
    assert out.startswith("agree: host ") and m, out
    assert our_probes_left() == []
    return int(m.group(1))


@needs_tracefs
def test_host_agrees_on_syscalls_followed_by_every_instruction_class(guests):
    exe = guests["sites"]
    specs = [f"p {exe}:{n} %cx %r11" for n in SITE_PROBES]
    assert _diff(exe, specs) == 7  # sc1..sc5, t2 and f4; no follower


@needs_tracefs
@pytest.mark.parametrize(
    "guest,probes,events",
    [
        ("ret", ["sc7"], 1),
        ("fault", ["sc6", "n6"], 2),
        ("fork", ["scf", "nf"], 1),
    ],
    ids=["syscall-ret", "fault-in-slot", "fork-child"],
)
def test_host_agrees_on_what_the_follower_does(guests, guest, probes, events):
    exe = guests[guest]
    assert _diff(exe, [f"p {exe}:{n} %cx" for n in probes]) == events


@needs_tracefs
def test_host_agrees_on_a_guest_stepping_over_a_syscall(guests):
    exe = guests["user_tf"]
    assert _diff(exe, [f"p {exe}:_start"]) == 1


@needs_tracefs
def test_host_agrees_on_busybox_write_wrapper():
    assert _diff(BUSYBOX, busybox_specs(), "echo", "hi") == 1
