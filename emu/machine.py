"""The machine: one Unicorn CPU, the process and its tasks, traps, syscalls, runs.

The machine hides every Unicorn quirk the rest of the project must not know about
(DESIGN section 3): translated blocks that survive ``mem_write`` (see ``Memory.text_poke``),
the ``syscall`` hook's rip that Unicorn advances by 2 after the hook returns, Unicorn's
``syscall`` that clobbers neither rcx nor r11, and the binding's per-call cost (the trap
hooks are native ctypes callbacks; a trap reads rip and TF, the other registers only
when asked for - the general ones in the CPU state itself, see ``emu.engine.regfile`` - and
writes back only what changed).

Hooks installed: interrupts, invalid memory, invalid instructions, and the ``syscall``,
``in`` and ``out`` instructions - none of them runs per instruction; once several tasks
share the CPU, a native block hook counts their time slices (:class:`BlockQuantum`,
no Python per block).  Traps are handled
inside the hook and execution continues in the same ``emu_start``; only the end of the
run (exit, fatal signal, stop request) leaves it.
"""

from __future__ import annotations

import ctypes
import functools
import math
import mmap
import os
import platform
import signal as host_signal
import struct
import sys
import threading
import time
import weakref

from capstone import CS_ARCH_X86, CS_MODE_64, Cs
from unicorn import (UC_ARCH_X86, UC_HOOK_BLOCK, UC_HOOK_CODE, UC_HOOK_INSN, UC_HOOK_INSN_INVALID, UC_HOOK_INTR,
                     UC_HOOK_MEM_INVALID, UC_HOOK_MEM_READ, UC_HOOK_MEM_WRITE, UC_MODE_64, Uc, UcError)
from unicorn import unicorn_const as UCC
from unicorn import x86_const as X
from unicorn.unicorn_py3.unicorn import uclib

from guest_programs import build_guest
from kernel_model.kernel.kernel import Kernel  # the modeled kernel owns traps 1/3, 335, 336

from kernel_model.trace import events as ev
from kernel_model.arch.x86.kernel import fpu
from kernel_model.arch.x86.kernel import signal as sf
from emu.asm import asm_to_elf
from emu.probes.user_api import UserUprobes
from kernel_model.kernel.counters import Counters
from kernel_model.fs.elf import image_of, link_vaddr, load_elf_file, parse_elf
from kernel_model.kernel.sys import Cred
from kernel_model.errors import GuestSignalError, InputError, SymbolError
from kernel_model.fs.binfmt_elf import file_identity, load_image
from emu.engine.memory import Memory, PageCache
from kernel_model.mm.mm_types import DEFAULT_MAX_MEMORY, GuestFault, MappedFile, MemoryLimit
from emu.engine.regfile import RegisterFile, SnapshotReader
from kernel_model.arch.x86.ptrace import TF, PtRegs
from kernel_model.kernel.sched import ALONE_SLICE, BLOCK_INSNS, MAX_SLICE, MIN_SLICE, Scheduler, check_slice
from kernel_model.kernel.signal import INSN_NS
from kernel_model.kernel.signals import SIGNALS, RunResult, signal_name
from kernel_model.arch.x86.entry.syscall_64 import SYSCALL_NAMES
from kernel_model.kernel.syscalls import Syscalls
from kernel_model.kernel.task import PendingSignal, Process, Task

_LEGACY_PREFIXES = frozenset((0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x66, 0x67, 0xF0, 0xF2, 0xF3))

# emu_start's "until": a non-canonical address no guest can reach.
_NEVER = 0xDEAD_BEEF_0000_0000
# No instruction budget by default: Unicorn's native counter is a per-instruction hook
# inside Unicorn that slows the tightest loops up to about 20-fold; the wall-clock
# timeout bounds runs.
DEFAULT_MAX_INSNS = None
SIGRTMIN = 32
EINTR = 4
# SYNCHRONOUS_MASK: SIGILL SIGTRAP SIGBUS SIGFPE SIGSEGV SIGSYS, dequeued before others
SYNCHRONOUS_SIGNALS = frozenset((4, 5, 7, 8, 11, 31))
# include/linux/errno.h: syscall results that ask arch_do_signal_or_restart to restart
ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK = 512, 513, 514, 516
NR_RESTART_SYSCALL = 219
DEFAULT_TIMEOUT = 120.0
# Bytes of each of stdout/stderr a Machine keeps (when it keeps them at all).
DEFAULT_OUTPUT_LIMIT = 16 << 20

SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGSEGV = (SIGNALS[n] for n in
                                            ("SIGILL", "SIGTRAP", "SIGBUS", "SIGFPE", "SIGSEGV"))

_MEM_ACCESS = {
    UCC.UC_MEM_READ_UNMAPPED: "read", UCC.UC_MEM_WRITE_UNMAPPED: "write",
    UCC.UC_MEM_FETCH_UNMAPPED: "fetch", UCC.UC_MEM_READ_PROT: "read",
    UCC.UC_MEM_WRITE_PROT: "write", UCC.UC_MEM_FETCH_PROT: "fetch",
}


_CODE_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_void_p)
# uc_cb_hookintr_t / uc_cb_insn_syscall_t: the trap hooks, registered natively (the
# binding's per-callback wrapper costs about as much as the trap itself)
_INTR_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p)
_SYSCALL_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


@functools.cache
def _sigbit(signo: int) -> int:
    """sigmask(): the bit of ``signo`` in a sigset."""
    return 1 << (signo - 1)


def _uc_reg_id(name: str) -> int:
    rid = getattr(X, "UC_X86_REG_" + name.upper(), None)
    if rid is None:
        raise InputError(f"unknown register {name!r}")
    return rid


class Hook:
    """A handle of :meth:`Machine.add_code_hook` / :meth:`Machine.add_mem_hook`."""

    __slots__ = ("uc", "handle", "fptr", "begin", "end", "binding")

    def __init__(self, uc, handle, fptr, begin: int, end: int, binding: bool = False):
        self.uc, self.handle, self.fptr = uc, handle, fptr
        self.begin, self.end, self.binding = begin, end, binding


