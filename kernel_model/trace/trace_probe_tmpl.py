"""Fetch arguments at a probe hit: the fetch program and its printing.

Models ``process_fetch_insn()`` (kernel/trace/trace_uprobe.c),
``process_fetch_insn_bottom()`` (kernel/trace/trace_probe_tmpl.h) and the
``print_type_*`` functions (kernel/trace/trace_probe.c): a parsed argument
(:class:`FetchArg`, made by :mod:`kernel_model.trace.trace_probe`'s parser) is a small
tree of fetch ops (:data:`FetchNode`) evaluated against a :class:`FetchContext` - the
trapped task's registers and memory - then formatted the way the ``trace`` file shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol, Union

MAX_STRING_SIZE = 4096  # PATH_MAX
TASK_COMM_LEN = 16

_U64 = (1 << 64) - 1

# probe_fetch_types[] in trace_probe.c: name -> (size in bytes, signed).  "symbol" and
# "symstr" exist too but find_fetch_type() refuses them for uprobes (TPARG_FL_USER).
BASIC_TYPES = MappingProxyType(
    {
        "u8": (1, False),
        "u16": (2, False),
        "u32": (4, False),
        "u64": (8, False),
        "s8": (1, True),
        "s16": (2, True),
        "s32": (4, True),
        "s64": (8, True),
        "x8": (1, False),
        "x16": (2, False),
        "x32": (4, False),
        "x64": (8, False),
        "char": (1, False),
    }
)
STRING_TYPES = frozenset({"string", "ustring"})

# --- the fetch tree ------------------------------------------------------------------------
# One node per kernel fetch_insn stage-1 op; Deref is FETCH_OP_DEREF / FETCH_OP_UDEREF
# (identical for uprobes: both are copy_from_user).


@dataclass(frozen=True)
class Reg:
    """``%REG`` (FETCH_OP_REG); ``name`` is our register name (``rax``, ``eflags``...)."""

    name: str


@dataclass(frozen=True)
class Stack:
    """``$stackN`` (FETCH_OP_STACK): the word at ``sp + 8*N``, 0 if unreadable."""

    n: int


@dataclass(frozen=True)
class StackPointer:
    """``$stack`` (FETCH_OP_STACKP): the stack pointer itself."""


@dataclass(frozen=True)
class Retval:
    """``$retval`` (FETCH_OP_RETVAL): ``regs_return_value()`` = ax; return probes only."""


@dataclass(frozen=True)
class Comm:
    """``$comm`` (FETCH_OP_COMM): the task's comm, always a string."""


@dataclass(frozen=True)
class Imm:
    """``\\IMM`` or the address of ``@ADDR`` (FETCH_OP_IMM), as an unsigned long."""

    value: int


@dataclass(frozen=True)
class ImmString:
    """``\\"text"`` (FETCH_OP_DATA): an immediate string."""

    text: str


@dataclass(frozen=True)
class FileOffset:
    """``@+OFFSET`` before its dereference (FETCH_OP_FOFFS): ``translate_user_vaddr()``."""

    offset: int


@dataclass(frozen=True)
class Deref:
    """``+OFFS(inner)``, ``@ADDR``, ``@+OFFSET``: memory at ``value(inner) + offset``."""

    offset: int
    inner: "FetchNode"


FetchNode = Union[Reg, Stack, StackPointer, Retval, Comm, Imm, ImmString, FileOffset, Deref]


class _Fault(Exception):
    """Internal: a user-memory read failed (copy_from_user returned non-zero)."""


