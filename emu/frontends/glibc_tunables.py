"""glibc's view of the CPU on both sides of ``diff``.

glibc picks the variant of each string function and of memmove (its IFUNCs) from the CPU
it finds at start-up: the features CPUID reports and the OS enables, the "preferred"
flags it derives from the CPU model, and the cache sizes.  The emulated CPU has no AVX,
so the model's glibc runs ``__strlen_sse2`` or ``__memmove_ssse3`` where the host's runs
``__strlen_evex``; a probe inside a string function then compares different code.

``ld.so --list-diagnostics`` prints what glibc found (``x86.cpu_features.*``), on the
host and in the model.  :func:`tunables_for` turns the difference into a
``GLIBC_TUNABLES`` value - ``glibc.cpu.hwcaps`` with ``-NAME`` for each feature the host
has and the model's CPU lacks and the preferred flags set as the model's are, and the
model's cache sizes and thresholds - that makes the host's glibc choose as the model's
does.  Set on the program itself (both sides, so the environments stay alike), it acts
before any IFUNC is resolved.  :func:`residue` says what the tunables could not align.
"""

from __future__ import annotations

import subprocess
from types import MappingProxyType

from emu.machine import Machine
from kernel_model.errors import EmuError

LDSO = "/lib64/ld-linux-x86-64.so.2"
_PREFIX = "x86.cpu_features."
_CPUID_REGS = ("eax", "ebx", "ecx", "edx")

# The features glibc.cpu.hwcaps can turn off (sysdeps/x86/cpu-tunables.c) whose absence
# changes an IFUNC choice, by where glibc keeps them: (CPUID index, register, bit) of
# ``cpu_features->features[index].active`` (sysdeps/x86/include/cpu-features.h:
# index 0 is leaf 1, 1 is leaf 7, 2 is leaf 0x80000001).
HWCAPS_FEATURES = MappingProxyType(
    {
        "SSSE3": (0, "ecx", 9),
        "FMA": (0, "ecx", 12),
        "SSE4_1": (0, "ecx", 19),
        "SSE4_2": (0, "ecx", 20),
        "MOVBE": (0, "ecx", 22),
        "POPCNT": (0, "ecx", 23),
        "XSAVE": (0, "ecx", 26),
        "OSXSAVE": (0, "ecx", 27),
        "AVX": (0, "ecx", 28),
        "CMOV": (0, "edx", 15),
        "BMI1": (1, "ebx", 3),
        "AVX2": (1, "ebx", 5),
        "BMI2": (1, "ebx", 8),
        "ERMS": (1, "ebx", 9),
        "RTM": (1, "ebx", 11),
        "AVX512F": (1, "ebx", 16),
        "AVX512DQ": (1, "ebx", 17),
        "AVX512CD": (1, "ebx", 28),
        "AVX512BW": (1, "ebx", 30),
        "AVX512VL": (1, "ebx", 31),
        "LZCNT": (2, "ecx", 5),
        "FMA4": (2, "ecx", 16),
    }
)
# cache sizes and thresholds glibc compares sizes with (memmove, memset), by their
# diagnostics name, and the tunable that sets each
CACHE_TUNABLES = MappingProxyType(
    {
        "data_cache_size": "glibc.cpu.x86_data_cache_size",
        "shared_cache_size": "glibc.cpu.x86_shared_cache_size",
        "non_temporal_threshold": "glibc.cpu.x86_non_temporal_threshold",
        "rep_movsb_threshold": "glibc.cpu.x86_rep_movsb_threshold",
        "rep_stosb_threshold": "glibc.cpu.x86_rep_stosb_threshold",
    }
)


def parse_diagnostics(text: str) -> dict[str, int]:
    """``{name: value}`` of the ``x86.cpu_features.*`` lines, the prefix dropped."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.startswith(_PREFIX):
            try:
                out[name[len(_PREFIX) :]] = int(value, 0)
            except ValueError:
                continue
    return out


def host_diagnostics(tunables: str | None = None) -> dict[str, int]:
    """What the host's glibc finds, with ``GLIBC_TUNABLES`` = ``tunables``."""
    env = {"GLIBC_TUNABLES": tunables} if tunables else {}
    try:
        p = subprocess.run([LDSO, "--list-diagnostics"], capture_output=True, text=True, env=env, timeout=30)
    except OSError as e:
        raise EmuError(f"cannot run {LDSO} --list-diagnostics: {e.strerror or e}") from None
    return parse_diagnostics(p.stdout)


def model_diagnostics(**machine_options: object) -> dict[str, int]:
    """What glibc finds on the emulated CPU: the same dynamic linker run in the model."""
    m = Machine.from_elf(LDSO, argv=[LDSO, "--list-diagnostics"], **machine_options)  # type: ignore[arg-type]
    m.run(max_insns=None, timeout=60)
    return parse_diagnostics(bytes(m.stdout).decode(errors="replace"))


def active(diag: dict[str, int], feature: str) -> bool:
    index, reg, bit = HWCAPS_FEATURES[feature]
    word = diag.get(f"features[{index:#x}].active[{_CPUID_REGS.index(reg):#x}]", 0)
    return bool(word >> bit & 1)


def _preferred(diag: dict[str, int]) -> dict[str, int]:
    return {k[len("preferred.") :]: v for k, v in diag.items() if k.startswith("preferred.")}


def tunables_for(host: dict[str, int], model: dict[str, int]) -> str:
    """The ``GLIBC_TUNABLES`` value under which the host's glibc sees the model's CPU
    (empty when they already agree)."""
    hwcaps = [f"-{name}" for name in HWCAPS_FEATURES if active(host, name) and not active(model, name)]
    model_pref, host_pref = _preferred(model), _preferred(host)
    hwcaps += [(name if value else f"-{name}") for name, value in model_pref.items() if host_pref.get(name) != value]
    parts = [f"glibc.cpu.hwcaps={','.join(hwcaps)}"] if hwcaps else []
    parts += [
        f"{tunable}={model[key]}"
        for key, tunable in CACHE_TUNABLES.items()
        if key in model and model[key] and host.get(key) != model[key]
    ]
    return ":".join(parts)


# preferred flags that only choose among variants a feature allows: moot without it
# (glibc cannot set Prefer_No_AVX512 through the tunables, and needs not once AVX512F is off)
_PREFERRED_NEEDS = MappingProxyType({"Prefer_No_AVX512": "AVX512F", "MathVec_Prefer_No_AVX512": "AVX512F"})


def residue(host: dict[str, int], model: dict[str, int]) -> list[str]:
    """What still differs between the host's glibc (with the tunables) and the model's:
    the features of :data:`HWCAPS_FEATURES`, the preferred flags that still matter, the
    cache values."""
    out = [name for name in HWCAPS_FEATURES if active(host, name) != active(model, name)]
    host_pref = _preferred(host)
    out += [
        f"preferred {name}"
        for name, value in _preferred(model).items()
        if host_pref.get(name) != value and not (name in _PREFERRED_NEEDS and not active(host, _PREFERRED_NEEDS[name]))
    ]
    out += [key for key in CACHE_TUNABLES if model.get(key) and host.get(key) != model.get(key)]
    return out


def align(**machine_options: object) -> tuple[str, list[str]]:
    """(the ``GLIBC_TUNABLES`` value for both sides of a diff, what it leaves different)."""
    model = model_diagnostics(**machine_options)
    if not model:
        raise EmuError(f"{LDSO} --list-diagnostics printed nothing in the model")
    tunables = tunables_for(host_diagnostics(), model)
    return tunables, residue(host_diagnostics(tunables), model)
