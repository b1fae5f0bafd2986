"""Names a module re-exports from elsewhere, imported the first time they are asked for.

A front-end package re-exports its public names from its submodules, and ``emu.inspect``
re-exports a few of the kernel model's.  Importing them all eagerly would make
``uprobe-emu --help`` load the machine, Unicorn, Capstone and every other front end just
to build the argument parser.  :func:`lazy_exports` gives such a module the module-level
``__getattr__`` and ``__dir__`` of PEP 562: ``from emu.frontends.trace import Tracer``
imports ``emu.frontends.trace.tracer`` then, and not before.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType


def lazy_exports(module: str, exports: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``module``, which re-exports each name of
    ``exports`` from the module it maps to: a full dotted name, or ``.sub`` for a
    submodule of ``module``."""
    where = MappingProxyType(
        {name: f"{module}{source}" if source.startswith(".") else source for name, source in exports.items()}
    )

    def __getattr__(name: str) -> object:
        source = where.get(name)
        if source is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return getattr(importlib.import_module(source), name)

    def __dir__() -> list[str]:
        return sorted(where)

    return __getattr__, __dir__
