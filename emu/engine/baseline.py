"""Bare-Unicorn baselines for the bench: the same guest loop on a Unicorn instance with
no machine around it, to time what the engine itself costs.

Machine-side (it is the one place besides :mod:`emu.machine` and :mod:`emu.engine.memory` that
may use Unicorn): the bench deliberately times raw Unicorn, and gets it from here.
"""

from __future__ import annotations

import ctypes
import struct
import time
from types import MappingProxyType

import unicorn
from unicorn import (
    UC_ARCH_X86,
    UC_HOOK_CODE,
    UC_HOOK_INSN,
    UC_HOOK_INTR,
    UC_MODE_64,
    UC_PROT_EXEC,
    UC_PROT_READ,
    UC_PROT_WRITE,
)
from unicorn import (
    x86_const as X,
)
from unicorn.unicorn_py3.unicorn import Uc, uclib  # Uc: see emu.engine.regfile

from emu.engine.regfile import W_EFLAGS, W_RIP, WINDOW_SLOT, RegisterFile, cpu_window_layout
from kernel_model.arch.x86.kernel.uprobes import URETPROBE_SYSCALL_CHECK, URETPROBE_TRAMPOLINE
from kernel_model.arch.x86.ptrace import GPR_NAMES, TF
from kernel_model.errors import EmuError

STACK_TOP = 0x7FF000010000
STACK_SIZE = 0x10000
XOL_PAGE = 0x7FF000100000  # the floors' out-of-line slot / trampoline page
_RBP_MARK = 0x5EED_0000_0B0B_0000
W_RAX, W_RCX, W_RSP, W_RBP, W_R11 = (WINDOW_SLOT[GPR_NAMES.index(r)] for r in ("rax", "rcx", "rsp", "rbp", "r11"))


def unicorn_version() -> str:
    return getattr(unicorn, "__version__", "?")


def cpu_state_in_place() -> bool:
    """Whether this process found Unicorn's CPU state in place (``emu.engine.regfile``): without
    it every trap reads and writes the registers through the API, and the hit costs the
    bench measures are not the engine's usual ones."""
    return cpu_window_layout() is not None


def _bare_uc(file, int3_site: str | None = None, stack=None) -> Uc:
    """``file`` (a MappedFile of the bench guest) loaded as the loader lays it out;
    ``stack``: a host buffer to map as the stack (as the machine maps guest memory)."""
    uc = Uc(UC_ARCH_X86, UC_MODE_64)
    for seg in file.elf.segments:  # the loader's layout: text r-x, data rw-
        start = seg.vaddr & ~0xFFF
        end = (seg.vaddr + seg.memsz + 0xFFF) & ~0xFFF
        prot = (
            (UC_PROT_READ if seg.flags & 4 else 0)
            | (UC_PROT_WRITE if seg.flags & 2 else 0)
            | (UC_PROT_EXEC if seg.flags & 1 else 0)
        )
        uc.mem_map(start, end - start, prot)
        uc.mem_write(seg.vaddr, file.data[seg.offset : seg.offset + seg.filesz])
    if stack is None:
        uc.mem_map(STACK_TOP - STACK_SIZE, STACK_SIZE, UC_PROT_READ | UC_PROT_WRITE)
    else:
        uc.mem_map_ptr(STACK_TOP - STACK_SIZE, STACK_SIZE, UC_PROT_READ | UC_PROT_WRITE, ctypes.addressof(stack))
    if int3_site:
        uc.mem_write(file.elf.resolve(int3_site).value, b"\xcc")
    return uc


MODES = ("none", "int3", "int3-native", "code-hook", "syscall")
# hand-inlined probe hits: (loop, probed symbol) of each
FLOORS = MappingProxyType(
    {
        "floor-nop": (2, "uprobe_target_nop"),
        "floor-push": (3, "uprobe_target_push"),
        "floor-ret": (4, "uprobe_target_ret"),
        "floor-uretprobe": (2, "uprobe_target_nop"),
    }
)
_INTR_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p)
_SYSCALL_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


