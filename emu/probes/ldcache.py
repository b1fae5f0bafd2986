"""Where a library named the short way (bpftrace's ``uprobe:libc:malloc``) lives.

bpftrace resolves a probe path without a ``/`` as bcc's ``bcc_procutils_which_so``
does: a library already mapped by the traced process whose name starts with
``lib<NAME>.so``, else the first ``/etc/ld.so.cache`` entry whose soname starts with
``lib<NAME>.so`` - ``<NAME>.so`` when NAME starts with ``lib``, as in ``libc`` - (the cache ldconfig writes, searched
in its order), else - our
addition, for a sysroot without a cache - the dynamic linker's default directories.
The guest's view of the files (its sysroot) is what is searched.
"""

from __future__ import annotations

import struct

CACHE_PATH = "/etc/ld.so.cache"
MAX_CACHE_BYTES = 16 << 20
_NEW_MAGIC = b"glibc-ld.so.cache1.1"
_OLD_MAGIC = b"ld.so-1.7.0"
_NEW_HEADER = struct.Struct("<20sIIB3xI12x")  # magic, nlibs, len_strings, flags, ext offset
_NEW_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
_OLD_ENTRY = struct.Struct("<iII")
DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")


def _cstr(data: bytes, at: int) -> str:
    end = data.find(b"\0", at)
    return data[at : end if end >= 0 else len(data)].decode("utf-8", "replace")


def parse_ld_cache(data: bytes) -> list[tuple[str, str]]:
    """(soname, path) pairs of an ld.so.cache, in file order (glibc's ``_dl_load_cache_lookup``
    reads the same two layouts: the new format alone, or after the old one)."""
    start = 0
    if data.startswith(_OLD_MAGIC):
        (nlibs,) = struct.unpack_from("<I", data, 12)
        start = 16 + nlibs * _OLD_ENTRY.size
        start = (start + 7) & ~7
    if data[start : start + len(_NEW_MAGIC)] != _NEW_MAGIC or len(data) < start + _NEW_HEADER.size:
        return []
    _, nlibs, _, _, _ = _NEW_HEADER.unpack_from(data, start)
    out = []
    base = start + _NEW_HEADER.size
    for i in range(nlibs):
        at = base + i * _NEW_ENTRY.size
        if at + _NEW_ENTRY.size > len(data):
            break
        _, key, value, _, _ = _NEW_ENTRY.unpack_from(data, at)
        if key < len(data) and value < len(data):
            out.append((_cstr(data, key), _cstr(data, value)))
    return out


def short_name_candidates(name: str, mapped_paths, read_guest_file) -> list[str]:
    """Guest paths ``lib<name>.so*`` may mean, best first: mapped libraries, then the
    ld.so cache, then ``lib<name>.so`` / ``<name>`` in the default directories.
    ``read_guest_file(path) -> bytes | None`` reads the guest's view of a file."""
    if ".so" in name:
        prefix = name  # libc.so.6: the soname itself
    elif name.startswith("lib"):
        prefix = f"{name}.so"  # libc (bpftrace's spelling)
    else:
        prefix = f"lib{name}.so"  # c (bcc's which_so)
    out = [p for p in mapped_paths if p.rsplit("/", 1)[-1].startswith(prefix)]
    data = read_guest_file(CACHE_PATH)
    if data:
        out += [path for soname, path in parse_ld_cache(data) if soname.startswith(prefix)]
    out += [f"{d}/{n}" for d in DEFAULT_DIRS for n in dict.fromkeys((prefix, name))]
    return list(dict.fromkeys(out))
