"""Ctrl-C while a guest runs: the guest stops cleanly and the tool goes on
(:meth:`emu.machine.Machine.interruptible`)."""

from __future__ import annotations

import os
import signal as host_signal
import threading
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from emu.machine import Machine


class Interruptible:
    """Ctrl-C stops the guest.  The Python-level handler stops it on the main thread at
    once (so a read waiting on stdin never sees the EOF that may follow before the
    helper thread runs); the helper thread, woken by the wakeup fd, stops it while
    Unicorn runs guest code with the GIL released, where no Python handler can run.
    A Ctrl-C stays in force for the rest of the block (a run that starts after it
    stops at once)."""

    SIGINT_DETAIL = "interrupted (SIGINT)"

    def __init__(self, machine: Machine) -> None:
        self.m = machine

    def _fire(self, *_: object) -> None:
        self.m.sigint = self.SIGINT_DETAIL
        self.m.stop(self.SIGINT_DETAIL)

    def __enter__(self) -> Interruptible:
        if threading.current_thread() is not threading.main_thread():
            self.active = False
            return self
        self.active = True
        self.m.sigint = None
        self.r, self.w = os.pipe()
        os.set_blocking(self.w, False)
        self.old_fd = host_signal.set_wakeup_fd(self.w)
        self.old_handler = host_signal.signal(host_signal.SIGINT, self._fire)
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def _watch(self) -> None:
        while True:
            data = os.read(self.r, 64)
            if not data or b"\xff" in data:
                return
            if host_signal.SIGINT in data:
                self._fire()

    def __exit__(self, *exc: object) -> Literal[False]:
        if not self.active:
            return False
        host_signal.set_wakeup_fd(self.old_fd)
        host_signal.signal(host_signal.SIGINT, self.old_handler)
        os.write(self.w, b"\xff")
        self.thread.join(1)
        os.close(self.r)
        os.close(self.w)
        self.m.sigint = None
        return False
