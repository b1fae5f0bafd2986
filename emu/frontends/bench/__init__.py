"""``uprobe-emu bench``: the kernel's trigger benchmarks (tools/testing/selftests/bpf/benchs/bench_trigger.c) in the
model.

Each scenario runs the built-in guest ``bench_trigger`` (the kernel's trigger bodies in
keystone assembly) under a kernel profile with one consumer that counts hits, and reports

* emulated throughput in M triggers/s (min / median / max over ``--repeat`` runs), timed
  after a warm-up so first-hit effects (the nop5/nop10 optimization, pool and XOL-area
  creation) are excluded;
* the exact events of one iteration from the machine's counters (a count run with a
  guest-instruction hook measures two phases and takes the difference, so every number
  is an exact integer);
* two bare-Unicorn baselines measured in the same process on the same trigger code: the
  scenario's loop without any hook, and the nop loop with its ``nop`` replaced by ``int3``
  and an empty ``UC_HOOK_INTR`` callback (one interrupt per iteration); printed as ratios
  model / baseline;
* the projected kernel throughput of a cost profile (``emu.frontends.bench.costmodel``) applied
  to the exact event counts, and for every scenario pair a published table covers, the
  projected ratio beside the published one with the error;
* growth scenarios: per-hit cost with 1, 100 and 10,000 probes registered, the time to
  attach 50,000 probes, and return_instance memory per allocation policy;
* the hit-path targets, met or missed, each ratio measured in the same run, with two
  floors: the hand-inlined hit (the same probe hit written as one straight-line Python
  callback on bare Unicorn, timed next to each run: the least Python with the same
  semantics) and the floor a Python trap handler cannot beat (an empty natively
  registered interrupt callback); and "full semantics vs no semantics": uprobe-nop
  against a Qiling-style one-address code hook calling an empty Python function;
* ``--programs``: real workloads (:mod:`.programs`) in the model beside their native time.

Scenarios whose machinery a profile lacks (nop10 before 7.3: the kernel and the model
refuse the probe with ENOTSUPP) are listed as ``n/a (reason)``.

USDT scenarios: the keystone guest has no ``.note.stapsdt``, so the bench probes the site
address (the note's pc) with libbpf's nop-combo rule (``emu.probes.usdt.
usdt_attach_offsets``): attach one byte further, on the nop5/nop10, when the profile has
the uprobe syscall and the site is the matching combo.  The same ELF runs natively for
``--host-kernel``, where the same rule picks the tracefs probe offset.

Consumers (``--consumer``): ``program`` (default; a trace event with a program-only
consumer, like the BPF programs of the kernel's bench: the args buffer is filled only by
kernels without the lazy buffer), ``handler`` (a plain Python uprobe consumer), ``ftrace``
(a trace event that writes ftrace lines; args buffer filled on every hit), ``bpf`` (the
kernel bench's own consumer: a BPF counting program, built with clang from
``guest_programs/bpf/bench_count.bpf.c``, on a uprobe perf event, :mod:`.bpf_counter`).

The package, one job per module: :mod:`.scenarios` (the scenario table, kernel columns, the
guest ELFs, attaching the counting consumer), :mod:`.measure` (count and timed runs in the
model, bare-Unicorn baselines, growth), :mod:`.host` (``--host-kernel``: native runs with
tracefs probes), :mod:`.report` (the job pool, the assembled report, targets, the JSON
file), :mod:`.render` (rich tables) and :mod:`.cli` (options, configuration, the command).

JSON (``--json FILE``), schema ``uprobe-emu.bench/1``::

    {"schema", "host": {...}, "config": {...},
     "columns": [{"label", "kernel", "overrides"}],
     "baselines": {"int3_hook": {"mops": {min, median, max}, ...}, "syscall_hook": ...,
                   "hook_free": {"<loop>": {...}}},
     "scenarios": [{"name", "description", "results": {"<column label>": {
         "status": "ok" | "n/a", "reason", "iterations", "warmup", "samples_mops": [...],
         "mops": {"min", "median", "max"}, "per_iter": {counter: n, "syscalls": {nr: n}},
         "insns_per_iter", "hits_per_iter", "consistent", "ratio_hook_free", "ratio_int3",
         "projected_mops", "projected_ns"}}}],
     "ratios": [{"scenario", "column", "vs", "measured", "projected"}],
     "cost_profile": {"name", "coef", ...}, "projection_checks": [{...}],
     "growth": {"probe_count": [...], "attach": {...}, "ri_memory": [...]},
     "host_kernel": {...} | null,
     "targets": [{"target", "value", "op", "limit", "ok", "note"}]}
"""

