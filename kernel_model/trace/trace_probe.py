"""Probe specs: the tracefs ``uprobe_events`` language, its fetch arguments, and its output.

This module models the text side of the kernel's uprobe trace events:

* parsing a probe definition, as ``__trace_uprobe_create()`` (kernel/trace/trace_uprobe.c)
  and the generic argument parser ``traceprobe_parse_probe_arg()``
  (kernel/trace/trace_probe.c) do (the tools' spellings - perf's ``PATH:SYMBOL[+OFF]``,
  bpftrace's ``uprobe:PATH:FUNC`` - are :mod:`emu.probes.probe_spec`'s);
* fetching and printing the arguments at a probe hit (:mod:`.trace_probe_tmpl`), as ``process_fetch_insn()``
(trace_uprobe.c), ``process_fetch_insn_bottom()``
  (trace_probe_tmpl.h) and the ``print_type_*`` functions (trace_probe.c) do;
* the three text formats userspace reads back: the ``uprobe_events`` listing
  (``trace_uprobe_show()``), a ``trace`` line (``trace_print_context()`` in
  kernel/trace/trace_output.c + ``print_uprobe_event()``), and the ``uprobe_profile`` line
  (``probes_profile_seq_show()``).

Errors are :class:`~kernel_model.errors.ProbeSpecError` with the kernel's message (its
``trace_probe_err_text``), made a little more specific, and the 0-based column where the
kernel's error log would put its caret.

Deliberate differences from the kernel, all on inputs the kernel accepts by accident or
cannot see:

* PATH need not contain ``/`` (our built-in guests are ``guest:NAME``); the kernel
  returns -EINVAL.
* ``pfoo PATH:OFF`` (junk right after ``p``/``r``), text after the closing ``)`` of a
  dereference, and dereference offsets that do not fit the kernel's ``int`` are errors
  here; the kernel ignores or truncates them.
* A delete request (``-:[GRP/]EVENT``) takes no further words here; the kernel would use
  them to match the definition text.
* Arrays (``TYPE[N]``) are accepted on memory arguments only (``+OFF(...)``, ``@ADDR``,
  ``@+OFF``); the kernel also accepts a string array on an immediate, with odd results.
* A default event name replaces characters other than letters and digits with ``_``
  (``guest:hello`` -> ``p_guest_hello_0x10``); kernel paths never produce them.
* A numeric argument whose memory faulted prints as 0.  For the final read that is the
  kernel's behaviour (copy_from_user() zero-fills); for a fault in an inner dereference
  the kernel leaves stale bytes of its per-cpu buffer, which nothing can model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from kernel_model.errors import ProbeSpecError
from kernel_model.trace.trace_probe_tmpl import (
    BASIC_TYPES,
    STRING_TYPES,
    TASK_COMM_LEN,
    Comm,
    Deref,
    FetchArg,
    FetchNode,
    FileOffset,
    Imm,
    ImmString,
    Reg,
    Retval,
    Stack,
    StackPointer,
)

__all__ = [
    "ProbeSpec",
    "TraceProbeParser",
    "parse_probe_spec",
    "parse_fetch_arg",
    "default_event_name",
    "kstrtoul",
    "isdigit",
    "is_good_name",
    "is_good_system_name",
    "format_listing",
    "format_trace_line",
    "format_profile_line",
    "MAX_TRACE_ARGS",
    "MAX_EVENT_NAME_LEN",
    "MAX_ARG_NAME_LEN",
    "MAX_ARGSTR_LEN",
    "MAX_ARRAY_LEN",
    "DEFAULT_GROUP",
]

# --- kernel limits (kernel/trace/trace_probe.h, include/linux/trace_events.h) -----------
MAX_TRACE_ARGS = 128
MAX_ARGSTR_LEN = 63
MAX_ARRAY_LEN = 64
MAX_ARG_NAME_LEN = 32
MAX_EVENT_NAME_LEN = 64
FETCH_INSN_MAX = 16  # fetch + deref*N + store + end
DEFAULT_GROUP = "uprobes"  # UPROBE_EVENT_SYSTEM
DEFAULT_FETCH_TYPE = "x64"  # x##BITS_PER_LONG

_U64 = (1 << 64) - 1

# regoffset_table in arch/x86/kernel/ptrace.c (CONFIG_X86_64) -> our register names.
REGISTER_NAMES = MappingProxyType(
    {
        "r15": "r15",
        "r14": "r14",
        "r13": "r13",
        "r12": "r12",
        "r11": "r11",
        "r10": "r10",
        "r9": "r9",
        "r8": "r8",
        "bx": "rbx",
        "cx": "rcx",
        "dx": "rdx",
        "si": "rsi",
        "di": "rdi",
        "bp": "rbp",
        "ax": "rax",
        "orig_ax": "orig_rax",
        "ip": "rip",
        "cs": "cs",
        "flags": "eflags",
        "sp": "rsp",
        "ss": "ss",
    }
)

# reserved_field_names[] in trace_probe.c
_RESERVED_FIELD_NAMES = frozenset(
    {
        "common_type",
        "common_flags",
        "common_preempt_count",
        "common_pid",
        "common_tgid",
        "__probe_ip",
        "__probe_ret_ip",
        "__probe_func",
    }
)


# --- numbers the kernel's way (lib/kstrtox.c) --------------------------------------------


def _kstrtoull_nosign(s: str, base: int) -> int | None:
    """``_kstrtoull()``: digits only, base 0 auto-detects ``0x`` / leading ``0`` (octal)."""
    if base == 0:
        if s[:1] == "0":
            if s[1:2] in ("x", "X") and s[2:3] and s[2] in "0123456789abcdefABCDEF":
                base, s = 16, s[2:]
            else:
                base = 8
        else:
            base = 10
    elif base == 16 and s[:2] in ("0x", "0X"):
        s = s[2:]
    if not s:
        return None
    value = 0
    for ch in s:
        d = int(ch, 36) if ch.isascii() and ch.isalnum() else 99
        if d >= base:
            return None
        value = value * base + d
    return value if value <= _U64 else None


def kstrtoul(s: str, base: int = 0) -> int | None:
    """``kstrtoul()``: an optional ``+`` then an unsigned number; None if invalid."""
    if s[:1] == "+":
        s = s[1:]
    return _kstrtoull_nosign(s, base)


def _kstrtol(s: str, base: int = 0) -> int | None:
    """``kstrtol()``: a signed 64-bit number (``-`` or ``+`` prefix); None if invalid."""
    if s[:1] == "-":
        v = _kstrtoull_nosign(s[1:], base)
        return -v if v is not None and v <= 1 << 63 else None
    v = kstrtoul(s, base)
    return v if v is not None and v < 1 << 63 else None


def _simple_strtoul(s: str, i: int) -> tuple[int, int]:
    """``simple_strtoul(s + i, &end, 0)``: parse as many digits as fit; returns (value, end)."""
    base, j = 10, i
    if s[j : j + 1] == "0":
        if s[j + 1 : j + 2] in ("x", "X") and s[j + 2 : j + 3] and s[j + 2] in "0123456789abcdefABCDEF":
            base, j = 16, j + 2
        else:
            base = 8
    value = 0
    while j < len(s) and s[j].isascii() and s[j].isalnum() and int(s[j], 36) < base:
        value = value * base + int(s[j], 36)
        j += 1
    return value, j


def isdigit(c: str) -> bool:
    """``isdigit()`` of the C locale: ASCII digits only ('' is not a digit)."""
    return len(c) == 1 and c in "0123456789"


def is_good_name(name: str) -> bool:
    """``is_good_name()`` (kernel/trace/trace.h): a C identifier (ASCII)."""
    return bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name))


def is_good_system_name(name: str) -> bool:
    """``is_good_system_name()``: like a C identifier but ``-`` is allowed too."""
    return bool(re.fullmatch(r"[A-Za-z_\-][A-Za-z0-9_\-]*", name))


# --- fetch argument parser (trace_probe.c) --------------------------------------------------


class _ArgParser:
    """``traceprobe_parse_probe_arg()`` for one argument; ``pos`` = its column in ``spec``."""

    def __init__(self, spec: str, is_return: bool):
        self.spec = spec
        self.is_return = is_return

    def error(self, message: str, pos: int) -> ProbeSpecError:
        return ProbeSpecError(message, self.spec, pos)

    def parse(self, text: str, index: int, pos: int, used: frozenset[str] | set[str]) -> FetchArg:
        eq = text.find("=")
        if eq >= 0:
            name = text[:eq]
            if eq > MAX_ARG_NAME_LEN:
                raise self.error(f"Argument name is too long ({eq} > {MAX_ARG_NAME_LEN} characters): {name!r}", pos)
            if eq == 0:
                raise self.error("Argument name is not specified before '='", pos)
            body, body_pos = text[eq + 1 :], pos + eq + 1
        else:
            name, body, body_pos = f"arg{index}", text, pos
        if not is_good_name(name):
            raise self.error(f"Argument name {name!r} must follow the same rules as C identifiers", pos)
        if name in _RESERVED_FIELD_NAMES:
            raise self.error(f"Argument name {name!r} is reserved", pos)
        if name in used:
            raise self.error(f"This argument name is already used: {name!r}", pos)
        if len(body) > MAX_ARGSTR_LEN:
            raise self.error(f"Argument expression is too long ({len(body)} > {MAX_ARGSTR_LEN} characters)", body_pos)
        if not body:
            raise self.error("No argument expression", body_pos)
        return self._parse_body(name, body, body_pos)

    def _parse_body(self, name: str, body: str, pos: int) -> FetchArg:
        """``traceprobe_parse_probe_arg_body()``: split ``:TYPE[N]``, parse, check store."""
        colon = body.find(":")
        expr, tname, tpos = body, None, pos  # tpos: the type's column (the body's without one)
        if colon >= 0:
            expr, tname, tpos = body[:colon], body[colon + 1 :], pos + colon + 1
        count = 0
        if tname is not None and "[" in tname:
            lb = tname.index("[")
            rb = tname.find("]", lb)
            if rb < 0:
                raise self.error("Array is not closed: missing ']'", tpos + len(tname))
            if rb != len(tname) - 1:
                raise self.error("Array has wrong suffix after ']'", tpos + rb + 1)
            n = kstrtoul(tname[lb + 1 : rb], 0)
            if not n or n > 0xFFFFFFFF:
                raise self.error(f"Invalid array size {tname[lb + 1 : rb]!r}", tpos + lb + 1)
            if n > MAX_ARRAY_LEN:
                raise self.error(f"Array number is too big ({n} > {MAX_ARRAY_LEN})", tpos + lb + 1)
            count, tname = n, tname[:lb]

        bitfield = None
        if expr in ("$comm", "$COMM") or expr.startswith('\\"'):
            if count or (tname is not None and tname != "string"):
                what = "$comm" if expr.startswith("$") else "An immediate string"
                raise self.error(f"{what} can only be fetched as a plain 'string'", tpos)
            ftype = "string"
        else:
            ftype = DEFAULT_FETCH_TYPE if tname is None else tname
            if ftype.startswith("b"):
                ftype, bitfield = self._parse_bitfield(ftype, tpos)
            elif ftype not in BASIC_TYPES and ftype not in STRING_TYPES:
                why = " (symbol/symstr are not available with uprobes)" if ftype in ("symbol", "symstr") else ""
                raise self.error(f"Unknown type {ftype!r} is specified{why}", tpos)

        node = self._parse_node(expr, pos, depth=1)
        if ftype in STRING_TYPES and not isinstance(node, (Deref, Imm, Comm, ImmString)):
            raise self.error(f"String accepts only memory argument: use +0({expr}):{ftype}", tpos)
        if count and not isinstance(node, Deref):
            raise self.error("An array type needs a memory argument (+OFFS(...), @ADDR or @+OFFSET)", tpos)
        return FetchArg(name=name, source=body, type=ftype, node=node, count=count, bitfield=bitfield)

    def _parse_bitfield(self, t: str, tpos: int) -> tuple[str, tuple[int, int]]:
        """``find_fetch_type()``'s bitfield case + ``__parse_bitfield_probe_arg()``."""
        slash = t.find("/")
        container = kstrtoul(t[slash + 1 :], 0) if slash >= 0 else None
        if container not in (8, 16, 32, 64):
            raise self.error(f"Unknown type {t!r} is specified (a bitfield is b<width>@<offset>/<8|16|32|64>)", tpos)
        width, end = _simple_strtoul(t, 1)
        if width == 0 or t[end : end + 1] != "@":
            raise self.error(f"Invalid bitfield {t!r}: expected b<width>@<offset>/<size> with a non-zero width", tpos)
        offset, end2 = _simple_strtoul(t, end + 1)
        if end2 == end + 1 or t[end2 : end2 + 1] != "/":
            raise self.error(f"Invalid bitfield {t!r}: missing bit offset", tpos)
        if width + offset > container:
            raise self.error(f"Invalid bitfield {t!r}: width + offset exceeds the {container}-bit container", tpos)
        return f"u{container}", (width, offset)

    def _parse_node(self, s: str, pos: int, depth: int) -> FetchNode:
        """``parse_probe_arg()``: the recursive fetcharg grammar."""
        head = s[:1]
        if head == "$":
            return self._parse_var(s[1:], pos)
        if head == "%":
            reg = REGISTER_NAMES.get(s[1:])
            if reg is None:
                raise self.error(
                    f"Invalid register name {s!r} (x86_64 names: " + " ".join("%" + k for k in REGISTER_NAMES) + ")",
                    pos,
                )
            return Reg(reg)
        if head == "@":
            return self._parse_mem(s, pos, depth)
        if head in ("+", "-"):
            return self._parse_deref(s, pos, depth)
        if head == "\\":
            if s[1:2] == '"':
                rest = s[2:]
                if not rest or rest[-1] != '"':
                    raise self.error("String is not closed with '\"'", pos + len(s))
                return ImmString(rest[:-1])
            v = self._str_to_immediate(s[1:])
            if v is None:
                raise self.error(f"Invalid immediate value {s[1:]!r}", pos + 1)
            return Imm(v & _U64)
        raise self.error(
            f"Invalid fetch argument {s!r} (expected %REG, @ADDR, @+OFFSET, "
            "$stackN, $stack, $retval, $comm, \\IMM or +|-OFFS(FETCHARG))",
            pos,
        )

    @staticmethod
    def _str_to_immediate(s: str) -> int | None:
        """``str_to_immediate()``."""
        if isdigit(s[:1]):
            return kstrtoul(s, 0)
        if s[:1] == "-":
            return _kstrtol(s, 0)
        if s[:1] == "+":
            return _kstrtol(s[1:], 0)
        return None

    def _parse_var(self, var: str, pos: int) -> FetchNode:
        """``parse_probe_vars()``."""
        if var == "retval":
            if not self.is_return:
                raise self.error("$retval is not available on probe: it needs a return probe (r: or %return)", pos)
            return Retval()
        if var.startswith("stack"):
            rest = var[5:]
            if not rest:
                return StackPointer()
            if isdigit(rest[0]):
                n = kstrtoul(rest, 10)
                if n is not None:
                    return Stack(n)
        elif var in ("comm", "COMM"):
            return Comm()
        raise self.error(f"Invalid $-variable '${var}' (expected $stackN, $stack, $retval or $comm)", pos)

    def _parse_mem(self, s: str, pos: int, depth: int) -> FetchNode:
        """``@ADDR`` and ``@+OFFSET`` (``@SYMBOL`` is kprobe-only)."""
        self._check_depth(depth, pos)
        if isdigit(s[1:2]):
            addr = kstrtoul(s[1:], 0)
            if addr is None:
                raise self.error(f"Invalid memory address {s[1:]!r}", pos)
            return Deref(0, Imm(addr))
        if s[1:2] == "+":
            off = _kstrtol(s[2:], 0)
            if off is None:
                raise self.error(f"Invalid file offset value {s[2:]!r}", pos)
            return Deref(0, FileOffset(off))
        raise self.error(f"Symbol is not available with uprobe: {s!r} (use @ADDR or @+OFFSET)", pos)

    def _parse_deref(self, s: str, pos: int, depth: int) -> FetchNode:
        """``+|-[u]OFFS(FETCHARG)``; the ``u`` changes nothing for uprobes."""
        sign, rest, rest_pos = s[0], s[1:], pos + 1
        if rest[:1] == "u":
            rest, rest_pos = rest[1:], rest_pos + 1
        lp = rest.find("(")
        if lp < 0:
            raise self.error(f"Dereference needs a brace: {s!r} (write +OFFS(FETCHARG))", pos)
        num = rest[:lp] if sign == "+" else "-" + rest[:lp]
        offset = _kstrtol(num, 0)
        if offset is None:
            raise self.error(f"Invalid dereference offset {rest[:lp]!r}", pos)
        if not -(1 << 31) <= offset < 1 << 31:
            raise self.error(f"Dereference offset {offset} does not fit in 32 bits", pos)
        inner_pos = rest_pos + lp + 1
        rp = rest.rfind(")")
        if rp < lp:
            raise self.error("Dereference brace is not closed", pos + len(s))
        if rp != len(rest) - 1:
            raise self.error(f"Unexpected text {rest[rp + 1 :]!r} after the dereference", rest_pos + rp + 1)
        self._check_depth(depth, pos)
        inner = self._parse_node(rest[lp + 1 : rp], inner_pos, depth + 1)
        if isinstance(inner, (Comm, ImmString)):
            raise self.error("$comm can not be dereferenced (nor can an immediate string)", inner_pos)
        return Deref(offset, inner)

    def _check_depth(self, depth: int, pos: int) -> None:
        # fetch_insn[FETCH_INSN_MAX]: the last slot is the END sentinel; one slot for the
        # stage-1 fetch, one per dereference.
        if depth > FETCH_INSN_MAX - 2:
            raise self.error(f"Dereference is too much nested (at most {FETCH_INSN_MAX - 2} levels)", pos)


