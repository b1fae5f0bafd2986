"""fs/seq_file.c: how a /proc text file is produced while it is read.

A ``seq_file`` has no text of its own.  Its operations walk records by a position
(``m->index``): ``start`` finds the record at a position, ``next`` the one after it,
``show`` prints one.  ``seq_read_iter`` prints records into a buffer of a page (doubled
while one record does not fit) until the reader's count is reached, hands the reader
what it asked for and keeps the rest of the buffer for the next read.  So a read sees the
records as they are at that read: a change between two reads shows in every record
not yet printed, while bytes already in the buffer stay as they were printed.

``single_open`` makes the whole text one record at position 0: it is printed at the
first read (not at open), and again only when a read or seek returns to offset 0.

Reading at another offset than the last read ended (pread, lseek) replays the records
from the start up to that offset (``traverse``), as the kernel does.
"""

from __future__ import annotations

import errno as E
from collections.abc import Callable
from typing import Any, Protocol

PAGE_SIZE = 0x1000
SEEK_SET, SEEK_CUR = 0, 1


class SeqOperations(Protocol):
    """struct seq_operations.  ``start`` and ``next`` return the record (None at the
    end) and the new position; ``show`` the record's text, or a negative errno."""

    def start(self, index: int) -> tuple[Any, int]: ...

    def next(self, record: Any, index: int) -> tuple[Any, int]: ...

    def show(self, record: Any) -> bytes | int: ...


class SingleOps:
    """single_open's operations: one record at position 0 whose text ``show()`` makes
    (single_start returns a token for *pos == 0 only; single_next ends the walk)."""

    def __init__(self, show: Callable[[], bytes | int]):
        self._show = show

    def start(self, index: int) -> tuple[Any, int]:
        return (True if index == 0 else None), index

    def next(self, record: Any, index: int) -> tuple[Any, int]:
        return None, index + 1

    def show(self, record: Any) -> bytes | int:
        return self._show()


class RecordOps:
    """A seq_file whose records are numbered from 0 (c_start over the CPUs, the mount
    list): ``records()`` is asked again at every start and next, so a record not yet
    printed is the one of that moment."""

    def __init__(self, records: Callable[[], list[bytes]]):
        self._records = records

    def _at(self, index: int) -> tuple[Any, int]:
        recs = self._records()
        return (recs[index] if 0 <= index < len(recs) else None), index

    def start(self, index: int) -> tuple[Any, int]:
        return self._at(index)

    def next(self, record: Any, index: int) -> tuple[Any, int]:
        return self._at(index + 1)

    def show(self, record: Any) -> bytes | int:
        return record


class SeqFileState:
    """struct seq_file: the buffer (``size`` bytes once allocated, ``count`` bytes
    printed and not yet read, starting at ``from_``), the record position ``index`` and
    ``read_pos``, the file offset the buffer's contents continue from."""

    def __init__(self, ops: SeqOperations):
        self.ops = ops
        self.size = 0  # no buffer until the first read (seq_buf_alloc there)
        self.buf = b""
        self.count = 0
        self.from_ = 0
        self.index = 0
        self.read_pos = 0

    def _show(self, record: Any) -> int:
        """Print ``record`` after the ``count`` bytes in the buffer: 0, or a negative
        errno.  A text that does not fit (seq_printf's ``count + len < size``) marks the
        buffer overflowed (seq_set_overflow: count = size)."""
        text = self.ops.show(record)
        if isinstance(text, int):
            return text
        if self.count + len(text) < self.size:
            self.buf = self.buf[: self.count] + text
            self.count += len(text)
        else:
            self.count = self.size
        return 0

    def _overflowed(self) -> bool:
        return self.count == self.size

    def traverse(self, offset: int) -> int:
        """traverse(): print the records from position 0 until ``offset`` is inside
        the buffer; -EAGAIN after doubling a buffer a record did not fit in."""
        self.index = self.count = self.from_ = 0
        if not offset:
            return 0
        if not self.size:
            self.size = PAGE_SIZE
        pos, error = 0, 0
        p, self.index = self.ops.start(self.index)
        while p is not None:
            error = self._show(p)
            if error < 0:
                break
            if self._overflowed():
                self.count = 0
                self.size <<= 1
                return -E.EAGAIN
            p, self.index = self.ops.next(p, self.index)
            if pos + self.count > offset:
                self.from_ = offset - pos
                self.count -= self.from_
                break
            pos += self.count
            self.count = 0
            if pos == offset:
                break
        return error

    def _traverse(self, offset: int) -> int:
        while (err := self.traverse(offset)) == -E.EAGAIN:
            pass
        return err

    def read(self, pos: int, want: int) -> bytes | int:
        """seq_read_iter at file offset ``pos`` for ``want`` bytes: the bytes, or a
        negative errno when none could be given."""
        if want <= 0:
            return b""
        if pos == 0:  # a read from offset 0 starts the walk again
            self.index = self.count = 0
        if pos != self.read_pos:
            err = self._traverse(pos)
            if err:
                self.read_pos = self.index = self.count = 0
                return err
            self.read_pos = pos
        if not self.size:
            self.size = PAGE_SIZE
        out = b""
        if self.count:  # what the last read left in the buffer goes first
            out = self.buf[self.from_ : self.from_ + min(self.count, want)]
            self.count -= len(out)
            self.from_ += len(out)
            if self.count:
                return self._done(out, 0)
        self.from_ = 0
        self.buf = b""
        err = 0
        p, self.index = self.ops.start(self.index)
        while True:  # a non-empty record in the buffer
            if p is None:
                break
            err = self._show(p)
            if err < 0:
                break
            if not self.count:
                p, self.index = self.ops.next(p, self.index)
                continue
            if not self._overflowed():
                return self._fill(p, out, want)
            self.count = 0
            self.size <<= 1  # a bigger buffer, and the same record again
            p, self.index = self.ops.start(self.index)
        self.count = 0
        return self._done(out, err)

    def _fill(self, p: Any, out: bytes, want: int) -> bytes | int:
        """The Fill loop: more records while the reader wants more than the buffer
        holds and the next one fits; the position advances past each one printed."""
        room = want - len(out)
        while True:
            offs, pos = self.count, self.index
            p, self.index = self.ops.next(p, self.index)
            if pos == self.index:
                self.index += 1
            if p is None or self.count >= room:
                break
            err = self._show(p)
            if err < 0 or self._overflowed():
                self.count = offs
                break
        n = min(self.count, room)
        chunk = self.buf[:n]
        self.count -= n
        self.from_ = n
        return self._done(out + chunk, 0)

    def _done(self, out: bytes, err: int) -> bytes | int:
        if not out:
            return -E.EFAULT if self.count else (err or b"")
        self.read_pos += len(out)
        return out

    def lseek(self, f_pos: int, offset: int, whence: int) -> int:
        """seq_lseek: the new offset (SEEK_SET, SEEK_CUR), reached by traverse when it is
        not where the buffer continues; -EINVAL for another whence or a negative offset."""
        if whence == SEEK_CUR:
            offset += f_pos
        elif whence != SEEK_SET:
            return -E.EINVAL
        if offset < 0:
            return -E.EINVAL
        if offset != self.read_pos:
            err = self._traverse(offset)
            if err:
                self.read_pos = self.index = self.count = 0
                return err
            self.read_pos = offset
        return offset