class FetchContext(Protocol):
    """What a probe hit offers the fetch code: the trapped task's registers and memory."""

    comm: str

    def reg(self, name: str) -> int:
        """rax rbx rcx rdx rsi rdi rbp rsp r8..r15 rip eflags cs ss orig_rax fs_base gs_base."""

    def read(self, addr: int, n: int) -> bytes:
        """Read user memory; raise any Exception on a fault."""

    def read_cstring(self, addr: int, limit: int) -> bytes:
        """Read a NUL-terminated string (NUL excluded, at most ``limit`` bytes); raise on fault."""

    def file_offset_to_vaddr(self, offset: int) -> int:
        """``@+OFFSET``'s address: ``translate_user_vaddr()``, i.e. ``bp_addr - tu->offset +
        OFFSET`` -- relative to the probe's own mapping, whatever segment OFFSET is in."""


def _read_word(ctx: FetchContext, addr: int) -> int:
    try:
        data = ctx.read(addr & _U64, 8)
    except Exception as exc:
        raise _Fault(addr) from exc
    return int.from_bytes(data[:8], "little")


def _value(node: FetchNode, ctx: FetchContext) -> int:
    """Stages 1 and 2 of ``process_fetch_insn()``: the unsigned-long value of ``node``."""
    if isinstance(node, Reg):
        return ctx.reg(node.name) & _U64
    if isinstance(node, Deref):
        return _read_word(ctx, _value(node.inner, ctx) + node.offset)
    if isinstance(node, Imm):
        return node.value & _U64
    if isinstance(node, Stack):
        # get_user_stack_nth(): copy_from_user failure yields 0, not a fault.
        try:
            return _read_word(ctx, ctx.reg("rsp") + 8 * node.n)
        except _Fault:
            return 0
    if isinstance(node, StackPointer):
        return ctx.reg("rsp") & _U64
    if isinstance(node, Retval):
        return ctx.reg("rax") & _U64
    if isinstance(node, FileOffset):
        return ctx.file_offset_to_vaddr(node.offset) & _U64
    raise TypeError(f"{node!r} has no numeric value")  # Comm / ImmString: parser forbids


# --- one fetch argument ---------------------------------------------------------------------


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="backslashreplace")


