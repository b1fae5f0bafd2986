"""Frames for the stepper's ``bt`` and ``finish``: unwinding with each mapped ELF's call
frame information, as gdb's dwarf2 frame unwinder does.

Every frame is unwound by the ``.eh_frame`` FDE of the file its pc is in (the program, a
shared library, the interpreter), read by pyelftools (its CallFrameInfo, at the FDE
``.eh_frame_hdr``'s search table gives, or ``EH_CFI_entries``; ``get_decoded``); the
row for the pc gives the CFA and where the caller's registers and
the return address are saved, so a frame is right at any instruction: in a prologue,
after ``push``/``sub rsp``, in a leaf without a frame pointer, in ``-O2`` code.  An outer
frame is looked up at ``pc - 1`` (inside its call instruction), as gdb does.  A file
without CFI (hand-written assembly) falls back to the stepper's frame-pointer heuristics
(:meth:`Stepper._frame0_slot` for the innermost frame, the ``rbp`` chain above).

A return address that is the uretprobe trampoline is replaced by the original one of
the task's pending return instance, as the kernel's ``fixup_uretprobe_trampoline_entries``
(kernel/events/callchain.c) fixes perf's user callchains: the instances in
``utask->return_instances`` order, newest first (an instance whose ``stack`` is the very
slot wins, so one left behind by a longjmp is skipped).

A signal frame (the restorer the handler returns to: ``mov rax, 15; syscall``) is
unwound from the rt_sigframe's saved registers, and the frame it interrupted is looked up
at its exact pc, as gdb's amd64-linux sigtramp unwinder does.

The walk stops where gdb's does: at an FDE whose return address rule is undefined
(glibc's ``_start``), at the program's entry function (gdb's ``backtrace past-entry
off``), after ``main`` unless ``past_main`` (gdb's ``backtrace past-main``), and at a
frame whose CFA is not above the previous one (a corrupt stack).
"""

from __future__ import annotations

import operator
import struct
from bisect import bisect_right
from io import BytesIO
from types import SimpleNamespace

from elftools.dwarf.callframe import FDE, CallFrameInfo, RegisterRule
from elftools.dwarf.dwarf_expr import DWARFExprParser
from elftools.elf.elffile import ELFFile

from emu.probes.symbols import image_of, link_vaddr
from kernel_model.arch.x86.kernel.signal import SIGCONTEXT_OFFSET, SIGCONTEXT_REGS
from kernel_model.mm.mm_types import PROT_EXEC, GuestFault

_MASK = 0xFFFFFFFFFFFFFFFF
# the x86-64 psABI's DWARF register numbers: 0-15 the general registers, 16 the return address
DWARF_GPRS = (
    "rax",
    "rdx",
    "rcx",
    "rbx",
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
)
RBP, RSP, RA = 6, 7, 16
# the signal restorer (glibc's __restore_rt): mov rax, 15 (rt_sigreturn); syscall - the
# bytes gdb's amd64_linux_sigtramp_p looks for
SIGTRAMP_CODE = bytes.fromhex("48c7c00f0000000f05")


class NoCfi(Exception):
    """The CFI cannot unwind this frame (no FDE, or a rule this unwinder cannot follow)."""


def _signed(v: int) -> int:
    v &= _MASK
    return v - (1 << 64) if v >> 63 else v


def _cmp(op):
    return lambda a, b: int(op(_signed(a), _signed(b)))


_BINARY = {
    "DW_OP_plus": operator.add,
    "DW_OP_minus": operator.sub,
    "DW_OP_mul": operator.mul,
    "DW_OP_and": operator.and_,
    "DW_OP_or": operator.or_,
    "DW_OP_xor": operator.xor,
    "DW_OP_shl": lambda a, b: a << (b & 63),
    "DW_OP_shr": lambda a, b: (a & _MASK) >> (b & 63),
    "DW_OP_shra": lambda a, b: _signed(a) >> (b & 63),
    "DW_OP_ge": _cmp(operator.ge),
    "DW_OP_gt": _cmp(operator.gt),
    "DW_OP_le": _cmp(operator.le),
    "DW_OP_lt": _cmp(operator.lt),
    "DW_OP_eq": _cmp(operator.eq),
    "DW_OP_ne": _cmp(operator.ne),
}


