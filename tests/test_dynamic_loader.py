"""Dynamically linked programs start as load_elf_binary starts them: the interpreter
from the sysroot mapped and entered, the auxiliary vector in create_elf_tables' order,
and ld.so then links the program through ordinary syscalls - the host's own binaries
and gcc's output run with native exit codes and output."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from cli_helpers import cli, one_line_error
from layout_helpers import run_native_norandom

from emu import Machine
from kernel_model.errors import ElfError, EmuError

AT_NAMES = {
    33: "SYSINFO_EHDR",
    51: "MINSIGSTKSZ",
    16: "HWCAP",
    6: "PAGESZ",
    17: "CLKTCK",
    3: "PHDR",
    4: "PHENT",
    5: "PHNUM",
    7: "BASE",
    8: "FLAGS",
    9: "ENTRY",
    11: "UID",
    12: "EUID",
    13: "GID",
    14: "EGID",
    23: "SECURE",
    25: "RANDOM",
    26: "HWCAP2",
    31: "EXECFN",
    15: "PLATFORM",
    27: "RSEQ_FEATURE_SIZE",
    28: "RSEQ_ALIGN",
}


def _run(argv, **kw):
    return Machine.from_elf(argv[0], argv=argv, **kw).run(timeout=60)


@pytest.mark.parametrize(
    "argv",
    [
        ["/bin/true"],
        ["/bin/false"],
        ["/bin/echo", "hi"],
        ["/bin/echo", "-n", "a", "b"],
        ["/bin/cat", "FILE"],
        ["/usr/bin/sort", "FILE"],
    ],
    ids=["true", "false", "echo", "echo-n", "cat", "sort"],
)
def test_host_binaries_exit_and_print_as_native(argv, tmp_path):
    data = tmp_path / "lines.txt"
    data.write_text("pear\napple\nfig\n")
    argv = [str(data) if a == "FILE" else a for a in argv]
    native = subprocess.run(argv, capture_output=True, timeout=60)
    r = _run(argv)
    assert (r.reason, r.exit_code, r.stdout, r.stderr) == ("exit", native.returncode, native.stdout, native.stderr), (
        r.describe()
    )


def test_a_gcc_built_dynamic_hello_prints_as_native(build_c):
    exe = build_c("hello.c", name="hello_dynamic")
    native = subprocess.run([exe, "one"], capture_output=True, timeout=60)
    r = _run([exe, "one"])
    assert (
        (r.exit_code, r.stdout, r.stderr)
        == (native.returncode, native.stdout, native.stderr)
        == (7, f"hello from {exe} argc=2\none\nheap ok\n".encode(), b"to stderr\n")
    ), r.describe()


@pytest.mark.parametrize("source", ["forks.c", "threads.c", "signals.c", "pipes.c"])
def test_dynamic_programs_that_fork_and_thread_run_as_native(build_c, source):
    """A fork copies the library mappings (file pages included); threads get their TLS
    from ld.so's static TLS block."""
    exe = build_c(source, "-pthread", name=source[:-2] + "_dynamic")
    native = subprocess.run([exe], capture_output=True, timeout=60)
    r = _run([exe])
    assert (r.exit_code, r.stdout) == (native.returncode, native.stdout), (
        f"expected {native.stdout!r}, got {r.stdout!r} ({r.describe()})"
    )


def test_the_run_starts_at_the_interpreters_entry():
    m = Machine.from_elf("/bin/true")
    interp = m.process.mapped_files[1]
    base = next(v.start for v in m.mem.vmas if v.file is interp)
    assert (interp.path, m.regs.rip, m.auxv[7]) == ("/lib64/ld-linux-x86-64.so.2", base + interp.elf.entry, base), (
        f"rip {m.regs.rip:#x}, AT_BASE {m.auxv[7]:#x}, interpreter at {base:#x}"
    )


def test_auxv_is_the_kernels_in_its_order(build_c):
    """Every entry the host kernel gives (keys in order), the same values for all but
    the CPU-dependent AT_HWCAP and AT_MINSIGSTKSZ."""
    exe = build_c("layout.c", name="layout_dynamic")
    env = ["A=1"]
    native = run_native_norandom([exe], env).stdout.decode().splitlines()
    r = Machine.from_elf(exe, argv=[exe], env=env, uid=0, gid=0).run(timeout=60)

    def auxv(lines):
        return [
            (AT_NAMES.get(int(k), k), v if int(k) not in (16, 51) else "cpu")
            for _, k, v in (ln.split() for ln in lines if ln.startswith("auxv "))
        ]

    assert auxv(r.stdout.decode().splitlines()) == auxv(native), (
        f"expected {auxv(native)}, got {auxv(r.stdout.decode().splitlines())}"
    )


