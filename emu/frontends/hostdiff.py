"""``uprobe-emu diff``: run a guest natively under the host kernel's uprobes (tracefs)
and under the model, then compare exit status, stdout and the ordered event stream.

Host side: the probes are created in ``uprobe_events`` under a group of our own
(``uemu_<pid>_<pid namespace>``), enabled only in a private trace instance of the same
name so the global buffer and other users' events are never touched, and always removed
again, also after an error, Ctrl-C or a fatal signal; a run killed with SIGKILL is
cleaned up by the next one, which removes the groups, instances and private mounts whose
owner is gone.  tracefs refuses seeking writes, so every write is one ``os.write`` on an
``O_APPEND`` descriptor (never ``O_TRUNC``, which would delete every uprobe event on the
system), and each probe definition is its own write whose fields were checked for bytes
tracefs would interpret (a newline in a path must never become a second command): all of
that is :mod:`emu.frontends.host_tracefs`.

The native run executes the program unsandboxed as root, in the model's environment;
a program with an interpreter runs with ADDR_NO_RANDOMIZE (as ``setarch -R``), as the
model lays it out, so pointer fetchargs (``$retval`` of malloc) compare.  Only the native
child and its descendants are recorded (the instance's pid filter with ``event-fork``,
:meth:`HostProbes._filter_pids`: other processes, this one reading the trace among them,
hit probes in a shared library too), recording stops before the trace is read, and the
trace is read in bounded chunks (:func:`~emu.frontends.host_tracefs.read_bounded`), so a
signal ends the run at once.  Of what is recorded, only lines from the child's exec on
count (its descendants are learned from ``sched_process_exec``/``sched_process_fork``).
Each thread's event stream is compared on its own, threads matched in the order they
were created (tid order).

The native record also has the run's stderr (compared as stdout is), how many events the
instance's ring buffer lost (its ``per_cpu/cpuN/stats`` and the trace's ``[LOST N
EVENTS]`` lines: a trace that lost events is incomplete, and its event stream is not
compared), and on request (``sweep --host``) the syscalls of the child and its
descendants, traced in the same instance (``raw_syscalls``, :func:`parse_syscalls`).
The instance's buffer is sized to the run (:func:`buffer_kb_for`: the model's events).

A spec is resolved as ``run -e`` resolves it (``ProbeTargets.find_file``: the program, any
file by path, a library's short name such as ``uprobe:libc:malloc``); the host probe goes
on that file's host path and file offset (tracefs ``p:GROUP/EV /path:0xOFF``), the same
inode the model keys on.  Addresses are compared at link time: each probed file's
addresses are shifted back by its load bias (learned from the first event of a probe on
it), so a layout difference does not count as a divergence of the probe address.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

from emu.frontends import glibc_tunables
from emu.frontends.host_tracefs import (
    HostKernelError,
    HostProbes,
    Tracefs,
    check_field,
    deferred_signals,
    fatal_signals_clean_up,
    find_tracefs,  # noqa: F401 - diff's tracefs, as its callers name it
    probe_command,
    run_tag,
)
from emu.frontends.launch import read_stdin_file
from emu.frontends.options import clock_start
from emu.inspect import DEFAULT_ENV, NR_CPUS, process_rlimits
from emu.machine import Machine
from emu.probes.probe_spec import parse_user_spec
from emu.probes.symbols import load_elf_file
from emu.probes.usdt import find_usdt_notes, parse_usdt_spec, usdt_attach_offsets
from guest_programs import write_guest
from kernel_model.errors import InputError, RegistrationError, printable
from kernel_model.profiles import KernelProfile

FORK_LINE = re.compile(
    r"^\s*.+?-\d+\s+\[\d+\].*?: sched_process_fork: comm=.* pid=(?P<parent>\d+) "
    r"child_comm=.* child_pid=(?P<child>\d+)"
)
EXEC_LINE = re.compile(
    r"^\s*.+?-\d+\s+\[\d+\].*?: sched_process_exec: filename=.* pid=(?P<pid>\d+) "
    r"old_pid=\d+$"
)
ADDR_NO_RANDOMIZE = 0x0040000  # include/uapi/linux/personality.h
# The trace file's mark of lost events before a CPU's next event (kernel/trace/trace.c,
# print_trace_line(): "CPU:%d [LOST %lu EVENTS]").
LOST_LINE = re.compile(r"^CPU:\d+ \[LOST (\d+) EVENTS\]$", re.M)
EXIT_INCOMPLETE = 3  # diff's exit status when the host trace lost events (1: a divergence)
# A trace instance's per-CPU ring buffer: an event's bytes in it are its header, the
# common fields, the probe address(es) and the fetchargs (trace_uprobe.c); the text of
# the model's args stands in for the fetchargs, with room.  Never more than
# MAX_BUFFER_KB nor a quarter of the memory available, over all CPUs.
BASE_BUFFER_KB = 1410  # a new instance's buffer_size_kb on 6.x
EVENT_BYTES = 48
MAX_BUFFER_KB = 256 * 1024
# The head of any trace line (task-pid [cpu] flags timestamp: ); a line without one
# continues the previous event: the kernel prints a string fetcharg's bytes as they are
# (print_type_string: "%s"), so a newline in the string splits the event's line.
LINE_HEAD = re.compile(r"^\s*.+?-\d+\s+\[\d+\]\s+(\S+\s+)?\d+\.\d+: ")
# raw_syscalls' print fmts: "NR %ld (%lx, %lx, %lx, %lx, %lx, %lx)" and "NR %ld = %ld"
# (include/trace/events/syscalls.h); an rt_sigreturn returns as NR -1 (orig_ax).
SYSCALL_LINE = re.compile(
    r"^\s*.+?-(?P<pid>\d+)\s+\[\d+\]\s+(?:\S+\s+)?\d+\.\d+: sys_(?P<dir>enter|exit): "
    r"NR (?P<nr>-?\d+) (?:\((?P<args>[0-9a-f]+(?:, [0-9a-f]+){5})\)|= (?P<ret>-?\d+))$"
)
U64 = (1 << 64) - 1
TRACE_LINE = re.compile(
    r"^\s*(?P<task>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<flags>\S+\s+)?(?P<ts>\d+\.\d+): "
    r"(?P<event>[\w.-]+): \((?P<ip>0x[0-9a-f]+)(?: <- (?P<func>0x[0-9a-f]+))?\)(?P<args>.*)$",
    re.S,
)


@dataclass(frozen=True)
class Event:
    name: str  # event name as created (ev0, ev1, ... mapped back to the user's spec)
    kind: str  # "entry" | "return"
    ip: int  # link-time address
    func: int | None
    args: str
    tid: int = field(default=0, compare=False)  # the thread that hit (kept out of ==)

    def describe(self) -> str:
        """One line: control bytes of string fetchargs (a newline) shown escaped."""
        where = f"{self.ip:#x} <- {self.func:#x}" if self.func is not None else f"{self.ip:#x}"
        return printable(f"{self.name} {self.kind} ({where}){self.args}")


@dataclass
class RunRecord:
    """One side of a comparison."""

    status: str  # "exit N" | "signal NAME"
    stdout: bytes
    events: list = field(default_factory=list)
    stderr: bytes = b""
    syscalls: dict | None = None  # tid -> [(nr, args, ret)] (run_native(syscalls=True))
    lost_events: int = 0  # events the trace buffer lost (the trace is incomplete)
    rlimits: list | None = None  # the model's (soft, hard) per RLIMIT_*, at its start


def parse_trace(text: str) -> list[dict]:
    """The events of a trace file's text.  A line without a trace line's head belongs to
    the event before it (a string fetcharg holding a newline); the event's ``args`` get
    the newline back.  Only ``\n`` ends a line, as in the kernel's output."""
    out = []
    for line in _event_lines(text):
        m = TRACE_LINE.match(line)
        if m:
            out.append(m.groupdict())
    return out


