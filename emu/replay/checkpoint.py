"""Reverse execution: checkpoints of the whole machine and deterministic replay.

The machine is deterministic (a seeded scheduler, a virtual clock, pipes for stdio), so
any earlier point of a run is reached again by restoring a checkpoint taken before it
and executing forward.  A :class:`Recorder` attached to a machine drives every
``run()`` and ``step()`` (the machine hands them over), counts every instruction
(Unicorn's native counter: ``Machine.icount`` is the clock), takes a checkpoint at the
first operation boundary after every ``interval`` instructions and logs the operations
between them (``step``; ``run`` of N instructions), so that :meth:`Recorder.seek`
can restore the nearest earlier checkpoint and re-issue them up to any instruction.

A :class:`Checkpoint` holds

* the model state: every mutable object of the project reachable from the machine
  (tasks, processes, the kernel model's uprobes, utasks, return instances, counters,
  the scheduler's generator, the clock, fds, pipes, signals...), pickled in one pass.
  Restoring writes the saved attributes back into the *same* Python objects, so a
  front end's references (a Task, the Kernel, a Memory) stay valid.  Immutable or
  external objects (ELF images, page-cache files, Unicorn handles, the event bus and
  its subscribers, host file objects) are referenced, not copied.  Each class says
  what is not its rolled-back state: ``checkpoint_by_reference = True`` (referenced,
  never copied) and ``checkpoint_keep`` (attributes of the front ends or the host,
  left as they are by a restore);
* each address space's memory: the leaf page-table flags and the bytes of every
  page that has a frame, compared page by page with the previous checkpoint so that
  an unchanged page is shared, not stored again (no per-instruction hook is ever
  installed);
* the CPU: off-CPU tasks keep their Unicorn context objects (immutable), the task on
  the CPU gets a fresh ``context_save``.

What already left the machine is not repeated by a replay: guest stdout/stderr passed
through to the host is cut at a high-water mark (bytes per stream), and events are
delivered to subscribers only past the point (instruction, index) that the furthest
run reached.  The captured ``machine.stdout``/``stderr`` are restored with the
checkpoint and grow again exactly as the first time.

Memory is bounded: at most ``max_checkpoints`` are kept; past that every other one in
the older half is dropped (the first is always kept), so the spacing grows with the
history while recent history stays dense.  :meth:`Recorder.stats` reports what they
hold.

Limits (documented, not modeled): host files a guest wrote under a granted directory
are not rolled back; a register or memory write made from outside (a debugger's
``set``) or a probe registered between checkpoints is not part of the replayed log.
"""

from __future__ import annotations

import io
import os
import pickle
import time
import types
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from emu.engine.memory import Memory
from emu.engine.quantum import instruction_counter_available
from emu.engine.regfile import RegisterFile
from kernel_model.errors import EmuError, GuestSignalError
from kernel_model.fs.file import OwnsHostFd
from kernel_model.mm.mm_types import PAGE_SIZE

if TYPE_CHECKING:
    from emu.machine import Machine
    from kernel_model.kernel.signals import RunResult

DEFAULT_INTERVAL = 1_000_000
DEFAULT_MAX_CHECKPOINTS = 64
_PROJECT = ("emu", "kernel_model", "guest_programs")
# What a class declares (class attributes):
# ``checkpoint_keep``: attributes that belong to the front ends or the host, never
#   rolled back (kept as they are when a checkpoint is restored);
# ``checkpoint_by_reference``: true for immutable or external objects (ELF images,
#   page-cache files, register files, the event bus...): referenced, never copied.


def _by_reference(cls) -> bool:
    return bool(getattr(cls, "checkpoint_by_reference", False))


class CheckpointError(EmuError):
    """A checkpoint or seek that cannot be done (one line for the user)."""


# =============================================================================== model state


