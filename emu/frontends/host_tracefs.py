"""The host kernel's tracefs, as the host-side comparisons use it: a private instance per
run (``instances/uemu_PID_NS``), uprobe events written to its ``uprobe_events``, the
scheduler and raw-syscall events, and the cleanup that removes all of it however the
run ends (fatal signals included; a later run sweeps what a SIGKILL left).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import threading

from emu.probes.probe_spec import is_good_name, is_good_system_name
from kernel_model.errors import EmuError, InputError

FORK_EVENT = "events/sched/sched_process_fork/enable"
EXEC_EVENT = "events/sched/sched_process_exec/enable"
SCHED_EVENTS = (FORK_EVENT, EXEC_EVENT)
SYSCALL_EVENTS = ("events/raw_syscalls/sys_enter/enable", "events/raw_syscalls/sys_exit/enable")


class HostKernelError(EmuError):
    """The host's tracefs cannot be used (not root, no tracefs, a probe refused)."""


_TAG = re.compile(r"uemu_(\d+)_(\d+)")
_MOUNT_PREFIX = "uemu-tracefs-"
# Signals whose default action ends the process: each one raises Terminated while the
# host has our probes, so the cleanup runs (SIGKILL cannot be caught: the next run's
# sweep removes what it left).  SIGINT keeps Python's KeyboardInterrupt.
_FATAL_SIGNALS = tuple(
    getattr(signal, n)
    for n in (
        "SIGHUP",
        "SIGQUIT",
        "SIGTERM",
        "SIGUSR1",
        "SIGUSR2",
        "SIGALRM",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGPWR",
    )
    if hasattr(signal, n)
)
_DEFERRED_SIGNALS = (signal.SIGINT, *_FATAL_SIGNALS)


class Terminated(BaseException):
    """A fatal signal arrived while host state of ours existed (raised by our handler)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def run_tag(pid: int | None = None) -> str:
    """``uemu_<pid>_<pid namespace>``: the name of a run's probe group and trace instance
    (and part of its private mount's name), so a later run can tell whether the owner
    is still alive.  The namespace keeps runs in other containers (same kernel, same
    tracefs, pids we cannot see) out of the sweep."""
    return f"uemu_{os.getpid() if pid is None else pid}_{_pid_namespace()}"


def _owner_gone(name: str) -> bool:
    """``name`` carries the tag of a run in our pid namespace whose process is gone."""
    m = _TAG.fullmatch(name)
    if m is None or int(m.group(2)) != _pid_namespace() or int(m.group(1)) == os.getpid():
        return False
    try:
        os.kill(int(m.group(1)), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


@contextlib.contextmanager
def deferred_signals():
    """Hold back Ctrl-C and the fatal signals (they are delivered when the block ends):
    creating or removing host state is never cut in half."""
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED_SIGNALS)
    except (OSError, ValueError):
        old = None
    try:
        yield old
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _raise_terminated(signum, _frame):
    raise Terminated(signum)


@contextlib.contextmanager
def fatal_signals_clean_up():
    """While the block runs, a fatal signal raises :class:`Terminated` (so every
    ``finally`` on the way out removes host state); at the end the process dies of that
    signal as it would have.  Nested uses are one; outside the main thread a no-op.
    Only around the native run: the main thread waits in Python there, while a model
    run may sit in Unicorn, where a Python handler would not run until it returns."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is _raise_terminated
    ):
        yield
        return
    old = {s: signal.signal(s, _raise_terminated) for s in _FATAL_SIGNALS}
    try:
        yield
    except Terminated as t:
        for s, h in old.items():
            signal.signal(s, h)
        old = {}
        signal.signal(t.signum, signal.SIG_DFL)
        os.kill(os.getpid(), t.signum)
        raise  # only if the signal did not end us
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _mounts() -> list[str]:
    """Mount points of tracefs, from /proc/mounts (octal escapes undone)."""
    out = []
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and parts[2] == "tracefs":
                    out.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[1]))
    except OSError:
        pass
    return out


def _private_mount_tag(mountpoint: str) -> str | None:
    base = os.path.basename(mountpoint)
    if not base.startswith(_MOUNT_PREFIX):
        return None
    return base[len(_MOUNT_PREFIX) :].rsplit("-", 1)[0]


def find_tracefs() -> str | None:
    """A tracefs mount that stays: never another run's private one (it unmounts it)."""
    return next((p for p in _mounts() if _private_mount_tag(p) is None), None)