def _empty_hook(*_args) -> None:
    return None


def _add_native_hook(uc: Uc, kind: int, fptr, *extra) -> None:
    handle = ctypes.c_size_t()
    if uclib.uc_hook_add(
        uc._uch,
        ctypes.byref(handle),
        kind,
        ctypes.cast(fptr, ctypes.c_void_p),
        None,
        ctypes.c_uint64(1),
        ctypes.c_uint64(0),
        *extra,
    ):
        raise EmuError("cannot add a native hook")


def _floor_hooks(uc: Uc, mode: str, site: int, stack, count) -> list:
    """The hooks of a hand-inlined probe hit: what a uprobe hit on this instruction must
    do at the least, in straight-line Python on the CPU state in place (as the machine
    reads it, ``emu.engine.regfile``): find the probe by address, run one consumer (``count``),
    and the instruction's part - nothing (nop: rip is already past it), the push into
    host stack memory, the out-of-line ``ret`` in a slot with TF and its #DB, or the
    return-address hijack and the ``uretprobe`` syscall of the trampoline (the
    kernel's bytes).  No kernel structure, no checks beyond the probe lookup: the
    cost below which no Python model of the same semantics can go."""
    win = RegisterFile(uc).window
    if win is None:
        raise EmuError("the hand-inlined floors need the CPU state in place (not found)")
    sites = {site: count}
    mem = memoryview(stack).cast("B")
    base = STACK_TOP - STACK_SIZE
    u64 = struct.Struct("<Q")
    keep = []
    if mode in ("floor-nop", "floor-push"):
        push = mode == "floor-push"

        def on_trap(_uch, _intno, _data):
            sites[win[W_RIP] - 1](None)  # regs->ip - 1: the probed address
            if push:  # push %rbp, emulated; rip is past it
                sp = win[W_RSP] - 8
                u64.pack_into(mem, sp - base, win[W_RBP])
                win[W_RSP] = sp

        keep.append(_INTR_CB(on_trap))
        _add_native_hook(uc, UC_HOOK_INTR, keep[0])
    elif mode == "floor-ret":
        uc.mem_map(XOL_PAGE, 0x1000, UC_PROT_READ | UC_PROT_EXEC)
        uc.mem_write(XOL_PAGE, b"\xc3")  # the slot: a copy of the probed ret

        def on_trap(_uch, intno, _data):
            if intno == 3:
                sites[win[W_RIP] - 1](None)
                win[W_RIP] = XOL_PAGE  # pre_xol: rip to the slot, TF set
                win[W_EFLAGS] |= TF
            else:  # #DB after the slot: ret set rip itself
                win[W_EFLAGS] &= ~TF

        keep.append(_INTR_CB(on_trap))
        _add_native_hook(uc, UC_HOOK_INTR, keep[0])
    else:
        uc.mem_map(XOL_PAGE, 0x1000, UC_PROT_READ | UC_PROT_EXEC)
        uc.mem_write(XOL_PAGE, URETPROBE_TRAMPOLINE)
        check = XOL_PAGE + URETPROBE_SYSCALL_CHECK
        ris = []
        flags = ctypes.c_uint64()
        read_reg = uclib.uc_reg_read
        three = struct.Struct("<3Q")

        def on_trap(_uch, _intno, _data):  # entry: hijack the return address
            off = win[W_RSP] - base
            ris.append(u64.unpack_from(mem, off)[0])
            u64.pack_into(mem, off, XOL_PAGE)

        def on_syscall(_uch, _data):  # sys_uretprobe
            ip = win[W_RIP] + 2
            if ip != check:
                raise EmuError("syscall outside the trampoline")
            off = win[W_RSP] - base
            _r11, cx, ax = three.unpack_from(mem, off)
            ris_top = ris.pop()
            sites[site](None)  # the return consumer
            three.pack_into(mem, off, _r11, cx, ris_top)
            read_reg(uc._uch, X.UC_X86_REG_EFLAGS, ctypes.byref(flags))
            win[W_RAX], win[W_RCX], win[W_R11] = ax, ip, flags.value

        keep += [_INTR_CB(on_trap), _SYSCALL_CB(on_syscall)]
        _add_native_hook(uc, UC_HOOK_INTR, keep[0])
        _add_native_hook(uc, UC_HOOK_INSN, keep[1], ctypes.c_int(X.UC_X86_INS_SYSCALL))
    return keep


