"""pt_regs: the task's user registers as the kernel sees them at a trap.

The machine reads them lazily at a trap - rip and eflags first (what a probe hit
needs to find its uprobe and emulate a nop), the whole set in one native batch only
when something reads another register - and writes back only what a handler changed
(``emu.machine.RegisterFile``).  This is the machine-side half of
``struct pt_regs``; ``orig_rax`` is kernel-only state (the syscall
number at entry, -1 otherwise) and never reaches the CPU.
"""

from __future__ import annotations

# Names in gdb's amd64 order; the user-visible register set of a Linux x86_64 task.
GPR_NAMES = (
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp",
    "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
    "rip", "eflags", "fs_base", "gs_base",
)

# Linux x86_64 user segment selectors (__USER_CS / __USER_DS).  Unicorn runs the guest
# with its own flat segments; the model always reports what a Linux task would have.
USER_CS, USER_SS = 0x33, 0x2B

# struct pt_regs field order (arch/x86/include/asm/ptrace.h), 21 slots.
PT_REGS_ORDER = (
    "r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8",
    "rax", "rcx", "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss",
)

EFLAGS_BITS = (
    (0, "CF"), (2, "PF"), (4, "AF"), (6, "ZF"), (7, "SF"), (8, "TF"), (9, "IF"),
    (10, "DF"), (11, "OF"), (14, "NT"), (16, "RF"), (17, "VM"), (18, "AC"),
    (19, "VIF"), (20, "VIP"), (21, "ID"),
)
TF = 1 << 8
RF = 1 << 16

_INDEX = {name: i for i, name in enumerate(GPR_NAMES)}
RIP, EFLAGS = _INDEX["rip"], _INDEX["eflags"]
# What a lazy snapshot holds before its first full read (see PtRegs.lazy).
HEAD = (RIP, EFLAGS)


class PtRegs:
    """A snapshot of a task's registers, mutable, with dirty tracking.

    Attribute access by name (``regs.rax``); ``regs.changed()`` lists what differs from
    the snapshot; the machine writes back only those.  ``cs``/``ss`` read as Linux's
    user selectors; ``orig_rax`` is kernel state carried along with the snapshot.
    """

    __slots__ = ("_v", "_orig", "orig_rax", "_dirty", "_load")

    def __init__(self, values: list[int], orig_rax: int = -1):
        self._v = values
        self._orig = tuple(values)
        self.orig_rax = orig_rax
        self._dirty = set()
        self._load = None

    @classmethod
    def lazy(cls, rip: int, eflags: int, load, orig_rax: int = -1) -> "PtRegs":
        """A snapshot that holds rip and eflags only; ``load()`` (all of ``GPR_NAMES``,
        read from the CPU) runs on the first access to any other register.  The CPU's
        registers must not change in between except through this snapshot - true inside
        a trap, where only the write-back touches them."""
        self = cls.__new__(cls)
        v = [0] * len(GPR_NAMES)
        v[RIP], v[EFLAGS] = rip, eflags
        self._v = v
        self._orig = (rip, eflags)        # indexed through HEAD until loaded
        self.orig_rax = orig_rax
        self._dirty = set()
        self._load = load
        return self

    def _fill(self) -> None:
        """The full batch, with what was already set through the snapshot kept."""
        load, self._load = self._load, None
        full = load()
        orig = tuple(full)
        v = self._v
        for i in self._dirty:
            full[i] = v[i]
        self._v, self._orig = full, orig

    @property
    def loaded(self) -> bool:
        """True once every register was read from the CPU (False: rip/eflags only)."""
        return self._load is None

    @classmethod
    def from_dict(cls, values: dict[str, int]) -> "PtRegs":
        return cls([values.get(n, 0) for n in GPR_NAMES], values.get("orig_rax", -1))

    # attribute access: one property per register (set below), cs/ss fixed -------------
    cs = property(lambda self: USER_CS, lambda self, value: None)
    ss = property(lambda self: USER_SS, lambda self, value: None)

    def __getattr__(self, name):
        raise AttributeError(f"no register named {name!r}")

    def __getitem__(self, name: str) -> int:
        return getattr(self, name)

    def __setitem__(self, name: str, value: int) -> None:
        setattr(self, name, value)

    # views ---------------------------------------------------------------
    def as_dict(self) -> dict[str, int]:
        if self._load is not None:
            self._fill()
        d = dict(zip(GPR_NAMES, self._v))
        d["cs"], d["ss"], d["orig_rax"] = USER_CS, USER_SS, self.orig_rax
        return d

    def pt_regs(self) -> dict[str, int]:
        """The 21 slots of struct pt_regs, in kernel order."""
        d = self.as_dict()
        return {name: d[name] for name in PT_REGS_ORDER}

    def changed(self) -> dict[int, int]:
        """{index: value} of the registers set since the snapshot and now different."""
        dirty = self._dirty
        if not dirty:
            return {}
        v, o = self._v, self._orig
        if self._load is not None:        # only rip / eflags can be dirty
            return {i: v[i] for i in dirty if v[i] != o[HEAD.index(i)]}
        return {i: v[i] for i in dirty if v[i] != o[i]}

    def values(self) -> list[int]:
        """The registers in ``GPR_NAMES`` order."""
        if self._load is not None:
            self._fill()
        return list(self._v)

    def copy(self) -> "PtRegs":
        if self._load is not None:
            self._fill()
        return PtRegs(list(self._v), self.orig_rax)


    def __repr__(self):
        if self._load is not None:
            self._fill()
        return "PtRegs(" + ", ".join(f"{n}={v:#x}" for n, v in zip(GPR_NAMES, self._v)) + ")"


def _register_property(i: int) -> property:
    if i in HEAD:                         # held by a lazy snapshot from the start
        def get(self):
            return self._v[i]

        def set_(self, value):
            self._v[i] = int(value) & 0xFFFFFFFFFFFFFFFF
            self._dirty.add(i)
        return property(get, set_)

    def get_(self):
        if self._load is not None:
            self._fill()
        return self._v[i]

    def set_other(self, value):
        if self._load is not None:
            self._fill()
        self._v[i] = int(value) & 0xFFFFFFFFFFFFFFFF
        self._dirty.add(i)
    return property(get_, set_other)


for _i, _name in enumerate(GPR_NAMES):
    setattr(PtRegs, _name, _register_property(_i))
del _i, _name


def format_eflags(value: int) -> str:
    """gdb's natural eflags form: ``[ PF ZF IF ]``."""
    names = [name for bit, name in EFLAGS_BITS if value & (1 << bit)]
    return "[ " + " ".join(names) + " ]" if names else "[ ]"
