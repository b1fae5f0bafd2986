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
from emu.frontends.host_tracefs import HostKernelError
from emu.inspect import describe_engine, engine_capabilities
from kernel_model.errors import EmuError, InputError


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
    cfg = Config(
        scenarios=names,
        columns=cols,
        consumer=args.consumer,
        iterations=args.iterations if args.iterations is not None else (2000 if q else None),
        warmup=args.warmup if args.warmup is not None else (2 if q else 10),
        repeat=args.repeat if args.repeat is not None else (1 if q else 3),
        seconds=args.seconds if args.seconds is not None else (0.05 if q else 0.5),
        workers=args.workers,
        cost_profile=args.cost_profile,
        growth=not args.no_growth,
        checks=not args.no_checks,
    )
    cfg.host_iterations = args.iterations
    cfg.growth_repeat = max(cfg.repeat, 5)  # growth timings: pairs and a best of 5
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
    if getattr(args, "plot", None) and (
        args.threads or getattr(args, "engine", False) or getattr(args, "sweep", False)
    ):
        raise InputError("--plot draws the scenarios or --cpus, not --threads, --engine or --sweep")
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
    if getattr(args, "fit", False):
        raise InputError("--fit goes with --cpus")
    cfg = config_from_args(args)
    programs_only = getattr(args, "programs", False) and not args.scenarios
    if getattr(args, "plot", None):
        if programs_only:
            raise InputError("--plot draws the scenarios or --cpus, not --programs alone")
        from emu.frontends.bench.plot import check_plot_path

        check_plot_path(args.plot)
    out, err = _consoles()
    with JsonReport(args.json) as json_out:
        with Progress(
            TextColumn("{task.description:<40}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=err.is_terminal,
        ) as progress:
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
    if getattr(args, "plot", None):
        from emu.frontends.bench.plot import plot_bench

        plot_bench(report, args.plot)
        out.print(f"plot: {args.plot}", markup=False, highlight=False)
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
        from emu.frontends.bench.plot import check_plot_path

        check_plot_path(args.plot)
    out, err = _consoles()
    with JsonReport(args.json) as json_out:
        with Progress(
            TextColumn("{task.description:<40}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=err.is_terminal,
        ) as progress:
            prices = scaling.FITTED
            if args.fit:
                task = progress.add_task(f"fitting on {scaling.FIT_TABLE}", total=None)
                prices, _ = scaling.fit_prices(progress=lambda: progress.advance(task))
            report = scaling_report.run_scaling(
                cols, scenarios, cpus, prices=prices, with_checks=not args.no_checks, progress=progress
            )
        scaling_report.render_scaling(report, out)
        json_out.write(report)
    if args.plot:
        from emu.frontends.bench.plot import plot_bench

        plot_bench(report, args.plot)
        out.print(f"plot: {args.plot}", markup=False, highlight=False)
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
        with Progress(
            TextColumn("{task.description:<40}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=err.is_terminal,
        ) as progress:
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
        with Progress(
            TextColumn("{task.description:<40}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=err.is_terminal,
        ) as progress:
            report = engine_costs.run_engine(repeat, progress)
            report["unit_costs"] = engine_costs.unit_costs(repeat)
        report["engine"] = engine_capabilities()
        out.print(escape(describe_engine(report["engine"])), highlight=False)
        render_unit_costs(report["unit_costs"], out)
        render_targets(report["targets"], out)
        json_out.write(report)
    return 0
