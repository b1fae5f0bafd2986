"""A task's FPU/SSE registers as XSAVE images (arch/x86/kernel/fpu/: signal.c, xstate.c).

The emulated CPU is Unicorn's: CPUID enumerates XSAVE and OSXSAVE but not AVX, and XCR0
is x87 | SSE (leaf 0xD reports a 576-byte standard-format area for it).  That is the
kernel's ``fpu_user_cfg`` here: user features FP|SSE, ``user_size`` 576 bytes - the
legacy FXSAVE region (512) and the XSAVE header (64).

The images are made by the emulated CPU itself (``emu.engine.fpu.FpuUnit`` runs the
XSAVE-family instructions on the task's CPU state), so the bytes a signal frame holds
are what the guest's own ``xsave`` would store.  This module holds the layout and the
checks the restoring instruction makes.
"""

from __future__ import annotations

import struct

XFEATURE_MASK_FP, XFEATURE_MASK_SSE = 0x1, 0x2
XFEATURE_MASK_FPSSE = XFEATURE_MASK_FP | XFEATURE_MASK_SSE
USER_XFEATURES = XFEATURE_MASK_FPSSE  # fpu_user_cfg.max_features (= default_features)
FXSAVE_SIZE = 512  # struct fxregs_state
XSAVE_HDR_SIZE = 64  # struct xstate_header
USER_XSTATE_SIZE = FXSAVE_SIZE + XSAVE_HDR_SIZE  # fpu_user_cfg.max_size / default_size
MXCSR_OFFSET, MXCSR_MASK_OFFSET = 24, 28
MXCSR_DEFAULT, FCW_DEFAULT = 0x1F80, 0x37F  # init_fpstate (fpstate_init_fx)
# The CPU's MXCSR_MASK (what fxsave stores at offset 28): a set bit outside it in a
# restored MXCSR is a #GP of the restoring instruction.
MXCSR_FEATURE_MASK = 0xFFFF


def init_image() -> bytes:
    """init_fpstate as a standard-format image: FCW 0x37f, MXCSR 0x1f80, every other
    register zero, XSTATE_BV 0 (each component in its initial configuration)."""
    img = bytearray(USER_XSTATE_SIZE)
    struct.pack_into("<H", img, 0, FCW_DEFAULT)
    struct.pack_into("<II", img, MXCSR_OFFSET, MXCSR_DEFAULT, MXCSR_FEATURE_MASK)
    return bytes(img)


def valid_for_restore(image: bytes, header: bool) -> bool:
    """Would XRSTOR (``header``) or FXRSTOR of ``image`` run without #GP?  Not with a
    reserved MXCSR bit; for XRSTOR not with XSTATE_BV bits beyond XCR0, a non-zero
    XCOMP_BV or reserved header bytes (the standard form)."""
    (mxcsr,) = struct.unpack_from("<I", image, MXCSR_OFFSET)
    if mxcsr & ~MXCSR_FEATURE_MASK:
        return False
    if not header:
        return True
    xstate_bv, xcomp_bv = struct.unpack_from("<QQ", image, FXSAVE_SIZE)
    reserved = image[FXSAVE_SIZE + 16 : FXSAVE_SIZE + 24]
    return not xstate_bv & ~USER_XFEATURES and not xcomp_bv and not any(reserved)
