"""``uprobe-emu bench``: the subcommand's options, the run configuration they make, and the
command itself (progress on stderr, the report on stdout, ``--json FILE``)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from emu.frontends.bench import costmodel, detach, engine_costs, scaling, scaling_report
from emu.frontends.bench.host import run_host
from emu.frontends.bench.programs import program_targets, run_programs
from emu.frontends.bench.render import render, render_programs, render_targets, render_unit_costs
from emu.frontends.bench.report import Config, JsonReport, programs_report, run_bench
from emu.frontends.bench.scenarios import SCENARIOS, parse_column
from emu.frontends.bench.sweep_target import run_sweep_target
from emu.frontends.bench.threads import cmd_threads
from emu.frontends.cli import count, seconds
from emu.frontends.host_tracefs import HostKernelError
from emu.inspect import describe_engine, engine_capabilities
from kernel_model.errors import EmuError, InputError
from kernel_model.profiles import KernelProfile


def add_cli(sub, add_machine_options) -> None:
    p = sub.add_parser(
        "bench", help="the kernel's trigger benchmarks in the model (and on the host kernel)",
        description="Run the kernel's bench_trigger scenarios under kernel profiles: emulated "
                    "M/s, exact events per iteration, bare-Unicorn baselines, projected kernel "
                    "cost, growth scenarios.  Scenarios: " + ", ".join(SCENARIOS) + ".")
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="default: all")
    p.add_argument("--kernel", default="latest", metavar="V",
                   help=f"kernel profile ({', '.join(KernelProfile.names())}), optionally with "
                        "switches: 6.17:nop_emulation=x86_nops; default latest")
    p.add_argument("--vs", metavar="V2", action="append", default=[],
                   help="a second profile to compare with (side by side, with ratios)")
    p.add_argument("--policy", metavar="P,P", help="compare return_instance allocation policies "
                                                    "(kmalloc, array64, pool)")
    p.add_argument("--consumer", default="program", choices=("program", "handler", "ftrace"),
                   help="hit counter: program-only trace event (default), Python handler, ftrace event")
    p.add_argument("--iterations", type=count, metavar="N", help="timed iterations (default: sized to --seconds)")
    p.add_argument("--seconds", type=seconds, default=None, metavar="S",
                   help="target duration of one timed run when --iterations is not given (default 0.5)")
    p.add_argument("--warmup", type=count, default=None, metavar="W", help="warm-up iterations (default 10)")
    p.add_argument("--repeat", type=count, default=None, metavar="R", help="timed runs per scenario (default 3)")
    p.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    p.add_argument("--quick", action="store_true", help="small iteration counts (seconds)")
    p.add_argument("--workers", type=count, default=1, metavar="N",
                   help="run scenarios in N processes (timings compete for cores)")
    p.add_argument("--cost-profile", default="intel-2025", metavar="NAME",
                   help="machine profile for projected kernel cost (intel-2025, host-6.18)")
    p.add_argument("--no-growth", action="store_true", help="skip the growth scenarios")
    p.add_argument("--no-checks", action="store_true", help="skip the published-ratio checks")
    p.add_argument("--ri-iterations", type=count, metavar="N",
                   help="loop iterations of the return-instance growth scenario (2 uretprobe hits each)")
    p.add_argument("--host-kernel", action="store_true",
                   help="also measure the same scenarios natively on this host's kernel (root, tracefs)")
    p.add_argument("--threads", action="store_true",
                   help="only the threads benchmark: the same work on the main thread, 1 and 4 threads")
    p.add_argument("--programs", action="store_true",
                   help="time real workloads (glibc start-up, a malloc loop with libc malloc/free "
                        "probed, a shell pipeline) in the model and natively; alone, only these")
    p.add_argument("--cpus", metavar="LIST",
                   help="project M/s on the published tables' machine (2 sockets x 20 cores x 2 "
                        "threads) for each CPU count: 1,2,4,8 or 1-8, 'quick' (1,2,4,...,64) or 'all' "
                        "(the published 1-80 columns); with the fit and the published checks")
    p.add_argument("--plot", metavar="FILE", help="with --cpus: draw M/s against CPUs (.png or .svg)")
    p.add_argument("--fit", action="store_true",
                   help="with --cpus: fit the machine's prices on the fitted table again first (scipy)")
    p.add_argument("--engine", action="store_true",
                   help="only the engine's costs: guest stores against loads, 3,000 mmaps and exit, "
                        "with their targets")
    p.add_argument("--sweep", action="store_true",
                   help="only the sweep target: sweep --libraries --sites insn of /bin/true on a pool of "
                        "--workers processes (several minutes), timed against its target")
    p.add_argument("--detach", type=count, metavar="N",
                   help="project attaching and detaching N probes per kernel column (grace periods)")
    p.set_defaults(func=cmd_bench)


def config_from_args(args) -> Config:
    names = args.scenarios or list(SCENARIOS)
    bad = [s for s in names if s not in SCENARIOS]
    if bad:
        raise InputError(f"unknown scenario {bad[0]!r}; known: {', '.join(SCENARIOS)}")
    kernels = [args.kernel] + list(args.vs)
    policies = [p.strip() for p in args.policy.split(",")] if args.policy else [None]
    for pol in policies:
        if pol is not None and pol not in ("kmalloc", "array64", "pool"):
            raise InputError(f"unknown return_instance policy {pol!r} (kmalloc, array64, pool)")
    cols = []
    for k in kernels:
        for pol in policies:
            cols.append(parse_column(k, {"ri_alloc": pol} if pol else None))
    if len({c.label for c in cols}) != len(cols):
        raise InputError("the same kernel column is given twice")
    if args.iterations is not None and args.iterations < 1:
        raise InputError("--iterations must be positive")
    if args.repeat is not None and args.repeat < 1:
        raise InputError("--repeat must be at least 1")
    if args.seconds is not None and args.seconds <= 0:
        raise InputError("--seconds must be more than 0")
    if args.workers < 1:
        raise InputError("--workers must be at least 1")
    costmodel.get_machine(args.cost_profile)
    q = args.quick
    cfg = Config(scenarios=names, columns=cols, consumer=args.consumer,
                 iterations=args.iterations if args.iterations is not None else (2000 if q else None),
                 warmup=args.warmup if args.warmup is not None else (2 if q else 10),
                 repeat=args.repeat if args.repeat is not None else (1 if q else 3),
                 seconds=args.seconds if args.seconds is not None else (0.05 if q else 0.5),
                 workers=args.workers, cost_profile=args.cost_profile, growth=not args.no_growth,
                 checks=not args.no_checks)
    cfg.host_iterations = args.iterations
    cfg.growth_repeat = max(cfg.repeat, 5)      # growth timings: pairs and a best of 5
    if q:
        cfg.attach_count = 5_000
        cfg.ri_iterations = 500
        cfg.growth_iterations = 2000
        cfg.growth_repeat = 1
        cfg.adjacent = (100_000, 10_000)
    if args.ri_iterations:
        cfg.ri_iterations = args.ri_iterations
    return cfg


def _consoles():
    out = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 220)
    err = Console(file=sys.stderr)
    return out, err


def cmd_bench(args) -> int:
    if args.threads:
        return cmd_threads(args, _consoles()[0])
    if getattr(args, "engine", False):
        return cmd_engine(args)
    if getattr(args, "sweep", False):
        return cmd_sweep_target(args)
    if getattr(args, "detach", None):
        if getattr(args, "cpus", None) or getattr(args, "plot", None):
            raise InputError("--detach runs alone (not with --cpus or --plot)")
        return cmd_detach(args)
    if getattr(args, "cpus", None):
        return cmd_scaling(args)
    if getattr(args, "plot", None) or getattr(args, "fit", False):
        raise InputError("--plot and --fit go with --cpus")
    cfg = config_from_args(args)
    programs_only = getattr(args, "programs", False) and not args.scenarios
    out, err = _consoles()
    with JsonReport(args.json) as json_out:
        with Progress(TextColumn("{task.description:<40}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err, transient=err.is_terminal) as progress:
            report = programs_report(cfg) if programs_only else run_bench(cfg, progress)
            report["engine"] = engine_capabilities()
            report["unit_costs"] = engine_costs.unit_costs(cfg.repeat)
            if getattr(args, "programs", False):
                report["programs"] = run_programs(cfg.columns[0].kernel, cfg.repeat, progress)
                report["program_targets"] = program_targets(report["programs"])
            if args.host_kernel and not programs_only:
                try:
                    report["host_kernel"] = run_host(cfg, progress)
                except HostKernelError as e:
                    raise EmuError(f"--host-kernel: {e}") from None
        out.print(escape(describe_engine(report["engine"])), highlight=False)
        render_unit_costs(report["unit_costs"], out)
        if programs_only:
            render_programs(report["programs"], out, report["program_targets"])
        else:
            render(report, out)
        json_out.write(report)
    return 0


def _columns(args) -> list[str]:
    cols = [args.kernel] + list(args.vs)
    for c in cols:
        parse_column(c)
    if len(set(cols)) != len(cols):
        raise InputError("the same kernel column is given twice")
    return cols


def cmd_scaling(args) -> int:
    cpus = scaling.parse_cpus(args.cpus)
    scenarios = args.scenarios or ["uprobe-nop", "uretprobe-nop"]
    cols = _columns(args)
    if args.plot:
        scaling_report.check_plot_path(args.plot)
    out, err = _consoles()
    with JsonReport(args.json) as json_out:
        with Progress(TextColumn("{task.description:<40}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err, transient=err.is_terminal) as progress:
            prices = scaling.FITTED
            if args.fit:
                task = progress.add_task(f"fitting on {scaling.FIT_TABLE}", total=None)
                prices, _ = scaling.fit_prices(progress=lambda: progress.advance(task))
            report = scaling_report.run_scaling(cols, scenarios, cpus, prices=prices,
                                                with_checks=not args.no_checks, progress=progress)
        scaling_report.render_scaling(report, out)
        if args.plot:
            scaling_report.plot_scaling(report, args.plot)
            out.print(f"plot: {args.plot}")
        json_out.write(report)
    return 0


def cmd_detach(args) -> int:
    out, _ = _consoles()
    report = detach.run_detach(_columns(args), args.detach)
    detach.render_detach(report, out)
    with JsonReport(args.json) as json_out:
        json_out.write(report)
    return 0


def cmd_sweep_target(args) -> int:
    out, err = _consoles()
    with JsonReport(args.json) as json_out:
        with Progress(TextColumn("{task.description:<40}"), BarColumn(), TimeElapsedColumn(), console=err,
                      transient=err.is_terminal) as progress:
            report = run_sweep_target(args.workers, args.kernel, progress)
        report["engine"] = engine_capabilities()
        out.print(escape(describe_engine(report["engine"])), highlight=False)
        render_targets(report["targets"], out)
        json_out.write(report)
    return 0


def cmd_engine(args) -> int:
    out, err = _consoles()
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else 3)
    if repeat < 1:
        raise InputError("--repeat must be at least 1")
    with JsonReport(args.json) as json_out:
        with Progress(TextColumn("{task.description:<40}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err, transient=err.is_terminal) as progress:
            report = engine_costs.run_engine(repeat, progress)
            report["unit_costs"] = engine_costs.unit_costs(repeat)
        report["engine"] = engine_capabilities()
        out.print(escape(describe_engine(report["engine"])), highlight=False)
        render_unit_costs(report["unit_costs"], out)
        render_targets(report["targets"], out)
        json_out.write(report)
    return 0
