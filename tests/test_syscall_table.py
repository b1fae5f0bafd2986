"""README.md's "Syscall table" lists exactly the syscalls the machine models.

The machine's table is built from the ``sys_<name>`` methods of ``kernel_model.kernel.syscalls.Syscalls``
(and its mixins) plus what the kernel model registers (uretprobe, uprobe); a syscall
added or removed there without the README following fails here.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from emu import Machine
from kernel_model.arch.x86.entry.syscall_64 import SYSCALL_NAMES

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_syscalls() -> list[str]:
    """Every backticked name in the second column of the section's table, in order."""
    text = README.read_text()
    start = text.index("\n## Syscall table\n")
    end = text.index("\n## ", start + 1)
    names = []
    for line in text[start:end].splitlines():
        cells = line.split("|")
        if len(cells) >= 4 and not set(cells[1].strip()) <= set("-") and cells[1].strip() != "group":
            names += re.findall(r"`([a-z0-9_]+)`", cells[2])
    return names


def modeled_syscalls() -> set[str]:
    return {SYSCALL_NAMES[nr] for nr in Machine(kernel="latest").syscalls.table}


def test_readme_lists_every_modeled_syscall_and_nothing_else():
    listed, modeled = set(readme_syscalls()), modeled_syscalls()
    assert listed == modeled, (f"README's syscall table is stale: modeled but not listed "
                               f"{sorted(modeled - listed)}, listed but not modeled {sorted(listed - modeled)}")


def test_readme_lists_each_syscall_once():
    twice = sorted(n for n, k in Counter(readme_syscalls()).items() if k > 1)
    assert twice == [], f"listed in more than one place: {twice}"

