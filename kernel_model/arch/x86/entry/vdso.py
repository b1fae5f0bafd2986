"""The vDSO: a small shared object the kernel maps into every process (arch/x86/entry/vdso).

The image is built here, byte by byte, the way the kernel's vdso2c output looks to a
user: one ``PT_LOAD`` (r-x) holding the ELF header, ``.hash``, ``.dynsym``, ``.dynstr``,
``.gnu.version`` / ``.gnu.version_d`` (every symbol at version ``LINUX_2.6``), a
read-only ``PT_DYNAMIC`` (``DT_SONAME linux-vdso.so.1``), a ``PT_NOTE`` with the
``Linux`` version note, the code and section headers, so glibc's ``setup_vdso`` and
``dl_vdso_vsym`` find ``__vdso_clock_gettime`` & co. exactly as on the host, and
readelf/gdb read it.

Each function is the kernel vdso's fallback path and nothing else: it issues the real
syscall (``mov eax, NR; syscall; ret``).  The machine has one virtual clock, owned by the
syscalls, and a vDSO reading a [vvar] page of its own would be a second one; going
through the syscall keeps every reader on the same clock, costs one trap per call, and
still shows a caller the vDSO's addresses (the syscall's rip is inside [vdso]).  The
[vvar] pages the kernel maps below the code are mapped too, zero-filled (nothing reads
them).  ``__vdso_getrandom`` (6.11+) is not exported: glibc falls back to getrandom(2),
which keeps the generator on the machine's seeded one.
"""

from __future__ import annotations

import functools
import struct

from keystone import KS_ARCH_X86, KS_MODE_64, Ks

from kernel_model.mm.mm_types import PAGE_SIZE, PROT_EXEC, PROT_READ, PROT_WRITE, MemoryLimitExceeded

VDSO_NAME = "[vdso]"
VVAR_NAME, VVAR_VCLOCK_NAME = "[vvar]", "[vvar_vclock]"
VVAR_PAGES, VVAR_VCLOCK_PAGES = 4, 2  # __VDSO_PAGES = 6 on 6.18, split in two mappings
VDSO_SIZE = 2 * PAGE_SIZE  # vdso64_image.size on the host (measured)
VERSION = "LINUX_2.6"
SONAME = "linux-vdso.so.1"

# (exported name, syscall number, weak alias) in the kernel's vdso.lds export list order
FUNCTIONS = (
    ("__vdso_clock_gettime", 228, "clock_gettime"),
    ("__vdso_gettimeofday", 96, "gettimeofday"),
    ("__vdso_time", 201, "time"),
    ("__vdso_getcpu", 309, "getcpu"),
    ("__vdso_clock_getres", 229, "clock_getres"),
)

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_PT_LOAD, _PT_DYNAMIC, _PT_NOTE = 1, 2, 4
_STB_GLOBAL, _STB_WEAK, _STT_OBJECT, _STT_FUNC = 1, 2, 1, 2
_SHN_ABS = 0xFFF1
_DT = dict(
    NULL=0,
    HASH=4,
    STRTAB=5,
    SYMTAB=6,
    STRSZ=10,
    SYMENT=11,
    SONAME=14,
    VERSYM=0x6FFFFFF0,
    VERDEF=0x6FFFFFFC,
    VERDEFNUM=0x6FFFFFFD,
)
_SHT = dict(NULL=0, PROGBITS=1, STRTAB=3, HASH=5, DYNAMIC=6, NOTE=7, DYNSYM=11, VERDEF=0x6FFFFFFD, VERSYM=0x6FFFFFFF)
_SHF_WRITE, _SHF_ALLOC, _SHF_EXECINSTR = 1, 2, 4
_DYNSYM, _DYNSTR, _TEXT = 2, 3, 8  # section indices of the layout below


def elf_hash(name: bytes) -> int:
    """The SysV ELF hash (.hash buckets and vd_hash)."""
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


class _StrTab:
    def __init__(self):
        self.data = bytearray(b"\0")

    def add(self, s: str) -> int:
        off = len(self.data)
        self.data += s.encode() + b"\0"
        return off


def _align(buf: bytearray, n: int) -> int:
    buf += b"\0" * (-len(buf) % n)
    return len(buf)


