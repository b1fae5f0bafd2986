"""Register access for the machine at native cost: the CPU state read and written in
place, and native batches for what cannot be.

A probe hit's budget is a few microseconds and a call into Unicorn through ctypes costs
about 0.4 of them, so the trap path makes none for the general registers: the engine's
``CPUX86State`` (``regs[16]``, ``eip``, ``eflags``) is viewed as a memoryview of 18
words (:class:`CpuWindow`).  ``uc_reg_read`` of a general register or rip is a load
from the same words and ``uc_reg_write`` of a general register a store into them, so the
window is exact for those.  Two things still go through Unicorn:

* the full eflags: QEMU keeps the arithmetic flags lazily (``cc_op``/``cc_src``) and
  ``uc_reg_read`` computes them; only the control bits, TF among them, are in the word;
* rip written outside a trap: ``uc_reg_write`` also makes a running block end, which a
  code hook needs.  A trap (an exception, or the ``syscall`` helper, which ends its
  block) resumes from ``eip`` anyway, so it may store rip in place.

Where the layout is not recognised (another Unicorn build), every access falls back to
the native batch calls, with the same results.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import struct
from typing import TYPE_CHECKING

from unicorn import UC_ARCH_X86, UC_MODE_64, UcError
from unicorn import unicorn_const as UCC
from unicorn import x86_const as X

# Uc from the module that defines it (the class ``unicorn.Uc`` is): ``unicorn.unicorn`` picks
# its module by ``sys.version_info.major``, which the type checker reads as Python 2's.
from unicorn.unicorn_py3.unicorn import Uc, uclib

from kernel_model.arch.x86.ptrace import EFLAGS, GPR_NAMES, RF, RIP, TF, TF_ONLY, PtRegs

_UC_IDS = tuple(getattr(X, "UC_X86_REG_" + n.upper()) for n in GPR_NAMES)
_EFLAGS_ID = X.UC_X86_REG_EFLAGS
# CPUX86State.regs[] order (R_EAX, R_ECX, R_EDX, R_EBX, R_ESP, R_EBP, R_ESI, R_EDI,
# r8..r15), then eip and eflags: the window's 18 words.
_QEMU_ORDER = (
    "rax",
    "rcx",
    "rdx",
    "rbx",
    "rsp",
    "rbp",
    "rsi",
    "rdi",
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
)
WINDOW_WORDS = len(_QEMU_ORDER)
W_RIP, W_EFLAGS = 16, 17
# GPR_NAMES index -> window word, for the 17 registers the window holds exactly
WINDOW_SLOT = {GPR_NAMES.index(n): k for k, n in enumerate(_QEMU_ORDER[:W_EFLAGS])}
W_RCX, W_RDX, W_RSI, W_RDI, W_R8, W_R9, W_R10, W_R11 = (
    _QEMU_ORDER.index(n) for n in ("rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11")
)
N_REGS = len(GPR_NAMES)
# what the window does not hold exactly: eflags, fs_base, gs_base
EXTRA = tuple(i for i in range(len(GPR_NAMES)) if i not in WINDOW_SLOT)  # (17, 18, 19)
_MASK64 = 0xFFFFFFFFFFFFFFFF


_SECOND_SALT = 0x0000_5EC0_0000_0000
_MOVED_SALT = 0x0000_0000_A110_0000  # the second pattern of each instance (_candidates)


def _pattern(k: int) -> int:
    return 0x5A17_0000_0000_0000 | (k + 1) << 32 | 0x0000_C0DE ^ (k * 0x1111)


@functools.cache
def cpu_window_layout() -> tuple[int, int] | None:
    """(offset in ``uc_struct`` of the CPU pointer, offset from the CPU to
    ``env.regs``), found once per process on two scratch instances: every general
    register and rip are set to distinct patterns through the API and looked for behind
    each pointer of the uc_struct.  Memory is read through ``/proc/self/mem``, so a word
    that is no pointer costs an EIO, never a crash.  The layout is then verified both
    ways (API write, window read; window write, API read; TF in both directions) on a
    third.  None: not recognised.

    The search takes about 15 ms, as long as starting a small program, so the layout
    found for a Unicorn library is kept in the user's cache directory
    (:func:`layout_cache_path`) and the next process checks it - through
    ``/proc/self/mem`` first, then both ways as above - instead of searching again."""
    try:
        fd = os.open("/proc/self/mem", os.O_RDONLY)
    except OSError:
        return None
    try:
        cached = _load_cached_layout()
        if cached is not None and _layout_holds(fd, cached) and _verify_layout(*cached):
            return cached
        found = _search_layout(fd)
    finally:
        os.close(fd)
    if found is None or not _verify_layout(*found):
        return None
    _store_cached_layout(found)
    return found


def _library_identity() -> str:
    """The cache's key: the loaded Unicorn library's path, inode, size and modification
    time (another build or version of it is another file)."""
    path = os.path.realpath(uclib._name)
    st = os.stat(path)
    return f"{path}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


# Unicorn libraries whose layout the cache keeps (one per virtual environment, say)
_CACHED_LIBRARIES = 16


def layout_cache_path() -> str:
    """Where the register-window layout of each Unicorn library is kept:
    ``$XDG_CACHE_HOME/uprobe-emu/register-window.json`` (``~/.cache`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "uprobe-emu", "register-window.json")


def _read_cache() -> dict:
    try:
        with open(layout_cache_path()) as f:
            entries = json.load(f)
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _load_cached_layout() -> tuple[int, int] | None:
    entry = _read_cache().get(_library_identity())
    if not (
        isinstance(entry, list) and len(entry) == 2 and all(isinstance(v, int) and 0 <= v < 1 << 24 for v in entry)
    ):
        return None
    return entry[0], entry[1]


def _store_cached_layout(layout: tuple[int, int]) -> None:
    """Written to a temporary file renamed over the old one, so a reader never sees half
    of it; a cache that cannot be written is no error (the next process searches)."""
    path = layout_cache_path()
    entries = _read_cache()
    entries.pop(_library_identity(), None)
    entries = dict(list(entries.items())[-(_CACHED_LIBRARIES - 1) :])  # the most recent ones
    entries[_library_identity()] = list(layout)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(entries, f)
        os.replace(tmp, path)
    except OSError:
        pass


def _layout_holds(fd: int, layout: tuple[int, int]) -> bool:
    """A cached layout leads to the registers of a scratch instance, read through
    ``/proc/self/mem`` (a file written by anyone else, or for another build, must not
    make :func:`_verify_layout` touch memory that is not the CPU's)."""
    uc = _scratch_uc()
    try:
        pat = _set_patterns(uc, _MOVED_SALT)
        cpu = _read_or_none(fd, 8, _uch(uc) + layout[0])
        if cpu is None:
            return False
        return _read_or_none(fd, len(pat), struct.unpack("<Q", cpu)[0] + layout[1]) == pat
    finally:
        del uc


def _scratch_uc() -> Uc:
    uc = Uc(UC_ARCH_X86, UC_MODE_64)
    uc.ctl_set_tcg_buffer_size(4 << 20)  # a scratch: not the default 1 GiB of address space
    uc.mem_map(0x1000, 0x1000)
    uc.mem_write(0x1000, b"\x90" * 16)
    uc.emu_start(0x1000, 0x1004)  # the CPU exists and has run
    return uc


def _set_patterns(uc: Uc, salt: int) -> bytes:
    for k, name in enumerate(_QEMU_ORDER[:W_EFLAGS]):
        uc.reg_write(getattr(X, "UC_X86_REG_" + name.upper()), _pattern(k) ^ salt)
    return struct.pack("<17Q", *(_pattern(k) ^ salt for k in range(W_EFLAGS)))


def _search_layout(fd: int) -> tuple[int, int] | None:
    """The (pointer offset, env offset) pairs that find the patterns on two instances
    alive at once (so at different places of the heap); of those, the one most
    pointers of the uc_struct agree on (the CPU pointer is kept in several places).
    The scratch instances are closed before it returns: each holds a translation
    buffer, and a process may run under a small address-space limit."""
    first = _scratch_uc()
    second = _scratch_uc()
    try:
        # a pattern of its own for each: the two CPUs may lie within one block read,
        # and the same pattern twice in a block is rejected as ambiguous
        a, b = _candidates(fd, first, 0), _candidates(fd, second, _SECOND_SALT)
        hits = {off: env for off, env in a.items() if b.get(off) == env}
        # some of the uc_struct's pointers hold the CPU only for a while (the one in
        # use by the translator, say): keep those that still do after the engine has
        # run, flushed its translations and restored a context
        before = _pointers(fd, first)
        _exercise(first)
        after = _pointers(fd, first)
        hits = {off: env for off, env in hits.items() if before.get(off) == after.get(off)}
    finally:
        del first, second
    if not hits:
        return None
    by_target: dict[int, list[int]] = {}
    for off, env_off in hits.items():
        by_target.setdefault(env_off, []).append(off)
    env_off, offs = max(by_target.items(), key=lambda kv: (len(kv[1]), -kv[0]))
    return min(offs), env_off


def _pointers(fd: int, uc: Uc) -> dict[int, int]:
    try:
        head = os.pread(fd, 0x2000, _uch(uc))
    except OSError:
        return {}
    return {off: struct.unpack_from("<Q", head, off)[0] for off in range(0, len(head) - 7, 8)}


def _exercise(uc: Uc) -> None:
    """What the machine does to an engine between traps, a few times over."""
    for _ in range(3):
        uc.emu_start(0x1000, 0x1004)
        uc.context_restore(uc.context_save())
        uc.ctl_flush_tb()
        uc.mem_map(0x8000, 0x1000)
        uc.mem_unmap(0x8000, 0x1000)


def _candidates(fd: int, uc: Uc, salt: int) -> dict[int, int]:
    """{uc_struct offset: offset of the registers behind that pointer} for ``uc``.

    Every place the pattern is found must also follow the registers: they are set to a
    second pattern and that place read again.  A copy that stays as it was - a freed
    engine's CPU, or the pattern's bytes in Python's heap next to the CPU - is no CPU
    state; more than one place that follows is ambiguous."""
    pat = _set_patterns(uc, salt)
    base = _uch(uc)
    try:
        head = os.pread(fd, 0x2000, base)
    except OSError:
        return {}
    found = {}
    for off in range(0, len(head) - 7, 8):
        ptr = struct.unpack_from("<Q", head, off)[0]
        if not 0x10000 <= ptr < 1 << 47:
            continue
        try:
            blk = os.pread(fd, 0x20000, ptr)
        except OSError:
            continue
        ats, at = [], blk.find(pat)
        while at >= 0:
            if at % 8 == 0:
                ats.append(at)
            at = blk.find(pat, at + 1)
        if ats:
            found[off] = (ptr, ats)
    if not found:
        return {}
    moved = _set_patterns(uc, salt ^ _MOVED_SALT)
    out = {}
    for off, (ptr, ats) in found.items():
        live = [at for at in ats if _read_or_none(fd, len(moved), ptr + at) == moved]
        if len(live) == 1:
            out[off] = live[0]
    return out


def _read_or_none(fd: int, n: int, at: int) -> bytes | None:
    try:
        return os.pread(fd, n, at)
    except OSError:
        return None


def _uch(uc: Uc) -> int:
    h = uc._uch
    return h.value if isinstance(h, ctypes.c_void_p) else int(h)  # type: ignore[return-value]  # not NULL: live


def _verify_layout(cpu_off: int, env_off: int) -> bool:
    uc = _scratch_uc()
    win = _window_at(uc, (cpu_off, env_off))
    if win is None:
        return False
    for salt in (0x0123_4567_89AB_CDEF, 0xFFFF_0000_FFFF_0000):
        expect = struct.unpack("<17Q", _set_patterns(uc, salt))
        if tuple(win[:W_EFLAGS]) != expect:
            return False
    for k, name in enumerate(_QEMU_ORDER[:W_EFLAGS]):
        win[k] = 0x7700 + k
        if uc.reg_read(getattr(X, "UC_X86_REG_" + name.upper())) != 0x7700 + k:
            return False
    for flags in (0x302, 0x202):  # TF in, TF out: the control bits are in the word
        uc.reg_write(X.UC_X86_REG_EFLAGS, flags)
        if win[W_EFLAGS] & TF != flags & TF:
            return False
        win[W_EFLAGS] ^= TF
        if uc.reg_read(X.UC_X86_REG_EFLAGS) != flags ^ TF:
            return False
    return True


def _window_at(uc: Uc, layout: tuple[int, int]) -> memoryview | None:
    """The window of ``uc`` (its CPU is made first: Unicorn creates it lazily), checked
    once on this instance: a register written through the API reads back in place."""
    r15 = uc.reg_read(X.UC_X86_REG_R15)
    cpu = ctypes.c_uint64.from_address(_uch(uc) + layout[0]).value
    if not cpu:
        return None
    words = (ctypes.c_uint64 * WINDOW_WORDS).from_address(cpu + layout[1])
    win = memoryview(words).cast("B").cast("Q")
    probe = r15 ^ 0x5A5A_A5A5_0F0F_F0F0
    uc.reg_write(X.UC_X86_REG_R15, probe)
    ok = win[15] == probe
    uc.reg_write(X.UC_X86_REG_R15, r15)
    return win if ok and win[15] == r15 else None


def _unprototyped(name: str):
    fn = getattr(ctypes.CDLL(uclib._name), name)
    fn.argtypes = None
    fn.restype = ctypes.c_int
    return fn


class RegisterFile:
    """The registers of one Unicorn instance for the trap and syscall paths.

    :meth:`read_all` gives every register of ``GPR_NAMES``; :meth:`read_window` the 17
    the window holds (all but eflags, fs_base, gs_base), :meth:`read_extra` those three
    in one native batch; :meth:`write` stores only what changed.  ``window`` is the
    memoryview of the CPU state (None: not available, and the native batches do
    everything).  A closed engine is an error here, never an access to freed memory."""

    checkpoint_by_reference = True

    def __init__(self, uc: Uc, *, use_window: bool = True):
        n = len(GPR_NAMES)
        self._uc = uc
        self._read = _unprototyped("uc_reg_read_batch")
        self._write = _unprototyped("uc_reg_write_batch")
        self._n = ctypes.c_int(n)
        self._ids = (ctypes.c_int * n)(*_UC_IDS)
        self._buf = (ctypes.c_uint64 * n)()
        self._ptrs = self._pointers(self._buf, n)
        nx = len(EXTRA)
        self._xn = ctypes.c_int(nx)
        self._xids = (ctypes.c_int * nx)(*(_UC_IDS[i] for i in EXTRA))
        self._xbuf = (ctypes.c_uint64 * nx)()
        self._xptrs = self._pointers(self._xbuf, nx)
        # list views of the read buffers (a memoryview's tolist: half a ctypes slice)
        self._bufv = memoryview(self._buf).cast("B").cast("Q")
        self._xbufv = memoryview(self._xbuf).cast("B").cast("Q")
        self._wid = (ctypes.c_int * n)()
        self._wbuf = (ctypes.c_uint64 * n)()
        self._wptrs = self._pointers(self._wbuf, n)
        self._read1 = _unprototyped("uc_reg_read")
        self._flags = ctypes.c_uint64()
        self._flags_ptr = ctypes.byref(self._flags)
        layout = cpu_window_layout() if use_window else None
        self.window = _window_at(uc, layout) if layout is not None else None
        # the pt_regs of a trap and of a syscall: one object each, filled afresh at
        # every entry (nothing allocated per hit); valid while that trap lasts
        self._trap_regs = TrapRegs._over(self)
        self._syscall_regs = TrapRegs._over(self)

    @staticmethod
    def _pointers(buf, n: int):
        base = ctypes.addressof(buf)
        return (ctypes.c_void_p * n)(*[base + 8 * i for i in range(n)])

    def _handle(self):
        uch = self._uc._uch
        if uch is None:
            raise UcError(UCC.UC_ERR_HANDLE)
        return uch

    def release(self) -> None:
        """The engine is being closed: no access through the window from now on (a
        :class:`TrapRegs` holding it gets a ValueError from the released view)."""
        win, self.window = self.window, None
        if win is not None:
            win.release()

    def read_all(self) -> list[int]:
        """Every register of ``GPR_NAMES``."""
        if self.window is None:
            status = self._read(self._handle(), self._ids, self._ptrs, self._n)
            if status:
                raise UcError(status)
            return self._bufv.tolist()
        v = self.read_window()
        v[17:] = self.read_extra()  # EXTRA: the last three
        return v

    def read_window(self) -> list[int]:
        """``GPR_NAMES`` order with the window's 17 registers set, eflags and the bases 0."""
        win = self.window
        if win is None:
            return self.read_all()
        if self._uc._uch is None:  # _handle(), inline
            raise UcError(UCC.UC_ERR_HANDLE)
        ax, cx, dx, bx, sp, bp, si, di, r8, r9, r10, r11, r12, r13, r14, r15, ip, _ = win.tolist()
        return [ax, bx, cx, dx, si, di, bp, sp, r8, r9, r10, r11, r12, r13, r14, r15, ip, 0, 0, 0]

    def read_extra(self) -> list[int]:
        """[eflags, fs_base, gs_base], computed by Unicorn."""
        status = self._read(self._handle(), self._xids, self._xptrs, self._xn)
        if status:
            raise UcError(status)
        return self._xbufv.tolist()

    def trap_regs(self, orig_rax: int) -> PtRegs:
        """The registers at a trap (#BP, #DB): a :class:`TrapRegs` over the CPU state,
        rip and TF read now, eflags and the bases when asked for; without the window,
        a snapshot of all of them."""
        win = self.window
        if win is None:
            return PtRegs(self.read_all(), orig_rax)
        if self._uc._uch is None:  # _handle(), inline
            raise UcError(UCC.UC_ERR_HANDLE)
        regs = self._trap_regs  # PtRegs.at_trap, inline, on the one object
        regs._v = regs._orig = regs._load = regs._flags = None
        regs._loadx = self
        regs.orig_rax = orig_rax
        if regs._dirty:
            regs._dirty = set()
        regs.rip = regs._rip0 = win[W_RIP]
        regs.tf = regs._tf0 = win[W_EFLAGS] & TF
        return regs

    def syscall_entry(self) -> tuple[PtRegs, tuple]:
        """The registers at a ``syscall`` instruction as entry_SYSCALL_64 sees them,
        and the six arguments (rdi, rsi, rdx, r10, r8, r9).  The hardware's part is
        done: rcx holds the next rip and r11 rflags without RF; rip is past the
        instruction (stored when the syscall returns), orig_rax is the number.  With
        the window, a :class:`TrapRegs` (the CPU stops in the hook as at a trap): the
        flags are read once for r11 and TF, eflags and the bases again only if a
        handler asks (the CPU's stay as they were); else a snapshot."""
        win = self.window
        if win is None:
            regs = PtRegs.at_syscall(self.read_all())
            return regs, (regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9)
        flags = self.read_eflags()  # checks the handle
        regs = self._syscall_regs
        regs._loadx = self
        regs._flags = flags
        regs._v = regs._orig = regs._load = None
        if regs._dirty:
            regs._dirty = set()
        regs.orig_rax = win[0]
        regs._rip0 = ip = win[W_RIP]
        regs.rip = nxt = (ip + 2) & _MASK64
        regs.tf = regs._tf0 = flags & TF
        win[W_RCX], win[W_R11] = nxt, flags & ~RF
        return regs, (win[W_RDI], win[W_RSI], win[W_RDX], win[W_R10], win[W_R8], win[W_R9])

    def read_eflags(self) -> int:
        """eflags, computed by Unicorn: one native read of that register alone."""
        uch = self._uc._uch
        if uch is None:  # _handle(), inline
            raise UcError(UCC.UC_ERR_HANDLE)
        status = self._read1(uch, _EFLAGS_ID, self._flags_ptr)
        if status:
            raise UcError(status)
        return self._flags.value

    def write_back(self, regs: PtRegs) -> None:
        """The end of a trap: what the handlers changed, stored where the CPU resumes.
        rip and TF alone (the common case: an emulated instruction, an out-of-line
        step) go straight into the window; anything else through :meth:`write`."""
        win = self.window
        if win is None or regs._dirty or regs._loadx is None:
            changes = regs.changed()
            if changes:
                self.write(changes, in_trap=True)
            return
        if self._uc._uch is None:
            raise UcError(UCC.UC_ERR_HANDLE)
        rip = regs.rip
        if rip != regs._rip0:
            win[W_RIP] = int(rip) & _MASK64
        if bool(regs.tf) != bool(regs._tf0):
            win[W_EFLAGS] = (win[W_EFLAGS] & ~TF) | (TF if regs.tf else 0)

    def syscall_exit(self, regs: PtRegs) -> None:
        """The end of the ``syscall`` hook: what the syscall changed, stored where the
        CPU resumes.  Unicorn adds 2 to rip after the hook returns, so rip X is stored
        as X - 2.  With only rip and TF changed (every general register of a
        :class:`TrapRegs` is already in place) they go straight into the window."""
        win = self.window
        if win is None or regs._dirty or type(regs) is not TrapRegs:
            changes = regs.changed()
            changes[RIP] = (regs.rip - 2) & _MASK64
            self.write(changes, in_trap=True)
            return
        if self._uc._uch is None:
            raise UcError(UCC.UC_ERR_HANDLE)
        win[W_RIP] = (int(regs.rip) - 2) & _MASK64
        if bool(regs.tf) != bool(regs._tf0):  # (eflags not set: its TF bit is _tf0)
            win[W_EFLAGS] = (win[W_EFLAGS] & ~TF) | (TF if regs.tf else 0)

    def write(self, changes: dict[int, int], *, in_trap: bool = False) -> None:
        """Store ``{GPR_NAMES index: value}`` (:meth:`PtRegs.changed`; ``TF_ONLY``: the
        trap flag alone, to TF or 0).  ``in_trap``: the CPU resumes from eip after this
        (an exception or the syscall helper), so rip may be stored in place."""
        if not changes:
            return
        win = self.window
        if win is not None and self._uc._uch is None:  # _handle(), inline
            raise UcError(UCC.UC_ERR_HANDLE)
        k = 0
        wid, wbuf = self._wid, self._wbuf
        tf = None
        for i, v in changes.items():
            if i == TF_ONLY:
                tf = v
                continue
            slot = WINDOW_SLOT.get(i) if win is not None else None
            if slot is not None and (slot != W_RIP or in_trap):
                win[slot] = v & _MASK64  # type: ignore[index]  # a slot is only found with the window
                continue
            wid[k] = _UC_IDS[i]
            wbuf[k] = v & _MASK64
            k += 1
        if k:
            status = self._write(self._handle(), wid, self._wptrs, ctypes.c_int(k))
            if status:
                raise UcError(status)
        if tf is not None:
            if win is not None:  # _write_tf, inline
                win[W_EFLAGS] = (win[W_EFLAGS] & ~TF) | (TF if tf else 0)
            else:
                self._write_tf(tf)

    def _write_tf(self, tf: int) -> None:
        """The trap flag alone.  QEMU keeps TF in ``env->eflags`` (cpu_load_eflags
        stores it there, and the next block's flags are taken from it), so in place it
        is exactly the API's write of eflags with only that bit changed."""
        win = self.window
        if win is not None:
            win[W_EFLAGS] = (win[W_EFLAGS] & ~TF) | (TF if tf else 0)
            return
        flags = self.read_extra()[0]
        self.write({EFLAGS: (flags & ~TF) | (TF if tf else 0)})


class TrapRegs(PtRegs):
    """pt_regs at a #BP or #DB trap with rax..r15 in the CPU state itself.

    While a trap lasts the CPU is stopped and its state is the task's pt_regs, as the
    kernel's trap frame is: a handler reads a register from the window and a write goes
    there at once, so nothing is listed, copied or written back for them.  rip and TF
    stay plain attributes stored when the trap ends (:meth:`RegisterFile.write_back`);
    eflags, fs_base and gs_base are read and written through Unicorn as in
    :class:`PtRegs`.  Also the registers of the ``syscall`` hook, where the CPU is
    stopped as well.  Valid while the trap lasts (a context's ``regs``): a register file
    has one for its traps and one for its syscalls, filled afresh at each entry, as the
    kernel's pt_regs sit at the same place of the task's stack each time.  :meth:`copy`
    is a snapshot that outlives the trap.  Once the engine is closed an access is a
    UcError."""

    __slots__ = ("_rf", "_w", "_flags")

    if TYPE_CHECKING:
        _rf: RegisterFile
        _w: memoryview  # the CPU state's rax..r15 (RegisterFile.window)
        _flags: int | None  # eflags read at a syscall's entry (None: not read)

    @classmethod
    def _over(cls, rf: RegisterFile) -> "TrapRegs":
        """The registers object of ``rf``'s traps (its fields are set at each entry)."""
        self = cls.__new__(cls)
        self._rf, self._w = rf, rf.window  # type: ignore[assignment]  # made only with a window
        self._v = self._orig = self._load = self._loadx = self._flags = None
        self._dirty = set()
        self.orig_rax, self.rip = -1, 0
        self._rip0, self.tf, self._tf0 = 0, 0, 0
        return self

    def stores_nothing(self, rip: int) -> bool:
        """Would ending the trap with rip at ``rip`` store nothing?  TF as at the trap,
        eflags and the bases not written (rax..r15 are the CPU state already)."""
        return self.rip == rip and not self._dirty and self.tf == self._tf0

    def values(self) -> list[int]:
        if self._loadx is not None:
            self._fillx()
        v = self._rf.read_window()
        x = self._v
        v[RIP] = self.rip & _MASK64
        v[EFLAGS] = (x[EFLAGS] & ~TF) | (TF if self.tf else 0)
        v[EFLAGS + 1 :] = x[EFLAGS + 1 :]
        return v


def _in_place_property(slot: int) -> property:
    """rax..r15 of a TrapRegs: a load from / a store into its window (``_w``), the CPU
    state itself.  A value that is no int, or a window released with its engine, takes
    the slow path: the int conversion, or the UcError of a closed engine."""
    mask = _MASK64

    def get_(self):
        try:
            return self._w[slot]
        except ValueError:  # released with its engine
            raise UcError(UCC.UC_ERR_HANDLE) from None

    def set_(self, value):
        try:
            self._w[slot] = value & mask
        except (TypeError, ValueError):
            _set_slow(self, slot, value)

    return property(get_, set_)


def _set_slow(regs: TrapRegs, slot: int, value) -> None:
    value = int(value) & _MASK64
    try:
        regs._w[slot] = value
    except ValueError:  # released with its engine
        raise UcError(UCC.UC_ERR_HANDLE) from None


for _i, _slot in WINDOW_SLOT.items():
    if _i != RIP:  # rip stays the snapshot's plain attribute
        setattr(TrapRegs, GPR_NAMES[_i], _in_place_property(_slot))
del _i, _slot


def _trap_eflags(self):
    """eflags with TF from ``tf``; at a syscall the value read at entry (for r11)
    serves until something sets eflags, so it is not read twice."""
    if self._loadx is not None:
        flags = self._flags
        if flags is not None:
            return (flags & ~TF) | (TF if self.tf else 0)
        self._fillx()
    return (self._v[EFLAGS] & ~TF) | (TF if self.tf else 0)


# (the checker knows a register property as PtRegs declares it, not as the property it is)
TrapRegs.eflags = property(_trap_eflags, vars(PtRegs)["eflags"].fset)  # type: ignore[assignment]


class SnapshotReader:
    """All of ``GPR_NAMES`` in one native ``uc_reg_read_batch`` per call, returned as a
    snapshot int (slot i = register i), for a per-instruction tracer.  The call goes
    through an unprototyped ctypes function with arguments converted once: half the
    cost of the prototyped binding call.  The attributes ``fn``, ``uch``, ``ids``,
    ``ptrs``, ``n`` and ``buf`` let a hot loop make the call itself:
    ``fn(uch, ids, ptrs, n)`` (non-zero: failed) fills ``buf``."""

    checkpoint_by_reference = True

    def __init__(self, uc):
        n = len(GPR_NAMES)
        self.ids = (ctypes.c_int * n)(*_UC_IDS)
        self.buf = (ctypes.c_uint64 * n)()
        base = ctypes.addressof(self.buf)
        self.ptrs = (ctypes.c_void_p * n)(*[base + 8 * i for i in range(n)])
        self.n = ctypes.c_int(n)
        self.uch = uc._uch if isinstance(uc._uch, ctypes.c_void_p) else ctypes.c_void_p(uc._uch)
        self.fn = _unprototyped("uc_reg_read_batch")
        self.uc = uc  # keeps the engine alive as long as the reader

    def __call__(self) -> int:
        """The registers now, as a snapshot int."""
        if self.fn(self.uch, self.ids, self.ptrs, self.n):
            raise UcError(UCC.UC_ERR_ARG)
        return int.from_bytes(self.buf, "little")
