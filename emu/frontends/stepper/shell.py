"""The gdb-like command shell over a :class:`~emu.debug.stepper.Stepper` (the pdb
half of the stepper): :class:`StepperShell` parses commands, turns them into engine verbs
and prints the results as gdb does, and ``uprobe-emu step`` (:func:`add_cli`,
:func:`cmd_step`) runs it on a guest.

The shell follows gdb 13's output for the same commands (checked against a real gdb in
tests/test_stepper.py) with these differences: each stop is followed by the next
instruction (``=> 0x401005 <f+5>:\tmov ...``, as gdb's ``display/i $pc`` shows it), in
capstone's Intel syntax; ``b SYMBOL`` breaks at the symbol's first instruction (gdb skips a
``push rbp; mov rbp, rsp`` prologue); ``info registers`` lists no k0-k7 (the emulated CPU
has no AVX-512); errors never abort a command file.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from typing import Callable

from emu.debug import reverse
from emu.debug.disasm import annotation
from emu.debug.format import natural, signed
from emu.debug.stepper import Breakpoint, Catchpoint, Stepper, StepperError, StopEvent, Watchpoint
from emu.frontends.gdbstub.svr4 import Svr4Libraries
from emu.frontends.launch import add_cli_events, events_output, make_machine
from emu.inspect import GuestFault, process_auxv, registered_uprobes, signal_name
from kernel_model.errors import EmuError

_SIGNAL_TEXT = {
    "SIGSEGV": "Segmentation fault",
    "SIGILL": "Illegal instruction",
    "SIGTRAP": "Trace/breakpoint trap",
    "SIGFPE": "Arithmetic exception",
    "SIGBUS": "Bus error",
    "SIGABRT": "Aborted",
    "SIGKILL": "Killed",
    "SIGSYS": "Bad system call",
    "SIGTERM": "Terminated",
    "SIGINT": "Interrupt",
    "SIGPIPE": "Broken pipe",
    "SIGALRM": "Alarm clock",
}
_REVERSE_VERBS = {
    "rsi": "reverse-stepi",
    "reverse-stepi": "reverse-stepi",
    "rs": "reverse-step",
    "reverse-step": "reverse-step",
    "rni": "reverse-step",
    "reverse-nexti": "reverse-step",
    "rc": "reverse-continue",
    "reverse-continue": "reverse-continue",
}
_X_SIZES = {"b": 1, "h": 2, "w": 4, "g": 8}
_X_PER_LINE = {1: 8, 2: 8, 4: 4, 8: 2}

HELP = """\
Commands (gdb-like):
  si [N], stepi [N]         one guest instruction (a probed one counts as one)
  ni [N], nexti [N]         same, but a call runs until it returns
  c, continue               run until a breakpoint or the end
  rsi, reverse-stepi [N]    back N guest instructions (replayed from a checkpoint)
  rs, reverse-step [N]      back N instructions of this frame (a call undone as one)
  rc, reverse-continue      back to the previous breakpoint hit, or the start
  run, starti               gdb compatibility: the guest waits at its entry already
  finish                    run until the current function returns
  until LOCATION            run until LOCATION (also: advance)
  b, break SYMBOL|*ADDR     breakpoint (never a uprobe; memory is not changed); a symbol
                            of a library not loaded yet is a pending breakpoint
  catch exec                stop when the program execs, in the new image
  watch|rwatch|awatch EXPR  stop after a write / read / access of the 8 bytes at EXPR
                            (a sized data symbol: its size)
  delete [N...]             delete breakpoints (all without N)
  info registers [REG...]   registers in gdb's layout (i r)
  info breakpoints          breakpoints (i b)
  info symbol ADDR          the symbol at ADDR, its section and file (PLT stubs: malloc@plt)
  x/NFU ADDR                memory: F = x d u i, U = b h w g (x/8bx, x/4gx, x/5i $pc)
  disas [LOCATION]          the function, objdump-like, => marks rip
  bt, backtrace             frames by .eh_frame CFI (a pending uretprobe shows the real
                            return address)
  set backtrace past-main on|off   frames beyond main (and finish out of main)
  set breakpoint pending on|off    break on a symbol of a library not loaded yet (on)
  p[/x] EXPR                print ($reg, numbers, symbols, + and -)
  set $REG = EXPR           write a register
  probe list|enable N|disable N    the uprobe consumers (-e events)
  q, quit                   leave"""


class StepperShell:
    """The ``uprobe-emu step`` command language over a :class:`Stepper`.

    ``execute(line)`` runs one command; output goes to ``out``, error lines to ``err``.
    Errors never stop the shell.
    """

    def __init__(self, stepper: Stepper, out=None, err=None):
        self.s = stepper
        self.m = stepper.machine
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.history = 0  # gdb's $N value history counter
        self.quit = False
        self._x_last = ("x", 4)
        self._watch_values: dict[int, int] = {}  # watchpoint number -> value last shown
        self.errors = 0
        self.interactive = False
        self.pending = True  # gdb's `set breakpoint pending on`
        # most take the argument text; print and x take a /FMT too (see execute)
        self._commands: dict[str, Callable[..., None]] = {
            "si": self.cmd_stepi,
            "stepi": self.cmd_stepi,
            "ni": self.cmd_nexti,
            "nexti": self.cmd_nexti,
            "r": self.cmd_run,
            "run": self.cmd_run,
            "starti": self.cmd_starti,
            "c": self.cmd_continue,
            "cont": self.cmd_continue,
            "continue": self.cmd_continue,
            "finish": self.cmd_finish,
            "fin": self.cmd_finish,
            "until": self.cmd_until,
            "u": self.cmd_until,
            "advance": self.cmd_until,
            "b": self.cmd_break,
            "br": self.cmd_break,
            "break": self.cmd_break,
            "catch": self.cmd_catch,
            "d": self.cmd_delete,
            "delete": self.cmd_delete,
            "i": self.cmd_info,
            "info": self.cmd_info,
            "disas": self.cmd_disas,
            "disassemble": self.cmd_disas,
            "bt": self.cmd_bt,
            "backtrace": self.cmd_bt,
            "where": self.cmd_bt,
            "p": self.cmd_print,
            "print": self.cmd_print,
            "set": self.cmd_set,
            "watch": self.cmd_watch,
            "rwatch": self.cmd_rwatch,
            "awatch": self.cmd_awatch,
            "probe": self.cmd_probe,
            "x": self.cmd_x,
            "q": self.cmd_quit,
            "quit": self.cmd_quit,
            **{name: functools.partial(self.cmd_reverse, verb=verb) for name, verb in _REVERSE_VERBS.items()},
            "help": self.cmd_help,
            "h": self.cmd_help,
        }

    # ------------------------------------------------------------------ driver
    def execute(self, line: str) -> None:
        """Run one command line; an error prints one line on ``err``."""
        line = line.strip()
        if not line or line.startswith("#"):
            return
        head, _, rest = line.partition(" ")
        fmt = ""
        if "/" in head:
            head, fmt = head.split("/", 1)
        fn = self._commands.get(head)
        try:
            if fn is None:
                raise StepperError(f'Undefined command: "{head}".  Try "help".')
            if fmt and fn not in (self.cmd_x, self.cmd_print):
                raise StepperError(f'Undefined command: "{head}/{fmt}".  Try "help".')
            if fn in (self.cmd_x, self.cmd_print):
                fn(rest.strip(), fmt)
            else:
                fn(rest.strip())
        except (EmuError, GuestFault) as e:
            self.errors += 1
            msg = str(e) if isinstance(e, EmuError) else f"Cannot access memory at address {e.addr:#x}"
            self._flush()
            print(msg.splitlines()[0] if msg else type(e).__name__, file=self.err)
            self.err.flush()
        self._flush()

    def run_lines(self, lines) -> None:
        for line in lines:
            if self.quit:
                return
            self.execute(line)

    def interact(self, stream=None, prompt: str = "(uprobe-emu) ") -> None:
        """Read commands until EOF or ``q``; prompt only on a terminal."""
        stream = stream if stream is not None else sys.stdin
        tty = stream.isatty()
        self.interactive = tty
        if tty:
            try:
                import readline  # noqa: F401 - line editing and history for input()
            except ImportError:
                pass
        last = ""
        while not self.quit:
            try:
                if tty:
                    line = input(prompt)
                else:
                    line = stream.readline()
                    if not line:
                        break
            except EOFError:
                if tty:
                    print("quit", file=self.out)
                break
            except KeyboardInterrupt:
                print("Quit", file=self.out)
                continue
            if tty and not line.strip():
                line = last  # gdb repeats the last command on Enter
            last = line
            self.execute(line)

    def _p(self, text: str = "") -> None:
        print(text, file=self.out)

    def _flush(self) -> None:
        try:
            self.out.flush()
        except (AttributeError, ValueError):
            pass

    # ------------------------------------------------------------------ stops
    def _where(self, rip: int) -> str:
        """gdb's frame line: ``0x... in FUNC ()``, `` from LIB`` in a shared library."""
        hit = self.s.symbol(rip)
        return f"{rip:#018x} in {hit[0] if hit else '??'} (){self._from(rip)}"

    def _xi_line(self, addr: int, current: bool) -> str:
        insn = self.s.disasm.decode(addr)
        label = self.s.label(addr)
        mark = "=> " if current else "   "
        text = insn.text + annotation(insn, lambda a: self.s.label(a))
        raw = self.s.raw_disasm.decode(addr)
        if raw.bytes != insn.bytes[: raw.size]:
            text += f"        # uprobe site, in memory: {raw.text}"
        return f"{mark}{addr:#x}{f' <{label}>' if label else ''}:\t{text}"

    def report(self, ev: StopEvent) -> None:
        """Print a stop the way gdb does, followed by the next instruction."""
        if ev.reason == "exit":
            code = ev.exit_code or 0
            pid = getattr(self.m, "main_process", self.m.process).pid
            if code:
                self._p(f"[Inferior 1 (process {pid}) exited with code 0{code:o}]")
            else:
                self._p(f"[Inferior 1 (process {pid}) exited normally]")
            return
        if ev.reason == "signal":
            if ev.signal is None:  # gdb's GDB_SIGNAL_UNKNOWN
                name, text = "?", "Unknown signal"
            else:
                name = signal_name(ev.signal)
                text = _SIGNAL_TEXT.get(name, name)
            self._p()
            self._p(f"Program terminated with signal {name}, {text}.")
            self._p(f"[{ev.detail}]")
            return
        rip = ev.rip
        if rip is None:  # only an ended program has no rip, and that was reported above
            raise StepperError(f"The program is not being run (stopped: {ev.reason}).")
        if ev.reason == "breakpoint" and ev.breakpoint is not None:
            self._p()
            self._p(f"Breakpoint {ev.breakpoint.number}, {self._where(rip)}")
        elif ev.reason == "watchpoint" and ev.watchpoint is not None:
            self._report_watch(ev.watchpoint)
            self._p(self._where(rip))
        elif ev.reason == "exec":
            self._p()
            what = (
                f"Catchpoint {ev.catchpoint.number} (exec'd {ev.exec_path})"
                if ev.catchpoint
                else f"Program stopped: exec'd {ev.exec_path}"
            )
            self._p(f"{what}, {self._where(rip)}")
        elif ev.reason == "stopped":
            self._p()
            self._p(f"Program stopped: {ev.detail}.")
            self._p(self._where(rip))
        else:
            self._p(self._where(rip))
        self._p(self._xi_line(rip, True))

    def _guest_run(self, fn, *args) -> None:
        self.s.exec_followed = False
        with self.m.interruptible():
            ev = fn(*args)
            if self.s.exec_followed and ev.reason == "step" and fn in (self.s.step, self.s.step_over):
                ev = self.s.cont()  # gdb 13 runs on after a stepi through an exec
        self._exec_notes()
        self.report(ev)

    # ------------------------------------------------------------------ commands
    def _count(self, arg: str) -> int:
        if not arg:
            return 1
        n = self.s.evaluate(arg)
        if n <= 0 or n > 1 << 40:
            raise StepperError(f"bad count {arg!r}")
        return n

    def cmd_stepi(self, arg: str) -> None:
        self._guest_run(self.s.step, self._count(arg))

    def cmd_nexti(self, arg: str) -> None:
        self._guest_run(self.s.step_over, self._count(arg))

    def cmd_reverse(self, arg: str, verb: str = "reverse-stepi") -> None:
        """``reverse-stepi [N]`` / ``reverse-step [N]`` / ``reverse-continue``
        (:mod:`emu.debug.reverse`); a stop at the start of the recorded history says so
        first, as gdb does."""
        with self.m.interruptible():
            rs = reverse.ReverseStepper.of(self.s)
            if verb == "reverse-continue":
                if arg:
                    raise StepperError("reverse-continue takes no argument")
                self._p("Continuing.")
                ev = rs.reverse_continue()
            elif verb == "reverse-stepi":
                ev = rs.reverse_stepi(self._count(arg))
            else:
                ev = rs.reverse_step(self._count(arg))
            if ev.reason == reverse.HISTORY_START:
                self._p()
                self._p("No more reverse-execution history.")
                ev = StopEvent("step", ev.rip, ev.symbol, ev.verb)
            self.report(ev)

    def cmd_continue(self, arg: str) -> None:
        self.s.require_alive()
        self._p("Continuing.")
        self._guest_run(self.s.cont)

    def _not_started(self) -> None:
        if self.s.insns or self.s.hidden_insns or self.s.last_event is not None:
            raise StepperError("The program being debugged has been started already.")

    def cmd_run(self, arg: str) -> None:
        """gdb's ``run``: the guest is loaded and waits at its entry; run it."""
        self._not_started()
        self._guest_run(self.s.cont)

    def cmd_starti(self, arg: str) -> None:
        """gdb's ``starti``: the guest already waits at its first instruction."""
        self._not_started()
        self._p()
        self._p("Program stopped.")
        self._p(self._where(self.s.rip))
        self._p(self._xi_line(self.s.rip, True))

    def cmd_finish(self, arg: str) -> None:
        self.s.require_alive()
        self.s.finish_target()  # the error, if any, comes first
        if self.interactive:  # gdb prints this only from a terminal
            self._p(f"Run till exit from #0  {self._where(self.s.rip)}")
        self._guest_run(self.s.finish)

    def cmd_until(self, arg: str) -> None:
        if not arg:
            raise StepperError("Argument required (a location).")
        self._guest_run(self.s.run_until, arg)

    def cmd_break(self, arg: str) -> None:
        """``break LOCATION``; a symbol no loaded file has is, as with gdb's ``set
        breakpoint pending on``, gdb's error line then a pending breakpoint (``set
        breakpoint pending off``: the error only)."""
        if not arg:
            self.s.require_alive()
            arg = f"*{self.s.rip:#x}"
        try:
            bp = self.s.break_at(arg)
        except StepperError as e:
            if not self.pending or arg.startswith("*") or not str(e).startswith("Function "):
                raise
            self._flush()
            print(e, file=self.err)
            self.err.flush()
            bp = self.s.break_pending(arg)
            self._p(f"Breakpoint {bp.number} ({arg}) pending.")
            return
        self._p(f"Breakpoint {bp.number} at {bp.address:#x}")

    def cmd_catch(self, arg: str) -> None:
        """gdb's ``catch exec`` (the only event caught here)."""
        if arg != "exec":
            raise StepperError(
                f'catch {arg}: only "catch exec" is supported here.'
                if arg
                else 'Argument required: "catch exec" (stop at an exec).'
            )
        cp = self.s.catch_exec()
        self._p(f"Catchpoint {cp.number} (exec)")

    def cmd_delete(self, arg: str) -> None:
        if not arg:
            self.s.delete()
            return
        for word in arg.split():
            try:
                n = int(word)
            except ValueError:
                raise StepperError(
                    f"Convenience variable must have integer value.\nbad breakpoint number: '{word}'"
                ) from None
            self.s.delete(n)

    def cmd_info(self, arg: str) -> None:
        what, _, rest = arg.partition(" ")
        if what in ("r", "reg", "registers"):
            names = [w.lstrip("$") for w in rest.split()]
            self._p(self.s.format_registers(names or None))
        elif what in ("b", "br", "break", "breakpoints"):
            self._info_breakpoints()
        elif what in ("probes", "probe"):
            self._probe_list()
        elif what in ("symbol", "sym"):
            self._info_symbol(rest.strip())
        else:
            raise StepperError(f'Undefined info command: "{arg}".  Try "help info".')

    def _info_breakpoints(self) -> None:
        """gdb's table, in number order; the Address column is as wide as an address
        needs (10 without any resolved breakpoint: ``<PENDING>``, or catchpoints only)."""
        rows: dict[int, Breakpoint | Watchpoint | Catchpoint] = {
            **self.s.breakpoints,
            **self.s.pending_breakpoints(),
            **self.s.watchpoints,
            **self.s.catchpoints,
        }
        if not rows:
            self._p("No breakpoints or watchpoints.")
            return
        wide = bool(self.s.breakpoints)
        width = 18 if wide else 10
        self._p(f"Num     Type           Disp Enb {'Address':<{width}} What")
        for number in sorted(rows):
            item = rows[number]
            enb = "y" if item.enabled else "n"
            if isinstance(item, Watchpoint):
                kind = {"write": "hw watchpoint", "read": "read watchpoint", "access": "acc watchpoint"}
                self._p(
                    f"{number:<7} {kind[item.kind]:<14} keep {enb}{'':{width + 4}}{item.label or f'*{item.address:#x}'}"
                )
                noun = "breakpoint"
            elif isinstance(item, Catchpoint):
                what = f'exec, program "{item.exec_path}" ' if item.exec_path else "exec"
                self._p(f"{number:<7} {'catchpoint':<14} keep {enb}{'':{width + 4}}{what}")
                noun = "catchpoint"
            elif number in self.s.breakpoints:
                label = self.s.label(item.address)
                what = f"<{label}>" if label else ""
                self._p(f"{number:<7} {'breakpoint':<14} keep {enb}   {item.address:#018x} {what}".rstrip())
                noun = "breakpoint"
            else:
                self._p(f"{number:<7} {'breakpoint':<14} keep {enb}   {'<PENDING>':<{width}} {item.location}")
                noun = "breakpoint"
            if item.hits:
                self._p(f"\t{noun} already hit {item.hits} time{'s' if item.hits != 1 else ''}")

    def _info_symbol(self, arg: str) -> None:
        """gdb's ``info symbol ADDR``: ``NAME [+ N] in section SECTION of FILE`` (the
        program runs, so gdb has several objfiles and always names the file)."""
        if not arg:
            raise StepperError("Argument required (address).")
        addr = self.s.evaluate(arg)
        label = self.s.label(addr)
        vma = self.m.mem.find_vma(addr)
        section = self.s.plt.section(addr)
        if label is None or vma is None or vma.file is None or section is None:
            self._p(f"No symbol matches {arg}.")
            return
        name, plus, off = label.rpartition("+")
        if not (plus and off.isdigit()):
            name, off = label, ""
        where = f"{name} + {off}" if off else name
        self._p(f"{where} in section {section} of {self._objfile(vma)}")

    def _objfile(self, vma) -> str:
        """gdb's name of the file a mapping comes from: the program's path, a library's
        link_map name."""
        exe = self.m.process.exe
        if exe is not None and vma.file is exe:
            return exe.d_path or os.path.abspath(exe.path)
        bias = min(v.start for v in self.m.mem.vmas if v.file is vma.file)
        return self._solib_names().get(bias) or vma.file.path or vma.name

    def cmd_x(self, arg: str, fmt: str) -> None:
        count, letter, size = _parse_x_format(fmt, self._x_last)
        if not arg:
            raise StepperError("Argument required (starting display address).")
        addr = self.s.evaluate(arg)
        self._x_last = (letter, size) if letter != "i" else (self._x_last[0], self._x_last[1])
        if letter == "i":
            rip = self.s.rip if self.s.alive else None
            for _ in range(count):
                self._p(self._xi_line(addr, addr == rip))
                addr += self.s.disasm.decode(addr).size
            return
        data = self.s.read_program(addr, count * size)  # raises GuestFault as gdb's error
        per = _X_PER_LINE[size]
        for i in range(0, count, per):
            a = addr + i * size
            label = self.s.label(a)
            cells = []
            for j in range(i, min(count, i + per)):
                v = int.from_bytes(data[j * size : (j + 1) * size], "little")
                if letter == "x":
                    cells.append(f"0x{v:0{size * 2}x}")
                elif letter == "d":
                    cells.append(str(signed(v, size * 8)))
                else:
                    cells.append(str(v))
            self._p(f"{a:#x}{f' <{label}>' if label else ''}:\t" + "\t".join(cells))

    def cmd_disas(self, arg: str) -> None:
        rip = self.s.rip if self.s.alive else None
        if arg:
            where = self.s.resolve(arg)
        elif rip is None:
            raise StepperError("No frame selected.")
        else:
            where = rip
        name, start, end = self.s.function_range(where)
        sites = self.s.probe_sites()
        d = self.s.disasm
        self._p(f"{start:016x} <{name}>:")
        for insn in d.range(start, end):
            line = d.format(insn)
            if insn.address in sites:
                raw = self.s.raw_disasm.decode(insn.address)
                if raw.bytes != insn.bytes[: raw.size]:
                    first, nl, more = line.partition("\n")
                    line = f"{first}        # uprobe site, in memory: {raw.text}" + nl + more
            mark = "=> " if insn.address == rip else "   "
            self._p("\n".join(mark + part if k == 0 else "   " + part for k, part in enumerate(line.split("\n"))))

    def cmd_bt(self, arg: str) -> None:
        limit = self._count(arg) if arg else 64
        for f in self.s.backtrace(max_frames=limit):
            note = "  [uretprobe pending: saved return address is the trampoline]" if f.uretprobe else ""
            if f.signal:
                self._p(f"#{f.level:<2} <signal handler called>{note}")
                continue
            self._p(f"#{f.level:<2} {f.pc:#018x} in {f.function or '??'} (){self._from(f.pc)}{note}")

    def _from(self, pc: int) -> str:
        """gdb's `` from LIB`` after a frame in a shared object (not the program): the
        name the dynamic linker's link_map gives the library (gdb's solib list), else
        the path the file was opened by (the interpreter's PT_INTERP before ld.so ran)."""
        vma = self.m.mem.find_vma(pc)
        if vma is None or vma.file is None or vma.file is self.m.process.exe:
            return ""
        bias = min(v.start for v in self.m.mem.vmas if v.file is vma.file)
        return f" from {self._solib_names().get(bias) or vma.file.path or vma.name}"

    def _solib_names(self) -> dict[int, str]:
        """{l_addr: l_name} of the svr4 library list in guest memory (empty before ld.so
        linked it, or for a static program)."""

        def peek(addr: int, n: int) -> bytes:
            try:
                return self.s.read_program(addr, n)
            except GuestFault:
                vma = self.m.mem.find_vma(addr)
                return self.s.read_program(addr, min(n, vma.end - addr)) if vma is not None else b""

        lists = Svr4Libraries(peek, process_auxv(self.m, self.m.process, self.m.task))
        doc = lists.document() or b""
        return {
            int(a, 16): n.decode("utf-8", "replace")
            for n, a in re.findall(rb'<library name="([^"]*)" lm="0x[0-9a-f]+" l_addr="0x([0-9a-f]+)"', doc)
        }

    def _set_backtrace(self, arg: str) -> None:
        """``set backtrace past-main on|off`` (gdb's setting: frames beyond main, and
        ``finish`` out of main)."""
        words = arg.split()
        values = {"on": True, "1": True, "yes": True, "off": False, "0": False, "no": False}
        if len(words) != 2 or words[0] != "past-main" or words[1] not in values:
            raise StepperError("usage: set backtrace past-main on|off")
        self.s.past_main = values[words[1]]

    def _exec_notes(self) -> None:
        for stream, line in self.s.take_exec_notes():
            if stream == "err":
                self._flush()
                print(line, file=self.err)
                self.err.flush()
            else:
                self._p(line)

    def cmd_print(self, arg: str, fmt: str) -> None:
        value, kind = self.s.evaluate_typed(arg)
        self.history += 1
        if fmt in ("x", "d", "u"):
            bits = int(kind[3:]) if kind.startswith("int") else 64
            v = value & ((1 << bits) - 1)
            text = f"{v:#x}" if fmt == "x" else str(signed(v, bits) if fmt == "d" else v)
        elif fmt:
            raise StepperError(f'Undefined output format "{fmt}".')
        elif kind == "code_ptr":
            text = "(void (*)()) " + natural(value, kind, lambda a: self.s.label(a))
        elif kind == "data_ptr":
            text = "(void *) " + natural(value, kind)
        else:
            text = natural(value, kind)
        self._p(f"${self.history} = {text}")

    def cmd_set(self, arg: str) -> None:
        if arg.startswith("backtrace "):
            self._set_backtrace(arg[len("backtrace ") :])
            return
        if arg.split()[:2] == ["breakpoint", "pending"]:
            words = arg.split()
            if len(words) != 3 or words[2] not in ("on", "off", "auto"):
                raise StepperError('"on", "off" or "auto" expected.')
            self.pending = words[2] != "off"
            return
        if arg.startswith("var "):
            arg = arg[4:].strip()
        lhs, eq, rhs = arg.partition("=")
        lhs = lhs.strip()
        if not eq or not lhs.startswith("$"):
            raise StepperError("usage: set $REG = EXPR")
        self.s.set_register(lhs[1:], self.s.evaluate(rhs))

    def cmd_probe(self, arg: str) -> None:
        words = arg.split()
        if not words or words[0] == "list":
            self._probe_list()
            return
        if words[0] in ("enable", "disable") and len(words) == 2:
            cons = self._consumers()
            try:
                uc = cons[int(words[1])]
            except (ValueError, KeyError):
                raise StepperError(f"No probe number {words[1]}.") from None
            uc.enabled = words[0] == "enable"
            return
        raise StepperError("usage: probe list | probe enable N | probe disable N")

    def _consumers(self) -> dict:
        out = {}
        for uprobe in registered_uprobes(self.m):
            for uc in uprobe.consumers:
                out[uc.id] = uc
        return dict(sorted(out.items()))

    def _probe_list(self) -> None:
        cons = self._consumers()
        if not cons:
            self._p("No uprobes.")
            return
        events = {id(ev.consumer): ev for ev in self.m.uprobes.trace.events}
        self._p("Num     Enb Hits       Address            What")
        for n, uc in cons.items():
            up = uc.uprobe
            addrs = self.m.uprobes.vaddr_of(self.m.process, up.file, up.offset)
            addr = f"{addrs[0]:#018x}" if addrs else f"{'<not mapped>':<18}"
            label = self.s.label(addrs[0]) if addrs else None
            ev = events.get(id(uc))
            kind = "uretprobe" if uc.ret_handler is not None and uc.handler is None else "uprobe"
            name = ev.name if ev is not None else (uc.name or kind)
            hits = ev.hits if ev is not None else uc.hits
            where = f" <{label}>" if label else ""
            self._p(f"{n:<7} {'y' if uc.enabled else 'n'}   {hits:<10} {addr}{where} {name} ({kind})")

    def _watch(self, arg: str, kind: str) -> None:
        if not arg:
            raise StepperError("Argument required (expression to compute).")
        size = 8
        name = arg[1:] if arg.startswith("&") else arg
        exe = self.m.process.exe
        sym = exe.elf.symbols.get(name) if exe is not None and exe.elf is not None else None
        if sym is not None and sym.size in (1, 2, 4, 8):
            size = sym.size
        wp = self.s.watch(arg if sym is None else f"*{self.m.resolve(name):#x}", size, kind)
        wp.label = arg
        self._watch_values[wp.number] = self._watch_value(wp)
        title = {
            "write": "Hardware watchpoint",
            "read": "Hardware read watchpoint",
            "access": "Hardware access (read/write) watchpoint",
        }[kind]
        self._p(f"{title} {wp.number}: {arg}")

    def cmd_watch(self, arg: str) -> None:
        self._watch(arg, "write")

    def cmd_rwatch(self, arg: str) -> None:
        self._watch(arg, "read")

    def cmd_awatch(self, arg: str) -> None:
        self._watch(arg, "access")

    def _watch_value(self, wp) -> int:
        return int.from_bytes(self.s.read_program(wp.address, wp.size), "little")

    def _report_watch(self, wp: Watchpoint) -> None:
        """gdb's report of a watchpoint trigger: Old/New for a change, else Value."""
        old, new = self._watch_values.get(wp.number), self._watch_value(wp)
        self._watch_values[wp.number] = new
        title = {
            "write": "Hardware watchpoint",
            "read": "Hardware read watchpoint",
            "access": "Hardware access (read/write) watchpoint",
        }[wp.kind]
        self._p()
        self._p(f"{title} {wp.number}: {wp.label or f'*{wp.address:#x}'}")
        self._p()
        if wp.kind != "read" and old != new:
            self._p(f"Old value = {old}")
            self._p(f"New value = {new}")
        else:
            self._p(f"Value = {new}")
        self._p()

    def cmd_quit(self, arg: str) -> None:
        self.quit = True

    def cmd_help(self, arg: str) -> None:
        self._p(HELP)


