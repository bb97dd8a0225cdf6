"""Seed 000's two views: kernel time beside the span around one call, per operation."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from kernelkit import document as doc
from kernelkit import units
from kernelkit.report.run import Run
from kernelkit.summary import natural_key


@dataclass
class TwoViews:
    kernel: str
    shape: str
    layout: str
    kernel_us: float | None
    # The span's centre and range are one statistic: the median of the round medians, and their range.
    span_us: float | None
    span_range: tuple[float, float] | None

    @property
    def ratio(self) -> float | None:
        return self.span_us / self.kernel_us if self.span_us and self.kernel_us else None


def two_view_rows(run: Run, kernel: str) -> list[TwoViews]:
    rounds: dict[tuple[str, str], dict[tuple[int, int], list[float]]] = {}
    for record in (r for r in run.spans if r["kernel"] == kernel):
        for layout, entry in record["layouts"].items():
            for sample in entry["samples"]:
                rounds.setdefault((record["shape"], layout), {}).setdefault(
                    (record["repeat"], sample["round"]), []).append(sample["us"])
    keys = {(r["shape"], r["layout"]) for r in run.timings if r["kernel"] == kernel} | set(rounds)
    order = run.layouts(kernel)
    rows = []
    for shape, layout in sorted(keys, key=lambda k: (natural_key(k[0]), order.index(k[1]) if k[1] in order
                                                     else len(order), k[1])):
        medians = [median(v) for v in rounds.get((shape, layout), {}).values()]
        rows.append(TwoViews(kernel, shape, layout, run.pooled_median(kernel, shape, layout),
                             median(medians) if medians else None, (min(medians), max(medians)) if medians else None))
    return rows


def section_two_views(run: Run) -> doc.Section | None:
    if not run.spans:
        return None
    kernels = sorted({r["kernel"] for r in run.spans})
    views = [row for kernel in kernels for row in two_view_rows(run, kernel)]
    libraries = sorted({lib for k in kernels for lib in run.libraries(k)})

    def seed_table(view: str, label: str) -> list[doc.Block]:
        """One row per operation and shape, each library a column, the hand-written layouts in one cell."""
        by_shape: dict[tuple[str, str], dict[str, float | None]] = {}
        for row in views:
            by_shape.setdefault((row.kernel, row.shape), {})[row.layout] = row.kernel_us if view == "kernel" else row.span_us
        rows = [[f"{kernel} {shape}", *(units.duration(values.get(name)) if name in values else "-" for name in libraries),
                 "; ".join(f"{layout} {units.duration(value)}" for layout, value in values.items()
                           if layout not in run.libraries(kernel))] for (kernel, shape), values in by_shape.items()]
        return [doc.Paragraph(f"{label} (median), as the seed tabulates it:"),
                doc.Table(["Operation and shape", *libraries, "Hand-written layouts"], rows,
                          numeric=range(1, 1 + len(libraries)))]

    blocks: list[doc.Block] = [doc.Paragraph(
        "Kernel time: the per-call time inside a CUDA-graph replay (or back-to-back calls between two events where a "
        "call cannot be captured), launch overhead amortised; the median of all samples. Span: one warmed call between "
        "two events, synchronised after every call, so it also holds the launch latency, the host's submission of "
        "every kernel a library call enqueues and the gaps between them; the median of the round medians, its range "
        "the range of those (the seed's whiskers), not a confidence interval."), *seed_table("kernel", "Kernel time")]
    blocks.append(doc.Details(f"The span as the seed tabulates it, and both views of each of the {len(views)} "
                              "configurations", [*seed_table("span", "Span"), doc.Table(
        ["Kernel", "Shape", "Layout", "Kernel time", "Span (median of round medians)", "Range of round medians",
         "Span / kernel time"], [[row.kernel, row.shape, row.layout, units.duration(row.kernel_us),
                                  units.duration(row.span_us),
                                  f"{units.duration(row.span_range[0])} to {units.duration(row.span_range[1])}"
                                  if row.span_range else "n/a",
                                  f"{row.ratio:.2f}" if row.ratio is not None else "n/a"] for row in views],
        numeric=(3, 4, 5, 6))]))
    if timed := [row for row in views if row.ratio is not None]:
        gaps = sorted(row.span_us - row.kernel_us for row in timed)
        short = [row.ratio for row in timed if row.kernel_us < 20]
        long = [row.ratio for row in timed if row.kernel_us >= 200]
        largest = max(timed, key=lambda row: row.span_us - row.kernel_us)
        text = (f"Across {len(timed)} configurations the span exceeds kernel time by a median of "
                f"{gaps[len(gaps) // 2]:.2f} us (from {gaps[0]:.2f} to {gaps[-1]:.2f} us).")
        if short:
            text += (f" For the {len(short)} calls under 20 us of kernel time the span is {min(short):.2f}x to "
                     f"{max(short):.2f}x the kernel time: there the fixed cost per call dominates.")
        if long:
            text += f" For the {len(long)} calls of 200 us or more the ratio is {min(long):.2f}x to {max(long):.2f}x."
        text += (f" The largest gap is {largest.kernel} {largest.shape} {largest.layout} "
                 f"({largest.span_us - largest.kernel_us:.2f} us).")
        blocks.append(doc.Paragraph(text))
    return doc.Section("Kernel time and span", blocks)
