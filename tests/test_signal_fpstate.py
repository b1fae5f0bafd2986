"""FP/SSE state in the signal frame (arch/x86/kernel/fpu/signal.c: get_sigframe,
copy_fpstate_to_sigframe, fpu__restore_sig).  The frame carries an XSAVE image at
``uc_mcontext.fpstate`` (64-byte aligned below the red zone, the rt_sigframe below it),
with the ``_fpx_sw_bytes`` and FP_XSTATE_MAGIC2; the handler starts with a clean FPU;
rt_sigreturn restores the saved state, so a handler that clobbers xmm registers or
MXCSR does not corrupt the interrupted code and one that edits the frame changes the
resumed state.  Compared with native runs of the same guest; the byte layout checked
exactly for the emulated CPU (XCR0 = x87 | SSE: a 576-byte image)."""

from __future__ import annotations

import struct
import subprocess

import pytest
from native_helpers import assert_native_then_model

from emu import Machine
from kernel_model.arch.x86.kernel import signal as sf
from kernel_model.trace import events as ev

PATTERN = b"".join(struct.pack("<Q", q) for q in (0x1122334455667788, 0x99AABBCCDDEEFF00))
AFTER = b"after xmm3=99aabbccddeeff001122334455667788 mxcsr=3f80 fcw=27f\n"


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("fpstate.c", "-static", name="fpstate")


@pytest.mark.parametrize(
    "mode, expected",
    [
        (
            "layout",
            b"uc_flags=7 fp_aligned=1 fp_below_redzone=1 frame_below_fp=1 magic1=1 ext_is_size+4=1 "
            b"size_covers_fpsse=1 magic2=1 xfeat_fpsse=1 bv_fpsse=1 pad=0\n" + AFTER,
        ),
        ("saved", b"saved xmm3=99aabbccddeeff001122334455667788 mxcsr=3f80 fcw=27f\n" + AFTER),
        ("altstack", b"altstack onstack=1 frame_inside=1 fp_inside=1\n" + AFTER),
    ],
)
def test_the_frame_a_handler_sees(guest, mode, expected):
    assert_native_then_model(guest, mode, expected)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("clobber", AFTER),
        ("entry", b"entry xmm3=00000000000000000000000000000000 mxcsr=1f80 fcw=37f\n" + AFTER),
    ],
)
def test_the_handler_s_fpu_is_its_own(guest, mode, expected):
    """fpu__clear_user_states before the handler; the saved state comes back after."""
    assert_native_then_model(guest, mode, expected)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("edit", b"after xmm3=0123456789abcdef0badc0de0badc0de mxcsr=5f80 fcw=27f\n"),
        ("xfeat_fp", b"after xmm3=00000000000000000000000000000000 mxcsr=1f80 fcw=27f\n"),
        ("bv_nosse", b"after xmm3=00000000000000000000000000000000 mxcsr=5f80 fcw=27f\n"),
        ("nomagic", b"after xmm3=0123456789abcdef0badc0de0badc0de mxcsr=5f80 fcw=27f\n"),
        ("nullfp", b"after xmm3=00000000000000000000000000000000 mxcsr=1f80 fcw=37f\n"),
    ],
)
def test_sigreturn_restores_the_edited_frame(guest, mode, expected):
    """XRSTOR of the features the sw bytes name (the rest initialised), the header's
    XSTATE_BV honoured; without magic1 an FXRSTOR of the legacy region; no fpstate
    resets the FPU."""
    assert_native_then_model(guest, mode, expected)


def test_a_reserved_mxcsr_bit_in_the_frame_is_sigsegv(guest):
    native = subprocess.run([guest, "badmxcsr"], capture_output=True, timeout=60)
    assert (native.returncode, native.stdout) == (-11, b"before\n"), native
    r = Machine.from_elf(guest, argv=[guest, "badmxcsr"]).run(timeout=60)
    assert (r.reason, r.signal, r.detail, r.stdout) == ("signal", 11, "bad signal frame", b"before\n"), r.describe()


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("initial", b"initial mxcsr=1f80 fcw=37f\n"),
        ("fork", b"child mxcsr=3f80\n"),
    ],
)
def test_fpu_state_at_exec_and_across_fork(guest, mode, expected):
    """fpstate_init at exec; fpu_clone copies the parent's registers."""
    assert_native_then_model(guest, mode, expected)


