"""``/proc/cpuinfo`` (arch/x86/kernel/cpu/proc.c: ``show_cpuinfo``) for the machine's
CPUs.

Every virtual CPU is the one the engine emulates, so each entry says what its CPUID
answers: vendor GenuineIntel, family 6, model 60, stepping 4 (leaf 1's EAX, 0x306c4),
the brand string "Intel Core Processor (Haswell)" (leaves 0x80000002-4), cpuid level
13 (leaf 0), 40 physical and 48 virtual address bits (leaf 0x80000008).  The topology is one package of
``nr_cpu_ids`` cores, one thread each:
what glibc, nproc and lscpu-like tools count (``processor``, ``physical id``,
``siblings``, ``core id``, ``cpu cores``, ``apicid``).  No frequency, bogomips, cache
or flags line is shown: the emulated CPU has no clock rate or caches to report.
"""

from __future__ import annotations

VENDOR, FAMILY, MODEL, STEPPING = "GenuineIntel", 6, 60, 4
MODEL_NAME = "Intel Core Processor (Haswell)"
CPUID_LEVEL = 13


def cpuinfo_text(nr_cpu_ids: int) -> str:
    """show_cpuinfo for CPUs 0..nr_cpu_ids-1, each entry ending in a blank line."""
    out = []
    for cpu in range(nr_cpu_ids):
        out.append(
            f"processor\t: {cpu}\n"
            f"vendor_id\t: {VENDOR}\n"
            f"cpu family\t: {FAMILY}\n"
            f"model\t\t: {MODEL}\n"
            f"model name\t: {MODEL_NAME}\n"
            f"stepping\t: {STEPPING}\n"
            f"physical id\t: 0\n"
            f"siblings\t: {nr_cpu_ids}\n"
            f"core id\t\t: {cpu}\n"
            f"cpu cores\t: {nr_cpu_ids}\n"
            f"apicid\t\t: {cpu}\n"
            f"initial apicid\t: {cpu}\n"
            f"fpu\t\t: yes\n"
            f"fpu_exception\t: yes\n"
            f"cpuid level\t: {CPUID_LEVEL}\n"
            f"wp\t\t: yes\n"
            f"address sizes\t: 40 bits physical, 48 bits virtual\n"
            f"\n"
        )
    return "".join(out)
