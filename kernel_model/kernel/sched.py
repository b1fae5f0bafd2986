"""A deterministic scheduler: the interleaving of tasks is a pure function of a seed.

Tasks run on one Unicorn CPU in time slices whose lengths a seeded generator draws, so a
failing interleaving replays exactly with the same seed; ``history`` records every switch
(tid sequence) for comparison.  A machine of several virtual CPUs (``Machine(cpus=N)``)
still executes one slice at a time: each CPU has its task and its virtual clock, and the
busy CPU furthest behind in time runs next (:meth:`Scheduler.pick_smp`), so its tasks
make progress side by side in virtual time, each on a CPU its affinity allows.

A slice is counted in *translated blocks* (QEMU TBs: straight-line runs of guest code
ending at a branch), not in instructions.  Why: Unicorn's own instruction counter
(``emu_start(count=N)``) is a code hook on every instruction, which makes guest code
15-20 times slower and so made any threaded guest that much slower than the same work
on one thread; a block hook costs one call per block.  The engine's quantum
(``emu.engine.quantum.BlockQuantum``) is
that hook, an 18-byte native callback (no Python frame per block) that counts down and calls
``uc_emu_stop`` at zero, so the slice ends at a block boundary: where it ends depends
only on the guest's code path, never on the host's speed.  On hosts where the callback
cannot be made (not x86-64 Linux, or no executable memory) slices fall back to
Unicorn's instruction counter: still deterministic, just slower.

As CFS's minimum granularity does, the default slices are long (10,000-100,000 blocks,
40-400 us of virtual time, a fraction of a millisecond of the host's) so that switching
(~0.1 ms of Python and Unicorn work) costs little; short slices shake out races
(``Machine(sched_slice=(1, 40))``, ``--sched-slice 1:40``).
"""

from __future__ import annotations

import random
import time

from kernel_model.arch.x86.entry.syscall_64 import SYSCALL_NAMES
from kernel_model.arch.x86.entry.syscall_table import enosys_detail
from kernel_model.errors import InputError
from kernel_model.include.linux.cpumask import check_nr_cpus, cpu_all_mask
from kernel_model.kernel.kernel_base import KernelBase
from kernel_model.kernel.rseq import rseq_update_cpu_node_id
from kernel_model.kernel.sched_slice import MAX_SLICE, MIN_SLICE, check_slice
from kernel_model.kernel.signals import SIGNALS, RunResult
from kernel_model.kernel.time.timekeeping import INSN_NS
from kernel_model.mm.mm_types import GuestFault

SIGSEGV = SIGNALS["SIGSEGV"]

# The slice of a task that is alone runnable: long (~1M instructions), as nobody waits;
# a wake-up cuts it to a seeded slice (the engine's ``quantum.shorten``).
ALONE_SLICE = 1 << 18
# Virtual time a block takes: it counts as this many instructions of INSN_NS each.
BLOCK_INSNS = 4
# A start bounded by at most this many instructions (a budget, a counted slice) ends soon
# enough for the run's timeout to be checked after it: no Unicorn timer for it (a timer
# thread per emu_start); as long as an ALONE_SLICE of blocks.
SHORT_SLICE_INSNS = ALONE_SLICE * BLOCK_INSNS


