"""The gdb stub's view of a dynamic guest's libraries: ``qXfer:libraries-svr4:read``
(the guest's own r_debug/link_map chain, as gdbserver reads it), ``qXfer:auxv:read``
and ``qXfer:exec-file:read``; and a real gdb that loads library symbols through them."""

from __future__ import annotations

import os
import re
import struct
import xml.dom.minidom

import pytest
from gdb_client import RawClient, Stub, guest_machine
from test_gdbstub import gdb_session

from emu import Machine
from emu.frontends.gdbstub import unescape_binary

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
INTERP = "/lib64/ld-linux-x86-64.so.2"
AT_PHDR, AT_ENTRY, AT_BASE = 3, 9, 7
PT_DYNAMIC = 2
EMPTY = b'l<library-list-svr4 version="1.0"></library-list-svr4>'  # no libraries (yet)


def elf_headers(path: str) -> tuple[dict, list, dict]:
    """(ELF header fields, program headers (type, vaddr), section name -> address) of a
    host file, parsed here independently of the emulator."""
    data = open(path, "rb").read()
    e_entry, e_phoff, e_shoff = struct.unpack_from("<QQQ", data, 24)
    e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHHHH", data, 54)
    phdrs = []
    for i in range(e_phnum):
        p_type, _flags, _offset, p_vaddr = struct.unpack_from("<IIQQ", data, e_phoff + i * e_phentsize)
        phdrs.append((p_type, p_vaddr))
    shdrs = [struct.unpack_from("<IIQQQ", data, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    strtab = data[shdrs[e_shstrndx][4] :]
    sections = {strtab[name : strtab.index(b"\0", name)].decode(): addr for name, _t, _f, addr, _o in shdrs}
    return {"entry": e_entry, "phoff": e_phoff}, phdrs, sections


def lowest_mapping(m: Machine, path: str) -> int:
    """Where the model maps ``path`` first (its load bias for a file linked at 0)."""
    real = os.path.realpath(path)
    starts = [v.start for v in m.mem.vmas if v.file is not None and os.path.realpath(v.name) == real]
    assert starts, f"{path} is not mapped: {[v.name for v in m.mem.vmas]}"
    return min(starts)


def dynamic_vaddr(path: str) -> int:
    return next(vaddr for typ, vaddr in elf_headers(path)[1] if typ == PT_DYNAMIC)


def parse(reply: bytes) -> xml.dom.minidom.Element:
    assert reply[:1] == b"l", f"a whole document in one reply, got {reply[:40]!r}"
    return xml.dom.minidom.parseString(reply[1:]).documentElement


def libraries(doc) -> list[dict]:
    return [
        {k: lib.getAttribute(k) for k in ("name", "lm", "l_addr", "l_ld", "lmid")}
        for lib in doc.getElementsByTagName("library")
    ]


@pytest.fixture
def at_main(build_c):
    """A dynamic guest (malloc/free through libc) stopped by gdb at main: ld.so has
    mapped libc and linked the r_debug chain.  Yields (machine, exe, client)."""
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe)
    stub = Stub(m)
    client = RawClient(stub.port)
    assert client.ask(b"Z0,%x,1" % m.resolve("main")) == b"OK"
    stop = client.ask(b"c")
    assert stop.startswith(b"T05"), f"expected a breakpoint stop at main, got {stop!r}"
    assert m.pc == m.resolve("main")
    yield m, exe, client
    client.send_packet(b"k")
    client.close()
    assert stub.finished(), "the stub did not end after k"
    assert stub.errors == [], stub.errors[0]


def test_qsupported_announces_the_library_objects(tmp_path):
    m = guest_machine(tmp_path)
    stub = Stub(m)
    c = RawClient(stub.port)
    features = c.ask(b"qSupported:multiprocess+;swbreak+;xmlRegisters=i386").split(b";")
    for want in (
        b"qXfer:libraries-svr4:read+",
        b"augmented-libraries-svr4-read+",
        b"qXfer:auxv:read+",
        b"qXfer:exec-file:read+",
    ):
        assert want in features, f"{want!r} not in {features}"
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == []


def test_library_list_names_every_library_ld_so_loaded_in_chain_order(at_main):
    m, _exe, c = at_main
    libs = libraries(parse(c.ask(b"qXfer:libraries-svr4:read::0,3fff")))
    assert [lib["name"] for lib in libs] == ["linux-vdso.so.1", LIBC, INTERP], libs


@pytest.mark.parametrize("path", [LIBC, INTERP])
def test_library_l_addr_and_l_ld_match_the_models_mappings(at_main, path):
    """l_addr is where the model mapped the file (both are linked at 0), l_ld is that
    plus the file's own PT_DYNAMIC address."""
    m, _exe, c = at_main
    lib = next(x for x in libraries(parse(c.ask(b"qXfer:libraries-svr4:read::0,3fff"))) if x["name"] == path)
    bias = lowest_mapping(m, path)
    assert int(lib["l_addr"], 16) == bias, f"l_addr {lib['l_addr']} != first mapping {bias:#x}"
    assert int(lib["l_ld"], 16) == bias + dynamic_vaddr(path), f"l_ld {lib['l_ld']} != {bias + dynamic_vaddr(path):#x}"


def test_main_lm_is_the_programs_link_map(at_main):
    """main-lm is the chain's first entry: its l_ld is the program's own dynamic
    section, its l_next the first library, and it is not listed as a library."""
    m, exe, c = at_main
    doc = parse(c.ask(b"qXfer:libraries-svr4:read::0,3fff"))
    main_lm = int(doc.getAttribute("main-lm"), 16)
    l_ld, l_next = struct.unpack("<QQ", m.mem.read(main_lm + 16, 16))
    assert l_ld == lowest_mapping(m, exe) + dynamic_vaddr(exe), f"main-lm's l_ld {l_ld:#x}"
    first = libraries(doc)[0]
    assert int(first["lm"], 16) == l_next, f"first library lm {first['lm']} != l_next {l_next:#x}"
    assert doc.getAttribute("version") == "1.0"


def test_every_library_has_the_main_namespace_as_lmid(at_main):
    """lmid is the namespace's r_debug: DT_DEBUG of the program's dynamic section."""
    m, exe, c = at_main
    dyn = lowest_mapping(m, exe) + dynamic_vaddr(exe)
    r_debug = None
    for off in range(0, 0x1000, 16):
        tag, val = struct.unpack("<qQ", m.mem.read(dyn + off, 16))
        if tag == 21:
            r_debug = val
            break
        assert tag != 0, "no DT_DEBUG in the program's dynamic section"
    libs = libraries(parse(c.ask(b"qXfer:libraries-svr4:read::0,3fff")))
    assert {lib["lmid"] for lib in libs} == {f"{r_debug:#x}"}, libs


def test_incremental_read_from_start_and_prev(at_main):
    """start=LM;prev=LM (gdb's augmented read after a probe stop): the chain from start
    on, without main-lm; the lmid the annex names is echoed."""
    _m, _exe, c = at_main
    full = parse(c.ask(b"qXfer:libraries-svr4:read::0,3fff"))
    libs = libraries(full)
    annex = b"lmid=%s;start=%s;prev=%s" % (b"abc0", libs[1]["lm"][2:].encode(), libs[0]["lm"][2:].encode())
    part = parse(c.ask(b"qXfer:libraries-svr4:read:" + annex + b":0,3fff"))
    assert part.getAttribute("main-lm") == ""
    assert [(x["name"], x["lm"], x["lmid"]) for x in libraries(part)] == [
        (x["name"], x["lm"], "0xabc0") for x in libs[1:]
    ]


def test_incremental_read_with_a_wrong_prev_stops_at_the_corrupted_link(at_main):
    _m, _exe, c = at_main
    libs = libraries(parse(c.ask(b"qXfer:libraries-svr4:read::0,3fff")))
    annex = b"start=%s;prev=1234" % libs[1]["lm"][2:].encode()
    assert c.ask(b"qXfer:libraries-svr4:read:" + annex + b":0,3fff") == EMPTY


def test_a_cyclic_chain_is_bounded(at_main):
    """A chain linked into a loop (main <-> first library, written through M as gdb
    would) gets a bounded answer, not a hang; the write is seen at once."""
    m, _exe, c = at_main
    doc = parse(c.ask(b"qXfer:libraries-svr4:read::0,3fff"))
    main_lm, first = int(doc.getAttribute("main-lm"), 16), int(libraries(doc)[0]["lm"], 16)
    for addr, value in ((first + 24, main_lm), (main_lm + 32, first)):  # l_next, l_prev
        assert c.ask(b"M%x,8:%s" % (addr, struct.pack("<Q", value).hex().encode())) == b"OK"
    whole, off = b"", 0
    while True:
        reply = c.ask(b"qXfer:libraries-svr4:read::%x,3fff" % off)
        whole, off = whole + reply[1:], off + len(reply) - 1
        if reply[:1] == b"l":
            break
    doc = xml.dom.minidom.parseString(whole).documentElement
    assert doc.getAttribute("main-lm") == f"{main_lm:#x}"
    names = [lib["name"] for lib in libraries(doc)]
    assert names == ["linux-vdso.so.1"] * 2048, (
        f"4096 entries read (half of them the unnamed program), got {len(names)} names"
    )


def test_chunked_reads_concatenate_to_the_document(at_main):
    _m, _exe, c = at_main
    whole = c.ask(b"qXfer:libraries-svr4:read::0,3fff")[1:]
    got, off = b"", 0
    while True:
        reply = c.ask(b"qXfer:libraries-svr4:read::%x,40" % off)
        got += reply[1:]
        off += len(reply) - 1
        if reply[:1] == b"l":
            break
        assert reply[:1] == b"m" and len(reply) == 0x41, reply
    assert got == whole
    assert c.ask(b"qXfer:libraries-svr4:read::%x,40" % (len(whole) + 5)) == b"l"


def test_before_ld_so_links_the_chain_the_list_is_empty(build_c):
    """At the interpreter's entry DT_DEBUG is still 0: an empty list, not an error."""
    exe = build_c("lib_malloc.c", name="lib_malloc")
    stub = Stub(Machine.from_elf(exe))
    c = RawClient(stub.port)
    assert c.ask(b"qXfer:libraries-svr4:read::0,3fff") == EMPTY
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == []


@pytest.mark.parametrize(
    "packet, reply",
    [
        (b"qXfer:libraries-svr4:read::0,3fff", b"E01"),  # a static program: no DT_DEBUG
        (b"qXfer:libraries-svr4:read:start=zz:0,100", b"E01"),
        (b"qXfer:libraries-svr4:read:start=1" + b"0" * 17 + b":0,100", b"E01"),
        (b"qXfer:libraries-svr4:read::0", b"E01"),
        (b"qXfer:libraries-svr4:read:", b"E01"),
        (b"qXfer:libraries-svr4:write::0:00", b""),
        (b"qXfer:auxv:read:x:0,10", b"E00"),
        (b"qXfer:exec-file:read:zz:0,10", b"E01"),
        (b"qXfer:exec-file:read:7fff:0,10", b"E01"),  # no such process
        (b"qXfer:nope:read::0,10", b""),
    ],
)
def test_malformed_or_unanswerable_requests_get_an_error_reply(tmp_path, packet, reply):
    stub = Stub(guest_machine(tmp_path))
    c = RawClient(stub.port)
    assert c.ask(packet) == reply
    assert c.ask(b"?").startswith(b"S05"), "the stub still answers"
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == [], stub.errors


def test_auxv_is_the_exec_vector_binary_escaped(build_c):
    """AT_PHDR/AT_ENTRY/AT_BASE of a PIE under ld.so, read back through the escaped
    binary reply, point where the model mapped the program and the interpreter."""
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe)
    stub = Stub(m)
    c = RawClient(stub.port)
    reply = c.ask(b"qXfer:auxv:read::0,3fff")
    assert reply[:1] == b"l"
    data = unescape_binary(reply[1:])
    pairs = [struct.unpack_from("<QQ", data, i) for i in range(0, len(data), 16)]
    assert len(data) % 16 == 0 and pairs[-1] == (0, 0), pairs[-3:]
    auxv = dict(pairs)
    header, _, _ = elf_headers(exe)
    bias = lowest_mapping(m, exe)
    assert auxv[AT_PHDR] == bias + header["phoff"], f"AT_PHDR {auxv[AT_PHDR]:#x}"
    assert auxv[AT_ENTRY] == bias + header["entry"], f"AT_ENTRY {auxv[AT_ENTRY]:#x}"
    assert auxv[AT_BASE] == lowest_mapping(m, INTERP), f"AT_BASE {auxv[AT_BASE]:#x}"
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == []


