"""``rwlock_t`` (kernel/locking/qrwlock.c): the read side is one atomic add on the
lock word (``atomic_add_return_acquire(_QR_BIAS, &lock->cnts)``) and one atomic sub to
release.  Readers do not exclude each other, but every reader writes the same cache
line - which is why ``uprobes_treelock`` as an rwlock (6.10) still bounced."""

from __future__ import annotations

from kernel_model.kernel.locking.access_log import ATOMIC


class RwLock:
    def __init__(self, name: str, inst=None):
        self.name, self.inst = name, inst
        self.readers = 0
        self.writer: int | None = None

    def read_lock(self, log, cpu: int) -> None:
        if self.writer is not None:
            raise RuntimeError(f"{self.name}: read_lock on CPU {cpu} while CPU {self.writer} writes")
        self.readers += 1
        if log is not None:
            log.add(cpu, self.name, self.inst, ATOMIC)

    def read_unlock(self, log, cpu: int) -> None:
        if self.readers <= 0:
            raise RuntimeError(f"{self.name}: read_unlock without a reader")
        self.readers -= 1
        if log is not None:
            log.add(cpu, self.name, self.inst, ATOMIC)
