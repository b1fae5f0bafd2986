"""The trap handlers (arch/x86/kernel/traps.c): #BP (``exc_int3`` ->
``do_int3_user``), #DB (``exc_debug_user``), #DE, #GP (``exc_general_protection``), #PF
(``exc_page_fault`` -> ``do_user_addr_fault``) and invalid opcodes - each becomes the
uprobes notifier's work, a handled fault or a signal, delivered at the exit to user mode."""

from __future__ import annotations

from emu.engine.interface import INVALID_OPCODE, REGISTERS_STORED, Vector
from kernel_model.arch.x86.kernel.signal import SI_KERNEL
from kernel_model.arch.x86.mm.fault import SEGV_ACCERR, BadArea, do_user_addr_fault
from kernel_model.arch.x86.mm.pgtable import X86_PF_INSTR
from kernel_model.kernel.kernel_base import KernelBase
from kernel_model.kernel.resource import RLIMIT_STACK
from kernel_model.kernel.signals import SIGNALS
from kernel_model.mm.mm_types import STACK_LIMIT
from kernel_model.trace import events as ev

SIGILL, SIGFPE, SIGSEGV = (SIGNALS[n] for n in ("SIGILL", "SIGFPE", "SIGSEGV"))
_FAULT_RETRIES = 3  # the same fault, the tables unchanged, this often in a row: SIGSEGV


