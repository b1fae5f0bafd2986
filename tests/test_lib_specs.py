"""The ways users name a probe in a library: full paths (tracefs ``p:``/``r:``, perf
``PATH:SYMBOL%return``, bpftrace ``uprobe:PATH:SYM``), bpftrace's short ``libc``
(resolved through the sysroot's ld.so.cache as bcc's which_so does), versioned names as
readelf prints them, and ``usdt:`` - each checked against readelf's view of the file."""

from __future__ import annotations

import os
import re
import struct
import subprocess

import pytest
from cli_helpers import cli, one_line_error

from emu import Machine
from emu.probes.ldcache import parse_ld_cache, short_name_candidates
from kernel_model.errors import SymbolError

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


def _readelf_dynsyms(path: str) -> dict[str, int]:
    """'name@VER' / 'name@@VER' -> st_value, from readelf --dyn-syms."""
    out = subprocess.run(["readelf", "--dyn-syms", "-W", path], capture_output=True, text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0][:-1].isdigit() and f[0].endswith(":") and f[6] != "UND":
            syms[f[7]] = int(f[1], 16)
    return syms


def _text_offset(path: str, vaddr: int) -> int:
    """File offset of a link-time address, from readelf's program headers."""
    out = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f[:1] == ["LOAD"]:
            off, va, filesz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
            if va <= vaddr < va + filesz:
                return vaddr - va + off
    raise AssertionError(f"{vaddr:#x} not in a PT_LOAD of {path}")


@pytest.fixture(scope="module")
def libc_syms():
    return _readelf_dynsyms(LIBC)


@pytest.fixture
def machine(build_c):
    exe = build_c("lib_malloc.c", name="lib_malloc")
    return Machine.from_elf(exe, argv=[exe, "1"])


def _event_target(m, spec):
    ev = m.uprobes.add_event(spec)
    return ev.consumer.uprobe.file, ev.offset, ev.spec.is_return


@pytest.mark.parametrize(
    "spec,is_return",
    [
        (f"p:lib/m {LIBC}:malloc", False),
        (f"r:lib/m {LIBC}:malloc ret=$retval", True),
        (f"{LIBC}:malloc%return", True),
        (f"uprobe:{LIBC}:malloc", False),
        ("uprobe:libc:malloc", False),
        ("uretprobe:libc:malloc", True),
        ("uprobe:c:malloc", False),
        ("uprobe:libc.so.6:malloc", False),
        ("uprobe:libc:malloc@@GLIBC_2.2.5", False),
        ("uprobe:libc:malloc@GLIBC_2.2.5", False),
    ],
    ids=[
        "tracefs-p",
        "tracefs-r",
        "perf-return",
        "bpftrace-path",
        "bpftrace-short",
        "bpftrace-ret-short",
        "bcc-short",
        "soname",
        "default-version",
        "any-version",
    ],
)
def test_spec_forms_name_libc_malloc(machine, libc_syms, spec, is_return):
    want = _text_offset(LIBC, libc_syms["malloc@@GLIBC_2.2.5"])
    file, offset, ret = _event_target(machine, spec)
    assert (os.path.realpath(file.path), offset, ret) == (os.path.realpath(LIBC), want, is_return), (
        f"{spec}: expected libc {want:#x} return={is_return}, got {file.path} {offset:#x} {ret}"
    )


def test_tracefs_spec_by_file_offset(machine, libc_syms):
    off = _text_offset(LIBC, libc_syms["malloc@@GLIBC_2.2.5"])
    file, offset, _ = _event_target(machine, f"p:lib/x {LIBC}:{off:#x}")
    assert (os.path.realpath(file.path), offset) == (os.path.realpath(LIBC), off)


@pytest.mark.parametrize(
    "name,readelf_name",
    [
        ("memcpy", "memcpy@@GLIBC_2.14"),
        ("memcpy@@GLIBC_2.14", "memcpy@@GLIBC_2.14"),
        ("memcpy@GLIBC_2.14", "memcpy@@GLIBC_2.14"),
        ("memcpy@GLIBC_2.2.5", "memcpy@GLIBC_2.2.5"),
    ],
    ids=["plain-is-default", "default", "at-default", "hidden-old"],
)
def test_versioned_names_pick_readelfs_symbol(machine, libc_syms, name, readelf_name):
    file = machine.uprobes.find_file(LIBC)
    _, offset = machine.uprobes.symbol_offset(file, name)
    want = _text_offset(LIBC, libc_syms[readelf_name])
    assert offset == want, f"{name}: expected {readelf_name} at {want:#x}, got {offset:#x}"


