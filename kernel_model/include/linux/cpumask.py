"""CPU masks (include/linux/cpumask.h, lib/bitmap-str.c) for a machine of ``nr_cpu_ids``
CPUs, all possible, present and online from boot (no hotplug is modeled).

A mask is a Python int, bit ``i`` for CPU ``i``; what a guest reads or writes is the
kernel's ``unsigned long`` array, little-endian, ``cpumask_size()`` bytes long.
"""

from __future__ import annotations

from kernel_model.errors import InputError

NR_CPUS = 256  # CONFIG_NR_CPUS: the bound of Machine(cpus=...)
BITS_PER_LONG = 64


def check_nr_cpus(n) -> int:
    """The machine's CPU count: an integer 1..NR_CPUS (setup_nr_cpu_ids's bound)."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise InputError(f"cpus is a number of CPUs (1-{NR_CPUS}), not {n!r}")
    if not 1 <= n <= NR_CPUS:
        raise InputError(f"cpus must be 1-{NR_CPUS}, not {n}")
    return n


def parse_nr_cpus(text: str) -> int:
    """``--cpus N``: a decimal (or 0x..) CPU count, checked by :func:`check_nr_cpus`."""
    try:
        n = int(text, 0)
    except ValueError:
        raise InputError(f"cpus is a number of CPUs (1-{NR_CPUS}), not {text!r}") from None
    return check_nr_cpus(n)


def cpu_all_mask(nr_cpu_ids: int) -> int:
    """cpu_possible_mask == cpu_present_mask == cpu_online_mask == cpu_active_mask."""
    return (1 << nr_cpu_ids) - 1


def cpumask_size(nr_cpu_ids: int) -> int:
    """cpumask_size(): BITS_TO_LONGS(nr_cpu_ids) longs, in bytes."""
    return -(-nr_cpu_ids // BITS_PER_LONG) * (BITS_PER_LONG // 8)


def cpumask_first(mask: int) -> int:
    """The lowest CPU in ``mask`` (cpumask_first); -1 for an empty one."""
    return (mask & -mask).bit_length() - 1


def cpulist(mask: int) -> str:
    """``%*pbl``: the mask as ranges, "0", "0-3", "0,2-5" (sysfs's online, possible...)."""
    out, cpu = [], 0
    while mask >> cpu:
        if not mask >> cpu & 1:
            cpu += 1
            continue
        end = cpu
        while mask >> (end + 1) & 1:
            end += 1
        out.append(str(cpu) if end == cpu else f"{cpu}-{end}")
        cpu = end + 1
    return ",".join(out)


def cpumask_hex(mask: int, nbits: int) -> str:
    """``%*pb``: the mask in hex, 32-bit words separated by commas, the first word
    as many digits wide as its bits need ("1", "f", "3f,ffffffff")."""
    words = []
    for k in reversed(range(-(-nbits // 32))):
        width = -(-min(32, nbits - 32 * k) // 4)
        words.append(f"{mask >> 32 * k & 0xFFFFFFFF:0{width}x}")
    return ",".join(words)
