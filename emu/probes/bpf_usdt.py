"""USDT programs (``SEC("usdt/PATH:PROVIDER:NAME")``) attached as libbpf 1.1 attaches them.

libbpf's ``usdt.c`` and the BPF side, ``<bpf/usdt.bpf.h>``, split the work: libbpf
parses each ``.note.stapsdt`` site's argument string (``-4@-20(%rbp) 8@%rax 4@$5``)
into a ``struct __bpf_usdt_spec`` - per argument a location kind (constant, register,
memory at register plus offset), the register's offset in ``struct pt_regs``, the
signedness and the shift that narrows the 8 bytes read to the argument's size - stores
it in the object's ``__bpf_usdt_specs`` array under a spec id, and attaches one uprobe
per site (a perf event, ``bpf_program__attach_uprobe_opts``) whose BPF cookie is that
id, with the site's semaphore as ``ref_ctr_offset``.  ``bpf_usdt_arg()`` in the program
reads the spec back through ``bpf_get_attach_cookie()`` (the ``__bpf_usdt_ip_to_spec_id``
map is for kernels without BPF cookies, older than any the model has: it stays empty).

Spec ids belong to the object (libbpf's ``usdt_manager``): sites of one attachment whose
argument strings are identical share an id, every attachment takes new ones after the
ids the object's earlier USDT attachments hold.  The sites, the nop-combo attach rule
and the semaphore offsets are :mod:`emu.probes.usdt`'s, as for every other USDT consumer.
"""

from __future__ import annotations

import errno as E
import struct
from dataclasses import dataclass

from emu.probes.usdt import find_usdt_notes, parse_usdt_spec, usdt_attach_offsets
from kernel_model.bpf.bpf_types import PT_REGS_FIELDS
from kernel_model.errors import EmuError, InputError, ProbeSpecError

USDT_MAX_ARG_CNT = 12  # BPF_USDT_MAX_ARG_CNT
SPECS_MAP = "__bpf_usdt_specs"
IP_TO_SPEC_ID_MAP = "__bpf_usdt_ip_to_spec_id"

# enum __bpf_usdt_arg_type
BPF_USDT_ARG_CONST = 0
BPF_USDT_ARG_REG = 1
BPF_USDT_ARG_REG_DEREF = 2

# struct __bpf_usdt_arg_spec { __u64 val_off; enum arg_type; short reg_off; bool arg_signed;
# char arg_bitshift; } and struct __bpf_usdt_spec { args[12]; __u64 usdt_cookie; short arg_cnt; }
# (8-byte aligned: 6 bytes of tail padding)
ARG_SPEC = struct.Struct("<QIhBb")
SPEC_SIZE = 208
_SPEC_TAIL = struct.Struct("<Qh")

# calc_pt_regs_off: the names an argument string may give each register (64/32/16/8-bit)
_REG_NAMES = {
    "rip": ("rip", "eip"),
    "rax": ("rax", "eax", "ax", "al"),
    "rbx": ("rbx", "ebx", "bx", "bl"),
    "rcx": ("rcx", "ecx", "cx", "cl"),
    "rdx": ("rdx", "edx", "dx", "dl"),
    "rsi": ("rsi", "esi", "si", "sil"),
    "rdi": ("rdi", "edi", "di", "dil"),
    "rbp": ("rbp", "ebp", "bp", "bpl"),
    "rsp": ("rsp", "esp", "sp", "spl"),
    **{f"r{n}": (f"r{n}", f"r{n}d", f"r{n}w", f"r{n}b") for n in range(8, 16)},
}
PT_REGS_OFF = {alias: 8 * PT_REGS_FIELDS.index(reg) for reg, aliases in _REG_NAMES.items() for alias in aliases}


@dataclass(frozen=True)
class UsdtArgSpec:
    """``struct __bpf_usdt_arg_spec``: where one argument is and how to narrow it."""

    val_off: int  # the constant, or the memory operand's displacement
    arg_type: int
    reg_off: int  # offsetof(struct pt_regs, reg)
    arg_signed: bool
    arg_bitshift: int  # 64 - size * 8

    def pack(self) -> bytes:
        return ARG_SPEC.pack(
            self.val_off & 0xFFFFFFFFFFFFFFFF, self.arg_type, self.reg_off, self.arg_signed, self.arg_bitshift
        )


@dataclass(frozen=True)
class UsdtSpec:
    """``struct __bpf_usdt_spec``: a site's arguments and the attachment's user cookie."""

    args: tuple[UsdtArgSpec, ...]
    usdt_cookie: int = 0

    def pack(self) -> bytes:
        """The map value, byte for byte as ``<bpf/usdt.bpf.h>`` lays it out (zeroed
        unused arguments and padding, as libbpf's memset target leaves them)."""
        out = bytearray(SPEC_SIZE)
        for i, arg in enumerate(self.args):
            out[i * ARG_SPEC.size : (i + 1) * ARG_SPEC.size] = arg.pack()
        _SPEC_TAIL.pack_into(out, USDT_MAX_ARG_CNT * ARG_SPEC.size, self.usdt_cookie, len(self.args))
        return bytes(out)


