"""What a run did, as far as probing must not change it, and where two runs part.

A :class:`RunDigest` holds the run's outcome (exit status or signal), its stdout and
stderr, the syscall sequence of every task with arguments and return values, the final
registers and a hash of each page of writable memory.  The kernel's own additions are
left out, as they are no part of the program: the ``[uprobes]`` XOL area and the
``[uprobes-trampoline]`` page, the ``uretprobe``/``uprobe`` syscalls (335/336) made from
those pages (``arch_uretprobe_trampoline``, ``uprobe_trampoline``), and the stack below
the program's live part (rsp less the 128-byte red zone), where the return trampoline
pushes as any callee would.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field

from emu.inspect import GPR_NAMES, is_writable, syscall_name
from kernel_model.trace.events import Syscall, SyscallReturn

KERNEL_PAGES = ("[uprobes]", "[uprobes-trampoline]")
KERNEL_SYSCALLS = (335, 336)  # sys_uretprobe, sys_uprobe
RED_ZONE = 128
PAGE = 4096
# What the host's side of a sweep sees of a run (no registers, no memory): see
# emu.frontends.sweep.host for which syscall fields compare there.
HOST_PARTS = ("outcome", "stdout", "stderr", "syscalls")
MASKED = "*"  # a syscall field the comparison leaves out


@dataclass
class RunDigest:
    outcome: str  # "exit 7" | "signal SIGSEGV" | "timeout ..."
    stdout: bytes
    stderr: bytes
    syscalls: dict = field(default_factory=dict)  # tid -> [(nr, args, ret)]
    regs: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)  # "start-end name" -> [page hash]
    hits: int = 0

    def to_json(self) -> dict:
        """JSON that :meth:`from_json` turns back into an equal digest (a resumed
        sweep compares against the reference it recorded)."""
        return {
            "outcome": self.outcome,
            "stdout": base64.b64encode(self.stdout).decode(),
            "stderr": base64.b64encode(self.stderr).decode(),
            "syscalls": [
                [tid, [[nr, list(args), ret] for nr, args, ret in calls]] for tid, calls in self.syscalls.items()
            ],
            "regs": self.regs,
            "memory": self.memory,
            "hits": self.hits,
        }

    @staticmethod
    def from_json(d: dict) -> "RunDigest":
        return RunDigest(
            d["outcome"],
            base64.b64decode(d["stdout"]),
            base64.b64decode(d["stderr"]),
            {tid: [(nr, tuple(args), ret) for nr, args, ret in calls] for tid, calls in d["syscalls"]},
            dict(d["regs"]),
            {k: list(v) for k, v in d["memory"].items()},
            d["hits"],
        )


class SyscallRecorder:
    """Subscribes to the machine's syscall events (:mod:`kernel_model.trace.events`) for one run."""

    def __init__(self, machine):
        self.calls: dict = {}
        self._skip: set = set()
        bus = machine.events
        self._handles = [bus.subscribe(self._enter, Syscall), bus.subscribe(self._return, SyscallReturn)]
        self._bus = bus

    @staticmethod
    def _from_kernel_page(e) -> bool:
        vma = e.task.process.mem.find_vma(e.rip)
        return vma is not None and vma.name in KERNEL_PAGES

    def _enter(self, e) -> None:
        tid = e.task.tid
        if e.nr in KERNEL_SYSCALLS and self._from_kernel_page(e):
            self._skip.add(tid)
            return
        self.calls.setdefault(tid, []).append([e.nr, tuple(e.args), None])

    def _return(self, e) -> None:
        tid = e.task.tid
        if tid in self._skip:
            self._skip.discard(tid)
            return
        calls = self.calls.get(tid)
        if calls and calls[-1][2] is None:
            calls[-1][2] = e.ret

    def close(self) -> dict:
        for h in self._handles:
            self._bus.unsubscribe(h)
        return {tid: [tuple(c) for c in calls] for tid, calls in self.calls.items()}


def outcome_of(result) -> str:
    if result.reason == "exit":
        return f"exit {result.exit_code}"
    if result.reason == "signal":
        return f"signal {result.signal_name}"
    return result.reason  # budget | timeout | stopped: the detail names wall time