class _Ref:
    """A value pickled by reference (a code object, a module's globals)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj


def _make_cell(*contents):
    return types.CellType(*contents)


def _make_bytearray(cls, data, state):
    obj = cls.__new__(cls)
    bytearray.__init__(obj, data)
    vars(obj).update(state)
    return obj


def _make_weak_keys(items):
    return weakref.WeakKeyDictionary(items)


def _make_function(code, globs, name, defaults, kwdefaults, cells):
    fn = types.FunctionType(code, globs, name, defaults, cells)
    fn.__kwdefaults__ = kwdefaults
    return fn


def _is_project(obj) -> bool:
    return type(obj).__module__.split(".", 1)[0] in _PROJECT


def _is_project_fn(fn) -> bool:
    return (fn.__module__ or "").split(".", 1)[0] in _PROJECT and not fn.__module__.startswith("emu.frontends")


def _frozen(obj) -> bool:
    params = getattr(type(obj), "__dataclass_params__", None)
    return params is not None and params.frozen


def _identity(obj) -> bool:
    """A mutable project object: saved as its attributes, restored in place."""
    return (
        _is_project(obj)
        and hasattr(obj, "__dict__")
        and not isinstance(obj, (type, BaseException))
        and not _by_reference(type(obj))
        and not _frozen(obj)
    )


_BY_VALUE = (
    int,
    float,
    complex,
    str,
    bytes,
    bytearray,
    bool,
    type(None),
    list,
    tuple,
    dict,
    set,
    frozenset,
    deque,
    range,
    slice,
)


_PLAIN = frozenset(_BY_VALUE)


def _kind_of_type(cls) -> str:
    """How instances of ``cls`` are saved: "value", "identity", "ref", or "object"
    (decided per object: functions and methods)."""
    mod = cls.__module__ or ""
    if cls in (types.FunctionType, types.MethodType):
        return "object"
    if mod.startswith("emu.frontends"):
        return "ref"  # a front end's object: never rolled back
    if issubclass(cls, (bytearray, list, dict, set, weakref.WeakKeyDictionary)):
        return "value"  # a container subclass (OutputBuffer, Counter)
    if cls is _Ref:
        return "ref"
    project = mod.split(".", 1)[0] in _PROJECT
    params = getattr(cls, "__dataclass_params__", None)
    frozen = params is not None and params.frozen
    if project and not issubclass(cls, (type, BaseException)) and not frozen and not _by_reference(cls):
        return "identity" if getattr(cls, "__dictoffset__", 0) else "value"  # slotted: immutable values
    if issubclass(cls, (types.CellType, types.BuiltinFunctionType, type)):
        return "value"  # see reducer_override
    if mod in ("random", "collections", "functools", "enum", "itertools") or (
        params is not None and not frozen and not project
    ):
        return "value"
    return "ref"


class _StatePickler(pickle.Pickler):
    """One pickle of many objects' states: project objects by identity (a serial),
    external ones by reference, plain data by value; closures are rebuilt.  ``kinds``
    caches the decision per type (see :func:`_kind_of_type`)."""

    def __init__(self, buf, objects: list, serial: dict, refs: list, kinds: dict):
        super().__init__(buf, protocol=pickle.HIGHEST_PROTOCOL)
        self.objects, self.serial, self.refs, self.kinds = objects, serial, refs, kinds
        self._ref_index: dict = {}
        self.queue: deque = deque()

    def persistent_id(self, obj):
        cls = type(obj)
        if cls in _PLAIN:
            return None
        kind = self.kinds.get(cls)
        if kind is None:
            kind = self.kinds[cls] = _kind_of_type(cls)
        if kind == "value":
            return None
        if kind == "identity":
            k = id(obj)
            i = self.serial.get(k)
            if i is None:
                i = self.serial[k] = len(self.objects)
                self.objects.append(obj)
                self.queue.append(obj)
            return ("o", i)
        if kind == "ref":
            return self._ref(obj.obj if cls is _Ref else obj)
        if cls is types.FunctionType:
            return None if _is_project_fn(obj) else self._ref(obj)  # a caller's handler: by reference
        owner = obj.__self__
        if owner is self.objects[0] or self.kinds.get(type(owner)) == "identity" or _identity(owner):
            return None
        return self._ref(obj)

    def _ref(self, obj):
        k = id(obj)
        i = self._ref_index.get(k)
        if i is None:
            i = self._ref_index[k] = len(self.refs)
            self.refs.append(obj)
        return ("r", i)

    def reducer_override(self, obj):
        if isinstance(obj, types.FunctionType) and (obj.__closure__ or "<" in obj.__qualname__):
            cells = obj.__closure__
            return (
                _make_function,
                (_Ref(obj.__code__), _Ref(obj.__globals__), obj.__name__, obj.__defaults__, obj.__kwdefaults__, cells),
            )
        if isinstance(obj, bytearray) and type(obj) is not bytearray:
            return (_make_bytearray, (type(obj), bytes(obj), dict(vars(obj))))
        if isinstance(obj, weakref.WeakKeyDictionary):
            return (_make_weak_keys, (list(obj.items()),))
        if isinstance(obj, types.CellType):
            try:
                return (_make_cell, (obj.cell_contents,))
            except ValueError:
                return (_make_cell, ())
        return NotImplemented


def _state_of(obj) -> dict:
    keep = getattr(type(obj), "checkpoint_keep", ())
    return {k: v for k, v in vars(obj).items() if k not in keep}


def capture_state(machine, kinds: dict | None = None) -> tuple[bytes, list, list]:
    """``(blob, objects, refs)``: the machine's model state pickled (see the module
    docstring); ``objects[i]`` is the live object of serial ``i`` (0: the machine).
    ``kinds``: a per-type cache kept between captures."""
    buf = io.BytesIO()
    objects: list[object] = [machine]
    serial = {id(machine): 0}
    refs: list[object] = []
    p = _StatePickler(buf, objects, serial, refs, {} if kinds is None else kinds)
    p.dump((0, _state_of(machine)))
    while p.queue:
        obj = p.queue.popleft()
        p.dump((serial[id(obj)], _state_of(obj)))
    p.dump(None)
    return buf.getvalue(), objects, refs


class _StateUnpickler(pickle.Unpickler):
    def __init__(self, buf, objects, refs, remap):
        super().__init__(buf)
        self.objects, self.refs, self.remap = objects, refs, remap

    def persistent_load(self, pid):
        kind, i = pid
        if kind == "o":
            return self.objects[i]
        obj = self.refs[i]
        return self.remap.get(id(obj), obj)


def restore_state(blob: bytes, objects: list, refs: list, remap: dict) -> None:
    """Write the saved attributes back into the same objects (``remap``: id of a
    referenced object -> its replacement, e.g. a recreated Unicorn instance)."""
    up = _StateUnpickler(io.BytesIO(blob), objects, refs, remap)
    while (item := up.load()) is not None:
        i, state = item
        obj = objects[i]
        kept = getattr(type(obj), "checkpoint_keep", ())
        keep = {k: v for k, v in vars(obj).items() if k in kept}
        vars(obj).clear()
        vars(obj).update(state)
        vars(obj).update(keep)


# =============================================================================== memory


@dataclass
class SpaceImage:
    """One address space at a checkpoint: ``ptes``, the leaf page-table flags of
    every page that has a frame (guest page address -> flags), and ``pages`` (guest
    page address -> bytes of those pages; the others have no frame and fault in
    afresh)."""

    ptes: dict
    pages: dict
    new_bytes: int = 0  # bytes of pages not shared with the previous image
    uc: object = None  # the Unicorn instance it was on


def snapshot_space(mem: Memory, previous: SpaceImage | None) -> SpaceImage:
    """The address space now; pages equal to ``previous``'s share its bytes objects
    (what is stored anew is what changed since the previous checkpoint)."""
    ptes, pages = mem.page_image()
    new = 0
    old = previous.pages if previous is not None else {}
    for addr, data in pages.items():
        before = old.get(addr)
        if before is not None and before == data:
            pages[addr] = before
        else:
            new += PAGE_SIZE
    return SpaceImage(ptes, pages, new, mem.uc)


def restore_space(mem: Memory, image: SpaceImage) -> None:
    """Put the image's layout and bytes back (see ``Memory.restore_image``)."""
    mem.restore_image(image.ptes, image.pages)


