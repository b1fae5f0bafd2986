"""``sweep --plot FILE``: how many probed sites fall in each divergence class, as bars
grouped by kernel profile (one group member per ``--kernel`` profile, and the host kernel
with ``--host``); PNG, SVG or PDF by the extension.

The classes are :mod:`.classify`'s: the kernel-faithful ones (``pushf-tf``,
``syscall-xol``, ``xol-area-layout``, ``nop5-redzone``: probing is visible on a real
kernel too) in that order, then ``unclassified`` (what fails the sweep), then any other
class a report names.  Every class has a bar in every group, zero included, so two
sweeps' charts line up.  A bar counts sites: an interaction of several probes
(unclassified) counts each of its sites.

:func:`sweep_series` and :func:`sweep_chart` are pure functions of the report - the
document ``--json`` writes - and :func:`plot_sweep` draws it
(:mod:`emu.frontends.plotting`).
"""

from __future__ import annotations

from emu.frontends.plotting import Chart, Series, check_plot_path, draw
from emu.frontends.sweep.classify import FAITHFUL, UNCLASSIFIED

__all__ = ["check_plot_path", "plot_sweep", "sweep_classes", "sweep_chart", "sweep_series"]


def _groups(doc: dict) -> list[tuple[str, list]]:
    """(label, [(class, sites)]) per kernel profile, then the host."""
    out = [(k["kernel"], [(d["class"], len(d["sites"])) for d in k["divergences"]]) for k in doc["kernels"]]
    host = doc.get("host")
    if host:
        out.append((f"host {host['release']}", [(d["class"], 1) for d in host["divergences"]]))
    return out


def sweep_classes(doc: dict) -> tuple[str, ...]:
    """The x axis: the faithful classes, unclassified, then any other class seen."""
    known = FAITHFUL + (UNCLASSIFIED,)
    seen = {cls for _, found in _groups(doc) for cls, _ in found}
    return known + tuple(sorted(seen - set(known)))


def sweep_series(doc: dict) -> list[Series]:
    """One bar series per kernel profile (and the host): sites per class."""
    classes = sweep_classes(doc)
    out = []
    for i, (label, found) in enumerate(_groups(doc)):
        counts = dict.fromkeys(classes, 0)
        for cls, n in found:
            counts[cls] += n
        ys = tuple(counts[c] for c in classes)
        out.append(Series(label, classes, ys, "bar", i, tuple(str(n) for n in ys)))
    return out


def sweep_chart(doc: dict) -> Chart:
    """The series with the title (the program and each profile's sites swept and
    refused) and axis labels."""
    swept = "; ".join(f"{k['kernel']}: {k['sites']} sites, {len(k['refused'])} refused" for k in doc["kernels"])
    host = doc.get("host")
    if host:
        swept += (
            f"; host {host['release']}: {host['sites']} sites, {len(host['disagreements'])} disagreeing with the model"
        )
    return Chart(
        f"uprobe-emu sweep of {doc['program']}: probed sites per divergence class\n{swept}",
        "divergence class (kernel-faithful: " + ", ".join(FAITHFUL) + f"; {UNCLASSIFIED} fails the sweep)",
        "sites",
        tuple(sweep_series(doc)),
        sweep_classes(doc),
    )


def plot_sweep(doc: dict, path: str) -> None:
    """Draw the sweep report to ``path``."""
    draw(sweep_chart(doc), path)