def bare_run(file, loop: int, n: int, mode: str = "none") -> float:
    """Seconds for ``n`` iterations of the bench guest's loop on a bare Uc.  ``mode``:
    ``none`` (no hook), ``int3`` (nop loop, the nop replaced by int3, an empty
    UC_HOOK_INTR through the binding), ``int3-native`` (the same with the empty callback
    registered natively, as the machine registers its trap hooks: the floor of any
    Python trap handler), ``code-hook`` (the nop loop unchanged, a one-address
    UC_HOOK_CODE on the nop calling an empty Python function: Qiling's
    ``hook_address``, a probe without any semantics), ``syscall`` (an empty
    UC_HOOK_INSN on syscall); the ``floor-*`` modes of :data:`FLOORS` are the hand-inlined
    probe hits (:func:`_floor_hooks`), checked to run one consumer per iteration and to
    give the guest's rbp back."""
    if mode not in MODES and mode not in FLOORS:
        raise EmuError(f"unknown baseline mode {mode!r} ({', '.join(MODES + tuple(FLOORS))})")
    int3 = mode in ("int3", "int3-native")
    stack = (ctypes.c_uint8 * STACK_SIZE)() if mode in FLOORS else None
    if mode in FLOORS:
        loop, target = FLOORS[mode]
        uc = _bare_uc(file, target, stack)
    else:
        uc = _bare_uc(file, "uprobe_target_nop" if int3 else None)
    keep: object = None  # what must outlive the run: the native callbacks
    hits = [0]
    if int3:
        loop = 2
    if mode in FLOORS:

        def count(_ctx):
            hits[0] += 1

        keep = _floor_hooks(uc, mode, file.elf.resolve(FLOORS[mode][1]).value, stack, count)
    elif mode == "int3":
        uc.hook_add(UC_HOOK_INTR, lambda uc, intno, data: None)
    elif mode == "int3-native":
        keep = native = _INTR_CB(_empty_hook)
        handle = ctypes.c_size_t()
        if uclib.uc_hook_add(
            uc._uch,
            ctypes.byref(handle),
            UC_HOOK_INTR,
            ctypes.cast(native, ctypes.c_void_p),
            None,
            ctypes.c_uint64(1),
            ctypes.c_uint64(0),
        ):
            raise EmuError("cannot add the native interrupt hook")
    elif mode == "code-hook":
        site = file.elf.resolve("uprobe_target_nop").value
        uc.hook_add(UC_HOOK_CODE, _empty_hook, None, site, site)
        loop = 2
    elif mode == "syscall":
        uc.hook_add(UC_HOOK_INSN, lambda uc, data: None, None, 1, 0, X.UC_X86_INS_SYSCALL)
    done = file.elf.resolve("bench_done").value
    sp = STACK_TOP - 0x100
    uc.mem_write(sp, done.to_bytes(8, "little"))
    uc.reg_write(X.UC_X86_REG_RSP, sp)
    uc.reg_write(X.UC_X86_REG_R12, n)
    uc.reg_write(X.UC_X86_REG_R14, loop)
    uc.reg_write(X.UC_X86_REG_RBP, _RBP_MARK)  # callee-saved: the loop must give it back
    start = file.elf.resolve("dispatch").value
    t0 = time.perf_counter()
    uc.emu_start(start, done)
    dt = time.perf_counter() - t0
    del keep  # the native callback outlived the run
    if uc.reg_read(X.UC_X86_REG_R12) != 0:
        raise EmuError("bare Unicorn baseline did not complete its loop")
    if mode in FLOORS and hits[0] != n:
        raise EmuError(f"{mode}: {hits[0]} consumer calls for {n} iterations")
    if uc.reg_read(X.UC_X86_REG_RBP) != _RBP_MARK:
        raise EmuError(f"{mode}: rbp not preserved across the loop (a push or pop went wrong)")
    return dt


