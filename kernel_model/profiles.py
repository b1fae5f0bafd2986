"""Kernel versions as sets of switches.

Every uprobes behaviour that changed between kernel releases is one switch; a profile
names the switch values of one release.  Users pick a profile by version and may override
any switch: ``KernelProfile.get("6.18", uretprobe_trampoline="int3")``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import ClassVar

from kernel_model.errors import InputError

SwitchValue = str | bool | None  # what a switch is set to (``optimize`` alone may be None)


@dataclass(frozen=True)
class KernelProfile:
    name: str
    release: str  # uname -r
    uretprobe_trampoline: str  # "int3" (<=6.10) | "syscall" (6.11+)
    nop_emulation: str  # "nop1" | "x86_nops" (6.18) | "insn_is_nop" (6.19+)
    optimize: str | None  # None | "nop5" (6.18-7.2) | "nop10" (7.3+)
    ri_alloc: str  # "kmalloc" | "array64" | "pool" (6.14+)
    args_buffer: str  # "always" | "lazy" (6.10+)
    ip_change_skips_insn: bool  # 6.18+
    uprobe_syscall_outside: str  # "ENXIO" (6.18-7.2) | "EPROTO" (7.3+) | "SIGILL" (unmerged revision)
    trampoline_sls_int3: bool  # 6.18+: int3 after the trampolines' ret
    has_uprobe_syscall: bool  # syscall 336 exists (6.18+)
    has_uretprobe_syscall: bool  # syscall 335 exists (6.11+)
    session_consumers: bool  # 6.13+
    trampolines_copied_on_fork: bool  # 7.3+: [uprobes-trampoline] no longer VM_DONTCOPY
    # handler_chain: how the handlers' return values are read.  "bitmask" (<= 6.12):
    # ``remove &= rc`` keeps bit 0 of every rc (3 is a REMOVE too), and one return probe
    # serves every ret_handler when any consumer has one and not every handler removed
    # (``need_prep && !remove``) - a consumer's own REMOVE does not skip its ret_handler.
    # "exact" (6.13+, 4d756095d399 "uprobe: Add support for session consumer"): only
    # rc == UPROBE_HANDLER_REMOVE removes, and a consumer answering REMOVE or IGNORE gets
    # no return instance (the instance is allocated in handler_chain).
    handler_chain_rc: str
    # handler_chain, every handler returned REMOVE: re-check filter_chain() under
    # register_rwsem and unapply only if no consumer wants the mm (a filterless one
    # always does).  6.12+ (cc01bd044e6a "uprobes: travers uprobe's consumer list
    # locklessly under SRCU protection"); before, the breakpoint was removed from the mm
    # whenever there were consumers and all of them answered REMOVE.
    remove_rechecks_filter: bool
    # -- the synchronization on the hot paths (kernel_model.kernel.events.uprobes_sync) --
    # uprobes_treelock taken by find_uprobe: "spinlock" (<= 6.9) | "rwlock" (6.10,
    # 0dc715295d41) | "seqcount" (6.12, cd7bdd9d46a9: lockless RB lookup under RCU)
    # | "percpu_rwsem" (a design that never shipped: per-CPU RW semaphore)
    treelock: str
    # what keeps an entry uprobe alive while it is hit: "refcount" (get_uprobe/put_uprobe,
    # <= 6.11) | "srcu" (6.12, 8617408f7a01) | "rcu_tasks_trace" (6.13, 87195a1ee332)
    # | "srcu_lite" (the published SRCU-lite comparison; never shipped for uprobes)
    uprobe_lifetime: str
    # handler_chain walks the consumers under "register_rwsem" (<= 6.11) or "lockless"
    # under the lifetime's RCU flavor (6.12, cc01bd044e6a)
    consumers_lock: str
    # a pending return_instance holds its uprobe by "refcount" (<= 6.12) | "srcu"
    # (uretprobes_srcu + the 100 ms hprobe timer, 6.13, dd1a7567784e) |
    # "srcu_fast_updown" (7.3, 36c8b02c3fe9)
    uretprobe_lifetime: str
    # find_active_uprobe resolves the VMA under "mmap_lock" (<= 6.13) or "speculative"
    # (mm_lock_seq, no mmap_lock, 6.14, e0925f2dc4de)
    vma_lookup: str
    # trace_uprobe->nhit: "shared" (<= 6.11) | "percpu" (6.12, 10cdb82aa77f)
    nhit: str
    # uprobe_perf_filter on every hit: "rwlock" (read_lock(&filter->rwlock), <= 6.9) |
    # "lockless" (nr_systemwide checked first, 6.10, cdf355cc60e3)
    perf_filter: str
    # handle_singlestep takes sighand->siglock to recalc_sigpending (<= 6.14; removed
    # in 6.15, 83179cd67846)
    sstep_siglock: bool
    # BPF_TRACE_UPROBE_SESSION programs (uprobe.session): 6.13 (d920179b3d48 "bpf: Add
    # support for uprobe multi session attach")
    bpf_uprobe_session: bool
    # what a uprobe_multi link's handlers return to handler_chain: the program's return
    # value, "prog" (so a 1 asks UPROBE_HANDLER_REMOVE, <= 6.12), or 0 but for a session
    # program, "zero" (6.13, f505005bc742 "bpf: Force uprobe bpf program to always return 0")
    bpf_uprobe_multi_rc: str

    SWITCHES: ClassVar[tuple[str, ...]] = (
        "uretprobe_trampoline",
        "nop_emulation",
        "optimize",
        "ri_alloc",
        "args_buffer",
        "ip_change_skips_insn",
        "uprobe_syscall_outside",
        "trampoline_sls_int3",
        "has_uprobe_syscall",
        "has_uretprobe_syscall",
        "session_consumers",
        "trampolines_copied_on_fork",
        "handler_chain_rc",
        "remove_rechecks_filter",
        "treelock",
        "uprobe_lifetime",
        "consumers_lock",
        "uretprobe_lifetime",
        "vma_lookup",
        "nhit",
        "perf_filter",
        "sstep_siglock",
        "bpf_uprobe_session",
        "bpf_uprobe_multi_rc",
    )

    @staticmethod
    def names() -> list[str]:
        return list(_PROFILES)

    @staticmethod
    def get(name: str = "latest", **overrides: SwitchValue) -> KernelProfile:
        name = str(name)
        if name not in _PROFILES:
            raise InputError(f"unknown kernel profile {name!r}; known: {', '.join(_PROFILES)}")
        prof = _PROFILES[name]
        bad = [k for k in overrides if k not in KernelProfile.SWITCHES]
        if bad:
            raise InputError(f"unknown kernel switch {bad[0]!r}; known: {', '.join(KernelProfile.SWITCHES)}")
        for k, v in overrides.items():
            if k in _CHOICES and v not in _CHOICES[k]:
                raise InputError(f"kernel switch {k} is one of {', '.join(map(str, _CHOICES[k]))}, not {v!r}")
        return replace(prof, **overrides) if overrides else prof  # type: ignore[arg-type]  # checked above

    def describe(self) -> dict[str, SwitchValue]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_CHOICES: dict[str, tuple[SwitchValue, ...]] = {
    "handler_chain_rc": ("bitmask", "exact"),
    "remove_rechecks_filter": (False, True),
    "treelock": ("spinlock", "rwlock", "seqcount", "percpu_rwsem"),
    "uprobe_lifetime": ("refcount", "srcu", "rcu_tasks_trace", "srcu_lite"),
    "consumers_lock": ("register_rwsem", "lockless"),
    "uretprobe_lifetime": ("refcount", "srcu", "srcu_fast_updown"),
    "vma_lookup": ("mmap_lock", "speculative"),
    "nhit": ("shared", "percpu"),
    "perf_filter": ("rwlock", "lockless"),
    "sstep_siglock": (True, False),
    "bpf_uprobe_session": (False, True),
    "bpf_uprobe_multi_rc": ("prog", "zero"),
}


def _p(name: str, release: str, **kw: SwitchValue) -> KernelProfile:
    return KernelProfile(name=name, release=release, **kw)  # type: ignore[arg-type]  # the switches of _BASE


_BASE: dict[str, SwitchValue] = dict(
    uretprobe_trampoline="int3",
    nop_emulation="nop1",
    optimize=None,
    ri_alloc="kmalloc",
    args_buffer="always",
    ip_change_skips_insn=False,
    uprobe_syscall_outside="ENOSYS",
    trampoline_sls_int3=False,
    has_uprobe_syscall=False,
    has_uretprobe_syscall=False,
    session_consumers=False,
    trampolines_copied_on_fork=False,
    handler_chain_rc="bitmask",
    remove_rechecks_filter=False,
    treelock="spinlock",
    uprobe_lifetime="refcount",
    consumers_lock="register_rwsem",
    uretprobe_lifetime="refcount",
    vma_lookup="mmap_lock",
    nhit="shared",
    perf_filter="rwlock",
    sstep_siglock=True,
    bpf_uprobe_session=False,
    bpf_uprobe_multi_rc="prog",
)


def _build() -> dict[str, KernelProfile]:
    """One profile per release that changed a switch, and the releases between that
    users ask for; each change names the kernel commit that made it."""
    b = dict(_BASE)
    out = {}
    out["6.9"] = _p("6.9", "6.9.0", **b)
    b.update(args_buffer="lazy")  # 1b8f85defbc8 "uprobes: prepare uprobe args buffer lazily"
    b.update(treelock="rwlock")  # 0dc715295d41 "uprobes: reduce contention on uprobes_tree access"
    b.update(perf_filter="lockless")  # cdf355cc60e3 "uprobes: add speculative lockless system-wide
    # uprobe filter check"
    out["6.10"] = _p("6.10", "6.10.0", **b)
    b.update(uretprobe_trampoline="syscall", has_uretprobe_syscall=True)  # ff474a78cef5
    out["6.11"] = _p("6.11", "6.11.0", **b)
    b.update(remove_rechecks_filter=True, consumers_lock="lockless")  # cc01bd044e6a
    b.update(treelock="seqcount")  # cd7bdd9d46a9
    b.update(uprobe_lifetime="srcu")  # 8617408f7a01
    b.update(nhit="percpu")  # 10cdb82aa77f
    out["6.12"] = _p("6.12", "6.12.0", **b)
    b.update(session_consumers=True, handler_chain_rc="exact")  # 4d756095d399
    b.update(uprobe_lifetime="rcu_tasks_trace")  # 87195a1ee332
    b.update(uretprobe_lifetime="srcu")  # dd1a7567784e
    b.update(bpf_uprobe_session=True)  # d920179b3d48
    b.update(bpf_uprobe_multi_rc="zero")  # f505005bc742
    out["6.13"] = _p("6.13", "6.13.0", **b)
    b.update(ri_alloc="pool")  # 8622e45b5da1
    b.update(vma_lookup="speculative")  # e0925f2dc4de
    out["6.14"] = _p("6.14", "6.14.0", **b)
    b.update(sstep_siglock=False)  # 83179cd67846 (and eae8a56ae0c7 for uprobe_deny_signal)
    out["6.15"] = _p("6.15", "6.15.0", **b)
    out["6.17"] = _p("6.17", "6.17.0", **b)
    # the nop5 optimization and the uprobe syscall (ba2bfc97b462, d3aeb6d97b22,
    # f349ec80865d) with the x86_nops emulation; a handler's ip change skips the instruction
    # (4363264111e1)
    b.update(
        nop_emulation="x86_nops",
        optimize="nop5",
        ip_change_skips_insn=True,
        uprobe_syscall_outside="ENXIO",
        trampoline_sls_int3=True,
        has_uprobe_syscall=True,
    )
    out["6.18"] = _p("6.18", "6.18.0", **b)
    b.update(nop_emulation="insn_is_nop")  # 8a5c6cbfe4a3
    out["6.19"] = _p("6.19", "6.19.0", **b)
    out["7.1"] = _p("7.1", "7.1.0", **b)
    # 7.2's uprobes changes were fixes: __in_uprobe_trampoline on the right mm
    # (169328645663), the shadow stack of emulated calls (abf08854d224)
    out["7.2"] = _p("7.2", "7.2.0", **b)
    # the nop10 site and -EPROTO (554ba38456da), trampolines copied on fork (d9a48e77f6fe)
    b.update(optimize="nop10", uprobe_syscall_outside="EPROTO", trampolines_copied_on_fork=True)
    b.update(uretprobe_lifetime="srcu_fast_updown")  # 36c8b02c3fe9
    out["7.3"] = _p("7.3", "7.3.0", **b)
    out["latest"] = _p("latest", "7.3.0", **b)
    return out


_PROFILES = _build()