class Traps(KernelBase):
    """The trap handler the engine reports to (:class:`emu.engine.interface.TrapHandler`):
    part of :class:`kernel_model.kernel.kernel.Kernel`."""

    @property
    def int3_needs_exc_int3(self) -> bool:
        """Must the next #BP go through :meth:`exc_int3`, whatever its site (a
        breakpoint fast path asks)?  When the run has ended, or a syscall returned with
        TF and its #DB is still owed."""
        return self._result is not None or self._db_after_syscall is not None

    def exc_int3(self, cpu) -> None:
        """#BP (exc_int3 -> do_int3_user): the hit path of every int3 probe.  The
        general registers are the CPU state in place (``TrapRegs``), rip and TF are
        read at once and stored at the end if changed, eflags and the bases only if
        asked for; with no signal queued the exit to user mode is a check of two lists."""
        task = self.task
        if task.process.cpu is not cpu:
            return  # a trap of a CPU state an execve replaced
        if self._db_after_syscall is not None:
            self._db_after_syscall = None
        if self._result is not None or task.state == "dead":
            return  # a trap still pending after the task exited
        rf = task.process.cpu_regs
        regs = rf.trap_regs(task.orig_rax)
        self.counters.bp_traps += 1
        self.do_int3(task, regs)
        self.exc_int3_exit(task, regs, cpu, rf)

    def exc_int3_exit(self, task, regs, cpu, rf) -> int:
        """The end of a #BP: the exit to user mode (a queued signal, a syscall to
        restart), a single step over an instruction that raises no #DB, a task that
        went to sleep, then the registers the handlers changed into the CPU.  Returns
        REGISTERS_STORED (what a breakpoint fast path that ends here tells the engine)."""
        orig_rax = regs.orig_rax
        if (
            task.pending_signals
            or task.process.signal.shared_pending
            or (orig_rax is not None and orig_rax >= 0 and self.restart_code(regs) is not None)
        ) and self.exit_to_user_mode_loop(task, regs):
            return REGISTERS_STORED
        if regs.tf and self.engine.skips_tf_trap(task.process.mem, regs.rip):
            self._single_step_pause(task, regs)
            if self.exit_to_user_mode_loop(task, regs):
                return REGISTERS_STORED
        if task.state != "running":
            self.write_regs(regs)
            self.engine.stop(cpu)  # the task sleeps (e.g. for an XOL slot)
            return REGISTERS_STORED
        if regs._dirty or regs.rip != regs._rip0 or regs.tf != regs._tf0:
            rf.write_back(regs)
        task.orig_rax = regs.orig_rax
        return REGISTERS_STORED

    def exc_debug(self, cpu) -> None:
        """#DB (exc_debug_user): the end of an out-of-line single-step, else SIGTRAP;
        the registers as lazily as at an int3."""
        task = self.task
        if task.process.cpu is not cpu:
            return  # the #DB of a TF step whose syscall was an execve: that CPU state is gone
        after = self._db_after_syscall
        if after is not None:
            self._db_after_syscall = None
            if after[0] is task and after[1] == self.engine.pc(cpu):
                return  # the engine's #DB right after a syscall left with TF: see do_syscall_64
        if self._result is not None or task.state == "dead":
            return  # a trap still pending after the task exited (e.g. #DB of TF)
        rf = task.process.cpu_regs
        regs = rf.trap_regs(task.orig_rax)
        self.counters.db_traps += 1
        self.do_debug(task, regs)
        orig_rax = regs.orig_rax
        if (
            task.pending_signals
            or task.process.signal.shared_pending
            or (orig_rax is not None and orig_rax >= 0 and self.restart_code(regs) is not None)
        ) and self.exit_to_user_mode_loop(task, regs):
            return
        rf.write_back(regs)
        task.orig_rax = regs.orig_rax

    def _single_step_pause(self, task, regs) -> None:
        """Execute ``pause`` (no architectural effect) and take the #DB the hardware
        would raise after it, as the trap handler would see it."""
        regs.rip += self.engine.skips_tf_trap(task.process.mem, regs.rip)
        self.counters.db_traps += 1
        if self.events:
            self.events.publish(ev.UnicornQuirk(task, "pause single-step"))
        self.do_debug(task, regs)

    def exc_interrupt(self, cpu, intno: int) -> None:
        """#DE, and ``int $n``: the ia32 syscall gate (not modeled: ENOSYS) or a
        kernel-only gate (#GP)."""
        task = self.task
        if task.process.cpu is not cpu:
            return
        self._db_after_syscall = None
        if task.state == "dead" or self._result is not None:
            return
        regs = self.read_regs()
        if intno == Vector.DE:
            self.fixup_fault(task, regs)
            self.write_regs(regs)
            self.send_sig(task, SIGFPE, addr=regs.rip, detail="integer divide error")
        elif intno == 0x80:
            # int $0x80 enters the ia32 syscall table, which this model does not provide
            self.counters.unknown_syscalls["int80:" + str(regs.rax & 0xFFFFFFFF)] += 1
            regs.rax = -38  # -ENOSYS
        else:
            # int $n with a kernel-only gate: #GP, reported at the int instruction
            regs.rip -= 2
            self.fixup_fault(task, regs)
            self.write_regs(regs)
            cr2 = task.thread_fault[2] if task.thread_fault else 0
            task.thread_fault = (Vector.GP, (intno << 3) | 2, cr2)  # the error code names the IDT entry
            self.send_sig(task, SIGSEGV, addr=0, code=SI_KERNEL, detail=f"general protection (int ${intno:#x})")
        if self.exit_to_user_mode_loop(task, regs):
            return
        self.write_regs(regs)

    def exc_page_fault(self, cpu, address: int, error_code: int | None = None) -> bool:
        """#PF (exc_page_fault -> do_user_addr_fault): handled faults return to the
        instruction, which runs again; the others become SIGSEGV with the address and
        SEGV_MAPERR or SEGV_ACCERR, reported at the instruction.  True for a handled
        data fault (see :meth:`emu.engine.interface.TrapHandler.exc_page_fault`)."""
        task = self.task
        if task.process.cpu is not cpu:
            return False
        self._db_after_syscall = None
        if task.state == "dead" or self._result is not None:
            return False
        mem = task.process.mem
        rip = self.engine.pc(cpu)
        self.counters.page_faults += 1
        bad, error_code, progressed = do_user_addr_fault(mem, address, rip, self.stack_limit(task), error_code)
        if bad is None:
            key = (address, rip)
            if progressed or key != self._last_fault[0]:
                self._last_fault[:] = [key, 0]
                return not error_code & X86_PF_INSTR
            self._last_fault[1] += 1  # the tables allowed it already
            if self._last_fault[1] <= _FAULT_RETRIES:
                return not error_code & X86_PF_INSTR
            bad = BadArea(address, SEGV_ACCERR, error_code)  # a fault nothing fixes
        self._last_fault[:] = [None, 0]
        regs = self.read_regs()
        self.fixup_fault(task, regs)
        self.write_regs(regs)
        task.thread_fault = (Vector.PF, bad.error_code, address)
        self.send_sig(
            task,
            SIGSEGV,
            addr=address,
            code=bad.si_code,
            detail=("read", "write")[bool(bad.error_code & 2)] + " fault"
            if not bad.error_code & 0x10
            else "fetch fault",
        )
        if not self.exit_to_user_mode_loop(task, regs):
            self.write_regs(regs)
        return False

    def exc_general_protection(self, cpu) -> None:
        """#GP from user mode (exc_general_protection -> gp_user_force_sig_segv): a
        non-canonical address, for one.  SIGSEGV with SI_KERNEL and no address; the
        sigcontext reports trap 13, error code 0 and the last fault's cr2."""
        task = self.task
        if task.process.cpu is not cpu or task.state == "dead" or self._result is not None:
            return
        self._db_after_syscall = None
        regs = self.read_regs()
        self.fixup_fault(task, regs)
        self.write_regs(regs)
        cr2 = task.thread_fault[2] if task.thread_fault else 0
        task.thread_fault = (Vector.GP, 0, cr2)
        self.send_sig(task, SIGSEGV, addr=0, code=SI_KERNEL, detail="general protection")
        if not self.exit_to_user_mode_loop(task, regs):
            self.write_regs(regs)

    def stack_limit(self, task) -> int:
        """RLIMIT_STACK's soft limit of ``task``'s process (what the stack may grow to)."""
        try:
            return self.syscalls.rlimits_of(task.process)[RLIMIT_STACK][0]
        except (AttributeError, IndexError, TypeError):
            return STACK_LIMIT

    def exc_port_io(self) -> None:
        """``in`` / ``out`` in user mode without I/O permission: #GP."""
        task = self.task
        self.send_sig(task, SIGSEGV, addr=0, detail="general protection (port I/O)")
        self.exit_to_user_mode_loop(task, self.read_regs())

    def exc_fault(self, kind: str, addr: int) -> None:
        """An invalid opcode (#UD: SIGILL) or a page fault (SIGSEGV at ``addr``) ended
        the engine's run."""
        task = self.task
        if self._result is not None or self.engine.hook_error is not None or task.state == "dead":
            return
        regs = self.read_regs()
        self.fixup_fault(task, regs)
        self.write_regs(regs)
        if kind == INVALID_OPCODE:
            self.send_sig(task, SIGILL, addr=regs.rip, detail="invalid opcode")
        else:
            self.send_sig(task, SIGSEGV, addr=addr, detail=f"{kind} fault")
        self.exit_to_user_mode_loop(task, regs)

    def trap_access_fault(self, fault, at_breakpoint: bool = False) -> None:
        """Trap handling touched guest memory that is not there (an XOL slot or a
        trampoline whose special page the guest unmapped): the task faults at that
        address, as it would on the instruction fetch there - SIGSEGV, not a crash.
        At a breakpoint the task is left at the probed instruction, where the kernel's
        arch_uprobe_abort_xol puts it after a faulting step."""
        try:
            task = self.task
            regs = self.read_regs()
            if at_breakpoint:
                regs.rip -= 1
            self.fixup_fault(task, regs)
            self.send_sig(task, SIGSEGV, addr=fault.addr, detail=f"{fault.access} fault")
            self.exit_to_user_mode_loop(task, regs)
        except BaseException as e:  # noqa: BLE001 - re-raised in run()
            self.engine.hook_error = e
        self.engine.stop(self.cpu)