@dataclass(frozen=True)
class FetchArg:
    """One parsed fetch argument: a ``struct probe_arg`` (trace_probe.h).

    ``type`` is the fetch type's name (``u8``..``u64``, ``s8``..``s64``, ``x8``..``x64``,
    ``char``, ``string``, ``ustring``); a bitfield ``b<W>@<O>/<C>`` has type ``u<C>`` and
    ``bitfield == (W, O)``, as ``find_fetch_type()`` maps it.  ``count`` is the array
    length of ``TYPE[N]`` (0 for a scalar).  ``source`` is the text after ``NAME=``,
    type suffix included: the kernel's ``probe_arg->comm``, printed by the listing.
    """

    name: str
    source: str
    type: str
    node: FetchNode
    count: int = 0
    bitfield: tuple[int, int] | None = None

    @property
    def is_string(self) -> bool:
        return self.type in STRING_TYPES

    @property
    def size(self) -> int:
        """Bytes one element occupies in the record (``fetch_type->size``)."""
        return 4 if self.is_string else BASIC_TYPES[self.type][0]

    # fetch ------------------------------------------------------------------------------
    def fetch(self, ctx: FetchContext) -> int | str | list | None:
        """Fetch the argument at a probe hit: ``process_fetch_insn()`` + ``_bottom()``.

        Returns an ``int`` (already truncated to the type's width; negative for ``sN``),
        a ``str`` for string types, a list of those for arrays, or ``None`` where user
        memory faulted.  ``$stackN`` never faults (``get_user_stack_nth()`` reads 0).
        """
        if self.count:
            return self._fetch_array(ctx)
        if self.is_string:
            return self._fetch_string(ctx)
        try:
            if isinstance(self.node, Deref):
                # FETCH_OP_ST_MEM: read exactly `size` bytes at the final address.
                raw = self._read_elem(ctx, _value(self.node.inner, ctx) + self.node.offset)
            else:
                raw = _value(self.node, ctx)  # FETCH_OP_ST_RAW: truncating store
        except _Fault:
            return None
        return self._typed(raw)

    def _read_elem(self, ctx: FetchContext, addr: int) -> int:
        try:
            data = ctx.read(addr & _U64, self.size)
        except Exception as exc:
            raise _Fault(addr) from exc
        return int.from_bytes(data[: self.size], "little")

    def _typed(self, raw: int) -> int:
        """Store as the type's width (``fetch_store_raw``), apply the bitfield, sign."""
        size, signed = BASIC_TYPES[self.type]
        bits = 8 * size
        v = raw & ((1 << bits) - 1)
        if self.bitfield is not None:  # fetch_apply_bitfield()
            width, offset = self.bitfield
            lshift, rshift = bits - (width + offset), bits - width
            v = ((v << lshift) & ((1 << bits) - 1)) >> rshift
        if signed and v >> (bits - 1):
            v -= 1 << bits
        return v

    def _fetch_string(self, ctx: FetchContext) -> str | None:
        """``fetch_store_string()``: the string, or None when it cannot be stored."""
        node = self.node
        if isinstance(node, Comm):
            return ctx.comm[: TASK_COMM_LEN - 1]
        if isinstance(node, ImmString):
            return node.text
        try:
            if isinstance(node, Deref):
                addr = _value(node.inner, ctx) + node.offset
            else:  # Imm: the immediate is the address
                addr = _value(node, ctx)
        except _Fault:
            return None
        return self._read_string(ctx, addr)

    @staticmethod
    def _read_string(ctx: FetchContext, addr: int) -> str | None:
        try:
            raw = ctx.read_cstring(addr & _U64, MAX_STRING_SIZE)
        except Exception:
            return None
        # fetch_store_strlen(): strnlen_user() > MAX_STRING_SIZE stores nothing -> (fault)
        if len(raw) >= MAX_STRING_SIZE:
            return None
        return _decode(raw)

    def _fetch_array(self, ctx: FetchContext) -> list:
        """FETCH_OP_LP_ARRAY: elements side by side at the memory argument's address."""
        node = self.node
        assert isinstance(node, Deref)  # the parser only allows memory arrays
        try:
            base = _value(node.inner, ctx) + node.offset
        except _Fault:
            return [None] * self.count
        out: list = []
        for i in range(self.count):
            if self.is_string:  # an array of char * at base
                try:
                    out.append(self._read_string(ctx, _read_word(ctx, base + 8 * i)))
                except _Fault:
                    out.append(None)
            else:
                try:
                    out.append(self._typed(self._read_elem(ctx, base + self.size * i)))
                except _Fault:
                    out.append(None)
        return out

    # format -----------------------------------------------------------------------------
    def format(self, value) -> str:
        """Print a fetched value as ``print_probe_args()`` / ``print_type_*()`` do.

        ``uN`` ``%u``, ``sN`` ``%d``, ``xN`` ``0x%x``, ``char`` ``'%c'``, strings
        ``"..."`` or ``(fault)``; arrays ``{a,b,...}``.  Any int is accepted and cut to
        the type's width first.  A faulted numeric value (None) prints as 0: the kernel's
        copy_from_user() zero-fills what it could not copy.
        """
        if self.count:
            values = list(value) if value is not None else [None] * self.count
            return "{" + ",".join(self._format_one(v) for v in values) + "}"
        return self._format_one(value)

    def _format_one(self, value) -> str:
        if self.is_string:
            if value is None:
                return "(fault)"
            if isinstance(value, (bytes, bytearray)):
                value = _decode(bytes(value))
            return f'"{value}"'
        size, signed = BASIC_TYPES[self.type]
        bits = 8 * size
        v = 0 if value is None else int(value) & ((1 << bits) - 1)
        if self.type == "char":
            return "'" + _decode(bytes([v])) + "'"
        if self.type.startswith("x"):
            return f"0x{v:x}"
        if signed and v >> (bits - 1):
            v -= 1 << bits
        return str(v)