def sweep_mounts() -> list[str]:
    """Unmount and remove the private tracefs mounts of runs that are gone."""
    done = []
    for p in _mounts():
        tag = _private_mount_tag(p)
        if tag is not None and _owner_gone(tag):
            if subprocess.run(["umount", p], capture_output=True).returncode == 0:
                with contextlib.suppress(OSError):
                    os.rmdir(p)
                done.append(p)
    return done


# A read of a trace file: one chunk a read(), Python code between two (so a signal's
# handler runs at once), and never more text than the buffers can hold: with recording
# on, a trace file is read while it grows (since 5.7, "tracing: Do not disable tracing
# when reading the trace file"; the ``pause-on-trace`` option, off by default, brings
# the pause back), and a reader hitting its own probes would read for ever.
READ_CHUNK = 1 << 16
TEXT_PER_BUFFER_BYTE = 32  # a trace line's text against its ring-buffer entry, with room
TRACE_TEXT_MIN = 1 << 20


def read_bounded(path: str, limit: int) -> str:
    """A file's text, read ``READ_CHUNK`` bytes at a time; :class:`HostKernelError` past
    ``limit`` bytes.  Bytes that are not UTF-8 (a string fetcharg's) become ``\\xNN``,
    as the model's formatting writes them."""
    chunks, total = [], 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while chunk := os.read(fd, READ_CHUNK):
            total += len(chunk)
            if total > limit:
                raise HostKernelError(f"{os.path.basename(path)} grew past {limit} bytes while it was read")
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", errors="backslashreplace")


class Tracefs:
    """A tracefs mount we may use: the existing one, or one we mount (and unmount).

    A private mount is named after the run (:func:`run_tag`), so the next run removes it
    if this one is killed before it could."""

    def __init__(self):
        if os.geteuid() != 0:
            raise HostKernelError("the host kernel's uprobes need root (tracefs uprobe_events)")
        self._mounted = None
        try:
            with deferred_signals():  # a held-back signal is raised on leaving
                sweep_mounts()
                self.path = find_tracefs()
                if self.path is None:
                    self.path = self._mount()
        except BaseException:
            self.close()
            raise
        if not os.path.exists(os.path.join(self.path, "uprobe_events")):
            self.close()
            raise HostKernelError("this kernel has no uprobe_events (CONFIG_UPROBE_EVENTS off)")

    def _mount(self) -> str:
        tmp = tempfile.mkdtemp(prefix=f"{_MOUNT_PREFIX}{run_tag()}-")
        res = subprocess.run(["mount", "-t", "tracefs", "nodev", tmp], capture_output=True, text=True)
        if res.returncode != 0:
            os.rmdir(tmp)
            raise HostKernelError(f"cannot mount tracefs: {res.stderr.strip() or 'mount failed'}")
        self._mounted = tmp
        return tmp

    def write(self, rel: str, text: str) -> None:
        """One write() call: tracefs runs each write's lines as commands."""
        fd = os.open(os.path.join(self.path, rel), os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, text.encode())
        except OSError as e:
            raise HostKernelError(f"tracefs refused {text.strip()!r} in {rel}: {e.strerror}") from None
        finally:
            os.close(fd)

    def read(self, rel: str) -> str:
        """A tracefs file's text; bytes that are not UTF-8 (a string fetcharg's) become
        ``\\xNN``, as the model's formatting writes them."""
        with open(os.path.join(self.path, rel), encoding="utf-8", errors="backslashreplace", newline="") as f:
            return f.read()

    def close(self) -> None:
        if self._mounted:
            with deferred_signals():
                subprocess.run(["umount", self._mounted], capture_output=True)
                with contextlib.suppress(OSError):
                    os.rmdir(self._mounted)
                self._mounted = None


# Bytes tracefs interprets in a uprobe_events line: trace_parse_run_command() splits a
# write at '\n' and cuts a line at '#'; argv_split() splits at the kernel's isspace()
# (\t \n \v \f \r, space, and 0xa0 in lib/ctype.c); NUL ends the string.  Other control
# bytes are refused too: no program path needs them.
_INTERPRETED = frozenset(range(0x00, 0x21)) | {0x23, 0x7F, 0xA0}
_LINE_MAX = 4096 - 2  # WRITE_BUFSIZE less the '\n' and the NUL


def check_field(what: str, value: str) -> bytes:
    """``value`` as bytes a ``uprobe_events`` line may hold as one field; InputError
    naming ``what`` when tracefs would interpret a byte of it."""
    raw = os.fsencode(value)
    bad = next((b for b in raw if b in _INTERPRETED), None)
    if not raw or bad is not None:
        why = "is empty" if bad is None else f"contains {bytes([bad])!r}, which tracefs would interpret"
        raise InputError(f"diff: {what} {value!r} {why}; the host probes cannot name it")
    return raw


