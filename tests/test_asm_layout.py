"""The built-in assembler's data always starts on a page of its own: keystone now and
then lays ``.align 4096`` out short, and assemble() then assembles again instead of
building an ELF whose data shares a page with the text (or failing)."""

from __future__ import annotations

import pytest

from emu import asm
from kernel_model.errors import InputError

SOURCE = """
_start:
    lea rax, [rip + value]
    mov rax, qword ptr [rax]
    ret
.data
value: .quad 7
"""


class ShortAlignKs:
    """keystone's Ks, whose first ``short`` runs put the data 16 bytes off a page."""

    def __init__(self, real, short: int):
        self.real, self.short, self.runs = real, short, 0

    def __call__(self, *args):
        ks, owner = self.real(*args), self

        class Wrapped:
            def asm(self, text, base):
                owner.runs += 1
                if owner.runs <= owner.short:
                    text = text.replace(".align 4096", ".align 4096\n.skip 16")
                return ks.asm(text, base)

        return Wrapped()


@pytest.fixture
def short_align(monkeypatch):
    def install(short):
        fake = ShortAlignKs(asm.Ks, short)
        monkeypatch.setattr(asm, "Ks", fake)
        return fake

    return install


def test_a_short_alignment_is_assembled_again(short_align):
    fake = short_align(1)
    _blob, text_len, labels = asm.assemble(SOURCE)
    assert labels["value"][0] % 4096 == 0, f"data at {labels['value'][0]:#x}"
    assert fake.runs == 2, f"expected one retry, got {fake.runs} runs"


def test_a_layout_keystone_never_gets_right_is_one_clear_error(short_align):
    short_align(asm._ASM_ATTEMPTS)
    with pytest.raises(InputError, match="not on a page boundary"):
        asm.asm_to_elf(SOURCE)