def _event_lines(text: str) -> list[str]:
    events: list[str] = []
    for line in text.split("\n"):
        if LINE_HEAD.match(line):
            events.append(line)
        elif events:  # (the "# tracer" header comes before any event)
            events[-1] += "\n" + line
    if events and text.endswith("\n"):
        events[-1] = events[-1][:-1]  # the newline that ends the last line
    return events


def host_profile_name(release: str | None = None) -> str:
    """The kernel profile matching a release string (6.18.44-... -> 6.18)."""
    release = release or os.uname().release
    m = re.match(r"(\d+)\.(\d+)", release)
    if not m:
        return "latest"
    want = (int(m.group(1)), int(m.group(2)))
    best = None
    for name in KernelProfile.names():
        pm = re.fullmatch(r"(\d+)\.(\d+)", name)
        if pm and (int(pm.group(1)), int(pm.group(2))) <= want:
            if best is None or (int(pm.group(1)), int(pm.group(2))) > best[0]:
                best = ((int(pm.group(1)), int(pm.group(2))), name)
    return best[1] if best else "latest"


# ----------------------------------------------------------------------------- specs


@dataclass
class ResolvedProbe:
    spec_text: str
    event: str  # our event name (ev0...) in our group
    kind: str  # "p" | "r"
    offset: int  # file offset
    link_vaddr: int  # link-time address of the probe
    args: str  # fetchargs text as written
    host_path: str | None = None  # the probed file on the host (None: the program)
    model_path: str | None = None  # the same file as the model's guest names it
    ref_ctr_offset: int = 0  # a USDT semaphore's file offset (0: none)


