"""The engine on Unicorn: one Unicorn instance per address space, the native trap
hooks, ``emu_start``/``emu_stop``, translated blocks, and the code and memory hooks of
the front ends.

It hides the Unicorn quirks the rest of the project must not know about: translated
blocks that survive ``mem_write`` (see ``Memory.text_poke``), the ``syscall`` hook's
rip that Unicorn advances by 2 after the hook returns, Unicorn's ``syscall`` that
clobbers neither rcx nor r11, ``hlt`` that ends ``emu_start`` silently, ``pause`` that
raises no single-step #DB, and the binding's per-call cost (the trap hooks are native
ctypes callbacks; a trap reads rip and TF, the other registers only when asked for -
the general ones in the CPU state itself, see ``emu.engine.regfile`` - and writes back
only what changed).

Hooks installed: interrupts (page faults included: guest memory is paged, see
:mod:`emu.engine.mmu`; no memory hook, which would keep every store on Unicorn's slow
path), invalid instructions, and the ``syscall``, ``in`` and ``out`` instructions - none
of them runs per instruction; once several tasks share the CPU, a native block hook
counts their time slices
(:class:`emu.engine.quantum.BlockQuantum`, no Python per block).  Traps go to the one
:class:`emu.engine.interface.TrapHandler` and execution continues in the same
``emu_start``; only the end of the run (exit, fatal signal, stop request) leaves it.
"""

from __future__ import annotations

import ctypes
import weakref

from unicorn import (
    UC_ARCH_X86,
    UC_HOOK_CODE,
    UC_HOOK_INSN,
    UC_HOOK_INSN_INVALID,
    UC_HOOK_INTR,
    UC_HOOK_MEM_READ,
    UC_HOOK_MEM_WRITE,
    UC_MODE_64,
    UcError,
)
from unicorn import (
    unicorn_const as UCC,
)
from unicorn import (
    x86_const as X,
)
from unicorn.unicorn_py3.unicorn import Uc as Uc  # re-exported: the machine names the engine type by it
from unicorn.unicorn_py3.unicorn import uclib  # Uc: see emu.engine.regfile

from emu.engine import mmu
from emu.engine.fpu import FpuUnit
from emu.engine.interface import INVALID_OPCODE, REGISTERS_STORED, Engine, TrapHandler
from emu.engine.memhook import PagedMemHook
from emu.engine.memory import Memory
from emu.engine.quantum import BlockQuantum, emu_counter, refund_instruction
from emu.engine.regfile import W_EFLAGS, W_RIP, RegisterFile, SnapshotReader
from kernel_model.arch.x86.ptrace import TF
from kernel_model.errors import InputError
from kernel_model.mm.mm_types import GuestFault
from kernel_model.mm.page_alloc import PhysicalMemory

_LEGACY_PREFIXES = frozenset((0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x66, 0x67, 0xF0, 0xF2, 0xF3))

# emu_start's "until": a non-canonical address no guest can reach.
_NEVER = 0xDEAD_BEEF_0000_0000


_CODE_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_void_p)
# uc_cb_hookintr_t / uc_cb_insn_syscall_t: the trap hooks, registered natively (the
# binding's per-callback wrapper costs about as much as the trap itself)
_INTR_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p)
_SYSCALL_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


def _uc_reg_id(name: str) -> int:
    rid = getattr(X, "UC_X86_REG_" + name.upper(), None)
    if rid is None:
        raise InputError(f"unknown register {name!r}")
    return rid


class Hook:
    """A handle of a front end's code or memory hook (see :meth:`Cpu.add_code_hook`)."""

    __slots__ = ("uc", "handle", "fptr", "begin", "end", "binding", "thunk")
    checkpoint_by_reference = True

    def __init__(self, uc, handle, fptr, begin: int, end: int, binding: bool = False):
        self.uc, self.handle, self.fptr = uc, handle, fptr
        self.begin, self.end, self.binding = begin, end, binding
        self.thunk = None


# what add_code_hook / add_mem_hook return and remove_hook takes
HookHandle = Hook | PagedMemHook