def _page_hashes(start: int, data: bytes) -> list[str]:
    """One hash per page-aligned piece: piece i starts at ``page_start(start, i)``."""
    cuts = [0] + list(range(PAGE - start % PAGE if start % PAGE else PAGE, len(data), PAGE))
    return [hashlib.blake2b(data[a:b], digest_size=8).hexdigest() for a, b in zip(cuts, cuts[1:] + [len(data)])]


def page_start(start: int, i: int) -> int:
    return start if i == 0 else (start & ~(PAGE - 1)) + i * PAGE


def memory_digest(machine, rsp: int) -> dict:
    """Page hashes of every writable mapping of the program (the stack from its live
    floor, ``rsp - 128``, up)."""
    out = {}
    for v in machine.mem.vmas:
        name = v.file.path if v.file is not None else v.name
        if not is_writable(v) or name in KERNEL_PAGES:
            continue
        start = v.start
        if name == "[stack]" and v.start <= rsp - RED_ZONE < v.end:
            start = rsp - RED_ZONE
        out[f"{start:#x}-{v.end:#x} {name}"] = _page_hashes(start, machine.mem.read(start, v.end - start))
    return out


def digest(machine, result, recorder: SyscallRecorder, hits: int = 0) -> RunDigest:
    regs = machine.read_regs().as_dict()
    return RunDigest(
        outcome_of(result),
        bytes(result.stdout),
        bytes(result.stderr),
        recorder.close(),
        {n: regs[n] for n in GPR_NAMES},
        memory_digest(machine, regs["rsp"]),
        hits,
    )


# ----------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class Noise:
    """What differs between two unprobed runs (ld.so keeps ``rdtsc`` readings in its
    data, for one): not compared, and said in the report."""

    parts: frozenset = frozenset()  # whole parts: stdout, stderr, syscalls, outcome
    regs: frozenset = frozenset()
    pages: frozenset = frozenset()  # (mapping key, piece index)

    def describe(self) -> str:
        bits = (
            sorted(self.parts)
            + [f"register {r}" for r in sorted(self.regs)]
            + [f"{len(self.pages)} page(s) of memory"] * bool(self.pages)
        )
        return ", ".join(bits)

    def to_json(self) -> dict:
        return {"parts": sorted(self.parts), "regs": sorted(self.regs), "pages": sorted([k, i] for k, i in self.pages)}

    @staticmethod
    def from_json(d: dict) -> "Noise":
        return Noise(frozenset(d["parts"]), frozenset(d["regs"]), frozenset((k, i) for k, i in d["pages"]))


def noise_between(a: RunDigest, b: RunDigest) -> Noise:
    parts = {p for p in ("outcome", "stdout", "stderr", "syscalls") if getattr(a, p) != getattr(b, p)}
    regs = {n for n in GPR_NAMES if a.regs.get(n) != b.regs.get(n)}
    pages = set()
    for key in set(a.memory) | set(b.memory):
        x, y = a.memory.get(key, []), b.memory.get(key, [])
        pages |= {
            (key, i)
            for i in range(max(len(x), len(y)))
            if (x[i] if i < len(x) else None) != (y[i] if i < len(y) else None)
        }
    return Noise(frozenset(parts), frozenset(regs), frozenset(pages))


@dataclass
class Divergence:
    parts: list  # which of outcome, stdout, stderr, syscalls, regs, memory differ
    first: str  # the first point where the runs part
    details: list  # one line per differing part
    tag: str = ""  # "mmap-lower": they part at an mmap that landed lower
    nrs: bool = False  # the syscall numbers differ (not only arguments or results)

    def to_json(self) -> dict:
        return {"parts": self.parts, "first": self.first, "details": self.details, "tag": self.tag, "nrs": self.nrs}

    @staticmethod
    def from_json(d: dict) -> "Divergence":
        return Divergence(d["parts"], d["first"], d["details"], d.get("tag", ""), d.get("nrs", False))


def format_syscall(call) -> str:
    """``name(args) = ret``; a field left out of the comparison (:data:`MASKED`) is ``*``."""
    nr, args, ret = call
    name = syscall_name(nr, f"syscall_{nr}")
    shown = ", ".join(MASKED if a == MASKED else f"{a:#x}" for a in args[:6])
    return f"{name}({shown}) = {'?' if ret is None else MASKED if ret == MASKED else _signed(ret)}"


def _signed(v: int) -> str:
    v &= 0xFFFFFFFFFFFFFFFF
    return str(v - (1 << 64)) if v >> 63 else f"{v:#x}" if v > 4096 else str(v)


MMAP = 9