@pytest.mark.parametrize(
    "machine",
    [lambda: Machine.from_asm("_start:\n    hlt\n"), lambda: Machine.from_guest("exit42")],
    ids=["asm", "guest"],
)
def test_exec_file_of_an_image_that_is_no_file_is_an_error(machine):
    stub = Stub(machine())
    c = RawClient(stub.port)
    assert c.ask(b"qXfer:exec-file:read::0,3fff") == b"E01"
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == []


def test_exec_file_is_the_programs_path(tmp_path):
    m = guest_machine(tmp_path)
    stub = Stub(m)
    c = RawClient(stub.port)
    path = str(tmp_path / "g").encode()
    assert c.ask(b"qXfer:exec-file:read::0,3fff") == b"l" + path
    assert c.ask(b"qXfer:exec-file:read:%x:0,3fff" % m.process.pid) == b"l" + path
    assert c.ask(b"qXfer:exec-file:read::2,3") == b"m" + path[2:5]
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == []


# -- a real gdb -----------------------------------------------------------------------


def sharedlibrary_rows(out: str) -> dict[str, tuple[int, int, str]]:
    rows = {}
    for line in out.splitlines():
        # gdb reads the files through vFile (its default "target:" sysroot)
        m = re.match(r"(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+(Yes|No)( \(\*\))?\s+(?:target:)?(/\S+)$", line)
        if m:
            rows[m.group(5)] = (int(m.group(1), 16), int(m.group(2), 16), m.group(3))
    return rows


