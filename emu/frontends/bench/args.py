"""``uprobe-emu bench``'s options; the command is :func:`emu.frontends.bench.cli.cmd_bench`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from emu.frontends.options import count, lazy_command, seconds
from kernel_model.profiles import KernelProfile

if TYPE_CHECKING:
    from emu.frontends.options import SubParsers

# The scenarios, in the order the bench runs and lists them (emu.frontends.bench.scenarios
# defines each).
SCENARIO_NAMES = (
    "usermode-count",
    "syscall-count",
    "uprobe-nop",
    "uprobe-push",
    "uprobe-ret",
    "uprobe-nop5",
    "uprobe-nop10",
    "uretprobe-nop",
    "uretprobe-push",
    "uretprobe-ret",
    "uretprobe-nop5",
    "uretprobe-nop10",
    "usdt-nop",
    "usdt-nop5",
    "usdt-nop10",
)


def add_cli(sub: SubParsers, add_machine_options: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "bench",
        help="the kernel's trigger benchmarks in the model (and on the host kernel)",
        description="Run the kernel's bench_trigger scenarios under kernel profiles: emulated "
        "M/s, exact events per iteration, bare-Unicorn baselines, projected kernel "
        "cost, growth scenarios.  Scenarios: " + ", ".join(SCENARIO_NAMES) + ".",
    )
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="default: all")
    p.add_argument(
        "--kernel",
        default="latest",
        metavar="V",
        help=f"kernel profile ({', '.join(KernelProfile.names())}), optionally with "
        "switches: 6.17:nop_emulation=x86_nops; default latest",
    )
    p.add_argument(
        "--vs",
        metavar="V2",
        action="append",
        default=[],
        help="a second profile to compare with (side by side, with ratios)",
    )
    p.add_argument(
        "--policy", metavar="P,P", help="compare return_instance allocation policies (kmalloc, array64, pool)"
    )
    p.add_argument(
        "--consumer",
        default="program",
        choices=("program", "handler", "ftrace", "bpf"),
        help="hit counter: program-only trace event (default), Python handler, ftrace event, "
        "or bpf: the kernel bench's BPF counting program (built with clang) on a uprobe perf event",
    )
    p.add_argument("--iterations", type=count, metavar="N", help="timed iterations (default: sized to --seconds)")
    p.add_argument(
        "--seconds",
        type=seconds,
        default=None,
        metavar="S",
        help="target duration of one timed run when --iterations is not given (default 0.5)",
    )
    p.add_argument("--warmup", type=count, default=None, metavar="W", help="warm-up iterations (default 10)")
    p.add_argument("--repeat", type=count, default=None, metavar="R", help="timed runs per scenario (default 3)")
    p.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    p.add_argument("--quick", action="store_true", help="small iteration counts (seconds)")
    p.add_argument(
        "--workers", type=count, default=1, metavar="N", help="run scenarios in N processes (timings compete for cores)"
    )
    p.add_argument(
        "--cost-profile",
        default="intel-2025",
        metavar="NAME",
        help="machine profile for projected kernel cost (intel-2025, host-6.18)",
    )
    p.add_argument("--no-growth", action="store_true", help="skip the growth scenarios")
    p.add_argument("--no-checks", action="store_true", help="skip the published-ratio checks")
    p.add_argument(
        "--ri-iterations",
        type=count,
        metavar="N",
        help="loop iterations of the return-instance growth scenario (2 uretprobe hits each)",
    )
    p.add_argument(
        "--host-kernel",
        action="store_true",
        help="also measure the same scenarios natively on this host's kernel (root, tracefs)",
    )
    p.add_argument(
        "--threads",
        action="store_true",
        help="only the threads benchmark: the same work on the main thread, 1 and 4 threads",
    )
    p.add_argument(
        "--programs",
        action="store_true",
        help="time real workloads (glibc start-up, a malloc loop with libc malloc/free "
        "probed, a shell pipeline) in the model and natively; alone, only these",
    )
    p.add_argument(
        "--cpus",
        metavar="LIST",
        help="project M/s on the published tables' machine (2 sockets x 20 cores x 2 "
        "threads) for each CPU count: 1,2,4,8 or 1-8, 'quick' (1,2,4,...,64) or 'all' "
        "(the published 1-80 columns); with the fit and the published checks",
    )
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="also draw the numbers to FILE (.png, .svg or .pdf; needs matplotlib: pip install "
        "'uprobe-emu[plot]'): each scenario's M/s per kernel as grouped bars; with --cpus, "
        "M/s against CPUs, the published rows as markers",
    )
    p.add_argument(
        "--fit",
        action="store_true",
        help="with --cpus: fit the machine's prices on the fitted table again first (scipy)",
    )
    p.add_argument(
        "--engine",
        action="store_true",
        help="only the engine's costs: guest stores against loads, 3,000 mmaps and exit, with their targets",
    )
    p.add_argument(
        "--sweep",
        action="store_true",
        help="only the sweep target: sweep --libraries --sites insn of /bin/true on a pool of "
        "--workers processes (several minutes), timed against its target",
    )
    p.add_argument(
        "--detach",
        type=count,
        metavar="N",
        help="project attaching and detaching N probes per kernel column (grace periods)",
    )
    p.set_defaults(func=lazy_command("emu.frontends.bench.cli", "cmd_bench"))
