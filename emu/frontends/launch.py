"""What ``run`` and every command that runs a guest share: the machine made from the
command line's options, its probes, where their hit lines go, and the exit code a run's
result becomes.
"""

from __future__ import annotations

import contextlib
import os
import sys

from emu.frontends.options import EXIT_BUDGET, EXIT_INTERRUPTED, print_error
from emu.inspect import describe_engine, engine_capabilities
from emu.machine import Machine
from kernel_model.errors import EmuError


def cmd_guests(args) -> int:
    from guest_programs import GUESTS, write_guest  # a run of guest:NAME loads them itself

    for name in sorted(GUESTS):
        print(f"guest:{name:<18} {GUESTS[name].description}")
    if args.write:
        try:
            os.makedirs(args.write, exist_ok=True)
            for name in GUESTS:
                write_guest(name, os.path.join(args.write, name))
        except OSError as e:
            raise EmuError(f"cannot write the guests into {args.write!r}: {e.strerror or e}") from None
    return 0


# `diff` feeds the same stdin bytes to the native run and the model, so it holds them
# in memory: bounded, so `diff --stdin /dev/zero` is an error, not a host out of memory.
MAX_STDIN_BYTES = 64 << 20


def read_stdin_file(path: str | None) -> bytes:
    """The bytes of ``--stdin FILE`` (b"" without one), at most MAX_STDIN_BYTES."""
    if not path:
        return b""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_STDIN_BYTES + 1)
    except OSError as e:
        raise EmuError(f"cannot read --stdin file {path!r}: {e.strerror or e}") from None
    if len(data) > MAX_STDIN_BYTES:
        raise EmuError(f"--stdin file {path!r} is larger than {MAX_STDIN_BYTES >> 20} MiB")
    return data


def _open_stdin(args, own_stdin: bool) -> bytes | int:
    """The guest's fd 0: the --stdin file (opened without blocking on a FIFO, read as
    the guest reads), else this command's own stdin, else (own_stdin False: the
    command reads its stdin itself) an empty pipe."""
    if args.stdin:
        try:
            return os.open(args.stdin, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as e:
            raise EmuError(f"cannot read --stdin file {args.stdin!r}: {e.strerror}") from None
    return 0 if own_stdin else b""


def make_machine(args, passthrough: bool = True, own_stdin: bool = True):
    """The machine of a CLI run.  With ``passthrough`` the guest's fds 0-2 are
    described as this command's own (a terminal, a file or a pipe), as they would be
    natively; otherwise its output is captured, so fds 1 and 2 are pipes."""
    for opt, value in [("--sysroot", getattr(args, "sysroot", "/"))] + [
        ("--grant-dir", d) for d in getattr(args, "grant_dir", None) or []
    ]:
        if not os.path.isdir(value):
            raise EmuError(f"{opt} {value!r} is not a directory")
    extra = list(getattr(args, "args", []) or [])
    prog = args.program
    guest_argv = [prog[len("guest:") :] if prog.startswith("guest:") else prog] + extra
    if getattr(args, "verbose", False):
        print(f"uprobe-emu: {describe_engine(engine_capabilities())}", file=sys.stderr)
    stdin = _open_stdin(args, own_stdin and passthrough)
    try:
        return Machine.from_program(
            args.program,
            argv=guest_argv,
            kernel=args.kernel,
            stdin=stdin,
            passthrough=passthrough,
            sysroot=getattr(args, "sysroot", "/"),
            grant_dirs=getattr(args, "grant_dir", None) or [],
            seed=getattr(args, "seed", 0),
            **_sched_option(args),
            stdio="host" if passthrough else "pipe",
            mem_total=getattr(args, "mem_total", None),
            realtime_ns=getattr(args, "clock", None),
            uid=getattr(args, "uid", None),
            gid=getattr(args, "gid", None),
            groups=getattr(args, "groups", None),
            **_memory_option(args),
        )
    finally:
        if isinstance(stdin, int) and stdin != 0:
            os.close(stdin)


def _sched_option(args) -> dict:
    bounds, cpus = getattr(args, "sched_slice", None), getattr(args, "cpus", None)
    return ({} if bounds is None else {"sched_slice": bounds}) | ({} if cpus is None else {"cpus": cpus})


def _memory_option(args) -> dict:
    size = getattr(args, "max_memory", None)
    return {} if size is None else {"max_memory": size}


def report_result(result, machine=None) -> int:
    if result.reason == "exit":
        return result.status
    print_error(f"uprobe-emu: guest {result.describe()}")
    if result.reason == "signal":
        return result.status
    if result.reason == "stopped" and "SIGINT" in result.detail:
        return EXIT_INTERRUPTED
    return EXIT_BUDGET


def add_cli_events(m, args, output) -> None:
    """The -e specs, filtered by --pid; notes on what they probe (IFUNC resolvers)
    go to stderr."""
    pid = getattr(args, "pid", None)
    flt = None if pid is None else (lambda proc: proc.pid == pid)
    m.uprobes.add_events(args.event, output=output, filter=flt)
    for note in m.uprobes.notes:
        print(f"uprobe-emu: note: {note}", file=sys.stderr)
    m.uprobes.notes.clear()


@contextlib.contextmanager
def events_output(args, default=None):
    """The stream of probe hit lines: ``--events FILE`` (opened for writing, closed at
    the end) or ``default`` (stderr)."""
    out = _open_events(args, default)
    try:
        yield out
    finally:
        if out is not (default or sys.stderr):
            out.close()


def cmd_run(args) -> int:
    m = make_machine(args)
    with events_output(args) as out:
        if args.event:
            add_cli_events(m, args, out)
        objects = []
        if args.bpf:
            from emu.frontends.bpf_run import load_cli_bpf  # imported on use: start-up cost

            objects = load_cli_bpf(m, args, out)
        elif args.bpf_attach or args.bpf_set:
            raise EmuError("--bpf-attach and --bpf-set need a BPF object (-b OBJ)")
        with m.interruptible():
            result = m.run(max_insns=args.max_insns or None, timeout=args.timeout or None)
        if objects:
            from emu.frontends.bpf_run import dump_cli_bpf

            dump_cli_bpf(objects, out)
    code = report_result(result, m)
    if args.counters:
        _print_counters(m)
    return code


def _open_events(args, default=None):
    if not getattr(args, "events_file", None):
        return default or sys.stderr
    try:
        return open(args.events_file, "w")
    except OSError as e:
        raise EmuError(f"cannot write {args.events_file!r}: {e.strerror}") from None


def _print_counters(m) -> None:
    snap = m.counters.snapshot()
    for k, v in snap.items():
        if v:
            print(f"{k}: {v}", file=sys.stderr)