def parse_fetch_arg(
    text: str,
    index: int = 1,
    *,
    is_return: bool = False,
    used_names: frozenset[str] | set[str] = frozenset(),
    spec: str | None = None,
    position: int = 0,
) -> FetchArg:
    """Parse one ``[NAME=]FETCHARG[:TYPE]`` word: ``traceprobe_parse_probe_arg()``.

    ``index`` is 1-based (the default name is ``arg<index>``); ``used_names`` are the
    names of the earlier arguments; ``spec``/``position`` locate errors in a larger text.
    """
    return _ArgParser(text if spec is None else spec, is_return).parse(text, index, position, used_names)


# --- probe spec ------------------------------------------------------------------------------


@dataclass
class ProbeSpec:
    """A parsed probe definition (``struct trace_uprobe`` before registration).

    ``kind`` is ``"p"`` (uprobe), ``"r"`` (uretprobe; also ``p ...%return``) or ``"-"``
    (delete).  ``group`` is ``None`` only for a delete request that names no group: the
    kernel then deletes the event from every group (``dyn_event_release()`` passes
    ``system = NULL``).  The tracefs form fills in :func:`default_event_name` at parse
    time.  The tools' spellings of a location (a symbol, a bpftrace address) extend this
    in :mod:`emu.probes.probe_spec`.
    """

    kind: str
    group: str | None
    event: str | None
    path: str
    offset: int | None = None
    ref_ctr_offset: int | None = None
    args: list[FetchArg] = field(default_factory=list)
    text: str = ""

    @property
    def is_return(self) -> bool:
        return self.kind == "r"

    @property
    def is_delete(self) -> bool:
        return self.kind == "-"