def _check_limits(max_insns, timeout) -> None:
    """run()'s limits: a budget is a count >= 0, a timeout a finite number >= 0 (None
    or 0: none).  Unicorn would take nan/inf as a conversion error mid-run."""
    if max_insns is not None and (isinstance(max_insns, bool) or not isinstance(max_insns, int)
                                  or max_insns < 0):
        raise InputError(f"max_insns must be an instruction count >= 0 or None, not {max_insns!r}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not math.isfinite(timeout) or timeout < 0):
        raise InputError(f"timeout must be a finite number of seconds >= 0 or None, not {timeout!r}")


@functools.cache
def _emu_counter_offset() -> int | None:
    """Where Unicorn keeps the instruction count of the current ``emu_start``
    (``uc_struct.emu_counter``, which its ``count`` hook increments before each
    instruction).  The binding does not expose it, so it is found once by running known
    counts on a scratch instance; None if the layout is not recognised."""
    counts = (37, 101, 555)
    dumps = []
    for n in counts:
        uc = Uc(UC_ARCH_X86, UC_MODE_64)
        uc.mem_map(0x1000, 0x1000)
        uc.mem_write(0x1000, b"\x90" * 0x1000)
        uc.emu_start(0x1000, 0x2000, count=n)
        dumps.append(ctypes.string_at(uc._uch, 4096))
    for off in range(0, 4096 - 16, 8):
        if all(struct.unpack_from("<QQ", d, off) == (n + 1, n) for d, n in zip(dumps, counts)):
            return off
    return None


def instruction_counter_available() -> bool:
    """Can runs be counted exactly (reverse execution needs it)?"""
    return _emu_counter_offset() is not None


# The counter value of a disarmed quantum: never reaches zero.
_DISARMED = 1 << 62


@functools.cache
def _block_stub() -> tuple[mmap.mmap, int] | None:
    """The native block hook: ``void cb(uc, address, size, int64_t *left)``
    decrements ``*left`` and tail-calls ``uc_emu_stop(uc)`` once it is <= 0.  x86-64
    System V only (uc in rdi, user_data in rcx); None where that is not the host ABI
    or the host refuses executable memory.  The page is immutable once made."""
    if platform.machine() not in ("x86_64", "AMD64") or not sys.platform.startswith("linux"):
        return None
    stop = ctypes.cast(uclib.uc_emu_stop, ctypes.c_void_p).value
    code = (b"\x48\xff\x09"                            # dec qword ptr [rcx]
            b"\x7e\x01"                                # jle 1f
            b"\xc3"                                    # ret
            b"\x48\xb8" + struct.pack("<Q", stop) +    # 1: movabs rax, uc_emu_stop
            b"\xff\xe0")                               # jmp rax
    try:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except OSError:
        return None
    page.write(code)
    return page, ctypes.addressof(ctypes.c_char.from_buffer(page))


class BlockQuantum:
    """The time slice of the task on the CPU, in translated blocks: one native
    ``UC_HOOK_BLOCK`` per Unicorn instance (added the first time a slice runs on it)
    and one counter for all of them (one CPU).  ``arm(n)`` lets exactly n blocks run:
    the hook stops the CPU at the start of block n + 1, before it executes, so the
    task resumes there."""

    def __init__(self):
        stub = _block_stub()
        self._stub = stub[1] if stub else None
        self._left = ctypes.c_int64(_DISARMED)
        self._armed = _DISARMED
        self._hooked = weakref.WeakSet()

    @property
    def native(self) -> bool:
        """False: slices are counted by Unicorn's instruction counter instead."""
        return self._stub is not None

    def attach(self, uc) -> None:
        """Count blocks on ``uc``.  Unicorn decides at translation time which blocks
        call a block hook, so the translations made before are dropped."""
        if uc in self._hooked:
            return
        handle = ctypes.c_size_t()
        status = uclib.uc_hook_add(uc._uch, ctypes.byref(handle), UC_HOOK_BLOCK,
                                   ctypes.c_void_p(self._stub), ctypes.c_void_p(ctypes.addressof(self._left)),
                                   ctypes.c_uint64(1), ctypes.c_uint64(0))
        if status:
            raise UcError(status)
        uc.ctl_flush_tb()
        self._hooked.add(uc)

    def arm(self, blocks: int | None) -> None:
        """The next emu_start may run ``blocks`` blocks (None: no limit)."""
        self._armed = _DISARMED if blocks is None else blocks + 1
        self._left.value = self._armed

    @property
    def armed(self) -> bool:
        return self._armed != _DISARMED

    def shorten(self, blocks: int) -> None:
        """From a hook inside the running slice: let at most ``blocks`` more blocks run
        (the blocks already run still count in :meth:`ran`)."""
        if self.armed and self._left.value > blocks + 1:
            self._armed -= self._left.value - (blocks + 1)
            self._left.value = blocks + 1

    def expired(self) -> bool:
        """Did the last emu_start end because its slice was used up?"""
        return self.armed and self._left.value <= 0

    def ran(self) -> int:
        """Blocks the last emu_start executed (a block a trap ended counts)."""
        started = self._armed - self._left.value
        return started - 1 if self._left.value <= 0 else started


_FPU_CODE, _FPU_BUF = 0x10000, 0x11000
# the instructions, each at its own address (written once: no retranslation per use)
_XSAVE, _XRSTOR, _FXRSTOR = _FPU_CODE, _FPU_CODE + 16, _FPU_CODE + 32
_FPU_TEXT = {_XSAVE: b"\x48\x0f\xae\x27",     # xsave64 (%rdi)
             _XRSTOR: b"\x48\x0f\xae\x2f",    # xrstor64 (%rdi)
             _FXRSTOR: b"\x48\x0f\xae\x0f"}   # fxrstor64 (%rdi)
# the registers the scratch run uses: rdi, rax, rdx, rip, eflags
_FPU_REGS = (X.UC_X86_REG_RDI, X.UC_X86_REG_RAX, X.UC_X86_REG_RDX, X.UC_X86_REG_RIP, X.UC_X86_REG_EFLAGS)


class FpuUnit:
    """XSAVE-family instructions on a task's CPU state (:mod:`kernel_model.arch.x86.kernel.fpu`): a scratch
    Unicorn instance borrows the state (a context), executes ``xsave64`` /
    ``xrstor64`` / ``fxrstor64`` on a buffer of its own and hands the state back - the
    guest's registers other than the FPU's are left as they were.  Unicorn's XRSTOR
    does not check MXCSR's reserved bits or the header: :func:`kernel_model.arch.x86.kernel.fpu.valid_for_restore`
    does, as the hardware would."""

    def __init__(self):
        self._uc: Uc | None = None
        n = len(_FPU_REGS)
        self._ids = (ctypes.c_int * n)(*_FPU_REGS)
        self._saved = (ctypes.c_uint64 * n)()
        self._setup = (ctypes.c_uint64 * n)()
        self._saved_ptrs = (ctypes.c_void_p * n)(*[ctypes.addressof(self._saved) + 8 * i for i in range(n)])
        self._setup_ptrs = (ctypes.c_void_p * n)(*[ctypes.addressof(self._setup) + 8 * i for i in range(n)])

    def _scratch(self) -> Uc:
        if self._uc is None:
            uc = Uc(UC_ARCH_X86, UC_MODE_64)
            uc.mem_map(_FPU_CODE, 0x2000)
            for at, insn in _FPU_TEXT.items():
                uc.mem_write(at, insn)
            self._uc = uc
        return self._uc

    def _batch(self, fn, ptrs) -> None:
        status = fn(self._uc._uch, self._ids, ptrs, len(_FPU_REGS))
        if status:
            raise UcError(status)

    def _run(self, uc: Uc, at: int, rfbm: int, image: bytes | None) -> bytes:
        """Execute the instruction at ``at`` on (%rdi) = the buffer with edx:eax =
        ``rfbm`` on ``uc``'s CPU state (TF off); when ``image`` was given the state
        afterwards becomes ``uc``'s, the registers used put back.  Returns the buffer."""
        s = self._scratch()
        s.context_restore(uc.context_save())
        self._batch(uclib.uc_reg_read_batch, self._saved_ptrs)
        if image is not None:
            s.mem_write(_FPU_BUF, image)
        self._setup[:] = [_FPU_BUF, rfbm & 0xFFFFFFFF, rfbm >> 32, at, self._saved[4] & ~TF]
        self._batch(uclib.uc_reg_write_batch, self._setup_ptrs)   # no single-step trap in here
        s.emu_start(at, at + 4)
        out = bytes(s.mem_read(_FPU_BUF, fpu.USER_XSTATE_SIZE))
        if image is not None:
            self._batch(uclib.uc_reg_write_batch, self._saved_ptrs)
            uc.context_restore(s.context_save())
        return out

    def xsave(self, uc: Uc) -> bytes:
        """The 576-byte image of the user features (copy_fpregs_to_sigframe's XSAVE)."""
        self._scratch().mem_write(_FPU_BUF, bytes(fpu.USER_XSTATE_SIZE))
        return self._run(uc, _XSAVE, fpu.USER_XFEATURES, None)

    def xrstor(self, uc: Uc, image: bytes, rfbm: int) -> bool:
        """XRSTOR the components in ``rfbm`` from ``image``; False (nothing changed) when
        the instruction would #GP: a reserved MXCSR bit, XSTATE_BV bits beyond XCR0, or
        a non-zero XCOMP_BV / reserved header bytes (standard form)."""
        if not fpu.valid_for_restore(image, header=True):
            return False
        self._run(uc, _XRSTOR, rfbm & fpu.USER_XFEATURES, image)
        return True

    def fxrstor(self, uc: Uc, image: bytes) -> bool:
        """FXRSTOR the legacy region (fx-only restore); False on a reserved MXCSR bit."""
        if not fpu.valid_for_restore(image, header=False):
            return False
        self._run(uc, _FXRSTOR, 0, image[:fpu.FXSAVE_SIZE].ljust(fpu.USER_XSTATE_SIZE, b"\0"))
        return True

    def init(self, uc: Uc, features: int = fpu.USER_XFEATURES) -> None:
        """os_xrstor(&init_fpstate, features): those components to their initial state
        (fpu__clear_user_states for a handler, fpstate_init at exec)."""
        self._run(uc, _XRSTOR, features & fpu.USER_XFEATURES, fpu.init_image())

    def copy(self, src: Uc, dst: Uc) -> None:
        """fpu_clone: ``dst`` gets ``src``'s FPU registers."""
        self._run(dst, _XRSTOR, fpu.USER_XFEATURES, self.xsave(src))


class OutputBuffer(bytearray):
    """A guest stream the machine keeps: at most ``limit`` bytes (later bytes are
    counted in ``dropped``, not kept)."""

    def __init__(self, limit: int | None):
        super().__init__()
        self.limit = limit
        self.dropped = 0

    def keep(self, data: bytes) -> None:
        room = len(data) if self.limit is None else max(0, self.limit - len(self))
        self.extend(data[:room])
        self.dropped += len(data) - min(room, len(data))


class RegsView:
    """``machine.regs``: live attribute access to the current task's registers."""

    def __init__(self, machine: "Machine"):
        object.__setattr__(self, "_m", machine)

    def __getattr__(self, name):
        return getattr(self._m.read_regs(), name)

    def __setattr__(self, name, value):
        regs = self._m.read_regs()
        setattr(regs, name, value)
        self._m.write_regs(regs)

    def snapshot(self) -> PtRegs:
        return self._m.read_regs()

    def __repr__(self):
        return repr(self._m.read_regs())


class Machine:
    """An x86_64 Linux process on Unicorn with the uprobes kernel model around it.

    Build one with :meth:`from_elf`, :meth:`from_asm` or :meth:`from_guest`; then
    ``run()``, ``step()``, read ``regs``/``mem``/``counters``, and register probes with
    ``uprobes``.

    ``stdin``: bytes (fd 0 is a pipe holding them) or a host descriptor read lazily;
    ``stdio``: "pipe" (default: fds 0-2 are pipes, deterministic) or "host" (fds 1/2 are
    described as the host's own: tty, file or pipe); ``mem_total``: the RAM sysinfo
    reports (default 4 GiB).  See :mod:`kernel_model.fs.file`.
    """

    def __init__(self, *, kernel: str = "latest", stdin: bytes | int = b"", passthrough: bool = False,
                 sysroot: str = "/", grant_dirs: list[str] | tuple = (), grant_dir: str | None = None,
                 cwd: str | None = None, seed: int = 0, comm: str = "guest",
                 stdio: str = "pipe", mem_total: int | None = None,
                 max_memory: int | None = DEFAULT_MAX_MEMORY, capture_output: bool | None = None,
                 output_limit: int | None = DEFAULT_OUTPUT_LIMIT, uid: int | None = None,
                 gid: int | None = None, groups: list[int] | None = None,
                 sched_slice: tuple[int, int] = (MIN_SLICE, MAX_SLICE), **kernel_overrides):
        """``max_memory``: bytes of guest mappings over all its processes (None: no
        limit); past it mmap/brk/fork get ENOMEM and loading fails.  ``capture_output``:
        keep the guest's stdout/stderr in ``stdout``/``stderr`` (default: only when not
        passing it through), at most ``output_limit`` bytes each.  ``uid``/``gid``/
        ``groups``: the first task's credentials (default: the invoking user's; see
        :meth:`kernel_model.kernel.sys.Cred.initial`).  ``sysroot``: the host directory
        the guest sees read-only at ``/``; ``grant_dirs`` (``grant_dir``: one, an alias):
        host directories mounted writable at their own paths; ``cwd``: the guest's
        working directory (default the invoking process's when visible, else ``/``);
        see :mod:`kernel_model.fs.namei`.  ``sched_slice``: (MIN, MAX) translated blocks of a time
        slice while several tasks are runnable (see :mod:`kernel_model.kernel.sched`; short slices such
        as (1, 40) shake out races, long ones cost less)."""
        if not isinstance(sched_slice, (tuple, list)) or len(sched_slice) != 2:
            raise InputError(f"sched_slice must be (MIN, MAX) in blocks, not {sched_slice!r}")
        sched_slice = check_slice(*sched_slice)
        if max_memory is not None and max_memory <= 0:
            raise InputError(f"max_memory must be positive, not {max_memory}")
        self.counters = Counters()
        self.fpu = FpuUnit()                    # XSAVE images of the tasks' FPU state
        self.mem_limit = MemoryLimit(max_memory)
        self.page_cache = PageCache()            # one MappedFile per (st_dev, st_ino)
        self._released: list[Process] = []      # exited processes whose mm is still to free
        self._retired_mms: list[Memory] = []     # address spaces an execve left
        self.processes: list[Process] = []      # live processes (and zombies until reaped)
        self.tasks: list[Task] = []              # live tasks
        self._next_pid = 1000
        self.scheduler = Scheduler(seed, *sched_slice)
        self.quantum = BlockQuantum()            # the time slice, counted natively in blocks
        self.all_tasks: list[Task] = []
        cred = Cred.initial(uid, gid, groups)
        self.task: Task = self.new_task(self.new_process(comm=comm), cred=cred)
        self.main_process = self.task.process
        self._acct = self.counters.snapshot()
        self.passthrough = passthrough
        self.capture_output = (not passthrough) if capture_output is None else capture_output
        self.stdout = OutputBuffer(output_limit)
        self.stderr = OutputBuffer(output_limit)
        self.symbols: dict[str, int] = {}
        if isinstance(grant_dirs, str):
            grants = [grant_dirs]
        elif isinstance(grant_dirs, (list, tuple)):
            grants = list(grant_dirs)
        else:
            raise InputError(f"grant_dirs must be a list of directories, not {grant_dirs!r}")
        if grant_dir is not None:
            grants.append(grant_dir)
        self.syscalls = Syscalls(self, stdin=stdin, sysroot=sysroot, grant_dirs=grants, cwd=cwd,
                                 seed=seed, stdio=stdio, mem_total=mem_total)
        self.events = ev.EventBus()     # the typed event stream (kernel_model.trace.events)
        self.kernel = Kernel(self, kernel, **kernel_overrides)
        self._result: RunResult | None = None
        self._pending_fault: tuple[str, int] | None = None
        self._stop_requested: str | None = None
        self._sigint: str | None = None          # set by interruptible() on Ctrl-C
        self.exited = False
        self.last_result: RunResult | None = None
        self._hook_error = None
        self._switch_requested = False
        self._stopped_by_hook = False
        self._in_syscall = False
        self._run_deadline: float | None = None    # the wall-clock end of the current run()
        self._db_after_syscall: tuple | None = None   # (task, rip): see _syscall
        self._running = False            # inside emu_start
        self._in_step = False            # inside step(): a hook added then does not restart
        self._tb_mode = None             # (uc, "step" | "free"): see _translation_mode
        self._retired_thunks: list = []  # ctypes callbacks of removed hooks (see remove_hook)
        self._live_hooks: set = set()
        # reverse execution (emu.replay.checkpoint): the instruction clock and the recorder
        self.icount = 0                  # instructions retired by counted runs and steps
        self.recorder = None             # an emu.replay.checkpoint.Recorder drives run()/step()
        self._emu_base = 0               # icount when the current emu_start began
        self._emu_count = 0              # that emu_start's count (0: not counted)
        self._in_code_hook = False       # a front end's code or memory hook is running
        self._stop_precounted = False    # it stopped the CPU before its instruction ran
        self._emu_uc = None              # the Unicorn instance of the last emu_start
        self._slice_carry = None         # (task, insns left, insns run): see run()

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_elf(cls, path: str, argv: list[str] | None = None, env: list[str] | None = None,
                 **kw) -> "Machine":
        image = load_elf_file(path)
        m = cls(comm=os.path.basename(path)[:15], **kw)
        dev, ino, d_path = file_identity(path)
        load_image(m, image, MappedFile(path, image.data, image, dev=dev, ino=ino, d_path=d_path),
                   argv or [path], env)
        return m

    @classmethod
    def from_bytes(cls, data: bytes, path: str, argv: list[str] | None = None,
                   env: list[str] | None = None, **kw) -> "Machine":
        image = parse_elf(data, path)
        m = cls(comm=os.path.basename(path)[:15], **kw)
        load_image(m, image, MappedFile(path, image.data, image), argv or [path], env)
        return m

    @classmethod
    def from_asm(cls, source: str, *, path: str = "asm-guest", argv: list[str] | None = None,
                 **kw) -> "Machine":
        elf, _ = asm_to_elf(source)
        return cls.from_bytes(elf, path, argv=argv, **kw)

    @classmethod
    def from_guest(cls, name: str, argv: list[str] | None = None, **kw) -> "Machine":
        elf, path = build_guest(name)
        return cls.from_bytes(elf, path, argv=argv or [path], **kw)

    @classmethod
    def from_program(cls, program: str, argv: list[str] | None = None, **kw) -> "Machine":
        """A CLI PROGRAM: ``guest:NAME`` or a path to an ELF (static, or dynamic with its
        interpreter in the sysroot)."""
        if program.startswith("guest:"):
            return cls.from_guest(program[len("guest:"):], argv=argv, **kw)
        return cls.from_elf(program, argv=argv, **kw)

    # ------------------------------------------------------------------ processes and tasks
    @property
    def process(self) -> Process:
        """The process of the task on the CPU."""
        return self.task.process

    @property
    def uc(self) -> Uc:
        return self.task.process.uc

    @property
    def mem(self) -> Memory:
        return self.task.process.mem

    @property
    def regfile(self) -> RegisterFile:
        return self.task.process.regfile

    def new_process(self, *, comm: str = "guest", share_mm: Process | None = None,
                    parent: Process | None = None) -> Process:
        """A process with its own address space (one Unicorn instance), or sharing
        ``share_mm``'s (vfork)."""
        pid = self._alloc_pid()
        if share_mm is not None:
            uc, mem, regfile = share_mm.uc, share_mm.mem, share_mm.regfile
        else:
            uc, mem, regfile = self.new_mm()
        proc = Process(pid=pid, mem=mem, comm=comm, uc=uc, regfile=regfile, parent=parent,
                       ppid=parent.pid if parent else 1, counters=Counters())
        if share_mm is not None:
            proc.mm_uprobes = share_mm.mm_uprobes
            proc.mm_owner = share_mm
        self.processes.append(proc)
        if parent is not None:
            parent.children.append(proc)
        return proc

    def new_mm(self) -> tuple[Uc, Memory, RegisterFile]:
        """An empty address space: its own Unicorn instance with the machine's hooks
        and the FPU in its initial state (fpstate_init: FCW 0x37f, MXCSR 0x1f80)."""
        uc = Uc(UC_ARCH_X86, UC_MODE_64)
        mem = Memory(uc, self.counters, self.mem_limit)
        regfile = RegisterFile(uc)
        mem.release_listeners.append(regfile.release)     # no register access into a closed CPU
        self._install_hooks(uc)
        self.fpu.init(uc)
        return uc, mem, regfile

    def de_thread(self, task: Task) -> None:
        """de_thread (exec): every other thread of the process dies, and a non-leader
        exec'ing thread takes the leader's pid as its tid."""
        proc = task.process
        for t in list(proc.tasks):
            if t is not task and t.state != "dead":
                self.task_exit(t)
        proc.tasks = [task]
        task.tid = proc.pid

    def exec_mmap(self, task: Task) -> None:
        """exec_mmap + exec_mm_release: the task's process gets a new, empty address
        space (a new Unicorn instance).  mm_release of the old one: clear_child_tid is
        written and woken only when another process still uses that mm (a vfork parent),
        then dropped.  The old mm is freed once Unicorn has left it, unless it is
        borrowed (a vfork child's is its parent's)."""
        proc = task.process
        old_mem = proc.mem
        borrowed = proc.mm_owner is not None
        shared = borrowed or any(p.mm_owner is proc and p.exit_result is None for p in self.processes)
        if task.clear_child_tid and shared:
            try:
                old_mem.write_user(task.clear_child_tid, b"\0\0\0\0")
            except GuestFault:
                pass
            self.syscalls._futex_wake(proc.mm_owner or proc, task.clear_child_tid, 1)
        task.clear_child_tid = 0
        proc.uc, proc.mem, proc.regfile = self.new_mm()
        proc.mm_owner = None
        proc.mm_uprobes = None               # the new mm's uprobes state: see Kernel.exec_mm
        proc.files = []
        task.context = None
        if not shared:
            # mmput(old_mm) comes before the new image is mapped: its bytes are free for
            # it now; the host pages go once Unicorn has left the old instance
            old_mem.limit.uncharge(old_mem.total)
            old_mem.limit = MemoryLimit(None)
            self._retired_mms.append(old_mem)

    def mapped_file(self, path: str) -> MappedFile:
        """The page-cache file (inode) behind a guest path, opened through the guest's
        view: the uprobe key of a program before anything maps it (a probe registered
        on it is installed when an execve maps it)."""
        f = self.syscalls.open_guest_path(self.task, path, os.O_RDONLY)
        if isinstance(f, int):
            raise InputError(f"{path}: {os.strerror(-f)}")
        try:
            st = os.fstat(f.fd)
            hit = self.page_cache.lookup(st.st_dev, st.st_ino)
            if hit is not None and hit.elf is not None:
                return hit
            data = b"".join(iter(lambda: os.read(f.fd, 1 << 20), b""))
            host = os.readlink(f"/proc/self/fd/{f.fd}")
        finally:
            f.get().put()
        image = parse_elf(data, host)
        return self.page_cache.add(MappedFile(host, image.data, image, dev=st.st_dev, ino=st.st_ino,
                                              d_path=f.guest_path))

    def discard_process(self, proc: Process) -> None:
        """Undo :meth:`new_process` for a fork that failed before the child existed."""
        if proc in self.processes:
            self.processes.remove(proc)
        if proc.parent is not None and proc in proc.parent.children:
            proc.parent.children.remove(proc)
        if proc.mm_owner is None:
            proc.mem.release()
            proc.uc = proc.regfile = None

    def new_task(self, process: Process, tid: int | None = None, *, comm: str = "",
                 cred: Cred | None = None) -> Task:
        task = Task(tid=tid if tid is not None else (process.pid if not process.tasks else self._alloc_pid()),
                    process=process, comm=comm, cred=cred)
        task.counters = Counters()
        clock = getattr(self, "syscalls", None)           # absent while the first task is made
        task.start_time_ns = clock.boot_clock_ns() if clock is not None else 0
        process.tasks.append(task)
        self.tasks.append(task)
        self.all_tasks.append(task)
        return task

    def _account(self) -> None:
        """Charge the counters' growth since the last switch to the current task and
        its process (per-task counters cost nothing on the hot path)."""
        now = self.counters.snapshot()
        self.task.counters.add_delta(self._acct, now)
        self.task.process.counters.add_delta(self._acct, now)
        self._acct = now

    def _alloc_pid(self) -> int:
        pid = self._next_pid
        self._next_pid += 1
        return pid

    def guest_output(self, fd: int, data: bytes) -> None:
        """What the guest writes to fd 1/2: passed through to the host's, and kept
        (bounded) only when capture was asked for.  A recorder replaying history
        swallows what the host was already given."""
        if self.capture_output:
            (self.stdout if fd == 1 else self.stderr).keep(data)
        if self.recorder is not None:
            data = self.recorder.fresh_output(fd, data)
        if self.passthrough and data:
            os.write(fd, data)

    # ------------------------------------------------------------------ properties
    @property
    def uprobes(self) -> UserUprobes:
        """The uprobes as users drive them: targets resolved (``emu.probes``), then
        handed to the kernel's core (``self.kernel.uprobes``)."""
        api = self.__dict__.get("_uprobes")
        if api is None:
            api = self._uprobes = UserUprobes(self)
        return api

    @property
    def regs(self) -> RegsView:
        return RegsView(self)

    @property
    def profile(self):
        return self.kernel.profile

    # ------------------------------------------------------------------ registers
    def read_regs(self) -> PtRegs:
        return PtRegs(self.regfile.read_all(), self.task.orig_rax)

    def write_regs(self, regs: PtRegs) -> None:
        self.regfile.write(regs.changed())
        self.task.orig_rax = regs.orig_rax

    # ------------------------------------------------------------------ symbols
    def symbolize(self, addr: int) -> str | None:
        """``name+0xoff`` for an address in a mapped ELF, or the mapping name."""
        vma = self.mem.find_vma(addr)
        if vma is None:
            return None
        if vma.file is not None and image_of(vma.file) is not None:
            hit = vma.file.elf.symbolize(link_vaddr(vma.file, vma, addr))
            if hit:
                name, off = hit
                lib = "" if getattr(vma.file, "load_bias", None) is not None else \
                    f" in {os.path.basename(vma.file.d_path or vma.file.path)}"
                return (f"{name}+{off:#x}" if off else name) + lib
        return vma.name or (vma.file.path if vma.file else None)

    def load_bias(self, file: MappedFile) -> int:
        return getattr(file, "load_bias", 0)

    def resolve(self, name: str) -> int:
        """Address of a symbol of the main executable (load bias applied)."""
        exe = self.process.exe
        if exe is None or exe.elf is None:
            raise SymbolError(f"unknown symbol {name!r}: no executable loaded")
        return exe.elf.resolve(name).value + self.load_bias(exe)

    # ------------------------------------------------------------------ hooks
    def _install_hooks(self, uc) -> None:
        """The trap hooks.  Interrupts and ``syscall`` are registered natively, once per
        Unicorn instance, with the callbacks kept alive on the instance."""
        def on_interrupt(_uch, intno, _data):
            task = self.task
            if task.process.uc is not uc:
                return      # the #DB of a TF step whose syscall was an execve: that CPU state is gone
            if (intno == 3 or intno == 1) and self._db_after_syscall is None and self._result is None \
                    and task.state != "dead":
                try:                        # _guard(_interrupt, intno), two frames shorter
                    if intno == 3:
                        self._int3(task)
                    else:
                        self._debug(task)
                except GuestFault as e:
                    self._kernel_access_fault(e, at_breakpoint=intno == 3)
                except BaseException as e:  # noqa: BLE001 - re-raised in run()
                    self._hook_error = e
                    self.uc.emu_stop()
                return
            self._guard(self._interrupt, intno)

        def on_syscall(_uch, _data):
            try:                            # _guard(_syscall), one frame shorter
                self._syscall()
            except GuestFault as e:
                self._kernel_access_fault(e)
            except BaseException as e:  # noqa: BLE001 - re-raised in run()
                self._hook_error = e
                self.uc.emu_stop()

        native = (_INTR_CB(on_interrupt), _SYSCALL_CB(on_syscall))
        for kind, fptr, extra in ((UC_HOOK_INTR, native[0], ()),
                                  (UC_HOOK_INSN, native[1], (ctypes.c_int(X.UC_X86_INS_SYSCALL),))):
            handle = ctypes.c_size_t()
            status = uclib.uc_hook_add(uc._uch, ctypes.byref(handle), kind, ctypes.cast(fptr, ctypes.c_void_p),
                                       None, ctypes.c_uint64(1), ctypes.c_uint64(0), *extra)
            if status:
                raise UcError(status)
        uc.uemu_native_hooks = native
        uc.hook_add(UC_HOOK_MEM_INVALID, self._on_mem_invalid)
        uc.hook_add(UC_HOOK_INSN_INVALID, self._on_insn_invalid)
        uc.hook_add(UC_HOOK_INSN, self._on_port_io, None, 1, 0, X.UC_X86_INS_IN)
        uc.hook_add(UC_HOOK_INSN, self._on_port_io, None, 1, 0, X.UC_X86_INS_OUT)

    def _finish(self, result: RunResult) -> None:
        if self._result is None:
            self._result = result
        self._stopped_by_hook = True
        self.uc.emu_stop()

    def _guard(self, fn, *args):
        """Run a hook body; Python errors inside Unicorn callbacks are kept and re-raised
        after emu_start returns (Unicorn would otherwise swallow them)."""
        try:
            return fn(*args)
        except GuestFault as e:
            self._kernel_access_fault(e, at_breakpoint=fn == self._interrupt and args == (3,))
        except BaseException as e:  # noqa: BLE001 - re-raised in run()
            self._hook_error = e
            self.uc.emu_stop()
        return None

    def _kernel_access_fault(self, fault: GuestFault, at_breakpoint: bool = False) -> None:
        """Trap handling touched guest memory that is not there (an XOL slot or a
        trampoline whose special page the guest unmapped): the task faults at that
        address, as it would on the instruction fetch there - SIGSEGV, not a crash.
        At a breakpoint the task is left at the probed instruction, where the kernel's
        arch_uprobe_abort_xol puts it after a faulting step."""
        try:
            task = self.task
            regs = self.read_regs()
            if at_breakpoint:
                regs.rip -= 1
            self.kernel.fixup_fault(task, regs)
            self.send_sig(task, SIGSEGV, addr=fault.addr, detail=f"{fault.access} fault")
            self._exit_to_user(task, regs)
        except BaseException as e:  # noqa: BLE001 - re-raised in run()
            self._hook_error = e
        self._stopped_by_hook = True
        self.uc.emu_stop()

    def _interrupt(self, intno: int) -> None:
        task = self.task
        after_syscall, self._db_after_syscall = self._db_after_syscall, None
        if intno == 1 and after_syscall is not None and after_syscall[0] is task \
                and after_syscall[1] == self._rip():
            return          # Unicorn's #DB right after a syscall left with TF: see _syscall
        if task.state == "dead" or self._result is not None:
            return          # a trap still pending after the task exited (e.g. #DB of TF)
        if intno == 3:
            self._int3(task)
            return
        if intno == 1:
            self._debug(task)
            return
        regs = self.read_regs()
        if intno == 0:
            self.kernel.fixup_fault(task, regs)
            self.write_regs(regs)
            self.send_sig(task, SIGFPE, addr=regs.rip, detail="integer divide error")
        elif intno == 0x80:
            # int $0x80 enters the ia32 syscall table, which this model does not provide
            self.counters.unknown_syscalls["int80:" + str(regs.rax & 0xFFFFFFFF)] += 1
            regs.rax = -38  # -ENOSYS
        else:
            # int $n with a kernel-only gate: #GP, reported at the int instruction
            regs.rip -= 2
            self.kernel.fixup_fault(task, regs)
            self.write_regs(regs)
            self.send_sig(task, SIGSEGV, addr=0, detail=f"general protection (int ${intno:#x})")
        if self._exit_to_user(task, regs):
            return
        self.write_regs(regs)

    def _int3(self, task: Task) -> None:
        """#BP (exc_int3 -> do_int3_user): the hit path of every int3 probe.  The
        general registers are the CPU state in place (``TrapRegs``), rip and TF are
        read at once and stored at the end if changed, eflags and the bases only if
        asked for; with no signal queued the exit to user mode is a check of two lists."""
        rf = task.process.regfile
        regs = rf.trap_regs(task.orig_rax)
        self.counters.bp_traps += 1
        self.kernel.do_int3(task, regs)
        orig_rax = regs.orig_rax
        if (task.pending_signals or task.process.shared_pending or
                (orig_rax is not None and orig_rax >= 0 and self._restart_code(regs) is not None)) \
                and self._exit_to_user(task, regs):        # _work_pending, inline
            return
        if regs.tf and self._unicorn_skips_tf_trap(regs.rip):
            self._single_step_pause(task, regs)
            if self._exit_to_user(task, regs):
                return
        if task.state != "running":
            self.write_regs(regs)
            self._stopped_by_hook = True
            self.uc.emu_stop()          # the task sleeps (e.g. for an XOL slot)
            return
        if regs._dirty or regs.rip != regs._rip0 or regs.tf != regs._tf0:
            rf.write_back(regs)
        task.orig_rax = regs.orig_rax

    def _debug(self, task: Task) -> None:
        """#DB (exc_debug_user): the end of an out-of-line single-step, else SIGTRAP;
        the registers as lazily as at an int3."""
        rf = task.process.regfile
        regs = rf.trap_regs(task.orig_rax)
        self.counters.db_traps += 1
        self.kernel.do_debug(task, regs)
        orig_rax = regs.orig_rax
        if (task.pending_signals or task.process.shared_pending or
                (orig_rax is not None and orig_rax >= 0 and self._restart_code(regs) is not None)) \
                and self._exit_to_user(task, regs):        # _work_pending, inline
            return
        rf.write_back(regs)
        task.orig_rax = regs.orig_rax

    def _unicorn_skips_tf_trap(self, rip: int) -> int:
        """Unicorn ends the translation block at ``pause`` (opcode 90 with an f3 prefix,
        any other legacy prefixes and a REX without REX.B) without raising the
        single-step #DB that TF asks for; the CPU would trap right after it.  Returns
        the pause's length, or 0."""
        mem = self.mem
        try:
            first = mem.read_byte(rip)
            if first not in _LEGACY_PREFIXES:
                return 0                    # a pause starts with a legacy prefix (f3)
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
                return 0                    # REX.B 90 is xchg %r8,%rax
            i += 1
        return i + 1 if rep and code[i] == 0x90 else 0

    def _single_step_pause(self, task, regs) -> None:
        """Execute ``pause`` (no architectural effect) and take the #DB the hardware
        would raise after it, as the trap handler would see it."""
        regs.rip += self._unicorn_skips_tf_trap(regs.rip)
        self.counters.db_traps += 1
        if self.events:
            self.events.publish(ev.UnicornQuirk(task, "pause single-step"))
        self.kernel.do_debug(task, regs)

    def _on_mem_invalid(self, uc, access, addr, size, value, _data):
        self._pending_fault = (_MEM_ACCESS.get(access, "access"), addr)
        return False

    def _on_insn_invalid(self, uc, _data):
        self._pending_fault = ("ill", 0)
        return False

    def _on_port_io(self, uc, *args):
        self._guard(self._port_io)
        return 0

    def _port_io(self) -> None:
        task = self.task
        self.send_sig(task, SIGSEGV, addr=0, detail="general protection (port I/O)")
        self._exit_to_user(task, self.read_regs())

    def _syscall(self) -> None:
        """The ``syscall`` instruction as the hardware and entry_SYSCALL_64 do it."""
        task = self.task
        proc = task.process
        rf = proc.regfile
        regs, args = rf.syscall_entry()                # hardware: rcx, r11 <- rip, rflags
        nr = regs.orig_rax
        self.counters.syscalls[nr] += 1
        bus = self.events
        if bus.active:
            bus.publish(ev.Syscall(task, nr, regs.rip - 2, args))
        uc = proc.uc
        syscalls = self.syscalls
        self._in_syscall = True
        try:
            syscalls.dispatch(task, regs, nr, args)
            if task.process is not proc or proc.uc is not uc:
                # execve replaced the address space: the new registers are set, the
                # old CPU state is gone; exit-to-user work happens before the next run
                self._stopped_by_hook = True
                task.orig_rax = -1
                uc.emu_stop()
                return
            task.last_enosys = nr if nr not in syscalls.table else None
            state = task.state
            if self._result is not None or state == "dead":
                self._stopped_by_hook = True
                uc.emu_stop()               # exited: the scheduler picks the next task
                return
            if state == "running":
                if task.pending_rax is not None:
                    regs.rax, task.pending_rax = task.pending_rax, None   # woken before it slept
                orig_rax = regs.orig_rax
                if (task.pending_signals or task.process.shared_pending or     # _work_pending, inline
                        (orig_rax is not None and orig_rax >= 0 and self._restart_code(regs) is not None)) \
                        and self._exit_to_user(task, regs):
                    return
        finally:
            self._in_syscall = False
        if bus.active:
            bus.publish(ev.SyscallReturn(task, nr, regs.rax, regs.rip))
        if self._result is not None or task.state == "dead":
            return
        # Return to user: SYSRET when rcx/r11 still match rip/flags, else the IRET path;
        # either way the task resumes with pt_regs as the kernel left them.
        # With TF in the flags it is always IRET (do_syscall_64: SYSRET cannot restore
        # RF, and would trap at once on TF).  The hardware SYSCALL masked TF on entry
        # (MSR_SYSCALL_MASK), so no #DB followed the syscall itself; IRET restores TF and
        # the single-step #DB comes after the NEXT user instruction.  Unicorn keeps TF
        # through the hook and raises #DB as soon as it returns: that trap is dropped.
        if regs.tf:
            self._db_after_syscall = (task, regs.rip)
        regs.orig_rax = -1
        rf.syscall_exit(regs)
        # a sleeper keeps orig_rax: its exit-to-user work (restart) waits for the wake-up
        state = task.state
        task.orig_rax = nr if state == "blocked" and task.sleep_interrupt is not None else -1
        if state != "running" or self._switch_requested or self._stop_requested:
            # blocked, or yielded: let the scheduler run.  A stop asked for from another
            # thread while this hook ran (Ctrl-C during a waiting read) is asked again
            # here, on the CPU's thread: Unicorn may drop a request made mid-hook.
            uc.emu_stop()

    # ------------------------------------------------------------------ signals
    def send_sig(self, task: Task, signo: int, *, addr: int | None = None, detail: str = "",
                 code: int | None = None, force: bool = True, info: bytes | None = None) -> None:
        """Queue a signal on ``task`` and return, as the kernel's ``force_sig_fault`` /
        ``send_sig`` do: it is delivered at the task's next exit to user mode, after the
        trap or syscall handler has returned and its registers were written back (see
        :meth:`_exit_to_user`).  ``addr`` is the fault address (si_addr), ``code`` the
        si_code (default: SI_KERNEL, or SEGV_MAPERR with an address).  ``force`` (the
        kernel's own signals) delivers it through a blocked mask (a blocked fault
        kills); ``force=False`` is an ordinary sent signal, which a mask holds back."""
        self._queue_signal(task.pending_signals, PendingSignal(signo, addr, detail, code, force, info))

    def send_process_sig(self, proc: Process, signo: int, *, detail: str = "", code: int | None = None,
                         info: bytes | None = None) -> None:
        """A process-directed signal (kill, SIGCHLD): queued on the process's shared
        pending set; any of its tasks that does not block it takes it (complete_signal),
        and one sleeping in rt_sigsuspend wakes up."""
        self._queue_signal(proc.shared_pending, PendingSignal(signo, None, detail, code, False, info))
        for t in proc.tasks:
            if not t.sigmask & _sigbit(signo):
                self.signal_wake_up(t)
                break

    @staticmethod
    def _queue_signal(queue: list, sig: PendingSignal) -> None:
        """legacy_queue: a standard signal (below SIGRTMIN) already pending is not
        queued twice; real-time signals queue every instance."""
        if sig.signo < SIGRTMIN and any(p.signo == sig.signo for p in queue):
            return
        queue.append(sig)

    def signal_wake_up(self, task: Task) -> None:
        """signal_wake_up: a task in an interruptible sleep (TASK_INTERRUPTIBLE) wakes;
        its syscall returns what its sleep said a signal makes of it (``block``'s
        ``interrupt``: -ERESTARTSYS for a pipe read, -ERESTARTNOHAND for pause...) and
        the signal is taken, and the syscall perhaps restarted, when it next runs."""
        if task.state != "blocked" or task.sleep_interrupt is None:
            return
        interrupt = task.sleep_interrupt
        self.wake(task, interrupt() if callable(interrupt) else interrupt)

    def signal_pending(self, task: Task) -> bool:
        """``signal_pending()`` (TIF_SIGPENDING after recalc_sigpending): a signal the
        task's mask does not block, or a forced one, is queued."""
        if not task.pending_signals and not task.process.shared_pending:
            return False
        return self._next_signal(task) is not None

    def pending_set(self, task: Task) -> int:
        """The pending signals of ``task`` as a sigset: its own and its process's."""
        bits = 0
        for p in task.pending_signals + task.process.shared_pending:
            bits |= _sigbit(p.signo)
        return bits

    def _next_signal(self, task: Task, wanted: int | None = None) -> tuple[list, int] | None:
        """dequeue_signal/next_signal: (queue, index) of the signal to deliver - the
        task's own queue before the process's, synchronous (fault) signals first, then
        the lowest number; blocked ones stay queued unless forced.  ``wanted`` (a
        sigset, rt_sigtimedwait) takes any signal in it instead, blocked or not."""
        for queue in (task.pending_signals, task.process.shared_pending):
            if wanted is not None:
                ok = [(i, p) for i, p in enumerate(queue) if wanted & _sigbit(p.signo)]
            else:
                ok = [(i, p) for i, p in enumerate(queue) if p.force or not task.sigmask & _sigbit(p.signo)]
            if ok:
                i, _ = min(ok, key=lambda e: (e[1].signo not in SYNCHRONOUS_SIGNALS, e[1].signo, e[0]))
                return queue, i
        return None

    def dequeue_signal(self, task: Task, wanted: int) -> PendingSignal | None:
        """Take the first pending signal in the set ``wanted`` off its queue."""
        nxt = self._next_signal(task, wanted)
        return None if nxt is None else nxt[0].pop(nxt[1])

    def _work_pending(self, task: Task, regs: PtRegs) -> bool:
        """The exit-to-user check before the loop (``exit_to_user_mode_prepare``'s
        ti_work test): a signal queued for the task or its process, or a syscall
        restart code in rax.  False: :meth:`_exit_to_user` would do nothing."""
        return bool(task.pending_signals or task.process.shared_pending) or self._restart_code(regs) is not None

    def _exit_to_user(self, task: Task, regs: PtRegs) -> bool:
        """``exit_to_user_mode_loop`` -> ``arch_do_signal_or_restart``: deliver the
        task's deliverable signals to ``regs`` (the registers the handler left) - a
        handler frame (rt_sigframe) each, or the default action - and end the current
        emu_start so the task resumes where delivery put it.  Each frame's mask update
        applies to the next pick.  False if nothing was deliverable."""
        if self._next_signal(task) is None and self._restart_code(regs) is None:
            return False
        while (nxt := self._next_signal(task)) is not None:
            queue, i = nxt
            sig = queue.pop(i)
            self._deliver_signal(task, sig, regs)
            if task.state == "dead" or self._result is not None:
                task.pending_signals.clear()
                break
        if task.state != "dead" and self._result is None:
            if self._restart_code(regs) is not None:
                self._restart_without_handler(regs)
            if task is self.task:
                regs.orig_rax = -1           # the syscall is over: back in user mode
                self._write_back_in_hook(regs)
        if task.saved_sigmask is not None and task.state != "dead":
            task.sigmask, task.saved_sigmask = task.saved_sigmask, None   # restore_saved_sigmask
        self._stopped_by_hook = True
        self.uc.emu_stop()
        return True

    def _deliver_signal(self, task: Task, sig: PendingSignal, regs: PtRegs) -> None:
        """One signal: the guest's handler if it installed one (an rt_sigframe, as
        setup_rt_frame builds it), else the default action - terminate (or ignore, for
        SIGCHLD-like signals)."""
        signo, addr, detail = sig.signo, sig.addr, sig.detail
        if not sig.force and self._ignored(task, signo):
            return                           # ignored when it became deliverable
        self.counters.signals[signo] += 1
        if self.events:
            self.events.publish(ev.Signal(task, signo, addr, regs.rip, detail))
        if task is self.task and task.state != "dead" and self._deliver_to_handler(task, sig, regs):
            self._write_back_in_hook(regs)
            return
        if task is self.task and task.state != "dead":
            # the kernel's register changes up to the signal are the task's state
            self._write_back_in_hook(regs)
        self.process_exit(task.process, RunResult("signal", signal=signo, fault_addr=addr, rip=regs.rip,
                                                  rip_symbol=self.symbolize(regs.rip), detail=detail))

    @staticmethod
    def _restart_code(regs: PtRegs) -> int | None:
        """The -ERESTART* code a syscall left in rax (syscall_get_nr >= 0 and
        syscall_get_error), or None: not in a syscall, or an ordinary result."""
        if regs.orig_rax is None or regs.orig_rax < 0 or regs.orig_rax >> 63:
            return None
        code = (-regs.rax) & 0xFFFFFFFFFFFFFFFF
        return code if code in (ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK) else None

    def _restart_for_handler(self, regs: PtRegs, sa_flags: int) -> None:
        """handle_signal: a handler is about to run on a syscall's way out -
        ERESTARTNOHAND and ERESTART_RESTARTBLOCK become EINTR, so does ERESTARTSYS
        unless the action has SA_RESTART; ERESTARTNOINTR (and SA_RESTART's
        ERESTARTSYS) re-executes the syscall after the handler (rip -= 2, rax =
        orig_rax, as the frame saves them)."""
        code = self._restart_code(regs)
        if code is None:
            return
        if code in (ERESTARTNOHAND, ERESTART_RESTARTBLOCK) or (code == ERESTARTSYS and not sa_flags & sf.SA_RESTART):
            regs.rax = -EINTR & 0xFFFFFFFFFFFFFFFF
        else:
            regs.rax, regs.rip = regs.orig_rax, regs.rip - 2
        regs.orig_rax = -1

    def _restart_without_handler(self, regs: PtRegs) -> None:
        """arch_do_signal_or_restart with no handler to run (the signal was ignored, or
        another task took it): every restart code re-executes the syscall;
        ERESTART_RESTARTBLOCK through restart_syscall (the task's restart_block)."""
        code = self._restart_code(regs)
        regs.rax = NR_RESTART_SYSCALL if code == ERESTART_RESTARTBLOCK else regs.orig_rax
        regs.rip -= 2
        regs.orig_rax = -1

    def _write_back_in_hook(self, regs: PtRegs) -> None:
        changes = regs.changed()
        if self._in_syscall:
            changes[16] = (regs.rip - 2) & 0xFFFFFFFFFFFFFFFF   # see _syscall
        self.regfile.write(changes, in_trap=self._in_syscall)
        self.task.orig_rax = regs.orig_rax

    @staticmethod
    def _ignored(task: Task, signo: int) -> bool:
        """sig_ignored at delivery: SIG_IGN, or SIG_DFL whose default is to ignore."""
        handler = sf.parse_sigaction(task.process.sigactions.get(signo))[0]
        return handler == sf.SIG_IGN or (handler == sf.SIG_DFL and signo in sf.IGNORED_BY_DEFAULT)

    def _deliver_to_handler(self, task: Task, sig: PendingSignal, regs: PtRegs) -> bool:
        """setup_rt_frame: True when the guest's handler takes the signal (regs now point
        at it); False for the default action."""
        signo, addr, code = sig.signo, sig.addr, sig.code
        handler, flags, restorer, mask = sf.parse_sigaction(task.process.sigactions.get(signo))
        if signo in (sf.SIGKILL, sf.SIGSTOP) or handler == sf.SIG_DFL or not flags & sf.SA_RESTORER:
            return False
        if handler == sf.SIG_IGN:
            return not self._fatal_if_ignored(signo)
        if task.sigmask & _sigbit(signo):
            return False                     # a blocked forced signal kills (force_sig_fault)
        self._restart_for_handler(regs, flags)
        if code is None:
            code = sf.SI_KERNEL if addr is None else sf.SEGV_MAPERR
        info = sig.info or sf.siginfo(signo, code, addr, task.process.pid)
        # the frame saves the mask to return to: rt_sigsuspend's, not the temporary one
        old_mask = task.sigmask if task.saved_sigmask is None else task.saved_sigmask
        try:
            frame = sf.build_frame(regs, regs.rsp, signo, info, old_mask, restorer, self.fpu.xsave(self.uc),
                                   altstack=task.sigaltstack, onstack=bool(flags & sf.SA_ONSTACK))
            self.mem.write_user(frame.fpstate_at, frame.fpstate)
            self.mem.write_user(frame.at, frame.frame)
        except (GuestFault, sf.FrameOverflow) as e:
            self._force_sigsegv(task, signo, str(e))
            return True
        self.fpu.init(self.uc)               # fpu__clear_user_states: the handler starts clean
        frame_at = frame.at
        regs.rsp, regs.rip = frame_at, handler
        regs.rdi, regs.rsi, regs.rdx, regs.rax = signo, frame.info_at, frame.uc_at, 0
        regs.eflags &= ~(0x400 | 0x10000 | TF)          # DF RF TF cleared for the handler
        regs.orig_rax = -1
        if not flags & sf.SA_NODEFER:
            task.sigmask |= _sigbit(signo)
        task.sigmask |= mask
        task.saved_sigmask = None
        if task.sigaltstack is not None and task.sigaltstack[2] & sf.SS_AUTODISARM:
            task.sigaltstack = None          # sas_ss_reset: saved in uc_stack, restored by sigreturn
        if flags & sf.SA_RESETHAND:
            task.process.sigactions.pop(signo, None)
        if self.events:
            self.events.publish(ev.SignalHandler(task, signo, handler, frame_at))
        return True

    def _force_sigsegv(self, task: Task, signo: int, why: str) -> None:
        """signal_setup_done(failed) -> force_sigsegv: no frame could be built for
        ``signo``'s handler; SIGSEGV comes next (at its default action if it was
        SIGSEGV's own handler that failed)."""
        if signo == SIGSEGV:
            task.process.sigactions.pop(SIGSEGV, None)
        self.send_sig(task, SIGSEGV, detail=f"no room for the {signal_name(signo)} frame ({why})")

    @staticmethod
    def _fatal_if_ignored(signo: int) -> bool:
        """Faults cannot be ignored: the kernel resets the action and kills."""
        return signo in (SIGSEGV, SIGILL, SIGFPE, SIGBUS, SIGTRAP)

    def exit_group(self, code: int, task: Task | None = None) -> None:
        self.process_exit((task or self.task).process, RunResult("exit", exit_code=code & 0xFF))

    def process_exit(self, proc: Process, result: RunResult) -> None:
        """Every task of ``proc`` dies; the parent can reap it; the run ends with the
        main process."""
        proc.exit_result = result
        for t in list(proc.tasks):
            self.task_exit(t)
        self.kernel.process_exit(proc)
        if proc is not self.main_process and proc.mm_owner is None:
            self._released.append(proc)     # exit_mmap, once Unicorn is not running it
        if proc is self.main_process:
            self.exited = True
            self._finish(result)
        else:
            self.syscalls.child_exited(proc)
            if proc is self.task.process:      # the running task died: leave emu_start
                self._stopped_by_hook = True
                self.uc.emu_stop()

    def _release_exited(self) -> None:
        """Free the address space (Unicorn instance and host pages) of every exited
        process, except one whose Unicorn the CPU still runs; a zombie keeps only its
        exit status, as after the kernel's exit_mm."""
        keep = []
        for proc in self._released:
            if proc.uc is self.task.process.uc or any(
                    p.mm_owner is proc and p.exit_result is None for p in self.processes):
                keep.append(proc)
                continue
            proc.mem.release()
            for t in proc.tasks:
                t.context = None
            proc.uc = proc.regfile = None
        self._released = keep
        if not self._running:
            # an address space a front end still hooks stays until its hooks are gone
            hooked = {id(h.uc) for h in self._live_hooks}
            for mem in self._retired_mms:
                if id(mem.uc) not in hooked:
                    mem.release()
            self._retired_mms = [mem for mem in self._retired_mms if mem.uc is not None]

    def task_exit(self, task: Task) -> None:
        if task.state == "dead":
            return
        task.state = "dead"
        if task in self.tasks:
            self.tasks.remove(task)
        self.kernel.task_exit(task)
        self.syscalls.task_exited(task)

    def stop(self, detail: str = "stop requested") -> None:
        """Ask a running guest to stop at the next opportunity (thread-safe): the run
        (or step) returns a "stopped" result and the task is left at the instruction it
        was about to execute; the next :meth:`run` or :meth:`step` resumes there.  A
        stop asked for while the guest does not run applies to nothing: each run starts
        without one."""
        self._stop_requested = detail
        self._stopped_by_hook = True
        if self._in_code_hook:
            self._stop_precounted = True     # Unicorn counted the instruction it will not run
        self.uc.emu_stop()

    def block(self, task: Task, reason: str, *, interrupt=None) -> None:
        """Put ``task`` to sleep in a syscall; :meth:`wake` completes it with a value.
        ``interrupt``: the syscall's result when a signal wakes it (an int, or a callable
        computing it at that moment, e.g. a partial count); None sleeps through signals
        (TASK_UNINTERRUPTIBLE / killable: vfork, an XOL slot)."""
        task.state = "blocked"
        task.blocked_on = reason
        task.sleep_interrupt = interrupt
        if interrupt is not None and self.signal_pending(task):
            self.signal_wake_up(task)        # prepare_to_wait saw the signal: no sleep

    def wake(self, task: Task, rax: int | None) -> None:
        """Make a sleeping task runnable; ``rax`` completes its syscall (None: it did not
        sleep in a syscall)."""
        if task.state == "blocked":
            task.state = "running"
            task.blocked_on = None
            task.sleep_interrupt = None
            if rax is not None:
                task.pending_rax = rax & 0xFFFFFFFFFFFFFFFF
            if self._running and task is not self.task and self.quantum.armed:
                self.quantum.shorten(self.scheduler.slice())    # the woken task runs soon

    def yield_cpu(self) -> None:
        """sched_yield and friends: reschedule after this syscall."""
        self._switch_requested = True

    # ------------------------------------------------------------------ running
    def run(self, max_insns: int | None = DEFAULT_MAX_INSNS, timeout: float | None = DEFAULT_TIMEOUT,
            *, raise_on_signal: bool = False) -> RunResult:
        """Run until the main process exits or dies of a signal, the instruction budget
        is spent, or the timeout.

        ``max_insns`` is an exact instruction budget (Unicorn's native counter: no Python
        hook, but up to about 20x slower on the tightest loops); ``None`` (the default)
        runs at full speed, bounded by ``timeout`` (wall-clock seconds) only.
        With one task the guest runs in one ``emu_start``; with several, the
        deterministic scheduler (seeded) gives them time slices counted in translated
        blocks (:mod:`kernel_model.kernel.sched`), one ``emu_start`` each.
        """
        if self.exited:
            raise InputError("the guest has already exited")
        _check_limits(max_insns, timeout)
        if self.recorder is not None and not self.recorder.driving:
            return self.recorder.run(max_insns, timeout, raise_on_signal=raise_on_signal)
        self._begin()
        if self._tb_mode is not None and self._tb_mode[1] == "step":
            self._translation_mode("run")
        start = time.perf_counter()
        deadline = start + timeout if timeout else None
        self._run_deadline = deadline        # interrupted(): a wait for the host ends there
        remaining = int(max_insns) if max_insns else None
        spurious, last_spurious = 0, None
        while True:
            task = self.task
            multi = len(self.tasks) > 1
            if self.recorder is not None:
                # recorded runs slice by instructions: a checkpoint or a seek may split a
                # run anywhere, and an emu_start a budget cut short goes on as it began
                # in the next run, so the split does not change the interleaving
                # (emu.replay.checkpoint); blocks would not survive a split mid-block
                carry, self._slice_carry = self._slice_carry, None
                if carry is not None and carry[0] is task:
                    full, done, multi = carry[1], carry[2], carry[3]
                else:
                    full, done = (self.scheduler.slice() if multi else None), 0
                count = (remaining or 0) if full is None else \
                    (full if remaining is None else min(full, remaining))
                blocks, short = None, False
            else:
                full = done = None
                count, blocks, short = self._slice_limits(multi, remaining)
            self._switch_requested = False
            self._pending_fault = None
            left = (deadline - time.perf_counter()) if deadline else None
            if left is not None and left <= 0:
                result = RunResult("timeout", rip=self._rip(), rip_symbol=self.symbolize(self._rip()),
                                   detail=self._enosys_loop_detail())
                break
            if self._stop_requested:         # Ctrl-C came before this run started
                result = RunResult("stopped", rip=self._rip(), rip_symbol=self.symbolize(self._rip()),
                                   detail=self._stop_requested)
                break
            rip = self._rip()
            task.slices += 1
            if self._resume_exit_work(task):
                stopped_early = True         # sent from outside a trap: deliver first
                insns = 0 if count else None
            else:
                self._emu_base, self._emu_count = self.icount, count
                # the deadline of short slices is checked between them, with no Unicorn
                # timer (a thread per emu_start: ~0.15 ms each)
                stopped_early = self._emulate(rip, None if short else left, count, blocks)
                self._emu_count = 0
                insns = self._insns_run(count, stopped_early) if count else None
                self.icount += insns or 0
                if self.recorder is not None and not stopped_early and remaining is not None and \
                        insns == remaining and (full is None or full > insns):
                    self._slice_carry = (task, None if full is None else full - insns, done + insns, multi)
                elif multi:                  # the others' sleeps and timers see the time pass
                    self.syscalls.cpu_time_passes((done or 0) + self._cpu_time(blocks, insns))
            if remaining is not None:
                remaining -= insns or 0
            self._raise_hook_error()
            if self._result is not None:
                result = self._result
                break
            if self._stop_requested:
                result = RunResult("stopped", rip=self._rip(), rip_symbol=self.symbolize(self._rip()),
                                   detail=self._stop_requested)
                break
            if task.state == "running" and not stopped_early and not self._switch_requested:
                why = self._why_returned(task, start, timeout, count)
                if why == "hlt":
                    if self._result is not None:
                        result = self._result
                        break
                elif why == "timeout":
                    result = RunResult("timeout", rip=self._rip(), rip_symbol=self.symbolize(self._rip()),
                                       detail=self._enosys_loop_detail())
                    break
                elif why == "count":
                    if not multi and (remaining is None or remaining > 0):
                        rip = self._rip()
                        result = RunResult("stopped", rip=rip, rip_symbol=self.symbolize(rip),
                                           detail="emulation stopped")
                        break
                elif why != "slice":
                    # Unicorn came back with no reason of ours (seen right after a fork
                    # created a second Unicorn instance inside a hook): go on, unless it
                    # keeps happening at the same place.
                    rip = self._rip()
                    spurious = spurious + 1 if rip == last_spurious else 1
                    last_spurious = rip
                    if spurious >= 3:
                        result = RunResult("stopped", rip=rip, rip_symbol=self.symbolize(rip),
                                           detail="emulation stopped")
                        break
            if remaining is not None and remaining <= 0:
                # every instruction counts, those before an early stop too: a guest
                # that traps or yields forever still ends at its budget
                rip = self._rip()
                result = RunResult("budget", rip=rip, rip_symbol=self.symbolize(rip),
                                   detail=self._enosys_loop_detail(),
                                   insns=int(max_insns))
                break
            self.syscalls.poll_host_waits()         # a host stdin reader whose input came
            nxt = self.scheduler.pick(self.tasks)
            if nxt is None and self.syscalls.idle():
                nxt = self.scheduler.pick(self.tasks)   # idle: the clock jumped to a deadline
            if nxt is None and (self._stop_requested or (deadline and time.perf_counter() >= deadline)):
                continue                     # waiting for the host ended by a stop or the timeout
            if nxt is None:
                result = RunResult("stopped", rip=self._rip(), rip_symbol=self.symbolize(self._rip()),
                                   detail="deadlock: every task is blocked")
                break
            self._switch_to(nxt)
            self._release_exited()
        self._end(result)
        if raise_on_signal and result.reason == "signal":
            raise GuestSignalError(result)
        return result

    def _slice_limits(self, multi: bool, remaining: int | None) -> tuple[int, int | None, bool]:
        """(count, blocks, short) of the next emu_start: Unicorn's instruction counter
        carries the budget only (0: none), the block quantum the time slice (None: one
        task, no slice; where the quantum is not native the slice is an instruction
        count); ``short``: the slice ends soon enough for the timeout to wait for it."""
        count = remaining or 0
        if not multi:
            return count, None, False
        n = self._slice_length()
        short = n <= ALONE_SLICE
        if self.quantum.native:
            self.quantum.attach(self.uc)
            return count, n, short
        return (min(n, count) if count else n), None, short

    def _slice_length(self) -> int:
        """A seeded slice (ALONE_SLICE blocks when no other task can run: a wake-up
        cuts it), ended at the next sleeper's or timer's deadline on the virtual clock,
        so the spinning task that makes the time pass wakes it exactly then."""
        alone = self.quantum.native and not any(t.state == "running" and t is not self.task
                                                for t in self.tasks)
        n = ALONE_SLICE if alone else self.scheduler.slice()
        sc = self.syscalls
        due = [t for t in (sc.next_poll_deadline_ns(), sc.next_timer_ns()) if t is not None]
        if due:
            per = INSN_NS * (BLOCK_INSNS if self.quantum.native else 1)
            n = max(1, min(n, -(-(min(due) - sc.clock_ns) // per)))
        return n

    def _cpu_time(self, blocks: int | None, insns: int | None) -> int:
        """The instructions of virtual time the last slice took: its blocks at
        BLOCK_INSNS each (the same whether a budget counts or not, so a budget does not
        change the interleaving), or its counted instructions."""
        if blocks is not None:
            return self.quantum.ran() * BLOCK_INSNS
        return insns or 0

    def _resume_exit_work(self, task: Task) -> bool:
        """Before the task runs on: the exit-to-user work of a syscall it slept in (a
        signal to deliver, a restart to make), or a signal sent to it from outside a
        trap.  True when delivery moved it."""
        in_syscall = task.orig_rax != -1
        done = (in_syscall or self.signal_pending(task)) and self._exit_to_user(task, self.read_regs())
        task.orig_rax = -1
        return done

    def _enosys_loop_detail(self) -> str:
        """For a run that ran out of time or budget: if the task's last syscall was one
        the model does not provide, name it - a guest retrying an ENOSYS syscall in a
        loop is the usual reason."""
        nr = self.task.last_enosys
        if nr is None:
            return ""
        name = SYSCALL_NAMES.get(nr, "?")
        calls = self.counters.unknown_syscalls.get(f"{nr}:{name}", 0)
        what = f"{nr} ({name})" if name != "?" else str(nr)
        return f"last syscall {what} is not modeled: ENOSYS, {calls} times"

    def _begin(self) -> None:
        """A run or step starts: nothing decided yet.  A stop requested before it
        applies to the run that was going (resume after a stop is well-defined)."""
        self._result = None
        self._hook_error = None
        self._stop_requested = self._sigint      # Ctrl-C inside interruptible() sticks
        self._pending_fault = None

    def _end(self, result: RunResult) -> RunResult:
        self._run_deadline = None
        self._account()
        self._release_exited()
        result.stdout, result.stderr = bytes(self.stdout), bytes(self.stderr)
        self.last_result = result
        return result

    def _raise_hook_error(self) -> None:
        if self._hook_error is not None:
            err, self._hook_error = self._hook_error, None
            raise err

    def _rip(self) -> int:
        return self.uc.reg_read(X.UC_X86_REG_RIP)

    def _insns_run(self, count: int, stopped_early: bool) -> int:
        """Instructions the last ``emu_start(count=...)`` executed, also when a hook
        ended it early (the budget is charged for every one of them)."""
        if not count:
            return 0
        off = _emu_counter_offset()
        if off is None:
            return count if not stopped_early else 1     # at least the trapping insn
        # the counter of the instance the emu_start ran on: an execve inside it has
        # given the process a new one (the old lives until Unicorn has left it)
        uc = self._emu_uc if self._emu_uc is not None and self._emu_uc._uch else self.uc
        base = ctypes.cast(uc._uch, ctypes.c_void_p).value
        ran = min(struct.unpack("<Q", ctypes.string_at(base + off, 8))[0], count)
        if self._stop_precounted and not self._running:
            ran -= 1                 # a code hook stopped before its instruction
        return max(0 if self._stop_precounted else 1, ran)

    def record(self, *, interval: int | None = None, max_checkpoints: int | None = None):
        """Attach an :class:`emu.replay.checkpoint.Recorder` (reverse execution): from now on
        every run and step is counted, checkpointed every ``interval`` instructions
        and can be replayed (``recorder.seek(n)``).  Returns the recorder."""
        from emu.replay.checkpoint import DEFAULT_INTERVAL, DEFAULT_MAX_CHECKPOINTS, Recorder
        return Recorder(self, interval=interval or DEFAULT_INTERVAL,
                        max_checkpoints=max_checkpoints or DEFAULT_MAX_CHECKPOINTS)

    def checkpoint(self):
        """A checkpoint of the whole machine now (see :mod:`emu.replay.checkpoint`); with a
        recorder attached it is also one of the recorder's."""
        from emu.replay.checkpoint import take_checkpoint
        return self.recorder.checkpoint() if self.recorder is not None else take_checkpoint(self)

    def restore(self, cp) -> None:
        """Put the machine back into the state of checkpoint ``cp``."""
        from emu.replay.checkpoint import Checkpoint, CheckpointError, restore_checkpoint
        if not isinstance(cp, Checkpoint):
            raise CheckpointError(f"not a checkpoint: {cp!r}")
        if self.recorder is not None:
            self.recorder.restore(cp)
        else:
            restore_checkpoint(self, cp)

    @property
    def running(self) -> bool:
        """Inside an emu_start (a hook is running)."""
        return self._running

    def flush_translations(self) -> None:
        """Drop every address space's translated blocks (a checkpoint was restored, or
        counting starts: blocks of an uncounted run would not count)."""
        for proc in self.processes:
            if proc.uc is not None:
                proc.uc.ctl_flush_tb()
        self._tb_mode = None

    def insn_clock(self) -> int:
        """The instruction clock now: :attr:`icount` plus, inside a counted emu_start
        (a hook is running), the instructions of it so far, the current one included.
        Exact only while every run is counted (a :class:`emu.replay.checkpoint.Recorder` is
        attached)."""
        if self._running and self._emu_count:
            return self._emu_base + self._insns_run(self._emu_count, True)
        return self.icount

    def _emulate(self, rip: int, left: float | None, count: int, blocks: int | None = None) -> bool:
        """One emu_start on the current task, for at most ``count`` instructions (0: no
        limit) and ``blocks`` translated blocks (None: no limit); True when a hook or
        fault ended it."""
        self._stopped_by_hook = False
        self._stop_precounted = False
        task = self.task
        self.quantum.arm(blocks)
        self._emu_uc = self.uc
        self._running = True
        try:
            self.uc.emu_start(rip, _NEVER, timeout=int(left * 1_000_000) if left else 0, count=count)
        except UcError as e:
            self._running = False
            if self._result is None and self._hook_error is None and task.state != "dead":
                self._fault_to_signal(e)
            return True
        finally:
            self._running = False
        return task.state != "running" or self._stopped_by_hook

    def _why_returned(self, task: Task, start: float, timeout: float | None, count: int) -> str:
        """emu_start came back by itself: the slice was used up, a hlt (#GP), the time
        limit, or the count (``count``: the emu_start's instruction limit, 0 for none)."""
        if self.quantum.expired():
            return "slice"
        rip = self._rip()
        # the budget ran out (every counted run of a recorder): as after a time slice,
        # a 0xf4 byte before rip is most likely the end of some other instruction
        spent = bool(count) and self._insns_run(count, False) >= count
        try:
            if self._hlt_before(rip, count if len(self.tasks) > 1 or spent else 0):
                regs = self.read_regs()
                regs.rip = rip - 1
                self.write_regs(regs)
                self.send_sig(task, SIGSEGV, addr=0, detail="general protection (hlt)")
                self._exit_to_user(task, regs)
                return "hlt"
        except GuestFault:
            pass
        if timeout and time.perf_counter() - start >= timeout * 0.99:
            return "timeout"
        return "count" if count else "stopped"

    def _hlt_before(self, rip: int, count: int) -> bool:
        """Did emu_start stop on a ``hlt`` just before ``rip``?  Unicorn halts silently.

        With one task (``count`` 0 here) an 0xf4 byte before rip is taken as a hlt: the
        budget ending right after an instruction whose last byte is 0xf4 is far less
        likely than a hlt; so it is with block slices, whose end is known exactly.
        Instruction-count slices (``count``, also the budget with several tasks) expire
        often, so there the byte only counts as a hlt when no instruction of 2..15 bytes
        can end at rip (``mov %rsi,%r12`` is ``49 89 f4``)."""
        if self.mem.read(rip - 1, 1) != b"\xf4":
            return False
        if not count:
            return True
        cs = Cs(CS_ARCH_X86, CS_MODE_64)
        for k in range(2, 16):
            try:
                code = self.mem.read(rip - k, k)
            except GuestFault:
                continue
            insn = next(cs.disasm(code, rip - k, 1), None)
            if insn is not None and insn.size == k:
                return False
        return True

    def _switch_to(self, task: Task) -> None:
        """Context switch: save the outgoing task's CPU state, restore the incoming one's."""
        cur = self.task
        if task is not cur:
            self._account()
            if cur.state != "dead":
                cur.context = cur.process.uc.context_save()
            self.scheduler.record(task)
            self.task = task
            if task.context is not None:
                task.process.uc.context_restore(task.context)
                task.context = None
        if task.pending_rax is not None:
            task.process.uc.reg_write(X.UC_X86_REG_RAX, task.pending_rax)
            task.pending_rax = None
        if task.on_resume is not None:
            resume, task.on_resume = task.on_resume, None
            resume()

    def _fault_to_signal(self, err: UcError) -> None:
        regs = self.read_regs()
        kind, addr = self._pending_fault or ("ill", 0)
        self._pending_fault = None
        task = self.task
        self.kernel.fixup_fault(task, regs)
        self.write_regs(regs)
        if kind == "ill":
            self.send_sig(task, SIGILL, addr=regs.rip, detail="invalid opcode")
        else:
            self.send_sig(task, SIGSEGV, addr=addr, detail=f"{kind} fault")
        self._exit_to_user(task, regs)

    # ------------------------------------------------------------------ single steps
    def step(self) -> RunResult | None:
        """Execute exactly one instruction of the current task, with the traps, probes
        and faults handled exactly as in :meth:`run` (the same hooks and fault path).
        Returns the RunResult when the guest ended (exit, fatal signal), else None.

        A ``hlt`` is not executed: a user task gets #GP for it (SIGSEGV at the hlt), as
        ``run`` reports it.  A probed instruction's int3 is one step: the kernel model's
        out-of-line step that follows is the next."""
        if self.exited:
            raise InputError("the guest has already exited")
        if self.recorder is not None and not self.recorder.driving:
            return self.recorder.step()
        self._begin()
        self._translation_mode("step")
        self.icount += 1
        task = self.task
        if self._finish_sleep(task):
            return self._end(self._result) if self._result is not None else None
        rip = self._rip()
        if self._is_hlt(rip):
            regs = self.read_regs()
            self.send_sig(task, SIGSEGV, addr=0, detail="general protection (hlt)")
            self._exit_to_user(task, regs)
        else:
            self._in_step = True
            try:
                self._emulate(rip, None, 1)
            finally:
                self._in_step = False
            if self._stop_precounted:
                self.icount -= 1             # a code hook stopped it before it ran
        self._raise_hook_error()
        if self._result is None:
            return None
        return self._end(self._result)

    def select_task(self, task: Task) -> None:
        """Make runnable ``task`` the current one, as a context switch would (a
        debugger's single step of one thread: gdb's ``vCont;s:TID``).  Only between
        runs; a task that sleeps or is gone raises InputError."""
        if self._running or task not in self.tasks or task.state != "running":
            raise InputError(f"thread {task.tid} cannot be scheduled now")
        self._switch_to(task)

    def _finish_sleep(self, task: Task) -> bool:
        """Before a single step of a task that slept in a syscall: with nobody else to
        run, the idle machine wakes it (the clock jumps to its deadline); once awake its
        syscall completes as in :meth:`run` (result, signal, restart).  True when that
        kernel work was the step (a handler frame, or the guest ended)."""
        if task.state == "blocked" and not any(t.state == "running" for t in self.tasks):
            self.syscalls.idle()
        if task.state != "running":
            return False
        if task.pending_rax is not None or task.on_resume is not None:
            self._switch_to(task)
        return self._resume_exit_work(task)

    def _is_hlt(self, rip: int) -> bool:
        try:
            code = self.mem.read(rip, 15)
        except GuestFault:
            return False
        i = 0
        while i < 14 and code[i] in _LEGACY_PREFIXES:
            i += 1
        return code[i] == 0xF4

    def _translation_mode(self, mode: str) -> None:
        """Unicorn counts instructions (``count=``) with a hook that a translated block
        calls only if it was translated while counting: blocks of a free run would let
        a single step run on, and blocks of single steps call the counting hook on
        every instruction of a later run.  Drop the translations when switching
        between :meth:`step` and :meth:`run`."""
        key = (self.uc, mode)
        if self._tb_mode != key and (mode == "step" or self._tb_mode is not None):
            self.uc.ctl_flush_tb()
        self._tb_mode = key

    # ------------------------------------------------------------------ hooks (front ends)
    def add_code_hook(self, fn, begin: int = 1, end: int = 0, *, process: Process | None = None) -> "Hook":
        """Call ``fn(address, size)`` before each instruction in [begin, end] (begin >
        end: everywhere) of ``process`` (default: the current one).  Unicorn decides at
        translation time which instructions call a hook, so the translations of the
        range are dropped now, and a hook added while the guest runs ends the current
        emu_start (the run resumes at once, with the hook in every block).

        ``fn`` may instead take the native callback's four arguments ``(handle,
        address, size, user_data)`` when it has a true ``native`` attribute (the
        tracer's hot path, one Python frame less); it must then catch its own errors
        and report them with :meth:`hook_failed`."""
        proc = process or self.process
        uc = proc.uc
        if getattr(fn, "native", False):
            thunk = fn
        else:
            def thunk(_handle, address, size, _user_data):
                self._in_code_hook = True
                try:
                    fn(address, size)
                except BaseException as e:  # noqa: BLE001 - re-raised by run()/step()
                    self.hook_failed(e)
                finally:
                    self._in_code_hook = False
        fptr = _CODE_CB(thunk)
        handle = ctypes.c_size_t()
        status = uclib.uc_hook_add(uc._uch, ctypes.byref(handle), UC_HOOK_CODE,
                                   ctypes.cast(fptr, ctypes.c_void_p), None,
                                   ctypes.c_uint64(begin), ctypes.c_uint64(end))
        if status:
            raise UcError(status)
        hook = Hook(uc, handle.value, fptr, begin, end)
        self._live_hooks.add(hook)       # the native thunk lives as long as the hook
        self._flush_range(uc, begin, end)
        return hook

    def add_mem_hook(self, fn, begin: int = 1, end: int = 0, *, access: str = "write",
                     process: Process | None = None) -> "Hook":
        """Call ``fn(access, address, size, value)`` for each guest data access of kind
        ``access`` ("write" or "read") in [begin, end] (begin > end: everywhere)."""
        kind = {"write": UC_HOOK_MEM_WRITE, "read": UC_HOOK_MEM_READ}.get(access)
        if kind is None:
            raise InputError(f"memory hook access must be 'read' or 'write', not {access!r}")
        uc = (process or self.process).uc

        def cb(_uc, acc, address, size, value, _data):
            # a stop asked for here leaves the instruction to run again (Unicorn
            # restarts it on resume): like a code hook's, it has not run
            self._in_code_hook = True
            try:
                fn(access, address, size, value)
            finally:
                self._in_code_hook = False
        hook = Hook(uc, uc.hook_add(kind, cb, None, begin, end), None, begin, end, binding=True)
        self._live_hooks.add(hook)
        self._flush_range(uc, begin, end)
        return hook

    def remove_hook(self, hook: "Hook") -> None:
        """Remove a hook of :meth:`add_code_hook` / :meth:`add_mem_hook` (idempotent)."""
        if hook.handle is None or hook.uc is None:
            return
        if hook.uc._uch is None:             # its address space is gone (exit, exec)
            self._live_hooks.discard(hook)
            hook.handle = None
            return
        if hook.binding:
            hook.uc.hook_del(hook.handle)
        else:
            uclib.uc_hook_del(hook.uc._uch, ctypes.c_size_t(hook.handle))
            # keep the ctypes thunk alive: Unicorn may still be inside this very callback
            self._retired_thunks.append(hook.fptr)
            del self._retired_thunks[:-64]
        # a flush inside a callback leaves the running block chained to stale code: stop
        # the emu_start too (the run resumes at once), as adding a hook does
        self._flush_range(hook.uc, hook.begin, hook.end)
        self._live_hooks.discard(hook)
        hook.handle = None

    def hook_failed(self, err: BaseException) -> None:
        """A front end's hook raised: stop the guest; run()/step() re-raise ``err``."""
        if self._hook_error is None:
            self._hook_error = err
        self._stopped_by_hook = True
        self.uc.emu_stop()

    def _flush_range(self, uc, begin: int, end: int, restart: bool = True) -> None:
        if begin > end:
            uc.ctl_flush_tb()
        else:
            uc.ctl_remove_cache(begin, end + 1)
        if restart and self._running and not self._in_step and uc is self.uc:
            # blocks already chained in this emu_start would not see the change
            self._stopped_by_hook = True
            uc.emu_stop()

    # ------------------------------------------------------------------ registers by name
    def reg_read(self, name: str) -> int:
        """Any register of the current task by its Unicorn name (``rax``, ``fs_base``,
        ``xmm0`` - 128-bit as an int, ``mxcsr``, ``fpcw``...)."""
        return self.uc.reg_read(_uc_reg_id(name))

    def reg_write(self, name: str, value: int) -> None:
        """Write one register by name (see :meth:`reg_read`)."""
        self.uc.reg_write(_uc_reg_id(name), value)

    def task_reg_read(self, task: Task, name: str) -> int:
        """A register of ``task`` by name, on the CPU or not (an off-CPU task's saved
        context)."""
        if task is self.task or task.context is None:
            return task.process.uc.reg_read(_uc_reg_id(name))
        return task.context.reg_read(_uc_reg_id(name))

    def snapshot_reader(self) -> SnapshotReader:
        """A per-instruction reader of every general register of the current process's
        CPU as one int (see :class:`SnapshotReader`)."""
        return SnapshotReader(self.uc)

    @property
    def pc(self) -> int:
        """The current task's rip."""
        return self._rip()

    def fpu_init(self, features: int = fpu.USER_XFEATURES) -> None:
        """The current task's FPU components in ``features`` to their initial state."""
        self.fpu.init(self.uc, features)

    def fpu_restore(self, image: bytes, xfeatures: int, *, fx_only: bool) -> bool:
        """XRSTOR (FXRSTOR when ``fx_only``) ``image`` into the current task's FPU;
        False, nothing changed, where the instruction would fault."""
        return self.fpu.fxrstor(self.uc, image) if fx_only else self.fpu.xrstor(self.uc, image, xfeatures)

    def init_task_context(self, task: Task, regs: PtRegs) -> None:
        """Give a new task (fork/clone child) the CPU state ``regs`` (copy_thread)."""
        proc = task.process
        uc = proc.uc
        shared = uc is self.uc
        saved = uc.context_save() if shared else None
        if not shared:
            self.fpu.copy(self.uc, uc)       # fpu_clone: a forked child keeps the FPU registers
        proc.regfile.write({i: v for i, v in enumerate(regs.values())})
        uc.reg_write(X.UC_X86_REG_RIP, regs.rip)
        task.context = uc.context_save()
        if shared:
            uc.context_restore(saved)
        task.orig_rax = -1

    def interrupted(self) -> bool:
        """Must a waiting read give up?  The run's timeout fired (Unicorn's timer
        thread) or a stop / Ctrl-C was requested."""
        if self._stop_requested is not None or bool(self.uc.query(UCC.UC_QUERY_TIMEOUT)):
            return True
        return self._run_deadline is not None and time.perf_counter() >= self._run_deadline

    # ------------------------------------------------------------------ Ctrl-C
    def interruptible(self):
        """Context manager: SIGINT stops the guest cleanly instead of killing the tool.

        Unicorn runs with the GIL released, so a helper thread waiting on Python's signal
        wakeup fd calls ``emu_stop`` the moment Ctrl-C arrives.
        """
        return _Interruptible(self)


class _Interruptible:
    """Ctrl-C stops the guest.  The Python-level handler stops it on the main thread at
    once (so a read waiting on stdin never sees the EOF that may follow before the
    helper thread runs); the helper thread, woken by the wakeup fd, stops it while
    Unicorn runs guest code with the GIL released, where no Python handler can run.
    A Ctrl-C stays in force for the rest of the block (a run that starts after it
    stops at once)."""

    SIGINT_DETAIL = "interrupted (SIGINT)"

    def __init__(self, machine: Machine):
        self.m = machine

    def _fire(self, *_):
        self.m._sigint = self.SIGINT_DETAIL
        self.m.stop(self.SIGINT_DETAIL)

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            self.active = False
            return self
        self.active = True
        self.m._sigint = None
        self.r, self.w = os.pipe()
        os.set_blocking(self.w, False)
        self.old_fd = host_signal.set_wakeup_fd(self.w)
        self.old_handler = host_signal.signal(host_signal.SIGINT, self._fire)
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def _watch(self):
        while True:
            data = os.read(self.r, 64)
            if not data or b"\xff" in data:
                return
            if host_signal.SIGINT in data:
                self._fire()

    def __exit__(self, *exc):
        if not self.active:
            return False
        host_signal.set_wakeup_fd(self.old_fd)
        host_signal.signal(host_signal.SIGINT, self.old_handler)
        os.write(self.w, b"\xff")
        self.thread.join(1)
        os.close(self.r)
        os.close(self.w)
        self.m._sigint = None
        return False
