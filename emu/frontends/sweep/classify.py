"""Which divergences are the kernel's own, faithful behaviour.

Probing is not invisible everywhere on a real kernel either; those sites are reported
with their class, not hidden, and do not fail a sweep:

* ``pushf-tf``: a probed ``pushf`` is single-stepped out of line with TF set
  (``arch_uprobe_pre_xol`` sets X86_EFLAGS_TF), and the CPU pushes the flags image with
  TF; the kernel has no fixup for it (``default_post_xol_op`` fixes only rip/rsp), so the
  program sees TF (and a later ``popf`` of it traps).
* ``syscall-xol``: a probed ``syscall`` runs in the XOL slot: rcx gets the slot's next
  rip and r11 TF, and the instruction after it runs in the slot too (IRET delays the
  #DB by one instruction) - visible when that one depends on its address.
* ``xol-area-layout``: the first hit in a process maps the XOL area
  (``xol_add_vma``: ``get_unmapped_area(TASK_SIZE - PAGE_SIZE)``); where that hint is
  taken - a program without ASLR has its stack there - the page comes from the mmap
  area, and the program's next mmap lands a page lower.  The runs part at that mmap.
* ``nop5-redzone``: under the 6.18-7.1 optimizer an optimized nop5 becomes a ``call``
  into ``[uprobes-trampoline]`` (``uprobe_trampoline``), which pushes the return
  address into the red zone - confirmed by re-running the site with the optimizer off
  (``optimize=None``), where it is transparent.

Anything else is ``unclassified`` (an interaction of several probes included): the sweep
exits 1.
"""

from __future__ import annotations

PREFIXES = bytes([0x66, 0xF2, 0xF3, 0x2E, 0x3E, 0x26, 0x36, 0x64, 0x65])
FAITHFUL = ("pushf-tf", "syscall-xol", "xol-area-layout", "nop5-redzone")
UNCLASSIFIED = "unclassified"


def opcode_body(raw: bytes) -> bytes:
    """The bytes after legacy prefixes and a REX prefix."""
    body = raw.lstrip(PREFIXES)
    return body[1:] if body and 0x40 <= body[0] <= 0x4F else body


def is_pushf(raw: bytes) -> bool:
    return opcode_body(raw)[:1] == b"\x9c"


def is_syscall(raw: bytes) -> bool:
    return raw == b"\x0f\x05"


def is_nop5(site) -> bool:
    return len(site.raw) == 5 and site.text.split()[:1] == ["nop"]


def classify(site, profile, divergence=None, unoptimized_clean=None) -> str:
    """The class of a single site's divergence.  ``unoptimized_clean()`` re-runs the
    site with the optimizer off (asked only for a nop5 under the nop5 design)."""
    if divergence is not None and divergence.tag == "mmap-lower":
        return "xol-area-layout"
    if site.kind == "p" and is_pushf(site.raw):
        return "pushf-tf"
    if site.kind == "p" and is_syscall(site.raw):
        return "syscall-xol"
    if (
        site.kind == "p"
        and profile.optimize == "nop5"
        and is_nop5(site)
        and unoptimized_clean is not None
        and unoptimized_clean()
    ):
        return "nop5-redzone"
    return UNCLASSIFIED
