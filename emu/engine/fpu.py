"""XSAVE-family instructions executed by the emulated CPU itself on a task's FPU
state (the images :mod:`kernel_model.arch.x86.kernel.fpu` describes)."""

from __future__ import annotations

import ctypes

from unicorn import UC_ARCH_X86, UC_MODE_64, UcError
from unicorn import x86_const as X
from unicorn.unicorn_py3.unicorn import Uc, uclib  # Uc: see emu.engine.regfile

from emu.engine.interface import Fpu
from kernel_model.arch.x86.kernel import fpu
from kernel_model.arch.x86.ptrace import TF

_FPU_CODE, _FPU_BUF = 0x10000, 0x11000
# the scratch instance's own page tables (the borrowed state has paging on): PML4, PDPT,
# PD and PT, mapping the code and buffer pages one to one
_FPU_PML4 = 0x12000
_FPU_TABLES = {
    _FPU_PML4: 0x13000 | 0x67,
    0x13000: 0x14000 | 0x67,
    0x14000: 0x15000 | 0x67,
    0x15000 + (_FPU_CODE >> 12) * 8: _FPU_CODE | 0x67,
    0x15000 + (_FPU_BUF >> 12) * 8: _FPU_BUF | 0x67,
}
# the instructions, each at its own address (written once: no retranslation per use)
_XSAVE, _XRSTOR, _FXRSTOR = _FPU_CODE, _FPU_CODE + 16, _FPU_CODE + 32
_FPU_TEXT = {
    _XSAVE: b"\x48\x0f\xae\x27",  # xsave64 (%rdi)
    _XRSTOR: b"\x48\x0f\xae\x2f",  # xrstor64 (%rdi)
    _FXRSTOR: b"\x48\x0f\xae\x0f",
}  # fxrstor64 (%rdi)
# the registers the scratch run uses: rdi, rax, rdx, rip, eflags
_FPU_REGS = (X.UC_X86_REG_RDI, X.UC_X86_REG_RAX, X.UC_X86_REG_RDX, X.UC_X86_REG_RIP, X.UC_X86_REG_EFLAGS)


class FpuUnit(Fpu):
    """XSAVE-family instructions on a task's CPU state (:mod:`kernel_model.arch.x86.kernel.fpu`): a scratch
    Unicorn instance borrows the state (a context), executes ``xsave64`` /
    ``xrstor64`` / ``fxrstor64`` on a buffer of its own and hands the state back - the
    guest's registers other than the FPU's are left as they were.  Unicorn's XRSTOR
    does not check MXCSR's reserved bits or the header: :func:`kernel_model.arch.x86.kernel.fpu.valid_for_restore`
    does, as the hardware would."""

    checkpoint_by_reference = True

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
            uc.ctl_set_tcg_buffer_size(4 << 20)  # three instructions: not the default 1 GiB
            uc.mem_map(_FPU_CODE, 0x6000)
            for at, insn in _FPU_TEXT.items():
                uc.mem_write(at, insn)
            for at, entry in _FPU_TABLES.items():
                uc.mem_write(at, entry.to_bytes(8, "little"))
            self._uc = uc
        return self._uc

    def _batch(self, fn, ptrs) -> None:
        status = fn(self._uc._uch, self._ids, ptrs, len(_FPU_REGS))  # type: ignore[union-attr]  # made by then
        if status:
            raise UcError(status)

    def _run(self, uc: Uc, at: int, rfbm: int, image: bytes | None) -> bytes:
        """Execute the instruction at ``at`` on (%rdi) = the buffer with edx:eax =
        ``rfbm`` on ``uc``'s CPU state (TF off); when ``image`` was given the state
        afterwards becomes ``uc``'s, the registers used put back.  Returns the buffer."""
        s = self._scratch()
        s.context_restore(uc.context_save())
        cr3 = s.reg_read(X.UC_X86_REG_CR3)
        paged = s.reg_read(X.UC_X86_REG_CR0) >> 31
        if paged:
            s.reg_write(X.UC_X86_REG_CR3, _FPU_PML4)  # the scratch's own tables
        self._batch(uclib.uc_reg_read_batch, self._saved_ptrs)
        if image is not None:
            s.mem_write(_FPU_BUF, image)
        self._setup[:] = [_FPU_BUF, rfbm & 0xFFFFFFFF, rfbm >> 32, at, self._saved[4] & ~TF]
        self._batch(uclib.uc_reg_write_batch, self._setup_ptrs)  # no single-step trap in here
        s.emu_start(at, at + 4)
        out = bytes(s.mem_read(_FPU_BUF, fpu.USER_XSTATE_SIZE))
        if image is not None:
            self._batch(uclib.uc_reg_write_batch, self._saved_ptrs)
            if paged:
                s.reg_write(X.UC_X86_REG_CR3, cr3)
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
        self._run(uc, _FXRSTOR, 0, image[: fpu.FXSAVE_SIZE].ljust(fpu.USER_XSTATE_SIZE, b"\0"))
        return True

    def init(self, uc: Uc, features: int = fpu.USER_XFEATURES) -> None:
        """os_xrstor(&init_fpstate, features): those components to their initial state
        (fpu__clear_user_states for a handler, fpstate_init at exec)."""
        self._run(uc, _XRSTOR, features & fpu.USER_XFEATURES, fpu.init_image())

    def copy(self, src: Uc, dst: Uc) -> None:
        """fpu_clone: ``dst`` gets ``src``'s FPU registers."""
        self._run(dst, _XRSTOR, fpu.USER_XFEATURES, self.xsave(src))
