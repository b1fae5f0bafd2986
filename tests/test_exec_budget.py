"""Instruction accounting across an execve: the emu_start that runs the exec syscall ends
on the old Unicorn instance, and its instructions are read from that instance's counter
(not the new, empty one's), so budgets and recorded positions stay exact whatever the
run is split into."""

from __future__ import annotations

import pytest

from emu import Machine
from emu.replay.checkpoint import Recorder

BUSYBOX = "/bin/busybox"
SCRIPT = "/bin/busybox echo hi; x=$(/bin/busybox printf %s abc); echo $x done"


def recorded_length(interval: int, sched_slice=(5000, 5000)) -> int:
    m = Machine.from_elf(BUSYBOX, argv=["sh", "-c", SCRIPT], seed=2, sched_slice=sched_slice)
    rec = Recorder(m, interval=interval)
    res = m.run()
    assert (res.exit_code, res.stdout) == (0, b"hi\nabc done\n"), res.describe()
    return rec.end


@pytest.mark.parametrize("interval", [700, 3000, 20_000])
def test_a_recorded_run_has_one_length_whatever_its_checkpoint_interval(interval):
    whole = recorded_length(1 << 40)
    assert recorded_length(interval) == whole, (
        f"interval {interval}: {recorded_length(interval)} instructions, unsplit {whole}"
    )


def test_budgets_summed_across_an_exec_reach_the_same_state():
    def machine():
        return Machine.from_elf(BUSYBOX, argv=["sh", "-c", "exec /bin/busybox printf %s ok"], seed=1)

    one, two = machine(), machine()
    total = 40_000  # past the exec into the new image's start-up
    assert one.run(max_insns=total).reason == "budget"
    for part in (1_000, 9_000, total - 10_000):
        two.run(max_insns=part)
    assert (two.pc, two.read_regs().rsp) == (one.pc, one.read_regs().rsp), (
        f"split budgets stop at {two.pc:#x}, one budget at {one.pc:#x}"
    )
