"""``uprobe-emu run -b OBJ``: a BPF object's programs on a command-line run, with ring
buffer records as they come and the maps at exit as ``bpftool map dump`` prints them."""

from __future__ import annotations

import subprocess

import pytest

ATTACH = ["--bpf-attach", "on_malloc=libc:malloc", "--bpf-attach", "on_free=libc:free"]


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["uprobe-emu", "run", *argv], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def obj_path(build_bpf):
    return build_bpf("malloc_sizes.bpf.c")


@pytest.fixture(scope="module")
def output(obj_path, malloc_target):
    p = _run("-b", obj_path, *ATTACH, malloc_target)
    assert p.returncode == 0, p.stderr
    return p.stderr.splitlines()


def test_each_ring_buffer_record_prints_as_it_comes(output):
    records = [line for line in output if line.startswith("ringbuf frees: ")]
    pids_seqs = [line.split(": ")[1].split()[:8] for line in records]
    assert pids_seqs == [["e8", "03", "00", "00", f"{i:02x}", "00", "00", "00"] for i in range(12)], records


def test_the_hash_map_dumps_at_exit(output):
    start = output.index("map sizes (hash):")
    keys = [line.strip() for line in output[start:] if '"key"' in line][:10]
    assert keys == [f'"key": {k},' for k in (2, 8, 3, 7, 13, 1, 17, 10, 4, 5)], output[start:]


def test_the_bss_dumps_with_its_variables(output):
    start = output.index("map malloc_s.bss (array):")
    assert output[start + 1 : start + 10] == [
        "[{",
        '        "value": {',
        '            ".bss": [{',
        '                    "free_seq": 12',
        "                }",
        "            ]",
        "        }",
        "    }",
        "]",
    ], output[start:]


def test_rodata_is_not_dumped(output):
    assert not any(".rodata" in line for line in output), output


def test_bpf_set_changes_a_rodata_variable(obj_path, malloc_target):
    p = _run("-b", obj_path, *ATTACH, "--bpf-set", "target_tgid=4242", malloc_target)
    assert p.returncode == 0, p.stderr
    assert "ringbuf" not in p.stderr and "[]" in p.stderr.splitlines()[1], p.stderr


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--bpf-attach", "on_malloc=libc:malloc"], "--bpf-attach and --bpf-set need a BPF object (-b OBJ)"),
        (["-b", "OBJ", "--bpf-attach", "nope=libc:malloc"], "--bpf-attach nope: no loaded BPF object has it"),
        (["-b", "OBJ", "--bpf-set", "target_tgid=abc"], "--bpf-set target_tgid: 'abc' is not an integer"),
        (["-b", "OBJ", "--bpf-set", "nothing=1"], "--bpf-set nothing: no loaded BPF object has it"),
        (["-b", "/nonexistent.bpf.o"], "/nonexistent.bpf.o: No such file or directory"),
        (["-b", "OBJ", "--bpf-attach", "on_malloc=libc:not_a_symbol"], "not_a_symbol"),
    ],
)
def test_bad_bpf_options_are_one_line_errors(obj_path, malloc_target, argv, message):
    p = _run(*[obj_path if a == "OBJ" else a for a in argv], malloc_target)
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr


def test_a_bpf_set_that_is_not_name_value_is_a_usage_error(obj_path, malloc_target):
    p = _run("-b", obj_path, "--bpf-set", "x", malloc_target)
    assert p.returncode == 2 and "expected NAME=VALUE, not 'x'" in p.stderr, p.stderr
