"""The syscall registry (``@syscall`` marks collected by
``kernel_model/arch/x86/entry/syscall_table.py``) is the one source of the machine's
table, of the documentation's syscall table and of the message naming an unmodeled
syscall."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from emu import Machine
from kernel_model.arch.x86.entry.syscall_64 import SYSCALL_NAMES
from kernel_model.arch.x86.entry.syscall_table import REGISTRY, UPROBES_SYSCALLS, enosys_detail, render_markdown

GEN_DOCS = Path(__file__).resolve().parent.parent / "tools" / "gen_docs.py"


def test_the_docs_table_is_the_rendered_registry():
    spec = importlib.util.spec_from_file_location("gen_docs", GEN_DOCS)
    gen_docs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_docs)
    page = gen_docs.render_syscalls()
    assert page.endswith(render_markdown()), "the syscall page does not end with the registry's table"


def test_the_machine_table_is_the_registry():
    """Every registered syscall and nothing else (uretprobe and uprobe on the profiles
    that have them)."""
    table = Machine(kernel="latest").syscalls.table
    assert set(table) == set(REGISTRY)
    older = Machine(kernel="6.10").syscalls.table
    assert set(older) == set(REGISTRY) - {e.nr for e in UPROBES_SYSCALLS}


def test_every_entry_is_named_as_the_abi_names_it():
    for nr, entry in REGISTRY.items():
        assert SYSCALL_NAMES[nr] == entry.name
        assert entry.sysdef.status in ("supported", "partial")
        if entry.sysdef.partial is not None:
            assert entry.sysdef.partial.strip() and "\n" not in entry.sysdef.partial


@pytest.mark.parametrize("nr, named", [(442, "442 (mount_setattr)"), (1000, "1000"), (165, "165 (mount)")])
def test_the_enosys_message_names_an_unregistered_syscall_as_not_modeled(nr, named):
    assert nr not in REGISTRY
    assert enosys_detail(nr, 3) == f"last syscall {named} is not modeled: ENOSYS, 3 times"


def test_the_enosys_message_of_a_profile_syscall_names_the_profiles():
    assert enosys_detail(335, 1) == (
        "last syscall 335 (uretprobe) is not modeled by this kernel profile (only by 6.11 and later): ENOSYS, 1 times"
    )


def test_a_run_spinning_on_an_unmodeled_syscall_says_what_the_registry_says():
    m = Machine.from_asm("_start:\nloop:\n    mov eax, 442\n    syscall\n    jmp loop\n")
    r = m.run(max_insns=30_000)
    calls = m.counters.unknown_syscalls["442:mount_setattr"]
    assert r.detail == enosys_detail(442, calls)
