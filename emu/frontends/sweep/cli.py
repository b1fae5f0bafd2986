"""``uprobe-emu sweep``: the command line of the sweep."""

from __future__ import annotations

import os
import shlex
import sys

from emu.frontends.cli import count, cpus_count, read_stdin_file, seconds
from emu.frontends.sweep.case import Program
from emu.frontends.sweep.driver import Sweeper
from emu.frontends.sweep.report import CaseStore, ProgressBar, exit_status, print_report, write_json
from emu.frontends.sweep.runners import make_runner
from kernel_model.errors import InputError
from kernel_model.profiles import KernelProfile


def add_cli(sub, _add_machine_options) -> None:
    p = sub.add_parser(
        "sweep", usage="%(prog)s [OPTIONS] [--] PROGRAM [ARGS...]",
        help="probe every instruction (function, return) and report where probing "
             "changes what the program does",
        description="Run PROGRAM unprobed, then with do-nothing probes on every site, many "
                    "per run, bisecting only the batches whose run differs (exit status or "
                    "signal, stdout/stderr, syscalls with arguments, final registers, "
                    "writable memory). Exit 1 when a divergence is not a known "
                    "kernel-faithful one.")
    p.add_argument("program", metavar="PROGRAM")
    p.add_argument("args", nargs="*", metavar="ARGS")
    p.add_argument("--sites", default="insn", metavar="insn|func|ret|FILE",
                   help="every instruction boundary of .text (default), every function "
                        "entry, every function's return probe, or the sites listed in FILE "
                        "([PATH:]0xOFF or [PATH:]SYMBOL[+OFF], %%return for a return probe)")
    p.add_argument("--site", action="append", default=[], metavar="SITE",
                   help="sweep just this site (repeatable; the syntax of a --sites FILE line)")
    p.add_argument("--libraries", action="store_true",
                   help="also the libraries (and ld.so) the program maps")
    p.add_argument("--kernel", default="latest", metavar="A,B,...",
                   help="kernel profile(s), comma-separated (default latest; with --host: "
                        "the host's release)")
    p.add_argument("--jobs", "-j", type=count, default=1, metavar="N",
                   help="run cases on a local pool of N processes")
    p.add_argument("--ray", metavar="ADDRESS|auto",
                   help="run cases on a Ray cluster (pip install 'uprobe-emu[ray]'); auto: the "
                        "cluster `ray start` made here; local: start a Ray on this machine")
    p.add_argument("--batch", type=count, default=0, metavar="N",
                   help="sites per first-round run (default: the sites shared out over the workers)")
    p.add_argument("--host", action="store_true",
                   help="also sweep under the host kernel's uprobes through tracefs (root; "
                        "runs PROGRAM UNSANDBOXED AS ROOT) and compare with the model")
    p.add_argument("--json", metavar="FILE", help="write the whole result as JSON")
    p.add_argument("--jsonl", metavar="FILE", help="stream each case's result to FILE")
    p.add_argument("--resume", action="store_true",
                   help="continue the sweep recorded in --jsonl FILE: recorded cases are not rerun")
    p.add_argument("--stdin", metavar="FILE")
    p.add_argument("--sysroot", metavar="DIR", default="/")
    p.add_argument("--seed", type=int, default=0, metavar="N")
    p.add_argument("--cpus", type=cpus_count, default=1, metavar="N",
                   help="CPUs of each run's machine (default 1)")
    p.add_argument("--timeout", type=seconds, default=120.0, metavar="S",
                   help="wall-clock limit of each run (default 120; 0 = none)")
    p.add_argument("--max-insns", type=count, default=0, metavar="N",
                   help="exact instruction budget of each run (0 = none)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)


def kernels_of(text: str) -> list[str]:
    names = [k.strip() for k in text.split(",") if k.strip()]
    if not names:
        raise InputError("sweep: --kernel names no profile")
    for k in names:
        KernelProfile.get(k)                 # an unknown name is a one-line error
    return names


def program_of(args) -> Program:
    prog = args.program
    if not prog.startswith("guest:"):
        if not os.path.isfile(prog):
            raise InputError(f"{prog}: no such file")
        prog = os.path.abspath(prog)
    if not os.path.isdir(args.sysroot):
        raise InputError(f"--sysroot {args.sysroot!r} is not a directory")
    argv = [prog[len("guest:"):] if prog.startswith("guest:") else prog, *args.args]
    return Program.of(prog, argv, read_stdin_file(args.stdin), sysroot=args.sysroot,
                      seed=args.seed, cpus=args.cpus, max_insns=args.max_insns or None,
                      timeout=args.timeout or None)


def repro_for(args):
    extra = (["--stdin", args.stdin] if args.stdin else []) + \
        (["--sysroot", args.sysroot] if args.sysroot != "/" else []) + \
        (["--cpus", str(args.cpus)] if args.cpus != 1 else [])

    def repro(program, kernel, sites) -> str:
        words = ["uprobe-emu", "sweep", "--kernel", kernel, *extra]
        for s in sites:
            words += ["--site", s.key if s.path != program.path else s.key.replace(
                s.path, args.program, 1)]
        return shlex.join([*words, args.program, *program.argv[1:]])
    return repro


def cmd_sweep(args) -> int:
    if args.resume and not args.jsonl:
        raise InputError("sweep: --resume needs --jsonl FILE (the stream to continue)")
    if args.ray is not None and args.jobs > 1:
        raise InputError("sweep: give --jobs or --ray, not both")
    program = program_of(args)
    if args.host:
        from emu.frontends.hostdiff import host_profile_name
        kernels = kernels_of(host_profile_name() if args.kernel == "latest" else args.kernel)
    else:
        kernels = kernels_of(args.kernel)
    store = CaseStore(args.jsonl, args.resume) if args.jsonl else None
    runner = make_runner(args.jobs, args.ray)
    progress = ProgressBar(False if args.no_progress else None)
    host = None
    try:
        sweeper = Sweeper(program, runner, store=store, progress=progress, batch=args.batch,
                          repro=repro_for(args))
        kw = dict(mode=args.sites, libraries=args.libraries, site_specs=args.site)
        sweeps = [sweeper.sweep(k, **kw) for k in kernels]
        if args.host:
            from emu.frontends.sweep.host import host_sweep
            host = host_sweep(program, sweeps[0], batch=args.batch, timeout=args.timeout or 60.0,
                              unoptimized_clean=lambda site: sweeper.transparent_without_optimizer(
                                  site, sweeps[0]), store=store)
    finally:
        progress.close()
        runner.close()
        if store:
            store.close()
    title = f"sweep of {args.program} ({args.sites} sites, {runner.name} x{runner.workers})"
    print_report(sweeps, title)
    if host is not None:
        for line in host.lines():
            print(line)
    if args.json:
        doc = {"program": program.path, "argv": list(program.argv), "sha256": program.sha256,
               "runner": runner.name, "workers": runner.workers,
               "kernels": [s.to_json() for s in sweeps]}
        if host is not None:
            doc["host"] = host.to_json()
        write_json(args.json, doc)
    sys.stdout.flush()
    return exit_status(sweeps, host)
