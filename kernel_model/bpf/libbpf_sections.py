"""libbpf's ``SEC()`` table (``section_defs`` in ``tools/lib/bpf/libbpf.c``): which
program type and expected attach type a section name gives a program
(:func:`find_sec_def`, ``sec_def_matches``), and what the rest of the name says about
where it attaches (:func:`parse_attach`, as ``attach_uprobe``, ``attach_uprobe_multi`` and
``attach_usdt`` parse it).  :mod:`kernel_model.bpf.object` types each program it opens
with :func:`parse_section`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_model.bpf.bpf_types import (
    BPF_PROG_TYPE_KPROBE,
    BPF_TRACE_KPROBE_MULTI,
    BPF_TRACE_KPROBE_SESSION,
    BPF_TRACE_UPROBE_MULTI,
    BPF_TRACE_UPROBE_SESSION,
)

# enum bpf_prog_type values of the SEC() definitions recognised here
BPF_PROG_TYPE_SOCKET_FILTER = 1
BPF_PROG_TYPE_SCHED_CLS = 3
BPF_PROG_TYPE_TRACEPOINT = 5
BPF_PROG_TYPE_XDP = 6
BPF_PROG_TYPE_PERF_EVENT = 7
BPF_PROG_TYPE_RAW_TRACEPOINT = 17
BPF_PROG_TYPE_TRACING = 26
BPF_PROG_TYPE_SYSCALL = 31
BPF_TRACE_RAW_TP, BPF_TRACE_FENTRY, BPF_TRACE_FEXIT = 23, 24, 25


@dataclass(frozen=True)
class SecDef:
    """One ``struct bpf_sec_def``: the section prefix (``+`` may be followed by
    ``/extras``), program type, expected attach type, sleepable, and the attach kind."""

    sec: str
    prog_type: int
    expected_attach_type: int
    kind: str
    sleepable: bool = False


# libbpf's section_defs for the probe programs and the common other kinds, in its order
SECTION_DEFS = (
    SecDef("socket", BPF_PROG_TYPE_SOCKET_FILTER, 0, "socket"),
    SecDef("kprobe+", BPF_PROG_TYPE_KPROBE, 0, "kprobe"),
    SecDef("uprobe+", BPF_PROG_TYPE_KPROBE, 0, "uprobe"),
    SecDef("uprobe.s+", BPF_PROG_TYPE_KPROBE, 0, "uprobe", True),
    SecDef("kretprobe+", BPF_PROG_TYPE_KPROBE, 0, "kprobe"),
    SecDef("uretprobe+", BPF_PROG_TYPE_KPROBE, 0, "uprobe"),
    SecDef("uretprobe.s+", BPF_PROG_TYPE_KPROBE, 0, "uprobe", True),
    SecDef("kprobe.multi+", BPF_PROG_TYPE_KPROBE, BPF_TRACE_KPROBE_MULTI, "kprobe.multi"),
    SecDef("kretprobe.multi+", BPF_PROG_TYPE_KPROBE, BPF_TRACE_KPROBE_MULTI, "kprobe.multi"),
    SecDef("kprobe.session+", BPF_PROG_TYPE_KPROBE, BPF_TRACE_KPROBE_SESSION, "kprobe.session"),
    SecDef("uprobe.multi+", BPF_PROG_TYPE_KPROBE, BPF_TRACE_UPROBE_MULTI, "uprobe.multi"),
    SecDef("uretprobe.multi+", BPF_PROG_TYPE_KPROBE, BPF_TRACE_UPROBE_MULTI, "uprobe.multi"),
    SecDef("uprobe.session+", BPF_PROG_TYPE_KPROBE, BPF_TRACE_UPROBE_SESSION, "uprobe.multi"),
    SecDef("uprobe.multi.s+", BPF_PROG_TYPE_KPROBE, BPF_TRACE_UPROBE_MULTI, "uprobe.multi", True),
    SecDef("uretprobe.multi.s+", BPF_PROG_TYPE_KPROBE, BPF_TRACE_UPROBE_MULTI, "uprobe.multi", True),
    SecDef("uprobe.session.s+", BPF_PROG_TYPE_KPROBE, BPF_TRACE_UPROBE_SESSION, "uprobe.multi", True),
    SecDef("ksyscall+", BPF_PROG_TYPE_KPROBE, 0, "ksyscall"),
    SecDef("kretsyscall+", BPF_PROG_TYPE_KPROBE, 0, "ksyscall"),
    SecDef("usdt+", BPF_PROG_TYPE_KPROBE, 0, "usdt"),
    SecDef("usdt.s+", BPF_PROG_TYPE_KPROBE, 0, "usdt", True),
    SecDef("tc", BPF_PROG_TYPE_SCHED_CLS, 0, "tc"),
    SecDef("classifier", BPF_PROG_TYPE_SCHED_CLS, 0, "tc"),
    SecDef("tracepoint+", BPF_PROG_TYPE_TRACEPOINT, 0, "tracepoint"),
    SecDef("tp+", BPF_PROG_TYPE_TRACEPOINT, 0, "tracepoint"),
    SecDef("tracepoint.s+", BPF_PROG_TYPE_TRACEPOINT, 0, "tracepoint", True),
    SecDef("tp.s+", BPF_PROG_TYPE_TRACEPOINT, 0, "tracepoint", True),
    SecDef("raw_tracepoint+", BPF_PROG_TYPE_RAW_TRACEPOINT, 0, "raw_tracepoint"),
    SecDef("raw_tp+", BPF_PROG_TYPE_RAW_TRACEPOINT, 0, "raw_tracepoint"),
    SecDef("tp_btf+", BPF_PROG_TYPE_TRACING, BPF_TRACE_RAW_TP, "tp_btf"),
    SecDef("fentry+", BPF_PROG_TYPE_TRACING, BPF_TRACE_FENTRY, "fentry"),
    SecDef("fexit+", BPF_PROG_TYPE_TRACING, BPF_TRACE_FEXIT, "fexit"),
    SecDef("fentry.s+", BPF_PROG_TYPE_TRACING, BPF_TRACE_FENTRY, "fentry", True),
    SecDef("fexit.s+", BPF_PROG_TYPE_TRACING, BPF_TRACE_FEXIT, "fexit", True),
    SecDef("syscall", BPF_PROG_TYPE_SYSCALL, 0, "syscall", True),
    SecDef("xdp", BPF_PROG_TYPE_XDP, 0, "xdp"),
    SecDef("perf_event", BPF_PROG_TYPE_PERF_EVENT, 0, "perf_event"),
)


def _sec_def_matches(sec: str, name: str) -> bool:
    """``sec_def_matches``: ``type/`` is a prefix, ``type+`` the exact name or
    ``type/...``, anything else an exact name."""
    if sec.endswith("/"):
        return name.startswith(sec)
    if sec.endswith("+"):
        base = sec[:-1]
        return name == base or name.startswith(base + "/")
    return name == sec


def find_sec_def(name: str) -> SecDef | None:
    for d in SECTION_DEFS:
        if _sec_def_matches(d.sec, name):
            return d
    return None


@dataclass
class AttachSpec:
    """What a section name says about where the program attaches (libbpf's
    ``attach_uprobe``/``attach_uprobe_multi``/``attach_usdt`` parse it the same way);
    ``auto`` is False for a bare ``SEC("uprobe")``, which the loader attaches by hand."""

    kind: str
    retprobe: bool = False
    sleepable: bool = False
    session: bool = False
    path: str = ""
    func: str = ""
    offset: int = 0
    pattern: str = ""  # uprobe.multi function pattern
    usdt_provider: str = ""
    usdt_name: str = ""
    auto: bool = False
    target: str = ""  # kprobe/tracepoint/... the rest after '/', for kinds not handled here

    @property
    def autoattach(self) -> bool:
        return self.auto


def _parse_c_long(text: str) -> int | None:
    """``sscanf("%li")`` of the whole text: an optional sign, then 0x hex, 0 octal or decimal."""
    body = text[1:] if text[:1] in "+-" else text
    sign = -1 if text[:1] == "-" else 1
    try:
        if body[:2].lower() == "0x":
            return sign * int(body[2:], 16)
        if len(body) > 1 and body[0] == "0":
            return sign * int(body[1:], 8)
        return sign * int(body, 10)
    except ValueError:
        return None


def parse_attach(sec_name: str, d: SecDef) -> AttachSpec:
    """The attach spec of a program in section ``sec_name`` (defined by ``d``); raises
    ValueError for a malformed spec as libbpf's auto-attach rejects it."""
    spec = AttachSpec(d.kind, sleepable=d.sleepable)
    probe_type, slash, rest = sec_name.partition("/")
    if d.kind == "uprobe":
        spec.retprobe = probe_type in ("uretprobe", "uretprobe.s")
        if not slash:
            return spec
        path, colon, func = rest.partition(":")
        if not colon or not path or not func:
            raise ValueError(f"section '{sec_name}' missing ':function[+offset]' specification")
        plus = func.rfind("+")
        if plus >= 0:
            off = _parse_c_long(func[plus + 1 :])
            if off is not None:
                spec.offset = off
                func = func[:plus]
        if spec.retprobe and spec.offset:
            raise ValueError(f"section '{sec_name}': uretprobes do not support offset specification")
        spec.path, spec.func, spec.auto = path, func, True
        return spec
    if d.kind == "uprobe.multi":
        spec.session = probe_type.startswith("uprobe.session")
        spec.retprobe = probe_type.startswith("uretprobe.multi")
        if not slash:
            return spec
        path, colon, pattern = rest.partition(":")
        if not colon or not path or not pattern:
            raise ValueError(f"invalid format of section definition '{sec_name}'")
        spec.path, spec.pattern, spec.auto = path, pattern, True
        return spec
    if d.kind == "usdt":
        if not slash:
            return spec
        parts = rest.split(":")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"invalid section '{sec_name}', expected SEC(\"usdt/<path>:<provider>:<name>\")")
        spec.path, spec.usdt_provider, spec.usdt_name = parts
        spec.auto = True
        return spec
    if d.kind in ("kprobe", "ksyscall"):
        spec.retprobe = probe_type.startswith(("kretprobe", "kretsyscall"))
    spec.target = rest
    spec.auto = bool(slash)
    return spec


def parse_section(sec_name: str) -> tuple[SecDef, AttachSpec] | None:
    """The SEC() definition and attach spec of a program section, None when libbpf
    knows no such section; ValueError for a known kind with a malformed spec."""
    d = find_sec_def(sec_name)
    if d is None:
        return None
    return d, parse_attach(sec_name, d)