def evaluate(ops, regs: dict, read_u64, push: int | None = None) -> int:
    """A DWARF location expression (already parsed by pyelftools' DWARFExprParser) over a
    frame's registers: the stack-machine subset CFI uses (``DW_OP_breg``, literals and
    constants, arithmetic, comparisons, ``DW_OP_deref``).  ``push`` is the CFA for a
    register rule's expression.  Anything else raises :class:`NoCfi`."""
    stack = [] if push is None else [push]
    try:
        for op in ops:
            name, args = op.op_name, op.args
            if name.startswith("DW_OP_lit"):
                stack.append(int(name[9:]))
            elif name.startswith("DW_OP_breg") and name[10:].isdigit():
                stack.append(regs[int(name[10:])] + args[0])
            elif name.startswith("DW_OP_const"):
                stack.append(args[0])
            elif name == "DW_OP_plus_uconst":
                stack.append(stack.pop() + args[0])
            elif name in _BINARY:
                b, a = stack.pop(), stack.pop()
                stack.append(_BINARY[name](a, b))
            elif name == "DW_OP_deref":
                stack.append(read_u64(stack.pop() & _MASK))
            elif name == "DW_OP_dup":
                stack.append(stack[-1])
            elif name == "DW_OP_drop":
                stack.pop()
            elif name == "DW_OP_over":
                stack.append(stack[-2])
            elif name == "DW_OP_swap":
                stack[-1], stack[-2] = stack[-2], stack[-1]
            else:
                raise NoCfi(f"unsupported {name}")
        return stack[-1] & _MASK
    except (IndexError, KeyError, TypeError) as e:
        raise NoCfi(f"bad expression: {e}") from None


def eh_frame_hdr_index(hdr, eh_frame) -> list[tuple[int, int]] | None:
    """``[(function start, FDE offset in .eh_frame)]`` from ``.eh_frame_hdr``'s binary
    search table (``PT_GNU_EH_FRAME``: what the linker writes for unwinders), sorted by
    start; None unless it has the layout every linker writes (version 1, a 4-byte
    ``eh_frame_ptr``, a udata4 count, ``DW_EH_PE_datarel|sdata4`` pairs)."""
    if hdr is None or eh_frame is None:
        return None
    data, base = hdr.data(), hdr["sh_addr"]
    if len(data) < 12 or data[0] != 1 or data[1] & 0x0F not in (0x03, 0x0B) or data[2] != 0x03 or data[3] != 0x3B:
        return None
    (count,) = struct.unpack_from("<I", data, 8)
    if 12 + 8 * count > len(data):
        return None
    flat = struct.unpack_from(f"<{2 * count}i", data, 12)
    eh_addr, eh_size = eh_frame["sh_addr"], eh_frame["sh_size"]
    index = [(base + flat[k], base + flat[k + 1] - eh_addr) for k in range(0, 2 * count, 2)]
    if any(not 0 <= off < eh_size for _, off in index) or any(a[0] > b[0] for a, b in zip(index, index[1:])):
        return None
    return index