class UsdtArgError(InputError):
    """A note argument string libbpf's x86 parser rejects."""


# -- sscanf, as glibc reads the four formats parse_usdt_arg tries -----------------------------
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_SPACE = " \t\n\v\f\r"


def _scan_long(s: str, pos: int, bits: int) -> tuple[int, int] | None:
    """``%ld`` / ``%d``: white space, a sign, decimal digits (strtol's clamp on
    overflow, ``%d`` then keeps the low 32 bits as the int store does)."""
    while pos < len(s) and s[pos] in _SPACE:
        pos += 1
    start = pos
    if pos < len(s) and s[pos] in "+-":
        pos += 1
    digits = pos
    while pos < len(s) and s[pos].isascii() and s[pos].isdigit():
        pos += 1
    if pos == digits:
        return None
    value = min(max(int(s[start:pos]), _LONG_MIN), _LONG_MAX)
    if bits == 32:
        value = (value + (1 << 31)) % (1 << 32) - (1 << 31)
    return value, pos


def sscanf(fmt: str, s: str) -> tuple[list, int | None]:
    """The values ``sscanf(s, fmt, ...)`` assigns (their count is its return value)
    and what ``%n`` stored (None if the scan stopped before it).  Knows the directives
    libbpf's formats use: blanks, literals, ``%%``, ``%d``, ``%ld``, ``%Ns``,
    ``%N[^c]`` and ``%n``."""
    out: list = []
    pos = i = 0
    while i < len(fmt):
        c = fmt[i]
        if c in _SPACE:
            while pos < len(s) and s[pos] in _SPACE:
                pos += 1
            i += 1
            continue
        if c != "%":
            if pos >= len(s) or s[pos] != c:
                return out, None
            pos, i = pos + 1, i + 1
            continue
        i += 1
        width = 0
        while fmt[i].isdigit():
            width, i = width * 10 + int(fmt[i]), i + 1
        conv = fmt[i]
        if conv == "l":
            i += 1
            conv = "ld"
        i += 1
        if conv == "n":
            return out, pos  # every format here ends with %n
        if conv == "%":
            while pos < len(s) and s[pos] in _SPACE:
                pos += 1
            if pos >= len(s) or s[pos] != "%":
                return out, None
            pos += 1
        elif conv in ("d", "ld"):
            got = _scan_long(s, pos, 32 if conv == "d" else 64)
            if got is None:
                return out, None
            value, pos = got
            out.append(value)
        elif conv == "s":
            while pos < len(s) and s[pos] in _SPACE:
                pos += 1
            start = pos
            while pos < len(s) and pos - start < width and s[pos] not in _SPACE:
                pos += 1
            if pos == start:
                return out, None
            out.append(s[start:pos])
        elif conv == "[":
            assert fmt[i] == "^"
            stop = fmt[i + 1]
            i += 3  # "^c]"
            start = pos
            while pos < len(s) and pos - start < width and s[pos] != stop:
                pos += 1
            if pos == start:
                return out, None
            out.append(s[start:pos])
    return out, None


# -- the argument string ----------------------------------------------------------------------
def _reg_off(name: str, arg_num: int) -> int:
    off = PT_REGS_OFF.get(name)
    if off is None:
        raise UsdtArgError(f"unrecognized register '{name}' in arg #{arg_num}")
    return off


def parse_usdt_arg(text: str, arg_num: int) -> tuple[UsdtArgSpec, int]:
    """x86 ``parse_usdt_arg``: one argument from the front of ``text`` and the number
    of characters it took (trailing blanks included).  The forms, tried in this order:
    ``-4@-20(%rbp)``, ``8@(%rsp)``, ``-4@%eax``, ``4@$71``; anything else - a
    RIP-relative symbol (``8@counter(%rip)``), an index register, a hex number - is
    an error, as libbpf 1.1 warns and fails the attach."""
    vals, n = sscanf(" %d @ %ld ( %%%15[^)] ) %n", text)
    if len(vals) == 3:
        arg_sz, val_off, reg = vals
        arg_type, reg_off = BPF_USDT_ARG_REG_DEREF, _reg_off(reg, arg_num)
    else:
        vals, n = sscanf(" %d @ ( %%%15[^)] ) %n", text)
        if len(vals) == 2:
            (arg_sz, reg), val_off = vals, 0
            arg_type, reg_off = BPF_USDT_ARG_REG_DEREF, _reg_off(reg, arg_num)
        else:
            vals, n = sscanf(" %d @ %%%15s %n", text)
            if len(vals) == 2:
                (arg_sz, reg), val_off = vals, 0
                arg_type, reg_off = BPF_USDT_ARG_REG, _reg_off(reg, arg_num)
            else:
                vals, n = sscanf(" %d @ $%ld %n", text)
                if len(vals) != 2:
                    n = None
                arg_sz, val_off = vals if len(vals) == 2 else (0, 0)
                arg_type, reg_off = BPF_USDT_ARG_CONST, 0
    if n is None:  # no form matched (or one matched but for its closing ')')
        raise UsdtArgError(f"unrecognized arg #{arg_num} spec '{text}'")
    size = abs(arg_sz)
    if size not in (1, 2, 4, 8):
        raise UsdtArgError(f"unsupported arg #{arg_num} (spec '{text}') size: {size}")
    return UsdtArgSpec(val_off, arg_type, reg_off, arg_sz < 0, 64 - size * 8), n


