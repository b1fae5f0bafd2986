"""Helpers for the transparent-probing tests.

* :func:`boundaries` enumerates instruction boundaries: a capstone linear sweep over FUNC
  symbols of the main executable (all of them, or those named), or over the whole text
  when the image has at most one function.
* :func:`probe_all` registers a do-nothing consumer (address form) on each boundary and
  keeps what the modeled kernel refused.
* :func:`reference_run` runs an unprobed guest with an engine code hook counting
  executions and a ``syscall`` recorder: the true
  execution count of every instruction in the given ranges (a rep string instruction
  counts its iterations), and the syscalls that returned to user mode, in order.
* :func:`snapshot` takes the observable end state: registers, the writable mappings and
  their bytes, stdout/stderr and how the run ended.
* :func:`compare` lists every difference between two snapshots, with expected vs actual,
  allowing exactly the faithful consequences of a probed ``syscall`` running out of
  line: ``rcx`` (next rip) points into the XOL slot and ``r11`` (rflags) carries TF -
  only while they still hold what the last returning syscall left there (an exit()
  writes them last) - and a task that exits from a probed syscall ends with rip and
  rcx in the slot and TF set in eflags and r11.  The stack
  below its live part (rsp and the red zone) may differ only where optimized probe
  sites (call + trampoline) pushed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import capstone
from unicorn import UC_HOOK_INSN
from unicorn import x86_const as X

from kernel_model.arch.x86.ptrace import GPR_NAMES, TF
from kernel_model.errors import RegistrationError
from kernel_model.mm.mm_types import PROT_WRITE

XOL_SLOT_BYTES = 128
XOL_SLOTS = 32
SYSCALL = b"\x0f\x05"
PUSHF = 0x9C

_MD = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)


# ----------------------------------------------------------------------------- boundaries


@dataclass(frozen=True)
class Insn:
    addr: int  # run-time address (load bias applied)
    raw: bytes
    text: str
    func: str

    @property
    def is_syscall(self) -> bool:
        return self.raw == SYSCALL

    @property
    def is_pushf(self) -> bool:
        """``pushf`` (with any legacy prefixes/REX): its image holds TF when stepped."""
        body = self.raw.lstrip(bytes([0x66, 0xF2, 0xF3, 0x2E, 0x3E, 0x26, 0x36, 0x64, 0x65]))
        body = body[1:] if body and 0x40 <= body[0] <= 0x4F else body
        return body[:1] == bytes([PUSHF])

    @property
    def is_rep_string(self) -> bool:
        """rep/repe/repne + a string op: single-stepped one iteration per trap."""
        words = self.text.split()
        return (
            len(words) >= 2
            and words[0] in ("rep", "repe", "repne", "repz", "repnz")
            and words[1].startswith(("movs", "stos", "lods", "cmps", "scas", "ins", "outs"))
        )

    def __repr__(self):
        return f"{self.addr:#x} <{self.func}> {self.raw.hex(' ')}  {self.text}"


def _sweep(code: bytes, start: int, func: str) -> list[Insn]:
    """Linear sweep; an undecodable byte is skipped (it is no boundary we can name)."""
    out, off = [], 0
    while off < len(code):
        for i in _MD.disasm(code[off:], start + off):
            out.append(Insn(i.address, bytes(i.bytes), f"{i.mnemonic} {i.op_str}".strip(), func))
            off += i.size
        if off < len(code):
            off += 1
    return out


def func_symbols(m, names=None, prefixes=()) -> list:
    """FUNC symbols of the main executable with a size, deduplicated by address; all of
    them, or those in ``names`` or starting with one of ``prefixes``."""
    elf = m.process.exe.elf
    prefixes = tuple(prefixes)
    seen, out = set(), []
    for s in sorted(elf.all_symbols, key=lambda s: (s.value, s.name)):
        if s.type != "FUNC" or s.size == 0 or s.value in seen:
            continue
        if (names is not None or prefixes) and not (
            (names is not None and s.name in names) or (prefixes and s.name.startswith(prefixes))
        ):
            continue
        seen.add(s.value)
        out.append(s)
    return out


def boundaries(m, names=None, prefixes=()) -> list[Insn]:
    """Instruction boundaries of the main executable's functions (run-time addresses).

    ``names``/``prefixes`` select functions by symbol; with neither, every FUNC symbol is
    swept, or the whole executable text when there is at most one function.
    """
    exe = m.process.exe
    elf, bias = exe.elf, m.load_bias(exe)
    syms = func_symbols(m, names, prefixes)
    if names is None and not prefixes and len(syms) <= 1:
        # the whole text: from the first code symbol (or the entry) to the end of the
        # executable segment's file bytes - not the ELF header that shares its page
        start = min([s.value for s in syms] + [elf.entry])
        out = []
        for seg in elf.segments:
            if seg.flags & 1 and seg.vaddr <= start < seg.vaddr + seg.filesz:  # PF_X
                out += _sweep(seg.data[start - seg.vaddr :], start + bias, syms[0].name if syms else "text")
        return out
    if names is not None:
        missing = set(names) - {s.name for s in syms}
        if missing:
            raise AssertionError(f"no FUNC symbol for {sorted(missing)} in {exe.path}")
    out = []
    for s in syms:
        off = elf.vaddr_to_offset(s.value)
        out += _sweep(elf.data[off : off + s.size], s.value + bias, s.name)
    seen, uniq = set(), []
    for insn in out:
        if insn.addr not in seen:
            seen.add(insn.addr)
            uniq.append(insn)
    return uniq


def ranges_of(insns: list[Insn]) -> list[tuple[int, int]]:
    """Merged [start, end) address ranges covering the instructions."""
    spans = sorted((i.addr, i.addr + len(i.raw)) for i in insns)
    out: list[list[int]] = []
    for a, b in spans:
        if out and a <= out[-1][1] + 64:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


# ----------------------------------------------------------------------------- probing


@dataclass
class Probes:
    consumers: dict = field(default_factory=dict)  # addr -> UprobeConsumer
    refused: dict = field(default_factory=dict)  # addr -> (Insn, RegistrationError)
    insns: dict = field(default_factory=dict)  # addr -> Insn (registered ones)
    shadowed: set = field(default_factory=set)  # left out: see syscall_shadows

    @property
    def syscall_sites(self) -> set[int]:
        return {a for a, i in self.insns.items() if i.is_syscall}


_MD_DETAIL = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_MD_DETAIL.detail = True
_SLOT_UNSAFE_MNEMONICS = ("syscall", "sysenter", "pushf", "pushfq", "popf", "popfq")


def runs_unchanged_in_a_slot(code: bytes) -> bool:
    """Does the instruction at the start of ``code`` do the same when executed 2 bytes
    into an XOL slot, behind a probed ``syscall``, and then moved back by the syscall's
    FIX_IP correction?  Yes for everything that ignores its own address (relative jumps
    included: the correction moves their target back); no for calls and returns,
    indirect jumps, rip-relative operands, another syscall, pushf/popf (TF is set) and
    rep strings (stepped per iteration)."""
    i = next(_MD_DETAIL.disasm(code, 0x1000, 1), None)
    if i is None or i.mnemonic in _SLOT_UNSAFE_MNEMONICS or i.mnemonic.startswith("rep"):
        return False
    if any(
        i.group(g)
        for g in (
            capstone.CS_GRP_CALL,
            capstone.CS_GRP_RET,
            capstone.CS_GRP_INT,
            capstone.CS_GRP_IRET,
            capstone.CS_GRP_PRIVILEGE,
        )
    ):
        return False
    if i.group(capstone.CS_GRP_JUMP) and not i.group(capstone.CS_GRP_BRANCH_RELATIVE):
        return False
    return not any(op.type == capstone.x86.X86_OP_MEM and op.mem.base == capstone.x86.X86_REG_RIP for op in i.operands)


def syscall_shadows(m, insns: list[Insn]) -> set[int]:
    """The addresses among ``insns`` that a probed ``syscall`` makes faithfully
    non-transparent, to be left unprobed.

    The kernel single-steps a probed syscall out of line with TF set; the syscall masks
    TF, the kernel returns by IRET (do_syscall_64 refuses SYSRET with TF) and IRET's TF
    traps only after the NEXT instruction - which thus also runs in the slot, from the
    16 file bytes copied there.  Its own probe is never hit that way, and it only
    behaves as in place if :func:`runs_unchanged_in_a_slot`.  So: a syscall whose
    follower runs unchanged is probed and the follower is not; any other syscall is
    left unprobed (and its follower probed).  ``tests/test_xol_syscall.py`` pins the
    behaviour itself against the host kernel."""
    addrs = {i.addr for i in insns}
    out = set()
    for insn in insns:
        if insn.is_syscall:
            follower = insn.addr + len(insn.raw)
            out.add(follower if runs_unchanged_in_a_slot(m.mem.read(follower, 15)) else insn.addr)
    return out & addrs


def nop_handler(ctx):
    """A consumer that changes nothing."""
    return None


def probe_all(m, insns: list[Insn], handler=nop_handler) -> Probes:
    p = Probes()
    for insn in insns:
        try:
            p.consumers[insn.addr] = m.uprobes.register(insn.addr, handler=handler)
            p.insns[insn.addr] = insn
        except RegistrationError as e:
            p.refused[insn.addr] = (insn, e)
    return p


# ----------------------------------------------------------------------------- runs


@dataclass
class Snapshot:
    result: object
    regs: dict
    writable: dict  # (start, end, prot, name) -> bytes
    maps: list  # (start, end, perms, name) of every mapping
    stdout: bytes
    stderr: bytes

    @property
    def outcome(self) -> dict:
        r = self.result
        return dict(
            reason=r.reason, exit_code=r.exit_code, signal=r.signal, fault_addr=r.fault_addr, rip=r.rip, status=r.status
        )


def snapshot(m, result) -> Snapshot:
    regs = m.read_regs().as_dict()
    writable, maps = {}, []
    for v in m.mem.vmas:
        name = v.file.path if v.file is not None else v.name
        maps.append((v.start, v.end, v.perms(), name))
        if v.prot & PROT_WRITE:
            writable[(v.start, v.end, v.prot, name)] = m.mem.read(v.start, v.end - v.start)
    return Snapshot(result, regs, writable, maps, bytes(result.stdout), bytes(result.stderr))


@dataclass
class Reference:
    snap: Snapshot
    counts: Counter  # addr -> executions (within the hooked ranges)
    syscalls: list  # (address, r11 it set) of syscalls that returned

    @property
    def last_returning_syscall(self) -> tuple[int, int] | None:
        """The syscall whose rcx/r11 writes are the last ones (an exit never returns):
        its address and the rflags image it left in r11."""
        return self.syscalls[-1] if self.syscalls else None


def reference_run(m, ranges=(), rep_sites=frozenset(), **run_kw) -> Reference:
    """Run ``m`` unprobed, counting executions in ``ranges`` and recording syscalls.

    ``rep_sites`` are rep-prefixed string instructions.  The CPU single-steps those one
    iteration per trap, so a probe on one hits once per iteration (once when rcx is 0);
    Unicorn's code hook also fires for a final pass that only finds rcx == 0 - that pass
    is no iteration and is not counted.
    """
    counts: Counter = Counter()
    syscalls: list = []
    last = [None]
    rcx_id = X.UC_X86_REG_RCX

    def on_code(addr, size):
        if not (addr == last[0] and addr in rep_sites and m.uc.reg_read(rcx_id) == 0):
            counts[addr] += 1
        last[0] = addr

    def on_syscall(uc, _data):
        # Runs after the machine's own syscall hook, which has set rcx = next rip and
        # left rip at the syscall instruction (Unicorn adds 2 afterwards).  A syscall
        # that ended the run (exit) never gets here: not recorded.
        rip, rcx = uc.reg_read(X.UC_X86_REG_RIP), uc.reg_read(X.UC_X86_REG_RCX)
        if rcx == rip + 2:
            syscalls.append((rip, uc.reg_read(X.UC_X86_REG_R11)))

    for start, end in ranges:
        # through the engine: an instruction a handled page fault re-runs is one execution
        m.add_code_hook(on_code, start, end - 1)
    m.uc.hook_add(UC_HOOK_INSN, on_syscall, None, 1, 0, X.UC_X86_INS_SYSCALL)
    result = m.run(**run_kw)
    return Reference(snapshot(m, result), counts, syscalls)


def plain_run(m, **run_kw) -> Snapshot:
    return snapshot(m, m.run(**run_kw))


# ----------------------------------------------------------------------------- comparison


def xol_area_vaddr(m) -> int | None:
    mm = m.process.mm_uprobes
    area = getattr(mm, "xol_area", None) if mm is not None else None
    return area.vaddr if area is not None else None


def is_xol_slot_return(rcx: int, area: int | None) -> bool:
    """rcx == (slot address + 2) for a single-step slot 1..31 of the XOL area."""
    if area is None:
        return False
    off = rcx - 2 - area
    return 0 < off < XOL_SLOTS * XOL_SLOT_BYTES and off % XOL_SLOT_BYTES == 0


def compare(ref: Reference, got: Snapshot, probes: Probes, m_probed) -> list[str]:
    """Every observable difference, each as 'what: expected X, got Y'."""
    diffs = []
    exp = ref.snap
    if exp.outcome != got.outcome:
        diffs.append(f"outcome: expected {exp.outcome}, got {got.outcome} ({got.result.describe()})")
    if exp.stdout != got.stdout:
        diffs.append(f"stdout: expected {exp.stdout!r}, got {got.stdout!r}")
    if exp.stderr != got.stderr:
        diffs.append(f"stderr: expected {exp.stderr!r}, got {got.stderr!r}")

    # -- registers, with the probed-syscall exception made explicit: it applies to rcx
    # and r11 only while they still hold what the last returning syscall left there
    last, last_r11 = ref.last_returning_syscall or (None, None)
    # a run that ended in exit(): that syscall wrote rcx and r11 last, in both runs
    quirk = last is not None and last in probes.syscall_sites and exp.result.reason != "exit"
    area = xol_area_vaddr(m_probed)
    # an exit from a probed syscall never returns from the out-of-line step: the task
    # ends with rip = slot + 2 (the syscall's next rip) and TF set, as a real kernel
    # shows it at PTRACE_EVENT_EXIT - and with what SYSCALL itself put in rcx (that
    # next rip) and r11 (rflags, TF of the step included)
    exit_site = (exp.regs["rip"] - 2) & 0xFFFFFFFFFFFFFFFF
    exit_quirk = exp.result.reason == "exit" and exit_site in probes.syscall_sites
    for name in GPR_NAMES:
        e, g = exp.regs[name], got.regs[name]
        if exit_quirk and name in ("rip", "rcx"):
            if not is_xol_slot_return(g, area) or g != got.regs["rip"]:
                diffs.append(
                    f"{name} after exiting from the probed syscall at {exit_site:#x}: "
                    f"expected the XOL slot address + 2 that rip shows (area "
                    f"{area and hex(area)}), got {g:#x}"
                )
            continue
        if exit_quirk and name in ("eflags", "r11"):
            if g != e | TF:
                diffs.append(
                    f"{name} after exiting from the probed syscall at {exit_site:#x}: "
                    f"expected {e | TF:#x} (TF of the step), got {g:#x}"
                )
            continue
        if name == "rcx" and quirk and e == (last + 2) & 0xFFFFFFFFFFFFFFFF:
            if not is_xol_slot_return(g, area):
                diffs.append(
                    f"rcx after the probed syscall at {last:#x}: expected an XOL slot "
                    f"address + 2 (area {area and hex(area)}), got {g:#x}"
                )
            continue
        if name == "r11" and quirk and e == last_r11 and not e & TF:
            if g != e | TF:
                diffs.append(f"r11 after the probed syscall at {last:#x}: expected rflags|TF {e | TF:#x}, got {g:#x}")
            continue
        if e != g:
            diffs.append(f"register {name}: expected {e:#x}, got {g:#x}")

    # -- mappings: the probed run may only add the kernel's special pages
    extra = [mp for mp in got.maps if mp not in exp.maps]
    missing = [mp for mp in exp.maps if mp not in got.maps]
    if missing or any(mp[3] not in KERNEL_PAGES or "w" in mp[2] for mp in extra):
        diffs.append(f"mappings: expected {_fmt_maps(exp.maps)}, got {_fmt_maps(got.maps)}")

    # -- writable memory, every byte; the stack's dead area below the live part (rsp and
    # the 128-byte red zone) may differ only where an optimized site's call and
    # trampoline pushed (the 6.18-7.1 nop5 design even pushes into the red zone)
    floor, optimized_ran = stack_live_floor(exp.regs["rsp"], m_probed)
    for key, data in exp.writable.items():
        other = got.writable.get(key)
        if other is None or other == data:
            continue  # a missing mapping is reported above
        start, end, _prot, name = key
        if name == "[stack]" and start <= floor < end and optimized_ran:
            cut = floor - start
            if data[cut:] != other[cut:]:
                diffs.append(_first_byte_diff((floor, end, _prot, name), data[cut:], other[cut:]))
            continue
        diffs.append(_first_byte_diff(key, data, other))
    return diffs


KERNEL_PAGES = ("[uprobes]", "[uprobes-trampoline]")
RED_ZONE = 128


def stack_live_floor(rsp: int, m_probed) -> tuple[int, bool]:
    """Lowest live stack address at the end of the run, and whether optimized probe sites
    (call + trampoline + uprobe syscall) ran.  The live part is [rsp - 128, top): the
    red zone belongs to the program - except under the nop5 design, whose ``call`` is not
    preceded by ``lea -0x80(%rsp),%rsp`` and so writes into the red zone (a real kernel's
    behaviour, fixed by the nop10 design)."""
    ran = m_probed.counters.uprobe_syscalls > 0
    design = getattr(getattr(m_probed.kernel, "optimizer", None), "design", None)
    if ran and design is not None and design.kind == "nop5":
        return rsp, ran
    return rsp - RED_ZONE, ran


def _fmt_maps(maps) -> str:
    return "[" + ", ".join(f"{a:#x}-{b:#x} {p} {n}" for a, b, p, n in maps) + "]"


def _first_byte_diff(key, exp: bytes, got: bytes) -> str:
    start, end, _prot, name = key
    idx = [i for i in range(len(exp)) if exp[i] != got[i]] if len(exp) < 65536 else _diff_indexes(exp, got)
    i = idx[0]
    lo = i & ~7
    return (
        f"memory {name} {start:#x}-{end:#x}: {len(idx)} byte(s) differ, first at "
        f"{start + i:#x}: expected {exp[lo : lo + 16].hex(' ')}, got {got[lo : lo + 16].hex(' ')}"
    )


def _diff_indexes(a: bytes, b: bytes) -> list[int]:
    out = []
    step = 4096
    for base in range(0, len(a), step):
        if a[base : base + step] != b[base : base + step]:
            out += [base + i for i in range(min(step, len(a) - base)) if a[base + i] != b[base + i]]
    return out


def hit_mismatches(ref: Reference, probes: Probes) -> list[str]:
    """Each probe's hit count must equal how often its instruction executed."""
    out = []
    for addr, c in sorted(probes.consumers.items()):
        want = ref.counts.get(addr, 0)
        if c.hits != want or c.uprobe.hits != want:
            out.append(f"hits at {probes.insns[addr]!r}: expected {want}, got handler {c.hits}, uprobe {c.uprobe.hits}")
    return out


def report(diffs: list[str], limit: int = 25) -> str:
    more = f"\n  ... and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return "\n  " + "\n  ".join(diffs[:limit]) + more
