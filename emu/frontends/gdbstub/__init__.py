"""``uprobe-emu gdbserver``: the GDB remote serial protocol over TCP, so a real gdb can
attach to a guest running under the uprobes model.

:mod:`.packets` frames and decodes packets, :mod:`.registers` is the target description,
:mod:`.svr4` reads the dynamic linker's library list for ``qXfer:libraries-svr4``,
:mod:`.hostio` serves the guest's files for ``vFile:``, :mod:`.signals` maps signal
numbers to gdb's, :mod:`.stub` answers packets with the stepping core, :mod:`.cli` is
the command.
"""

from typing import TYPE_CHECKING

from emu.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from emu.frontends.gdbstub.args import add_cli
    from emu.frontends.gdbstub.cli import cmd_gdbserver
    from emu.frontends.gdbstub.packets import (
        PACKET_SIZE,
        FrameParser,
        GdbConnection,
        checksum,
        escape_binary,
        unescape_binary,
    )
    from emu.frontends.gdbstub.registers import REGISTERS, target_xml
    from emu.frontends.gdbstub.stub import GdbStub, serve_once
    from emu.frontends.gdbstub.svr4 import Svr4Libraries

__all__ = [
    "GdbStub",
    "Svr4Libraries",
    "escape_binary",
    "serve_once",
    "target_xml",
    "REGISTERS",
    "PACKET_SIZE",
    "FrameParser",
    "GdbConnection",
    "checksum",
    "unescape_binary",
    "add_cli",
    "cmd_gdbserver",
]

# Imported when first asked for (PEP 562): the command line imports this package's
# argument definitions without loading the command itself.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "add_cli": ".args",
        "cmd_gdbserver": ".cli",
        "PACKET_SIZE": ".packets",
        "FrameParser": ".packets",
        "GdbConnection": ".packets",
        "checksum": ".packets",
        "escape_binary": ".packets",
        "unescape_binary": ".packets",
        "REGISTERS": ".registers",
        "target_xml": ".registers",
        "GdbStub": ".stub",
        "serve_once": ".stub",
        "Svr4Libraries": ".svr4",
    },
)