# =============================================================================== checkpoints


@dataclass(eq=False)
class Checkpoint:
    """The machine at instruction ``position`` (see the module docstring)."""

    position: int
    blob: bytes
    objects: list
    refs: list
    spaces: dict  # Memory -> SpaceImage, for every live address space
    cpu: tuple | None  # (Memory, context) of the task on the CPU
    extra: dict = field(default_factory=dict)  # the recorder's own positions
    host_fds: list = field(default_factory=list)  # (open file object, dup of its host fd)

    def __post_init__(self):
        weakref.finalize(self, _close_fds, self.host_fds)

    @property
    def nbytes(self) -> int:
        """What this checkpoint holds of its own: the pickled state and the pages it
        does not share with the one before."""
        return (
            len(self.blob)
            + sum(img.new_bytes for img in self.spaces.values())
            + sum(16 * len(img.pages) for img in self.spaces.values())
        )


def _close_fds(pairs: list) -> None:
    for _, fd in pairs:
        try:
            os.close(fd)
        except OSError:
            pass
    pairs.clear()


def _hold_host_fds(objects: list) -> list:
    """A duplicate of the host descriptor of every object that owns one
    (:class:`~kernel_model.fs.file.OwnsHostFd`): a guest that closes it after the
    checkpoint gets it back, as the same open file description, when the checkpoint is
    restored."""
    out = []
    for obj in objects:
        fd = obj.held_host_fd() if isinstance(obj, OwnsHostFd) else None
        if fd is not None:
            try:
                out.append((obj, os.dup(fd)))
            except OSError:
                pass
    return out


