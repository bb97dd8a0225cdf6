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
    shape: str
    layout: str
    kernel_us: float | None
    # The span's centre and range are one statistic: the median of the round medians, and their range.
    span_us: float | None
    span_range: tuple[float, float] | None
    span_samples: int


def two_view_rows(run: Run, kernel: str) -> list[TwoViews]:
    rounds: dict[tuple[str, str], dict[tuple[int, int], list[float]]] = {}
    for record in run.spans:
        if record["kernel"] == kernel:
            for layout, entry in record["layouts"].items():
                per_round = rounds.setdefault((record["shape"], layout), {})
                for sample in entry["samples"]:
                    per_round.setdefault((record["repeat"], sample["round"]), []).append(sample["us"])
    keys = {(r["shape"], r["layout"]) for r in run.timings if r["kernel"] == kernel} | set(rounds)
    order = run.layouts(kernel)
    rows = []
    for shape, layout in sorted(keys, key=lambda k: (natural_key(k[0]), order.index(k[1]) if k[1] in order
                                                     else len(order), k[1])):
        round_medians = [median(v) for v in rounds.get((shape, layout), {}).values()]
        rows.append(TwoViews(shape, layout, run.pooled_median(kernel, shape, layout),
                             median(round_medians) if round_medians else None,
                             (min(round_medians), max(round_medians)) if round_medians else None,
                             sum(len(v) for v in rounds.get((shape, layout), {}).values())))
    return rows


def seed_table_rows(run: Run, view: str) -> tuple[list[str], list[list[str]]]:
    """One row per operation and shape, each library a column, the hand-written layouts in one cell."""
    kernels = sorted({r["kernel"] for r in run.spans})
    libraries = sorted({lib for k in kernels for lib in run.libraries(k)})
    rows = []
    for kernel in kernels:
        by_shape: dict[str, dict[str, float | None]] = {}
        for row in two_view_rows(run, kernel):
            by_shape.setdefault(row.shape, {})[row.layout] = row.kernel_us if view == "kernel" else row.span_us
        for shape, values in by_shape.items():
            written = [f"{layout} {units.duration(value)}" for layout, value in values.items()
                       if layout not in run.libraries(kernel)]
            rows.append([f"{kernel} {shape}", *(units.duration(values.get(name)) if name in values else "-"
                                                for name in libraries), "; ".join(written)])
    return libraries, rows


def section_two_views(run: Run) -> doc.Section | None:
    if not run.spans:
        return None
    blocks: list[doc.Block] = [doc.Paragraph(
        "Kernel time: the per-call time inside a CUDA-graph replay (or back-to-back calls between two events where a "
        "call cannot be captured), launch overhead amortised; the median of all samples. Span: one warmed call between "
        "two events, synchronised after every call, so it also holds the launch latency, the host's submission of "
        "every kernel a library call enqueues and the gaps between them; the median of the round medians, its range "
        "the range of those (the seed's whiskers), not a confidence interval.")]
    seed_tables = []
    for view, label in (("kernel", "Kernel time"), ("span", "Span")):
        libraries, rows = seed_table_rows(run, view)
        seed_tables.append([doc.Paragraph(f"{label} (median), as the seed tabulates it:"),
                            doc.Table(["Operation and shape", *libraries, "Hand-written layouts"], rows,
                                      numeric=range(1, 1 + len(libraries)))])
    blocks += seed_tables[0]
    excess = []
    rows = []
    for kernel in sorted({r["kernel"] for r in run.spans}):
        for row in two_view_rows(run, kernel):
            ratio = row.span_us / row.kernel_us if row.span_us and row.kernel_us else None
            if ratio is not None:
                excess.append((row.span_us - row.kernel_us, ratio, f"{kernel} {row.shape} {row.layout}", row.kernel_us))
            rows.append([kernel, row.shape, row.layout, units.duration(row.kernel_us), units.duration(row.span_us),
                         f"{units.duration(row.span_range[0])} to {units.duration(row.span_range[1])}"
                         if row.span_range else "n/a", f"{ratio:.2f}" if ratio is not None else "n/a"])
    blocks.append(doc.Details(f"The span as the seed tabulates it, and both views of each of the {len(rows)} "
                              "configurations", [*seed_tables[1], doc.Table(
        ["Kernel", "Shape", "Layout", "Kernel time", "Span (median of round medians)", "Range of round medians",
         "Span / kernel time"], rows, numeric=(3, 4, 5, 6))]))
    if excess:
        gaps = sorted(e[0] for e in excess)
        short = [e for e in excess if e[3] < 20]
        long = [e for e in excess if e[3] >= 200]
        text = (f"Across {len(excess)} configurations the span exceeds kernel time by a median of "
                f"{gaps[len(gaps) // 2]:.2f} us (from {gaps[0]:.2f} to {gaps[-1]:.2f} us).")
        if short:
            text += (f" For the {len(short)} calls under 20 us of kernel time the span is "
                     f"{min(e[1] for e in short):.2f}x to {max(e[1] for e in short):.2f}x the kernel time:"
                     " there the fixed cost per call dominates.")
        if long:
            text += (f" For the {len(long)} calls of 200 us or more the ratio is "
                     f"{min(e[1] for e in long):.2f}x to {max(e[1] for e in long):.2f}x.")
        largest = max(excess, key=lambda e: e[0])
        text += f" The largest gap is {largest[2]} ({largest[0]:.2f} us)."
        blocks.append(doc.Paragraph(text))
    return doc.Section("Kernel time and span", blocks)
