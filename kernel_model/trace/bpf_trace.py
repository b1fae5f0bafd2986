"""BPF programs as uprobe consumers: the kernel's BPF state of one machine and the two
ways a program meets a uprobe, as ``kernel/trace/bpf_trace.c`` and
``kernel/trace/trace_uprobe.c`` have them.

* **The perf-event path** (:meth:`BpfTrace.attach_uprobe`): ``perf_event_open`` of the
  uprobe PMU makes a local trace_uprobe, ``PERF_EVENT_IOC_SET_BPF`` (or a
  ``BPF_LINK_CREATE`` of a perf event) puts the program in its ``prog_array``.  At a
  hit, ``uprobe_dispatcher`` -> ``__uprobe_perf_func`` runs the program
  (``bpf_prog_run_array_uprobe``); a program that returns 0 ends there, any other value
  goes on to the perf sample, which needs the args buffer.  Before 6.10 the dispatcher
  filled the buffer before anything else on every hit (profile switch ``args_buffer``),
  so ``counters.args_buffer_fills`` counts one fill per hit there and one per non-zero
  return after.
* **The uprobe_multi link** (:meth:`BpfTrace.attach_uprobe_multi`): one consumer per
  offset, ``uprobe_multi_link_handler`` / ``uprobe_multi_link_ret_handler``, no
  trace_uprobe and no args buffer.  Their return value is the program's before 6.13 (a 1
  asks UPROBE_HANDLER_REMOVE) and 0 from 6.13 (``bpf_uprobe_multi_rc``); a session
  program's (6.13, ``bpf_uprobe_session``) non-zero entry return skips its return run
  (UPROBE_HANDLER_IGNORE) and the two runs share the session cookie.

The program's context is ``struct pt_regs``: the task's registers copied into a kernel
object before each run.  Helpers see the run through :attr:`BpfTrace.run`
(``struct bpf_trace_run_ctx``: the cookie, the entry ip, the session state).
"""

from __future__ import annotations

import errno as E
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernel_model.bpf.bpf_types import (
    BPF_TRACE_UPROBE_MULTI,
    BPF_TRACE_UPROBE_SESSION,
    PT_REGS_FIELDS,
    PT_REGS_SIZE,
    BpfMap,
    BpfProg,
)
from kernel_model.bpf.core import BpfRuntimeError, BpfVm
from kernel_model.bpf.func_protos import PROTOS
from kernel_model.bpf.helpers import HELPERS
from kernel_model.bpf.insn import BPF_CALL, BPF_JMP, BPF_PSEUDO_CALL, BPF_PSEUDO_KFUNC_CALL, HELPER_IDS, HELPER_NAMES
from kernel_model.bpf.liveness import ctx_live_at_entry
from kernel_model.bpf.maps import create_map
from kernel_model.bpf.memory import KernelMemory, Region
from kernel_model.bpf.verifier import BpfVerifierError, VerifierFeatures, bpf_check
from kernel_model.errors import EmuError
from kernel_model.kernel.events.uprobes_types import UPROBE_HANDLER_IGNORE, UPROBE_HANDLER_REMOVE, UprobeConsumer
from kernel_model.kernel.time.timekeeping import CLOCK_TICK_NS
from kernel_model.trace.trace_probe import TASK_COMM_LEN

if TYPE_CHECKING:
    from kernel_model.kernel.events.uprobes_types import UprobeContext

U64 = 0xFFFFFFFFFFFFFFFF
_PT_REGS = struct.Struct(f"<{len(PT_REGS_FIELDS)}Q")
# the kfuncs a uprobe program may call, by the BTF id the model's vmlinux BTF gives them
KFUNC_BTF_IDS = {"bpf_session_is_return": 0x10001, "bpf_session_cookie": 0x10002}
KFUNC_NAMES = {v: k for k, v in KFUNC_BTF_IDS.items()}
_MAX_VALID_SIGNAL = 64
# helper id -> how many argument registers its prototype reads (for bpf.liveness)
HELPER_NARGS = {HELPER_IDS[name]: len(proto.args) for name, proto in PROTOS.items() if name in HELPER_IDS}