@pytest.mark.parametrize(
    "name,words",
    [
        ("malloc@@GLIBC_9.9", ["malloc", "GLIBC_2.2.5"]),
        ("memcpy@@GLIBC_2.2.5", ["GLIBC_2.14", "GLIBC_2.2.5"]),
    ],
)
def test_a_missing_version_lists_the_versions_there_are(machine, name, words):
    file = machine.uprobes.find_file(LIBC)
    with pytest.raises(SymbolError) as e:
        machine.uprobes.symbol_offset(file, name)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_an_ifunc_symbol_is_probed_at_its_resolver_with_a_note(machine, libc_syms):
    file = machine.uprobes.find_file(LIBC)
    _, offset = machine.uprobes.symbol_offset(file, "memcpy")
    assert offset == _text_offset(LIBC, libc_syms["memcpy@@GLIBC_2.14"])
    assert len(machine.uprobes.notes) == 1 and "IFUNC" in machine.uprobes.notes[0], machine.uprobes.notes


@pytest.mark.parametrize(
    "spec,words",
    [
        ("uprobe:libnosuchthing:malloc", ["libnosuchthing", "ld.so cache"]),
        ("p /no/such/lib.so:0x10", ["/no/such/lib.so", "no such file"]),
        (f"uprobe:{LIBC}:no_such_function", ["no_such_function"]),
        ("uprobe:libc:malloc@@GLIBC_9", ["GLIBC_2.2.5"]),
    ],
)
def test_bad_library_specs_are_one_line_and_exit_2(build_c, spec, words):
    exe = build_c("lib_malloc.c", name="lib_malloc")
    line = one_line_error(cli("run", "-e", spec, exe))
    assert all(w in line for w in words), line


def test_pid_must_be_positive():
    proc = cli("run", "--pid", "0", "-e", "uprobe:libc:malloc", "/bin/true")
    assert "pid" in one_line_error(proc)


# --- ld.so.cache --------------------------------------------------------------------------


def _cache(entries: list[tuple[str, str]]) -> bytes:
    """A new-format ld.so.cache (glibc-ld.so.cache1.1) with ``entries``."""
    header = struct.Struct("<20sIIB3xI12x")
    entry = struct.Struct("<iIIIQ")
    strings = b""
    base = header.size + entry.size * len(entries)
    rows = []
    for soname, path in entries:
        key = base + len(strings)
        strings += soname.encode() + b"\0"
        value = base + len(strings)
        strings += path.encode() + b"\0"
        rows.append(entry.pack(0x303, key, value, 0, 0))
    return header.pack(b"glibc-ld.so.cache1.1", len(entries), len(strings), 2, 0) + b"".join(rows) + strings


def test_ld_cache_entries_are_read_in_file_order():
    data = _cache([("libz.so.1", "/usr/lib/libz.so.1"), ("libc.so.6", "/lib/x/libc.so.6")])
    assert parse_ld_cache(data) == [("libz.so.1", "/usr/lib/libz.so.1"), ("libc.so.6", "/lib/x/libc.so.6")]


def test_the_hosts_cache_names_the_libc_ldconfig_lists():
    listed = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    want = re.findall(r"^\s*libc\.so\.6 \(([^)]*)\) => (\S+)", listed, re.M)
    with open("/etc/ld.so.cache", "rb") as f:
        got = [p for s, p in parse_ld_cache(f.read()) if s == "libc.so.6"]
    assert got == [p for _, p in want] and got, f"expected {want}, got {got}"


@pytest.mark.parametrize(
    "name,expected_first",
    [
        ("libc", "/mapped/libc.so.6"),
        ("c", "/mapped/libc.so.6"),
        ("libz", "/usr/lib/libz.so.1"),
        ("z", "/usr/lib/libz.so.1"),
        ("libz.so.1", "/usr/lib/libz.so.1"),
    ],
)
def test_short_names_prefer_mapped_then_cache(name, expected_first):
    cache = _cache([("libz.so.1", "/usr/lib/libz.so.1"), ("libc.so.6", "/cache/libc.so.6")])
    got = short_name_candidates(
        name, ["/mapped/libc.so.6", "/bin/prog"], lambda p: cache if p == "/etc/ld.so.cache" else None
    )
    assert got[0] == expected_first, got
