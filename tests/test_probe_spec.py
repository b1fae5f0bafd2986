"""Specification tests for kernel_model.trace.trace_probe: the uprobe_events language.

Expected values come from the kernel sources (kernel/trace/trace_uprobe.c, trace_probe.c,
trace_probe_tmpl.h, trace_output.c) and sample trace lines of real kernels.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emu.probes.probe_spec import UserProbeSpec as ProbeSpec
from emu.probes.probe_spec import parse_probe_spec
from kernel_model.errors import InputError, ProbeSpecError
from kernel_model.trace.trace_probe import (
    MAX_TRACE_ARGS,
    default_event_name,
    format_listing,
    format_profile_line,
    format_trace_line,
    parse_fetch_arg,
)
from kernel_model.trace.trace_probe_tmpl import (
    Comm,
    Deref,
    FetchArg,
    FileOffset,
    Imm,
    ImmString,
    Reg,
    Retval,
    Stack,
    StackPointer,
)

# --------------------------------------------------------------------------------------
# A fake probe-hit context: registers, a few mapped regions, a comm, a load base.

SP = 0x7FFC_0000_1000
BP = SP + 0x40
DATA = 0x60_1000
LOAD_BASE = 0x40_0000
UNMAPPED = 0xDEAD_0000


def _u64(v: int) -> bytes:
    return (v & (1 << 64) - 1).to_bytes(8, "little")


class FakeCtx:
    """Implements the FetchContext protocol over a dict of mapped regions."""

    def __init__(self, comm: str = "zsh", **regs: int):
        self.comm = comm
        self.regs = {
            "rax": 0x1FF,
            "rbx": 0xB,
            "rcx": 0xC,
            "rdx": 0xD,
            "rsi": DATA,
            "rdi": DATA + 0x100,
            "rbp": BP,
            "rsp": SP,
            "r8": 8,
            "r9": UNMAPPED,
            "r10": 10,
            "r11": 11,
            "r12": DATA + 0x300,
            "r13": DATA + 0xFFE,
            "r14": DATA + 0x400,
            "r15": 15,
            "rip": 0x446420,
            "eflags": 0x246,
            "cs": 0x33,
            "ss": 0x2B,
            "orig_rax": (1 << 64) - 1,
            "fs_base": 0,
            "gs_base": 0,
        }
        self.regs.update(regs)
        stack = bytearray(0x200)  # [SP - 0x100, SP + 0x100)
        for i in range(8):
            stack[0x100 + 8 * i : 0x108 + 8 * i] = _u64(0x11 * (i + 1))
        stack[0x100 + 0x40 - 8 : 0x100 + 0x40 - 4] = (0xFFFFFFF0).to_bytes(4, "little")
        data = bytearray(0x1000)  # [DATA, DATA + 0x1000)
        data[0:6] = b"hello\0"
        data[0x10:0x16] = b"world\0"
        data[0x100:0x108] = _u64(0x1122334455667788)  # struct at rdi
        data[0x108:0x110] = _u64(DATA + 0x200)  #   .next -> DATA + 0x200
        data[0x110:0x118] = _u64(DATA)  #   .name -> "hello"
        data[0x118:0x120] = _u64(UNMAPPED)  #   .bad  -> unmapped
        data[0x200:0x208] = _u64(0x1_CAFE_F00D)
        data[0x300:0x310] = _u64(DATA) + _u64(DATA + 0x10)  # char *argv[2]
        data[0x400:0x408] = bytes([0xB7, 1, 2, 3, 4, 5, 6, 7])
        data[0xFFE:0x1000] = bytes([1, 2])
        text = bytearray(0x1000)  # the probed file at LOAD_BASE
        text[0x100:0x102] = (0x1234).to_bytes(2, "little")
        self.regions = {SP - 0x100: bytes(stack), DATA: bytes(data), LOAD_BASE: bytes(text), 0x70_0000: b"A" * 5000}

    def reg(self, name: str) -> int:
        return self.regs[name]

    def _byte(self, addr: int) -> int:
        for start, blob in self.regions.items():
            if start <= addr < start + len(blob):
                return blob[addr - start]
        raise MemoryError(f"fault at {addr:#x}")

    def read(self, addr: int, n: int) -> bytes:
        return bytes(self._byte(addr + i) for i in range(n))

    def read_cstring(self, addr: int, limit: int) -> bytes:
        out = bytearray()
        while len(out) < limit:
            b = self._byte(addr + len(out))
            if b == 0:
                break
            out.append(b)
        return bytes(out)

    def file_offset_to_vaddr(self, offset: int) -> int:
        return LOAD_BASE + offset


def spec(text: str, **fields) -> ProbeSpec:
    """An expected ProbeSpec: the defaults of a tracefs p-probe, overridden."""
    base = dict(kind="p", group="uprobes", event=None, path="", text=text)
    base.update(fields)
    return ProbeSpec(**base)


def arg(name: str, source: str, type_: str, node, **kw) -> FetchArg:
    return FetchArg(name=name, source=source, type=type_, node=node, **kw)


# --------------------------------------------------------------------------------------
# Every accepted form parses to the expected ProbeSpec.

FORMS = [
    (
        "tracefs-entry-kernel-doc-example",
        "p:zfree_entry /bin/zsh:0x46420 %ip %ax",
        dict(
            event="zfree_entry",
            path="/bin/zsh",
            offset=0x46420,
            args=[arg("arg1", "%ip", "x64", Reg("rip")), arg("arg2", "%ax", "x64", Reg("rax"))],
        ),
    ),
    (
        "tracefs-return-r-head",
        "r:zfree_exit /bin/zsh:0x46420 %ip %ax",
        dict(
            kind="r",
            event="zfree_exit",
            path="/bin/zsh",
            offset=0x46420,
            args=[arg("arg1", "%ip", "x64", Reg("rip")), arg("arg2", "%ax", "x64", Reg("rax"))],
        ),
    ),
    (
        "tracefs-return-percent-return",
        "p:grp/ev /bin/zsh:0x46420%return",
        dict(kind="r", group="grp", event="ev", path="/bin/zsh", offset=0x46420),
    ),
    (
        "tracefs-r-with-percent-return",
        "r:grp/ev /bin/zsh:0x10%return",
        dict(kind="r", group="grp", event="ev", path="/bin/zsh", offset=0x10),
    ),
    ("tracefs-group-dot-event", "p:grp.ev /bin/zsh:16", dict(group="grp", event="ev", path="/bin/zsh", offset=16)),
    (
        "tracefs-group-with-hyphen",
        "p:my-grp/ev /bin/zsh:16",
        dict(group="my-grp", event="ev", path="/bin/zsh", offset=16),
    ),
    (
        "tracefs-group-only-default-event",
        "p:grp/ /bin/bash:0x4245c0",
        dict(group="grp", event="p_bash_0x4245c0", path="/bin/bash", offset=0x4245C0),
    ),
    (
        "tracefs-no-event-default-name",
        "p /bin/bash:0x4245c0",
        dict(event="p_bash_0x4245c0", path="/bin/bash", offset=0x4245C0),
    ),
    (
        "tracefs-return-default-name-still-p",
        "r /bin/bash:0x4245c0",
        dict(kind="r", event="p_bash_0x4245c0", path="/bin/bash", offset=0x4245C0),
    ),
    ("tracefs-offset-decimal", "p:e /bin/ls:1234", dict(event="e", path="/bin/ls", offset=1234)),
    ("tracefs-offset-octal", "p:e /bin/ls:0777", dict(event="e", path="/bin/ls", offset=0o777)),
    ("tracefs-offset-upper-hex", "p:e /bin/ls:0X1F", dict(event="e", path="/bin/ls", offset=0x1F)),
    ("tracefs-offset-zero", "p:e /bin/ls:0", dict(event="e", path="/bin/ls", offset=0)),
    (
        "tracefs-ref-ctr",
        "p:e /bin/ls:0x10(0x2000)",
        dict(event="e", path="/bin/ls", offset=0x10, ref_ctr_offset=0x2000),
    ),
    (
        "tracefs-return-then-ref",
        "p:e /bin/ls:0x10%return(0x2000)",
        dict(kind="r", event="e", path="/bin/ls", offset=0x10, ref_ctr_offset=0x2000),
    ),
    (
        "tracefs-ref-zero-means-none",
        "p:e /bin/ls:0x10(0)",
        dict(event="e", path="/bin/ls", offset=0x10, ref_ctr_offset=None),
    ),
    ("tracefs-path-with-colon-guest", "p:e guest:hello:0x10", dict(event="e", path="guest:hello", offset=0x10)),
    (
        "tracefs-guest-default-event",
        "p guest:hello:0x10",
        dict(event="p_guest_hello_0x10", path="guest:hello", offset=0x10),
    ),
    (
        "tracefs-extra-whitespace",
        "  p:e \t /bin/ls:0x10   %ax  ",
        dict(event="e", path="/bin/ls", offset=0x10, args=[arg("arg1", "%ax", "x64", Reg("rax"))]),
    ),
    ("symbol-form", "p:e /bin/zsh:zfree", dict(event="e", path="/bin/zsh", symbol="zfree", form="symbol")),
    (
        "symbol-form-offset-return",
        "p /bin/zsh:zfree+0x10%return",
        dict(kind="r", path="/bin/zsh", symbol="zfree", sym_offset=0x10, form="symbol"),
    ),
    (
        "symbol-form-underscore-guest",
        "p guest:hello:_start %sp",
        dict(path="guest:hello", symbol="_start", form="symbol", args=[arg("arg1", "%sp", "x64", Reg("rsp"))]),
    ),
    (
        "symbol-form-dot-symbol-ref",
        "p /lib/x.so:.Lfoo+4(0x30)",
        dict(path="/lib/x.so", symbol=".Lfoo", sym_offset=4, ref_ctr_offset=0x30, form="symbol"),
    ),
    (
        "symbol-form-bare-symbol-main-program",
        "r:grp/ret uprobe_target_nop $retval",
        dict(
            kind="r",
            group="grp",
            event="ret",
            path="",
            symbol="uprobe_target_nop",
            form="symbol",
            args=[arg("arg1", "$retval", "x64", Retval())],
        ),
    ),
    ("delete-event", "-:zfree_entry", dict(kind="-", group=None, event="zfree_entry")),
    ("delete-group-event", "-:grp/ev", dict(kind="-", group="grp", event="ev")),
    ("bpftrace-uprobe-symbol", "uprobe:/bin/bash:readline", dict(path="/bin/bash", symbol="readline", form="bpftrace")),
    (
        "bpftrace-uprobe-symbol-offset",
        "uprobe:/bin/bash:readline+8",
        dict(path="/bin/bash", symbol="readline", sym_offset=8, form="bpftrace"),
    ),
    ("bpftrace-uprobe-address", "uprobe:/bin/bash:0x4245c0", dict(path="/bin/bash", address=0x4245C0, form="bpftrace")),
    (
        "bpftrace-uretprobe-symbol",
        "uretprobe:/bin/bash:readline",
        dict(kind="r", path="/bin/bash", symbol="readline", form="bpftrace"),
    ),
    (
        "bpftrace-uretprobe-address",
        "uretprobe:/bin/bash:0x4245c0",
        dict(kind="r", path="/bin/bash", address=0x4245C0, form="bpftrace"),
    ),
    ("bpftrace-alias-u", "u:/bin/bash:readline", dict(path="/bin/bash", symbol="readline", form="bpftrace")),
    (
        "bpftrace-alias-ur",
        "ur:/bin/bash:readline",
        dict(kind="r", path="/bin/bash", symbol="readline", form="bpftrace"),
    ),
    (
        "bpftrace-guest-path-with-colon",
        "u:guest:hello:main+0x10",
        dict(path="guest:hello", symbol="main", sym_offset=0x10, form="bpftrace"),
    ),
]


@pytest.mark.parametrize("text,fields", [f[1:] for f in FORMS], ids=[f[0] for f in FORMS])
def test_form_parses_to_expected_spec(text, fields):
    assert parse_probe_spec(text) == spec(text, **fields)


def test_fetchargs_parse_to_expected_trees():
    got = parse_probe_spec(
        r"p:e /bin/ls:0x10 a=+8(%sp):u8 +0(+8(%di)):string $comm s=$stack3:s32 $stack "
        r'\42 @0x601000:u32 @+0x100 -u8(%bp):x16 b=%ax:b4@2/32 v=+0(%sp):x8[4] w=\"hi":string '
        r"c=+0(%si):char"
    ).args
    assert got == [
        arg("a", "+8(%sp):u8", "u8", Deref(8, Reg("rsp"))),
        arg("arg2", "+0(+8(%di)):string", "string", Deref(0, Deref(8, Reg("rdi")))),
        arg("arg3", "$comm", "string", Comm()),
        arg("s", "$stack3:s32", "s32", Stack(3)),
        arg("arg5", "$stack", "x64", StackPointer()),
        arg("arg6", r"\42", "x64", Imm(42)),
        arg("arg7", "@0x601000:u32", "u32", Deref(0, Imm(0x601000))),
        arg("arg8", "@+0x100", "x64", Deref(0, FileOffset(0x100))),
        arg("arg9", "-u8(%bp):x16", "x16", Deref(-8, Reg("rbp"))),
        arg("b", "%ax:b4@2/32", "u32", Reg("rax"), bitfield=(4, 2)),
        arg("v", "+0(%sp):x8[4]", "x8", Deref(0, Reg("rsp")), count=4),
        arg("w", r'\"hi":string', "string", ImmString("hi")),
        arg("c", "+0(%si):char", "char", Deref(0, Reg("rsi"))),
    ]


@pytest.mark.parametrize(
    "kname,ours",
    [
        ("ax", "rax"),
        ("bx", "rbx"),
        ("cx", "rcx"),
        ("dx", "rdx"),
        ("si", "rsi"),
        ("di", "rdi"),
        ("bp", "rbp"),
        ("sp", "rsp"),
        ("ip", "rip"),
        ("flags", "eflags"),
        ("cs", "cs"),
        ("ss", "ss"),
        ("orig_ax", "orig_rax"),
    ]
    + [(f"r{i}", f"r{i}") for i in range(8, 16)],
)
def test_kernel_register_names_map_to_ours(kname, ours):
    assert parse_fetch_arg("%" + kname).node == Reg(ours)


def test_probe_spec_error_is_an_input_error():
    with pytest.raises(InputError):
        parse_probe_spec("p /bin/ls:0x10 %eax")


# --------------------------------------------------------------------------------------
# Default event names (the block at the end of __trace_uprobe_create's address parsing).


@pytest.mark.parametrize(
    "kind,path,offset,expected",
    [
        ("p", "/bin/bash", 0x4245C0, "p_bash_0x4245c0"),
        ("r", "/bin/bash", 0x4245C0, "p_bash_0x4245c0"),  # kernel hard-codes 'p'
        ("p", "/usr/lib/libc.so.6", 0x1000, "p_libc_0x1000"),  # cut at first '.'
        ("p", "/usr/bin/x86_64-linux-gnu-as", 0x10, "p_x86_0x10"),  # ... or first '_'
        ("p", "/opt/my-tool", 0, "p_my_0x0"),  # ... or first '-'
        ("p", "relative/dir/prog", 0xABC, "p_prog_0xabc"),
        ("p", "guest:hello", 0x10, "p_guest_hello_0x10"),  # our ':' -> '_'
        ("p", "/x/" + "a" * 80, 0x1, ("p_" + "a" * 80)[:63]),  # snprintf into 64 bytes
    ],
    ids=["bash", "return-probe", "libc-dot", "underscore", "hyphen", "relative", "guest", "truncated-to-63"],
)
def test_default_event_name(kind, path, offset, expected):
    assert default_event_name(kind, path, offset) == expected


# --------------------------------------------------------------------------------------
# Fetching and formatting every argument kind and type against the fake context.

FETCHES = [
    # (fetcharg, is_return, register overrides, expected formatted value)
    ("%ax", False, {}, "0x1ff"),  # default type x64
    ("%ax:u8", False, {}, "255"),  # 0x1ff truncated to a byte
    ("%ax:s8", False, {"rax": 0xFF}, "-1"),
    ("%ax:x8", False, {}, "0xff"),
    ("%ax:u16", False, {"rax": -2}, "65534"),
    ("%ax:s16", False, {"rax": -2}, "-2"),
    ("%ax:x16", False, {"rax": -2}, "0xfffe"),
    ("%ax:u32", False, {"rax": -2}, "4294967294"),
    ("%ax:s32", False, {"rax": -2}, "-2"),
    ("%ax:x32", False, {"rax": -2}, "0xfffffffe"),
    ("%ax:u64", False, {"rax": -2}, "18446744073709551614"),
    ("%ax:s64", False, {"rax": -2}, "-2"),
    ("%ax:x64", False, {"rax": -2}, "0xfffffffffffffffe"),
    ("%ax:char", False, {"rax": 0x141}, "'A'"),
    ("%ax:b4@4/8", False, {"rax": 0xB7}, "11"),  # bits 4..7 of 0xb7
    ("%ax:b3@0/16", False, {"rax": 0xFFFF}, "7"),
    ("%ax:b010@0/16", False, {"rax": 0xFFFF}, "255"),  # simple_strtoul: 010 is octal 8
    ("%ax:b0x4@0x4/8", False, {"rax": 0xB7}, "11"),
    ("%ip", False, {}, "0x446420"),
    ("%flags", False, {}, "0x246"),
    ("%orig_ax", False, {}, "0xffffffffffffffff"),
    ("%orig_ax:s64", False, {}, "-1"),
    ("%cs:u16", False, {}, "51"),
    ("%r15:u8", False, {}, "15"),
    ("$stack", False, {}, f"{SP:#x}"),
    ("$stack0", False, {}, "0x11"),
    ("$stack2", False, {}, "0x33"),
    ("$stack100", False, {}, "0x0"),  # get_user_stack_nth: 0, not a fault
    ("$retval", True, {"rax": 42}, "0x2a"),
    ("$retval:s32", True, {"rax": -5}, "-5"),
    ("$comm", False, {}, '"zsh"'),
    ("$comm:string", False, {}, '"zsh"'),
    (r"\42:u8", False, {}, "42"),
    (r"\-1:s16", False, {}, "-1"),
    (r"\+7", False, {}, "0x7"),
    (r"\-9223372036854775808:s64", False, {}, "-9223372036854775808"),
    (r"\18446744073709551615:s8", False, {}, "-1"),  # kstrtoul: full u64 range
    (r"\0x10", False, {}, "0x10"),
    (r'\"hi":string', False, {}, '"hi"'),
    (rf"\{DATA:#x}:string", False, {}, '"hello"'),  # an immediate address string
    (f"@{DATA + 0x200:#x}", False, {}, "0x1cafef00d"),
    (f"@{DATA + 0x200:#x}:u32", False, {}, "3405705229"),  # reads 4 bytes, not 8
    ("@+0x100:x16", False, {}, "0x1234"),  # file offset, relocated
    ("+8(%sp)", False, {}, "0x22"),
    ("+8(%sp):u8", False, {}, "34"),
    ("+u8(%sp)", False, {}, "0x22"),
    ("-8(%bp):s32", False, {}, "-16"),
    ("+0(%di):x32", False, {}, "0x55667788"),
    ("+0(+8(%di))", False, {}, "0x1cafef00d"),  # nested dereference
    ("+4(+8(%di)):u8", False, {}, "1"),
    ("+0(%si):string", False, {}, '"hello"'),
    ("+0(%si):ustring", False, {}, '"hello"'),
    ("+1(%si):string", False, {}, '"ello"'),
    ("+0(+16(%di)):string", False, {}, '"hello"'),  # nested string
    ("+0(%si):char", False, {}, "'h'"),
    ("+0(%r9):string", False, {}, "(fault)"),
    ("+0(+24(%di)):string", False, {}, "(fault)"),  # pointer to unmapped memory
    ("+0(+0(%r9)):string", False, {}, "(fault)"),  # fault in an inner dereference
    ("+0(%r9):u32", False, {}, "0"),  # copy_from_user zero-fills
    ("+0(%r9)", False, {}, "0x0"),
    ("+0(%sp):x8[4]", False, {}, "{0x11,0x0,0x0,0x0}"),
    ("+0(%r14):u8[3]", False, {}, "{183,1,2}"),
    ("+0(%r13):u8[3]", False, {}, "{1,2,0}"),  # third element faults
    ("+1(%r13):u8", False, {}, "2"),  # last mapped byte: reads 1 byte
    ("+1(%r13):u16", False, {}, "0"),  # crosses into unmapped memory
    ("+0(%r12):string[2]", False, {}, '{"hello","world"}'),
    ("+0(%r14):b4@4/8[2]", False, {}, "{11,0}"),
    ("@0x700000:string", False, {}, "(fault)"),  # longer than MAX_STRING_SIZE
]


@pytest.mark.parametrize("text,is_return,regs,expected", FETCHES, ids=[f[0] for f in FETCHES])
def test_fetch_and_format(text, is_return, regs, expected):
    fa = parse_fetch_arg(text, is_return=is_return)
    assert fa.format(fa.fetch(FakeCtx(**regs))) == expected


@pytest.mark.parametrize(
    "text,regs,value",
    [
        ("%ax:s8", {"rax": 0xFF}, -1),
        ("%ax:u8", {}, 255),
        ("+0(%si):string", {}, "hello"),
        ("+0(%r9):string", {}, None),
        ("+0(%r9):u32", {}, None),
        ("+0(+0(%r9))", {}, None),
        ("$stack100", {}, 0),
        ("+0(%r13):u8[3]", {}, [1, 2, None]),
    ],
    ids=[
        "s8-negative",
        "u8-truncated",
        "string",
        "string-fault",
        "numeric-fault",
        "inner-fault",
        "stack-never-faults",
        "array-partial-fault",
    ],
)
def test_fetch_returns_typed_value_or_none_on_fault(text, regs, value):
    assert parse_fetch_arg(text).fetch(FakeCtx(**regs)) == value


def test_comm_is_cut_to_task_comm_len():
    fa = parse_fetch_arg("$comm")
    assert fa.format(fa.fetch(FakeCtx(comm="a_very_long_process_name"))) == '"a_very_long_pro"'


@pytest.mark.parametrize(
    "type_,value,expected",
    [
        ("u8", 0x1FF, "255"),
        ("u16", 0x1_0001, "1"),
        ("u32", -1, "4294967295"),
        ("s8", 0xFF, "-1"),
        ("s8", 0x7F, "127"),
        ("s16", 0x8000, "-32768"),
        ("s64", -3, "-3"),
        ("x8", 0xABC, "0xbc"),
        ("x32", 0xDEAD_BEEF, "0xdeadbeef"),
        ("x32", 0x1_0000_0001, "0x1"),
        ("x64", 0, "0x0"),
        ("char", 0x41, "'A'"),
        ("u32", None, "0"),
        ("x16", None, "0x0"),
    ],
    ids=lambda v: str(v),
)
def test_format_applies_kernel_width_and_printf(type_, value, expected):
    source = f"%ax:{type_}"
    assert parse_fetch_arg(source).format(value) == expected


@pytest.mark.parametrize(
    "value,expected",
    [("abc", '"abc"'), (b"abc", '"abc"'), (None, "(fault)"), ("", '""')],
    ids=["str", "bytes", "fault", "empty"],
)
def test_format_string(value, expected):
    assert parse_fetch_arg("+0(%di):string").format(value) == expected


# --------------------------------------------------------------------------------------
# Bad specs: message fragment and 0-based column.

BAD = [
    ("", "Empty probe spec", None),
    ("x /bin/ls:0x10", "Unknown probe type", 0),
    ("pfoo /bin/ls:0x10", "Unexpected 'foo'", 1),
    ("p", "Missing probe location", 1),
    ("p:", "Event name is not specified", 2),
    ("p:/ev /bin/ls:1", "Group name is not specified", 2),
    ("p:1ev /bin/ls:1", "Event name '1ev' must follow the same rules as C identifiers", 2),
    ("p:g/ev-x /bin/ls:1", "Event name 'ev-x'", 4),
    ("p:g!/ev /bin/ls:1", "Group name 'g!'", 2),
    ("p:" + "e" * 65 + " /bin/ls:1", "Event name is too long", 2),
    ("p:" + "g" * 64 + "/e /bin/ls:1", "Group name is too long", 2),
    ("p /bin/ls", "Missing ':OFFSET' or ':SYMBOL'", 2),
    ("p :0x10", "Empty PATH", 2),
    ("p /bin/ls:0x1g", "Invalid uprobe offset '0x1g'", 10),
    ("p /bin/ls:08", "Invalid uprobe offset '08'", 10),  # octal
    ("p /bin/ls:99999999999999999999999", "Invalid uprobe offset", 10),  # > 2**64
    ("p /bin/ls:-4", "Invalid probe location '-4'", 10),
    ("p /bin/ls:0x10%ret", "Invalid probed address suffix '%ret'", 14),
    ("p /bin/ls:0x10(0x5", "Reference counter brace is not closed", 18),
    ("p /bin/ls:0x10(0x5)%return", "Reference counter has wrong suffix", 19),
    ("p /bin/ls:0x10(0x5))", "Reference counter has wrong suffix ')'", 19),
    ("p /bin/ls:0x10(zz)", "Invalid reference counter offset 'zz'", 15),
    ("p /bin/ls:main+zz", "Invalid symbol offset 'zz'", 15),
    ("p /bin/ls:ma*n", "Wildcards are not supported", 10),
    ("p /bin/ls:0x10 %eax", "Invalid register name '%eax'", 15),
    ("p /bin/ls:0x10 %rax", "Invalid register name '%rax'", 15),
    ("p /bin/ls:0x10 %fs_base", "Invalid register name", 15),
    ("p /bin/ls:0x10 +0(+8(%foo))", "Invalid register name '%foo'", 21),
    ("p /bin/ls:0x10 $retval", "$retval is not available on probe", 15),
    ("p /bin/ls:0x10 x=+0($retval)", "$retval is not available on probe", 20),
    ("p /bin/ls:0x10 $stackx", "Invalid $-variable '$stackx'", 15),
    ("p /bin/ls:0x10 $arg1", "Invalid $-variable '$arg1'", 15),
    ("p /bin/ls:0x10 @main", "Symbol is not available with uprobe", 15),
    ("p /bin/ls:0x10 @0x1z", "Invalid memory address", 15),
    ("p /bin/ls:0x10 @+zz", "Invalid file offset value", 15),
    ("p /bin/ls:0x10 \\zz", "Invalid immediate value 'zz'", 16),
    ("p /bin/ls:0x10 \\-9223372036854775809", "Invalid immediate value", 16),  # < LONG_MIN
    ("p /bin/ls:0x10 \\+9223372036854775808", "Invalid immediate value", 16),  # > LONG_MAX
    ('p /bin/ls:0x10 \\"abc', "String is not closed", 20),
    ("p /bin/ls:0x10 8(%sp)", "Invalid fetch argument '8(%sp)'", 15),
    ("p /bin/ls:0x10 +8%sp", "Dereference needs a brace", 15),
    ("p /bin/ls:0x10 +x(%sp)", "Invalid dereference offset 'x'", 15),
    ("p /bin/ls:0x10 +8(%sp", "Dereference brace is not closed", 21),
    ("p /bin/ls:0x10 +8(%sp)x", "Unexpected text 'x'", 22),
    ("p /bin/ls:0x10 +0x100000000(%sp)", "does not fit in 32 bits", 15),
    ("p /bin/ls:0x10 +0($comm)", "$comm can not be dereferenced", 18),
    ("p /bin/ls:0x10 %ax:u7", "Unknown type 'u7'", 19),
    ("p /bin/ls:0x10 %ax:", "Unknown type ''", 19),
    ("p /bin/ls:0x10 %ax:symbol", "not available with uprobes", 19),
    ("p /bin/ls:0x10 %di:string", "String accepts only memory argument", 19),
    ("p /bin/ls:0x10 $stack:string", "String accepts only memory argument", 22),
    ("p /bin/ls:0x10 $comm:u32", "$comm can only be fetched as a plain 'string'", 21),
    ("p /bin/ls:0x10 $comm:string[2]", "$comm can only be fetched", 21),
    ("p /bin/ls:0x10 %ax:u8[2]", "An array type needs a memory argument", 19),
    ("p /bin/ls:0x10 +0(%sp):u8[2", "Array is not closed", 27),
    ("p /bin/ls:0x10 +0(%sp):u8[2]x", "Array has wrong suffix", 28),
    ("p /bin/ls:0x10 +0(%sp):u8[0]", "Invalid array size '0'", 26),
    ("p /bin/ls:0x10 +0(%sp):u8[65]", "Array number is too big", 26),
    ("p /bin/ls:0x10 %ax:b0@1/8", "Invalid bitfield", 19),
    ("p /bin/ls:0x10 %ax:b4@6/8", "exceeds the 8-bit container", 19),
    ("p /bin/ls:0x10 %ax:b4@2/12", "Unknown type 'b4@2/12'", 19),
    ("p /bin/ls:0x10 =%ax", "Argument name is not specified", 15),
    ("p /bin/ls:0x10 1x=%ax", "Argument name '1x' must follow the same rules", 15),
    ("p /bin/ls:0x10 " + "n" * 33 + "=%ax", "Argument name is too long", 15),
    ("p /bin/ls:0x10 __probe_ip=%ax", "Argument name '__probe_ip' is reserved", 15),
    ("p /bin/ls:0x10 common_pid=%ax", "is reserved", 15),
    ("p /bin/ls:0x10 a=%ax a=%bx", "This argument name is already used: 'a'", 21),
    ("p /bin/ls:0x10 arg2=%ax %bx", "This argument name is already used: 'arg2'", 24),
    ("p /bin/ls:0x10 x=", "No argument expression", 17),
    ("p /bin/ls:0x10 +0(" + "+0(" * 20 + "%sp" + ")" * 21, "Argument expression is too long", 15),
    ("-foo", "A delete request is written -:[GRP/]EVENT", 1),
    ("-:", "Event name is not specified", 2),
    ("-:grp/", "Event name is not specified", 6),
    ("-:grp.ev", "Event name 'grp.ev'", 2),  # dyn_event_release splits on '/' only
    ("-:ev /bin/ls:0x10", "takes nothing after", 5),
    ("uprobe:/bin/bash", "Expected uprobe:PATH:FUNCTION", 16),
    ("uprobe::main", "Empty PATH", 7),
    ("uprobe:/bin/bash:", "Missing FUNCTION or ADDRESS", 17),
    ("uprobe:/bin/bash:0xzz", "Invalid address '0xzz'", 17),
    ("uprobe:/bin/bash:main %di", "takes no fetch arguments", 22),
    ("uretprobe:/bin/bash:readline+4", "uretprobe does not accept a +OFFSET", 28),
    ("ur:/bin/bash:readline+4", "uretprobe does not accept a +OFFSET", 21),
    ("uprobe:/bin/bash:read*", "Wildcards are not supported", 17),
]


@pytest.mark.parametrize("text,fragment,position", BAD, ids=[b[1][:40] + f"@{b[2]}" for b in BAD])
def test_bad_spec_reports_message_and_column(text, fragment, position):
    with pytest.raises(ProbeSpecError) as info:
        parse_probe_spec(text)
    assert fragment in str(info.value)
    assert info.value.position == position, f"expected column {position}, got {info.value.position}: {info.value}"
    assert info.value.spec == text


def test_at_most_128_fetchargs():
    args = " ".join(f"a{i}=%ax" for i in range(MAX_TRACE_ARGS))
    assert len(parse_probe_spec("p /bin/ls:1 " + args).args) == MAX_TRACE_ARGS
    text = "p /bin/ls:1 " + args + " extra=%bx"
    with pytest.raises(ProbeSpecError, match="Too many arguments") as info:
        parse_probe_spec(text)
    assert info.value.position == text.index("extra")


def test_limits_at_the_boundary_are_accepted():
    body = "+" + "0" * 56 + "7(%sp)"  # MAX_ARGSTR_LEN = 63 characters
    s = parse_probe_spec("p:" + "g" * 63 + "/" + "e" * 64 + " /bin/ls:1 " + "n" * 32 + "=" + body)
    assert (len(s.group), len(s.event), len(s.args[0].name)) == (63, 64, 32)
    assert s.args[0].source == body and len(body) == 63
    assert s.args[0].node == Deref(7, Reg("rsp"))  # leading 0: octal, like kstrtol
    with pytest.raises(ProbeSpecError, match="Argument expression is too long"):
        parse_probe_spec("p /bin/ls:1 +0" + body[1:])


def test_dereference_nesting_limit():
    def nested(n):
        return "+0(" * n + "%sp" + ")" * n

    parse_fetch_arg(nested(14))
    with pytest.raises(ProbeSpecError, match="too much nested"):
        parse_fetch_arg(nested(15))


def test_retval_is_accepted_on_return_probes():
    assert parse_probe_spec("p /bin/ls:1%return $retval").args[0].node == Retval()
    assert parse_probe_spec("r /bin/ls:1 +0($retval):u8").args[0].node == Deref(0, Retval())


# --------------------------------------------------------------------------------------
# Read-back formats: uprobe_events listing, trace lines, uprobe_profile.


@pytest.mark.parametrize(
    "text,offset,line",
    [
        (
            "p:zfree_entry /bin/zsh:0x46420 %ip %ax",
            None,
            "p:uprobes/zfree_entry /bin/zsh:0x0000000000046420 arg1=%ip arg2=%ax",
        ),
        (
            "r:zfree_exit /bin/zsh:0x46420 %ip %ax",
            None,
            "r:uprobes/zfree_exit /bin/zsh:0x0000000000046420 arg1=%ip arg2=%ax",
        ),
        ("p /bin/bash:0x4245c0%return", None, "r:uprobes/p_bash_0x4245c0 /bin/bash:0x00000000004245c0"),
        (
            "p:sdt/probe /bin/app:0x1234(0x5678) n=+0(%di):string $comm",
            None,
            "p:sdt/probe /bin/app:0x0000000000001234(0x5678) n=+0(%di):string arg2=$comm",
        ),
        ("p /bin/zsh:zfree+4 %di", 0x46424, "p:uprobes/p_zsh_0x46424 /bin/zsh:0x0000000000046424 arg1=%di"),
        ("uretprobe:/bin/bash:readline", 0x8A0F0, "r:uprobes/p_bash_0x8a0f0 /bin/bash:0x000000000008a0f0"),
    ],
    ids=[
        "kernel-doc-entry",
        "kernel-doc-return",
        "percent-return-default-event",
        "ref-ctr-and-string",
        "symbol-resolved",
        "bpftrace-resolved",
    ],
)
def test_listing_line(text, offset, line):
    assert format_listing(parse_probe_spec(text), offset) == line


def test_listing_refuses_delete_requests_and_unknown_offsets():
    with pytest.raises(ValueError):
        format_listing(parse_probe_spec("-:ev"))
    with pytest.raises(ValueError):
        format_listing(parse_probe_spec("p /bin/ls:main"))


# The prefix is a real trace line's (current kernels: "%16s-%-7d [%03d] flags
# %5lu.%06lu: "); the payload as print_uprobe_event() writes it (current kernels print
# x64 values with 0x).
ENTRY_LINE = "             zsh-24842   [006] d..1. 258544.995456: zfree_entry: (0x446420) arg1=0x446420 arg2=0x79"
RETURN_LINE = (
    "             zsh-24842   [007] d..1. 258545.000270: zfree_exit: (0x446540 <- 0x446420) arg1=0x446540 arg2=0x0"
)


def _zfree_args(text):
    return parse_probe_spec(text).args


def test_trace_line_entry_matches_reference_sample():
    a1, a2 = _zfree_args("p:zfree_entry /bin/zsh:0x46420 %ip %ax")
    line = format_trace_line(
        comm="zsh",
        pid=24842,
        cpu=6,
        timestamp=258544.995456,
        event="zfree_entry",
        ip=0x446420,
        func=None,
        args=[(a1, 0x446420), (a2, 0x79)],
    )
    assert line == ENTRY_LINE


def test_trace_line_return_matches_reference_sample():
    a1, a2 = _zfree_args("r:zfree_exit /bin/zsh:0x46420 %ip %ax")
    line = format_trace_line(
        comm="zsh",
        pid=24842,
        cpu=7,
        timestamp=258545.000270,
        event="zfree_exit",
        ip=0x446540,
        func=0x446420,
        args=[(a1, 0x446540), (a2, 0)],
    )
    assert line == RETURN_LINE


def test_trace_line_from_a_live_fetch():
    fa = _zfree_args("r:e /bin/ls:1 s=+0(%si):string n=$retval:s32")
    ctx = FakeCtx(rax=-1)
    line = format_trace_line(
        comm="ls",
        pid=1,
        cpu=0,
        timestamp=1.5,
        event="e",
        ip=0x401000,
        func=0x400100,
        args=[(a, a.fetch(ctx)) for a in fa],
    )
    assert line == ('              ls-1       [000] d..1.     1.500000: e: (0x401000 <- 0x400100) s="hello" n=-1')


@pytest.mark.parametrize(
    "comm,pid,expected_prefix",
    [
        ("a", 7, "               a-7       [000] "),
        ("x" * 15, 1234567, " " + "x" * 15 + "-1234567 [000] "),
        ("very_long_command_name", 42, " very_long_comma-42      [000] "),
    ],
    ids=["short", "seven-digit-pid", "comm-cut-to-15"],
)
def test_trace_line_task_column(comm, pid, expected_prefix):
    line = format_trace_line(comm=comm, pid=pid, cpu=0, timestamp=0.0, event="e", ip=0, func=None, args=[])
    assert line.startswith(expected_prefix)
    assert line.index("[") == 25  # 16 + '-' + 7 + ' '


def test_trace_line_timestamp_is_rounded_to_microseconds():
    line = format_trace_line(comm="a", pid=1, cpu=12, timestamp=3.0000004, event="e", ip=0x10, func=None, args=[])
    assert line.endswith("[012] d..1.     3.000000: e: (0x10)")
    line = format_trace_line(comm="a", pid=1, cpu=0, timestamp=3.0000006, event="e", ip=0x10, func=None, args=[])
    assert "    3.000001: " in line


def test_profile_line():
    assert format_profile_line("/bin/zsh", "zfree_entry", 3) == (
        "  /bin/zsh zfree_entry" + " " * 33 + " " + " " * 14 + "3"
    )
    long_event = "e" * 50  # %-44s never truncates
    assert format_profile_line("/p", long_event, 1234567) == ("  /p " + long_event + " " + " " * 8 + "1234567")


# --------------------------------------------------------------------------------------
# Round trip: format_listing -> parse_probe_spec gives back the same spec.

_NAMES = st.from_regex(r"[a-z_][a-z_]{0,6}", fullmatch=True)
_BODIES_ENTRY = [
    "%ax",
    "%ip:u32",
    "%r15:s16",
    "$stack",
    "$stack7:x8",
    "$comm",
    "\\42",
    "\\-3:s64",
    "@0x1000:u8",
    "@+0x20",
    "+8(%sp)",
    "-16(%bp):s32",
    "+0(+8(%di)):string",
    "+u4(%si):ustring",
    "%flags:b3@2/16",
    "+0(%sp):x16[3]",
    "+0(%r12):string[2]",
    '\\"txt":string',
    "+0(%di):char",
]
_BODIES_RETURN = _BODIES_ENTRY + ["$retval", "$retval:s32", "+0($retval):string"]


def _number(v: int):
    return st.sampled_from([hex(v), str(v), "0" + oct(v)[2:] if v else "0", hex(v).upper().replace("0X", "0x")])


@st.composite
def tracefs_specs(draw):
    kind = draw(st.sampled_from(["p", "r"]))
    head = draw(st.sampled_from(["", ":EV", ":GRP/EV", ":GRP/", ":GRP.EV"]))
    head = head.replace("GRP", draw(st.from_regex(r"[a-z_\-][a-z0-9_\-]{0,10}", fullmatch=True))).replace(
        "EV", draw(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True))
    )
    path = draw(
        st.one_of(
            st.from_regex(r"/[A-Za-z0-9_.\-/:]{0,20}", fullmatch=True),
            st.from_regex(r"guest:[a-z_]{1,10}", fullmatch=True),
        )
    )
    offset = draw(st.integers(0, 2**64 - 1))
    ret = kind == "p" and draw(st.booleans())
    ref = draw(st.one_of(st.none(), st.integers(0, 2**64 - 1)))
    loc = f"{path}:{draw(_number(offset))}" + ("%return" if ret else "")
    if ref is not None:
        loc += f"({draw(_number(ref))})"
    bodies = _BODIES_RETURN if (kind == "r" or ret) else _BODIES_ENTRY
    n = draw(st.integers(0, 6))
    names = draw(st.lists(_NAMES, min_size=n, max_size=n, unique=True))
    words = []
    for name in names:
        body = draw(st.sampled_from(bodies))
        words.append(f"{name}={body}" if draw(st.booleans()) else body)
    # an unnamed word takes "argN"; keep names distinct from those
    return " ".join([kind + head, loc] + words)


@settings(max_examples=300, deadline=None)
@given(tracefs_specs())
def test_listing_round_trips(text):
    first = parse_probe_spec(text)
    line = format_listing(first)
    again = parse_probe_spec(line)
    assert dataclasses.replace(again, text="") == dataclasses.replace(first, text="")
    assert format_listing(again) == line


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**64 - 1), st.sampled_from(["x", "u", "s"]), st.sampled_from([8, 16, 32, 64]))
def test_register_fetch_matches_c_integer_conversion(value, prefix, bits):
    fa = parse_fetch_arg(f"%ax:{prefix}{bits}")
    stored = value & ((1 << bits) - 1)
    signed = stored - (1 << bits) if stored >> (bits - 1) else stored
    expected = {"x": hex(stored), "u": str(stored), "s": str(signed)}[prefix]
    assert fa.format(fa.fetch(FakeCtx(rax=value))) == expected