def default_event_name(kind: str, path: str, offset: int) -> str:
    """The event name ``__trace_uprobe_create()`` makes when none is given.

    ``p_<tail>_0x<offset>``, where ``tail`` is the basename of ``path`` cut at its first
    ``.``, ``-`` or ``_``, and the whole name is cut to MAX_EVENT_NAME_LEN - 1 characters
    (``snprintf`` into a 64-byte buffer).  The prefix is ``p_`` for return probes too:
    the kernel hard-codes ``'p'``.  Our extension: any other character that is not a
    letter or digit (``:`` in ``guest:NAME``) becomes ``_`` so the name stays a valid
    event name; the kernel requires a ``/`` path and never sees such names.
    """
    if kind not in ("p", "r"):
        raise ValueError(f"kind must be 'p' or 'r', not {kind!r}")
    tail = path.rsplit("/", 1)[-1]
    cut = re.search(r"[.\-_]", tail)
    if cut:
        tail = tail[: cut.start()]
    tail = re.sub(r"[^A-Za-z0-9]", "_", tail)
    return f"p_{tail}_0x{offset & _U64:x}"[: MAX_EVENT_NAME_LEN - 1]


class TraceProbeParser:
    """``__trace_uprobe_create()`` / ``dyn_event_release()``: what a write to
    ``uprobe_events`` may say.  The class attributes are where the tools' parser
    (:mod:`emu.probes.probe_spec`) extends it with symbols and bpftrace names."""

    spec_class = ProbeSpec
    probe_types = "p[:[GRP/][EVENT]], r[:[GRP/][EVENT]] or -:[GRP/]EVENT"
    location_forms = "PATH:OFFSET"
    where_forms = "an OFFSET (starting with a digit)"

    def __init__(self, text: str):
        self.text = text
        # argv_split(): words separated by white space, with their columns.
        self.words = [(m.group(), m.start()) for m in re.finditer(r"\S+", text)]

    def error(self, message: str, pos: int | None) -> ProbeSpecError:
        return ProbeSpecError(message, self.text, pos)

    def parse(self) -> ProbeSpec:
        if not self.words:
            raise self.error("Empty probe spec", None)
        head, hpos = self.words[0]
        if head[0] == "-":
            return self._parse_delete(head, hpos)
        if head[0] in "pr":
            return self._parse_probe(head, hpos)
        raise self.error(f"Unknown probe type {head!r}: expected {self.probe_types}", hpos)

    # p: / r: -----------------------------------------------------------------------------
    def _parse_probe(self, head: str, hpos: int) -> ProbeSpec:
        kind = head[0]
        group: str | None = DEFAULT_GROUP
        event: str | None = None
        if len(head) > 1:
            if head[1] != ":":
                raise self.error(f"Unexpected {head[1:]!r} after {kind!r}: write {kind}:[GRP/]EVENT", hpos + 1)
            group, event = self._parse_event_name(head[2:], hpos + 2, allow_default=True)
        if len(self.words) < 2:
            raise self.error(f"Missing probe location: expected {self.location_forms}", hpos + len(head))
        loc, lpos = self.words[1]
        if len(self.words) - 2 > MAX_TRACE_ARGS:
            raise self.error(
                f"Too many arguments ({len(self.words) - 2} > {MAX_TRACE_ARGS})", self.words[2 + MAX_TRACE_ARGS][1]
            )

        cut = loc.rfind(":")  # the LAST ':' splits, in case PATH contains ':' too
        if cut < 0:
            path, where, wpos = "", loc, lpos
            self._check_pathless(loc, lpos)
        else:
            path, where, wpos = loc[:cut], loc[cut + 1 :], lpos + cut + 1
            if not path:
                raise self.error("Empty PATH before ':'", lpos)

        ref, where = self._split_ref(where, wpos)
        where, is_return = self._split_return(where, wpos)
        if is_return:
            kind = "r"

        spec = self.spec_class(kind=kind, group=group, event=event, path=path, ref_ctr_offset=ref, text=self.text)
        self._parse_where(spec, where, wpos)

        used: set[str] = set()
        parser = _ArgParser(self.text, spec.is_return)
        for i, (word, pos) in enumerate(self.words[2:], start=1):
            arg = parser.parse(word, i, pos, used)
            used.add(arg.name)
            spec.args.append(arg)
        return spec

    def _check_pathless(self, loc: str, lpos: int) -> None:
        """A location with no ``PATH:`` (the kernel's -EINVAL)."""
        raise self.error(f"Missing ':OFFSET' in {loc!r}: expected PATH:OFFSET", lpos)

    def _parse_where(self, spec: ProbeSpec, where: str, wpos: int) -> None:
        """What follows the last ``:``: the file OFFSET (``kstrtoul``)."""
        if not isdigit(where[:1]):
            raise self.error(f"Invalid probe location {where!r}: after the last ':' expected {self.where_forms}", wpos)
        offset = kstrtoul(where, 0)
        if offset is None:
            raise self.error(f"Invalid uprobe offset {where!r} (a file offset: decimal, 0x hex or 0 octal)", wpos)
        spec.offset = offset
        if spec.event is None:
            spec.event = default_event_name(spec.kind, spec.path, offset)

    def _split_ref(self, where: str, wpos: int) -> tuple[int | None, str]:
        """``(REF_CTR_OFFSET)``: must be the last thing in the word."""
        lp = where.find("(")
        if lp < 0:
            return None, where
        rp = where.find(")", lp)
        if rp < 0:
            raise self.error("Reference counter brace is not closed", wpos + len(where))
        if rp != len(where) - 1:
            raise self.error(
                f"Reference counter has wrong suffix {where[rp + 1 :]!r} (the (REF) must come last)", wpos + rp + 1
            )
        ref = kstrtoul(where[lp + 1 : rp], 0)
        if ref is None:
            raise self.error(f"Invalid reference counter offset {where[lp + 1 : rp]!r}", wpos + lp + 1)
        return (ref or None), where[:lp]  # 0 means "no reference counter"

    def _split_return(self, where: str, wpos: int) -> tuple[str, bool]:
        pct = where.find("%")
        if pct < 0:
            return where, False
        if where[pct:] != "%return":
            raise self.error(f"Invalid probed address suffix {where[pct:]!r} (only %return)", wpos + pct)
        return where[:pct], True

    def _parse_event_name(self, ev: str, pos: int, *, allow_default: bool) -> tuple[str | None, str | None]:
        """``traceprobe_parse_event_name()``: ``[GRP/]EVENT`` (or ``GRP.EVENT``).

        With ``allow_default=False`` this is the delete request's split in
        ``dyn_event_release()``: only ``/`` separates, the event is required, and no
        group means every group (None).
        """
        group: str | None = DEFAULT_GROUP if allow_default else None
        slash = ev.find("/")
        if slash < 0 and allow_default:
            slash = ev.find(".")
        if slash >= 0:
            if slash == 0:
                raise self.error("Group name is not specified", pos)
            if slash + 1 > MAX_EVENT_NAME_LEN:
                raise self.error(f"Group name is too long ({slash} > {MAX_EVENT_NAME_LEN - 1} characters)", pos)
            group = ev[:slash]
            if not is_good_system_name(group):
                raise self.error(f"Group name {group!r} must follow the same rules as C identifiers", pos)
            ev, pos = ev[slash + 1 :], pos + slash + 1
        if not ev:
            if slash >= 0 and allow_default:
                return group, None
            raise self.error("Event name is not specified", pos)
        if len(ev) > MAX_EVENT_NAME_LEN:
            raise self.error(f"Event name is too long ({len(ev)} > {MAX_EVENT_NAME_LEN} characters)", pos)
        if not is_good_name(ev):
            raise self.error(f"Event name {ev!r} must follow the same rules as C identifiers", pos)
        return group, ev

    # -: ----------------------------------------------------------------------------------
    def _parse_delete(self, head: str, hpos: int) -> ProbeSpec:
        if head[1:2] != ":":
            raise self.error("A delete request is written -:[GRP/]EVENT", hpos + 1)
        if len(self.words) > 1:
            raise self.error("A delete request takes nothing after -:[GRP/]EVENT", self.words[1][1])
        group, event = self._parse_event_name(head[2:], hpos + 2, allow_default=False)
        return self.spec_class(kind="-", group=group, event=event, path="", text=self.text)


