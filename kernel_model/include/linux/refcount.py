"""``refcount_t`` (include/linux/refcount.h): ``refcount_inc`` / ``refcount_inc_not_zero``
/ ``refcount_dec_and_test`` are each one locked read-modify-write of the counter's
line.  ``get_uprobe``/``put_uprobe`` on every hit (until 6.12) bounced struct uprobe's
first cache line between all CPUs hitting the probe."""

from __future__ import annotations

from kernel_model.kernel.locking.access_log import ATOMIC


class Refcount:
    def __init__(self, name: str, inst=None, value: int = 1):
        self.name, self.inst = name, inst
        self.value = value

    def inc(self, log, cpu: int) -> None:
        if self.value <= 0:
            raise RuntimeError(f"{self.name}: refcount_inc on {self.value} (use-after-free)")
        self.value += 1
        if log is not None:
            log.add(cpu, self.name, self.inst, ATOMIC)

    def dec_and_test(self, log, cpu: int) -> bool:
        if self.value <= 0:
            raise RuntimeError(f"{self.name}: refcount_dec on {self.value} (underflow)")
        self.value -= 1
        if log is not None:
            log.add(cpu, self.name, self.inst, ATOMIC)
        return self.value == 0
