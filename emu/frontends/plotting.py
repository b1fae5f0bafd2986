"""Charts of the front ends' reports (``bench --plot``, ``sweep --plot``) drawn to a file.

A chart is plain data - :class:`Chart` holding :class:`Series` - made by a pure function
of a report (``emu.frontends.bench.plot.bench_chart``, ``emu.frontends.sweep.plot.
sweep_chart``), so what is plotted can be checked without drawing.  :func:`draw` renders
it with matplotlib's object API on the Agg canvas (no pyplot, so nothing global is left
behind) as PNG, SVG or PDF by the file's extension.  matplotlib is the optional ``plot``
extra and is imported only here, only when drawing; :func:`check_plot_path` refuses a
bad extension, a missing directory or a missing matplotlib before a long run starts.

Every bar is an artist with a gid (``bar:SERIES:CATEGORY``), every line ``line:SERIES``
and every marker set ``markers:SERIES``, and an SVG keeps its text as text, so a drawn
file can be checked for what it shows.
"""

from __future__ import annotations

import math
import os
import textwrap
from dataclasses import dataclass

from kernel_model.errors import InputError

FORMATS = ("png", "svg", "pdf")
INSTALL = "pip install 'uprobe-emu[plot]'"
MIN_MATPLOTLIB = (3, 8)
DPI = 100
LINE_SIZE = (8.0, 5.0)  # inches: M/s against CPUs
BAR_HEIGHT = 5.0
MAX_BAR_WIDTH = 30.0


@dataclass(frozen=True)
class Series:
    """One legend entry.  ``kind`` ``bar``: ``x`` are category names, ``text`` the label
    printed on each bar, ``low``/``high`` an error bar's ends (None: none); ``line`` and
    ``markers``: ``x`` are numbers.  ``color`` indexes matplotlib's colour cycle, so a
    published row's markers share the colour of the curve projected for it."""

    label: str
    x: tuple
    y: tuple
    kind: str = "bar"
    color: int = 0
    text: tuple | None = None
    low: tuple | None = None
    high: tuple | None = None


@dataclass(frozen=True)
class Chart:
    """What one file shows.  ``categories``: the bar chart's x axis in order (a series
    without a point for a category gets an ``n/a`` mark there); None for a line chart."""

    title: str
    xlabel: str
    ylabel: str
    series: tuple
    categories: tuple | None = None


def plot_format(path: str) -> str:
    """``png``, ``svg`` or ``pdf`` from the file name; anything else is refused."""
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in FORMATS:
        raise InputError(f"--plot writes a .png, .svg or .pdf file, not {path!r}")
    return ext


def check_plot_path(path: str) -> str:
    """Refuse, before the run, a plot that could not be written: the extension, the
    directory, and matplotlib (missing or older than 3.8).  Returns the format."""
    fmt = plot_format(path)
    if os.path.isdir(path):
        raise InputError(f"--plot: cannot write {path!r}: it is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise InputError(f"--plot: cannot write {path!r}: no directory {parent!r}")
    if not os.access(parent, os.W_OK):
        raise InputError(f"--plot: cannot write {path!r}: directory {parent!r} is not writable")
    try:
        import matplotlib
    except ImportError:
        raise InputError(f"--plot needs matplotlib: {INSTALL}") from None
    found = tuple(int(p) for p in matplotlib.__version__.split(".")[:2] if p.isdigit())
    if found < MIN_MATPLOTLIB:
        raise InputError(
            f"--plot needs matplotlib 3.8 or later (found {matplotlib.__version__}): pip install -U 'uprobe-emu[plot]'"
        )
    return fmt


def figure_size(chart: Chart) -> tuple[float, float]:
    """Inches: a line chart is fixed; a bar chart widens with its categories and the
    bars in each, up to :data:`MAX_BAR_WIDTH`.  Whole tenths, so the PNG is exactly
    ``size * DPI`` pixels."""
    if chart.categories is None:
        return LINE_SIZE
    bars = sum(s.kind == "bar" for s in chart.series) or 1
    width = 2.0 + len(chart.categories) * max(0.9, 0.35 * bars + 0.3)
    return (round(min(max(width, 6.4), MAX_BAR_WIDTH), 1), BAR_HEIGHT)


def format_value(v: float) -> str:
    """A value as the rich tables print it: integers as they are, M/s to three or
    four significant figures (``render._fmt_mops``'s rule)."""
    if isinstance(v, int):
        return str(v)
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def draw(chart: Chart, path: str) -> None:
    """Render ``chart`` to ``path`` (PNG, SVG or PDF by its extension)."""
    fmt = check_plot_path(path)
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    size = figure_size(chart)
    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    handles = None
    if chart.categories is None:
        _lines(ax, chart)
        if all(isinstance(v, int) for s in chart.series for v in s.x):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # CPU counts
    else:
        handles = _bars(ax, chart)
    ax.set_ylabel(chart.ylabel)
    ax.set_title(_wrap(chart.title, size[0], 9), fontsize=9, loc="left")
    ax.set_xlabel(_wrap(chart.xlabel, size[0], 10))
    ax.set_ylim(bottom=0)
    values = [v for s in chart.series for v in s.y]
    if values and all(isinstance(v, int) for v in values):
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: no fractional ticks
    ax.grid(True, axis="y", alpha=0.3)
    if chart.series:
        ax.legend(handles=handles, fontsize=8)
    # text stays text in an SVG (searchable, and checkable); ids do not change between runs
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "uprobe-emu"}):
        try:
            fig.savefig(path, format=fmt, dpi=DPI)
        except OSError as e:
            raise InputError(f"--plot: cannot write {path!r}: {e.strerror or e}") from None


