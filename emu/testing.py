"""``from emu.testing import ...`` keeps working: the register-test kit (and the pytest
plugin, entry point ``uprobe_emu``) lives in :mod:`emu.frontends.testing`."""

from emu.frontends.testing import Regs, call_snapshots, expect_signal, run_to, snapshot

__all__ = ["Regs", "call_snapshots", "expect_signal", "run_to", "snapshot"]