def _host_path_of(file) -> str:
    """The host path of a library the model resolved a spec to: the kernel keys a probe
    on the inode, so any path to it will do; the one we give must be that inode."""
    for cand in (file.d_path, file.path):
        if not cand or not cand.startswith("/"):
            continue
        try:
            st = os.stat(cand)
        except OSError:
            continue
        if not file.ino or (st.st_dev, st.st_ino) == (file.dev, file.ino):
            return cand
    raise InputError(f"diff: {file.path} has no host path the host kernel could probe")


def resolve_specs(
    path: str, specs: list[str], aliases: tuple = (), kernel: str | None = None
) -> tuple[list[ResolvedProbe], object]:
    """Resolve user specs as ``run -e`` does (``ProbeTargets.find_file`` and
    ``symbol_offset`` on a machine with the program loaded: the program's symbols, any
    file by path, a library by short name) to (file, kind, file offset, fetchargs).
    A spec path in ``aliases`` (the PROGRAM as given, e.g. ``guest:hello``) is the
    program.  A ``usdt:`` spec is one probe per site (:func:`_usdt_probes`), attached as
    libbpf attaches on the ``kernel`` profile (the nop-combo rule)."""
    check_field("program path", path)  # the program is probed and run: refuse it first
    kw: dict[str, Any] = {"kernel": kernel} if kernel else {}
    m = Machine.from_elf(path, argv=[path], **kw)
    up = m.uprobes
    out = []
    for i, text in enumerate(specs):
        if text.strip().startswith(("usdt:", "U:")):
            out.extend(_usdt_probes(m, text.strip(), f"ev{i}", aliases))
            continue
        spec = parse_user_spec(text)
        if spec.is_delete:
            raise InputError(f"diff: {text!r} deletes an event; give probe definitions")
        file = m.process.exe if spec.path in aliases else up.find_file(spec.path)
        if file is None:
            raise InputError(f"diff: {text!r}: no file {spec.path!r} to probe")
        if spec.offset is not None:
            offset = spec.offset
        elif spec.symbol is not None:
            offset = up.symbol_offset(file, spec.symbol, spec.sym_offset)[1]
        elif spec.address is not None:
            file_elf = up.file_elf(file)
            if file_elf is None:
                raise InputError(f"diff: {file.path} has no program headers to map {spec.address:#x}")
            offset = file_elf.vaddr_to_offset(spec.address)
        else:
            raise InputError(f"diff: {text!r} names no location")
        elf = up.file_elf(file) if file.reader is not None or file.elf is not None else None
        link = elf.offset_to_vaddr(offset) if elf is not None else offset
        args = " ".join(a.name + "=" + a.source for a in spec.args)
        host = None if file is m.process.exe else _host_path_of(file)
        out.append(
            ResolvedProbe(text, f"ev{i}", spec.kind, offset, link, args, host, None if host is None else file.path)
        )
    exe = m.process.exe
    return out, exe.elf if exe is not None else None


