"""``struct rw_semaphore`` (kernel/locking/rwsem.c): ``down_read`` is
``atomic_long_add_return_acquire(RWSEM_READER_BIAS, &sem->count)`` on the fast path,
``up_read`` ``atomic_long_add_return_release(-RWSEM_READER_BIAS, ...)``: two atomics
on one line per read section.  ``mmap_lock`` and ``uprobe->register_rwsem`` are rwsems.
"""

from __future__ import annotations

from kernel_model.kernel.locking.access_log import ATOMIC


class RwSemaphore:
    def __init__(self, name: str, inst=None):
        self.name, self.inst = name, inst
        self.readers = 0
        self.writer = False

    def down_read(self, log, cpu: int) -> None:
        if self.writer:
            raise RuntimeError(f"{self.name}: down_read on CPU {cpu} while held for writing")
        self.readers += 1
        if log is not None:
            log.add(cpu, self.name, self.inst, ATOMIC)

    def up_read(self, log, cpu: int) -> None:
        if self.readers <= 0:
            raise RuntimeError(f"{self.name}: up_read without a reader")
        self.readers -= 1
        if log is not None:
            log.add(cpu, self.name, self.inst, ATOMIC)