def test_auxv_values_the_loader_chose():
    m = Machine.from_elf("/bin/true")
    exe = m.process.exe
    want = {
        3: 0x555555554000 + exe.elf.phoff,
        4: 56,
        5: exe.elf.phnum,
        6: 4096,
        8: 0,
        9: 0x555555554000 + exe.elf.entry,
        17: 100,
        23: 0,
        26: 2,
        27: 0x1C,
        28: 0x20,
        33: 0x7FFFF7FC8000,
        7: 0x7FFFF7FCA000,
    }
    got = {k: m.auxv[k] for k in want}
    assert got == want, {k: (hex(want[k]), hex(got[k])) for k in want if want[k] != got[k]}


def test_a_missing_interpreter_is_an_emu_error(build_c, tmp_path):
    data = bytearray(open(build_c("hello.c", name="hello_dynamic"), "rb").read())
    at = data.find(b"/lib64/ld-linux-x86-64.so.2\0")
    data[at : at + 7] = b"/nolib/"
    exe = tmp_path / "dyn"
    exe.write_bytes(bytes(data))
    with pytest.raises(ElfError) as info:
        Machine.from_elf(str(exe))
    assert (
        isinstance(info.value, EmuError)
        and str(info.value)
        == f"{exe}: cannot load its interpreter /nolib/ld-linux-x86-64.so.2: no such file or directory"
    )


def test_an_interpreter_that_is_not_elf_is_one_line(build_c, tmp_path):
    data = bytearray(open(build_c("hello.c", name="hello_dynamic"), "rb").read())
    interp = b"/lib64/ld-linux-x86-64.so.2\0"
    at = data.find(interp)
    fake = b"/etc/passwd"
    data[at : at + len(interp)] = fake + b"\0" * (len(interp) - len(fake))
    exe = tmp_path / "dyn"
    exe.write_bytes(bytes(data))
    line = one_line_error(cli("run", str(exe)))
    assert line == f"uprobe-emu: error: {exe}: cannot load its interpreter {fake.decode()}: not an ELF file"


def test_the_cli_runs_bin_true_with_the_host_as_sysroot():
    assert shutil.which("uprobe-emu"), "uprobe-emu is not installed"
    proc = cli("run", "/bin/true")
    assert proc.returncode == 0, proc.stderr


def test_the_cli_runs_bin_echo():
    proc = cli("run", "/bin/echo", "hi")
    assert (proc.returncode, proc.stdout) == (0, b"hi\n"), proc.stderr


def _native_fault_pc(argv: list[str]) -> int:
    """Where the native run faults: gdb runs it with randomization disabled (its default)."""
    out = subprocess.run(
        ["gdb", "-nx", "-batch", "-ex", "run", "-ex", 'printf "PC=%#lx\\n", $pc', "--args", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "SIGSEGV" in out, out
    return int(out.split("PC=")[1].split()[0], 16)


@pytest.mark.parametrize("flavour", ["-static", "-static-pie"])
def test_a_static_program_as_interpreter_is_mapped_and_entered_as_natively(build_c, tmp_path, flavour):
    """PT_INTERP naming a static executable: the kernel maps it (ET_EXEC at its own
    addresses, static-pie top-down below mmap_base) and enters it with the program's
    auxv; its glibc then faults at the same pc as natively."""
    interp = build_c("hello.c", flavour)
    exe = str(tmp_path / "via")
    subprocess.run(
        ["gcc", "-O1", f"-Wl,--dynamic-linker={interp}", "-o", exe, str(Path(__file__).parent / "c" / "layout.c")],
        check=True,
    )
    native_pc = _native_fault_pc([exe, "a"])
    r = Machine.from_elf(exe, argv=[exe, "a"]).run(timeout=60)
    assert (r.reason, r.signal, r.rip) == ("signal", 11, native_pc), (
        f"expected SIGSEGV at {native_pc:#x}, got {r.describe()}"
    )


def test_an_interpreter_too_big_for_the_memory_limit_is_one_line(tmp_path):
    """An interpreter whose last PT_LOAD asks for 64 TiB of bss: refused in one line (as
    execve fails with ENOMEM), nothing allocated on the host."""
    data = bytearray(Path("/lib64/ld-linux-x86-64.so.2").read_bytes())
    phoff, phnum = struct.unpack_from("<Q", data, 32)[0], struct.unpack_from("<H", data, 56)[0]
    loads = [phoff + 56 * i for i in range(phnum) if struct.unpack_from("<I", data, phoff + 56 * i)[0] == 1]
    struct.pack_into("<Q", data, loads[-1] + 40, 0x4000_0000_0000)  # p_memsz
    fat = tmp_path / "ld.so"
    fat.write_bytes(bytes(data))
    exe = str(tmp_path / "prog")
    subprocess.run(
        ["gcc", "-O1", f"-Wl,--dynamic-linker={fat}", "-o", exe, str(Path(__file__).parent / "c" / "hello.c")],
        check=True,
    )
    line = one_line_error(cli("run", exe))
    assert line.startswith(f"uprobe-emu: error: {exe}: cannot be loaded: ") and line.endswith("(see --max-memory)"), (
        line
    )