def test_gdb_info_sharedlibrary_lists_libc_where_the_model_mapped_it(build_c):
    """gdb's From column is the library's .text: l_addr (the model's first libc
    mapping) plus .text's address in the file; the symbols are read."""
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe)
    out = gdb_session(m, exe, ["break main", "continue", "info sharedlibrary", "kill"])
    rows = sharedlibrary_rows(out)
    assert LIBC in rows, out
    text = elf_headers(os.path.realpath(LIBC))[2][".text"]
    start, _end, syms = rows[LIBC]
    bias = lowest_mapping(m, LIBC)
    assert start == bias + text, f"libc From {start:#x}, model: {bias:#x} + .text {text:#x}"
    assert syms == "Yes", out
    assert rows[INTERP][0] == lowest_mapping(m, INTERP) + elf_headers(os.path.realpath(INTERP))[2][".text"]


@pytest.mark.parametrize(
    "debug_dir",
    [[], ["set debug-file-directory /nonexistent"]],
    ids=["libc-debug-info-if-installed", "libc-symbols-only"],
)
def test_gdb_breaks_in_libc_malloc_and_backtraces_to_the_program(build_c, debug_dir):
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe)
    out = gdb_session(
        m,
        exe,
        debug_dir + ["break main", "continue", "break malloc", "continue", "bt", "info symbol $pc", "p/x $pc", "kill"],
    )
    # with libc's debug info: "Breakpoint 2.1, __GI___libc_malloc (bytes=...) at ...";
    # without: "Breakpoint 2, 0x... in malloc () from /lib/..."
    assert re.search(r"Breakpoint 2(\.\d+)?, (0x[0-9a-f]+ in )?\S*malloc \(", out), out
    assert f"malloc in section .text of target:{LIBC}" in out, out  # read through vFile
    assert re.search(r"#1  0x[0-9a-f]+ in loop \(", out), out
    assert re.search(r"#2  0x[0-9a-f]+ in main \(", out), out
    pc = int(re.search(r"\$1 = (0x[0-9a-f]+)", out).group(1), 16)
    libc_text = [
        v
        for v in m.mem.vmas
        if v.file is not None and v.perms() == "r-xp" and os.path.realpath(v.name) == os.path.realpath(LIBC)
    ]
    assert libc_text and libc_text[0].start <= pc < libc_text[0].end, f"pc {pc:#x} not in libc's text"