def _reopen_host_fds(pairs: list) -> None:
    for obj, saved in pairs:
        if obj.held_host_fd() is None:
            obj.own_host_fd(os.dup(saved))


def _live_spaces(machine) -> list[Memory]:
    out = []
    for proc in list(machine.processes) + [t.process for t in machine.all_tasks]:
        mem = proc.mem
        if mem is not None and not mem.released and mem not in out and proc.mm_owner is None:
            out.append(mem)
    return out


def take_checkpoint(machine, previous: Checkpoint | None = None, kinds: dict | None = None) -> Checkpoint:
    """A checkpoint of ``machine`` now (between runs or steps, never inside one)."""
    if machine.running:
        raise CheckpointError("a checkpoint is taken between runs, not inside one")
    blob, objects, refs = capture_state(machine, kinds)
    spaces = {}
    for mem in _live_spaces(machine):
        prev = previous.spaces.get(mem) if previous is not None else None
        spaces[mem] = snapshot_space(mem, prev)
    cpu = None
    if not machine.task.state == "dead" and not machine.mem.released:
        cpu = (machine.mem, machine.engine.context_save(machine.uc))
    return Checkpoint(machine.icount, blob, objects, refs, spaces, cpu, host_fds=_hold_host_fds(objects))


def restore_checkpoint(machine, cp: Checkpoint) -> None:
    """Put ``machine`` back into the state of ``cp``: model state, every address
    space of that time (one that was released since gets a new Unicorn instance),
    the CPU."""
    remap: dict[int, object] = {}  # id(a released CPU or register file) -> its successor
    for mem, image in cp.spaces.items():
        if mem.released or machine.engine.closed(mem.uc) or mem.uc is not image.uc:
            _revive_space(machine, mem, remap, cp)
        restore_space(mem, image)
    restore_state(cp.blob, cp.objects, cp.refs, remap)
    _reopen_host_fds(cp.host_fds)
    if cp.cpu is not None:
        mem, ctx = cp.cpu
        machine.engine.context_restore(mem.uc, ctx)
    for mem in cp.spaces:
        machine.engine.flush(mem.uc)
    machine.flush_translations()


def _revive_space(machine, mem: Memory, remap: dict, cp: Checkpoint) -> None:
    """A released address space comes back: a new engine CPU (with the trap hooks)
    behind the same Memory object; references to the old CPU and register file in
    the saved state are redirected to the new ones."""
    uc, regfile = machine.revive_space(mem)
    old = cp.spaces[mem].uc
    remap[id(old)] = uc
    for r in cp.refs:
        if isinstance(r, RegisterFile) and r._uc is old:
            remap[id(r)] = regfile


