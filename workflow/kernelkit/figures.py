"""Timing figures: every raw sample as a point, the median as a bar, min-max as whiskers; one panel
per shape with its own scale (shapes differ by orders of magnitude). SVG output is deterministic
(fixed hash salt, no date) so that a report rebuilt from the same results has the same bytes.
"""

from __future__ import annotations

import io
import math
from typing import Any, Sequence

import numpy as np

from kernelkit.units import natural_key

# One colour per layout in every figure: a library keeps its colour across kernels, and the
# hand-written layouts of a kernel take the other colours in the config's order.
LIBRARY_COLOURS = {"cupy": "#7f7f7f", "torch": "#d62728", "triton": "#9467bd"}
WRITTEN_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#17becf", "#8c564b", "#e377c2"]
# A panel whose samples span more than this factor gets a log axis, so no bar flattens the others.
LOG_SPAN = 10.0
# At most this wide (inches), the page's column at a 1280 px window shows a figure unscaled, so the
# smallest text, MIN_FONT_PT, is drawn at 8 * 4/3 = 10.7 px.
MAX_WIDTH_IN = 12.0
MIN_FONT_PT = 8.0


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "kernelkit", "font.size": 10,
                                "axes.titlesize": 10, "axes.labelsize": 10, "xtick.labelsize": 9,
                                "ytick.labelsize": 9, "legend.fontsize": 9, "figure.titlesize": 11})
    import matplotlib.pyplot as plt

    return plt


def _svg(plt: Any, fig: Any, top: float = 1.0) -> str:
    """The figure as SVG text without the XML prologue, so it can sit inline in HTML; `top` leaves the
    space above it to a legend of the whole figure."""
    fig.tight_layout(rect=(0, 0, 1, top))
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None}, dpi=150)
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _time_axis(ax: Any, values: Sequence[float], label: str) -> bool:
    """A y axis of times, which may span orders of magnitude: log scale with plain ticks beyond LOG_SPAN."""
    log = bool(values) and max(values) / min(values) > LOG_SPAN
    ax.set_ylabel(f"{label}, " + ("log scale" if log else "linear"))
    if log:
        _plain_log_y(ax)
    return log


def timing_figure(records: Sequence[dict[str, Any]], kernel: str) -> str:
    """SVG text of the kernel's timing figure, built from the raw samples of its timing records."""
    plt = _pyplot()
    records = [r for r in records if r["kernel"] == kernel]
    shapes = sorted({r["shape"] for r in records}, key=natural_key)
    libraries = sorted({r["layout"] for r in records if "library" in r}, key=natural_key)
    written = sorted({r["layout"] for r in records} - set(libraries), key=natural_key)
    layouts = written + libraries  # as the report's tables list them
    repeats = sorted({r["repeat"] for r in records})
    columns = min(3, len(shapes))
    rows = math.ceil(len(shapes) / columns)
    # As wide as one readable tick label per layout needs, never wider than the page shows unscaled.
    panel_width = min(MAX_WIDTH_IN / columns, max(3.6, 0.5 * len(layouts) * (len(repeats) + 1)))
    fig, axes = plt.subplots(rows, columns, figsize=(panel_width * columns, 0.6 + 2.7 * rows), squeeze=False)
    # Libraries by name (a library record names its package), the hand-written layouts by order.
    colours = {layout: WRITTEN_COLOURS[i % len(WRITTEN_COLOURS)] for i, layout in enumerate(written)}
    spare = iter(c for c in WRITTEN_COLOURS[::-1] if c not in colours.values())
    for layout in sorted(libraries):
        colours[layout] = LIBRARY_COLOURS.get(layout) or next(spare, "#444444")
    by_key = {(r["shape"], r["layout"], r["repeat"]): r["samples_us"] for r in records}
    jitter = np.random.default_rng(0)

    for ax, shape in zip(axes.flat, shapes):
        for li, layout in enumerate(layouts):
            for ri, repeat in enumerate(repeats):
                x = li * (len(repeats) + 1) + ri
                if not (samples := by_key.get((shape, layout, repeat))):
                    continue
                median = float(np.median(samples))
                ax.bar(x, median, width=0.7, color=colours[layout], alpha=0.35)
                ax.errorbar(x, median, yerr=[[median - min(samples)], [max(samples) - median]],
                            fmt="none", ecolor="black", capsize=3, linewidth=0.8)
                ax.plot(x + jitter.uniform(-0.2, 0.2, len(samples)), samples, ".", color=colours[layout],
                        markersize=2.5, rasterized=True)
        # One label per layout under its group of repeats, so labels never crowd each other.
        ticks = [li * (len(repeats) + 1) + (len(repeats) - 1) / 2 for li in range(len(layouts))]
        rotate = len(layouts) > 3
        ax.set_xticks(ticks, layouts, rotation=30 if rotate else 0, ha="right" if rotate else "center")
        ax.set(title=shape, xlabel="layout")
        if not _time_axis(ax, [s for (sh, _, _), samples in by_key.items() if sh == shape for s in samples],
                          "µs per launch"):
            ax.set_ylim(bottom=0)
    for ax in list(axes.flat)[len(shapes):]:
        ax.axis("off")
    fig.suptitle(f"{kernel}: repeats {', '.join(f'rep{r}' for r in repeats)} left to right under each layout",
                 x=0.01, ha="left")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig.legend(handles=[  # what the marks mean, once, above the panels
        Patch(color="#888888", alpha=0.35, label="median (bar)"),
        Line2D([], [], color="black", linewidth=0.8, marker="_", markersize=8, label="min to max (whiskers)"),
        Line2D([], [], color="#888888", linestyle="none", marker=".", markersize=6, label="every sample (points)")],
        loc="upper right", ncol=3, frameon=False)
    return _svg(plt, fig, top=1 - 0.45 / (0.6 + 2.7 * rows))