def test_the_list_is_read_again_after_the_guest_ran(build_c):
    """A list asked for at the interpreter's entry (empty) is not served again once
    ld.so has run: each stop reads the guest afresh."""
    exe = build_c("lib_malloc.c", name="lib_malloc")
    m = Machine.from_elf(exe)
    stub = Stub(m)
    c = RawClient(stub.port)
    assert c.ask(b"qXfer:libraries-svr4:read::0,3fff") == EMPTY
    assert c.ask(b"Z0,%x,1" % m.resolve("main")) == b"OK"
    assert c.ask(b"c").startswith(b"T05")
    names = [lib["name"] for lib in libraries(parse(c.ask(b"qXfer:libraries-svr4:read::0,3fff")))]
    assert LIBC in names, names
    c.send_packet(b"k")
    assert stub.finished() and stub.errors == []


def test_gdb_follows_a_dlopen_and_breaks_in_the_new_library(build_c):
    """A pending breakpoint on frexp resolves when the guest dlopen()s libm: gdb hears
    of the new library at ld.so's stop and reads the list again."""
    exe = build_c("dlopen_libm.c", "-ldl", name="dlopen_libm")
    m = Machine.from_elf(exe)
    out = gdb_session(
        m, exe, ["set breakpoint pending on", "break frexp", "continue", "info sharedlibrary", "bt 2", "kill"]
    )
    libm = "/lib/x86_64-linux-gnu/libm.so.6"
    rows = sharedlibrary_rows(out)
    assert libm in rows, out
    text = elf_headers(os.path.realpath(libm))[2][".text"]
    assert rows[libm][0] == lowest_mapping(m, libm) + text, f"libm From {rows[libm][0]:#x}"
    assert re.search(r"Breakpoint 1(\.\d+)?, (0x[0-9a-f]+ in )?\S*frexp \(", out), out
    assert re.search(r"#1  0x[0-9a-f]+ in main \(", out), out
