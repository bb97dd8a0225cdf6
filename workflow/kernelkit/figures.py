"""Timing figures: every raw sample as a point, the median as a bar, min-max as whiskers.

One figure per kernel, one panel per shape with its own scale (shapes differ by orders of
magnitude), layouts and repeats side by side inside a panel. SVG output is made
deterministic (fixed hash salt, no date) so that rebuilding a report from the same results
gives the same bytes.
"""

from __future__ import annotations

import io
import math
from typing import Any, Sequence

import numpy as np

from kernelkit.summary import natural_key

# One colour per layout in every figure: a library keeps its colour across kernels, and the
# hand-written layouts of a kernel take the other colours in the config's order.
LIBRARY_COLOURS = {"cupy": "#7f7f7f", "torch": "#d62728", "triton": "#9467bd"}
WRITTEN_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#17becf", "#8c564b", "#e377c2"]
# A panel whose samples span more than this factor gets a log axis, so no bar flattens the others.
LOG_SPAN = 10.0


def layout_colours(records: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Layout -> colour: libraries by name (a library record names its package), the rest by order."""
    libraries = {r["layout"] for r in records if "library" in r}
    written = sorted({r["layout"] for r in records} - libraries, key=natural_key)
    colours = {layout: WRITTEN_COLOURS[i % len(WRITTEN_COLOURS)] for i, layout in enumerate(written)}
    spare = iter(c for c in WRITTEN_COLOURS[::-1] if c not in colours.values())
    for layout in sorted(libraries):
        colours[layout] = LIBRARY_COLOURS.get(layout) or next(spare, "#444444")
    return colours


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "kernelkit", "font.size": 8})
    import matplotlib.pyplot as plt

    return plt


def _svg(plt: Any, fig: Any) -> str:
    """The figure as SVG text without the XML prologue, so it can sit inline in HTML."""
    fig.tight_layout()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def timing_figure(records: Sequence[dict[str, Any]], kernel: str) -> str:
    """SVG text of the kernel's timing figure, built from the raw samples of its timing records."""
    plt = _pyplot()
    records = [r for r in records if r["kernel"] == kernel]
    shapes = sorted({r["shape"] for r in records}, key=natural_key)
    libraries = sorted({r["layout"] for r in records if "library" in r}, key=natural_key)
    # Hand-written layouts first, then the library baselines, as the report's tables list them.
    layouts = sorted({r["layout"] for r in records} - set(libraries), key=natural_key) + libraries
    repeats = sorted({r["repeat"] for r in records})
    columns = min(3, len(shapes))
    rows = math.ceil(len(shapes) / columns)
    # Wide enough for one readable tick label per layout and repeat.
    panel_width = max(3.4, 0.42 * len(layouts) * (len(repeats) + 1))
    fig, axes = plt.subplots(rows, columns, figsize=(panel_width * columns, 2.6 * rows), squeeze=False)
    colours = layout_colours(records)
    by_key = {(r["shape"], r["layout"], r["repeat"]): r["samples_us"] for r in records}
    jitter = np.random.default_rng(0)

    for ax, shape in zip(axes.flat, shapes):
        ticks, labels = [], []
        seen = [s for (sh, _, _), samples in by_key.items() if sh == shape for s in samples]
        log = bool(seen) and max(seen) / min(seen) > LOG_SPAN
        for li, layout in enumerate(layouts):
            for ri, repeat in enumerate(repeats):
                x = li * (len(repeats) + 1) + ri
                samples = by_key.get((shape, layout, repeat))
                if not samples:
                    continue
                median = float(np.median(samples))
                ax.bar(x, median, width=0.7, color=colours[layout], alpha=0.35)
                ax.errorbar(x, median, yerr=[[median - min(samples)], [max(samples) - median]],
                            fmt="none", ecolor="black", capsize=3, linewidth=0.8)
                ax.plot(x + jitter.uniform(-0.2, 0.2, len(samples)), samples, ".", color=colours[layout],
                        markersize=2.5)
            # One label per layout under its group of repeats, so labels never crowd each other.
            ticks.append(li * (len(repeats) + 1) + (len(repeats) - 1) / 2)
            labels.append(layout)
        rotate = len(layouts) > 3
        ax.set_xticks(ticks, labels, rotation=30 if rotate else 0, ha="right" if rotate else "center")
        ax.set_title(shape + (" (log scale)" if log else ""))
        ax.set_ylabel("us per launch")
        if log:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
    for ax in list(axes.flat)[len(shapes):]:
        ax.axis("off")
    fig.suptitle(f"{kernel}: median (bar), min-max (whiskers), every sample (points)\n"
                 f"repeats {', '.join(f'rep{r}' for r in repeats)} left to right in each group")
    return _svg(plt, fig)


def clock_figure(records: Sequence[dict[str, Any]]) -> str:
    """SVG of every NVML reading the sampler took during a run: SM clock over the run's time,
    readings that showed a throttle reason in red. Gaps are the time between timed targets."""
    from kernelkit.sampler import THROTTLE_REASONS

    plt = _pyplot()
    points = sorted((p for r in records for p in r.get("clock_trace", []) if isinstance(p["sm_clock_mhz"], (int, float))),
                    key=lambda p: p["t"])
    fig, ax = plt.subplots(figsize=(9, 2.8))
    if points:
        start = points[0]["t"]
        calm = [p for p in points if not set(p["reasons"] or []) & THROTTLE_REASONS]
        hot = [p for p in points if set(p["reasons"] or []) & THROTTLE_REASONS]
        ax.plot([p["t"] - start for p in calm], [p["sm_clock_mhz"] for p in calm], ".", markersize=2, color="tab:blue",
                label="SM clock")
        ax.plot([p["t"] - start for p in hot], [p["sm_clock_mhz"] for p in hot], ".", markersize=3, color="tab:red",
                label="SM clock, throttle reason set")
        ax.legend(loc="lower right", fontsize=7)
    ax.set_xlabel("seconds since the first reading")
    ax.set_ylabel("MHz")
    if points:
        # Zoomed to the clocks seen: a drop of a few percent must be visible, not squashed against zero.
        low, high = min(p["sm_clock_mhz"] for p in points), max(p["sm_clock_mhz"] for p in points)
        margin = max(20.0, 0.05 * (high - low))
        ax.set_ylim(low - margin, high + margin)
    ax.set_title("NVML readings during the timed samples")
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
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 1.2 + 0.22 * rows), squeeze=False)
    for ax, (shape, points, libraries, ceiling_us) in zip(axes.flat, panels):
        for y, (name, medians) in enumerate(points):
            ax.barh(y, float(np.median(medians)), height=0.7, color=WRITTEN_COLOURS[0], alpha=0.35)
            ax.plot(medians, [y] * len(medians), ".", color=WRITTEN_COLOURS[0], markersize=4)
        for name, us in libraries.items():
            ax.axvline(us, color=LIBRARY_COLOURS.get(name, "#444444"), linestyle="--", linewidth=1, label=name)
        if ceiling_us is not None:
            ax.axvline(ceiling_us, color="black", linestyle=":", linewidth=1, label="ceiling")
        ax.set_yticks(range(len(points)), [name for name, _ in points], fontsize=6)
        ax.set_ylim(len(points) - 0.5, -0.5)
        ax.set_xlim(left=0)
        ax.set_xlabel("us per launch")
        ax.set_ylabel("point (its parameters)")
        ax.set_title(shape)
        if libraries or ceiling_us is not None:
            ax.legend(loc="upper right", fontsize=6)  # the fastest points, at the top, have the shortest bars
    fig.suptitle(f"{title}: every timed point, fastest at the top")
    return _svg(plt, fig)