# ----------------------------------------------------------------------------- per-unit engine costs

_CODE_PAGE = 0x400000
_ADD_RAX_1 = b"\x48\x83\xc0\x01"  # add rax, 1
_JMP_NEXT = b"\xeb\x00"  # jmp to the next instruction: ends the block
_NOP2 = b"\x66\x90"  # a two-byte nop: the same count, one block
_LOOP_TAIL = b"\x48\xff\xc9"  # dec rcx (jnz back appended)
BLOCKS_PER_ITERATION = 64


def _loop_code(body: bytes) -> bytes:
    """``top: body; dec rcx; jnz top`` at _CODE_PAGE, then the stop address."""
    code = body + _LOOP_TAIL
    rel = -(len(code) + 6)
    return code + b"\x0f\x85" + struct.pack("<i", rel)


def _timed_loop(code: bytes, n: int, hook=None) -> float:
    """Seconds of ``n`` iterations of ``code`` (:func:`_loop_code`) on a bare Uc with no
    hook but ``hook`` (a native syscall callback)."""
    uc = Uc(UC_ARCH_X86, UC_MODE_64)
    uc.mem_map(_CODE_PAGE, 0x1000, UC_PROT_READ | UC_PROT_EXEC)
    uc.mem_write(_CODE_PAGE, code)
    keep = None
    if hook is not None:
        keep = _SYSCALL_CB(hook)
        _add_native_hook(uc, UC_HOOK_INSN, keep, ctypes.c_int(X.UC_X86_INS_SYSCALL))
    uc.reg_write(X.UC_X86_REG_RCX, 1)  # translate once, untimed
    uc.emu_start(_CODE_PAGE, _CODE_PAGE + len(code))
    uc.reg_write(X.UC_X86_REG_RCX, n)
    t0 = time.perf_counter()
    uc.emu_start(_CODE_PAGE, _CODE_PAGE + len(code))
    dt = time.perf_counter() - t0
    del keep
    if uc.reg_read(X.UC_X86_REG_RCX) != 0:
        raise EmuError("bare Unicorn unit-cost loop did not complete")
    return dt


def block_loops(n: int) -> tuple[float, float]:
    """(seconds, seconds) of ``n`` iterations of two hook-free loops with the same
    instructions: BLOCKS_PER_ITERATION ``add; jmp next`` blocks, and the same adds with
    a two-byte nop for each jmp in one block.  Their difference over
    ``n * BLOCKS_PER_ITERATION`` is what the engine pays per translated block
    executed (the block's entry and exit through Unicorn's loop, not the instructions)."""
    chained = _loop_code((_ADD_RAX_1 + _JMP_NEXT) * BLOCKS_PER_ITERATION)
    straight = _loop_code((_ADD_RAX_1 + _NOP2) * BLOCKS_PER_ITERATION)
    return _timed_loop(chained, n), _timed_loop(straight, n)


def syscall_hook_loop(n: int) -> float:
    """Seconds of ``n`` iterations of ``mov eax, 39; syscall`` on a bare Uc whose
    syscall hook is an empty callback registered natively, as the machine registers its
    own: the floor of a syscall round trip through any Python model."""
    return _timed_loop(_loop_code(b"\xb8\x27\x00\x00\x00\x0f\x05"), n, _empty_hook)