def _parse_x_format(fmt: str, last: tuple[str, int]) -> tuple[int, str, int]:
    """``x/NFU``: count, format letter (x d u i), unit size in bytes."""
    digits = ""
    i = 0
    while i < len(fmt) and fmt[i].isdigit():
        digits += fmt[i]
        i += 1
    count = int(digits) if digits else 1
    letter, size = last
    for ch in fmt[i:]:
        if ch in _X_SIZES:
            size = _X_SIZES[ch]
        elif ch in "xdui":
            letter = ch
        else:
            raise StepperError(f'Invalid number "{fmt}".' if ch.isdigit() else f'Undefined output format "{ch}".')
    if count <= 0 or count > 1 << 16:
        raise StepperError(f"bad count in x/{fmt}")
    return count, letter, size


# =============================================================================== CLI


def cmd_step(args) -> int:
    scripts = []
    for path in args.scripts:
        try:
            with open(path) as f:
                scripts.append(f.read().splitlines())
        except OSError as e:
            raise EmuError(f"cannot read command file {path!r}: {e.strerror}") from None
    m = make_machine(args, own_stdin=False)  # the stepper reads its commands from stdin
    if args.checkpoint_interval < 0:
        raise EmuError(f"--checkpoint-interval must be >= 0, not {args.checkpoint_interval}")
    with events_output(args, sys.stdout) as out:
        if args.event:
            add_cli_events(m, args, out)
        stepper = Stepper(m, max_insns=args.max_insns or None, timeout=args.timeout or None)
        if args.checkpoint_interval:
            reverse.ReverseStepper.of(stepper, interval=args.checkpoint_interval)  # record from the entry
        shell = StepperShell(stepper)
        for lines in scripts:
            shell.run_lines(lines)
        if not shell.quit:
            shell.interact(sys.stdin)
        sys.stdout.flush()
    return 0


__all__ = ["StepperShell", "HELP", "cmd_step"]
