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
    layouts = sorted({r["layout"] for r in records}, key=natural_key)
    repeats = sorted({r["repeat"] for r in records})
    columns = min(3, len(shapes))
    rows = math.ceil(len(shapes) / columns)
    # Wide enough for one readable tick label per layout and repeat.
    panel_width = max(3.4, 0.42 * len(layouts) * (len(repeats) + 1))
    fig, axes = plt.subplots(rows, columns, figsize=(panel_width * columns, 2.6 * rows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    by_key = {(r["shape"], r["layout"], r["repeat"]): r["samples_us"] for r in records}
    jitter = np.random.default_rng(0)

    for ax, shape in zip(axes.flat, shapes):
        ticks, labels = [], []
        for li, layout in enumerate(layouts):
            for ri, repeat in enumerate(repeats):
                x = li * (len(repeats) + 1) + ri
                samples = by_key.get((shape, layout, repeat))
                if not samples:
                    continue
                median = float(np.median(samples))
                ax.bar(x, median, width=0.7, color=colors[li % len(colors)], alpha=0.35)
                ax.errorbar(x, median, yerr=[[median - min(samples)], [max(samples) - median]],
                            fmt="none", ecolor="black", capsize=3, linewidth=0.8)
                ax.plot(x + jitter.uniform(-0.2, 0.2, len(samples)), samples, ".", color=colors[li % len(colors)],
                        markersize=2.5)
                ticks.append(x)
                labels.append(f"{layout}\nrep{repeat}")
        ax.set_xticks(ticks, labels)
        ax.set_title(shape)
        ax.set_ylabel("us per launch")
        ax.set_ylim(bottom=0)
    for ax in list(axes.flat)[len(shapes):]:
        ax.axis("off")
    fig.suptitle(f"{kernel}: median (bar), min-max (whiskers), every sample (points)")
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
    ax.set_ylim(bottom=0)
    ax.set_title("NVML readings during the timed samples")
    return _svg(plt, fig)
