"""``qXfer:libraries-svr4:read``: the dynamic linker's link_map list read from guest memory,
as gdbserver reads it (``linux_qxfer_libraries_svr4``)."""

from __future__ import annotations

import struct

from emu.frontends.gdbstub.packets import MASK64, Malformed, hex_int

# x86_64 layouts gdbserver reads (its link_map_offsets for 64-bit): struct r_debug's
# r_map; struct link_map's l_addr, l_name, l_ld, l_next, l_prev.
_R_MAP, _R_NEXT = 8, 40  # r_next: struct r_debug_extended (r_version 2)
_L_ADDR, _L_NAME, _L_LD, _L_NEXT, _L_PREV = 0, 8, 16, 24, 32
_AT_PHDR, _AT_PHNUM = 3, 5
_PT_DYNAMIC, _PT_PHDR = 2, 6
_DT_NULL, _DT_DEBUG = 0, 21
_PHDR_SIZE, _DYN_SIZE = 56, 16
_PATH_MAX = 4096
_MAX_LIBRARIES = 4096  # link_map entries read per document: more is a loop
_MAX_NAMESPACES = 256  # dlmopen namespaces along r_next
_MAX_DYNAMIC = 4096  # dynamic entries looked at before giving up on DT_NULL


def svr4_annex(annex: str) -> tuple[int, int, int]:
    """``lmid=ADDR;start=ADDR;prev=ADDR`` (hex) of an incremental read, as gdbserver's
    annex loop reads it: other names are skipped, a malformed address is E01."""
    found = {"lmid": 0, "start": 0, "prev": 0}
    for item in annex.split(";"):
        name, eq, value = item.partition("=")
        if not eq:
            break
        if name in found:
            found[name] = hex_int(value) if value else 0
            if found[name] > MASK64:
                raise Malformed(annex)
    return found["lmid"], found["start"], found["prev"]


def _xml_escape(text: bytes) -> bytes:
    """xml_escape_text_append: the five characters XML reserves."""
    for ch, ent in ((b"&", b"&amp;"), (b"<", b"&lt;"), (b">", b"&gt;"), (b'"', b"&quot;"), (b"'", b"&apos;")):
        text = text.replace(ch, ent)
    return text


