"""Signal numbers on the wire: the remote protocol carries gdb's own numbering (enum
gdb_signal, gdb/signals.def), not the host's; gdbserver converts with
gdb_signal_from_host / gdb_signal_to_host.  Linux x86_64 differs from gdb's numbers from
SIGBUS (7 here, 10 in gdb) on, and its real-time signals are gdb's REALTIME_32..64."""

from __future__ import annotations

GDB_SIGNAL_UNKNOWN = 143
# Linux x86_64 signal -> gdb_signal (1..31; SIGSTKFLT has no gdb name)
_TO_GDB = {
    1: 1,
    2: 2,
    3: 3,
    4: 4,
    5: 5,
    6: 6,
    7: 10,
    8: 8,
    9: 9,
    10: 30,
    11: 11,
    12: 31,
    13: 13,
    14: 14,
    15: 15,
    17: 20,
    18: 19,
    19: 17,
    20: 18,
    21: 21,
    22: 22,
    23: 16,
    24: 24,
    25: 25,
    26: 26,
    27: 27,
    28: 28,
    29: 23,
    30: 32,
    31: 12,
}
# SIGRTMIN (32) is GDB_SIGNAL_REALTIME_32 (77), 33 is REALTIME_33 (45), 34..63 are 46..75,
# 64 is REALTIME_64 (78)
_TO_GDB.update({32: 77, 33: 45, 64: 78, **{n: n + 12 for n in range(34, 64)}})
_TO_LINUX = {g: n for n, g in _TO_GDB.items()}


def gdb_signal(signo: int) -> int:
    """gdb_signal_from_host for a Linux x86_64 signal number."""
    return _TO_GDB.get(signo, GDB_SIGNAL_UNKNOWN)


def linux_signal(gdb_signo: int) -> int:
    """gdb_signal_to_host: the Linux number of a gdb signal (0 when Linux has none)."""
    return _TO_LINUX.get(gdb_signo, 0)