class BpfRun:
    """``struct bpf_trace_run_ctx`` / ``bpf_uprobe_multi_run_ctx`` of the run in progress;
    ``regs`` (the task's pt_regs) are read only if a helper asks."""

    __slots__ = ("task", "uctx", "cookie", "entry_ip", "is_return", "session")

    def __init__(self, task, uctx=None, cookie: int = 0, entry_ip: int = 0, is_return=False, session=False):
        self.task, self.uctx, self.cookie, self.entry_ip = task, uctx, cookie, entry_ip
        self.is_return, self.session = is_return, session

    @property
    def regs(self):
        return self.uctx.regs


@dataclass(eq=False)
class BpfLink:
    """``struct bpf_link``: a program attached at some uprobes; ``detach`` undoes it."""

    id: int
    prog: BpfProg
    kind: str  # "perf_event" | "uprobe_multi"
    path: str
    offsets: list[int]
    retprobe: bool = False
    session: bool = False
    pid: int | None = None
    cookies: list[int] = field(default_factory=list)
    consumers: list[UprobeConsumer] = field(default_factory=list)


class BpfTrace:
    """One machine's BPF objects (maps, programs, links by id), the kernel memory they
    live in, the interpreter, and the helpers' view of the current run."""

    def __init__(self, kernel) -> None:
        self.kernel = kernel
        self.profile = kernel.profile
        self.memory = KernelMemory()
        self.vm = BpfVm(self.memory)
        self.maps_by_id: dict[int, BpfMap] = {}
        self.progs_by_id: dict[int, BpfProg] = {}
        self.links_by_id: dict[int, BpfLink] = {}
        self._next_id = {"map": 1, "prog": 1, "link": 1}
        self._ctx = self.memory.alloc(PT_REGS_SIZE, "ctx", writable=False)
        self._cookie = self.memory.alloc(8, "session_cookie")
        self._scratch: dict[int, Region] = {}
        self.run: BpfRun = BpfRun(None)
        self.printk_lines: list[str] = []  # trace_pipe's bpf_trace_printk lines
        self.printk_output: Any = None  # a file-like that takes them as they come instead
        self.errors: list[str] = []  # runs the interpreter stopped (never in a verified program)
        self.features = VerifierFeatures(uprobe_session=self.profile.bpf_uprobe_session)
        # called after each run (a front end draining its ring buffers as records come)
        self.after_run: Any = None

    @staticmethod
    def kfunc_btf_id(name: str) -> int | None:
        """The BTF id a kfunc has in the model's vmlinux BTF (None: no such kfunc)."""
        return KFUNC_BTF_IDS.get(name)

    # -- objects -------------------------------------------------------------------
    @property
    def nr_cpus(self) -> int:
        sched = getattr(self.kernel, "scheduler", None)
        return sched.nr_cpu_ids if sched is not None else 1

    def map_create(
        self,
        map_type: int,
        key_size: int,
        value_size: int,
        max_entries: int,
        map_flags: int = 0,
        name: str = "",
        btf_key_type_id: int = 0,
        btf_value_type_id: int = 0,
    ) -> BpfMap:
        """``map_create``: a map of the type's ``map_alloc``, with the next map id."""
        m = create_map(self.memory, map_type, key_size, value_size, max_entries, map_flags, name, self.nr_cpus)
        m.btf_key_type_id, m.btf_value_type_id = btf_key_type_id, btf_value_type_id
        m.id = self._take_id("map")
        self.maps_by_id[m.id] = m
        return m

    def _take_id(self, kind: str) -> int:
        n = self._next_id[kind]
        self._next_id[kind] = n + 1
        return n

    def prog_load(self, prog: BpfProg, *, map_by_fd, maps_by_idx=(), kfunc_ids=None, log_level: int = 0) -> str:
        """``bpf_prog_load``: the verifier with this kernel's features, then the checks
        of which helpers the model provides (a helper it does not is the verifier's
        "unknown func", as one the program type may not call); the next prog id."""
        log = bpf_check(
            prog,
            map_by_fd=map_by_fd,
            maps_by_idx=maps_by_idx,
            kfunc_ids=kfunc_ids if kfunc_ids is not None else KFUNC_NAMES,
            features=self.features,
            log_level=log_level,
        )
        for insn in prog.insns:
            if insn.code == BPF_JMP | BPF_CALL and insn.src not in (BPF_PSEUDO_CALL, BPF_PSEUDO_KFUNC_CALL):
                if insn.imm not in HELPERS and insn.imm != 12:  # 12: bpf_tail_call, the interpreter's own
                    name = HELPER_NAMES.get(insn.imm, "unknown")
                    raise BpfVerifierError(E.EINVAL, f"unknown func bpf_{name}#{insn.imm}")
        prog.reads_ctx = ctx_live_at_entry(prog.insns, HELPER_NARGS)
        prog.id = self._take_id("prog")
        self.progs_by_id[prog.id] = prog
        return log

    def map_at(self, addr: int) -> Any:
        """The map whose ``struct bpf_map`` is at ``addr`` (a helper's map argument)."""
        region = self.memory.find(addr)
        if region is None or region.kind != "map":
            raise BpfRuntimeError(f"{addr:#x} is not a map")
        return region.owner

    def scratch(self, size: int) -> Region:
        """A kernel buffer of ``size`` bytes a helper hands a callback (reused)."""
        region = self._scratch.get(size)
        if region is None:
            region = self._scratch[size] = self.memory.alloc(size, "scratch")
        return region

    # -- the BpfEnv the interpreter calls ---------------------------------------------
    def call_helper(self, fid: int, r1: int, r2: int, r3: int, r4: int, r5: int, vm) -> int:
        fn = HELPERS.get(fid)
        if fn is None:
            raise BpfRuntimeError(f"helper #{fid} is not modeled")
        return fn(self, r1, r2, r3, r4, r5)

    def call_kfunc(self, btf_id: int, r1: int, r2: int, r3: int, r4: int, r5: int, vm) -> int:
        name = KFUNC_NAMES.get(btf_id)
        if name == "bpf_session_is_return":
            return int(self.run.is_return)
        if name == "bpf_session_cookie":
            return self._cookie.base
        raise BpfRuntimeError(f"kfunc with BTF id {btf_id} is not modeled")

    def tail_call_target(self, map_addr: int, index: int):
        return self.map_at(map_addr).prog_at(index)

    # -- what helpers ask of the current run ------------------------------------------
    @property
    def task(self):
        return self.run.task

    @property
    def cpu(self) -> int:
        return self.run.task.cpu

    def read_user(self, addr: int, size: int) -> bytes:
        return self.run.task.process.mem.read_user(addr, size)

    def write_user(self, addr: int, data: bytes) -> None:
        self.run.task.process.mem.write_user(addr, data)

    def monotonic_ns(self) -> int:
        """A read of the machine's CLOCK_MONOTONIC: as every clock read of the model (a
        guest's clock_gettime too) it moves the clock CLOCK_TICK_NS on first, so two
        reads - two hits with no guest instruction between - never see one time."""
        return self.kernel.syscalls.boot_clock_ns(advance=CLOCK_TICK_NS)

    def realtime_ns(self) -> int:
        return self.kernel.syscalls.clock_ns

    def prandom_u32(self) -> int:
        return self.kernel.syscalls.rng.getrandbits(32)

    def send_signal(self, sig: int, *, thread: bool) -> int:
        """``bpf_send_signal_common``: SEND_SIG_PRIV to the current process (or thread);
        -EINVAL for an invalid signal, -EPERM for init (pid 1)."""
        if sig > _MAX_VALID_SIGNAL:
            return -E.EINVAL
        task = self.run.task
        if task.process.pid == 1:
            return -E.EPERM
        if sig == 0:
            return 0
        if thread:
            self.kernel.send_sig(task, sig, force=False, code=0x80)
        else:
            self.kernel.send_process_sig(task.process, sig, code=0x80)
        return 0

    def trace_printk(self, text: bytes) -> None:
        """A ``bpf_trace_printk`` event line, as trace_pipe prints it.  The latency
        flags are the uprobe program's context: interrupts on, no resched pending, not
        in an interrupt, preempt-depth 1 (``bpf_try_get_buffers`` disabled preemption
        for the format buffer) and migrate-disable 1 (``bpf_prog_run_array_uprobe``):
        ``...11``, as a 6.18 host prints it."""
        task = self.run.task
        ts = self.kernel.syscalls.boot_clock_ns(advance=1000)
        secs, usecs = divmod((ts + 500) // 1000, 1_000_000)
        comm = task.comm[: TASK_COMM_LEN - 1]
        msg = text.decode("latin-1").rstrip("\n")
        line = f"{comm:>16}-{task.tid:<7d} [{task.cpu:03d}] ...11 {secs:5d}.{usecs:06d}: bpf_trace_printk: {msg}"
        if self.printk_output is not None:
            self.printk_output.write(line + "\n")
        else:
            self.printk_lines.append(line)

    # -- running a program at a hit -----------------------------------------------------
    def run_prog(self, prog: BpfProg, uctx: UprobeContext, *, cookie: int, entry_ip: int, session: bool) -> int:
        """``bpf_prog_run`` with the run context set: pt_regs copied into the context
        object (for a program that can read it), the session cookie in its slot; the
        program's r0 (u64).  A run the interpreter stops (never a verified program's) is
        recorded and returns 0."""
        if prog.reads_ctx:
            vals = uctx.regs.as_dict()
            self._ctx.data[:] = _PT_REGS.pack(*[vals[name] & U64 for name in PT_REGS_FIELDS])
        prev = self.run
        self.run = BpfRun(uctx.task, uctx, cookie, entry_ip, uctx.is_return, session)
        if session:
            self._cookie.data[:] = (uctx.cookie & U64).to_bytes(8, "little")
        try:
            ret = self.vm.run(prog, self._ctx.base, self)
        except BpfRuntimeError as err:
            self.errors.append(f"{prog.name}: {err}")
            ret = 0
        finally:
            if session:
                uctx.cookie = int.from_bytes(self._cookie.data, "little")
            self.run = prev
        prog.run_cnt += 1
        if self.after_run is not None:
            self.after_run()
        return ret

    # -- attaching ------------------------------------------------------------------------
    def _pid_filter(self, pid: int | None):
        """The perf event's / link's task filter: hits in the mm the target task has
        now (it may have exec'd since the attach), as ``uprobe_perf_filter`` and
        ``uprobe_multi_link_filter`` compare ``event->hw.target->mm``."""
        if pid is None:
            return None
        target = next((p for p in self.kernel.processes if p.pid == pid), None)
        if target is None:
            raise BpfAttachError(E.ESRCH, f"no process {pid}")

        def wants(process) -> bool:
            return process is (target.mm_owner or target)

        return wants

    def attach_uprobe(
        self,
        prog: BpfProg,
        file,
        offset: int,
        *,
        retprobe: bool = False,
        ref_ctr_offset: int = 0,
        pid: int | None = None,
        cookie: int = 0,
    ) -> BpfLink:
        """A uprobe perf event with the program attached (``perf_event_open`` of the
        uprobe PMU + ``PERF_EVENT_IOC_SET_BPF``).

        Before 6.10 ``uprobe_dispatcher`` fills the args buffer before anything else,
        a hit the filter refuses included.  As trace_uprobe's consumer, a return
        probe's has that entry handler too: it answers UPROBE_HANDLER_REMOVE in an mm
        the perf event's filter does not want, so no return probe is set up there and
        the breakpoint leaves that mm, and runs the program only for an entry probe.
        At return ``uretprobe_dispatcher`` (a fill before 6.10) runs the program with no
        filter check (``uretprobe_perf_func``).  The kernel's entry-side fill of a
        return probe is not counted: the model's tracefs return events
        (kernel_model/trace/trace_uprobe.py) do not count it either, and the two paths
        stay comparable."""
        self._check_attach(prog, multi=False)
        flt = self._pid_filter(pid)
        always = self.profile.args_buffer == "always"
        counters = self.kernel.machine.counters

        def run(ctx, entry_ip: int) -> None:
            """``__uprobe_perf_func``: a non-zero return goes on to the perf sample, which
            needs the args buffer (prepared lazily from 6.10)."""
            if self.run_prog(prog, ctx, cookie=cookie, entry_ip=entry_ip, session=False) and not always:
                counters.args_buffer_fills += 1

        def dispatch(ctx) -> int:
            if always and not retprobe:
                counters.args_buffer_fills += 1  # uprobe_dispatcher: store_trace_args first
            if flt is not None and not flt(ctx.task.process.mm_owner or ctx.task.process):
                return UPROBE_HANDLER_REMOVE  # uprobe_perf_func: !uprobe_perf_filter()
            if not retprobe:
                run(ctx, ctx.vaddr)
            return 0

        def ret_dispatch(ctx) -> int:
            if always:
                counters.args_buffer_fills += 1  # uretprobe_dispatcher: store_trace_args first
            run(ctx, ctx.func)
            return 0

        uc = UprobeConsumer(dispatch, ret_dispatch if retprobe else None, flt, name=f"bpf:{prog.name}", is_trace=True)
        link = BpfLink(self._take_id("link"), prog, "perf_event", file.path, [offset], retprobe, pid=pid)
        link.cookies = [cookie]
        link.consumers.append(self.kernel.uprobes.uprobe_register(file, offset, uc, ref_ctr_offset))
        self.links_by_id[link.id] = link
        return link

    def attach_uprobe_multi(
        self,
        prog: BpfProg,
        file,
        offsets: list[int],
        *,
        ref_ctr_offsets: list[int] | None = None,
        cookies: list[int] | None = None,
        retprobe: bool = False,
        session: bool = False,
        pid: int | None = None,
    ) -> BpfLink:
        """``bpf_uprobe_multi_link_attach``: one consumer per offset; all or none."""
        self._check_attach(prog, multi=True, session=session)
        if not offsets or (ref_ctr_offsets and len(ref_ctr_offsets) != len(offsets)):
            raise BpfAttachError(E.EINVAL, "offsets and ref_ctr_offsets must be non-empty and of one length")
        if cookies and len(cookies) != len(offsets):
            raise BpfAttachError(E.EINVAL, "cookies must be as many as offsets")
        flt = self._pid_filter(pid)
        zero_rc = self.profile.bpf_uprobe_multi_rc == "zero"
        link = BpfLink(self._take_id("link"), prog, "uprobe_multi", file.path, list(offsets), retprobe, session, pid)
        link.cookies = list(cookies or [0] * len(offsets))
        registered = []
        try:
            for i, off in enumerate(offsets):
                handler, ret_handler = self._multi_handlers(prog, flt, link.cookies[i], retprobe, session, zero_rc)
                uc = UprobeConsumer(handler, ret_handler, flt, name=f"bpf:{prog.name}")
                ref = ref_ctr_offsets[i] if ref_ctr_offsets else 0
                registered.append(self.kernel.uprobes.uprobe_register(file, off, uc, ref))
        except Exception:
            for uc in registered:
                self.kernel.uprobes.unregister(uc)
            raise
        link.consumers = registered
        self.links_by_id[link.id] = link
        return link

    def _multi_handlers(self, prog, flt, cookie: int, retprobe: bool, session: bool, zero_rc: bool):
        def handler(ctx) -> int:
            if flt is not None and not flt(ctx.task.process.mm_owner or ctx.task.process):
                return 0  # uprobe_prog_run: another task's hit runs nothing
            ret = self.run_prog(prog, ctx, cookie=cookie, entry_ip=ctx.vaddr, session=session)
            if session:
                return UPROBE_HANDLER_IGNORE if ret else 0
            if zero_rc:
                return 0
            ret &= 0xFFFFFFFF
            return ret - (1 << 32) if ret >> 31 else ret

        def ret_handler(ctx) -> int:
            if flt is not None and not flt(ctx.task.process.mm_owner or ctx.task.process):
                return 0
            ret = self.run_prog(prog, ctx, cookie=cookie, entry_ip=ctx.func, session=session)
            return 0 if zero_rc else ret & 0xFFFFFFFF

        if session:
            return handler, ret_handler
        return (None, ret_handler) if retprobe else (handler, None)

    def _check_attach(self, prog: BpfProg, *, multi: bool, session: bool = False) -> None:
        """The attach type must be the one the program was loaded for
        (``bpf_uprobe_multi_link_attach`` -EINVAL, perf_event_set_bpf_prog -EINVAL)."""
        want = (BPF_TRACE_UPROBE_SESSION if session else BPF_TRACE_UPROBE_MULTI) if multi else 0
        if prog.expected_attach_type != want:
            raise BpfAttachError(
                E.EINVAL, f"program {prog.name} was loaded for attach type {prog.expected_attach_type}, not {want}"
            )
        if session and not self.profile.bpf_uprobe_session:
            raise BpfAttachError(E.EINVAL, f"uprobe.session needs a 6.13 or later kernel, not {self.profile.name}")

    def detach(self, link: BpfLink) -> None:
        """``bpf_link_release``: unregister the link's consumers."""
        for uc in link.consumers:
            self.kernel.uprobes.unregister(uc)
        link.consumers = []
        self.links_by_id.pop(link.id, None)


class BpfAttachError(EmuError):
    """An attach the kernel refuses, with its errno."""

    def __init__(self, errno: int, message: str):
        self.errno = errno
        super().__init__(message)