def _wrap(text: str, width_in: float, points: float) -> str:
    """Wrap each line of ``text`` to the figure's width (a character is about half
    its point size wide)."""
    chars = max(40, int(width_in * 72 / (points * 0.55)))
    return "\n".join(textwrap.fill(line, chars, break_on_hyphens=False) for line in text.split("\n"))


def _bars(ax, chart: Chart) -> list:
    """Grouped bars; returns the legend's handles (one swatch a series, drawn even for a
    series without a bar)."""
    from matplotlib.patches import Patch

    cats = list(chart.categories or ())
    where = {c: i for i, c in enumerate(cats)}
    n = len(chart.series) or 1
    width = 0.8 / n
    for i, s in enumerate(chart.series):
        shift = -0.4 + width * (i + 0.5)
        xs = [where[c] + shift for c in s.x]
        yerr = None
        if s.low is not None and s.high is not None:
            yerr = [[max(0.0, y - lo) for y, lo in zip(s.y, s.low)], [max(0.0, hi - y) for y, hi in zip(s.y, s.high)]]
        bars = ax.bar(xs, s.y, width, yerr=yerr, capsize=2 if yerr else 0, label=s.label, color=f"C{s.color % 10}")
        for rect, c in zip(bars.patches, s.x):
            rect.set_gid(f"bar:{s.label}:{c}")
        if s.text is not None:
            ax.bar_label(bars, labels=list(s.text), fontsize=7, padding=2)
        for c in cats:
            if c not in s.x:
                ax.text(where[c] + shift, 0, "n/a", rotation=90, ha="center", va="bottom", fontsize=7)
    per_category = figure_size(chart)[0] * 72 / max(len(cats), 1)  # points
    rotate = max((len(c) for c in cats), default=0) * 8 * 0.6 > per_category * 0.9
    ax.set_xticks(range(len(cats)), cats, rotation=30 if rotate else 0, ha="right" if rotate else "center", fontsize=8)
    ax.set_xlim(-0.6, len(cats) - 0.4)  # every category's slot, bars or not
    top = max((h for s in chart.series for h in (s.high or s.y)), default=0)
    if not top or not math.isfinite(top):
        ax.set_ylim(0, 1)
    return [Patch(facecolor=f"C{s.color % 10}", label=s.label) for s in chart.series]


def _lines(ax, chart: Chart) -> None:
    for s in chart.series:
        color = f"C{s.color % 10}"
        if s.kind == "line":
            ax.plot(s.x, s.y, color=color, marker="o", markersize=3, label=s.label, gid=f"line:{s.label}")
        else:
            ax.plot(
                s.x,
                s.y,
                color=color,
                linestyle="none",
                marker="x",
                markersize=7,
                label=s.label,
                gid=f"markers:{s.label}",
            )