class Scheduler:
    """The seeded choices: who runs next, on which CPU, and for how many blocks.

    A machine of ``cpus`` CPUs runs them on the one engine CPU in turn: each virtual
    CPU has its task (``curr``: rq->curr, None when idle) and its own virtual clock
    (``clock``, ns on CLOCK_REALTIME's scale), and the busy CPU whose clock is
    smallest runs the next slice, so up to ``cpus`` tasks make progress in the same
    stretch of virtual time.  The machine's clock (what every task reads) is the
    furthest a CPU has got, so it never goes back.  With one CPU the choices are
    exactly :meth:`pick`'s."""

    def __init__(self, seed: int = 0, min_slice: int = MIN_SLICE, max_slice: int = MAX_SLICE, cpus: int = 1):
        self.seed = seed
        self.rng = random.Random(seed)
        self.min_slice, self.max_slice = check_slice(min_slice, max_slice)
        self.history: list[int] = []
        self.nr_cpu_ids = check_nr_cpus(cpus)
        self.curr: list = [None] * self.nr_cpu_ids
        self.clock: list[int] = [0] * self.nr_cpu_ids
        self.this_cpu = 0  # the CPU of the slice being run (smp_processor_id())

    @property
    def online_mask(self) -> int:
        """cpu_online_mask (every CPU is possible, present, online and active)."""
        return cpu_all_mask(self.nr_cpu_ids)

    def slice(self) -> int:
        return self.rng.randint(self.min_slice, self.max_slice)

    def pick(self, tasks) -> object | None:
        runnable = sorted((t for t in tasks if t.state == "running"), key=lambda t: t.tid)
        if not runnable:
            return None
        return runnable[0] if len(runnable) == 1 else self.rng.choice(runnable)

    def record(self, task) -> None:
        self.history.append(task.tid)

    def pick_smp(self, tasks, now: int):
        """The next task to run on a machine of several CPUs (``__schedule`` on each
        CPU, ``select_task_rq`` for a task that waits): the CPU that ran the last slice
        chooses again among its task and the waiting ones it may run (seeded, as
        :meth:`pick`), each idle CPU takes a waiting task its affinity allows (its
        clock brought to ``now``: an idle CPU's time passed), and the busy CPU with the
        smallest clock (the lowest-numbered on a tie) runs.  None when no task can
        run.  Sets ``this_cpu`` and each placed task's ``cpu``."""
        curr, this = self.curr, self.this_cpu
        this_idle = curr[this] is None  # no task since the last pick (all slept)
        runnable = sorted((t for t in tasks if t.state == "running"), key=lambda t: t.tid)
        live = {id(t) for t in runnable}
        for i, t in enumerate(curr):
            if t is not None and (i == this or id(t) not in live or not t.cpus_mask >> i & 1):
                curr[i] = None
        on_cpu = {id(t) for t in curr if t is not None}
        waiting = [t for t in runnable if id(t) not in on_cpu]
        curr[this] = self._take(waiting, this)
        if this_idle and curr[this] is not None:
            self.clock[this] = max(self.clock[this], now)
        for i in range(self.nr_cpu_ids):
            if not waiting:
                break
            if curr[i] is None and i != this:
                curr[i] = self._take(waiting, i)
                if curr[i] is not None:
                    self.clock[i] = max(self.clock[i], now)
        busy = [i for i, t in enumerate(curr) if t is not None]
        if not busy:
            return None
        cpu = min(busy, key=lambda i: (self.clock[i], i))
        self.this_cpu = cpu
        return curr[cpu]

    def _take(self, waiting: list, cpu: int):
        """A seeded choice among the ``waiting`` tasks allowed on ``cpu``, taken out
        of ``waiting`` and put on ``cpu``; None when none is."""
        cands = [t for t in waiting if t.cpus_mask >> cpu & 1]
        if not cands:
            return None
        task = cands[0] if len(cands) == 1 else self.rng.choice(cands)
        waiting.remove(task)
        task.cpu = cpu  # set_task_cpu: it is on this CPU's run queue now
        return task

    def set_curr(self, task) -> None:
        """``task`` runs now on its CPU (a debugger chose it): it leaves any other."""
        self.curr = [None if t is task else t for t in self.curr]
        self.curr[task.cpu] = task
        self.this_cpu = task.cpu