def _code() -> tuple[bytes, dict[str, int]]:
    """The functions, 16-byte aligned: each the syscall fallback of the kernel's."""
    ks = Ks(KS_ARCH_X86, KS_MODE_64)
    code, offsets = bytearray(), {}
    for name, nr, _ in FUNCTIONS:
        code += b"\xcc" * (-len(code) % 16)
        offsets[name] = len(code)
        code += bytes(ks.asm(f"mov eax, {nr}; syscall; ret")[0])
    return bytes(code), offsets


@functools.cache
def vdso_image(linux_version_code: int = 0x061200) -> bytes:
    """The vDSO as mapped (``VDSO_SIZE`` bytes), linked at 0; ``linux_version_code``
    goes into the ``Linux`` note as LINUX_VERSION_CODE does."""
    code, code_off = _code()
    dynstr = _StrTab()
    soname = dynstr.add(SONAME)
    version = dynstr.add(VERSION)
    # symbols: null, the version's ABS symbol, then each function and its weak alias
    syms = [(0, 0, 0, 0, 0)]  # (name, info, shndx, value, size)
    syms.append((version, (_STB_GLOBAL << 4) | _STT_OBJECT, _SHN_ABS, 0, 0))
    fn_syms = []
    for name, _, alias in FUNCTIONS:
        fn_syms.append((dynstr.add(name), _STB_GLOBAL, name))
        fn_syms.append((dynstr.add(alias), _STB_WEAK, name))
    names = [b"", VERSION.encode()] + [bytes(dynstr.data[o : dynstr.data.index(b"\0", o)]) for o, _, _ in fn_syms]

    out = bytearray(b"\0" * (_EHDR.size + 3 * _PHDR.size))
    sections = []  # (name, type, flags, off, size, link, info, align, entsize)

    def section(name, typ, flags, data, align, link=0, info=0, entsize=0):
        off = _align(out, align)
        out.extend(data)
        sections.append((name, typ, flags, off, len(data), link, info, align, entsize))
        return off

    nsyms = len(syms) + len(fn_syms)
    nbucket = 3
    buckets, chains = [0] * nbucket, [0] * nsyms
    for i in range(1, nsyms):  # chains end where they began
        b = elf_hash(names[i]) % nbucket
        chains[i], buckets[b] = buckets[b], i
    hash_off = section(
        ".hash",
        _SHT["HASH"],
        _SHF_ALLOC,
        struct.pack(f"<{2 + nbucket + nsyms}I", nbucket, nsyms, *buckets, *chains),
        8,
        link=_DYNSYM,
        entsize=4,
    )
    text_index = _TEXT
    dynsym_off = _align(out, 8)  # symbols need .text's address: reserve
    section(
        ".dynsym", _SHT["DYNSYM"], _SHF_ALLOC, b"\0" * (_SYM.size * nsyms), 8, link=_DYNSTR, info=1, entsize=_SYM.size
    )
    dynstr_off = section(".dynstr", _SHT["STRTAB"], _SHF_ALLOC, bytes(dynstr.data), 1)
    versym_off = section(
        ".gnu.version",
        _SHT["VERSYM"],
        _SHF_ALLOC,
        struct.pack(f"<{nsyms}H", 0, *([2] * (nsyms - 1))),
        2,
        link=_DYNSYM,
        entsize=2,
    )
    # Elf64_Verdef + Elf64_Verdaux: index 1 the file (VER_FLG_BASE), index 2 LINUX_2.6
    verdef = (
        struct.pack("<HHHHIII", 1, 1, 1, 1, elf_hash(SONAME.encode()), 20, 28)
        + struct.pack("<II", soname, 0)
        + struct.pack("<HHHHIII", 1, 0, 2, 1, elf_hash(VERSION.encode()), 20, 0)
        + struct.pack("<II", version, 0)
    )
    verdef_off = section(".gnu.version_d", _SHT["VERDEF"], _SHF_ALLOC, verdef, 8, link=_DYNSTR, info=2)
    dyn = [
        ("SONAME", soname),
        ("HASH", hash_off),
        ("STRTAB", dynstr_off),
        ("SYMTAB", dynsym_off),
        ("STRSZ", len(dynstr.data)),
        ("SYMENT", _SYM.size),
        ("VERDEF", verdef_off),
        ("VERDEFNUM", 2),
        ("VERSYM", versym_off),
        ("NULL", 0),
    ]
    dyn_data = b"".join(struct.pack("<qQ", _DT[k], v) for k, v in dyn)
    dynamic_off = section(".dynamic", _SHT["DYNAMIC"], _SHF_ALLOC, dyn_data, 8, link=_DYNSTR, entsize=16)
    note = struct.pack("<III", 6, 4, 0) + b"Linux\0\0\0" + struct.pack("<I", linux_version_code)
    note_off = section(".note", _SHT["NOTE"], _SHF_ALLOC, note, 4)
    text_off = section(".text", _SHT["PROGBITS"], _SHF_ALLOC | _SHF_EXECINSTR, code, 32)
    assert len(sections) == _TEXT  # [0] is the null section

    sym_bytes = bytearray()
    for name_off, info, shndx, value, size in syms:
        sym_bytes += _SYM.pack(name_off, info, 0, shndx, value, size)
    for name_off, bind, target in fn_syms:
        sym_bytes += _SYM.pack(name_off, (bind << 4) | _STT_FUNC, 0, text_index, text_off + code_off[target], 8)
    out[dynsym_off : dynsym_off + len(sym_bytes)] = sym_bytes

    shstr = _StrTab()
    sh_names = [shstr.add(s[0]) for s in sections]
    shstrtab_name = shstr.add(".shstrtab")
    load_end = len(out)
    shstrtab_off = len(out)
    out += shstr.data
    shoff = _align(out, 8)
    out += _SHDR.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    for (_name, typ, flags, off, size, link, info, align, entsize), sh_name in zip(sections, sh_names):
        out += _SHDR.pack(sh_name, typ, flags, off, off, size, link, info, align, entsize)
    out += _SHDR.pack(shstrtab_name, _SHT["STRTAB"], 0, 0, shstrtab_off, len(shstr.data), 0, 0, 1, 0)
    shnum = len(sections) + 2

    ident = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    out[: _EHDR.size] = _EHDR.pack(
        ident, 3, 62, 1, 0, _EHDR.size, shoff, 0, _EHDR.size, _PHDR.size, 3, _SHDR.size, shnum, shnum - 1
    )
    phdrs = (
        _PHDR.pack(_PT_LOAD, 5, 0, 0, 0, load_end, load_end, PAGE_SIZE)
        + _PHDR.pack(_PT_DYNAMIC, 4, dynamic_off, dynamic_off, dynamic_off, len(dyn_data), len(dyn_data), 8)
        + _PHDR.pack(_PT_NOTE, 4, note_off, note_off, note_off, len(note), len(note), 4)
    )
    out[_EHDR.size : _EHDR.size + len(phdrs)] = phdrs
    if len(out) > VDSO_SIZE:
        raise AssertionError(f"the vDSO image grew past {VDSO_SIZE:#x} bytes")
    return bytes(out.ljust(VDSO_SIZE, b"\0"))