class Svr4Libraries:
    """The svr4 library list gdbserver serves for a Linux process
    (``linux_process_target::qxfer_libraries_svr4``), read from the guest's own memory:
    the main program's ``PT_DYNAMIC`` (found through ``AT_PHDR``/``AT_PHNUM`` and
    ``PT_PHDR``, get_dynamic), its ``DT_DEBUG`` entry that ld.so points at ``_r_debug``
    (get_r_debug), then ``r_map`` and the ``link_map`` chain.  ``peek(addr, n)``
    returns what is readable, short at a fault."""

    def __init__(self, peek, auxv: bytes):
        self.peek = peek
        self.entries_left = _MAX_LIBRARIES  # over all namespaces: a looping chain ends
        self.auxv: dict[int, int] = {}
        for i in range(0, len(auxv) - 15, 16):
            key, val = struct.unpack_from("<QQ", auxv, i)
            self.auxv.setdefault(key, val)

    def word(self, addr: int) -> int | None:
        data = self.peek(addr & MASK64, 8)
        return int.from_bytes(data, "little") if len(data) == 8 else None

    def get_dynamic(self) -> int:
        """The address of the main program's dynamic section, 0 when it has none."""
        phdr, phnum = self.auxv.get(_AT_PHDR), self.auxv.get(_AT_PHNUM)
        if not phdr or not phnum:
            return 0
        headers = []
        for i in range(min(phnum, 0xFFFF)):
            data = self.peek(phdr + i * _PHDR_SIZE, _PHDR_SIZE)
            if len(data) < _PHDR_SIZE:
                return 0
            p_type, _flags, _off, p_vaddr = struct.unpack_from("<IIQQ", data)
            headers.append((p_type, p_vaddr))
        relocation = next(((phdr - v) & MASK64 for t, v in headers if t == _PT_PHDR), None)
        if relocation is None:
            return 0  # no PT_PHDR: gdbserver does not guess either
        return next(((v + relocation) & MASK64 for t, v in headers if t == _PT_DYNAMIC), 0)

    def get_r_debug(self) -> int:
        """DT_DEBUG's value (0 until ld.so fills it in), or -1 without a DT_DEBUG."""
        dyn = self.get_dynamic()
        if not dyn:
            return -1
        for i in range(_MAX_DYNAMIC):
            data = self.peek(dyn + i * _DYN_SIZE, _DYN_SIZE)
            if len(data) < _DYN_SIZE:
                break
            tag, val = struct.unpack("<qQ", data)
            if tag == _DT_DEBUG:
                return val
            if tag == _DT_NULL:
                break
        return -1

    def document(self, lmid: int = 0, start: int = 0, prev: int = 0) -> bytes | None:
        """The ``<library-list-svr4>`` document, or None (gdbserver's E01) when the
        program has no DT_DEBUG.  With ``start`` (an incremental read): that namespace's
        chain from ``start`` on.  Otherwise every namespace from the main ``r_debug``
        along ``r_next`` (r_version 2); the main namespace's first entry is the program
        itself, reported as ``main-lm`` and not as a library."""
        head = b'<library-list-svr4 version="1.0"'
        if start:
            return head + b">" + self.read_link_map(lmid, start, prev) + b"</library-list-svr4>"
        main = self.get_r_debug()
        if main == -1:
            return None
        parts: list[bytes] = []
        r_debug: int | None = main
        for n in range(_MAX_NAMESPACES):
            if not r_debug:
                break
            version = self.peek(r_debug, 4)
            lm: int | None = self.word(r_debug + _R_MAP)
            if len(version) < 4 or struct.unpack("<i", version)[0] < 1 or lm is None:
                break
            lm_prev = 0
            if n == 0:  # once, even if r_next leads back to it
                head += b' main-lm="0x%x"' % lm if lm else b""
                lm_prev, lm = lm, self.word(lm + _L_NEXT)
                if lm is None:
                    break
            parts.append(self.read_link_map(r_debug, lm, lm_prev))
            if struct.unpack("<i", version)[0] < 2:
                break
            r_debug = self.word(r_debug + _R_NEXT)
        # (the header is closed even when the first r_debug is unreadable, where
        # gdbserver sends it unterminated)
        return head + b">" + b"".join(parts) + b"</library-list-svr4>"

    def read_link_map(self, lmid: int, lm: int, prev: int) -> bytes:
        """gdbserver's read_link_map: one ``<library>`` per named entry from ``lm`` along
        ``l_next``; an entry whose ``l_prev`` is not the one before ends the walk (a
        corrupted list), so does an unreadable one."""
        out = []
        while lm and self.entries_left > 0:
            self.entries_left -= 1
            words = [self.word(lm + off) for off in (_L_NAME, _L_ADDR, _L_LD, _L_PREV, _L_NEXT)]
            fields = [w for w in words if w is not None]
            if len(fields) < len(words) or fields[3] != prev:
                break
            l_name, l_addr, l_ld, _l_prev, l_next = fields
            name = self.read_name(l_name)
            if name:
                out.append(
                    b'<library name="%s" lm="0x%x" l_addr="0x%x" l_ld="0x%x" lmid="0x%x"/>'
                    % (_xml_escape(name), lm, l_addr, l_ld, lmid)
                )
            prev, lm = lm, l_next
        return b"".join(out)

    def read_name(self, addr: int) -> bytes:
        """l_name: the string up to its NUL, at most PATH_MAX - 1 bytes, short at a fault."""
        return self.peek(addr, _PATH_MAX - 1).split(b"\0", 1)[0]
