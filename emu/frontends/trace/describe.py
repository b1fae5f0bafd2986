"""Describers: what a model event (:mod:`kernel_model.trace.events`, by kind name and fields) says in a
trace, as a sentence or as JSON values.

Every function here is side-effect free: an event's kind and fields (plus, where a
sentence names an address, a ``where`` callable that only looks the address up) go in, a
string or a JSON-able dict comes out.  Nothing here writes output, adds or removes a
hook, or changes the event, the machine or the caller's state - the tracer owns all of
that (e.g. it remembers that a ``sys_uprobe`` syscall is in progress and passes it as
``in_sys_uprobe``).
"""

from __future__ import annotations

import errno

from emu.inspect import signal_name, syscall_name, xol_fixups

RC_NAMES = {0: "0", 1: "UPROBE_HANDLER_REMOVE", 2: "UPROBE_HANDLER_IGNORE"}

# argument counts for the syscalls a trace line should not pad to six
NARGS = {
    0: 3,
    1: 3,
    2: 3,
    3: 1,
    4: 2,
    5: 2,
    6: 2,
    7: 3,
    8: 3,
    9: 6,
    10: 3,
    11: 2,
    12: 1,
    13: 4,
    14: 4,
    16: 3,
    17: 4,
    18: 4,
    19: 3,
    20: 3,
    21: 2,
    24: 0,
    28: 3,
    32: 1,
    33: 2,
    35: 2,
    39: 0,
    60: 1,
    62: 2,
    63: 1,
    72: 3,
    79: 2,
    89: 3,
    96: 2,
    97: 2,
    102: 0,
    104: 0,
    107: 0,
    108: 0,
    110: 0,
    111: 0,
    121: 1,
    131: 2,
    158: 2,
    186: 0,
    200: 2,
    201: 1,
    218: 1,
    228: 2,
    231: 1,
    234: 3,
    257: 4,
    262: 4,
    267: 4,
    273: 2,
    302: 4,
    318: 3,
    334: 4,
    335: 0,
    336: 0,
}

# Fields that stay numbers in JSON (the rest of the integers are addresses: hex strings).
PLAIN_INT_KEYS = frozenset({"nr", "slot", "rc", "signo", "id", "old_tid"})


def signed(v: int) -> int:
    """A 64-bit register value as the signed long the kernel returns."""
    v &= 0xFFFFFFFFFFFFFFFF
    return v - (1 << 64) if v >> 63 else v


def errno_name(n: int) -> str:
    return errno.errorcode.get(n, f"errno {n}")


def consumer_name(uc) -> str:
    """``consumer #ID name`` for a uprobe consumer."""
    name = getattr(uc, "name", "") or ""
    return f"consumer #{uc.id}" + (f" {name}" if name else "")


def _hexaddr(addr: int) -> str:
    return f"{addr:#x}"


