"""pt_regs: the task's user registers as the kernel sees them at a trap.

A snapshot is read in groups: rip and the TF bit at once (what a probe hit needs to
find its uprobe and emulate a nop), the other general registers on the first access to
one of them, and eflags, fs_base and gs_base through one native call only when one of
those is read; only what changed is written back.  At a #BP or #DB trap the machine
uses ``emu.engine.regfile.TrapRegs`` instead, whose general registers are the CPU state itself
for as long as the trap lasts.  This is the machine-side half of
``struct pt_regs``; ``orig_rax`` is kernel-only state (the syscall number at entry, -1
otherwise) and never reaches the CPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, overload

# Names in gdb's amd64 order; the user-visible register set of a Linux x86_64 task.
GPR_NAMES = (
    "rax",
    "rbx",
    "rcx",
    "rdx",
    "rsi",
    "rdi",
    "rbp",
    "rsp",
    "r8",
    "r9",
    "r10",
    "r11",
    "r12",
    "r13",
    "r14",
    "r15",
    "rip",
    "eflags",
    "fs_base",
    "gs_base",
)

# Linux x86_64 user segment selectors (__USER_CS / __USER_DS).  Unicorn runs the guest
# with its own flat segments; the model always reports what a Linux task would have.
USER_CS, USER_SS = 0x33, 0x2B

# struct pt_regs field order (arch/x86/include/asm/ptrace.h), 21 slots.
PT_REGS_ORDER = (
    "r15",
    "r14",
    "r13",
    "r12",
    "rbp",
    "rbx",
    "r11",
    "r10",
    "r9",
    "r8",
    "rax",
    "rcx",
    "rdx",
    "rsi",
    "rdi",
    "orig_rax",
    "rip",
    "cs",
    "eflags",
    "rsp",
    "ss",
)

EFLAGS_BITS = (
    (0, "CF"),
    (2, "PF"),
    (4, "AF"),
    (6, "ZF"),
    (7, "SF"),
    (8, "TF"),
    (9, "IF"),
    (10, "DF"),
    (11, "OF"),
    (14, "NT"),
    (16, "RF"),
    (17, "VM"),
    (18, "AC"),
    (19, "VIF"),
    (20, "VIP"),
    (21, "ID"),
)
TF = 1 << 8
RF = 1 << 16

_INDEX = {name: i for i, name in enumerate(GPR_NAMES)}
RIP, EFLAGS = _INDEX["rip"], _INDEX["eflags"]
_RAX, _RCX, _R11 = _INDEX["rax"], _INDEX["rcx"], _INDEX["r11"]
# The lazy groups: rax..r15 (read in place), then eflags fs_base gs_base; rip is read
# at once.
N_WINDOW = RIP
# changed()'s key for "TF set or cleared alone": the value is TF or 0
TF_ONLY = -1

if TYPE_CHECKING:

    class _Register:
        """What the checker knows of a register property: an int read and written."""

        @overload
        def __get__(self, obj: None, owner: type) -> _Register: ...
        @overload
        def __get__(self, obj: PtRegs, owner: type) -> int: ...
        def __get__(self, obj: PtRegs | None, owner: type) -> int | _Register: ...
        def __set__(self, obj: PtRegs, value: int) -> None: ...


class PtRegs:
    """A snapshot of a task's registers, mutable, with dirty tracking.

    Attribute access by name (``regs.rax``); ``regs.changed()`` lists what differs from
    the snapshot; the machine writes back only those.  ``cs``/``ss`` read as Linux's
    user selectors; ``orig_rax`` is kernel state carried along with the snapshot.
    ``rip`` and ``tf`` (eflags & TF: the TF bit of ``eflags`` is read from and set
    into it) are plain attributes: the hit path reads and sets them several times per
    trap.  A value set in rip is cut to 64 bits when it is listed by :meth:`changed`;
    a TF set or cleared while eflags was not read is listed as ``TF_ONLY`` (the
    machine changes that bit and no other).
    """

    __slots__ = ("_v", "_orig", "orig_rax", "_dirty", "_load", "_loadx", "rip", "_rip0", "tf", "_tf0")

    if TYPE_CHECKING:
        # The lazily read groups: ``_v`` / ``_orig`` (list[int], a tuple for ``_orig`` of a
        # full snapshot) are None until a group is read, ``_load`` / ``_loadx`` the source
        # still to read from (None once read).  Typed Any: the hit path reads them with no
        # check of which state they are in.
        _v: Any
        _orig: Any
        _load: Any
        _loadx: Any
        _dirty: set[int]
        orig_rax: int
        rip: int
        _rip0: int
        tf: int
        _tf0: int
        # one property per register of GPR_NAMES but rip (made below, _register_property)
        rax = rbx = rcx = rdx = rsi = rdi = rbp = rsp = _Register()
        r8 = r9 = r10 = r11 = r12 = r13 = r14 = r15 = _Register()
        eflags = fs_base = gs_base = _Register()

    def __init__(self, values: list[int], orig_rax: int = -1):
        self._v = values
        self._orig = tuple(values)
        self.orig_rax = orig_rax
        self._dirty = set()
        self._load = self._loadx = None
        self.rip = self._rip0 = values[RIP]
        self.tf = self._tf0 = values[EFLAGS] & TF

    @classmethod
    def at_trap(cls, rip: int, tf: int, source, orig_rax: int = -1) -> "PtRegs":
        """A snapshot that holds rip and the trap flag only.  ``source.read_window()``
        (a list in ``GPR_NAMES`` order whose first 16 registers, rax..r15, are the
        CPU's) runs on the first access to one of rax..r15; ``source.read_extra()``
        ([eflags, fs_base, gs_base]) on the first access to one of those.  The CPU's
        registers must not change in between except through this snapshot - true
        inside a trap, where only the write-back touches them."""
        self = cls.__new__(cls)
        self._v = self._orig = None  # made by the first read of a group
        self.orig_rax = orig_rax
        self._dirty = set()
        self._load = self._loadx = source
        self.rip = self._rip0 = rip
        self.tf = self._tf0 = tf
        return self

    @classmethod
    def at_syscall(cls, values: list[int]) -> "PtRegs":
        """The registers at a ``syscall`` instruction (``values``: all of ``GPR_NAMES``
        before it) as entry_SYSCALL_64 sees them: rcx and r11 hold what the hardware
        put there (the next rip, rflags without RF), rip is past the instruction and
        ``orig_rax`` is the number.  rcx and r11 count as changed."""
        self = cls(values, values[_RAX])
        self.rip = nxt = (values[RIP] + 2) & _MASK64
        values[_RCX] = nxt
        values[_R11] = values[EFLAGS] & ~RF
        self._dirty = {_RCX, _R11}
        return self

    def _fill(self) -> None:
        """rax..r15 from the CPU; the extras stay as the snapshot has them."""
        source, self._load = self._load, None
        full = source.read_window()
        v, o = self._v, self._orig
        if v is None:
            self._orig = full[:]
        else:  # the extras were read first: keep them
            full[EFLAGS:] = v[EFLAGS:]
            o[:RIP] = full[:RIP]
        self._v = full

    def _fillx(self) -> None:
        source, self._loadx = self._loadx, None
        x = source.read_extra()
        if self._v is None:
            self._v, self._orig = list(_UNREAD), list(_UNREAD)
        self._v[EFLAGS:] = x
        self._orig[EFLAGS:] = x

    def _fill_all(self) -> None:
        if self._load is not None:
            self._fill()
        if self._loadx is not None:
            self._fillx()

    @property
    def loaded(self) -> bool:
        """True once every register was read from the CPU (False: rip and TF only, or
        not the extras yet)."""
        return self._load is None and self._loadx is None

    @classmethod
    def from_dict(cls, values: dict[str, int]) -> "PtRegs":
        return cls([values.get(n, 0) for n in GPR_NAMES], values.get("orig_rax", -1))

    # attribute access: one property per register (set below), cs/ss fixed -------------
    cs = property(lambda self: USER_CS, lambda self, value: None)
    ss = property(lambda self: USER_SS, lambda self, value: None)

    # (no __getattr__: a class with one gets no specialised attribute access, and every
    # register read and write on the hit path would pay for it)
    def __getitem__(self, name: str) -> int:
        if name not in _NAMES:
            raise KeyError(f"no register named {name!r}")
        return getattr(self, name)

    def __setitem__(self, name: str, value: int) -> None:
        if name not in _NAMES:
            raise KeyError(f"no register named {name!r}")
        setattr(self, name, value)

    # views ---------------------------------------------------------------
    def values(self) -> list[int]:
        """The registers in ``GPR_NAMES`` order."""
        self._fill_all()
        v = list(self._v)
        v[RIP] = self.rip & _MASK64
        v[EFLAGS] = (v[EFLAGS] & ~TF) | (TF if self.tf else 0)
        return v

    def as_dict(self) -> dict[str, int]:
        d = dict(zip(GPR_NAMES, self.values()))
        d["cs"], d["ss"], d["orig_rax"] = USER_CS, USER_SS, self.orig_rax
        return d

    def pt_regs(self) -> dict[str, int]:
        """The 21 slots of struct pt_regs, in kernel order."""
        d = self.as_dict()
        return {name: d[name] for name in PT_REGS_ORDER}

    def changed(self) -> dict[int, int]:
        """{index: value} of the registers set since the snapshot and now different
        (a register of a group not read yet cannot have been set).  With eflags not
        read, a TF set or cleared is ``{TF_ONLY: TF or 0}``."""
        dirty = self._dirty
        out = {}
        if dirty:
            v, o = self._v, self._orig
            for i in dirty:  # (a loop: a comprehension is a frame of its own)
                x = v[i]
                if x != o[i]:
                    out[i] = x
        rip = self.rip
        if rip != self._rip0:
            rip = int(rip) & _MASK64
            if rip != self._rip0:
                out[RIP] = rip
        if self._loadx is None:  # eflags read: its TF bit is tf
            flags = (self._v[EFLAGS] & ~TF) | (TF if self.tf else 0)
            if flags != self._orig[EFLAGS]:
                out[EFLAGS] = flags
            else:
                out.pop(EFLAGS, None)
        elif bool(self.tf) != bool(self._tf0):
            out[TF_ONLY] = TF if self.tf else 0
        return out

    def copy(self) -> "PtRegs":
        return PtRegs(self.values(), self.orig_rax)

    def __repr__(self):
        return "PtRegs(" + ", ".join(f"{n}={v:#x}" for n, v in zip(GPR_NAMES, self.values())) + ")"


_MASK64 = 0xFFFFFFFFFFFFFFFF
# what regs[name] takes: the registers, the fixed selectors and orig_rax
_NAMES = frozenset(GPR_NAMES) | {"cs", "ss", "orig_rax"}
_UNREAD = (0,) * len(GPR_NAMES)


def _register_property(i: int) -> property:
    if i < N_WINDOW:

        def get_(self):
            if self._load is not None:
                self._fill()
            return self._v[i]

        def set_(self, value):
            if self._load is not None:
                self._fill()
            self._v[i] = int(value) & _MASK64
            self._dirty.add(i)

        return property(get_, set_)

    if i == EFLAGS:  # the TF bit is ``tf``

        def get_flags(self):
            if self._loadx is not None:
                self._fillx()
            return (self._v[EFLAGS] & ~TF) | (TF if self.tf else 0)

        def set_flags(self, value):
            if self._loadx is not None:
                self._fillx()
            self._v[EFLAGS] = value = int(value) & _MASK64
            self.tf = value & TF
            self._dirty.add(EFLAGS)  # changed() compares it with its TF bit merged

        return property(get_flags, set_flags)

    def get_x(self):
        if self._loadx is not None:
            self._fillx()
        return self._v[i]

    def set_x(self, value):
        if self._loadx is not None:
            self._fillx()
        self._v[i] = int(value) & _MASK64
        self._dirty.add(i)

    return property(get_x, set_x)


for _i, _name in enumerate(GPR_NAMES):
    if _i != RIP:
        setattr(PtRegs, _name, _register_property(_i))
del _i, _name


def format_eflags(value: int) -> str:
    """gdb's natural eflags form: ``[ PF ZF IF ]``."""
    names = [name for bit, name in EFLAGS_BITS if value & (1 << bit)]
    return "[ " + " ".join(names) + " ]" if names else "[ ]"
