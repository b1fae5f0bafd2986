"""``bench --host-kernel``: the same scenarios run natively on this host's kernel, with a
tracefs uprobe/uretprobe event (``emu.frontends.hostdiff``) enabled in a private instance
whose ``tracing_on`` is 0, beside the model's figures and cost projection."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from typing import TYPE_CHECKING, Any

from emu.frontends.bench import costmodel
from emu.frontends.bench.measure import count_events, measure_scenario, mops_stats, round_iterations
from emu.frontends.bench.scenarios import GUEST, SCENARIOS, ColumnSpec, guest_file, site_offset
from emu.frontends.host_tracefs import HostKernelError, HostProbes, Tracefs, run_tag
from emu.frontends.hostdiff import ResolvedProbe, host_profile_name
from guest_programs import write_guest

if TYPE_CHECKING:
    from emu.frontends.bench.report import Config


def host_native(
    scen_name: str, n: int | None, warmup: int, repeat: int, seconds: float, tracefs, path: str, profile
) -> dict:
    """Run the trigger ELF natively with a tracefs uprobe (instance tracing off); time
    N iterations minus a 0-iteration run."""
    scen = SCENARIOS[scen_name]
    out: dict[str, Any] = {"scenario": scen_name}

    def run(iters: int) -> float:
        t0 = time.perf_counter()
        res = subprocess.run([path, str(scen.loop), str(iters), str(warmup)], capture_output=True)
        dt = time.perf_counter() - t0
        if res.returncode != 0:
            raise HostKernelError(f"native bench_trigger exited {res.returncode}")
        return dt

    def calibrate():
        nonlocal n
        if n is None:
            probe = 2_000_000 if scen.kind == "none" and scen.loop == 0 else 50_000
            base = min(run(0) for _ in range(3))
            per = max(run(probe) - base, 1e-6) / probe
            n = round_iterations(seconds / per, 10_000, 2_000_000_000)

    def measure():
        samples = []
        for _ in range(repeat):
            t0, tn = run(0), run(n)
            samples.append(n / max(tn - t0, 1e-9) / 1e6)
        return samples

    group = run_tag()
    if scen.kind == "none":
        calibrate()
        samples = measure()
        out.update(status="ok", iterations=n, samples_mops=samples, mops=mops_stats(samples))
        return out
    off = site_offset(guest_file(), scen, profile)
    kind = "r" if scen.kind == "return" else "p"
    try:
        with HostProbes(tracefs, [ResolvedProbe("bench", "bench", kind, off, 0, "")], path) as hp:
            ev = f"{hp.instance}/events/{group}/bench/enable"
            if tracefs.read(ev).strip() != "1":
                # the group enable skips an event the kernel refused; ask it for the errno
                try:
                    tracefs.write(ev, "1")
                except HostKernelError as e:
                    raise HostKernelError(_errno_text(str(e))) from None
            tracefs.write(f"{hp.instance}/tracing_on", "0")
            calibrate()
            before = _profile_hits(tracefs, path)
            samples = measure()
            hits = _profile_hits(tracefs, path) - before
    except HostKernelError as e:
        out.update(status="n/a", reason=str(e))
        return out
    assert n is not None  # calibrate() sized it
    expect = repeat * (n + 2 * warmup)
    if hits == 0:
        out.update(
            status="n/a",
            reason="probe never installed: 0 of "
            f"{expect} expected hits (the kernel refused the instruction when the ELF was "
            "mapped, as prepare_uprobe does; tracefs accepted the event)",
            hits=0,
            expected_hits=expect,
        )
        return out
    out.update(
        status="ok",
        iterations=n,
        samples_mops=samples,
        mops=mops_stats(samples),
        probe=f"{kind}:{path}:{off:#x}",
        hits=hits,
        expected_hits=expect,
    )
    return out


def _errno_text(msg: str) -> str:
    """tracefs reports the kernel's ENOTSUPP (524) as 'Unknown error 524'."""
    return msg.replace("Unknown error 524", "ENOTSUPP (524)")


def _profile_hits(tracefs, path: str) -> int:
    """Hits of our event in ``uprobe_profile`` (lines: path, event name, hits)."""
    total = 0
    for line in tracefs.read("uprobe_profile").splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == path and parts[1] == "bench":
            total += int(parts[-1])
    return total


def run_host(cfg: Config, progress=None) -> dict:
    """Native measurements on this host's kernel, beside the model's."""
    prof_name = host_profile_name()
    col = ColumnSpec(prof_name)
    profile = col.profile()
    tmp = tempfile.mkdtemp(prefix="uemu-bench-")
    path = os.path.join(tmp, GUEST)
    write_guest(GUEST, path)
    os.chmod(path, 0o755)
    rows = []
    task = progress.add_task("host kernel", total=len(cfg.scenarios) * 2) if progress else None
    try:
        tracefs = Tracefs()
        try:
            for s in cfg.scenarios:
                if progress:
                    progress.update(task, description=f"host {s}")
                try:
                    r = host_native(s, cfg.host_iterations, cfg.warmup, cfg.repeat, cfg.seconds, tracefs, path, profile)
                except HostKernelError as e:
                    r = {"scenario": s, "status": "n/a", "reason": str(e)}
                rows.append(r)
                if progress:
                    progress.advance(task)
                    progress.update(task, description=f"model {s}")
                ftr = count_events(SCENARIOS[s], col, "ftrace")
                if ftr.get("status") == "ok":
                    r["model_events"] = ftr["per_iter"]
                    r["model_insns"] = ftr["insns_per_iter"]
                    r["features"] = costmodel.features_from_events(dict(ftr["per_iter"], insns=ftr["insns_per_iter"]))
                if r.get("status") == "ok" and ftr.get("status") == "ok":
                    mm = measure_scenario(s, col, cfg.consumer, cfg.iterations, cfg.warmup, 1, min(cfg.seconds, 0.3))
                    r["model_mops"] = mm["mops"]["median"] if mm.get("status") == "ok" else None
                if progress:
                    progress.advance(task)
        finally:
            tracefs.close()
    finally:
        try:
            os.unlink(path)
            os.rmdir(tmp)
        except OSError:
            pass
    cost = costmodel.get_machine(cfg.cost_profile if cfg.cost_profile.startswith("host") else "host-6.18")
    for r in rows:
        if "features" in r:
            r["projected_mops"] = cost.project_mops(r["features"])
    live: dict[str, Any] | None = None
    okrows = {r["scenario"]: r for r in rows if r.get("status") == "ok" and "features" in r}
    if len(okrows) >= len(costmodel.FIT_FEATURES):
        table = costmodel.PublishedTable(
            "host-live",
            "this host, measured now",
            (costmodel.Column("host", prof_name),),
            {s: (r["mops"]["median"],) for s, r in okrows.items()},
        )
        try:
            lp = costmodel.fit_profile(
                "host-live",
                "this host, measured now",
                table,
                {(prof_name, s): r["features"] for s, r in okrows.items()},
            )
            live = {"coef_ns": lp.coef, "residuals": {k[1]: v for k, v in lp.residuals.items()}}
            for r in okrows.values():
                r["live_projected_mops"] = lp.project_mops(r["features"])
        except ValueError as e:
            live = {"error": str(e)}
    return {
        "release": os.uname().release,
        "profile": prof_name,
        "cost_profile": cost.name,
        "rows": rows,
        "live_fit": live,
        "method": "tracefs uprobe/uretprobe event enabled in a private instance whose tracing_on is 0; "
        "wall time of N iterations minus a 0-iteration run of the same ELF",
    }