def probe_command(
    kind: str, group: str, event: str, path: str, offset: int, args: str = "", ref_ctr_offset: int = 0
) -> str:
    """One ``uprobe_events`` definition, every field checked so that the line is exactly
    one command with exactly these fields (trace_uprobe.c's __trace_uprobe_create():
    ``[pr]:GROUP/EVENT PATH:OFFSET[(REF_CTR_OFFSET)] FETCHARGS...``; a USDT semaphore's
    file offset goes in the parentheses, and the kernel raises it in each mm)."""
    if kind not in ("p", "r"):
        raise InputError(f"diff: probe kind {kind!r} is not p or r")
    if not is_good_system_name(group) or not is_good_name(event):
        raise InputError(f"diff: bad event name {group}/{event}")
    raw = check_field("program path", path)
    if not raw.startswith(b"/"):
        raise InputError(f"diff: program path {path!r} is not absolute")
    for arg in args.split(" ") if args else ():
        check_field("fetcharg", arg)
    for what, value in (("offset", offset), ("semaphore offset", ref_ctr_offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"diff: the probe's {what} {value!r} is not a file offset")
    line = (
        f"{kind}:{group}/{event} {path}:{offset:#x}"
        + (f"({ref_ctr_offset:#x})" if ref_ctr_offset else "")
        + (f" {args}" if args else "")
    )
    if len(os.fsencode(line)) > _LINE_MAX:
        raise InputError(f"diff: the probe definition for {path!r} is longer than tracefs accepts ({_LINE_MAX} bytes)")
    return line


def sweep_leftovers(t: Tracefs) -> list[str]:
    """Remove what runs that are gone left behind (SIGKILL, a crash): their trace
    instances and their probe events.  Only names carrying a dead run's tag."""
    removed = []
    inst_dir = os.path.join(t.path, "instances")
    for name in sorted(os.listdir(inst_dir)) if os.path.isdir(inst_dir) else ():
        if _owner_gone(name):
            with contextlib.suppress(HostKernelError, OSError):
                if os.path.exists(os.path.join(inst_dir, name, "events", name)):
                    t.write(f"instances/{name}/events/{name}/enable", "0")
                for rel in SYSCALL_EVENTS:
                    if os.path.exists(os.path.join(inst_dir, name, rel)):
                        t.write(f"instances/{name}/{rel}", "0")
                os.rmdir(os.path.join(inst_dir, name))
                removed.append(f"instances/{name}")
    for line in t.read("uprobe_events").splitlines():
        head = line.split(maxsplit=1)[0] if line.strip() else ""
        event = head.partition(":")[2]
        if _owner_gone(event.partition("/")[0]):
            with contextlib.suppress(HostKernelError):
                t.write("uprobe_events", f"-:{event}\n")
                removed.append(event)
    return removed


class HostProbes:
    """Probes created in the host kernel for one run; removed on exit, whatever happens.

    Setup and cleanup run with signals held back; before creating anything, the
    leftovers of runs that are gone are swept (:func:`sweep_leftovers`)."""

    def __init__(self, tracefs: Tracefs, probes: list, path: str, syscalls: bool = False, buffer_kb: int = 0):
        self.t = tracefs
        self.buffer_kb = buffer_kb  # per-CPU ring buffer of the instance (0: tracefs' default)
        self.group = run_tag()
        self.instance = f"instances/{self.group}"
        # every definition is checked before anything is written
        self.definitions = [
            probe_command(p.kind, self.group, p.event, p.host_path or path, p.offset, p.args, p.ref_ctr_offset)
            for p in probes
        ]
        self.created: list[str] = []
        self.instance_made = False
        self.syscalls = syscalls
        self.tracer = threading.get_native_id()  # the thread that forks the child

    def __enter__(self):
        try:
            with deferred_signals():  # a held-back signal is raised on leaving
                sweep_leftovers(self.t)
                for d in self.definitions:
                    self.t.write("uprobe_events", d + "\n")  # one command per write
                    self.created.append(d.split()[0].split(":", 1)[1])
                os.mkdir(os.path.join(self.t.path, self.instance))
                self.instance_made = True
                if self.buffer_kb:
                    self.t.write(f"{self.instance}/buffer_size_kb", str(self.buffer_kb))
                self._filter_pids()
                if self.syscalls:
                    for rel in SYSCALL_EVENTS:
                        self.t.write(f"{self.instance}/{rel}", "1")
                if self.created:
                    self.t.write(f"{self.instance}/events/{self.group}/enable", "1")
                for rel in SCHED_EVENTS:  # who descends from whom, and since when
                    if os.path.exists(os.path.join(self.t.path, self.instance, rel)):
                        self.t.write(f"{self.instance}/{rel}", "1")
        except BaseException:
            self.cleanup()
            raise
        return self

    def _filter_pids(self) -> None:
        """Every event of our instance - the uprobe events, the scheduler's, raw_syscalls -
        for the child only: the pid filter (``set_event_pid``, which trace_uprobe's
        ``trace_trigger_soft_disabled()`` obeys as the other events do) holds the forking
        thread, and ``options/event-fork`` adds what it forks - the child - and the
        child's own descendants.  The pid goes in before any event is enabled: unfiltered,
        every task on the machine hitting a probed library (this process reading the
        trace through libc's ``read`` among them) would fill the buffer.  :meth:`spawned`
        then takes the forking thread out (``set_event_notrace_pid``), :meth:`stop` ends
        recording (``tracing_on``) before the trace is read.  The breakpoints stay in
        every process mapping the file (an ftrace uprobe has no consumer filter): only
        the recording is the child's."""
        for rel in ("set_event_pid", "set_event_notrace_pid", "options/event-fork", "tracing_on"):
            if not os.path.exists(os.path.join(self.t.path, self.instance, rel)):
                raise HostKernelError(f"this kernel's tracefs has no {rel}: the events cannot be kept to the child")
        if self.syscalls:
            for rel in SYSCALL_EVENTS:
                if not os.path.exists(os.path.join(self.t.path, self.instance, rel)):
                    raise HostKernelError(f"this kernel's tracefs has no {rel}: the syscalls cannot be traced")
        self.t.write(f"{self.instance}/set_event_pid", str(self.tracer))
        self.t.write(f"{self.instance}/options/event-fork", "1")

    def spawned(self) -> None:
        """The child exists (and is in the pid filter): stop tracing the forking thread."""
        self.t.write(f"{self.instance}/set_event_notrace_pid", str(self.tracer))

    def stop(self) -> None:
        """Recording ends (``tracing_on``): reading the trace adds nothing to it."""
        self.t.write(f"{self.instance}/tracing_on", "0")

    def lost_events(self) -> int:
        """Events the instance's ring buffer overwrote or dropped (per_cpu/cpuN/stats:
        ``overrun``, ``dropped events``): when not 0, the trace is incomplete."""
        lost = 0
        base = os.path.join(self.t.path, self.instance, "per_cpu")
        for cpu in sorted(os.listdir(base)) if os.path.isdir(base) else ():
            stats = self.t.read(f"{self.instance}/per_cpu/{cpu}/stats")
            lost += sum(int(v) for k, v in re.findall(r"^(overrun|dropped events): (\d+)$", stats, re.M))
        return lost

    def trace(self) -> str:
        """The instance's trace, read in bounded chunks (:func:`read_bounded`) up to what
        its buffers can hold as text (:data:`TEXT_PER_BUFFER_BYTE` a byte), recording
        stopped first (:meth:`stop`): a trace file is read while it records, so a reader
        hitting a probe (libc's ``read``) would make it grow as fast as it is read."""
        self.stop()
        kb = self.buffer_kb or int(re.sub(r"\D.*", "", self.t.read(f"{self.instance}/buffer_size_kb")) or 0)
        per_cpu = os.path.join(self.t.path, self.instance, "per_cpu")
        cpus = len(os.listdir(per_cpu)) if os.path.isdir(per_cpu) else os.cpu_count() or 1
        limit = TRACE_TEXT_MIN + TEXT_PER_BUFFER_BYTE * kb * 1024 * cpus
        return read_bounded(os.path.join(self.t.path, self.instance, "trace"), limit)

    def cleanup(self) -> None:
        with deferred_signals():
            self._cleanup()

    def _cleanup(self) -> None:
        errors = []
        if self.instance_made:
            for rel in (f"events/{self.group}/enable", *SCHED_EVENTS, *(SYSCALL_EVENTS if self.syscalls else ())):
                if os.path.exists(os.path.join(self.t.path, self.instance, rel)):
                    try:
                        self.t.write(f"{self.instance}/{rel}", "0")
                    except HostKernelError as e:
                        errors.append(str(e))
            try:
                os.rmdir(os.path.join(self.t.path, self.instance))
            except OSError as e:
                errors.append(f"rmdir {self.instance}: {e.strerror}")
            self.instance_made = False
        for name in reversed(self.created):
            try:
                self.t.write("uprobe_events", f"-:{name}\n")
            except HostKernelError as e:
                errors.append(str(e))
        self.created.clear()
        if errors:
            raise HostKernelError("; ".join(errors))

    def __exit__(self, *exc):
        self.cleanup()
        return False
