"""sigaltstack and SA_ONSTACK (do_sigaltstack, x86 get_sigframe): an SA_ONSTACK handler
runs on the alternate stack, where sigaltstack() reports SS_ONSTACK and refuses a change
(EPERM); other handlers stay on the normal stack; SS_AUTODISARM disables the stack inside
the handler and rt_sigreturn restores it from uc_stack; a stack overflow's SIGSEGV is
handled on it; a stack under MINSIGSTKSZ is ENOMEM, an unknown mode EINVAL.  Compared
with a native run of the same binary."""

from __future__ import annotations

import subprocess

import pytest

from emu import Machine

EXPECTED = (
    b"initial: flags=2 size=0\n"
    b"small: r=-1 errno=12\n"
    b"bad flags: r=-1 errno=22\n"
    b"set: flags=0 size=65536 sp_ok=1\n"
    b"onstack: on_alt=1 flags=1 eperm=1\n"
    b"plain: on_alt=0 flags=0 eperm=0\n"
    b"autodisarm: on_alt=1 flags=2 after=0x80000000\n"
    b"disabled: flags=2\n"
)


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("altstack.c", "-static", name="altstack")


@pytest.mark.parametrize(
    "args, expected",
    [
        ((), EXPECTED),
        (("overflow",), EXPECTED + b"overflow caught on alt=1\n"),
    ],
)
def test_matches_native(guest, args, expected):
    native = subprocess.run([guest, *args], capture_output=True, timeout=60)
    assert native.stdout == expected, f"the host disagrees with the spec: {native.stdout!r}"
    r = Machine.from_elf(guest, argv=[guest, *args]).run(timeout=60)
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, expected), (
        f"expected {expected!r}, got {r.stdout!r} ({r.describe()})"
    )


def test_onstack_frame_is_built_at_the_top_of_the_alternate_stack(guest):
    """get_sigframe: no red zone skipped on a fresh alternate stack; the XSAVE area
    sits 64-byte aligned at its top, the frame FRAME_SIZE below that, rounded as after
    a call."""
    from kernel_model.arch.x86.kernel import signal as sf
    from kernel_model.trace.events import SignalHandler

    m = Machine.from_elf(guest)
    alt = m.resolve("alt")
    frames = []
    m.events.subscribe(lambda e: frames.append(e.frame), SignalHandler)
    m.run(timeout=60)
    top = alt + 65536
    fpstate = (top - sf.XSTATE_SIGFRAME_SIZE) & ~63
    assert frames[0] == ((fpstate - sf.FRAME_SIZE) & ~0xF) - 8, f"frame at {frames[0]:#x}, alt stack top {top:#x}"