def parse_probe_spec(text: str) -> ProbeSpec:
    """Parse one ``uprobe_events`` line; raise :class:`ProbeSpecError` with message and column.

    Accepted forms::

        p[:[GRP/][EVENT]] PATH:OFFSET[%return][(REF)] [FETCHARGS]
        r[:[GRP/][EVENT]] PATH:OFFSET[(REF)] [FETCHARGS]
        -:[GRP/]EVENT                                               delete

    (symbols and bpftrace names: :func:`emu.probes.probe_spec.parse_probe_spec`).
    """
    return TraceProbeParser(text).parse()


# --- output formats ---------------------------------------------------------------------------


def format_listing(spec: ProbeSpec, offset: int | None = None) -> str:
    """One line of ``cat uprobe_events``: ``trace_uprobe_show()`` (no trailing newline).

    ``offset`` is the resolved file offset (defaults to ``spec.offset``); the event name
    defaults to :func:`default_event_name` of it.
    """
    if spec.kind not in ("p", "r"):
        raise ValueError("only probe definitions have a listing line")
    if offset is None:
        offset = spec.offset
    if offset is None:
        raise ValueError(f"no file offset known for {spec.text!r}")
    event = spec.event or default_event_name(spec.kind, spec.path, offset)
    line = f"{spec.kind}:{spec.group or DEFAULT_GROUP}/{event} {spec.path}:0x{offset & _U64:016x}"
    if spec.ref_ctr_offset:
        line += f"(0x{spec.ref_ctr_offset:x})"
    return line + "".join(f" {a.name}={a.source}" for a in spec.args)