def _usdt_probes(m, text: str, event: str, aliases: tuple) -> list[ResolvedProbe]:
    """``usdt:PATH:[PROVIDER:]NAME`` as ``run -e`` registers it
    (``UserUprobes.register_usdt``): every matching ``.note.stapsdt`` site of the file,
    at libbpf's attach offset, with its semaphore's file offset as the probe's
    ref_ctr_offset.  The sites' events are ``EVENT``, ``EVENT_1``...; all count as the
    spec's."""
    path, provider, name = parse_usdt_spec(text)
    up = m.uprobes
    file = m.process.exe if path in aliases else up.find_file(path)
    if up.file_elf(file) is None:
        raise InputError(f"diff: {file.path} has no ELF notes for {text!r}")
    host = None if file is m.process.exe else _host_path_of(file)
    out = []
    for j, note in enumerate(find_usdt_notes(file, provider, name)):
        offset, ref = usdt_attach_offsets(file, note, m.profile)
        out.append(
            ResolvedProbe(
                text,
                event if j == 0 else f"{event}_{j}",
                "p",
                offset,
                file.elf.offset_to_vaddr(offset),
                "",
                host,
                None if host is None else file.path,
                ref,
            )
        )
    return out


def _events_from_lines(lines: list[dict], probes: list[ResolvedProbe], program: str) -> list[Event]:
    """Events of our probes.  The probe address is made link-time by its file's load
    bias, a return address by the program's (where it usually lies); a bias is learned
    from the first event of a probe on that file (none known: 0), the same rule on
    both sides."""
    by_event = {p.event: p for p in probes}
    biases: dict = {}
    for rec in lines:
        p = by_event.get(rec["event"])
        if p is not None and (p.host_path or program) not in biases:
            at = int(rec["func"], 16) if rec["func"] else int(rec["ip"], 16)
            biases[p.host_path or program] = at - p.link_vaddr
    out = []
    for rec in lines:
        p = by_event.get(rec["event"])
        if p is None:
            continue
        bias = biases[p.host_path or program]
        ip, tid = int(rec["ip"], 16), int(rec["pid"])
        if rec["func"]:
            out.append(
                Event(p.spec_text, "return", ip - biases.get(program, 0), int(rec["func"], 16) - bias, rec["args"], tid)
            )
        else:
            out.append(Event(p.spec_text, "entry", ip - bias, None, rec["args"], tid))
    return out


def parse_syscalls(text: str, tids) -> dict:
    """The raw_syscalls lines of ``tids`` in a trace: tid -> [(nr, args, ret)] in order,
    ret None for a call that did not return (exit_group) and the return value as the
    register holds it (unsigned 64 bits).  An exit pairs with its task's pending entry
    (whatever its NR: rt_sigreturn's is -1); an exit with none pending is dropped: the
    execve the trace starts in, a new thread's or child's return from clone/fork."""
    out: dict = {}
    for line in text.split("\n"):
        m = SYSCALL_LINE.match(line)
        if m is None or int(m.group("pid")) not in tids:
            continue
        calls = out.setdefault(int(m.group("pid")), [])
        if m.group("dir") == "enter":
            calls.append([int(m.group("nr")), tuple(int(a, 16) for a in m.group("args").split(", ")), None])
        elif calls and calls[-1][2] is None:
            calls[-1][2] = int(m.group("ret")) & U64
    return {tid: [tuple(c) for c in calls] for tid, calls in out.items() if calls}


def lost_in_text(text: str) -> int:
    """The events a trace file's text says were lost (its ``CPU:N [LOST M EVENTS]`` lines)."""
    return sum(int(n) for n in LOST_LINE.findall(text))


def since_exec(text: str, pid: int) -> str:
    """The trace from ``pid``'s exec on: before it, the forked child still runs the
    parent's program (Python's preexec code calls malloc too)."""
    lines = text.split("\n")  # only \n ends a trace line (not \v, \f...)
    for i, line in enumerate(lines):
        m = EXEC_LINE.match(line)
        if m and int(m.group("pid")) == pid:
            return "\n".join(lines[i + 1 :])
    return text


def descendants(text: str, root: int) -> set[int]:
    """``root`` and every task forked or cloned from it, after the
    ``sched_process_fork`` lines of a trace."""
    children: dict = {}
    for line in text.split("\n"):
        m = FORK_LINE.match(line)
        if m:
            children.setdefault(int(m.group("parent")), []).append(int(m.group("child")))
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, ()))
    return out


# ----------------------------------------------------------------------------- runs