def clock_figure(records: Sequence[dict[str, Any]]) -> str:
    """SVG of every NVML reading the sampler took during a run: SM clock over the run's time,
    readings that showed a throttle reason in red. Gaps are the time between timed targets."""
    from kernelkit.sampler import THROTTLE_REASONS

    plt = _pyplot()
    points = sorted((p for r in records for p in r.get("clock_trace", []) if isinstance(p["sm_clock_mhz"], (int, float))),
                    key=lambda p: p["t"])
    fig, ax = plt.subplots(figsize=(9, 2.8))
    if points:
        for hot, size, colour, label in ((False, 2, "tab:blue", "SM clock"),
                                         (True, 3, "tab:red", "SM clock, throttle reason set")):
            shown = [p for p in points if bool(set(p["reasons"] or []) & THROTTLE_REASONS) == hot]
            ax.plot([p["t"] - points[0]["t"] for p in shown], [p["sm_clock_mhz"] for p in shown],
                    ".", markersize=size, color=colour, label=label, rasterized=True)
        ax.legend(loc="lower right")
        # Zoomed to the clocks seen: a drop of a few percent must be visible, not squashed against zero.
        low, high = min(p["sm_clock_mhz"] for p in points), max(p["sm_clock_mhz"] for p in points)
        margin = max(20.0, 0.05 * (high - low))
        ax.set_ylim(low - margin, high + margin)
    ax.set(xlabel="seconds since the first reading (linear)", ylabel="SM clock, MHz (linear, zoomed)",
           title="NVML readings during the timed samples")
    return _svg(plt, fig)


# One panel of a sweep figure: (shape, [(point, per-repeat medians)] fastest first,
# {library: pooled median}, the time at the ceiling or None).
SweepPanel = tuple[str, Sequence[tuple[str, Sequence[float]]], dict[str, float], "float | None"]


def sweep_figure(title: str, panels: Sequence[SweepPanel]) -> str:
    """SVG of time across a sweep's grid: one panel per shape, a row per point sorted by its pooled
    median (fastest at the top, so the grid reads as a ranking whatever its dimensions), a bar for
    the median of the repeats' medians, a point per repeat, the libraries and the ceiling as lines."""
    plt = _pyplot()
    rows = max(len(points) for _, points, _, _ in panels)
    width = min(MAX_WIDTH_IN, 6.0 * len(panels))
    fig, axes = plt.subplots(1, len(panels), figsize=(width, 1.6 + 0.2 * rows), squeeze=False)
    for ax, (shape, points, libraries, ceiling_us) in zip(axes.flat, panels):
        for y, (name, medians) in enumerate(points):
            ax.barh(y, float(np.median(medians)), height=0.7, color=WRITTEN_COLOURS[0], alpha=0.35)
            ax.plot(medians, [y] * len(medians), ".", color=WRITTEN_COLOURS[0], markersize=4)
        for name, us in libraries.items():
            ax.axvline(us, color=LIBRARY_COLOURS.get(name, "#444444"), linestyle="--", linewidth=1, label=name)
        if ceiling_us is not None:
            ax.axvline(ceiling_us, color="black", linestyle=":", linewidth=1, label="ceiling")
        ax.set_yticks(range(len(points)), [name for name, _ in points], fontsize=MIN_FONT_PT)
        ax.set(ylim=(len(points) - 0.5, -0.5), xlim=(0, None), xlabel="µs per launch (linear)",
               ylabel="point (its parameters)", title=shape)
        if libraries or ceiling_us is not None:
            ax.legend(loc="upper right", fontsize=MIN_FONT_PT)  # the fastest points, at the top, have the shortest bars
    fig.suptitle(f"{title}: every timed point, fastest at the top")
    return _svg(plt, fig)


# One point of the roofline: a configuration's arithmetic intensity (FLOPs per compulsory byte) and
# achieved GFLOP/s, its kernel and layout, and whether a library provides it.
RooflinePoint = tuple[str, str, float, float, bool]
# One ceiling: its label, "bandwidth" (GB/s: the line y = rate * x) or "compute" (GFLOP/s: flat), the
# rate, and whether it was measured in this run (solid) or is a card's rated peak (dashed).
RooflineCeiling = tuple[str, str, float, bool]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">"]


