"""The uprobes data structures shared by the kernel-model modules, as
``include/linux/uprobes.h`` (and the private structs of kernel/events/uprobes.c that
several of our modules need) holds them: :class:`Uprobe`, :class:`UprobeConsumer`,
:class:`UprobeTask` (with ``struct arch_uprobe_task``), :class:`ReturnInstance`,
:class:`XolArea`, the per-mm state and the handler return codes.

``uprobes``, ``uretprobes``, ``optimize``, ``fork`` and ``trace_events`` import these
from here, so no module needs another's private names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernel_model.arch.x86.kernel.uprobes import UPROBE_XOL_SLOT_BYTES
from kernel_model.arch.x86.lib.insn import ArchUprobe
from kernel_model.mm.mm_types import PAGE_SIZE, MappedFile

if TYPE_CHECKING:
    from kernel_model.kernel.task import Process, Task

UPROBE_HANDLER_REMOVE = 1
UPROBE_HANDLER_IGNORE = 2
UINSNS_PER_PAGE = PAGE_SIZE // UPROBE_XOL_SLOT_BYTES  # 32 slots, slot 0 reserved
# enum uprobe_task_state: UTASK_SSTEP while the out-of-line step runs; the #DB that ends
# it makes it UTASK_SSTEP_ACK (uprobe_post_sstep_notifier), a fatal signal or a trap of
# the slot instruction UTASK_SSTEP_TRAPPED (uprobe_deny_signal); handle_singlestep then
# finishes (post_xol) or aborts (abort_xol) the step
UTASK_RUNNING, UTASK_SSTEP = "running", "sstep"
UTASK_SSTEP_ACK, UTASK_SSTEP_TRAPPED = "sstep_ack", "sstep_trapped"
MAX_URETPROBE_DEPTH = 64

# ----------------------------------------------------------------------------- objects


@dataclass(eq=False)
class UprobeConsumer:
    """``struct uprobe_consumer``: callbacks plus an id.

    ``handler(ctx)`` runs at the entry hit; returning ``UPROBE_HANDLER_REMOVE`` asks to
    remove the breakpoint from this process, ``UPROBE_HANDLER_IGNORE`` skips this
    consumer's return handler for this hit.  ``ret_handler(ctx)`` runs at return with
    ``ctx.func``.  ``filter(process) -> bool`` says which processes it wants.
    A consumer with both callbacks is a *session* consumer (shared ``ctx.cookie``).
    """

    handler: Callable[[UprobeContext], int | None] | None = None
    ret_handler: Callable[[UprobeContext], int | None] | None = None
    filter: Callable[[Process], bool] | None = None
    id: int = 0
    name: str = ""
    uprobe: Uprobe | None = None
    is_trace: bool = False  # a tracefs/perf consumer (needs the args buffer)
    hits: int = 0
    enabled: bool = True
    # the UprobeContext handler_chain hands this consumer, made at its first hit and
    # reused after (valid during a callback only)
    ctx: UprobeContext | None = field(default=None, compare=False, repr=False)
    ret_ctx: UprobeContext | None = field(default=None, compare=False, repr=False)  # handle_uretprobe_chain's
    # a handler with the same effect, specialised by its owner for the common case (a
    # trace event's dispatcher for a program-only event); None: ``handler`` itself
    fast_handler: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    fast_ret_handler: Callable[..., Any] | None = field(default=None, compare=False, repr=False)  # for ret_handler

    @property
    def is_session(self) -> bool:
        return self.handler is not None and self.ret_handler is not None


@dataclass(eq=False)
class Uprobe:
    """``struct uprobe``: keyed by (file, offset)."""

    file: MappedFile
    offset: int
    ref_ctr_offset: int = 0
    consumers: list[UprobeConsumer] = field(default_factory=list)  # newest first
    arch: ArchUprobe | None = None  # set once: UPROBE_COPY_INSN
    optimize_fail: bool = False  # ARCH_UPROBE_FLAG_OPTIMIZE_FAIL
    hits: int = 0
    # handler_chain specialised for the consumers as they are (Uprobes.specialize_chain);
    # None: made again at the next hit (the consumers changed)
    chain: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    # handle_uretprobe_chain specialised the same way (Uretprobes.specialize_ret_chain),
    # cleared with ``chain``
    ret_chain: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    # may a hit take a breakpoint fast path (uprobes_fast.swbp_fast_path_qualifies)?
    # decided with ``chain``
    fast_ok: bool = field(default=False, compare=False, repr=False)

    @property
    def can_optimize(self) -> bool:
        """ARCH_UPROBE_FLAG_CAN_OPTIMIZE (set by the analysis)."""
        return self.arch is not None and self.arch.can_optimize

    @property
    def key(self):
        return (self.file, self.offset)

    def __repr__(self):
        return f"Uprobe({self.file.path}:{self.offset:#x}, {len(self.consumers)} consumer(s))"


@dataclass
class ArchUprobeTask:
    """``struct arch_uprobe_task``."""

    saved_scratch_register: int = 0
    saved_tf: bool = False
    # the task's last trap (``thread.trap_nr``; the model's ``Task.thread_fault``) when
    # the step began: arch_uprobe_xol_was_trapped() asks whether a trap came since
    saved_trap_nr: tuple[int, int, int] | None = None


@dataclass
class UprobeTask:
    """``struct uprobe_task``: per-thread uprobes state."""

    state: str = UTASK_RUNNING
    active_uprobe: Uprobe | None = None
    vaddr: int = 0
    xol_vaddr: int = 0
    xol_slot: int = -1
    autask: ArchUprobeTask = field(default_factory=ArchUprobeTask)
    return_instances: list = field(default_factory=list)  # top of stack = end of list
    pending_sstep: tuple | None = None  # (uprobe, vaddr) waiting for a slot
    # uprobe_deny_signal held a signal back during the step: handle_singlestep sets
    # TIF_SIGPENDING again (``utask->signal_denied``; recalc_sigpending() before 6.15)
    signal_denied: bool = False
    # TIF_SIGPENDING as uprobe_deny_signal left it: False while it is cleared (the
    # pending signals wait), True again once a new signal is sent to the task
    # (signal_wake_up) or the step ends
    sigpending: bool = True
    depth: int = 0
    ri_pool: list = field(default_factory=list)
    ri_array: list | None = None


@dataclass
class XolArea:
    """The ``[uprobes]`` page: slot 0 holds the uretprobe trampoline; threads that find
    no free slot sleep until one is freed (xol_get_insn_slot / xol_free_insn_slot)."""

    vaddr: int
    nslots: int = UINSNS_PER_PAGE
    slots: list[bool] = None  # type: ignore[assignment]  # made by __post_init__
    slot_bytes: dict[int, bytes] = field(default_factory=dict)  # slot -> bytes last copied
    waiters: list[Task] = field(default_factory=list)  # tasks sleeping for a slot

    def __post_init__(self) -> None:
        if self.slots is None:
            self.slots = [True] + [False] * (self.nslots - 1)

    def get_slot(self) -> int | None:
        for i, used in enumerate(self.slots):
            if not used:
                self.slots[i] = True
                return i
        return None

    def free_slot(self, i: int) -> None:
        self.slots[i] = False


@dataclass
class MmUprobes:
    """Per-mm uprobes state."""

    has_uprobes: bool = False  # MMF_HAS_UPROBES
    recalc: bool = False  # MMF_RECALC_UPROBES
    xol_area: XolArea | None = None
    trampolines: list = field(default_factory=list)  # [uprobes-trampoline] vmas (optimized)
    # find_active_uprobe's answers by address, valid while neither the VMAs (vma_gen)
    # nor the uprobes tree (tree_gen) changed
    hit_cache: dict = field(default_factory=dict)
    hit_vma_gen: int = -1
    hit_tree_gen: int = -1


class UprobeContext:
    """What a consumer callback sees: the task's registers (mutable: changes reach the
    guest), the address, the machine, and the session cookie.

    ``regs`` may be fetched at the first access (``regs_loader``): a hit taken by a
    breakpoint fast path reads no register unless a consumer asks."""

    __slots__ = (
        "machine",
        "task",
        "_regs",
        "regs_loader",
        "uprobe",
        "consumer",
        "vaddr",
        "func",
        "cookie",
        "is_return",
    )

    def __init__(self, machine, task, regs, uprobe, consumer, vaddr, func=None, cookie=0, is_return=False):
        self.machine, self.task, self._regs, self.uprobe = machine, task, regs, uprobe
        self.consumer, self.vaddr, self.func, self.cookie = consumer, vaddr, func, cookie
        self.is_return = is_return
        self.regs_loader = None

    @property
    def regs(self):
        regs = self._regs
        if regs is None:
            regs = self._regs = self.regs_loader()
        return regs

    @regs.setter
    def regs(self, value) -> None:
        self._regs = value

    @property
    def mem(self):
        return self.machine.mem


@dataclass(eq=False)
class ReturnInstance:
    """``struct return_instance``."""

    uprobe: Uprobe | None = None
    func: int = 0
    stack: int = 0
    orig_ret_vaddr: int = 0
    chained: bool = False
    consumers: list = field(default_factory=list)  # [(consumer id, cookie)]
    extra_bytes: int = 0  # size of the extra_consumers array currently allocated
    scratch: bool = False  # a stand-in holding no allocator memory (see alloc_return_instance)
    lease: int | None = None  # its hold on the uprobe when recorded: -1 a reference, else the SRCU index

    def reset(self) -> None:
        """``ri_pool_push``: forget the consumers (``cons_cnt = 0``), keep the memory."""
        self.uprobe, self.consumers, self.lease = None, [], None
