"""The page cache (mm/filemap.c): one :class:`MappedFile` per inode, its contents read
on demand through host descriptors the cache keeps open in bounded number."""

from __future__ import annotations

import functools
import os
import weakref

from kernel_model.mm.mm_types import MappedFile


class PageCache:
    """The machine's files as the page cache knows them: one :class:`MappedFile` per
    inode (st_dev, st_ino), whichever path reached it - a symlink or a hard link to a
    mapped library is the same file, hence the same uprobe key (the kernel's
    ``struct inode`` behind every ``vma->vm_file``).

    A file met through mmap() is not held in memory: it is read on demand (copy_insn)
    through a host descriptor of its own.  At most ``MAX_OPEN`` such descriptors stay
    open (least recently used first closed); a closed one is reopened by its host path,
    and only if that is still the same inode, unchanged (st_ctime) - so a guest mapping
    many files cannot exhaust the host's descriptors."""

    checkpoint_by_reference = True

    MAX_OPEN = 64

    def __init__(self) -> None:
        self.files: dict[tuple[int, int], MappedFile] = {}
        self._paths: dict[tuple[int, int], tuple[str, int]] = {}  # (host path, st_ctime_ns)
        self._open: dict[tuple[int, int], int] = {}  # insertion order = LRU order
        self._close = weakref.finalize(self, _close_all, self._open)

    def lookup(self, dev: int, ino: int) -> MappedFile | None:
        return self.files.get((dev, ino)) if ino else None

    def add(self, mfile: MappedFile) -> MappedFile:
        """Remember an already read file (the executable, the interpreter); the one
        cached first for its inode wins."""
        if not mfile.ino:
            return mfile
        return self.files.setdefault((mfile.dev, mfile.ino), mfile)

    def file_of(self, host_fd: int, path: str, d_path: str) -> MappedFile:
        """The MappedFile of the open host file ``host_fd`` (filemap: the inode's
        address_space), made on first use."""
        st = os.fstat(host_fd)
        key = (st.st_dev, st.st_ino)
        hit = self.lookup(*key)
        if hit is not None:
            return hit
        try:
            self._paths[key] = (os.readlink(f"/proc/self/fd/{host_fd}"), st.st_ctime_ns)
        except OSError:
            self._paths[key] = ("", 0)
        mfile = MappedFile(
            path,
            dev=st.st_dev,
            ino=st.st_ino,
            file_size=st.st_size,
            d_path=d_path,
            reader=functools.partial(self._read, key),
        )
        self.files[key] = mfile
        return mfile

    def _read(self, key: tuple[int, int], offset: int, n: int) -> bytes:
        fd = self._descriptor(key)
        if fd is None:
            return b""
        try:
            return os.pread(fd, n, offset)
        except OSError:
            return b""

    def _descriptor(self, key: tuple[int, int]) -> int | None:
        fd = self._open.pop(key, None)
        if fd is None:
            fd = self._reopen(key)
            if fd is None:
                return None
            while len(self._open) >= self.MAX_OPEN:
                os.close(self._open.pop(next(iter(self._open))))
        self._open[key] = fd
        return fd

    def _reopen(self, key: tuple[int, int]) -> int | None:
        path, ctime = self._paths.get(key, ("", 0))
        if not path:
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino, st.st_ctime_ns) != (*key, ctime):  # an inode number reused
            os.close(fd)
            return None
        return fd


def _close_all(fds: dict) -> None:
    for fd in fds.values():
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()
