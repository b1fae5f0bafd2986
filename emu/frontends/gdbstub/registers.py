"""The registers gdb sees: our target description (amd64 core, SSE, Linux ``orig_rax``,
``fs_base``/``gs_base``) in gdb's amd64 numbering order."""

from __future__ import annotations

# (name, bits, type, group) in gdb's amd64 numbering order for our description.
_CORE = (
    [(n, 64, "int64") for n in ("rax", "rbx", "rcx", "rdx", "rsi", "rdi")]
    + [("rbp", 64, "data_ptr"), ("rsp", 64, "data_ptr")]
    + [(f"r{i}", 64, "int64") for i in range(8, 16)]
    + [("rip", 64, "code_ptr"), ("eflags", 32, "i386_eflags")]
    + [(n, 32, "int32") for n in ("cs", "ss", "ds", "es", "fs", "gs")]
    + [(f"st{i}", 80, "i387_ext") for i in range(8)]
    + [(n, 32, "int") for n in ("fctrl", "fstat", "ftag", "fiseg", "fioff", "foseg", "fooff", "fop")]
)
_SSE = [(f"xmm{i}", 128, "vec128") for i in range(16)] + [("mxcsr", 32, "i386_mxcsr")]
_LINUX = [("orig_rax", 64, "int")]
_SEGMENTS = [("fs_base", 64, "int"), ("gs_base", 64, "int")]
REGISTERS = _CORE + _SSE + _LINUX + _SEGMENTS

# registers the CPU holds (read and written through the machine by name)
CPU_REGISTERS = frozenset(
    (
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
        "mxcsr",
    )
    + tuple(f"xmm{i}" for i in range(16))
)
GENERAL_REGISTERS = frozenset(
    (
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
)
USER_SEGMENTS = {"cs": 0x33, "ss": 0x2B, "ds": 0, "es": 0, "fs": 0, "gs": 0}


def target_xml() -> str:
    """Our target description: registers in the order of :data:`REGISTERS`."""

    def regs(items, start):
        out = []
        for i, (name, bits, typ) in enumerate(items):
            group = ' group="vector"' if typ == "vec128" else ""
            out.append(f'<reg name="{name}" bitsize="{bits}" type="{typ}" regnum="{start + i}"{group}/>')
        return "".join(out)

    flags = (
        '<flags id="i386_eflags" size="4">'
        + "".join(
            f'<field name="{n}" start="{b}" end="{b}"/>'
            for b, n in (
                (0, "CF"),
                (1, ""),
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
        )
        + "</flags>"
    )
    mxcsr = (
        '<flags id="i386_mxcsr" size="4">'
        + "".join(
            f'<field name="{n}" start="{b}" end="{b}"/>'
            for b, n in (
                (0, "IE"),
                (1, "DE"),
                (2, "ZE"),
                (3, "OE"),
                (4, "UE"),
                (5, "PE"),
                (6, "DAZ"),
                (7, "IM"),
                (8, "DM"),
                (9, "ZM"),
                (10, "OM"),
                (11, "UM"),
                (12, "PM"),
                (15, "FZ"),
            )
        )
        + "</flags>"
    )
    vec = (
        '<vector id="v4f" type="ieee_single" count="4"/><vector id="v2d" type="ieee_double" count="2"/>'
        '<vector id="v16i8" type="int8" count="16"/><vector id="v8i16" type="int16" count="8"/>'
        '<vector id="v4i32" type="int32" count="4"/><vector id="v2i64" type="int64" count="2"/>'
        '<union id="vec128"><field name="v4_float" type="v4f"/><field name="v2_double" type="v2d"/>'
        '<field name="v16_int8" type="v16i8"/><field name="v8_int16" type="v8i16"/>'
        '<field name="v4_int32" type="v4i32"/><field name="v2_int64" type="v2i64"/>'
        '<field name="uint128" type="uint128"/></union>'
    )
    n_core, n_sse, n_linux = len(_CORE), len(_SSE), len(_LINUX)
    return (
        '<?xml version="1.0"?><!DOCTYPE target SYSTEM "gdb-target.dtd">'
        '<target version="1.0"><architecture>i386:x86-64</architecture><osabi>GNU/Linux</osabi>'
        f'<feature name="org.gnu.gdb.i386.core">{flags}{regs(_CORE, 0)}</feature>'
        f'<feature name="org.gnu.gdb.i386.sse">{vec}{mxcsr}{regs(_SSE, n_core)}</feature>'
        f'<feature name="org.gnu.gdb.i386.linux">{regs(_LINUX, n_core + n_sse)}</feature>'
        f'<feature name="org.gnu.gdb.i386.segments">{regs(_SEGMENTS, n_core + n_sse + n_linux)}'
        "</feature></target>"
    )