class RunQueue(KernelBase):
    """The CPU's run loop (``schedule`` and the time slices): part of
    :class:`kernel_model.kernel.kernel.Kernel`, which holds the tasks, the
    :class:`Scheduler` and the engine (:class:`emu.engine.interface.Engine`).

    With one task the guest runs in one engine start; with several, the seeded
    scheduler gives them time slices counted in translated blocks, one start each.
    ``counted`` runs (reverse execution records them) slice by instructions instead:
    a checkpoint or a seek may split a run anywhere, and a start a budget cut short
    goes on as it began in the next run, so the split does not change the
    interleaving; blocks would not survive a split mid-block."""

    def begin(self, stop_requested: str | None) -> None:
        """A run or step starts: nothing decided yet.  A stop requested before it
        applies to the run that was going (resume after a stop is well-defined);
        ``stop_requested``: a Ctrl-C that sticks."""
        self._result = None
        self.engine.hook_error = None
        self._stop_requested = stop_requested
        self.engine.pending_fault = None

    def end_run(self, result: RunResult) -> RunResult:
        self._run_deadline = None
        self._account()
        self.release_task_mms()
        self.last_result = result
        return result

    def _here(self, reason: str, detail: str) -> RunResult:
        rip = self._rip()
        return RunResult(reason, rip=rip, rip_symbol=self.symbolize(rip), detail=detail)

    def run(self, max_insns: int | None, timeout: float | None, *, counted: bool = False) -> RunResult:
        """Run until the main process exits or dies of a signal, the instruction budget
        is spent, or the timeout (see ``emu.machine.Machine.run``)."""
        engine = self.engine
        engine.translation_mode(self.cpu, "run")
        start = time.perf_counter()
        deadline = start + timeout if timeout else None
        self._run_deadline = deadline  # interrupted(): a wait for the host ends there
        remaining = int(max_insns) if max_insns else None
        spurious, last_spurious = 0, None
        while True:
            task = self.task
            multi = len(self.tasks) > 1
            if counted:
                carry, self._slice_carry = self._slice_carry, None
                if carry is not None and carry[0] is task:
                    full, done, multi = carry[1], carry[2], carry[3]
                else:
                    full, done = (self.scheduler.slice() if multi else None), 0
                count = (remaining or 0) if full is None else (full if remaining is None else min(full, remaining))
                blocks, short = None, 0 < count <= SHORT_SLICE_INSNS
            else:
                full = done = None
                count, blocks, short = self._slice_limits(multi, remaining)
            self._switch_requested = False
            engine.pending_fault = None
            left = (deadline - time.perf_counter()) if deadline else None
            if left is not None and left <= 0:
                result = self._here("timeout", self._enosys_loop_detail())
                break
            if self._stop_requested:  # Ctrl-C came before this run started
                result = self._here("stopped", self._stop_requested)
                break
            rip = self._rip()
            task.slices += 1
            if self._resume_exit_work(task):
                stopped_early = True  # sent from outside a trap: deliver first
                insns = 0 if count else None
            else:
                engine.emu_base, engine.emu_count = engine.icount, count
                # the deadline of short slices is checked between them, with no Unicorn
                # timer (a thread per emu_start: ~0.1 ms each); only a slice nothing
                # bounds (one task, no budget or a large one) runs with the timer
                stopped_early = self._emulate(rip, None if short else left, count, blocks)
                engine.emu_count = 0
                insns = engine.insns_run(count, stopped_early, self.cpu) if count else None
                engine.icount += insns or 0
                if (
                    counted
                    and not stopped_early
                    and remaining is not None
                    and insns == remaining
                    and (full is None or full > insns)
                ):
                    self._slice_carry = (task, None if full is None else full - insns, done + insns, multi)  # type: ignore[operator]  # counted: ints
                elif multi:  # the others' sleeps and timers see the time pass
                    self._time_passes((done or 0) + self._cpu_time(blocks, insns))
            if remaining is not None:
                remaining -= insns or 0
            engine.raise_hook_error()
            if self._result is not None:
                result = self._result
                break
            if self._stop_requested:
                result = self._here("stopped", self._stop_requested)
                break
            if task.state == "running" and not stopped_early and not self._switch_requested:
                why = self._why_returned(task, start, timeout, count)
                if why == "hlt":
                    if self._result is not None:
                        result = self._result
                        break
                elif why == "timeout":
                    result = self._here("timeout", self._enosys_loop_detail())
                    break
                elif why == "count":
                    if not multi and (remaining is None or remaining > 0):
                        result = self._here("stopped", "emulation stopped")
                        break
                elif why != "slice":
                    # Unicorn came back with no reason of ours (seen right after a fork
                    # created a second Unicorn instance inside a hook): go on, unless it
                    # keeps happening at the same place.
                    rip = self._rip()
                    spurious = spurious + 1 if rip == last_spurious else 1
                    last_spurious = rip
                    if spurious >= 3:
                        result = self._here("stopped", "emulation stopped")
                        break
            if remaining is not None and remaining <= 0:
                # every instruction counts, those before an early stop too: a guest
                # that traps or yields forever still ends at its budget
                rip = self._rip()
                result = RunResult(
                    "budget",
                    rip=rip,
                    rip_symbol=self.symbolize(rip),
                    detail=self._enosys_loop_detail(),
                    insns=int(max_insns),  # type: ignore[arg-type]  # a budget: remaining
                )
                break
            self.syscalls.poll_host_waits()  # a host stdin reader whose input came
            nxt = self._pick_next()
            if nxt is None and self.syscalls.idle():
                nxt = self._pick_next()  # idle: the clock jumped to a deadline
            if nxt is None and (self._stop_requested or (deadline and time.perf_counter() >= deadline)):
                continue  # waiting for the host ended by a stop or the timeout
            if nxt is None:
                result = self._here("stopped", "deadlock: every task is blocked")
                break
            self.context_switch(nxt)
            self.release_task_mms()
        return result

    def _pick_next(self):
        """The task to switch to: the seeded pick of the one CPU, or with several the
        task of the CPU to run next (:meth:`Scheduler.pick_smp`)."""
        s = self.scheduler
        if s.nr_cpu_ids == 1:
            return s.pick(self.tasks)
        return s.pick_smp(self.tasks, self.syscalls.clock_ns)

    def _time_passes(self, insns: int) -> None:
        """A slice of ``insns`` instructions' time ran (``update_curr``): on one CPU
        the machine's clock moves that far; with several, the CPU that ran it does,
        and the machine's clock follows the CPU that got furthest (never back), with
        the timers due by then expiring."""
        s, sc = self.scheduler, self.syscalls
        if s.nr_cpu_ids == 1:
            sc.cpu_time_passes(insns)
            return
        cpu = s.this_cpu
        s.clock[cpu] += insns * INSN_NS
        if s.clock[cpu] > sc.clock_ns:
            sc.clock_ns = s.clock[cpu]
        sc.run_expired_timers()

    def current_cpu(self) -> int:
        """The CPU the current task runs on (``smp_processor_id()``, ``task_cpu(current)``)."""
        return self.task.cpu

    def _slice_limits(self, multi: bool, remaining: int | None) -> tuple[int, int | None, bool]:
        """(count, blocks, short) of the next start: the engine's instruction counter
        carries the budget only (0: none), the block quantum the time slice (None: one
        task, no slice; where the quantum is not native the slice is an instruction
        count); ``short``: the slice ends soon enough for the timeout to wait for it."""
        count = remaining or 0
        quantum = self.engine.quantum
        if not multi:
            if quantum.native:
                quantum.detach(self.cpu)  # one task left: nothing counts its blocks
            return count, None, 0 < count <= SHORT_SLICE_INSNS
        n = self._slice_length()
        short = n <= ALONE_SLICE or 0 < count <= SHORT_SLICE_INSNS
        if quantum.native:
            quantum.attach(self.cpu)
            return count, n, short
        return (min(n, count) if count else n), None, short

    def _slice_length(self) -> int:
        """A seeded slice (ALONE_SLICE blocks when no other task can run: a wake-up
        cuts it), ended at the next sleeper's or timer's deadline on the virtual clock,
        so the spinning task that makes the time pass wakes it exactly then."""
        native = self.engine.quantum.native
        alone = native and not any(t.state == "running" and t is not self.task for t in self.tasks)
        n = ALONE_SLICE if alone else self.scheduler.slice()
        sc = self.syscalls
        due = [t for t in (sc.next_poll_deadline_ns(), sc.next_timer_ns()) if t is not None]
        if due:
            per = INSN_NS * (BLOCK_INSNS if native else 1)
            s = self.scheduler
            now = sc.clock_ns if s.nr_cpu_ids == 1 else s.clock[s.this_cpu]
            n = max(1, min(n, -(-(min(due) - now) // per)))
        return n

    def _cpu_time(self, blocks: int | None, insns: int | None) -> int:
        """The instructions of virtual time the last slice took: its blocks at
        BLOCK_INSNS each (the same whether a budget counts or not, so a budget does not
        change the interleaving), or its counted instructions."""
        if blocks is not None:
            return self.engine.quantum.ran() * BLOCK_INSNS
        return insns or 0

    def _enosys_loop_detail(self) -> str:
        """For a run that ran out of time or budget: if the task's last syscall was one
        the model does not provide, name it - a guest retrying an ENOSYS syscall in a
        loop is the usual reason."""
        nr = self.task.last_enosys
        if nr is None:
            return ""
        return enosys_detail(nr, self.counters.unknown_syscalls.get(f"{nr}:{SYSCALL_NAMES.get(nr, '?')}", 0))

    def _rip(self) -> int:
        return self.engine.pc(self.cpu)

    def _emulate(self, rip: int, left: float | None, count: int, blocks: int | None = None) -> bool:
        """One engine start on the current task, for at most ``count`` instructions (0:
        no limit) and ``blocks`` translated blocks (None: no limit); True when a hook
        or fault ended it."""
        task = self.task
        return self.engine.start(self.cpu, rip, left, count, blocks) or task.state != "running"

    def _why_returned(self, task, start: float, timeout: float | None, count: int) -> str:
        """The start came back by itself: the slice was used up, a hlt (#GP), the time
        limit, or the count (``count``: the start's instruction limit, 0 for none)."""
        engine = self.engine
        if engine.quantum.expired():
            return "slice"
        rip = self._rip()
        # the budget ran out (every counted run of a recorder): as after a time slice,
        # a 0xf4 byte before rip is most likely the end of some other instruction
        spent = bool(count) and engine.insns_run(count, False, self.cpu) >= count
        try:
            if engine.hlt_before(self.mem, rip, count if len(self.tasks) > 1 or spent else 0):
                regs = self.read_regs()
                regs.rip = rip - 1
                self.write_regs(regs)
                self.send_sig(task, SIGSEGV, addr=0, detail="general protection (hlt)")
                self.exit_to_user_mode_loop(task, regs)
                return "hlt"
        except GuestFault:
            pass
        if timeout and time.perf_counter() - start >= timeout * 0.99:
            return "timeout"
        return "count" if count else "stopped"

    def context_switch(self, task) -> None:
        """Context switch: save the outgoing task's CPU state, restore the incoming one's."""
        engine = self.engine
        cur = self.task
        if task is not cur:
            self._account()
            if cur.state != "dead":
                cur.context = engine.context_save(cur.process.cpu)
            self.scheduler.record(task)
            self.task = task
            if task.context is not None:
                engine.context_restore(task.process.cpu, task.context)
                task.context = None
        if task.rseq and task.rseq_cpu != task.cpu and self.scheduler.nr_cpu_ids > 1:
            rseq_update_cpu_node_id(task.process.mem, task)  # it moved: rseq_migrate
        if task.pending_rax is not None:
            engine.reg_write(task.process.cpu, "rax", task.pending_rax)
            task.pending_rax = None
        if task.on_resume is not None:
            resume, task.on_resume = task.on_resume, None
            resume()

    def _account(self) -> None:
        """Charge the counters' growth since the last switch to the current task and
        its process (per-task counters cost nothing on the hot path)."""
        now = self.counters.snapshot()
        self.task.counters.add_delta(self._acct, now)
        self.task.process.counters.add_delta(self._acct, now)
        self._acct = now

    def step(self) -> RunResult | None:
        """Execute exactly one instruction of the current task, with the traps, probes
        and faults handled exactly as in :meth:`run`; the RunResult when the guest
        ended, else None (see ``emu.machine.Machine.step``)."""
        engine = self.engine
        engine.translation_mode(self.cpu, "step")
        engine.icount += 1
        task = self.task
        if self._finish_sleep(task):
            return self._result
        rip = self._rip()
        if engine.is_hlt(self.mem, rip):
            regs = self.read_regs()
            self.send_sig(task, SIGSEGV, addr=0, detail="general protection (hlt)")
            self.exit_to_user_mode_loop(task, regs)
        else:
            engine.in_step = True
            try:
                self._emulate(rip, None, 1)
            finally:
                engine.in_step = False
            if engine.stop_precounted:
                engine.icount -= 1  # a code hook stopped it before it ran
        engine.raise_hook_error()
        return self._result

    def select_task(self, task) -> None:
        """Make runnable ``task`` the current one, as a context switch would (a
        debugger's single step of one thread: gdb's ``vCont;s:TID``).  Only between
        runs; a task that sleeps or is gone raises InputError."""
        if self.engine.running or task not in self.tasks or task.state != "running":
            raise InputError(f"thread {task.tid} cannot be scheduled now")
        if self.scheduler.nr_cpu_ids > 1:
            self.scheduler.set_curr(task)
        self.context_switch(task)

    def _finish_sleep(self, task) -> bool:
        """Before a single step of a task that slept in a syscall: with nobody else to
        run, the idle machine wakes it (the clock jumps to its deadline); once awake its
        syscall completes as in :meth:`run` (result, signal, restart).  True when that
        kernel work was the step (a handler frame, or the guest ended)."""
        if task.state == "blocked" and not any(t.state == "running" for t in self.tasks):
            self.syscalls.idle()
        if task.state != "running":
            return False
        if task.pending_rax is not None or task.on_resume is not None:
            self.context_switch(task)
        return self._resume_exit_work(task)

    def block(self, task, reason: str, *, interrupt=None) -> None:
        """Put ``task`` to sleep in a syscall; :meth:`wake` completes it with a value.
        ``interrupt``: the syscall's result when a signal wakes it (an int, or a callable
        computing it at that moment, e.g. a partial count); None sleeps through signals
        (TASK_UNINTERRUPTIBLE / killable: vfork, an XOL slot)."""
        task.state = "blocked"
        task.blocked_on = reason
        task.sleep_interrupt = interrupt
        if interrupt is not None and self.signal_pending(task):
            self.signal_wake_up(task)  # prepare_to_wait saw the signal: no sleep

    def wake(self, task, rax: int | None) -> None:
        """Make a sleeping task runnable; ``rax`` completes its syscall (None: it did not
        sleep in a syscall)."""
        if task.state == "blocked":
            task.state = "running"
            task.blocked_on = None
            task.sleep_interrupt = None
            if rax is not None:
                task.pending_rax = rax & 0xFFFFFFFFFFFFFFFF
            quantum = self.engine.quantum
            if self.engine.running and task is not self.task and quantum.armed:
                quantum.shorten(self.scheduler.slice())  # the woken task runs soon

    def yield_cpu(self) -> None:
        """sched_yield and friends: reschedule after this syscall."""
        self._switch_requested = True

    def request_stop(self, detail: str) -> None:
        """Ask a running guest to stop at the next opportunity (thread-safe); see
        ``emu.machine.Machine.stop``."""
        engine = self.engine
        self._stop_requested = detail
        engine.stopped_by_hook = True
        if engine.in_code_hook:
            engine.stop_precounted = True  # the engine counted the instruction it will not run
        engine.emu_stop(self.cpu)

    def interrupted(self) -> bool:
        """Must a waiting read give up?  The run's timeout fired (the engine's timer)
        or a stop / Ctrl-C was requested."""
        if self._stop_requested is not None or self.engine.timed_out(self.cpu):
            return True
        return self._run_deadline is not None and time.perf_counter() >= self._run_deadline