class Cpu(Engine):
    """The one CPU of a machine, on Unicorn (see the module docstring).

    The instruction clock: ``icount`` counts the instructions retired by counted runs
    and steps; inside a counted ``emu_start`` (``emu_count`` > 0) the instructions so
    far are read from Unicorn's own counter (:meth:`insn_clock`)."""

    checkpoint_keep = ("fpu", "_live_hooks", "_retired_thunks", "tb_mode", "ram", "_ucs", "fault_retry")

    quantum: BlockQuantum
    handler: TrapHandler  # set_trap_handler, before the first address space

    def __init__(self) -> None:
        self.fpu = FpuUnit()  # XSAVE images of the tasks' FPU state
        self.ram = PhysicalMemory()  # the machine's RAM, physical memory of every instance
        self._ucs: weakref.WeakSet[Uc] = weakref.WeakSet()  # the live instances (each maps every zone)
        self.ram.zone_listeners.append(self._map_zone)
        self.ram.on_recycle = self._drop_all_translations
        self.quantum = BlockQuantum()  # the time slice, counted natively in blocks
        self.handler = None  # type: ignore[assignment]  # until set_trap_handler
        self.running = False  # inside emu_start
        self.in_step = False  # a single step: a hook added then does not restart
        self.stopped_by_hook = False
        self.hook_error: BaseException | None = None
        self.pending_fault: tuple[str, int] | None = None
        self.tb_mode: tuple[Uc, str] | None = None  # (uc, "step" | "free"): see translation_mode
        self._retired_thunks: list = []  # ctypes callbacks of removed hooks (see remove_hook)
        self._live_hooks: set = set()
        self.icount = 0  # instructions retired by counted runs and steps
        self.emu_base = 0  # icount when the current emu_start began
        self.emu_count = 0  # that emu_start's count (0: not counted)
        self.in_code_hook = False  # a front end's code or memory hook is running
        self.stop_precounted = False  # it stopped the CPU before its instruction ran
        self.emu_uc = None  # the Unicorn instance of the last emu_start
        # (rip, code hook thunks) after a handled page fault: the faulting instruction runs
        # again, and each hook that saw it once must not see it twice
        self.fault_retry: tuple | None = None

    def set_trap_handler(self, handler: TrapHandler) -> None:
        self.handler = handler

    # ------------------------------------------------------------------ address spaces
    def new_space(self, counters, limit) -> tuple[Uc, Memory, RegisterFile]:
        """An empty address space: its own Unicorn instance with the trap hooks and the
        FPU in its initial state (fpstate_init: FCW 0x37f, MXCSR 0x1f80)."""
        uc = Uc(UC_ARCH_X86, UC_MODE_64)
        for zone in self.ram.zones:
            mmu.map_ram(uc, zone)
        # The machine's state of an instance rides on it as uemu_* attributes (a Uc has a
        # __dict__): what its hooks and the checkpoint find from the instance alone.
        uc.uemu_ram = self.ram  # type: ignore[attr-defined]  # the RAM outlives every instance
        self._ucs.add(uc)
        mem = Memory(uc, counters, limit, self.ram)
        uc.uemu_mem = weakref.ref(mem)  # type: ignore[attr-defined]  # the mm whose tables it walks
        regfile = RegisterFile(uc)
        mem.release_listeners.append(regfile.release)  # no register access into a closed CPU
        self._install_hooks(uc, regfile)
        self.fpu.init(uc)
        return uc, mem, regfile

    def _code_hooks_retry(self, uc) -> None:
        """The instruction a handled fault interrupted runs again: the front ends'
        code hooks that cover it have seen it already (Unicorn calls them again)."""
        if not self._live_hooks:
            return
        rip = uc.reg_read(X.UC_X86_REG_RIP)
        thunks = {
            h.thunk
            for h in self._live_hooks
            if h.thunk is not None and h.uc is uc and (h.begin > h.end or h.begin <= rip <= h.end)
        }
        self.fault_retry = (rip, thunks) if thunks else None

    def _map_zone(self, zone) -> None:
        for uc in list(self._ucs):
            if uc._uch is not None:
                mmu.map_ram(uc, zone)

    def _drop_all_translations(self) -> None:
        """Freed frames that held code are about to be reused: no instance may keep
        translations of them (the translation cache is indexed by frame)."""
        for uc in list(self._ucs):
            mmu.flush_tb(uc)

    def closed(self, uc) -> bool:
        """Is ``uc`` closed (its address space released)?"""
        return uc._uch is None

    def adopt_space(self, mem: Memory) -> tuple[Uc, RegisterFile]:
        """A released address space comes back (a checkpoint restored): a new
        Unicorn instance, with the trap hooks, behind the same Memory."""
        uc, unused, regfile = self.new_space(mem.counters, mem.limit)
        mem.adopt(uc)
        unused.pt.release()  # its empty Memory is not used (after the adopt:
        uc.uemu_mem = weakref.ref(mem)  # type: ignore[attr-defined]  # (the RAM has a user throughout)
        mem.release_listeners.append(regfile.release)
        return uc, regfile

    def _install_hooks(self, uc, regfile: RegisterFile) -> None:
        """The trap hooks.  Interrupts and ``syscall`` are registered natively, once per
        Unicorn instance, with the callbacks kept alive on the instance; they call the
        trap handler's methods bound once here.  An int3 with TF clear at an address
        the kernel gave a fast path (:meth:`set_breakpoint_fast_path`) goes to that
        first: rip and eflags are read from the CPU state in place, and the resume
        address it returns is stored there."""
        h = self.handler
        int3, debug, interrupt, syscall = h.exc_int3, h.exc_debug, h.exc_interrupt, h.do_syscall_64
        page_fault, cr2, quantum = h.exc_page_fault, mmu.fault_address, self.quantum
        pf_error, delivered, is_int = mmu.error_code, mmu.exception_delivered, mmu.exception_is_int
        general_protection = h.exc_general_protection
        access_fault = h.trap_access_fault
        failed = self.trap_failed
        fast: dict = {}  # breakpoint address -> fast path (see set_breakpoint_fast_path)
        uc.uemu_fast_int3 = fast
        win = regfile.window
        uc.uemu_fast_ok = win is not None  # the fast paths read and store rip in place

        def on_interrupt(_uch, intno, _data):
            try:  # vectors as plain ints: Vector.BP, Vector.DB
                if intno == 3:
                    if fast:
                        site = fast.get(win[W_RIP] - 1)
                        if site is not None and not win[W_EFLAGS] & TF:
                            ip = site()
                            if ip is not None:
                                if ip != REGISTERS_STORED:
                                    win[W_RIP] = ip
                                return
                    int3(uc)
                elif intno == 14:
                    delivered(uc)
                    if page_fault(uc, cr2(uc), pf_error(uc)):
                        refund_instruction(uc)
                        quantum.refund()
                        self._code_hooks_retry(uc)
                elif intno == 1:
                    debug(uc)
                else:
                    delivered(uc)  # #DE, #GP: no double fault for the next one
                    if intno == 13 and not is_int(uc):
                        general_protection(uc)
                    else:
                        interrupt(uc, intno)
            except GuestFault as e:
                access_fault(e, intno == 3)
            except BaseException as e:  # noqa: BLE001 - re-raised in run()
                failed(e, uc)

        def on_syscall(_uch, _data):
            try:
                syscall()
            except GuestFault as e:
                access_fault(e, False)
            except BaseException as e:  # noqa: BLE001 - re-raised in run()
                failed(e, uc)

        native = (_INTR_CB(on_interrupt), _SYSCALL_CB(on_syscall))
        for kind, fptr, extra in (
            (UC_HOOK_INTR, native[0], ()),
            (UC_HOOK_INSN, native[1], (ctypes.c_int(X.UC_X86_INS_SYSCALL),)),
        ):
            handle = ctypes.c_size_t()
            status = uclib.uc_hook_add(
                uc._uch,
                ctypes.byref(handle),
                kind,
                ctypes.cast(fptr, ctypes.c_void_p),
                None,
                ctypes.c_uint64(1),
                ctypes.c_uint64(0),
                *extra,
            )
            if status:
                raise UcError(status)
        uc.uemu_native_hooks = native
        uc.hook_add(UC_HOOK_INSN_INVALID, self._on_insn_invalid)
        uc.hook_add(UC_HOOK_INSN, self._on_port_io, None, 1, 0, X.UC_X86_INS_IN)
        uc.hook_add(UC_HOOK_INSN, self._on_port_io, None, 1, 0, X.UC_X86_INS_OUT)

    def _on_insn_invalid(self, uc, _data):
        self.pending_fault = (INVALID_OPCODE, 0)
        return False

    def _on_port_io(self, uc, *args):
        try:
            self.handler.exc_port_io()
        except GuestFault as e:
            self.handler.trap_access_fault(e, False)
        except BaseException as e:  # noqa: BLE001 - re-raised in run()
            self.trap_failed(e, uc)
        return 0

    def trap_failed(self, err: BaseException, uc) -> None:
        """Python errors inside Unicorn callbacks are kept and re-raised after
        emu_start returns (Unicorn would otherwise swallow them)."""
        self.hook_error = err
        uc.emu_stop()

    # ------------------------------------------------------------------ running
    def start(self, uc, rip: int, timeout: float | None, count: int, blocks: int | None = None) -> bool:
        """One emu_start for at most ``count`` instructions (0: no limit) and ``blocks``
        translated blocks (None: no limit); True when a fault or a hook's
        :meth:`stop` ended it (a fault goes to the trap handler's ``exc_fault``).
        ``timeout`` (seconds; None or 0: none) becomes Unicorn's timeout, which starts
        a timer thread for the call (~0.1 ms): the scheduler passes one only for a
        start nothing else bounds, and checks its deadline between the others."""
        self.stopped_by_hook = False
        self.stop_precounted = False
        self.quantum.arm(blocks)
        self.emu_uc = uc
        self.running = True
        mmu.exception_delivered(uc)  # see there: the last emu_start's end left one
        self.fault_retry = None
        try:
            uc.emu_start(rip, _NEVER, timeout=int(timeout * 1_000_000) if timeout else 0, count=count)
        except UcError:
            self.running = False
            kind, addr = self.pending_fault or (INVALID_OPCODE, 0)
            self.pending_fault = None
            self.handler.exc_fault(kind, addr)
            return True
        finally:
            self.running = False
        return self.stopped_by_hook

    def stop(self, uc) -> None:
        self.stopped_by_hook = True
        uc.emu_stop()

    def emu_stop(self, uc) -> None:
        uc.emu_stop()

    def raise_hook_error(self) -> None:
        if self.hook_error is not None:
            err, self.hook_error = self.hook_error, None
            raise err

    def hook_failed(self, err: BaseException, uc) -> None:
        """A front end's hook raised: stop the guest; run()/step() re-raise ``err``."""
        if self.hook_error is None:
            self.hook_error = err
        self.stop(uc)

    def insns_run(self, count: int, stopped_early: bool, uc) -> int:
        """Instructions the last ``emu_start(count=...)`` executed, also when a hook
        ended it early (the budget is charged for every one of them)."""
        if not count:
            return 0
        # the counter of the instance the emu_start ran on: an execve inside it has
        # given the process a new one (the old lives until Unicorn has left it)
        ran = emu_counter(self.emu_uc if self.emu_uc is not None and self.emu_uc._uch else uc)
        if ran is None:
            return count if not stopped_early else 1  # at least the trapping insn
        ran = min(ran, count)
        if self.stop_precounted and not self.running:
            ran -= 1  # a code hook stopped before its instruction
        return max(0 if self.stop_precounted else 1, ran)

    def insn_clock(self, uc) -> int:
        """The instruction clock now: :attr:`icount` plus, inside a counted emu_start
        (a hook is running), the instructions of it so far, the current one included."""
        if self.running and self.emu_count:
            return self.emu_base + self.insns_run(self.emu_count, True, uc)
        return self.icount

    def timed_out(self, uc) -> bool:
        return bool(uc.query(UCC.UC_QUERY_TIMEOUT))

    def flush(self, uc) -> None:
        uc.ctl_flush_tb()
        uc.uemu_fast_int3.clear()

    def set_breakpoint_fast_path(self, uc, vaddr: int, handler) -> bool:
        if self.closed(uc) or not uc.uemu_fast_ok:
            return False
        uc.uemu_fast_int3[vaddr] = handler
        return True

    def breakpoint_fast_path(self, uc, vaddr: int):
        return uc.uemu_fast_int3.get(vaddr)

    def clear_breakpoint_fast_path(self, uc, vaddr: int) -> None:
        uc.uemu_fast_int3.pop(vaddr, None)

    def translation_mode(self, uc, mode: str) -> None:
        """Unicorn counts instructions (``count=``) with a hook that a translated block
        calls only if it was translated while counting: blocks of a free run would let
        a single step run on, and blocks of single steps call the counting hook on
        every instruction of a later run.  Drop the translations when switching
        between single steps and runs (a run after runs keeps them)."""
        if mode == "run" and (self.tb_mode is None or self.tb_mode[1] != "step"):
            return
        key = (uc, mode)
        if self.tb_mode != key and (mode == "step" or self.tb_mode is not None):
            uc.ctl_flush_tb()
        self.tb_mode = key

    # ------------------------------------------------------------------ registers
    def pc(self, uc) -> int:
        return uc.reg_read(X.UC_X86_REG_RIP)

    def reg_read(self, uc, name: str) -> int:
        return uc.reg_read(_uc_reg_id(name))

    def reg_write(self, uc, name: str, value: int) -> None:
        uc.reg_write(_uc_reg_id(name), value)

    def context_save(self, uc):
        return uc.context_save()

    def context_restore(self, uc, context) -> None:
        """Put a saved CPU state back; CR3 stays that of the address space ``uc`` walks
        now (a context saved before that space was released and revived names page
        tables that are gone)."""
        uc.context_restore(context)
        ref = getattr(uc, "uemu_mem", None)
        mem = ref() if ref is not None else None
        if mem is not None and mem.pt is not None and uc.reg_read(X.UC_X86_REG_CR3) != mem.pt.pgd:
            mmu.set_cr3(uc, mem.pt.pgd)

    def context_reg_read(self, context, name: str) -> int:
        return context.reg_read(_uc_reg_id(name))

    def snapshot_reader(self, uc) -> SnapshotReader:
        return SnapshotReader(uc)

    # ------------------------------------------------------------------ decoding
    def skips_tf_trap(self, mem, rip: int) -> int:
        """Unicorn ends the translation block at ``pause`` (opcode 90 with an f3 prefix,
        any other legacy prefixes and a REX without REX.B) without raising the
        single-step #DB that TF asks for; the CPU would trap right after it.  Returns
        the pause's length, or 0."""
        try:
            first = mem.read_byte(rip)
            if first not in _LEGACY_PREFIXES:
                return 0  # a pause starts with a legacy prefix (f3)
            code = mem.read(rip, 15)
        except GuestFault:
            return 0
        rep = False
        i = 0
        while i < 14 and code[i] in _LEGACY_PREFIXES:
            rep |= code[i] == 0xF3
            i += 1
        if 0x40 <= code[i] <= 0x4F:
            if code[i] & 1:
                return 0  # REX.B 90 is xchg %r8,%rax
            i += 1
        return i + 1 if rep and code[i] == 0x90 else 0

    def is_hlt(self, mem, rip: int) -> bool:
        try:
            code = mem.read(rip, 15)
        except GuestFault:
            return False
        i = 0
        while i < 14 and code[i] in _LEGACY_PREFIXES:
            i += 1
        return code[i] == 0xF4

    def hlt_before(self, mem, rip: int, count: int) -> bool:
        """Did emu_start stop on a ``hlt`` just before ``rip``?  Unicorn halts silently.

        With one task (``count`` 0 here) an 0xf4 byte before rip is taken as a hlt: the
        budget ending right after an instruction whose last byte is 0xf4 is far less
        likely than a hlt; so it is with block slices, whose end is known exactly.
        Instruction-count slices (``count``, also the budget with several tasks) expire
        often, so there the byte only counts as a hlt when no instruction of 2..15 bytes
        can end at rip (``mov %rsi,%r12`` is ``49 89 f4``)."""
        if mem.read(rip - 1, 1) != b"\xf4":
            return False
        if not count:
            return True
        from capstone import CS_ARCH_X86, CS_MODE_64, Cs  # only here: a run does not load it

        cs = Cs(CS_ARCH_X86, CS_MODE_64)
        for k in range(2, 16):
            try:
                code = mem.read(rip - k, k)
            except GuestFault:
                continue
            insn = next(cs.disasm(code, rip - k, 1), None)
            if insn is not None and insn.size == k:
                return False
        return True

    # ------------------------------------------------------------------ front ends' hooks
    def add_code_hook(self, uc, fn, begin: int, end: int) -> Hook:
        """Call ``fn(address, size)`` before each instruction in [begin, end] (begin >
        end: everywhere) of ``uc``.  Unicorn decides at translation time which
        instructions call a hook, so the translations of the range are dropped now,
        and a hook added while the guest runs ends the current emu_start (the run
        resumes at once, with the hook in every block).

        ``fn`` may instead take the native callback's four arguments ``(handle,
        address, size, user_data)`` when it has a true ``native`` attribute; it must
        then catch its own errors and report them with :meth:`hook_failed`."""
        if getattr(fn, "native", False):
            thunk = fn
        else:

            def thunk(_handle, address, size, _user_data):
                retry = self.fault_retry
                if retry is not None and address == retry[0] and thunk in retry[1]:
                    retry[1].discard(thunk)  # the instruction a handled fault re-runs
                    return
                self.in_code_hook = True
                try:
                    fn(address, size)
                except BaseException as e:  # noqa: BLE001 - re-raised by run()/step()
                    self.hook_failed(e, uc)
                finally:
                    self.in_code_hook = False

        fptr = _CODE_CB(thunk)
        handle = ctypes.c_size_t()
        status = uclib.uc_hook_add(
            uc._uch,
            ctypes.byref(handle),
            UC_HOOK_CODE,
            ctypes.cast(fptr, ctypes.c_void_p),
            None,
            ctypes.c_uint64(begin),
            ctypes.c_uint64(end),
        )
        if status:
            raise UcError(status)
        hook = Hook(uc, handle.value, fptr, begin, end)
        hook.thunk = thunk
        self._live_hooks.add(hook)  # the native thunk lives as long as the hook
        self._flush_range(uc, begin, end)
        return hook

    def add_mem_hook(self, uc, fn, begin: int, end: int, access: str) -> PagedMemHook:
        """Call ``fn(access, address, size, value)`` for each guest data access of kind
        ``access`` ("write" or "read") in [begin, end] (begin > end: everywhere)."""
        kind = {"write": UC_HOOK_MEM_WRITE, "read": UC_HOOK_MEM_READ}.get(access)
        if kind is None:
            raise InputError(f"memory hook access must be 'read' or 'write', not {access!r}")

        def cb(address, size, value):
            # a stop asked for here leaves the instruction to run again (Unicorn
            # restarts it on resume): like a code hook's, it has not run
            self.in_code_hook = True
            try:
                fn(access, address, size, value)
            finally:
                self.in_code_hook = False

        hook = PagedMemHook(uc, uc.uemu_mem(), kind, begin, end, cb)
        self._live_hooks.add(hook)
        self._flush_range(uc, 1, 0)  # translations made without a memory hook skip it
        return hook

    def remove_hook(self, hook: HookHandle) -> None:
        """Remove a hook of :meth:`add_code_hook` / :meth:`add_mem_hook` (idempotent)."""
        if hook.handle is None or hook.uc is None:
            return
        if hook.uc._uch is None:  # its address space is gone (exit, exec)
            self._live_hooks.discard(hook)
            hook.handle = None
            return
        if isinstance(hook, PagedMemHook):
            hook.remove()
        elif hook.binding:
            hook.uc.hook_del(hook.handle)
        else:
            uclib.uc_hook_del(hook.uc._uch, ctypes.c_size_t(hook.handle))  # type: ignore[arg-type]  # a Hook's int
            # keep the ctypes thunk alive: Unicorn may still be inside this very callback
            self._retired_thunks.append(hook.fptr)
            del self._retired_thunks[:-64]
        # a flush inside a callback leaves the running block chained to stale code: stop
        # the emu_start too (the run resumes at once), as adding a hook does
        self._flush_range(hook.uc, *((1, 0) if isinstance(hook, PagedMemHook) else (hook.begin, hook.end)))
        self._live_hooks.discard(hook)
        hook.handle = None

    def hooked(self, mem: Memory) -> bool:
        """Does a front end's hook still hold ``mem``'s address space?"""
        return any(h.uc is mem.uc for h in self._live_hooks)

    def _flush_range(self, uc, begin: int, end: int) -> None:
        ref = getattr(uc, "uemu_mem", None)
        mem = ref() if ref is not None and begin <= end else None
        if mem is None or mem.uc is not uc:
            uc.ctl_flush_tb()
        else:
            mem.drop_translations(begin, end + 1)
        if self.running and not self.in_step and uc is self.emu_uc:
            # blocks already chained in this emu_start would not see the change
            self.stop(uc)