def roofline_figure(title: str, points: Sequence[RooflinePoint], ceilings: Sequence[RooflineCeiling]) -> str:
    """SVG of a log-log roofline: every point a configuration (kernel by marker and colour, filled when
    hand-written, hollow when a library's), every ceiling a line, with a legend and labelled axes."""
    from matplotlib.lines import Line2D

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10.0, 4.3))
    kernels = list(dict.fromkeys(kernel for kernel, *_ in points))
    style = {kernel: (MARKERS[i % len(MARKERS)], WRITTEN_COLOURS[i % len(WRITTEN_COLOURS)]) for i, kernel in enumerate(kernels)}
    xs = [x for _, _, x, _, _ in points]
    bandwidths = [rate for _, kind, rate, _ in ceilings if kind == "bandwidth"]
    computes = [rate for _, kind, rate, _ in ceilings if kind == "compute"]
    ridges = [c / b for c in computes for b in bandwidths]
    grid = np.geomspace(min(xs + ridges) / 4, max(xs + ridges) * 4, 200)  # the report draws one only with points
    top = max(computes) if computes else None
    for (label, kind, rate, measured), colour in zip(ceilings, ["#000000", "#555555", "#8c564b", "#bcbd22", "#7f7f7f"]):
        y = (np.full_like(grid, rate) if kind != "bandwidth" else rate * grid if top is None
             else np.minimum(rate * grid, top))
        ax.plot(grid, y, "-" if measured else "--", color=colour, linewidth=1.2, label=label)
    for kernel, layout, x, y, library in points:
        marker, colour = style[kernel]
        ax.plot([x], [y], marker, markersize=7, markeredgecolor=colour, markeredgewidth=1.3,
                markerfacecolor="none" if library else colour, linestyle="none")
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity, FLOP per compulsory byte (log scale)",
           ylabel="achieved GFLOP/s (log scale)", title=title)
    ax.grid(True, which="major", color="#dddddd", linewidth=0.6)
    handles, labels = ax.get_legend_handles_labels()
    handles += [Line2D([], [], marker=style[k][0], color=style[k][1], linestyle="none", markersize=7) for k in kernels]
    handles.append(Line2D([], [], marker="o", color="#444444", markerfacecolor="none", linestyle="none", markersize=7))
    labels += [*kernels, "hollow: a library's layout"]
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _svg(plt, fig)


# One panel of the hypotheses figure: its title, the faster and slower layouts, and per shape the
# slower layout's time over the faster one's in each repeat.
RatioPanel = tuple[str, str, str, Sequence[tuple[str, Sequence[float]]]]


def _plain_log_y(ax: Any) -> None:
    """A log y axis labelled with plain numbers (0.5, 1, 2), not powers of ten: ratios near 1 read so."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))


def ratio_figure(panels: Sequence[RatioPanel]) -> str:
    """SVG: per hypothesis, slower / faster median per shape and repeat on a log axis, a line at 1."""
    from matplotlib.lines import Line2D

    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(min(MAX_WIDTH_IN, 4.0 * len(panels)), 3.3), squeeze=False)
    for ax, (title, faster, slower, shapes) in zip(axes.flat, panels):
        for i, (shape, ratios) in enumerate(shapes):
            for j, ratio in enumerate(ratios):
                ax.plot([i + 0.12 * (j - (len(ratios) - 1) / 2)], [ratio], "o", markersize=5,
                        color="#2ca02c" if ratio > 1 else "#d62728")
        ax.axhline(1.0, color="#555555", linestyle="--", linewidth=1)
        _plain_log_y(ax)
        ax.set_xticks(range(len(shapes)), [shape for shape, _ in shapes], rotation=35, ha="right")
        ax.set(xlim=(-0.6, len(shapes) - 0.4), title=title, xlabel="shape", ylabel=f"{slower} / {faster} time (log scale)")
    handles = [Line2D([], [], marker="o", color=c, linestyle="none") for c in ("#2ca02c", "#d62728")]
    fig.legend(handles, ["a repeat where the faster layout won", "a repeat where it lost"], loc="upper right",
               ncol=2, frameon=False)
    return _svg(plt, fig, top=0.9)


def history_figure(title: str, series: dict[str, Sequence[tuple[int, float]]], ticks: Sequence[tuple[int, str]]) -> str:
    """A small SVG of one kernel/shape across runs: per layout, its median (us) in each run, the runs
    evenly spaced in date order (x: the run's place among all runs; `ticks` label some by date)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, max(2.9, 0.8 + 0.2 * len(series))))
    for i, (layout, points) in enumerate(series.items()):
        ordered = sorted(points)
        colour = LIBRARY_COLOURS.get(layout) or WRITTEN_COLOURS[i % len(WRITTEN_COLOURS)]
        ax.plot([x for x, _ in ordered], [us for _, us in ordered], "o-", markersize=3.5, linewidth=1, color=colour,
                label=layout)
    ax.set_xticks([x for x, _ in ticks], [label for _, label in ticks])
    ax.set(xlabel="runs in date order (tick: a run's date, UTC)", title=title)
    _time_axis(ax, [us for points in series.values() for _, us in points], "median µs")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=MIN_FONT_PT + 1)
    return _svg(plt, fig)
