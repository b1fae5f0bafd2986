"""Specification tests for kernel_model.fs.elf: what the loader may rely on, checked against binutils.

Real guests are compiled here with gcc (a missing gcc is a failure, not a skip: without
it these tests would prove nothing).  Expected values come from readelf/nm/objdump/gdb,
never from the module under test, so the two cannot agree on the same mistake.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import capstone
import pytest
from keystone import KS_ARCH_X86, KS_MODE_64, Ks

from emu.elf_writer import build_elf
from kernel_model.errors import ElfError, InputError, SymbolError
from kernel_model.fs.elf import (
    PF_R,
    PF_W,
    PF_X,
    ElfImage,
    load_elf_file,
    parse_elf,
)

HELLO_C = textwrap.dedent(
    """\
    #include <stdio.h>
    int counter = 7;
    __thread int per_thread = 3;
    int main(void) { puts("hello"); return counter - 7 + per_thread - 3; }
    """
)

# A hand-written USDT probe macro: the .note.stapsdt layout is namesz=8, descsz,
# type=3, "stapsdt\0", then pc, the address of _.stapsdt.base, the semaphore address,
# and three NUL-terminated strings (provider, name, argument description).
USDT_C = textwrap.dedent(
    r"""
    #define EMU_PROBE(provider, name, sema, argfmt, ...)                         \
      __asm__ __volatile__(                                                      \
          "990: nop\n"                                                           \
          ".pushsection .note.stapsdt,\"\",@note\n"                              \
          ".balign 4\n"                                                          \
          ".4byte 992f-991f, 994f-993f, 3\n"                                     \
          "991: .asciz \"stapsdt\"\n"                                            \
          "992: .balign 4\n"                                                     \
          "993: .8byte 990b, _.stapsdt.base, " sema "\n"                         \
          ".asciz \"" #provider "\"\n"                                           \
          ".asciz \"" #name "\"\n"                                               \
          ".asciz \"" argfmt "\"\n"                                              \
          "994: .balign 4\n"                                                     \
          ".popsection\n"                                                        \
          ".ifndef _.stapsdt.base\n"                                             \
          ".pushsection .stapsdt.base,\"aG\",@progbits,.stapsdt.base,comdat\n"   \
          ".weak _.stapsdt.base\n"                                               \
          ".hidden _.stapsdt.base\n"                                             \
          "_.stapsdt.base: .space 1\n"                                           \
          ".size _.stapsdt.base, 1\n"                                            \
          ".popsection\n"                                                        \
          ".endif\n" ::__VA_ARGS__)

    unsigned short demo_tick_semaphore __attribute__((section(".probes"), used));

    int main(int argc, char **argv) {
        long total = 0;
        for (int i = 0; i < argc + 2; i++) {
            total += i;
            EMU_PROBE(demo, tick, "demo_tick_semaphore", "-4@%0 8@%1", "r"(i), "r"(total));
        }
        EMU_PROBE(demo, done, "0", "");
        return (int)(total & 0);
    }
    """
)


# --------------------------------------------------------------------------- helpers


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def gcc(tmp: Path, source: str, name: str, *flags: str) -> Path:
    """Compile ``source`` with gcc; a missing gcc fails the test on purpose."""
    assert shutil.which("gcc"), "gcc is required to build the test guests"
    src = tmp / f"{name}.c"
    src.write_text(source)
    out = tmp / name
    run("gcc", "-O1", "-g0", *flags, "-o", str(out), str(src))
    return out


def readelf_loads(path: Path, kind: str = "LOAD") -> list[dict]:
    """PT_LOAD (or PT_TLS) rows of ``readelf -lW``, with flags as PF_* bits."""
    rows = []
    for line in run("readelf", "-lW", str(path)).stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == kind:
            flag_text = "".join(parts[6:-1])
            flags = sum(bit for letter, bit in (("R", PF_R), ("W", PF_W), ("E", PF_X)) if letter in flag_text)
            offset, vaddr, _, filesz, memsz = (int(x, 16) for x in parts[1:6])
            rows.append(
                dict(offset=offset, vaddr=vaddr, filesz=filesz, memsz=memsz, flags=flags, align=int(parts[-1], 16))
            )
    return rows


def readelf_entry(path: Path) -> int:
    match = re.search(r"Entry point address:\s+(0x[0-9a-f]+)", run("readelf", "-hW", str(path)).stdout)
    return int(match.group(1), 16)


def nm_symbols(path: Path) -> dict[str, tuple[int, str]]:
    """name -> (address, nm letter) for defined symbols."""
    table = {}
    for line in run("nm", str(path)).stdout.splitlines():
        parts = line.split()
        if len(parts) == 3:
            table.setdefault(parts[2], (int(parts[0], 16), parts[1]))
    return table


def assert_one_line_elf_error(data: bytes, path: str, expected: str) -> ElfError:
    with pytest.raises(ElfError) as info:
        parse_elf(data, path)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    assert message == expected
    return info.value


@pytest.fixture(scope="module")
def guests(tmp_path_factory) -> dict[str, Path]:
    """The gcc-built guests, compiled once for the module."""
    tmp = tmp_path_factory.mktemp("guests")
    return {
        "static": gcc(tmp, HELLO_C, "hello_static", "-static"),
        "pie": gcc(tmp, HELLO_C, "hello_pie", "-static-pie"),
        "dynamic": gcc(tmp, HELLO_C, "hello_dynamic"),
        "usdt_static": gcc(tmp, USDT_C, "usdt_static", "-static"),
        "usdt_pie": gcc(tmp, USDT_C, "usdt_pie", "-static-pie"),
    }


# --------------------------------------------------------------------------- gcc guests


@pytest.mark.parametrize("kind, etype", [("static", "EXEC"), ("pie", "DYN")])
def test_static_guest_header_and_segments_match_readelf(guests, kind, etype):
    path = guests[kind]
    image = load_elf_file(str(path))
    assert image.etype == etype
    assert image.entry == readelf_entry(path)
    assert image.phoff == 64 and image.phentsize == 56
    got = [
        dict(offset=s.offset, vaddr=s.vaddr, filesz=s.filesz, memsz=s.memsz, flags=s.flags, align=s.align)
        for s in image.segments
    ]
    assert got == readelf_loads(path)
    raw = path.read_bytes()
    for seg in image.segments:
        assert seg.data == raw[seg.offset : seg.offset + seg.filesz]


@pytest.mark.parametrize("kind", ["static", "pie"])
def test_segment_permissions_are_wx_exclusive_and_entry_is_executable(guests, kind):
    image = load_elf_file(str(guests[kind]))
    assert all(s.flags & PF_R for s in image.segments)
    assert not any((s.flags & PF_W) and (s.flags & PF_X) for s in image.segments)
    executable = [s for s in image.segments if s.flags & PF_X]
    assert len(executable) == 1
    assert executable[0].vaddr <= image.entry < executable[0].end
    if kind == "pie":
        assert image.segments[0].vaddr == 0  # static-pie is linked at 0, relocated by the loader


@pytest.mark.parametrize("kind", ["static", "pie"])
def test_tls_template_matches_pt_tls(guests, kind):
    image = load_elf_file(str(guests[kind]))
    (row,) = readelf_loads(guests[kind], "TLS")
    assert image.tls is not None
    assert (image.tls.vaddr, image.tls.offset, image.tls.filesz, image.tls.memsz) == (
        row["vaddr"],
        row["offset"],
        row["filesz"],
        row["memsz"],
    )


@pytest.mark.parametrize("kind", ["static", "pie"])
def test_main_symbol_matches_nm(guests, kind):
    image = load_elf_file(str(guests[kind]))
    nm = nm_symbols(guests[kind])
    main = image.resolve("main")
    assert (main.value, main.type, main.bind) == (nm["main"][0], "FUNC", "GLOBAL")
    assert main.size > 0
    assert image.resolve("counter").type == "OBJECT"
    assert image.symbolize(main.value) == ("main", 0)
    assert image.symbolize(main.value + main.size - 1) == ("main", main.size - 1)
    assert image.symbolize(image.entry) == ("_start", 0)
    assert all(s.value != 0 and s.name for s in image.all_symbols)


@pytest.mark.parametrize("kind", ["static", "pie"])
def test_vaddr_offset_round_trip_against_readelf(guests, kind):
    image = load_elf_file(str(guests[kind]))
    for row in readelf_loads(guests[kind]):
        if row["filesz"] == 0:
            continue
        for delta in (0, row["filesz"] // 2, row["filesz"] - 1):
            vaddr, offset = row["vaddr"] + delta, row["offset"] + delta
            assert image.vaddr_to_offset(vaddr) == offset
            assert image.offset_to_vaddr(offset) == vaddr
    main = image.resolve("main")
    offset = image.vaddr_to_offset(main.value)
    text = next(s for s in image.segments if s.flags & PF_X)
    assert image.data[offset : offset + 16] == text.data[main.value - text.vaddr :][:16]


def test_address_without_file_backing_is_a_symbol_error(guests):
    image = load_elf_file(str(guests["static"]))
    rw = next(s for s in image.segments if s.memsz > s.filesz)
    with pytest.raises(SymbolError, match="zero-filled"):
        image.vaddr_to_offset(rw.vaddr + rw.filesz)
    with pytest.raises(SymbolError, match="not inside any loadable segment"):
        image.vaddr_to_offset(0x10)
    with pytest.raises(SymbolError, match="not mapped"):
        image.offset_to_vaddr(len(image.data) + 1)


def test_unknown_symbol_suggests_close_names(guests):
    image = load_elf_file(str(guests["static"]))
    with pytest.raises(SymbolError) as info:
        image.resolve("mian")
    message = str(info.value)
    assert message.startswith(f"unknown symbol 'mian' in {guests['static']}; did you mean ")
    assert "'main'" in message and "\n" not in message


# --------------------------------------------------------------------------- rejected files


def test_dynamically_linked_binary_records_its_interpreter(guests):
    path = guests["dynamic"]
    program_headers = run("readelf", "-lW", str(path)).stdout
    interp = re.search(r"Requesting program interpreter: ([^\]]+)\]", program_headers).group(1)
    image = load_elf_file(str(path))
    assert image.interp == interp, f"expected PT_INTERP {interp!r}, got {image.interp!r}"


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda raw: raw[:-1] + b"x", "the path is not NUL-terminated"),
    ],
    ids=["no-nul"],
)
def test_a_bad_pt_interp_is_one_line(guests, mutate, reason):
    data = bytearray(guests["dynamic"].read_bytes())
    interp = b"/lib64/ld-linux-x86-64.so.2\0"
    at = data.find(interp)
    data[at : at + len(interp)] = mutate(interp)
    assert_one_line_elf_error(bytes(data), "dyn", f"dyn: bad PT_INTERP ({reason})")


def test_shared_library_without_interp_is_rejected_by_dt_needed(tmp_path):
    # It must call into libc, or --as-needed drops the DT_NEEDED entry.
    source = '#include <stdio.h>\nint f(void) { return puts("x"); }\n'
    lib = gcc(tmp_path, source, "libf.so", "-shared", "-fPIC")
    expected = r"needs shared libraries \(DT_NEEDED libc\.so\.6\) but has no PT_INTERP to load them"
    with pytest.raises(ElfError, match=expected):
        load_elf_file(str(lib))


def test_not_an_elf_file(tmp_path):
    assert_one_line_elf_error(b"hello, world\n", "hello.txt", "hello.txt: not an ELF file")
    assert_one_line_elf_error(b"", "empty", "empty: not an ELF file (empty file)")


def test_relocatable_object_is_rejected(tmp_path):
    src = tmp_path / "x.c"
    src.write_text("int x(void) { return 1; }\n")
    assert shutil.which("gcc"), "gcc is required"
    run("gcc", "-c", "-o", str(tmp_path / "x.o"), str(src))
    assert_one_line_elf_error(
        (tmp_path / "x.o").read_bytes(), "x.o", "x.o: relocatable object files cannot be run (ET_REL)"
    )


def test_aarch64_machine_is_rejected(guests):
    data = bytearray(guests["static"].read_bytes())
    data[18:20] = (183).to_bytes(2, "little")  # e_machine = EM_AARCH64
    assert_one_line_elf_error(bytes(data), "prog", "prog: not an x86_64 ELF (machine EM_AARCH64)")


def test_32_bit_elf_is_rejected():
    # A hand-made Elf32_Ehdr for an i386 ET_EXEC: class 1, little-endian, EM_386.
    ident = b"\x7fELF" + bytes([1, 1, 1]) + bytes(9)
    header = ident + (2).to_bytes(2, "little") + (3).to_bytes(2, "little") + (1).to_bytes(4, "little")
    header += bytes(52 - len(header))
    assert_one_line_elf_error(header, "prog", "prog: 32-bit ELF is not supported")


@pytest.mark.parametrize(
    "length, expected",
    [
        (100, "prog: truncated ELF (program header table past end of file)"),
        (40, "prog: truncated ELF (file is 40 bytes, the ELF header needs 64)"),
    ],
)
def test_truncated_headers(guests, length, expected):
    assert_one_line_elf_error(guests["static"].read_bytes()[:length], "prog", expected)


def test_truncated_body(guests):
    data = guests["static"].read_bytes()
    with pytest.raises(ElfError, match=r"^prog: truncated ELF \(PT_LOAD #\d data past end of file\)$"):
        parse_elf(data[: len(data) // 2], "prog")
    with pytest.raises(ElfError, match=r"^prog: truncated ELF \(section header table past end of file\)$"):
        parse_elf(data[:-100], "prog")


def test_bad_input_never_escapes_as_a_foreign_exception():
    """Truncate and scribble over a small valid file: only ElfError may come out."""
    good = build_sample()
    rng = random.Random(1234)
    candidates = [good[:n] for n in range(0, len(good), 7)]
    for _ in range(1500):
        mutated = bytearray(good)
        for _ in range(rng.randint(1, 6)):
            where = rng.randrange(0x100) if rng.random() < 0.5 else rng.randrange(0x1000, len(good))
            mutated[where] = rng.randrange(256)
        candidates.append(bytes(mutated))
    for data in candidates:
        try:
            parse_elf(data, "fuzz")
        except ElfError as exc:
            assert "\n" not in str(exc) and str(exc).startswith("fuzz: ")


def test_cli_style_caller_sees_one_line_and_no_traceback(tmp_path, guests):
    bad = tmp_path / "hello.txt"
    bad.write_text("just text\n")
    script = textwrap.dedent(
        """\
        import sys
        from kernel_model.fs.elf import load_elf_file
        from kernel_model.errors import EmuError
        for path in sys.argv[1:]:
            try:
                load_elf_file(path)
            except EmuError as exc:
                print(exc)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    paths = [str(bad), str(tmp_path / "missing")]
    proc = subprocess.run([sys.executable, "-c", script, *paths], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{bad}: not an ELF file"
    assert lines[1] == f"{tmp_path / 'missing'}: cannot read: no such file or directory"


def test_unreadable_paths_are_input_errors(tmp_path):
    with pytest.raises(InputError, match=r"^.*/nope: cannot read: no such file or directory$"):
        load_elf_file(str(tmp_path / "nope"))
    with pytest.raises(InputError, match=r": cannot read: is a directory$"):
        load_elf_file(str(tmp_path))


def test_permission_denied_is_an_input_error(tmp_path, monkeypatch):
    # root reads mode-000 files, so the refusal is injected where the file is opened
    import builtins

    real_open = builtins.open

    def refusing_open(file, *a, **kw):
        if str(file).endswith("secret"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *a, **kw)

    path = tmp_path / "secret"
    path.write_bytes(b"\x7fELF")
    monkeypatch.setattr(builtins, "open", refusing_open)
    with pytest.raises(InputError, match=r": cannot read: permission denied$"):
        load_elf_file(str(path))


# --------------------------------------------------------------------------- build_elf

SAMPLE_ASM = """
_start:
    mov edi, 42
    call helper
    mov eax, 60
    syscall
helper:
    xor eax, eax
    lea rcx, [rip + 0xfe9]
    add qword ptr [rcx], rdi
    nop
    ret
"""
TEXT_VADDR = 0x401000
DATA_VADDR = 0x402000


def assemble(asm: str, address: int) -> bytes:
    encoding, _ = Ks(KS_ARCH_X86, KS_MODE_64).asm(asm, address)
    return bytes(encoding)


def sample_layout() -> dict:
    text = assemble(SAMPLE_ASM, TEXT_VADDR)
    helper = TEXT_VADDR + 15  # mov edi(5) + call(5) + mov eax(5)
    return dict(
        text=text,
        text_vaddr=TEXT_VADDR,
        entry=TEXT_VADDR,
        symbols=[
            ("_start", TEXT_VADDR, helper - TEXT_VADDR, "FUNC"),
            ("helper", helper, TEXT_VADDR + len(text) - helper, "FUNC"),
            ("after_call", TEXT_VADDR + 10, 0, "NOTYPE", "LOCAL"),
            ("counter", DATA_VADDR, 8, "OBJECT"),
            ("scratch", DATA_VADDR + 8, 64, "OBJECT", "LOCAL"),
        ],
        data=(5).to_bytes(8, "little"),
        bss_size=64,
    )


def build_sample() -> bytes:
    return build_elf(**sample_layout())


@pytest.fixture
def sample_file(tmp_path) -> Path:
    path = tmp_path / "sample"
    path.write_bytes(build_sample())
    path.chmod(0o755)
    return path


def test_build_elf_readelf_has_no_warnings(sample_file):
    proc = run("readelf", "-a", "-W", str(sample_file))
    assert "warning" not in (proc.stdout + proc.stderr).lower()
    assert "EXEC (Executable file)" in proc.stdout
    assert re.search(r"LOAD\s+0x0+ 0x0+400000 .* R E 0x1000", proc.stdout)
    assert re.search(r"LOAD\s+0x0+2000 0x0+402000 .* RW  0x1000", proc.stdout)
    assert ".text" in proc.stdout and ".data" in proc.stdout and ".bss" in proc.stdout


def test_build_elf_objdump_agrees_with_capstone(sample_file):
    layout = sample_layout()
    out = run("objdump", "-d", "-M", "intel", "--insn-width=16", str(sample_file)).stdout
    for name, value, *_ in layout["symbols"][:3]:
        assert f"{value:016x} <{name}>:" in out
    dumped = []
    for line in out.splitlines():
        m = re.match(r"^\s+([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t(\S+)", line)
        if m:
            dumped.append((int(m.group(1), 16), bytes.fromhex(m.group(2)), m.group(3)))
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    expected = [(i.address, bytes(i.bytes), i.mnemonic) for i in md.disasm(layout["text"], TEXT_VADDR)]
    assert dumped == expected


def test_build_elf_nm_lists_symbols(sample_file):
    nm = nm_symbols(sample_file)
    assert nm["_start"] == (TEXT_VADDR, "T")
    assert nm["helper"] == (TEXT_VADDR + 15, "T")
    assert nm["after_call"] == (TEXT_VADDR + 10, "t")
    assert nm["counter"] == (DATA_VADDR, "D")
    assert nm["scratch"] == (DATA_VADDR + 8, "b")


def test_build_elf_gdb_reads_symbols(sample_file):
    assert shutil.which("gdb"), "gdb is required"
    layout = sample_layout()
    args = ["gdb", "-nx", "-batch", "-ex", "info functions"]
    for name, *_ in layout["symbols"]:
        args += ["-ex", f"info address {name}"]
    out = run(*args, str(sample_file)).stdout
    for name, value, *_ in layout["symbols"]:
        assert f'Symbol "{name}" is at {value:#x} in a file compiled without debugging.' in out
    assert re.search(r"0x0+401000\s+_start", out) and re.search(r"0x0+40100f\s+helper", out)


def test_build_elf_runs_natively(sample_file):
    """The strongest check that the layout is right: the host kernel runs it."""
    assert subprocess.run([str(sample_file)]).returncode == 42


def test_build_elf_round_trips_through_parse_elf():
    layout = sample_layout()
    image = parse_elf(build_sample(), "sample")
    text_seg, data_seg = image.segments
    assert image.etype == "EXEC" and image.entry == TEXT_VADDR and image.tls is None and image.usdt == []
    assert (text_seg.vaddr, text_seg.offset, text_seg.flags) == (0x400000, 0, PF_R | PF_X)
    assert text_seg.align == data_seg.align == 0x1000
    assert text_seg.end == TEXT_VADDR + len(layout["text"])
    assert text_seg.data[:4] == b"\x7fELF"
    assert text_seg.data[TEXT_VADDR - 0x400000 :] == layout["text"]
    assert (data_seg.vaddr, data_seg.flags) == (DATA_VADDR, PF_R | PF_W)
    assert (data_seg.filesz, data_seg.memsz) == (8, 8 + 64)
    assert data_seg.offset % 0x1000 == data_seg.vaddr % 0x1000
    assert data_seg.data == layout["data"]
    expected = {}
    for name, value, size, typ, *bind in layout["symbols"]:
        expected[name] = (value, size, typ, bind[0] if bind else "GLOBAL")
    assert {s.name: (s.value, s.size, s.type, s.bind) for s in image.symbols.values()} == expected
    assert image.vaddr_to_offset(TEXT_VADDR) == 0x1000


def test_build_elf_text_only_has_one_segment_and_odd_addresses_work(tmp_path):
    text = assemble("mov eax, 60; xor edi, edi; syscall", 0x400123)
    blob = build_elf(text=text, text_vaddr=0x400123, entry=0x400123, symbols=[("_start", 0x400123, len(text), "FUNC")])
    path = tmp_path / "tiny"
    path.write_bytes(blob)
    path.chmod(0o755)
    assert "warning" not in run("readelf", "-a", "-W", str(path)).stderr.lower()
    image = parse_elf(blob, "tiny")
    assert len(image.segments) == 1 and image.segments[0].vaddr == 0x400000
    assert subprocess.run([str(path)]).returncode == 0


def test_build_elf_rejects_nonsense():
    with pytest.raises(InputError, match="type must be one of"):
        build_elf(text=b"\xc3", text_vaddr=TEXT_VADDR, entry=TEXT_VADDR, symbols=[("f", TEXT_VADDR, 1, "FUNK")])
    with pytest.raises(InputError, match="shares a page"):
        build_elf(
            text=b"\xc3", text_vaddr=TEXT_VADDR, entry=TEXT_VADDR, symbols=[], data=b"x", data_vaddr=TEXT_VADDR + 8
        )


# --------------------------------------------------------------------------- symbolize / resolve


def test_symbolize_is_size_aware_and_falls_back_to_zero_size_symbols():
    text = bytes(0x40)
    blob = build_elf(
        text=text,
        text_vaddr=TEXT_VADDR,
        entry=TEXT_VADDR,
        symbols=[
            ("sized", TEXT_VADDR, 0x10, "FUNC"),
            ("label", TEXT_VADDR + 0x20, 0, "FUNC"),
            ("alias", TEXT_VADDR, 0x10, "FUNC", "LOCAL"),
            ("var", TEXT_VADDR + 0x38, 4, "OBJECT"),
        ],
    )
    image = parse_elf(blob, "sym")
    assert image.symbolize(TEXT_VADDR + 4) == ("sized", 4)  # GLOBAL preferred over LOCAL alias
    assert image.symbolize(TEXT_VADDR + 0x18) is None  # past "sized", before "label"
    assert image.symbolize(TEXT_VADDR + 0x3C) == ("label", 0x1C)  # OBJECTs are not functions
    assert image.symbolize(TEXT_VADDR - 0x100) is None
    assert image.symbolize(0x900000) is None  # zero-size fallback stops at the segment end


def test_duplicate_names_prefer_global_but_keep_all():
    blob = build_elf(
        text=bytes(0x20),
        text_vaddr=TEXT_VADDR,
        entry=TEXT_VADDR,
        symbols=[
            ("dup", TEXT_VADDR + 0x10, 4, "FUNC", "LOCAL"),
            ("dup", TEXT_VADDR, 4, "FUNC", "GLOBAL"),
        ],
    )
    image = parse_elf(blob, "dup")
    assert image.resolve("dup").value == TEXT_VADDR
    assert sorted(s.bind for s in image.all_symbols if s.name == "dup") == ["GLOBAL", "LOCAL"]


def test_resolve_without_symbols_says_so():
    image = parse_elf(build_elf(text=b"\xc3", text_vaddr=TEXT_VADDR, entry=TEXT_VADDR, symbols=[]), "bare")
    with pytest.raises(SymbolError, match=r"^unknown symbol 'main' in bare \(it has no symbol table"):
        image.resolve("main")


# --------------------------------------------------------------------------- USDT


def readelf_stapsdt(path: Path) -> list[dict]:
    out = run("readelf", "-nW", str(path)).stdout
    pattern = re.compile(
        r"Provider: (\S+)\s+Name: (\S+)\s+Location: (0x[0-9a-f]+), Base: (0x[0-9a-f]+), "
        r"Semaphore: (0x[0-9a-f]+)\s+Arguments: ?([^\n]*)"
    )
    return [
        dict(provider=m[0], name=m[1], pc=int(m[2], 16), base=int(m[3], 16), semaphore=int(m[4], 16), args=m[5].strip())
        for m in pattern.findall(out)
    ]


@pytest.mark.parametrize("kind", ["usdt_static", "usdt_pie"])
def test_usdt_notes_match_readelf(guests, kind):
    path = guests[kind]
    image: ElfImage = load_elf_file(str(path))
    expected = readelf_stapsdt(path)
    assert [n["name"] for n in expected] == ["tick", "done"]
    got = [
        dict(provider=n.provider, name=n.name, pc=n.pc, base=n.base, semaphore=n.semaphore, args=n.args)
        for n in image.usdt
    ]
    assert got == expected
    tick, done = image.usdt
    assert tick.provider == "demo"
    assert re.fullmatch(r"-4@%e\w+ 8@%r\w+", tick.args)
    semaphore = nm_symbols(path)["demo_tick_semaphore"][0]
    assert tick.semaphore == image.resolve("demo_tick_semaphore").value == semaphore
    assert done.semaphore == 0 and done.args == ""
    for note in image.usdt:
        assert image.data[image.vaddr_to_offset(note.pc)] == 0x90  # the probe's nop
        assert image.symbolize(note.pc)[0] == "main"