# =============================================================================== recorder


class GatedWriter:
    """The trace output (tracefs lines streamed to a file) while recording: a line a
    replay writes again is dropped (see :meth:`Recorder.admit`)."""

    checkpoint_by_reference = True

    def __init__(self, out, recorder: "Recorder"):
        self.out, self.recorder = out, recorder

    def write(self, text: str) -> int:
        if self.recorder.admit("lines"):
            return self.out.write(text)
        return len(text)

    def flush(self) -> None:
        self.out.flush()

    def __getattr__(self, name):
        return getattr(self.out, name)


@dataclass
class _Op:
    start: int  # instruction clock before the operation
    kind: str  # "step" | "run"
    insns: int  # instructions it executed


class Recorder:
    """Records a machine for reverse execution (see the module docstring).

    ``interval``: instructions between checkpoints (taken at the first run/step
    boundary past each multiple); ``max_checkpoints``: how many are kept (older ones
    are thinned).  Attaching takes the first checkpoint.  While attached,
    ``machine.run()`` and ``machine.step()`` go through :meth:`run` / :meth:`step`.
    """

    checkpoint_by_reference = True

    def __init__(
        self, machine: Machine, *, interval: int = DEFAULT_INTERVAL, max_checkpoints: int = DEFAULT_MAX_CHECKPOINTS
    ) -> None:
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise CheckpointError(f"checkpoint interval must be an instruction count >= 1, not {interval!r}")
        if isinstance(max_checkpoints, bool) or not isinstance(max_checkpoints, int) or max_checkpoints < 2:
            raise CheckpointError(f"max_checkpoints must be >= 2, not {max_checkpoints!r}")
        if not instruction_counter_available():
            raise CheckpointError("this Unicorn build does not expose its instruction counter")
        if machine.recorder is not None:
            raise CheckpointError("the machine already has a recorder")
        self.m = machine
        self.interval = interval
        self.max_checkpoints = max_checkpoints
        self.driving = False
        self.replaying = False
        self.checkpoints: list[Checkpoint] = []
        self.ops: list[_Op] = []
        self.dropped = 0
        # what already left the machine: per-stream bytes, events by (insn, index)
        self._out_pos = {1: 0, 2: 0}
        self._out_high = {1: 0, 2: 0}
        self._keys = {"events": (-1, 0), "lines": (-1, 0)}  # (instruction, index) of the last one
        self._high = {"events": (-1, 0), "lines": (-1, 0)}  # the furthest one delivered
        self.on_replayed_event = None  # fn(event) for events a replay does not deliver
        self._kinds: dict = {}  # type -> how the state pickler saves it
        machine.recorder = self
        machine.events.gate = self._gate
        machine.flush_translations()  # blocks of an uncounted run would not count
        self.checkpoint()

    # ------------------------------------------------------------------ public
    @property
    def position(self) -> int:
        """The instruction clock (``machine.icount``)."""
        return self.m.icount

    @property
    def start(self) -> int:
        return self.checkpoints[0].position

    def detach(self) -> None:
        """Stop recording; the machine runs free again."""
        self.m.recorder = None
        self.m.events.gate = None
        self.checkpoints.clear()
        self.ops.clear()

    def checkpoint(self) -> Checkpoint:
        """Take a checkpoint now (also done every ``interval`` instructions)."""
        prev = self.checkpoints[-1] if self.checkpoints else None
        cp = take_checkpoint(self.m, prev, self._kinds)
        cp.extra = {"out": dict(self._out_pos), "keys": dict(self._keys)}
        if self.checkpoints and self.checkpoints[-1].position == cp.position:
            self.checkpoints[-1] = cp
        else:
            self.checkpoints.append(cp)
        self._thin()
        return cp

    def restore(self, cp: Checkpoint) -> None:
        """Put the machine back to checkpoint ``cp``.  The history after it stays
        until the machine executes something new from an earlier point (a new branch
        starts there); :meth:`seek` can go forward in it again."""
        if cp not in self.checkpoints:
            raise CheckpointError("not a checkpoint of this recorder")
        restore_checkpoint(self.m, cp)
        self._out_pos = dict(cp.extra["out"])
        self._keys = dict(cp.extra["keys"])

    def seek(self, position: int) -> None:
        """Go to instruction ``position`` of the recorded history (the start .. now):
        restore the nearest checkpoint at or before it and replay forward."""
        if isinstance(position, bool) or not isinstance(position, int):
            raise CheckpointError(f"an instruction position is an integer, not {position!r}")
        if position < self.start or position > self.end:
            raise CheckpointError(f"instruction {position} is outside the recorded history ({self.start}..{self.end})")
        if position == self.position:
            return
        if position > self.position and not self.m.exited:
            self.replay(self.history(self.position), position)  # forward in the history
            return
        cp = max((c for c in self.checkpoints if c.position <= position), key=lambda c: c.position)
        self.replay_from(cp, position)

    @property
    def end(self) -> int:
        """The furthest instruction of the recorded history."""
        last = self.ops[-1].start + self.ops[-1].insns if self.ops else 0
        return max(self.position, last, self.checkpoints[-1].position)

    def replay_from(self, cp: Checkpoint, position: int, watch=None) -> None:
        """Restore ``cp`` and replay the logged history up to ``position``; ``watch``
        (a search) is called after each replayed operation."""
        ops = self.history(cp.position)
        self.restore(cp)
        self.replay(ops, position, watch)

    def replay(self, ops: list, until: int, watch=None) -> None:
        """Re-issue ``ops`` (logged at or after the current position) up to
        instruction ``until``; ``watch`` is called after each op (a search)."""
        m = self.m
        self.replaying = True
        try:
            for op in ops:
                if m.icount >= until or m.exited:
                    break
                if op.start + op.insns <= m.icount:
                    continue
                if op.kind == "step":
                    self.step()
                else:
                    self.run(min(op.start + op.insns, until) - m.icount, None)
                if watch is not None:
                    watch()
        finally:
            self.replaying = False
        if m.icount != until and not m.exited:
            raise CheckpointError(
                f"replay reached instruction {m.icount}, not {until}: the history was changed from outside"
            )

    def history(self, since: int | None = None) -> list:
        """Copies of the logged operations that end after ``since`` (default: all)."""
        return [
            _Op(op.start, op.kind, op.insns)
            for op in self.ops
            if since is None or op.start + op.insns > since or op.start >= since
        ]

    def stats(self) -> dict:
        """What the checkpoints cost: ``checkpoints``, ``bytes`` (state + unique pages
        held), ``insns`` (history length), ``bytes_per_million_insns``, ``interval``."""
        seen, total = set(), 0
        for cp in self.checkpoints:
            total += len(cp.blob)
            for img in cp.spaces.values():
                total += 16 * len(img.pages)
                for data in img.pages.values():
                    if id(data) not in seen:
                        seen.add(id(data))
                        total += len(data)
        insns = max(1, self.position - self.start)
        return {
            "checkpoints": len(self.checkpoints),
            "bytes": total,
            "insns": self.position - self.start,
            "interval": self.interval,
            "dropped": self.dropped,
            "bytes_per_million_insns": total * 1_000_000 // insns,
        }

    # ------------------------------------------------------------------ driving
    def run(
        self, max_insns: int | None = None, timeout: float | None = 120.0, *, raise_on_signal: bool = False
    ) -> RunResult:
        """``Machine.run`` in counted pieces that end at checkpoint boundaries."""
        m = self.m
        self._gate_trace_output()
        if not self.replaying:
            self._truncate_ops(m.icount)  # from here on a new history
        deadline = time.perf_counter() + timeout if timeout else None
        left = max_insns
        while True:
            self._maybe_checkpoint()
            chunk = (
                self.interval - (m.icount - self.checkpoints[-1].position)
                if not self.replaying
                else (left if left is not None else self.interval)
            )
            chunk = max(1, chunk)
            if left is not None:
                chunk = min(chunk, left)
            remaining_time = None
            if deadline is not None:
                remaining_time = max(1e-3, deadline - time.perf_counter())
            before = m.icount
            self.driving = True
            try:
                res = m.run(max_insns=chunk, timeout=remaining_time)
            finally:
                self.driving = False
                self._log("run", before, m.icount - before)
            if left is not None:
                left -= m.icount - before
            if res.reason != "budget" or (left is not None and left <= 0):
                break
        if res.reason == "budget" and max_insns is not None:
            res.insns = max_insns
        if raise_on_signal and res.reason == "signal":
            raise GuestSignalError(res)
        return res

    def step(self) -> RunResult | None:
        """``Machine.step``: one logged instruction."""
        m = self.m
        self._gate_trace_output()
        if not self.replaying:
            self._truncate_ops(m.icount)
        self._maybe_checkpoint()
        before = m.icount
        self.driving = True
        try:
            return m.step()
        finally:
            self.driving = False
            self._log("step", before, m.icount - before)

    def _log(self, kind: str, start: int, insns: int) -> None:
        if self.replaying:
            return
        self._truncate_ops(start)
        if (
            kind == "run"
            and self.ops
            and self.ops[-1].kind == "run"
            and self.ops[-1].start + self.ops[-1].insns == start
            and insns
        ):
            self.ops[-1].insns += insns  # one run in pieces is one run: replays identically
            return
        if insns:
            self.ops.append(_Op(start, kind, insns))

    def _truncate_ops(self, position: int) -> None:
        """Forget logged history after ``position`` (a new branch starts there)."""
        self.ops = [op for op in self.ops if op.start < position]
        if self.ops and self.ops[-1].start + self.ops[-1].insns > position:
            self.ops[-1].insns = position - self.ops[-1].start
        self.checkpoints = [c for c in self.checkpoints if c.position <= position] or self.checkpoints[:1]

    def _maybe_checkpoint(self) -> None:
        if self.replaying or self.m.exited:
            return
        if self.m.icount - self.checkpoints[-1].position >= self.interval:
            self.checkpoint()

    def _thin(self) -> None:
        """Keep at most ``max_checkpoints``: drop every other one of the older half."""
        cps = self.checkpoints
        if len(cps) <= self.max_checkpoints:
            return
        half = len(cps) // 2
        keep = [cps[0]] + [c for i, c in enumerate(cps[1:half], 1) if i % 2 == 0] + cps[half:]
        self.dropped += len(cps) - len(keep)
        self.checkpoints = keep

    # ------------------------------------------------------------------ what left the machine
    def fresh_output(self, fd: int, data: bytes) -> bytes:
        """The part of a guest write to fd ``fd`` the host has not been given yet."""
        if fd not in self._out_pos:
            return data
        pos = self._out_pos[fd]
        self._out_pos[fd] = pos + len(data)
        high = self._out_high[fd]
        self._out_high[fd] = max(high, pos + len(data))
        return data[max(0, high - pos) :]

    def admit(self, stream: str) -> bool:
        """Is this event or trace line (``stream``) new, past the furthest point any
        run reached?  Keys are (instruction, index among those of that instruction)."""
        tick = self.m.insn_clock()
        last, k = self._keys[stream]
        key = (tick, k + 1 if tick == last else 0)
        self._keys[stream] = key
        if key <= self._high[stream]:
            return False
        self._high[stream] = key
        return True

    def _gate(self, event) -> bool:
        """EventBus gate: deliver an event only past the furthest point reached."""
        if self.admit("events"):
            return True
        if self.on_replayed_event is not None:
            self.on_replayed_event(event)
        return False

    def _gate_trace_output(self) -> None:
        trace = getattr(self.m.kernel.uprobes, "trace", None)
        if trace is not None and trace.output is not None and not isinstance(trace.output, GatedWriter):
            trace.output = GatedWriter(trace.output, self)


__all__ = [
    "Recorder",
    "Checkpoint",
    "CheckpointError",
    "take_checkpoint",
    "restore_checkpoint",
    "DEFAULT_INTERVAL",
    "DEFAULT_MAX_CHECKPOINTS",
]