def _popen_native(
    cmd: list[str],
    mask,
    no_randomize: bool = True,
    env_extra: tuple[str, ...] = (),
    like_model: tuple[list | None, int | None] = (None, None),
) -> subprocess.Popen:
    """The native process; it starts with the signal mask ``mask`` (ours before
    :func:`deferred_signals` blocked anything) and, if ``no_randomize``,
    ADDR_NO_RANDOMIZE added to its personality, as ``setarch -R`` does: the exec then
    lays memory out without ASLR (``load_elf_binary()`` tests ``current->personality``).
    Its environment is the model's (kernel_model.fs.binfmt_elf's DEFAULT_ENV), not ours: libc's start-up
    (locale, malloc tunables) and the stack's layout depend on it."""
    personality = ctypes.CDLL(None, use_errno=True).personality
    personality.argtypes, personality.restype = [ctypes.c_ulong], ctypes.c_int

    rlimits, cpus = like_model

    def child_setup():
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for res, (soft, hard) in enumerate(rlimits or ()):
            resource.setrlimit(res, (_rlim(soft), _rlim(hard)))
        if cpus is not None:
            os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cpus])
        if not no_randomize:
            return
        current = personality(0xFFFFFFFF)  # query
        if current == -1 or personality(current | ADDR_NO_RANDOMIZE) == -1:
            raise OSError(ctypes.get_errno(), "personality(ADDR_NO_RANDOMIZE)")

    env = dict(item.split("=", 1) for item in (*DEFAULT_ENV, *env_extra))
    return subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=child_setup, env=env
    )


def run_native(
    path: str,
    argv: list[str],
    probes: list[ResolvedProbe],
    stdin: bytes,
    timeout: float,
    no_randomize: bool | None = None,
    *,
    syscalls: bool = False,
    buffer_kb: int = 0,
    env_extra: tuple[str, ...] = (),
    like_model: tuple[list | None, int | None] = (None, None),
) -> RunRecord:
    """Run the program natively (unsandboxed, as root) under host probes (none: an
    unprobed run).  The probes, the trace instance and a tracefs mount of ours are
    removed however the run ends: an error, Ctrl-C or a fatal signal (SIGKILL: by the
    next run's sweep).  The record has the run's stderr too; with ``syscalls`` also
    the syscalls of the child and its descendants from its exec on, traced in the same
    instance, and always how many events the buffer lost.  ``buffer_kb``: the instance's
    per-CPU buffer (0: tracefs' default).  Only the child and its descendants are
    recorded, and recording stops before the trace is read
    (:meth:`HostProbes._filter_pids`).

    ``no_randomize`` (default: for a program with a PT_INTERP) runs it without ASLR:
    the model lays a dynamic program out as the kernel does then (mmap_base below the
    stack at STACK_TOP_MAX).  A static guest keeps ASLR, because the model puts its
    stack below the XOL hint page as a randomized stack lies (kernel_model.fs.binfmt_elf's STACK_TOP),
    where a non-randomized kernel would find the hint taken."""
    if no_randomize is None:
        no_randomize = load_elf_file(path).interp is not None
    with fatal_signals_clean_up():
        for p in probes:  # refuse a bad field before touching tracefs
            probe_command(p.kind, run_tag(), p.event, p.host_path or path, p.offset, p.args, p.ref_ctr_offset)
        tracefs = None
        try:
            tracefs = Tracefs()
            with HostProbes(tracefs, probes, path, syscalls, buffer_kb) as hp:
                # Signals are held back until the Popen object is kept: one raised inside
                # Popen's wait for the exec, or as the block ends, would orphan the child.
                procs = []
                try:
                    with deferred_signals() as mask:
                        procs.append(_popen_native([path, *argv[1:]], mask, no_randomize, env_extra, like_model))
                    proc = procs[0]
                    hp.spawned()
                    out, err = proc.communicate(stdin, timeout=timeout)
                except subprocess.TimeoutExpired:
                    raise HostKernelError(f"the native run did not finish in {timeout} s") from None
                finally:
                    for child in procs:
                        if child.returncode is None:  # a signal or an error: never orphaned
                            child.kill()
                            child.wait()
                hp.stop()
                text = hp.trace()
                lost = max(hp.lost_events(), lost_in_text(text))
        finally:
            if tracefs is not None:
                tracefs.close()
    text = since_exec(text, proc.pid)
    ours = descendants(text, proc.pid)
    lines = [rec for rec in parse_trace(text) if int(rec["pid"]) in ours]
    if proc.returncode < 0:
        status = f"signal {signal.Signals(-proc.returncode).name}"
    else:
        status = f"exit {proc.returncode}"
    return RunRecord(
        status,
        out,
        _events_from_lines(lines, probes, path),
        err,
        parse_syscalls(text, ours) if syscalls else None,
        lost,
    )


