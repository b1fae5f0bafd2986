"""diff tells the host's glibc the emulated CPU (``GLIBC_TUNABLES``, on both sides), so
glibc's IFUNCs pick the same string-function and memmove variants on the host as in the
model, and a probe on a variant compares the same code."""

from __future__ import annotations

import subprocess

import pytest
from cli_helpers import cli
from test_hostdiff import needs_tracefs, our_probes_left

from emu.frontends import glibc_tunables as g
from emu.machine import Machine

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
DIAG = """\
x86.cpu_features.basic.kind=0x1
x86.cpu_features.features[0x0].active[0x2]=0x10000200
x86.cpu_features.features[0x1].active[0x1]=0x20
x86.cpu_features.preferred.Fast_Unaligned_Copy=0x1
x86.cpu_features.shared_cache_size=0x100000
not a line
x86.cpu_features.bad=zz
"""


def test_diagnostics_are_parsed_into_numbers():
    d = g.parse_diagnostics(DIAG)
    assert d == {
        "basic.kind": 1,
        "features[0x0].active[0x2]": 0x10000200,
        "features[0x1].active[0x1]": 0x20,
        "preferred.Fast_Unaligned_Copy": 1,
        "shared_cache_size": 0x100000,
    }
    assert (g.active(d, "AVX"), g.active(d, "SSSE3"), g.active(d, "AVX2"), g.active(d, "ERMS")) == (
        True,
        True,
        True,
        False,
    )


def test_the_tunables_turn_off_what_the_model_lacks_and_copy_its_preferences_and_caches():
    host = g.parse_diagnostics(DIAG)
    model = {
        "features[0x0].active[0x2]": 0x200,
        "preferred.Fast_Unaligned_Copy": 0,
        "preferred.Prefer_ERMS": 1,
        "shared_cache_size": 0x200000,
    }
    assert g.tunables_for(host, model) == (
        "glibc.cpu.hwcaps=-AVX,-AVX2,-Fast_Unaligned_Copy,Prefer_ERMS:glibc.cpu.x86_shared_cache_size=2097152"
    )
    assert g.tunables_for(model, model) == ""


def variants(exe: str, env: dict | None = None) -> dict[str, str]:
    """{function: offset in libc of the variant it resolved to}, natively."""
    out = subprocess.run([exe], capture_output=True, text=True, check=True, env=env or {}).stdout
    return dict(line.split() for line in out.splitlines())


def model_variants(exe: str) -> dict[str, str]:
    m = Machine.from_elf(exe)
    assert m.run().exit_code == 0
    return dict(line.split() for line in bytes(m.stdout).decode().splitlines())


def test_with_the_tunables_the_host_picks_the_models_variants(build_c):
    exe = build_c("ifunc_variants.c")
    tunables, left = g.align()
    assert left == [], f"the tunables leave {left}"
    model = model_variants(exe)
    host = variants(exe, {"GLIBC_TUNABLES": tunables})
    assert host == model, f"host {host}, model {model}, GLIBC_TUNABLES={tunables}"


def test_without_them_a_cpu_with_more_features_picks_other_variants(build_c):
    exe = build_c("ifunc_variants.c")
    tunables, _ = g.align()
    host, model = variants(exe), model_variants(exe)
    if tunables:
        assert host != model, "the host's glibc needed tunables, yet picked the model's variants without them"
    else:
        assert host == model


def _variant_offsets(exe: str) -> tuple[str, str]:
    model = model_variants(exe)
    return model["strlen"], model["memmove"]


@needs_tracefs
def test_diff_with_probes_on_the_models_variants_agrees(build_c):
    exe = build_c("ifunc_variants.c")
    strlen, memmove = _variant_offsets(exe)
    p = cli("diff", "-e", f"p:v/strlen {LIBC}:{strlen}", "-e", f"p:v/memmove {LIBC}:{memmove}", exe, "calls", "20")
    out = p.stdout.decode()
    assert p.returncode == 0 and "glibc tunables as the model's CPU" in out, out + p.stderr.decode()
    assert our_probes_left() == []


@needs_tracefs
def test_diff_without_the_alignment_compares_other_code(build_c):
    exe = build_c("ifunc_variants.c")
    strlen, _ = _variant_offsets(exe)
    if not g.align()[0]:
        pytest.fail("this host's glibc already sees the model's CPU: nothing to show")
    p = cli("diff", "--glibc-tunables", "none", "-e", f"p:v/strlen {LIBC}:{strlen}", exe, "calls", "20")
    out = p.stdout.decode()
    assert p.returncode == 1 and "glibc as it finds each CPU" in out, out + p.stderr.decode()
    assert our_probes_left() == []


def test_a_tunables_value_tracefs_would_interpret_is_one_line():
    p = cli("diff", "--glibc-tunables", "a b", "-e", "uprobe:libc:malloc", "/bin/true")
    err = p.stderr.decode()
    assert p.returncode == 2 and len(err.splitlines()) == 1 and "--glibc-tunables" in err, err
