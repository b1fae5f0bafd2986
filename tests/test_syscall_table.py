"""The documentation's syscall table lists exactly the syscalls the machine models.

The page (``reference/syscalls.md``) is generated from the syscall registry when the
site is built (``tools/gen_docs.py``); the machine's table is built from the same
registry. A syscall added to or removed from the model without the page following
fails here, as does one listed twice.
"""

from __future__ import annotations

import importlib.util
import re
from collections import Counter
from pathlib import Path

from emu import Machine
from kernel_model.arch.x86.entry.syscall_64 import SYSCALL_NAMES

GEN_DOCS = Path(__file__).resolve().parent.parent / "tools" / "gen_docs.py"


def gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", GEN_DOCS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def page_syscalls() -> list[str]:
    """Every backticked name in the second column of the page's table, in order."""
    names = []
    for line in gen_docs().render_syscalls().splitlines():
        cells = line.split("|")
        if len(cells) >= 4 and not set(cells[1].strip()) <= set("-") and cells[1].strip() != "nr":
            names += re.findall(r"`([a-z0-9_]+)`", cells[2])
    return names


def modeled_syscalls() -> set[str]:
    return {SYSCALL_NAMES[nr] for nr in Machine(kernel="latest").syscalls.table}


def test_the_page_lists_every_modeled_syscall_and_nothing_else():
    listed, modeled = set(page_syscalls()), modeled_syscalls()
    assert listed == modeled, (
        f"the syscall page is wrong: modeled but not listed "
        f"{sorted(modeled - listed)}, listed but not modeled {sorted(listed - modeled)}"
    )


def test_the_page_lists_each_syscall_once():
    twice = sorted(n for n, k in Counter(page_syscalls()).items() if k > 1)
    assert twice == [], f"listed in more than one place: {twice}"
