"""Kept for ``emu.cli:main`` users: the command line lives in :mod:`emu.frontends.cli`."""

from emu.frontends.cli import main

__all__ = ["main"]
