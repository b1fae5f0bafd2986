"""``BPF_MAP_TYPE_RINGBUF`` as ``kernel/bpf/ringbuf.c`` lays it out, byte for byte.

``struct bpf_ringbuf`` is one :class:`~kernel_model.bpf.memory.Region`: a first page of
kernel-only fields (the wait queue, the spinlock; ``RINGBUF_PGOFF`` is 1 on x86_64), the
consumer page (``consumer_pos`` at its start), the producer page (``producer_pos``) and the
data area.  The kernel maps the data pages twice in a row so a record that wraps around the
end stays contiguous for the program writing it; here the region holds the data twice and
the model keeps the two copies in step (a reservation copies the wrapped part into the
second copy, a commit copies it back), so a program's pointer into a record works the same.

Records are ``struct bpf_ringbuf_hdr`` (``len`` u32 with ``BPF_RINGBUF_BUSY_BIT`` while
reserved and ``BPF_RINGBUF_DISCARD_BIT`` once discarded, ``pg_off`` u32: the header's page
offset from the start of ``struct bpf_ringbuf``) followed by the sample, 8-byte rounded.
Space is checked as ``__bpf_ringbuf_reserve`` checks it since Linux 6.10: the producer may
run at most ``size - 1`` bytes ahead of both the consumer and the oldest record still
reserved (``pending_pos``).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from kernel_model.bpf.bpf_types import BPF_MAP_TYPE_RINGBUF, BpfMap

if TYPE_CHECKING:
    from collections.abc import Callable

    from kernel_model.bpf.memory import KernelMemory, Region

PAGE_SIZE = 4096
BPF_RINGBUF_BUSY_BIT = 1 << 31
BPF_RINGBUF_DISCARD_BIT = 1 << 30
BPF_RINGBUF_HDR_SZ = 8
# flags of bpf_ringbuf_output/submit/discard and the selector of bpf_ringbuf_query
BPF_RB_NO_WAKEUP = 1 << 0
BPF_RB_FORCE_WAKEUP = 1 << 1
BPF_RB_AVAIL_DATA, BPF_RB_RING_SIZE, BPF_RB_CONS_POS, BPF_RB_PROD_POS = 0, 1, 2, 3

RINGBUF_PGOFF = 1  # pages of struct bpf_ringbuf before consumer_pos (x86_64)
RINGBUF_POS_PAGES = 2
RINGBUF_MAX_RECORD_SZ = 0xFFFFFFFF // 4
RINGBUF_MAX_DATA_SZ = ((1 << 24) - RINGBUF_POS_PAGES - RINGBUF_PGOFF) * PAGE_SIZE

_CONS_OFF = RINGBUF_PGOFF * PAGE_SIZE
_PROD_OFF = _CONS_OFF + PAGE_SIZE
_DATA_OFF = _PROD_OFF + PAGE_SIZE
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_MASK64 = (1 << 64) - 1


def _round8(n: int) -> int:
    return (n + 7) & ~7


class RingBuf(BpfMap):
    """A ring buffer map: the program side (``reserve``/``submit``/``discard``/``output``/
    ``query``, the helpers of the same names) and the consumer side libbpf's
    ``ring_buffer__consume`` runs over the mmap()ed pages (:meth:`consume`).

    ``wakeups`` counts the ``irq_work_queue`` calls a commit makes (a reader blocked in
    epoll would be woken); ``on_wakeup``, when set, is called at each.
    """

    map_type = BPF_MAP_TYPE_RINGBUF

    def __init__(self, max_entries: int, map_flags: int = 0, name: str = ""):
        super().__init__(0, 0, max_entries, map_flags, name)
        self.mask = max_entries - 1
        self.pending_pos = 0
        self.rb: Region | None = None
        self._memory: KernelMemory | None = None
        self.wakeups = 0
        self.on_wakeup: Callable[[], None] | None = None

    def create(self, memory: KernelMemory) -> None:
        """``bpf_ringbuf_alloc``: the meta pages and the data pages, zeroed."""
        size = self.max_entries
        self.rb = memory.alloc(_DATA_OFF + 2 * size, "ringbuf", owner=self)
        self._memory = memory

    def move_data(self, data) -> None:
        """Keep the ring's bytes in ``data`` from now on (a writable buffer of the same
        size holding them: the guest RAM a first mmap moves the ring to)."""
        assert self.rb is not None and self._memory is not None, "ring buffer not created"
        self._memory.replace_data(self.rb, data)

    # -- raw positions ------------------------------------------------------------
    def _mem(self) -> bytearray:
        assert self.rb is not None, "ring buffer not created"
        return self.rb.data

    @property
    def consumer_pos(self) -> int:
        return int(_U64.unpack_from(self._mem(), _CONS_OFF)[0])

    @consumer_pos.setter
    def consumer_pos(self, value: int) -> None:
        _U64.pack_into(self._mem(), _CONS_OFF, value & _MASK64)

    @property
    def producer_pos(self) -> int:
        return int(_U64.unpack_from(self._mem(), _PROD_OFF)[0])

    @producer_pos.setter
    def producer_pos(self, value: int) -> None:
        _U64.pack_into(self._mem(), _PROD_OFF, value & _MASK64)

    @property
    def data_addr(self) -> int:
        """The kernel address of the first data byte (``rb->data``)."""
        assert self.rb is not None, "ring buffer not created"
        return self.rb.base + _DATA_OFF

    def _hdr_len(self, pos: int) -> int:
        return int(_U32.unpack_from(self._mem(), _DATA_OFF + (pos & self.mask))[0])

    def _sync_second_copy(self, off: int, total: int) -> None:
        """Make the second mapping show the bytes of a record wrapping past the end."""
        size = self.max_entries
        over = off + total - size
        if over > 0:
            mem = self._mem()
            mem[_DATA_OFF + size : _DATA_OFF + size + over] = mem[_DATA_OFF : _DATA_OFF + over]

    def _sync_first_copy(self, off: int, total: int) -> None:
        """What a program wrote through the second mapping lands in the first one."""
        size = self.max_entries
        over = off + total - size
        if over > 0:
            mem = self._mem()
            mem[_DATA_OFF : _DATA_OFF + over] = mem[_DATA_OFF + size : _DATA_OFF + size + over]

    # -- the helpers ----------------------------------------------------------------
    def _reserve(self, size: int) -> int:
        """``__bpf_ringbuf_reserve``: the sample's address, or 0 when it does not fit."""
        if size > RINGBUF_MAX_RECORD_SZ:
            return 0
        total = _round8(size + BPF_RINGBUF_HDR_SZ)
        if total > self.max_entries:
            return 0
        cons_pos = self.consumer_pos
        prod_pos = self.producer_pos
        new_prod_pos = prod_pos + total
        pend_pos = self.pending_pos
        while pend_pos < prod_pos:
            hdr_len = self._hdr_len(pend_pos)
            if hdr_len & BPF_RINGBUF_BUSY_BIT:
                break
            pend_pos += _round8((hdr_len & ~BPF_RINGBUF_DISCARD_BIT) + BPF_RINGBUF_HDR_SZ)
        self.pending_pos = pend_pos
        if (new_prod_pos - cons_pos) & _MASK64 > self.mask or (new_prod_pos - pend_pos) & _MASK64 > self.mask:
            return 0
        off = prod_pos & self.mask
        pg_off = (_DATA_OFF + off) // PAGE_SIZE
        struct.pack_into("<II", self._mem(), _DATA_OFF + off, size | BPF_RINGBUF_BUSY_BIT, pg_off)
        self._sync_second_copy(off, total)
        self.producer_pos = new_prod_pos
        return self.data_addr + off + BPF_RINGBUF_HDR_SZ

    def reserve(self, size: int, flags: int = 0) -> int:
        """``bpf_ringbuf_reserve``: any flag makes it fail (return NULL)."""
        if flags:
            return 0
        return self._reserve(size)

    def _commit(self, sample: int, flags: int, discard: bool) -> None:
        """``bpf_ringbuf_commit``: clear the busy bit (set the discard bit), wake the
        reader if it was waiting for exactly this record or the program forces it."""
        off = sample - BPF_RINGBUF_HDR_SZ - self.data_addr
        if not 0 <= off < self.max_entries:
            raise ValueError(f"{sample:#x} is not a record of ring buffer {self.name!r}")
        mem = self._mem()
        hdr_len = int(_U32.unpack_from(mem, _DATA_OFF + off)[0])
        new_len = hdr_len ^ BPF_RINGBUF_BUSY_BIT
        if discard:
            new_len |= BPF_RINGBUF_DISCARD_BIT
        self._sync_first_copy(off, _round8((hdr_len & ~(BPF_RINGBUF_BUSY_BIT | BPF_RINGBUF_DISCARD_BIT)) + 8))
        _U32.pack_into(mem, _DATA_OFF + off, new_len)
        cons_off = self.consumer_pos & self.mask
        if flags & BPF_RB_FORCE_WAKEUP or (cons_off == off and not flags & BPF_RB_NO_WAKEUP):
            self.wakeups += 1
            if self.on_wakeup is not None:
                self.on_wakeup()

    def submit(self, sample: int, flags: int = 0) -> int:
        """``bpf_ringbuf_submit`` (returns 0: the helper is void)."""
        self._commit(sample, flags, False)
        return 0

    def discard(self, sample: int, flags: int = 0) -> int:
        """``bpf_ringbuf_discard``: the record stays in the ring, marked for the reader to skip."""
        self._commit(sample, flags, True)
        return 0

    def output(self, data: bytes, flags: int = 0) -> int:
        """``bpf_ringbuf_output``: reserve, copy, submit; -EINVAL for unknown flags,
        -EAGAIN when full."""
        if flags & ~(BPF_RB_NO_WAKEUP | BPF_RB_FORCE_WAKEUP):
            return -22
        rec = self._reserve(len(data))
        if not rec:
            return -11
        off = rec - self.data_addr
        mem = self._mem()
        mem[_DATA_OFF + off : _DATA_OFF + off + len(data)] = data
        self._commit(rec, flags, False)
        return 0

    def query(self, flags: int) -> int:
        """``bpf_ringbuf_query``: available bytes, ring size, consumer or producer
        position; 0 for any other selector."""
        if flags == BPF_RB_AVAIL_DATA:
            return (self.producer_pos - self.consumer_pos) & _MASK64
        if flags == BPF_RB_RING_SIZE:
            return self.mask + 1
        if flags == BPF_RB_CONS_POS:
            return self.consumer_pos
        if flags == BPF_RB_PROD_POS:
            return self.producer_pos
        return 0

    # -- the consumer (libbpf's ringbuf_process_ring over the mmap()ed pages) -----------
    def consume(self) -> list[bytes]:
        """Every committed sample from ``consumer_pos`` on, oldest first, skipping
        discarded records and stopping at the first one still reserved; advances
        ``consumer_pos`` past each record as libbpf does."""
        out: list[bytes] = []
        cons_pos = self.consumer_pos
        mem = self._mem()
        while True:
            got_new_data = False
            prod_pos = self.producer_pos
            while cons_pos < prod_pos:
                off = cons_pos & self.mask
                hdr_len = int(_U32.unpack_from(mem, _DATA_OFF + off)[0])
                if hdr_len & BPF_RINGBUF_BUSY_BIT:
                    return out
                got_new_data = True
                length = hdr_len & ~(BPF_RINGBUF_BUSY_BIT | BPF_RINGBUF_DISCARD_BIT)
                cons_pos += _round8(length + BPF_RINGBUF_HDR_SZ)
                if not hdr_len & BPF_RINGBUF_DISCARD_BIT:
                    start = _DATA_OFF + off + BPF_RINGBUF_HDR_SZ
                    end = start + length
                    size = self.max_entries
                    if end <= _DATA_OFF + size:
                        out.append(bytes(mem[start:end]))
                    else:  # read through the double mapping
                        first = bytes(mem[start : _DATA_OFF + size])
                        out.append(first + bytes(mem[_DATA_OFF : _DATA_OFF + length - len(first)]))
                self.consumer_pos = cons_pos
            if not got_new_data:
                return out

    # -- what an mmap() of the map fd shows ------------------------------------------
    def consumer_page(self) -> bytes:
        """The page at mmap offset 0 (writable by the consumer: ``consumer_pos``)."""
        return bytes(self._mem()[_CONS_OFF:_PROD_OFF])

    def producer_pages(self) -> bytes:
        """The read-only mapping at mmap offset ``PAGE_SIZE``: the producer page, then
        the data pages twice (the kernel's double mapping)."""
        return bytes(self._mem()[_PROD_OFF:])

    # -- bpf_map_ops: a ring buffer has no elements --------------------------------------
    def lookup_elem(self, key: bytes, cpu: int = 0) -> int:
        return 0

    def update_elem(self, key: bytes, value: bytes, flags: int, cpu: int = 0) -> int:
        return -524  # ENOTSUPP

    def delete_elem(self, key: bytes) -> int:
        return -524

    def get_next_key(self, key: bytes | None) -> bytes | None:
        return None

    def lookup_value(self, key: bytes) -> bytes | None:
        return None
