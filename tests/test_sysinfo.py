"""sysinfo(2): the modeled machine's memory (``Machine(mem_total=...)``, ``--mem-total``,
default 4 GiB), no swap, idle load, uptime on the virtual clock; glibc's
sysconf(_SC_PHYS_PAGES) and the qsort algorithm it selects follow from it."""

from __future__ import annotations

import struct
import subprocess

import pytest
from cli_helpers import cli, one_line_error

from emu.machine import Machine
from kernel_model.errors import InputError
from kernel_model.kernel.syscalls import DEFAULT_MEM_TOTAL


def fields(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines()[1:]:
        for item in line.split():
            k, v = item.split("=")
            out[k] = v
    return out


@pytest.fixture(scope="module")
def sysinfo_exe(build_c):
    return build_c("sysinfo.c", "-static")


def test_default_memory_is_documented_4_gib():
    assert DEFAULT_MEM_TOTAL == 4 << 30


@pytest.mark.parametrize("mem_total", [None, 1 << 30, (3 << 30) + 8192])
def test_phys_pages_is_mem_total_over_the_page_size(sysinfo_exe, mem_total):
    kw = {} if mem_total is None else {"mem_total": mem_total}
    r = Machine.from_elf(sysinfo_exe, **kw).run()
    f = fields(r.stdout.decode())
    want = mem_total or DEFAULT_MEM_TOTAL
    assert f["totalram"] == str(want), f
    assert f["phys_pages"] == str(want // 4096), f"sysconf(_SC_PHYS_PAGES): want {want // 4096}, got {f}"


def test_fields_in_the_kernels_struct_sysinfo_layout(sysinfo_exe):
    """glibc reads the kernel's struct sysinfo (uapi linux/sysinfo.h): every field lands
    where the guest's compiler put it."""
    m = Machine.from_elf(sysinfo_exe, mem_total=1 << 30)
    r = m.run()
    f = fields(r.stdout.decode())
    mapped = sum(v.size for v in m.mem.vmas)
    assert f == {
        "uptime": "7",
        "loads": "0,0,0",  # 7 s of nanosleep on the virtual clock
        "totalram": str(1 << 30),
        "freeram": str((1 << 30) - mapped),
        "sharedram": "0",
        "bufferram": "0",
        "totalswap": "0",
        "freeswap": "0",
        "procs": "1",
        "totalhigh": "0",
        "freehigh": "0",
        "mem_unit": "1",
        "phys_pages": str((1 << 30) // 4096),
        "avphys_pages": str(((1 << 30) - mapped) // 4096),
    }


def test_sysinfo_writes_exactly_112_bytes():
    """sizeof(struct sysinfo) on x86_64 is 112: the byte after it is untouched."""
    m = Machine.from_asm(f"""
_start:
    lea rdi, [rip + buf]
    mov eax, 99
    syscall
    mov edi, eax
    mov eax, 60
    syscall
.data
buf:
    .byte {", ".join(["0xaa"] * 120)}
""")
    r = m.run()
    assert r.exit_code == 0
    buf = m.mem.read(m.resolve("buf"), 120)
    assert buf[112:] == b"\xaa" * 8, buf[112:].hex()
    assert struct.unpack_from("<I", buf, 104)[0] == 1, "mem_unit at offset 104"
    assert struct.unpack_from("<Q", buf, 32)[0] == DEFAULT_MEM_TOTAL, "totalram at offset 32"
    assert struct.unpack_from("<H", buf, 80)[0] == 1, "procs at offset 80"


def test_qsort_makes_the_native_number_of_comparisons(build_c):
    exe = build_c("qsort_count.c", "-static")
    native = subprocess.run([exe], capture_output=True, timeout=60).stdout
    model = Machine.from_elf(exe).run().stdout
    assert model == native, f"native {native!r}, model {model!r}"


def test_cli_mem_total_option(sysinfo_exe):
    p = cli("run", "--mem-total", "512M", sysinfo_exe)
    assert p.returncode == 0, p.stderr
    assert fields(p.stdout.decode())["phys_pages"] == str((512 << 20) // 4096)


@pytest.mark.parametrize("bad", ["lots", "12"])
def test_cli_mem_total_rejects_bad_sizes(bad):
    assert "--mem-total" in one_line_error(cli("run", "--mem-total", bad, "guest:hello"))


def test_api_mem_total_rejects_bad_sizes():
    with pytest.raises(InputError, match="mem_total"):
        Machine.from_guest("hello", mem_total=0)
