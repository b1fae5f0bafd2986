"""Probe targets -> (file, file offset): what perf and bpftrace do before the kernel sees a probe.

The kernel's uprobes core only ever sees an inode and an offset
(:meth:`kernel_model.kernel.events.uprobes.Uprobes.uprobe_register`).  Everything that
turns what a user writes into that pair lives here: a symbol (``"func"``,
``"func+0x4"``), ``"PATH:symbol[+off]"`` (any file of the guest's view: a library
mapped later too), a virtual address in a file-backed mapping, ``(path, offset)``; a
path that is a mapped file's name, basename or suffix, or a library's short name
(bpftrace's ``uprobe:libc:malloc``: :mod:`emu.probes.ldcache`); a parsed
:class:`~emu.probes.probe_spec.UserProbeSpec`.
"""

from __future__ import annotations

import os

from emu.probes.ldcache import MAX_CACHE_BYTES, short_name_candidates
from kernel_model.errors import ProbeSpecError, SymbolError
from kernel_model.fs.elf import ElfImage, image_of
from kernel_model.fs.file import HostFile
from kernel_model.mm.mm_types import MappedFile


class ProbeTargets:
    """Resolves probe targets against one machine's guest (its first task's view of the
    filesystem, its main process's mappings)."""

    def __init__(self, machine):
        self.machine = machine
        self.notes: list[str] = []  # remarks on registrations (IFUNC targets)

    def resolve_target(self, target) -> tuple[MappedFile, int]:
        """symbol, "symbol+off", "PATH:symbol[+off]" (any file: a library mapped
        later too), address, (path, file offset) -> (file, file offset)."""
        proc = self.machine.process
        if isinstance(target, tuple):
            path, offset = target
            return self.find_file(path), int(offset)
        if isinstance(target, int):
            vma = proc.mem.find_vma(target)
            if vma is None or vma.file is None:
                raise SymbolError(f"address {target:#x} is not in a file-backed mapping")
            return vma.file, vma.offset_of(target)
        if isinstance(target, str) and ":" in target:
            path, _, sym = target.rpartition(":")  # "PATH:SYMBOL[+OFF]"
            name, _, off = sym.partition("+")
            try:
                delta = int(off, 0) if off else 0
            except ValueError:
                raise SymbolError(f"bad offset {off!r} in {target!r}") from None
            return self.symbol_offset(self.find_file(path), name.strip(), delta)
        if isinstance(target, str):
            name, _, off = target.partition("+")
            try:
                delta = int(off, 0) if off else 0
            except ValueError:
                raise SymbolError(f"bad offset {off!r} in {target!r}") from None
            return self.symbol_offset(proc.exe, name.strip(), delta)
        raise SymbolError(f"cannot probe {target!r}: give a symbol, an address or (path, offset)")

    def resolve_spec(self, spec) -> tuple[MappedFile, int]:
        """A parsed probe spec's (file, file offset): its PATH as :meth:`find_file`
        finds it, then the OFFSET, the SYMBOL[+OFF] or the bpftrace ADDRESS."""
        file = self.find_file(spec.path)
        if spec.offset is not None:
            return file, spec.offset
        if spec.symbol is not None:
            return self.symbol_offset(file, spec.symbol, spec.sym_offset)
        if spec.address is not None:
            elf = self.file_elf(file)
            if elf is None:
                raise SymbolError(f"{file.path} has no program headers to map {spec.address:#x}")
            return file, elf.vaddr_to_offset(spec.address)
        raise ProbeSpecError("probe spec names no location", spec.text, 0)

    def find_file(self, path: str) -> MappedFile:
        """The file a probe spec names: one the guest maps (its path, ``guest:`` name,
        a path suffix or a basename), else any file of the guest's view opened by its
        path - a library not mapped yet is probed by inode like any other, and
        installed when a process maps it (the core's ``uprobe_mmap``).  A name without
        ``/`` that matches nothing mapped is a library's short name (bpftrace's
        ``uprobe:libc:malloc``: :mod:`emu.probes.ldcache`)."""
        files = self.machine.process.mapped_files
        if path in ("", None) and files:
            return files[0]
        for f in files:
            if path in (f.path, f.d_path) or f.path == f"guest:{path}":
                return f
        if "/" in path:
            opened = self.open_file(path)
            if isinstance(opened, MappedFile):
                return opened
            for f in files:
                if f.path.endswith("/" + path.lstrip("/")):
                    return f
            raise SymbolError(f"cannot probe {path!r}: {opened}")
        for f in files:
            if os.path.basename(f.path) == path:
                return f
        for candidate in short_name_candidates(path, [f.d_path or f.path for f in files], self._read_guest_file):
            opened = self.open_file(candidate)
            if isinstance(opened, MappedFile):
                return opened
        raise SymbolError(
            f"{path!r} is neither mapped by the guest (mapped: "
            f"{', '.join(f.path for f in files) or 'nothing'}) nor a library "
            f"{path!r} names in the ld.so cache or default directories"
        )

    def open_file(self, path: str) -> MappedFile | str:
        """The page cache's file (one per inode) for guest ``path``, opened as the
        first task would (its root, cwd and permissions); a reason string when it
        cannot be."""
        m = self.machine
        f = m.syscalls.open_guest_path(m.task, path, os.O_RDONLY)
        if isinstance(f, int):
            return os.strerror(-f).lower()
        try:
            if not isinstance(f, HostFile) or f.is_dir:
                return "not a regular file"
            return m.page_cache.file_of(f.fd, path, f.guest_path or path)
        finally:
            f.get().put()

    def _read_guest_file(self, path: str) -> bytes | None:
        m = self.machine
        f = m.syscalls.open_guest_path(m.task, path, os.O_RDONLY)
        if isinstance(f, int):
            return None
        try:
            return os.pread(f.fd, MAX_CACHE_BYTES, 0) if isinstance(f, HostFile) else None
        except OSError:
            return None
        finally:
            f.get().put()

    @staticmethod
    def file_elf(file: MappedFile) -> ElfImage | None:
        """The file's parsed ELF, read on first need for a file met through mmap or
        opened by path (the loader parses the program and interpreter itself)."""
        if file.elf is None and file.reader is not None and image_of(file) is None:
            raise SymbolError(f"{file.path} is not an ELF file with symbols")
        return file.elf

    def symbol_offset(self, file: MappedFile, name: str, delta: int = 0) -> tuple[MappedFile, int]:
        """A symbol's file offset.  An IFUNC symbol's address is its resolver: the
        kernel probes what the symbol's st_value says, so the probe fires when the
        dynamic linker calls the resolver, not at each call of the implementation it
        returns - said in a note (``self.notes``), as the probe is legal."""
        elf = self.file_elf(file)
        if elf is None:
            raise SymbolError(f"{file.path} has no symbols")
        sym = elf.resolve(name)
        if sym.type == "GNU_IFUNC":
            self.notes.append(
                f"{name} in {os.path.basename(file.path)} is an IFUNC symbol: the probe "
                f"is on its resolver, which runs when the dynamic linker binds "
                f"{name.partition('@')[0]}, not at each call"
            )
        return file, elf.vaddr_to_offset(sym.value + delta)
