"""gdb's small expression subset for ``*EXPR`` locations, ``p`` and ``x``: ``$reg``,
numbers and symbols joined by ``+`` and ``-``, typed the way gdb types them."""

from __future__ import annotations

from emu.debug.format import register_value
from emu.debug.stops import StepperError
from kernel_model.errors import SymbolError

_MASK = 0xFFFFFFFFFFFFFFFF


def evaluate(stepper, expr: str) -> tuple[int, str]:
    """(value, gdb type kind) of ``term (+|- term)*``."""
    text = expr.strip()
    if not text:
        raise StepperError("Argument required (expression to compute).")
    terms, ops, cur = [], ["+"], ""
    depth = 0
    for ch in text:
        if ch in "+-" and cur.strip() and depth == 0:
            terms.append(cur.strip())
            ops.append(ch)
            cur = ""
        else:
            cur += ch
    terms.append(cur.strip())
    total, kinds = 0, []
    for op, term in zip(ops, terms):
        neg = False
        while term.startswith("-"):
            neg, term = not neg, term[1:].strip()
        value, k = _term(stepper, term)
        if neg:
            value = -value
        kinds.append(k)
        total = total + value if op == "+" else total - value
    # gdb's arithmetic: a pointer keeps its type, else the widest integer wins
    kind = next((k for k in kinds if k.endswith("_ptr")), None)
    if kind is None:
        kind = (
            kinds[0]
            if len(kinds) == 1
            else f"int{max(int(k[3:]) for k in kinds if k.startswith('int'))}"
            if all(k.startswith("int") for k in kinds)
            else "int64"
        )
    return total & _MASK, kind


def _term(stepper, term: str) -> tuple[int, str]:
    if not term:
        raise StepperError("A syntax error in expression.")
    if term.startswith("(") and term.endswith(")"):
        return evaluate(stepper, term[1:-1])
    if term.startswith("$"):
        regs = stepper.regs()
        value, kind = register_value(term[1:], regs)
        if kind is None:
            raise StepperError(f"Invalid register `{term[1:]}'")
        return value, kind
    try:
        value = int(term, 0)
    except ValueError:
        pass
    else:  # gdb types a literal as int when it fits, else long
        return value, "int32" if value < 1 << 31 else "int64"

    name = term[1:] if term.startswith("&") else term
    try:
        return stepper.machine.resolve(name), "code_ptr"
    except SymbolError:
        pass
    try:  # a shared library's symbol, or NAME@plt, as gdb finds them
        return stepper.resolve(name), "code_ptr"
    except StepperError:
        raise StepperError(f'No symbol "{name}" in current context.') from None