def linux_version_code(release: str) -> int:
    """KERNEL_VERSION(a, b, c) of a ``uname -r`` string such as ``6.18.0``."""
    parts = []
    for piece in release.split("-", 1)[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) or "0"
        parts.append(min(int(digits), 255))
    a, b, c = (parts + [0, 0, 0])[:3]
    return (a << 16) | (b << 8) | c


def map_vdso(mem, release: str) -> int:
    """map_vdso(): [vvar] + [vvar_vclock] + [vdso] at the top-down free area the kernel's
    get_unmapped_area picks for them; returns the vDSO's base (AT_SYSINFO_EHDR)."""
    vvar_size = (VVAR_PAGES + VVAR_VCLOCK_PAGES) * PAGE_SIZE
    addr = mem.get_unmapped_area(vvar_size + VDSO_SIZE)
    if addr is None:
        raise MemoryLimitExceeded("no room for the vDSO")
    mem.map(addr, VVAR_PAGES * PAGE_SIZE, PROT_READ, VVAR_NAME, special=True)
    mem.map(addr + VVAR_PAGES * PAGE_SIZE, VVAR_VCLOCK_PAGES * PAGE_SIZE, PROT_READ, VVAR_VCLOCK_NAME, special=True)
    base = addr + vvar_size
    # VM_MAYWRITE: a debugger may write breakpoints into the vDSO (vdso_mapping)
    mem.map(
        base,
        VDSO_SIZE,
        PROT_READ | PROT_EXEC,
        VDSO_NAME,
        special=True,
        mayprot=PROT_READ | PROT_WRITE | PROT_EXEC,
        data=vdso_image(linux_version_code(release)),
    )
    return base
