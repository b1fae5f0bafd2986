"""mremap (kernel_model/mm/mmap.py) as Linux answers it: grow in place, ENOMEM against a
neighbour, shrink, moves (MAYMOVE, FIXED, DONTUNMAP) that keep the bytes and a file
mapping's offset, the parameter and VMA errnos, and glibc's realloc of an mmap'ed
chunk.  The host runs the program first: its output is the spec."""

from __future__ import annotations

import subprocess

import pytest

from emu import Machine


@pytest.fixture(scope="module")
def outputs(build_c, tmp_path_factory):
    exe = build_c("mremap.c", name="mremap_dynamic")
    data = tmp_path_factory.mktemp("mremap") / "data.bin"
    data.write_bytes(bytes((i * 7 + 3) & 0xFF for i in range(0x3800)))
    native = subprocess.run([exe, str(data)], capture_output=True, timeout=60)
    assert native.returncode == 0, native.stderr
    r = Machine.from_elf(exe, argv=[exe, str(data)]).run(timeout=60)
    assert (r.reason, r.exit_code) == ("exit", 0), r.describe()
    return native.stdout.decode().splitlines(), r.stdout.decode().splitlines()


CASES = [
    c + ":"
    for c in (
        "grow in place",
        "grow into the wall",
        "shrink",
        "fixed move",
        "contents",
        "unaligned",
        "bad flags",
        "fixed without maymove",
        "zero new length",
        "unmapped",
        "spans two mappings",
        "overlapping target",
        "file grow in place",
        "file move",
        "file bytes",
        "realloc keeps the bytes",
    )
] + ["dontunmap: 0x", "dontunmap: new="]


@pytest.mark.parametrize("case", CASES)
def test_mremap_case_answers_as_the_kernel(outputs, case):
    native, model = outputs
    want = [ln for ln in native if ln.startswith(case)]
    got = [ln for ln in model if ln.startswith(case)]
    assert want and got == want, f"expected {want}, got {got}"


@pytest.mark.parametrize("section", ["maps anonymous:", "maps file grown in place:", "maps file:"])
def test_maps_after_mremap(outputs, section):
    """The moved and grown VMAs as /proc/self/maps shows them (a file mapping grown in
    place is one VMA with its offset)."""
    native, model = outputs

    def block(lines):
        i = lines.index(section)
        j = next((k for k in range(i + 1, len(lines)) if not lines[k][:1].isdigit()), len(lines))
        return lines[i:j]

    assert block(model) == block(native), "\n".join(["expected:", *block(native), "got:", *block(model)])


def test_a_special_mapping_cannot_grow():
    """[vdso] is VM_DONTEXPAND: growing it is EFAULT (moving it is allowed)."""
    m = Machine.from_elf("/bin/true")
    vdso = next(v for v in m.mem.vmas if v.name == "[vdso]")
    assert m.syscalls.sys_mremap(m.task, None, vdso.start, vdso.size, vdso.size * 2, 1, 0) == -14