def run_model(
    path: str,
    argv: list[str],
    probes: list[ResolvedProbe],
    stdin: bytes,
    kernel: str,
    max_insns: int | None,
    realtime_ns: int | None = None,
    env_extra: tuple[str, ...] = (),
    like_host: bool = False,
) -> RunRecord:
    """The model's run; ``realtime_ns``: its CLOCK_REALTIME at start (None: the fixed one);
    ``env_extra``: variables added to the environment both sides get; ``like_host``: the
    model takes this process's resource limits and CPU count."""
    host: dict[str, Any] = {}
    if like_host:
        host = {"rlimits": host_rlimits(), "cpus": min(len(os.sched_getaffinity(0)), NR_CPUS)}
    m = Machine.from_elf(
        path, argv=argv, env=[*DEFAULT_ENV, *env_extra], stdin=stdin, kernel=kernel, realtime_ns=realtime_ns, **host
    )
    group = "uemu"
    for p in probes:
        try:
            m.uprobes.add_event(
                f"{p.kind}:{group}/{p.event} {p.model_path or path}:{p.offset:#x}"
                + (f"({p.ref_ctr_offset:#x})" if p.ref_ctr_offset else "")
                + (f" {p.args}" if p.args else "")
            )
        except RegistrationError:
            # The host's probes exist before the program maps the file: analysis runs at
            # mmap time and a refusal there is silent (the probe is never installed).
            # The model registers on the mapped file, where the refusal is an error;
            # both mean "no events from this probe".
            continue
    rlimits = process_rlimits(m, m.main_process)
    r = m.run(max_insns=max_insns)
    if r.reason == "exit":
        status = f"exit {r.exit_code}"
    elif r.reason == "signal":
        status = f"signal {r.signal_name}"
    else:
        status = f"stopped ({r.reason})"
    lines = parse_trace("\n".join(m.uprobes.trace.lines))
    return RunRecord(status, r.stdout, _events_from_lines(lines, probes, path), r.stderr, rlimits=rlimits)


def per_thread(events: list[Event]) -> list[tuple[int, list[Event]]]:
    """(tid, that thread's events) in the order the threads were created - tid order:
    the kernel (alloc_pid, barring a wrap of pid_max) and the model both hand out ids
    increasing - so the n-th thread or child of one run meets the n-th of the other,
    whichever of them the scheduler ran first.  Threads run concurrently: only the
    order within one thread is the program's."""
    out: dict = {}
    for e in events:
        out.setdefault(e.tid, []).append(e)
    return sorted(out.items(), key=lambda item: item[0])


def compare(native: RunRecord, model: RunRecord, context: int = 3) -> list[str]:
    """Lines describing the first divergence (empty when the runs agree): exit status,
    stdout and stderr (:func:`compare_outputs`), then the event streams thread by thread
    (:func:`compare_events`) - unless the host trace lost events: then a line saying so
    (:func:`lost_line`) stands in for them."""
    out = compare_outputs(native, model)
    lost = lost_line(native)
    return out + ([lost] if lost is not None else compare_events(native, model, context))


def lost_line(native: RunRecord) -> str | None:
    """What to say of a native trace that lost events (None: complete).  Its event
    stream misses events (the oldest, overwritten), so no event of it is compared."""
    if not native.lost_events:
        return None
    return (
        f"events lost: the host trace buffer lost {native.lost_events} events "
        "(overrun); the event streams are not compared (--buffer-kb sets the buffer)"
    )


def _first_difference(what: str, a: bytes, b: bytes) -> list[str]:
    if a == b:
        return []
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return [f"{what} differs at byte {i}: host {a[max(0, i - 20) : i + 20]!r}, model {b[max(0, i - 20) : i + 20]!r}"]


def compare_outputs(native: RunRecord, model: RunRecord) -> list[str]:
    """Exit status, stdout and stderr: what the trace buffer does not hold."""
    out = []
    if native.status != model.status:
        out.append(f"exit status differs: host {native.status}, model {model.status}")
    out += _first_difference("stdout", native.stdout, model.stdout)
    out += _first_difference("stderr", native.stderr, model.stderr)
    return out