class CfiTable:
    """The ``.eh_frame`` FDEs of one ELF image by link-time address.  With an
    ``.eh_frame_hdr`` (every linked program and library) only the FDEs asked for are
    parsed (pyelftools' CallFrameInfo at the offsets the header's table gives), else the
    whole section once (``EH_CFI_entries``); a row is decoded (``FDE.get_decoded``) when
    first needed.  An image without usable CFI has none (a malformed section is no CFI,
    never an error: the heuristics take over)."""

    def __init__(self, image):
        self._starts: list[int] = []
        self._targets: list = []  # per start: its FDE, or its .eh_frame offset
        self._cfi = None  # CallFrameInfo for the indexed lookups
        self._fdes: dict[int, FDE | None] = {}
        self._rows: dict[int, list] = {}
        self._parser = None
        try:
            elf = ELFFile(BytesIO(image.data))
            eh_frame = elf.get_section_by_name(".eh_frame")
            if eh_frame is None:
                return
            dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False)
            if not dwarf.has_EH_CFI():
                return
            self._parser = DWARFExprParser(dwarf.structs)
            index = eh_frame_hdr_index(elf.get_section_by_name(".eh_frame_hdr"), eh_frame)
            if index is not None:
                sec = dwarf.eh_frame_sec
                self._cfi = CallFrameInfo(
                    stream=sec.stream, size=sec.size, address=sec.address, base_structs=dwarf.structs, for_eh_frame=True
                )
                self._starts = [start for start, _ in index]
                self._targets = [off for _, off in index]
                return
            entries = dwarf.EH_CFI_entries()
        except Exception:  # noqa: BLE001 - pyelftools raises many kinds on a bad file
            return
        fdes = sorted(
            ((e.header.initial_location, e) for e in entries if isinstance(e, FDE) and e.header.address_range),
            key=lambda t: t[0],
        )
        self._starts = [start for start, _ in fdes]
        self._targets = [fde for _, fde in fdes]

    def __len__(self) -> int:
        return len(self._starts)

    def _fde(self, i: int) -> FDE | None:
        target = self._targets[i]
        if isinstance(target, FDE):
            return target
        if i not in self._fdes:
            try:
                entry = self._cfi._parse_entry_at(target)  # pyelftools' FDE (and CIE) parser
            except Exception:  # noqa: BLE001 - a malformed FDE is no CFI
                entry = None
            self._fdes[i] = entry if isinstance(entry, FDE) else None
        return self._fdes[i]

    def row(self, pc: int) -> dict | None:
        """The CFI row in effect at link-time ``pc`` (``{"cfa": CFARule, regno:
        RegisterRule}``), or None when no FDE covers it."""
        i = bisect_right(self._starts, pc) - 1
        if i < 0:
            return None
        fde = self._fde(i)
        if fde is None:
            return None
        start, size = fde.header.initial_location, fde.header.address_range
        if not start <= pc < start + size:
            return None
        rows = self._rows.get(i)
        if rows is None:
            try:
                rows = fde.get_decoded().table
            except Exception:  # noqa: BLE001 - a malformed FDE is no CFI
                rows = []
            self._rows[i] = rows
        best = None
        for r in rows:
            if r["pc"] <= pc:
                best = r
            else:
                break
        return best

    def expression(self, expr) -> list:
        """pyelftools' parse of a rule's DWARF expression bytes."""
        try:
            return self._parser.parse_expr(expr)
        except Exception:  # noqa: BLE001 - a malformed expression is no CFI
            raise NoCfi("malformed expression") from None