def describe(kind: str, info: dict, where=_hexaddr, in_sys_uprobe: bool = False) -> str | None:
    """The trace sentence for event ``kind`` with fields ``info``; None for an event
    private to the model (its kind starts with ``_``).

    ``where(addr)`` renders an address (the tracer's ``0x401000 <main+0x10>``);
    ``in_sys_uprobe``: a ``uprobe_hit`` comes from the optimized probes' syscall 336,
    not from an int3 trap.  Raises KeyError/AttributeError/TypeError/ValueError for an
    event whose fields do not have the expected shape (the caller falls back to
    :func:`generic`).
    """
    w = where
    if kind == "syscall":
        nr = info["nr"]
        name = syscall_name(nr)
        args = ", ".join(f"{a:#x}" for a in info["args"][: NARGS.get(nr, 6)])
        mark = "*** " if nr in (335, 336) else ""
        return f"{mark}syscall {nr} {name}({args})"
    if kind == "syscall_return":
        nr = info["nr"]
        task = info.get("task")
        if task is not None and getattr(task, "state", "running") == "blocked":
            return (
                f"syscall {nr} {syscall_name(nr)} blocks: task {task.tid} "
                f"sleeps ({getattr(task, 'blocked_on', None) or 'waiting'})"
            )
        ret = signed(info["ret"])
        name = syscall_name(nr)
        val = f"{ret:#x}" if ret >= 0 else f"{ret} ({errno_name(-ret)})"
        mark = "*** " if nr in (335, 336) else ""
        return f"{mark}syscall {nr} {name} returns {val}, resume at {w(info['rip'])}"
    if kind == "signal":
        text = f"signal {signal_name(info['signo'])} at rip {w(info['rip'])}"
        if info.get("addr") is not None:
            text += f", address {info['addr']:#x}"
        if info.get("detail"):
            text += f" ({info['detail']})"
        return text
    if kind == "uprobe_hit":
        up = info["uprobe"]
        via = "uprobe syscall" if in_sys_uprobe else "int3 trap"
        n = len(up.consumers)
        return (
            f"{via}: uprobe hit at {w(info['vaddr'])} ({up.file.path}:{up.offset:#x}, "
            f"{n} consumer{'s' if n != 1 else ''})"
        )
    if kind == "handler":
        rc = RC_NAMES.get(info["rc"], info["rc"])
        return f"handler of {consumer_name(info['consumer'])} returns {rc}"
    if kind == "emulated":
        au = info["uprobe"].arch
        what = au.text if au is not None else "instruction"
        return f"emulated '{what}' (no single-step) -> rip={w(info['new_ip'])}"
    if kind == "xol_area":
        return f"XOL area [uprobes] mapped at {info['vaddr']:#x} (slot 0: uretprobe trampoline)"
    if kind == "xol_step":
        return _xol_step(info)
    if kind == "xol_done":
        return _xol_done(info, w)
    if kind == "ip_changed":
        return f"a handler changed ip to {w(info['new_ip'])}: the probed instruction is skipped"
    if kind == "text_poke":
        data = info["data"]
        return f"text_poke {w(info['vaddr'])}: {bytes(data).hex(' ')} ({info.get('why', '')})"
    if kind == "uretprobe_hijack":
        chained = " (chained)" if info.get("chained") else ""
        return (
            f"uretprobe: return address at [{info['stack']:#x}] {w(info['orig'])} -> "
            f"trampoline {info['tramp']:#x}{chained}"
        )
    if kind == "uretprobe_return":
        return f"uretprobe trampoline done: return to {w(info['new_ip'])}"
    if kind == "ret_handler":
        return f"ret_handler of {consumer_name(info['consumer'])} for {w(info['func'])}, returning to {w(info['ret'])}"
    if kind == "ri_discarded":
        ri = info["ri"]
        return f"return instance of {w(ri.func)} discarded (its frame at {ri.stack:#x} is gone)"
    if kind == "uretprobe_depth":
        return "uretprobe depth limit reached: this return is not probed"
    if kind == "sys_uretprobe":
        return "sys_uretprobe: registers restored from the trampoline's stack"
    if kind == "optimized":
        return (
            f"optimized: {w(info['vaddr'])} now calls the trampoline at "
            f"{info['tramp']:#x} (next hits enter through syscall 336)"
        )
    if kind == "trampoline_mapped":
        return f"[uprobes-trampoline] mapped at {info['vaddr']:#x}"
    if kind == "sys_uprobe":
        return f"sys_uprobe: the optimized probe at {w(info['vaddr'])}"
    if kind == "optimize_failed":
        return f"optimization of {w(info['vaddr'])} failed: it keeps its int3"
    if kind == "ftrace":
        return f"ftrace: {info['line'].strip()}"
    if kind == "exec":
        task = info["task"]
        return f"exec: task {task.tid} ({task.comm}) now runs {info['filename']} in a new address space"
    if kind == "clone":
        child = info["child"]
        what = "thread" if child.process is info["task"].process else f"process {child.process.pid}"
        return f"clone: new task {child.tid} ({what}), flags {info.get('flags', 0):#x}"
    if kind.startswith("_"):
        return None  # private to the model
    return generic(kind, info)