def format_trace_line(
    *,
    comm: str,
    pid: int,
    cpu: int,
    timestamp: float,
    event: str,
    ip: int,
    func: int | None,
    args: Sequence[tuple[FetchArg, object]],
    flags: str = "d..1.",
) -> str:
    """One line of the ``trace`` file for a uprobe event (no trailing newline).

    Prefix: ``trace_print_context()`` -- ``"%16s-%-7d [%03d] "``, the 5-character
    irq/preempt flags (``trace_print_lat_fmt``), ``" %5lu.%06lu: "`` (microseconds
    rounded as ``ns2usecs()``).  Payload: ``print_uprobe_event()`` -- ``event: (0x<ip>)``,
    or for a return probe (``func`` given) ``event: (0x<ret ip> <- 0x<func>)``, then
    `` name=value`` per argument.  ``comm`` is cut to TASK_COMM_LEN - 1 like the kernel's.
    """
    usecs = math.floor(timestamp * 1_000_000 + 0.5)
    secs, usec_rem = divmod(usecs, 1_000_000)
    head = f"{comm[: TASK_COMM_LEN - 1]:>16}-{pid:<7d} [{cpu:03d}] {flags} {secs:5d}.{usec_rem:06d}: "
    where = f"(0x{ip & _U64:x})" if func is None else f"(0x{ip & _U64:x} <- 0x{func & _U64:x})"
    return head + f"{event}: {where}" + "".join(f" {a.name}={a.format(v)}" for a, v in args)


def format_profile_line(path: str, event: str, hits: int) -> str:
    """One line of ``uprobe_profile``: ``probes_profile_seq_show()``, ``"  %s %-44s %15lu"``."""
    return f"  {path} {event:<44} {hits:>15}"
