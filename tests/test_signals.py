"""Guest signal handlers: rt_sigframe delivery and rt_sigreturn, and the uprobes rule
that a fault inside an out-of-line step is delivered at the probe address, so returning
from the handler hits the probe again."""

from __future__ import annotations

import pytest

from emu import Machine
from kernel_model.trace.events import SignalHandler


@pytest.fixture(scope="module")
def guest(build_c):
    return build_c("signals.c", "-static", name="signals")


EXPECTED = b"value=42 segv=1 usr1=2 fpe_r=-1 trap=1\n"


def test_handlers_run_and_the_program_continues(guest):
    r = Machine.from_elf(guest).run()
    assert (r.reason, r.exit_code, r.stdout) == ("exit", 0, EXPECTED), r.describe()


@pytest.mark.parametrize("kernel", ["6.10", "6.18", "latest"])
def test_fault_in_a_probed_store_re_hits_the_probe_after_the_handler(guest, kernel):
    """The store faults inside the XOL slot; the kernel aborts the step and delivers
    SIGSEGV with ip = the probe address; the handler fixes the page and returns; the
    task executes the int3 again and the probe's handlers run a second time."""
    m = Machine.from_elf(guest, kernel=kernel)
    from capstone import CS_ARCH_X86, CS_MODE_64, Cs

    store = m.resolve("store")
    first = next(Cs(CS_ARCH_X86, CS_MODE_64).disasm(m.mem.read(store, 16), store))
    assert first.mnemonic == "mov" and first.op_str.startswith("dword ptr [rdi]"), (
        "store() begins with the faulting store"
    )
    hits = []
    m.uprobes.register("store", handler=lambda c: hits.append(c.regs.rip))
    r = m.run()
    assert r.stdout == EXPECTED
    assert hits == [store, store], "the faulting probed store hits again after the handler"
    assert m.counters.signals[11] == 1 and m.counters.xol_singlesteps == 2


def test_signal_frame_layout_is_the_kernels(guest):
    """The handler gets (sig, &siginfo, &ucontext); si_addr is the fault address and the
    saved rip in uc_mcontext is the faulting instruction."""
    m = Machine.from_elf(guest)
    seen = {}
    from kernel_model.arch.x86.kernel import signal as sf

    def at_handler(event):
        if event.signo == 11:
            frame = event.frame
            seen["si_signo"] = int.from_bytes(m.mem.read(frame + 8 + sf.UCONTEXT_SIZE, 4), "little")
            seen["si_addr"] = m.mem.read_u64(frame + 8 + sf.UCONTEXT_SIZE + 16)
            seen["saved_rip"] = m.mem.read_u64(frame + 8 + 40 + 8 * 16)
            seen["restorer"] = m.mem.read_u64(frame)
            seen["rsp_mod16"] = (frame + 8) % 16

    m.events.subscribe(at_handler, SignalHandler)
    m.run()
    assert seen["si_signo"] == 11
    assert m.symbolize(seen["restorer"]).startswith("__restore_rt")
    page = seen["si_addr"]
    assert m.mem.find_vma(page).start == page
    assert m.symbolize(seen["saved_rip"]).startswith("store")
    assert seen["rsp_mod16"] == 0


def test_handler_is_entered_with_sig_info_and_ucontext(guest):
    """A uprobe on the handler itself sees (sig, &info, &uc) as the kernel passes them."""
    from kernel_model.arch.x86.kernel import signal as sf

    m = Machine.from_elf(guest)
    seen = []
    m.uprobes.register(
        "on_segv",
        handler=lambda c: seen.append(
            (c.regs.rdi, c.regs.rsi - c.regs.rsp, c.regs.rdx - c.regs.rsp, (c.regs.rsp + 8) % 16)
        ),
    )
    assert m.run().stdout == EXPECTED
    assert seen == [(11, 8 + sf.UCONTEXT_SIZE, 8, 0)]