def _xol_step(info: dict) -> str:
    """The copy to an XOL slot and the single-step that follows (``arch_uprobe_pre_xol``)."""
    au = info["uprobe"].arch
    what = au.text if au is not None else "instruction"
    orig = au.insn[: au.ilen] if au is not None else b""
    ixol = au.ixol[: au.ilen] if au is not None else b""
    extra = ""
    if au is not None and au.scratch:
        extra = f", rip-relative operand rewritten to use {au.scratch}"
    elif orig != ixol:
        extra = f", bytes {ixol.hex(' ')}"
    return (
        f"XOL: '{what}' copied to slot {info['slot']} at {info['xol_vaddr']:#x}{extra}; "
        f"TF set, single-stepping out of line"
    )


def _xol_done(info: dict, w) -> str:
    """The fixups after the single-step (``arch_uprobe_post_xol``)."""
    au = info["uprobe"].arch
    fix: list[str] = []
    if au is not None:
        fix.extend(xol_fixups(au))
        if au.scratch:
            fix.append(f"restore {au.scratch}")
    fixes = ", ".join(fix) if fix else "none"
    return f"#DB after the single-step: XOL fixups ({fixes}) -> rip={w(info['new_ip'])}"


def generic(kind: str, info: dict) -> str:
    """``kind field=value ...`` for an event this module has no sentence for."""
    fields = " ".join(f"{k}={v}" for k, v in jsonable(info, kind).items())
    return f"{kind} {fields}".rstrip()


def jsonable(info: dict, kind: str = "") -> dict:
    """An event's fields as JSON values (addresses as hex strings); a new dict."""
    out = {}
    for k, v in info.items():
        if k == "task":
            out["tid"] = v.tid
        elif hasattr(v, "tid"):
            out[k] = {"tid": v.tid, "pid": getattr(getattr(v, "process", None), "pid", None)}
        elif k == "uprobe":
            out["uprobe"] = {"path": v.file.path, "offset": f"{v.offset:#x}"}
        elif k == "consumer":
            out["consumer"] = {"id": v.id, "name": v.name}
        elif k == "ri":
            out["ri"] = {"func": f"{v.func:#x}", "stack": f"{v.stack:#x}"}
        elif isinstance(v, bool) or v is None or isinstance(v, str):
            out[k] = v
        elif isinstance(v, int):
            if k in PLAIN_INT_KEYS:
                out[k] = v
            elif k == "ret" and kind == "syscall_return":
                out[k] = signed(v)
            else:
                out[k] = f"{v:#x}"
        elif isinstance(v, (bytes, bytearray)):
            out[k] = bytes(v).hex()
        elif isinstance(v, (tuple, list)):
            out[k] = [f"{x:#x}" if isinstance(x, int) else str(x) for x in v]
        else:
            out[k] = str(v)
    return out


CHROME_INSTANTS = frozenset(
    {"uprobe_hit", "ret_handler", "syscall", "signal", "optimized", "uretprobe_depth", "ftrace", "exec"}
)


def instant_name(kind: str, info: dict, label) -> str | None:
    """The name of a Chrome instant event for ``kind``, or None if the kind has none.
    ``label(addr)`` gives ``sym+0xoff`` or None."""
    if kind not in CHROME_INSTANTS:
        return None
    if kind == "uprobe_hit":
        return "uprobe " + (label(info["vaddr"]) or f"{info['vaddr']:#x}")
    if kind == "ret_handler":
        return "uretprobe " + (label(info["func"]) or f"{info['func']:#x}")
    if kind == "syscall":
        return "syscall " + syscall_name(info["nr"], str(info["nr"]))
    if kind == "signal":
        return signal_name(info["signo"])
    return kind