def test_at_minsigstksz_is_the_kernel_s_largest_frame_for_this_cpu(guest):
    """init_sigframe_size: sigframe_ia32 (732) + 15 + (576 + 4 + 112) + 63, rounded up
    to 16 = 1504."""
    r = Machine.from_elf(guest, argv=[guest, "minsigstksz"]).run(timeout=60)
    assert (sf.MAX_FRAME_SIZE, r.stdout) == (1504, b"AT_MINSIGSTKSZ=1504\n"), (sf.MAX_FRAME_SIZE, r.stdout)


def test_the_frame_bytes(guest):
    """The emulated CPU's frame exactly: uc_flags 7; sigcontext.fpstate at
    (rsp - 128 - 580) & ~63; the rt_sigframe at ((fpstate - 440) & ~15) - 8; the sw
    bytes (MAGIC1, extended_size 580, xfeatures 3, xstate_size 576, zero padding);
    XSTATE_BV 3; MAGIC2 at +576; the interrupted MXCSR/FCW/xmm3 in the FXSAVE region."""
    m = Machine.from_elf(guest, argv=[guest, "saved"])
    got = {}

    def on_handler(e):
        uc = e.frame + 8
        mc = uc + sf.SIGCONTEXT_OFFSET
        rsp = m.mem.read_u64(mc + 15 * 8)
        fp = m.mem.read_u64(uc + sf.FPSTATE_PTR_OFFSET)
        got.update(
            uc_flags=m.mem.read_u64(uc),
            fp=fp,
            rsp=rsp,
            frame=e.frame,
            sw=m.mem.read(fp + 464, 48),
            bv=m.mem.read_u64(fp + 512),
            magic2=m.mem.read(fp + 576, 4),
            fcw=m.mem.read(fp, 2),
            mxcsr=m.mem.read(fp + 24, 8),
            xmm3=m.mem.read(fp + 160 + 48, 16),
        )

    m.events.subscribe(on_handler, ev.SignalHandler)
    r = m.run(timeout=60)
    assert r.reason == "exit", r.describe()
    fp = (got["rsp"] - 128 - 580) & ~63
    want = dict(
        uc_flags=7,
        fp=fp,
        rsp=got["rsp"],
        frame=((fp - 440) & ~15) - 8,
        sw=struct.pack("<IIQI", 0x46505853, 580, 3, 576) + bytes(28),
        bv=3,
        magic2=struct.pack("<I", 0x46505845),
        fcw=struct.pack("<H", 0x27F),
        mxcsr=struct.pack("<II", 0x3F80, 0xFFFF),
        xmm3=PATTERN,
    )
    assert got == want, "\n".join(f"{k}: got {got[k]!r}, want {want[k]!r}" for k in want if got[k] != want[k])


def test_a_frame_that_overflows_the_alternate_stack_is_sigsegv(guest):
    """get_sigframe: a handler on its alternate stack (SA_NODEFER) whose next frame
    would leave it gets force_sigsegv instead of a frame below the stack."""
    native = subprocess.run([guest, "overflow"], capture_output=True, timeout=60)
    assert (native.returncode, native.stdout) == (-11, b"before\n"), native
    r = Machine.from_elf(guest, argv=[guest, "overflow"]).run(timeout=60)
    assert (r.reason, r.signal, r.stdout) == ("signal", 11, b"before\n"), r.describe()
    assert r.detail.startswith("no room for the SIGUSR1 frame (signal frame at "), r.detail


def test_a_signal_taken_in_the_red_zone_of_the_altstack_base_starts_at_its_top(guest):
    """get_sigframe skips the red zone before it asks whether the task is on its
    alternate stack: 64 bytes above the stack's base, sp - 128 is below it, so the
    nested frame is put at the top again (entering_altstack), not refused.  Natively a
    handler that nests until it reaches the bottom can therefore recurse for ever,
    depending on the CPU's frame size (an AVX-512 host does)."""
    native = subprocess.run([guest, "redzone"], capture_output=True, timeout=60)
    want = b"before\nnested handler at the top of the altstack\n"
    assert (native.returncode, native.stdout) == (0, want), native
    r = Machine.from_elf(guest, argv=[guest, "redzone"]).run(timeout=60)
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, want), r.describe()