def compare_events(native: RunRecord, model: RunRecord, context: int = 3) -> list[str]:
    """The event streams, thread by thread (:func:`per_thread`)."""
    out = []
    host_threads, model_threads = per_thread(native.events), per_thread(model.events)
    if len(host_threads) != len(model_threads):
        out.append(f"threads with events differ: host {len(host_threads)}, model {len(model_threads)}")
    for n in range(max(len(host_threads), len(model_threads))):
        tid_a, ev_a = host_threads[n] if n < len(host_threads) else (None, [])
        tid_b, ev_b = model_threads[n] if n < len(model_threads) else (None, [])
        for i in range(max(len(ev_a), len(ev_b))):
            x = ev_a[i] if i < len(ev_a) else None
            y = ev_b[i] if i < len(ev_b) else None
            if x != y:
                where = (
                    ""
                    if n == 0 and len(host_threads) <= 1 and len(model_threads) <= 1
                    else f" of thread #{n + 1} (host tid {tid_a}, model tid {tid_b})"
                )
                out.append(f"event stream{where} differs at event #{i + 1}:")
                for k in range(max(0, i - context), i):
                    out.append(f"    both : {ev_a[k].describe()}")
                out.append(f"  > host : {x.describe() if x else '(no more events)'}")
                out.append(f"  > model: {y.describe() if y else '(no more events)'}")
                break
    return out


# ----------------------------------------------------------------------------- CLI


def cmd_diff(args) -> int:
    if not args.event and not args.bpf:
        raise InputError("diff needs probes: -e SPEC, or a BPF object -b OBJ")
    if args.event and args.bpf:
        raise InputError("diff compares either -e probes or a BPF object (-b), not both")
    if (args.bpf_attach or args.bpf_set) and not args.bpf:
        raise InputError("--bpf-attach and --bpf-set need a BPF object (-b OBJ)")
    if args.bpf:
        from emu.frontends.hostdiff_bpf import cmd_diff_bpf  # imported on use: start-up cost

        path, tmpdir = _program_path(args.program)
        try:
            return cmd_diff_bpf(args, path, host_profile_name() if args.kernel == "auto" else args.kernel)
        finally:
            if tmpdir:
                for f in os.listdir(tmpdir):
                    os.unlink(os.path.join(tmpdir, f))
                os.rmdir(tmpdir)
    stdin = read_stdin_file(args.stdin)
    try:
        clock = clock_start(args.clock)  # "host" is read here, as the runs start
    except argparse.ArgumentTypeError as e:
        raise InputError(f"--clock: {e}") from None
    path, tmpdir = _program_path(args.program)
    try:
        argv = [path, *args.args]
        kernel = host_profile_name() if args.kernel == "auto" else args.kernel
        probes, _ = resolve_specs(path, args.event, (args.program,), kernel)
        # the model first: its events size the host's trace buffer
        env_extra, glibc = glibc_alignment(args.glibc_tunables)
        env_extra += tuple(args.env)
        model = run_model(
            path,
            argv,
            probes,
            stdin,
            kernel,
            args.max_insns or None,
            realtime_ns=clock,
            env_extra=env_extra,
            like_host=args.like_host,
        )
        buffer_kb = min(args.buffer_kb, max_buffer_kb()) if args.buffer_kb else buffer_kb_for(model.events)
        # the native program gets the model's rlimits and CPU count (the model runs on 1 CPU)
        native = run_native(
            path,
            argv,
            probes,
            stdin,
            args.timeout,
            buffer_kb=buffer_kb,
            env_extra=env_extra,
            like_model=(None, None) if args.like_host else (model.rlimits, 1),
        )
    finally:
        if tmpdir:
            for f in os.listdir(tmpdir):
                os.unlink(os.path.join(tmpdir, f))
            os.rmdir(tmpdir)
    aligned = "fixed clock" if clock is None else "host clock" if args.clock == "host" else f"clock at {args.clock}"
    summary = (
        f"host {os.uname().release} vs model {kernel}, {aligned}, {glibc}, "
        + ("the host's rlimits and CPUs in the model" if args.like_host else "rlimits and 1 CPU as the model's")
        + (f", {len(args.env)} variables added" if args.env else "")
        + f": {native.status}, "
        f"{len(native.stdout)} bytes of stdout, {len(native.events)} events"
    )
    lost = lost_line(native)
    problems = compare_outputs(native, model)
    if not problems and lost is None:
        problems = compare_events(native, model)
    if problems:
        print(f"DIVERGE ({summary.split(': ', 1)[0]})")
        for line in problems:
            print(line)
        if lost is not None:
            print(lost)
        return 1
    if lost is not None:
        print(f"INCOMPLETE ({summary.split(': ', 1)[0]}): exit status, stdout and stderr agree")
        print(lost)
        return EXIT_INCOMPLETE
    print(f"agree: {summary}")
    return 0