def parse_usdt_args(args: str, usdt_cookie: int = 0) -> UsdtSpec:
    """``parse_usdt_spec``: every argument of a note's argument string (an empty one,
    or one starting with ``:``, has none)."""
    text = "" if args.startswith(":") else args
    out: list[UsdtArgSpec] = []
    while text:
        if len(out) >= USDT_MAX_ARG_CNT:
            raise UsdtArgError(f"too many USDT arguments (> {USDT_MAX_ARG_CNT}) in '{args}'")
        arg, used = parse_usdt_arg(text, len(out))
        out.append(arg)
        text = text[used:]
    return UsdtSpec(tuple(out), usdt_cookie)


# -- attaching --------------------------------------------------------------------------------
def set_bpf_cookie_kconfig(obj) -> None:
    """``bpf_object__resolve_externs`` for ``LINUX_HAS_BPF_COOKIE`` (the ``__kconfig``
    extern ``<bpf/usdt.bpf.h>`` branches on): libbpf's FEAT_BPF_COOKIE probe, true on
    every kernel the model has (BPF cookies came in 5.15, 7adfc6c9b315 "bpf: Add
    bpf_get_attach_cookie() BPF helper to access bpf_cookie value")."""
    for name, _, size in obj.kconfig:
        if name == "LINUX_HAS_BPF_COOKIE":
            obj.set_kconfig(name, (1).to_bytes(size, "little"))


def usdt_target(p, target) -> tuple[str, str, str]:
    """(path, provider, name) of a USDT program: ``target`` (``usdt:PATH:PROVIDER:NAME``,
    the form ``attach=`` takes) or its section's ``usdt/PATH:PROVIDER:NAME``."""
    if target is None:
        spec = p.spec
        return spec.path, spec.usdt_provider, spec.usdt_name
    if not isinstance(target, str):
        raise InputError(f"program {p.name}: a USDT target is 'usdt:PATH:PROVIDER:NAME', not {target!r}")
    try:
        path, provider, name = parse_usdt_spec(target)
    except ProbeSpecError:
        provider = None
    if not provider:
        raise InputError(f"program {p.name}: expected usdt:PATH:PROVIDER:NAME, not {target!r}")
    return path, provider, name


def attach_usdt(kernel_bpf, targets, profile, obj, kmaps: list, prior_links: list, p, prog, target, pid):
    """``bpf_program__attach_usdt`` of program ``p`` (loaded as ``prog``) of object
    ``obj`` (its maps created as ``kmaps``), where ``prior_links`` are the links the
    object has so far: the list of uprobe links, one per site.  Fails as a whole (one
    :class:`InputError` line), the sites attached so far detached again."""
    path, provider, name = usdt_target(p, target)
    specs_map = next((k for d, k in zip(obj.maps, kmaps) if d.name == SPECS_MAP), None)
    if specs_map is None or not any(d.name == IP_TO_SPEC_ID_MAP for d in obj.maps):
        raise InputError(
            f"program {p.name}: {obj.path} has no {SPECS_MAP} map (the program must include <bpf/usdt.bpf.h>)"
        )
    file = targets.find_file(path)
    targets.file_elf(file)
    where = f"USDT {provider}:{name} in {file.path}"
    sites = []
    for note in find_usdt_notes(file, provider, name):
        try:
            spec = parse_usdt_args(note.args)
        except UsdtArgError as err:
            raise InputError(f"program {p.name}: {where} at {note.pc:#x}: {err}") from None
        offset, ref = usdt_attach_offsets(file, note, profile)
        sites.append((note.args, spec, offset, ref))
    usdt_ids = [c for link in prior_links if link.prog.section.startswith("usdt") for c in link.cookies]
    next_id = max(usdt_ids, default=-1) + 1
    ids: dict[str, int] = {}  # allocate_spec_id: one id per distinct argument string
    links: list = []
    try:
        for args, spec, offset, ref in sites:
            spec_id = ids.get(args)
            if spec_id is None:
                if next_id >= specs_map.max_entries:
                    raise InputError(
                        f"program {p.name}: {where}: more USDT specs than {SPECS_MAP} holds "
                        f"({specs_map.max_entries}, BPF_USDT_MAX_SPEC_CNT) ({E.errorcode[E.E2BIG]})"
                    )
                spec_id = ids[args] = next_id
                next_id += 1
                rc = specs_map.update_value(spec_id.to_bytes(4, "little"), spec.pack())
                if rc < 0:
                    raise InputError(f"program {p.name}: {where}: failed to set USDT spec #{spec_id} ({rc})")
            links.append(kernel_bpf.attach_uprobe(prog, file, offset, ref_ctr_offset=ref, pid=pid, cookie=spec_id))
    except EmuError:
        for link in links:
            kernel_bpf.detach(link)
        raise
    return links
