"""The Sweeps section: per kernel, sweep and shape, the best and worst point against the run's
ceiling (judged as the per-target table judges it), with one figure per sweep across its grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernelkit import KitError
from kernelkit import document as doc
from kernelkit import figures
from kernelkit import spec as specs
from kernelkit.units import duration
from kernelkit.report.bounds import judge
from kernelkit.report.run import Run


@dataclass
class SweepResult:
    kernel: str
    base: str
    shape: str
    medians: dict[str, float]                 # point (file-safe name) -> pooled median, fastest first
    repeat_medians: dict[str, list[float]]    # point -> one median per repeat
    grid_size: int | None                     # every combination of the grid (None: spec not here)
    invalid: int | None                       # points the spec refuses at this run's shapes
    fraction: float | None                    # best point's fraction of its ceiling
    ceiling: str | None                       # which ceiling, e.g. "GEMM 51.2 TFLOP/s"
    libraries: dict[str, float]               # library layout -> pooled median

    @property
    def best(self) -> tuple[str, float]:
        return next(iter(self.medians.items()))

    @property
    def worst(self) -> tuple[str, float]:
        return list(self.medians.items())[-1]


def _points(run: Run, kernel: str, base: str) -> list[str]:
    def parsed(layout: str) -> tuple[str, Any] | None:
        try:
            return specs.parse_point(layout)
        except KitError:
            return None

    return [layout for layout in run.layouts(kernel) if (point := parsed(layout)) is not None and point[0] == base]


def _grid_counts(run: Run, kernel: str, base: str) -> tuple[int | None, int | None]:
    spec = run.spec(kernel)
    if spec is None or base not in spec.sweeps:
        return None, None
    sweep = spec.sweep(base, [spec.parse_shape(shape) for shape in run.config["kernels"][kernel]["shapes"]])
    return len(sweep.valid) + len(sweep.invalid), len(sweep.invalid)


def sweep_results(run: Run) -> list[SweepResult]:
    results = []
    for kernel in run.kernels:
        for base in run.config.get("kernels", {}).get(kernel, {}).get("sweeps", []):
            points, (grid_size, invalid) = _points(run, kernel, base), _grid_counts(run, kernel, base)
            for shape in run.shapes(kernel):
                medians = {p: m for p in points if (m := run.pooled_median(kernel, shape, p)) is not None}
                if not medians:
                    continue
                ordered = dict(sorted(medians.items(), key=lambda item: item[1]))
                judged = judge(run, kernel, shape, next(iter(ordered)))
                results.append(SweepResult(
                    kernel, base, shape, ordered,
                    {p: [m for _, m in sorted(run.repeat_medians(kernel, shape, p).items())] for p in ordered},
                    grid_size, invalid, judged.fraction, judged.ceiling,
                    {lib: m for lib in sorted(run.libraries(kernel))
                     if (m := run.pooled_median(kernel, shape, lib)) is not None}))
    return results


def _row(result: SweepResult) -> list[str]:
    best, best_us = result.best
    worst, worst_us = result.worst
    fraction = f"{result.fraction:.2f} of {result.ceiling}" if result.fraction is not None else "n/a (no ceiling)"
    libraries = "; ".join(f"{best_us / us:.2f}x {name}" for name, us in result.libraries.items()) or "no library timed"
    counted = (f"{len(result.medians)} timed of {result.grid_size}; {result.invalid} refused by the spec"
               if result.grid_size is not None else f"{len(result.medians)} timed (spec not in this checkout)")
    return [result.kernel, result.shape, specs.display_name(best), duration(best_us), fraction,
            libraries, specs.display_name(worst), duration(worst_us), f"{worst_us / best_us:.2f}x", counted]


def section_sweeps(run: Run) -> doc.Section | None:
    if not (results := sweep_results(run)):
        return None
    blocks: list[doc.Block] = [
        doc.Paragraph("Per sweep and shape (pooled medians of kernel time): the best point, its fraction of the "
                      "ceiling that bounds it, its time over each library's (below 1: the point is faster), the "
                      "worst point and its time over the best, and how many grid points were timed; the spec "
                      "refuses a point it cannot build or launch at this run's shapes."),
        doc.Table(["Kernel", "Shape", "Best point", "Median", "Of the ceiling", "Against each library",
                   "Worst point", "Median", "Worst / best", "Points"], [_row(r) for r in results], numeric=(3, 7, 8)),
    ]
    for (kernel, base) in dict.fromkeys((r.kernel, r.base) for r in results):
        panels = [r for r in results if (r.kernel, r.base) == (kernel, base)]
        svg = figures.sweep_figure(f"{kernel} {base}", [
            (r.shape, [(specs.display_name(p)[len(base) + 1:-1], r.repeat_medians[p]) for p in r.medians],
             {name: us for name, us in r.libraries.items()},
             r.best[1] * r.fraction if r.fraction is not None else None) for r in panels])
        blocks.append(doc.Figure(svg, None, f"{kernel} {base} sweep: median per repeat (points) and pooled median "
                                            "(bar) of every point, named by its parameters, fastest at the top; dashed lines: libraries; "
                                            "dotted line: the time at the ceiling"))
    return doc.Section("Sweeps", blocks)