class Unwinder:
    """Frames of the stepper's current task, innermost first.

    Owned by one :class:`~emu.debug.stepper.Stepper`; keeps one
    :class:`CfiTable` per ELF image it met (a library's table serves every mapping of it).
    """

    def __init__(self, stepper):
        self.stepper = stepper
        self._tables: dict[int, tuple[object, CfiTable]] = {}

    @property
    def machine(self):
        return self.stepper.machine

    # ------------------------------------------------------------------ CFI lookup
    def table_at(self, addr: int) -> tuple[CfiTable, int] | None:
        """The CFI table of the file mapped at ``addr`` and ``addr``'s link-time address."""
        vma = self.machine.mem.find_vma(addr)
        if vma is None or vma.file is None or image_of(vma.file) is None:
            return None
        image = vma.file.elf
        hit = self._tables.get(id(image))
        if hit is None or hit[0] is not image:
            hit = (image, CfiTable(image))
            self._tables[id(image)] = hit
        return hit[1], link_vaddr(vma.file, vma, addr)

    def _read(self, addr: int) -> int:
        try:
            return self.machine.mem.read_u64(addr & _MASK)
        except GuestFault:
            raise NoCfi(f"cannot read {addr:#x}") from None

    def _rule_value(self, table, rule, cfa: int, regs: dict):
        """(value, where it is saved or None) of one register rule; (None, None) when
        undefined, :class:`NoCfi` when it cannot be followed."""
        kind, arg = rule.type, rule.arg
        if kind == RegisterRule.OFFSET:
            return self._read(cfa + arg), (cfa + arg) & _MASK
        if kind == RegisterRule.VAL_OFFSET:
            return (cfa + arg) & _MASK, None
        if kind == RegisterRule.REGISTER:
            if arg not in regs:
                raise NoCfi(f"register {arg} unknown")
            return regs[arg], None
        if kind == RegisterRule.EXPRESSION:
            where = evaluate(table.expression(arg), regs, self._read, push=cfa)
            return self._read(where), where
        if kind == RegisterRule.VAL_EXPRESSION:
            return evaluate(table.expression(arg), regs, self._read, push=cfa), None
        if kind == RegisterRule.UNDEFINED:
            return None, None
        raise NoCfi(f"rule {kind}")  # SAME_VALUE/ARCHITECTURAL: handled by caller

    def cfi_step(self, pc: int, regs: dict, exact: bool):
        """Unwind one frame with CFI: ``(slot, cfa, return address, caller's registers)``,
        or None when the CFI says this is the outermost frame (return address undefined).
        ``exact``: the pc is where the frame stopped (the innermost frame, one a signal
        interrupted), not a return address.  Raises :class:`NoCfi` when there is no FDE
        for the pc or a rule cannot be followed."""
        found = self.table_at(pc if exact else pc - 1)
        if found is None:
            raise NoCfi("no ELF")
        table, link = found
        row = table.row(link)
        if row is None:
            raise NoCfi("no FDE")
        regs = {**regs, RA: pc}  # DW_OP_breg16 is the frame's rip (the PLT's CFA)
        rule = row["cfa"]
        if rule.expr is not None:
            cfa = evaluate(table.expression(rule.expr), regs, self._read)
        elif rule.reg in regs:
            cfa = (regs[rule.reg] + rule.offset) & _MASK
        else:
            raise NoCfi("CFA register unknown")
        ra_rule = row.get(RA)
        if ra_rule is None or ra_rule.type == RegisterRule.UNDEFINED:
            return None
        caller = dict(regs)
        for regno, r in row.items():
            if regno in ("pc", "cfa", RA) or r.type in (RegisterRule.SAME_VALUE, RegisterRule.ARCHITECTURAL):
                continue
            value, _ = self._rule_value(table, r, cfa, regs)
            if value is None:
                caller.pop(regno, None)
            else:
                caller[regno] = value
        ret, slot = self._rule_value(table, ra_rule, cfa, regs)
        if ret is None:
            return None
        caller.pop(RA, None)
        caller[RSP] = cfa
        return slot, cfa, ret, caller

    # ------------------------------------------------------------------ signal frames
    def is_sigtramp(self, pc: int) -> bool:
        """``pc`` is in the signal restorer (at its ``mov`` or its ``syscall``): the frame
        is a signal delivery's (gdb's SIGTRAMP_FRAME, "<signal handler called>")."""
        for start in (pc, pc - 7):
            try:
                if self.machine.mem.read(start, len(SIGTRAMP_CODE)) == SIGTRAMP_CODE:
                    return True
            except GuestFault:
                pass
        return False

    def sigtramp_step(self, regs: dict):
        """Unwind a signal frame: the interrupted registers are the rt_sigframe's
        ``uc.uc_mcontext`` at the frame's rsp (the handler's ``ret`` popped pretcode), as
        ``restore_sigcontext`` reloads them and gdb's amd64_linux_sigcontext_addr finds
        them.  The return "slot" is the saved rip."""
        base = regs[RSP] + SIGCONTEXT_OFFSET
        saved = {name: self._read(base + 8 * i) for i, name in enumerate(SIGCONTEXT_REGS[:17])}
        caller = {i: saved[name] for i, name in enumerate(DWARF_GPRS)}
        return base + 8 * SIGCONTEXT_REGS.index("rip"), saved["rsp"], saved["rip"], caller

    # ------------------------------------------------------------------ heuristics
    def heuristic_step(self, regs: dict, exact: bool, pc: int):
        """No CFI: the stepper's frame-pointer guess, as before CFI was read."""
        s = self.stepper
        if exact:
            slot, rbp = s._frame0_slot(SimpleNamespace(rip=pc, rsp=regs.get(RSP, 0), rbp=regs.get(RBP, 0)))
        else:
            slot, rbp = s._rbp_slot(regs.get(RBP, 0))
        if slot is None:
            return None
        ret = self._read(slot)
        caller = dict(regs)
        caller[RSP] = slot + 8
        caller[RBP] = rbp
        return slot, slot + 8, ret, caller

    # ------------------------------------------------------------------ the walk
    def frames(self, max_frames: int, past_main: bool, frame_type):
        """Frames from the current registers, innermost first (``frame_type`` builds
        each: the engine's :class:`Frame`)."""
        m = self.machine
        ptregs = m.read_regs()
        regs = {i: getattr(ptregs, name) for i, name in enumerate(DWARF_GPRS)}
        pc = ptregs.rip
        frames = [frame_type(0, pc, self._function(pc), signal=self.is_sigtramp(pc))]
        tramp, pending = self.stepper._pending_returns()
        used: set = set()
        entry = self._entry_function()
        prev_cfa = regs[RSP]
        exact = True
        while len(frames) < max_frames:
            f = frames[-1]
            if (f.function == "main" and not past_main) or (
                entry is not None and f.function == entry[0] and self._in_exe(f.pc)
            ):
                break
            try:
                step = self._step(f, pc, regs, exact)
            except NoCfi:
                break
            if step is None:
                break
            slot, cfa, ret, caller = step
            if cfa <= prev_cfa and not f.signal:
                break  # not above the previous frame: corrupt stack
            via = tramp is not None and ret == tramp
            if via:
                ret = self._original_return(slot, pending, used)
                if ret is None:
                    break
            vma = m.mem.find_vma(ret)
            if vma is None or not vma.prot & PROT_EXEC:
                break
            f.slot, f.cfa = slot, cfa
            # a return address follows its call: name the caller by ret - 1, but a pc a
            # signal interrupted is exact (gdb's get_frame_address_in_block)
            exact = f.signal
            sig = not exact and self.is_sigtramp(ret)
            frames.append(
                frame_type(len(frames), ret, self._function(ret if exact or sig else ret - 1), via, signal=sig)
            )
            pc, regs, prev_cfa = ret, caller, cfa
        return frames

    @staticmethod
    def _original_return(slot: int, pending: list, used: set) -> int | None:
        """The return address a hijacked slot stood for: the next pending return
        instance in list order (fixup_uretprobe_trampoline_entries), the one whose
        ``stack`` is this slot first; None when none is left."""
        ri = next((r for r in pending if r.stack == slot and id(r) not in used), None)
        if ri is None:
            ri = next((r for r in pending if id(r) not in used), None)
        if ri is None:
            return None
        used.add(id(ri))
        return ri.orig_ret_vaddr

    def _step(self, f, pc: int, regs: dict, exact: bool):
        """Unwind frame ``f``: a signal frame from its sigcontext, else by CFI, else by
        the heuristics."""
        if f.signal:
            return self.sigtramp_step(regs)
        try:
            return self.cfi_step(pc, regs, exact)
        except NoCfi:
            return self.heuristic_step(regs, exact, pc)

    def _function(self, addr: int) -> str | None:
        hit = self.stepper.symbol(addr)
        return hit[0] if hit else None

    def _entry_function(self) -> tuple[str, int] | None:
        """(name, address) of the function holding the program's entry point."""
        exe = self.machine.process.exe
        if exe is None or exe.elf is None:
            return None
        addr = exe.elf.entry + (getattr(exe, "load_bias", 0) or 0)
        name = self._function(addr)
        return (name, addr) if name else None

    def _in_exe(self, addr: int) -> bool:
        vma = self.machine.mem.find_vma(addr)
        return vma is not None and vma.file is not None and vma.file is self.machine.process.exe


__all__ = ["Unwinder", "CfiTable", "NoCfi", "evaluate", "DWARF_GPRS"]