def _mmap_lower(x, y) -> bool:
    """The same mmap call answered with a lower address (by whole pages)."""
    return bool(
        x
        and y
        and x[0] == y[0] == MMAP
        and x[1] == y[1]
        and isinstance(x[2], int)
        and isinstance(y[2], int)
        and y[2] < x[2]
        and (x[2] - y[2]) % PAGE == 0
    )


def _first_syscall_diff(ref: dict, got: dict) -> tuple[str, str] | None:
    for tid in sorted(set(ref) | set(got)):
        a, b = ref.get(tid, []), got.get(tid, [])
        for i in range(max(len(a), len(b))):
            x = a[i] if i < len(a) else None
            y = b[i] if i < len(b) else None
            if x != y:
                who = f" of task {tid}" if len(ref) > 1 or len(got) > 1 else ""
                return (
                    f"syscall #{i + 1}{who}: reference {format_syscall(x) if x else '(none)'}, "
                    f"probed {format_syscall(y) if y else '(none)'}",
                    "mmap-lower" if _mmap_lower(x, y) else "",
                )
    return None


def _first_byte(a: bytes, b: bytes) -> int:
    return next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))


def compare(ref: RunDigest, got: RunDigest, noise: Noise = Noise()) -> Divergence | None:
    """None when the probed run did what the reference did; else which parts differ and
    the first point where they part (a syscall's index when the sequences differ: the
    earliest thing the program did differently; the end state otherwise)."""
    parts, details = [], []
    sc = None if "syscalls" in noise.parts else _first_syscall_diff(ref.syscalls, got.syscalls)
    if sc:
        parts.append("syscalls")
        details.append(sc[0])
    if ref.outcome != got.outcome and "outcome" not in noise.parts:
        parts.append("outcome")
        details.append(f"outcome: reference {ref.outcome}, probed {got.outcome}")
    for name in ("stdout", "stderr"):
        a, b = getattr(ref, name), getattr(got, name)
        if a != b and name not in noise.parts:
            i = _first_byte(a, b)
            parts.append(name)
            details.append(
                f"{name} at byte {i}: reference {a[max(0, i - 16) : i + 16]!r}, probed {b[max(0, i - 16) : i + 16]!r}"
            )
    regs = [n for n in GPR_NAMES if ref.regs.get(n) != got.regs.get(n) and n not in noise.regs]
    if regs:
        parts.append("regs")
        details.append(
            "registers: " + ", ".join(f"{n} reference {ref.regs[n]:#x} probed {got.regs[n]:#x}" for n in regs)
        )
    mem = _memory_diff(ref.memory, got.memory, noise.pages)
    if mem:
        parts.append("memory")
        details.append(mem)
    if not parts:
        return None
    return Divergence(
        parts, details[0], details, sc[1] if sc else "", bool(sc) and _numbers(ref.syscalls) != _numbers(got.syscalls)
    )


def _numbers(syscalls: dict) -> list:
    """Each task's syscall numbers, in task order."""
    return [[c[0] for c in syscalls[tid]] for tid in sorted(syscalls)]


def _memory_diff(a: dict, b: dict, noisy=frozenset()) -> str | None:
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        return f"writable mappings: reference only {only_a}, probed only {only_b}"
    for key in a:
        if a[key] != b[key]:
            pages = [i for i, (x, y) in enumerate(zip(a[key], b[key])) if x != y and (key, i) not in noisy]
            if not pages and len(a[key]) == len(b[key]):
                continue
            start = int(key.split("-", 1)[0], 16)
            first = page_start(start, pages[0]) if pages else start
            return f"memory {key}: {len(pages)} page(s) differ, the first at {first:#x}"
    return None


def host_view(d: Divergence | None, unseen=frozenset(), numbers_only: bool = False) -> Divergence | None:
    """What of a model divergence the host's side could see: the :data:`HOST_PARTS`
    but those in ``unseen`` (what two native runs disagree on), and of the syscalls
    only their numbers when ``numbers_only`` (a native run under ASLR)."""
    if d is None:
        return None
    keep = [
        (p, t)
        for p, t in zip(d.parts, d.details)
        if p in HOST_PARTS and p not in unseen and not (p == "syscalls" and numbers_only and not d.nrs)
    ]
    if not keep:
        return None
    return Divergence([p for p, _ in keep], keep[0][1], [t for _, t in keep], d.tag, d.nrs)
