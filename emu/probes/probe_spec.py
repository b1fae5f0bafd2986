"""Probe specs as the tools spell them: perf's ``PATH:SYMBOL[+OFF]`` and bpftrace's names.

The kernel's ``uprobe_events`` only knows ``PATH:OFFSET``
(:mod:`kernel_model.trace.trace_probe`); perf and bpftrace read the symbol table
themselves and write that form.  This module is their half: it parses the same lines
with two more spellings of a location -

* the perf-style symbol form ``p|r[:[GRP/][EVENT]] [PATH:]SYMBOL[+OFF][%return][(REF)]``
  (a location with no ``PATH:`` at all, ``r:grp/ret my_func``, is a symbol in the main
  program: ``path == ""``);
* bpftrace's probe names ``uprobe:PATH:FUNC[+OFF]``, ``uprobe:PATH:0xADDR`` (``u:``),
  ``uretprobe:PATH:FUNC`` (``ur:``);

and names events as ``perf probe`` does.  The symbol is turned into a file offset by
:mod:`emu.probes.targets`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernel_model.errors import ProbeSpecError
from kernel_model.trace.trace_probe import (
    DEFAULT_GROUP,
    MAX_EVENT_NAME_LEN,
    ProbeSpec,
    TraceProbeParser,
    is_good_name,
    is_good_system_name,
    isdigit,
    kstrtoul,
)

__all__ = [
    "UserProbeSpec",
    "ProbeSpec",
    "parse_probe_spec",
    "parse_user_spec",
    "perf_event_name",
    "is_good_name",
    "is_good_system_name",
]

_SYMBOL_RE = re.compile(r"[A-Za-z_.][A-Za-z0-9_.$@]*\Z")
_BPFTRACE_HEADS = ("uprobe", "u", "uretprobe", "ur")
_KNOWN_HEAD = re.compile(r"^(?:[pr](?::|\s|$)|-:|(?:uprobe|u|uretprobe|ur):)")


@dataclass
class UserProbeSpec(ProbeSpec):
    """A parsed probe definition in any spelling.  ``event`` is ``None`` until the file
    offset is known (symbol and bpftrace forms); ``form`` says which spelling it was:
    ``"tracefs"``, ``"symbol"`` or ``"bpftrace"``."""

    symbol: str | None = None
    sym_offset: int = 0
    address: int | None = None
    form: str = "tracefs"


def _starts_symbol(c: str) -> bool:
    """A location after the last ':' that starts like this is a SYMBOL, not an OFFSET."""
    return len(c) == 1 and (c.isascii() and c.isalpha() or c in "_.")


def perf_event_name(symbol: str, is_return: bool) -> str:
    """The event name ``perf probe -x PATH SYMBOL[%return]`` gives a probe on a symbol:
    ``get_new_event_name()`` (tools/perf/util/probe-event.c) with no existing name.

    A leading ``.`` is dropped, the name is cut at the first ``.`` or ``@`` after that
    (``.isra.0``, ``@GLIBC_2.2.5``), return probes get ``__return``, and the result must
    fit the 64-byte buffer and be a C identifier (perf's final ``is_c_func_name()``).
    So ``malloc`` and ``malloc%return`` are ``malloc`` and ``malloc__return``.
    """
    base = symbol[1:] if symbol.startswith(".") else symbol
    cut = re.search(r"[.@]", base)
    if cut and cut.start() > 0:
        base = base[: cut.start()]
    name = base + ("__return" if is_return else "")
    if len(name) >= MAX_EVENT_NAME_LEN:
        raise ProbeSpecError(
            f"the event name {name!r} is too long (>= {MAX_EVENT_NAME_LEN} bytes): name the event, p:[GRP/]EVENT"
        )
    if not is_good_name(name):
        raise ProbeSpecError(
            f"{name!r} (from symbol {symbol!r}) is an invalid event name: name the event, p:[GRP/]EVENT"
        )
    return name


class UserProbeParser(TraceProbeParser):
    """The kernel's parser plus the symbol and bpftrace forms."""

    spec_class = UserProbeSpec
    probe_types = "p[:[GRP/][EVENT]], r[:[GRP/][EVENT]], -:[GRP/]EVENT or uprobe:/uretprobe:PATH:FUNC"
    location_forms = "PATH:OFFSET or PATH:SYMBOL"
    where_forms = "an OFFSET (starting with a digit) or a SYMBOL"

    def parse(self) -> UserProbeSpec:
        if self.words:
            head, hpos = self.words[0]
            colon = head.find(":")
            if colon > 0 and head[:colon] in _BPFTRACE_HEADS:
                return self._parse_bpftrace(head, hpos, colon)
        return super().parse()  # type: ignore[return-value]  # made by spec_class: a UserProbeSpec

    def _check_pathless(self, loc: str, lpos: int) -> None:
        """A bare ``SYMBOL`` is one in the main program."""
        if not _starts_symbol(loc[:1]):
            raise self.error(
                f"Missing ':OFFSET' or ':SYMBOL' in {loc!r}: expected PATH:OFFSET, PATH:SYMBOL or SYMBOL", lpos
            )

    def _parse_where(self, spec: UserProbeSpec, where: str, wpos: int) -> None:  # type: ignore[override]  # ditto
        if not isdigit(where[:1]) and _starts_symbol(where[:1]):
            spec.form = "symbol"
            spec.symbol, spec.sym_offset = self._parse_symbol(where, wpos)
            return
        super()._parse_where(spec, where, wpos)

    def _parse_symbol(self, where: str, wpos: int, *, allow_offset: bool = True) -> tuple[str, int]:
        plus = where.find("+")
        sym = where if plus < 0 else where[:plus]
        if any(c in sym for c in "*?[]"):
            raise self.error(f"Wildcards are not supported in symbol {sym!r}", wpos)
        if not _SYMBOL_RE.match(sym):
            raise self.error(f"Invalid symbol name {sym!r}", wpos)
        if plus < 0:
            return sym, 0
        if not allow_offset:
            raise self.error(
                "uretprobe does not accept a +OFFSET: a return probe must be on a function entry", wpos + plus
            )
        off = kstrtoul(where[plus + 1 :], 0)
        if off is None:
            raise self.error(f"Invalid symbol offset {where[plus + 1 :]!r}", wpos + plus + 1)
        return sym, off

    def _parse_bpftrace(self, head: str, hpos: int, colon: int) -> UserProbeSpec:
        if len(self.words) > 1:
            raise self.error("A bpftrace probe (uprobe:PATH:FUNC) takes no fetch arguments", self.words[1][1])
        kind = "r" if head[:colon] in ("uretprobe", "ur") else "p"
        body, bpos = head[colon + 1 :], hpos + colon + 1
        cut = body.rfind(":")
        if cut < 0:
            raise self.error(
                f"Expected {head[:colon]}:PATH:FUNCTION or {head[:colon]}:PATH:0xADDRESS", bpos + len(body)
            )
        path, where, wpos = body[:cut], body[cut + 1 :], bpos + cut + 1
        if not path:
            raise self.error("Empty PATH in the bpftrace probe", bpos)
        spec = UserProbeSpec(kind=kind, group=DEFAULT_GROUP, event=None, path=path, form="bpftrace", text=self.text)
        if isdigit(where[:1]):
            addr = kstrtoul(where, 0)
            if addr is None:
                raise self.error(f"Invalid address {where!r}", wpos)
            spec.address = addr
        elif _starts_symbol(where[:1]):
            spec.symbol, spec.sym_offset = self._parse_symbol(where, wpos, allow_offset=(kind == "p"))
        elif not where:
            raise self.error("Missing FUNCTION or ADDRESS after the last ':'", wpos)
        else:
            raise self.error(
                f"Invalid probe location {where!r}: expected a FUNCTION, FUNCTION+OFFSET or 0xADDRESS", wpos
            )
        return spec


def parse_probe_spec(text: str) -> UserProbeSpec:
    """Parse one probe definition; raise :class:`ProbeSpecError` with message and column.

    Accepted forms::

        p[:[GRP/][EVENT]] PATH:OFFSET[%return][(REF)] [FETCHARGS]   tracefs
        r[:[GRP/][EVENT]] PATH:OFFSET[(REF)] [FETCHARGS]
        p|r[:[GRP/][EVENT]] [PATH:]SYMBOL[+OFF][%return][(REF)] [FETCHARGS]   symbol form
        -:[GRP/]EVENT                                               delete
        uprobe:PATH:FUNC[+OFF] | uprobe:PATH:0xADDR | u:...         bpftrace
        uretprobe:PATH:FUNC | uretprobe:PATH:0xADDR | ur:...
    """
    return UserProbeParser(text).parse()


def parse_user_spec(text: str) -> UserProbeSpec:
    """The CLI's ``-e``: tracefs/bpftrace forms as written, or a bare
    ``PATH:SYMBOL[+OFF][%return]`` location, read as ``p PATH:SYMBOL``."""
    text = text.strip()
    if _KNOWN_HEAD.match(text):
        return parse_probe_spec(text)
    return parse_probe_spec("p " + text)