from typing import TYPE_CHECKING

from emu.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from emu.frontends.bench.args import add_cli
    from emu.frontends.bench.cli import cmd_bench, config_from_args
    from emu.frontends.bench.host import host_native, run_host
    from emu.frontends.bench.measure import (
        EVENT_KEYS,
        bare_run,
        count_events,
        growth_attach,
        growth_probe_counts,
        growth_ri,
        measure_baseline,
        measure_scenario,
        time_model,
    )
    from emu.frontends.bench.programs import PROGRAMS, run_programs
    from emu.frontends.bench.render import events_str, render, render_host, render_programs
    from emu.frontends.bench.report import SCHEMA, TARGET_INT3_RATIOS, Config, programs_report, run_bench, targets
    from emu.frontends.bench.scenarios import (
        GUEST,
        GUEST_PATH,
        LOOP_NAMES,
        SCENARIOS,
        ColumnSpec,
        Scenario,
        attach,
        growth_elf,
        guest_elf,
        guest_file,
        parse_column,
        site_offset,
    )

__all__ = [
    "EVENT_KEYS",
    "GUEST",
    "GUEST_PATH",
    "LOOP_NAMES",
    "PROGRAMS",
    "SCENARIOS",
    "SCHEMA",
    "TARGET_INT3_RATIOS",
    "ColumnSpec",
    "Config",
    "programs_report",
    "render_programs",
    "run_programs",
    "Scenario",
    "add_cli",
    "attach",
    "bare_run",
    "cmd_bench",
    "config_from_args",
    "count_events",
    "events_str",
    "growth_attach",
    "growth_elf",
    "growth_probe_counts",
    "growth_ri",
    "guest_elf",
    "guest_file",
    "host_native",
    "measure_baseline",
    "measure_scenario",
    "parse_column",
    "render",
    "render_host",
    "run_bench",
    "run_host",
    "site_offset",
    "targets",
    "time_model",
]

# Imported when first asked for (PEP 562): the command line imports this package's
# argument definitions without loading the command itself.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "add_cli": ".args",
        "cmd_bench": ".cli",
        "config_from_args": ".cli",
        "host_native": ".host",
        "run_host": ".host",
        "EVENT_KEYS": ".measure",
        "bare_run": ".measure",
        "count_events": ".measure",
        "growth_attach": ".measure",
        "growth_probe_counts": ".measure",
        "growth_ri": ".measure",
        "measure_baseline": ".measure",
        "measure_scenario": ".measure",
        "time_model": ".measure",
        "PROGRAMS": ".programs",
        "run_programs": ".programs",
        "events_str": ".render",
        "render": ".render",
        "render_host": ".render",
        "render_programs": ".render",
        "SCHEMA": ".report",
        "TARGET_INT3_RATIOS": ".report",
        "Config": ".report",
        "programs_report": ".report",
        "run_bench": ".report",
        "targets": ".report",
        "GUEST": ".scenarios",
        "GUEST_PATH": ".scenarios",
        "LOOP_NAMES": ".scenarios",
        "SCENARIOS": ".scenarios",
        "ColumnSpec": ".scenarios",
        "Scenario": ".scenarios",
        "attach": ".scenarios",
        "growth_elf": ".scenarios",
        "guest_elf": ".scenarios",
        "guest_file": ".scenarios",
        "parse_column": ".scenarios",
        "site_offset": ".scenarios",
    },
)
