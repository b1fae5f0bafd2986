"""``uprobe-emu sweep``: the command line of the sweep."""

from __future__ import annotations

import os
import shlex
import sys

from emu.frontends.launch import read_stdin_file
from emu.frontends.sweep.case import Program
from emu.frontends.sweep.driver import Sweeper
from emu.frontends.sweep.report import CaseStore, ProgressBar, exit_status, print_report, write_json
from emu.frontends.sweep.runners import make_runner
from kernel_model.errors import InputError
from kernel_model.profiles import KernelProfile


def kernels_of(text: str) -> list[str]:
    names = [k.strip() for k in text.split(",") if k.strip()]
    if not names:
        raise InputError("sweep: --kernel names no profile")
    for k in names:
        KernelProfile.get(k)  # an unknown name is a one-line error
    return names


def program_of(args) -> Program:
    prog = args.program
    if not prog.startswith("guest:"):
        if not os.path.isfile(prog):
            raise InputError(f"{prog}: no such file")
        prog = os.path.abspath(prog)
    if not os.path.isdir(args.sysroot):
        raise InputError(f"--sysroot {args.sysroot!r} is not a directory")
    argv = [prog[len("guest:") :] if prog.startswith("guest:") else prog, *args.args]
    return Program.of(
        prog,
        argv,
        read_stdin_file(args.stdin),
        sysroot=args.sysroot,
        seed=args.seed,
        cpus=args.cpus,
        max_insns=args.max_insns or None,
        timeout=args.timeout or None,
    )


def repro_for(args):
    extra = (
        (["--stdin", args.stdin] if args.stdin else [])
        + (["--sysroot", args.sysroot] if args.sysroot != "/" else [])
        + (["--cpus", str(args.cpus)] if args.cpus != 1 else [])
    )

    def repro(program, kernel, sites) -> str:
        words = ["uprobe-emu", "sweep", "--kernel", kernel, *extra]
        for s in sites:
            words += ["--site", s.key if s.path != program.path else s.key.replace(s.path, args.program, 1)]
        return shlex.join([*words, args.program, *program.argv[1:]])

    return repro


def cmd_sweep(args) -> int:
    if args.resume and not args.jsonl:
        raise InputError("sweep: --resume needs --jsonl FILE (the stream to continue)")
    if args.ray is not None and args.jobs > 1:
        raise InputError("sweep: give --jobs or --ray, not both")
    if args.plot:
        from emu.frontends.sweep.plot import check_plot_path

        check_plot_path(args.plot)
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
        sweeper = Sweeper(program, runner, store=store, progress=progress, batch=args.batch, repro=repro_for(args))
        kw = dict(mode=args.sites, libraries=args.libraries, site_specs=args.site)
        sweeps = [sweeper.sweep(k, **kw) for k in kernels]
        if args.host:
            from emu.frontends.sweep.host import host_sweep

            host = host_sweep(
                program,
                sweeps[0],
                batch=args.batch,
                timeout=args.timeout or 60.0,
                unoptimized_clean=lambda site: sweeper.transparent_without_optimizer(site, sweeps[0]),
                store=store,
            )
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
    if args.json or args.plot:
        doc = {
            "program": program.path,
            "argv": list(program.argv),
            "sha256": program.sha256,
            "runner": runner.name,
            "workers": runner.workers,
            "kernels": [s.to_json() for s in sweeps],
        }
        if host is not None:
            doc["host"] = host.to_json()
        if args.json:
            write_json(args.json, doc)
        if args.plot:
            from emu.frontends.sweep.plot import plot_sweep

            plot_sweep(doc, args.plot)
            print(f"plot: {args.plot}")
    sys.stdout.flush()
    return exit_status(sweeps, host)