def host_rlimits() -> list[tuple[int, int]]:
    """This process's (soft, hard) per RLIMIT_*, RLIM_INFINITY as 2**64 - 1 (the model's)."""
    inf = (1 << 64) - 1

    def of(v: int) -> int:
        return inf if v == resource.RLIM_INFINITY else v

    return [tuple(map(of, resource.getrlimit(r))) for r in range(16)]  # type: ignore[misc]


def _rlim(value: int) -> int:
    """A limit as setrlimit takes it: RLIM_INFINITY (2**64 - 1) is resource's -1."""
    return resource.RLIM_INFINITY if value >= (1 << 64) - 1 else value


def glibc_alignment(choice: str) -> tuple[tuple[str, ...], str]:
    """(the variables both sides get, the report's words for it) for ``--glibc-tunables``:
    ``auto`` computes the ``GLIBC_TUNABLES`` under which the host's glibc sees the
    emulated CPU (:mod:`emu.frontends.glibc_tunables`; what it cannot align is a note on
    stderr), ``none`` adds nothing, anything else is the value itself."""
    if choice == "none":
        return (), "glibc as it finds each CPU"
    if choice != "auto":
        check_field("--glibc-tunables", choice)
        return (f"GLIBC_TUNABLES={choice}",), "GLIBC_TUNABLES as given"
    tunables, left = glibc_tunables.align()
    for what in left:
        print(f"uprobe-emu: note: the host's glibc still differs from the model's in {what}", file=sys.stderr)
    if not tunables:
        return (), "glibc sees one CPU"
    return (f"GLIBC_TUNABLES={tunables}",), "glibc tunables as the model's CPU"


def max_buffer_kb() -> int:
    """The largest per-CPU buffer a run asks for: MAX_BUFFER_KB, and all CPUs' buffers
    together at most a quarter of MemAvailable (the ring buffer is unswappable)."""
    available = MAX_BUFFER_KB * 4 * (os.cpu_count() or 1)
    try:
        with open("/proc/meminfo") as f:
            m = re.search(r"^MemAvailable:\s+(\d+) kB$", f.read(), re.M)
        if m:
            available = int(m.group(1))
    except OSError:
        pass
    return max(BASE_BUFFER_KB, min(MAX_BUFFER_KB, available // 4 // (os.cpu_count() or 1)))


def buffer_kb_for(events: list[Event]) -> int:
    """The per-CPU buffer the host trace of a run needs (one thread's events can all land
    on one CPU): the model's events twice over, on top of a new instance's default (the
    scheduler's events, the forking thread's before the exec), at most
    :func:`max_buffer_kb`.  A host run with more events than that loses some, and says so."""
    need = 2 * sum(EVENT_BYTES + len(e.args) for e in events)
    return min(BASE_BUFFER_KB + -(-need // 1024), max_buffer_kb())


def _program_path(program: str) -> tuple[str, str | None]:
    """A real file for the native run: guest:NAME is written out as an ELF."""
    if program.startswith("guest:"):
        tmpdir = tempfile.mkdtemp(prefix="uemu-guest-")
        name = program[len("guest:") :]
        path = os.path.join(tmpdir, name)
        write_guest(name, path)
        os.chmod(path, 0o755)
        return path, tmpdir
    if not os.path.isfile(program):
        raise InputError(f"{program}: no such file")
    if not os.access(program, os.X_OK):
        # The native run would fail in execve() with EACCES; say so before any probe.
        raise InputError(f"{program}: not executable (the host run needs execute permission)")
    return os.path.abspath(program), None
