"""Each target judged against the ceiling of the memory that serves it, and the ceilings themselves checked.

A working set that fits in the L2 is served by the L2, so the DRAM copy rate says nothing about
it: it is judged against the L2 copy ceiling where the run measured one, else marked "DRAM
roofline n/a". A correct, consistently measured result above its ceiling is evidence against
the ceiling, never against the kernel: the report names both numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from kernelkit import ceilings
from kernelkit import document as doc
from kernelkit.report import units
from kernelkit.report.bounds import Judgement, judge
from kernelkit.report.run import Run, card_label, method_used


def rated_bandwidth_gb_s(run: Run) -> float | None:
    """Rated DRAM bandwidth from the environment record's bus width and memory clock, where it has both."""
    cuda, gpu = run.environment.get("cuda", {}), run.environment.get("gpu", {})
    width = cuda.get("memory_bus_width_bits")
    clock = gpu.get("memory_clock_max_mhz")
    if isinstance(width, int) and isinstance(clock, (int, float)):
        return 2 * clock * 1e6 * width / 8 / 1e9  # double data rate
    return None


def cross_checks(run: Run) -> list[str]:
    """The copy ceiling against the device's rated bandwidth and against ncu's DRAM throughput, where known."""
    found = []
    copy = run.ceiling.get("copy_gb_s")
    rated = rated_bandwidth_gb_s(run)
    if copy is not None:
        if rated:
            found.append(f"The DRAM copy ceiling ({copy:.0f} GB/s) is {copy / rated:.0%} of the rated bandwidth "
                         f"({rated:.0f} GB/s from the recorded bus width and memory clock).")
        else:
            found.append("The environment record holds no memory bus width, so the copy ceiling cannot be checked "
                         "against the rated bandwidth here.")
    for record in run.profiles:
        launches = [x for x in record.get("launches", []) if isinstance(x.get("dram_throughput_pct_of_peak"), float)]
        if launches and copy:
            judged = judge(run, record["kernel"], record["shape"], record["layout"]) \
                if run.records(record["kernel"], record["shape"], record["layout"]) else None
            if judged and judged.above:
                pct = max(x["dram_throughput_pct_of_peak"] for x in launches)
                found.append(f"{record['kernel']} {record['shape']} {record['layout']} is above its ceiling while "
                             f"Nsight Compute read {pct:.1f}% of peak DRAM throughput for it"
                             + (": DRAM was not saturated, so the copy ceiling understates what it delivers."
                                if pct < 100 else "."))
    return found


def ceiling_blocks(run: Run) -> list[doc.Block]:
    """How the ceilings were measured: the table, each one's variants, every card's, the ridge point
    and the cross-checks (the Limits section folds them away)."""
    rows = []
    for kind, record in sorted(run.ceilings.items()):
        median_us = median(record["samples_us"])
        value = {"copy": f"{run.ceiling.get('copy_gb_s', 0):.1f} GB/s", "l2": f"{run.ceiling.get('l2_gb_s', 0):.1f} GB/s",
                 "gemm": f"{run.ceiling.get('gemm_gflop_s', 0):.1f} GFLOP/s",
                 "floor": f"{median_us:.3f} us per launch"}.get(kind, "n/a")
        rows.append([kind, record.get("what", ""), units.duration(median_us), value, method_used(record)])
    blocks: list[doc.Block] = [
        doc.Paragraph("Measured in this run, on this GPU, with the method every target uses, each the fastest of the "
                      "ways listed. A target is divided by the ceiling that bounds it: arithmetic when the spec's FLOPs "
                      "per compulsory byte reach the ridge point (GEMM rate / copy rate), else memory; for memory, the "
                      "L2 copy ceiling when the working set fits in the L2 the environment records, else the DRAM copy "
                      "ceiling. Without an L2 ceiling an L2-resident target is marked DRAM roofline n/a. A correct "
                      "result consistently above its ceiling (more than "
                      f"{ceilings.CEILING_TOLERANCE:.0%}) says the ceiling was measured too low; both numbers are "
                      "named. The floor is the cost of launching nothing: timings within 3x of it measure the harness "
                      "as much as the kernel."),
        doc.Table(["Ceiling", "What", "Median", "Rate", "Taken by"], rows, numeric=(2, 3)),
    ]
    for kind, label, work, unit in (("copy", "Copy", "bytes", "GB/s"), ("l2", "L2 copy", "bytes", "GB/s"),
                                    ("gemm", "GEMM", "flops", "GFLOP/s")):
        record = run.ceilings.get(kind, {})
        if "variants" in record:
            blocks.append(doc.Paragraph(f"{label} variants: " + "; ".join(
                f"{name} {record[work] / (median(v['samples_us']) * 1e-6) / 1e9:.1f} {unit}"
                for name, v in sorted(record["variants"].items())) + f" (the ceiling is the fastest, {record['best']})."))
    if run.cards:
        blocks.append(doc.Paragraph("Every card of this run measured its own ceilings; a target is divided by those "
                                    "of the card that timed it:"))
        blocks.append(doc.Table(["Card", "Copy", "L2 copy", "GEMM", "Floor"], card_ceiling_rows(run),
                                numeric=(1, 2, 3, 4)))
    if "copy_gb_s" in run.ceiling and "gemm_gflop_s" in run.ceiling:
        blocks.append(doc.Paragraph(f"Ridge point: {run.ceiling['gemm_gflop_s'] / run.ceiling['copy_gb_s']:.2f} "
                                    "FLOPs per byte."))
    blocks += [doc.Paragraph(text) for text in cross_checks(run)]
    return blocks


@dataclass
class LimitRow:
    """One kernel and shape: its fastest hand-written and fastest library layout against the ceiling
    that bounds each, and the arithmetic ones against the card's FP32 peak too."""

    kernel: str
    shape: str
    written: tuple[str, float, Judgement] | None
    library: tuple[str, float, Judgement] | None
    flops: int
    compulsory: int


def limit_rows(run: Run) -> list[LimitRow]:
    rows = []
    for kernel in run.kernels:
        libraries = run.libraries(kernel)
        for shape in run.shapes(kernel):
            medians = {layout: m for layout in run.layouts(kernel) if (m := run.pooled_median(kernel, shape, layout))}
            if not medians:
                continue
            pick = lambda names: min(((n, medians[n]) for n in names), key=lambda i: i[1], default=None)  # noqa: E731
            written = pick([n for n in medians if n not in libraries])
            library = pick([n for n in medians if n in libraries])
            records = run.records(kernel, shape, next(iter(medians)))
            compulsory, _ = run.byte_counts(records[0])
            rows.append(LimitRow(kernel, shape,
                                 (*written, judge(run, kernel, shape, written[0])) if written else None,
                                 (*library, judge(run, kernel, shape, library[0])) if library else None,
                                 int(records[0]["flops"]), compulsory))
    return rows


def _limit_cell(row: LimitRow, entry: tuple[str, float, Judgement] | None, peak: float | None) -> str:
    if entry is None:
        return "-"
    layout, us, judged = entry
    rate = (units.arithmetic(row.flops, us) if judged.bound == "arithmetic" else units.bandwidth(row.compulsory, us))
    share = f", {judged.fraction:.0%}" if judged.fraction is not None else ""
    fp32 = (f", {row.flops / (us * 1e-6) / 1e9 / peak:.0%} of FP32 peak"
            if peak and judged.bound == "arithmetic" else "")
    return f"{layout} {units.short(us)}: {rate}{share}{fp32}"


def roofline(run: Run, peak: float | None) -> doc.Figure | None:
    """Every layout of each kernel's largest shape (by compulsory bytes) on a log-log roofline, with the
    measured ceilings and the card's FP32 peak as lines; None without a copy ceiling or FLOPs."""
    from kernelkit import figures

    copy = run.ceiling.get("copy_gb_s")
    if copy is None:
        return None
    points = []
    for kernel in run.kernels:
        first = {r["shape"]: r for r in reversed(run.timings) if r["kernel"] == kernel}  # a record of each shape
        largest = max(run.shapes(kernel), key=lambda shape: run.byte_counts(first[shape])[0])
        libraries = run.libraries(kernel)
        for layout in run.layouts(kernel):
            records = run.records(kernel, largest, layout)
            us = run.pooled_median(kernel, largest, layout)
            if not records or not us or not records[0]["flops"]:
                continue
            compulsory, _ = run.byte_counts(records[0])
            flops = int(records[0]["flops"])
            points.append((f"{kernel} {largest}", layout, flops / compulsory, flops / (us * 1e-6) / 1e9,
                           layout in libraries))
    if not points:
        return None
    lines = [(f"DRAM copy, measured ({copy:,.0f} GB/s)", "bandwidth", copy, True)]
    if "l2_gb_s" in run.ceiling:
        lines.append((f"L2 copy, measured ({run.ceiling['l2_gb_s']:,.0f} GB/s)", "bandwidth", run.ceiling["l2_gb_s"], True))
    if "gemm_gflop_s" in run.ceiling:
        lines.append((f"SGEMM, measured ({run.ceiling['gemm_gflop_s'] / 1e3:.1f} TFLOP/s)", "compute",
                      run.ceiling["gemm_gflop_s"], True))
    if peak:
        lines.append((f"FP32 peak of the card ({peak / 1e3:.1f} TFLOP/s)", "compute", peak, False))
    svg = figures.roofline_figure(f"Roofline of {run.device}: every layout of each kernel's largest shape", points, lines)
    return doc.Figure(svg, None, "Roofline (log-log): a point per layout of each kernel's largest shape (FLOPs of "
                                 "the spec over the pooled median), filled when hand-written, hollow when a library's; "
                                 "solid lines are ceilings measured in this run, the dashed one the card's FP32 peak "
                                 "(SMs x clock x FP32 lanes x 2)")


def section_limits(run: Run) -> doc.Section | None:
    """Each operation's fastest hand-written and library layout against the ceiling that bounds it."""
    from kernelkit.report import explain
    from kernelkit.report.claims import run_card

    rows = limit_rows(run)
    if not rows:
        return None
    peak = run_card(run).fp32_peak_gflop_s
    copy, gemm = run.ceiling.get("copy_gb_s"), run.ceiling.get("gemm_gflop_s")
    measured = ", ".join(filter(None, [f"DRAM copy {copy:,.0f} GB/s" if copy else None,
                                       f"L2 copy {run.ceiling['l2_gb_s']:,.0f} GB/s" if "l2_gb_s" in run.ceiling else None,
                                       f"SGEMM {gemm / 1e3:.1f} TFLOP/s" if gemm else None])) or "none"
    blocks: list[doc.Block] = [doc.Paragraph(
        f"Ceilings measured in this run: {measured}; the card's FP32 peak "
        + (f"is {peak / 1e3:.1f} TFLOP/s (SMs x max SM clock x FP32 lanes x 2)" if peak else "is unknown")
        + ". Per kernel and shape, the fastest hand-written and the fastest library layout: its pooled median, the rate "
        "its spec's compulsory bytes or FLOPs give, and its share of the ceiling that bounds it (Bounded by); an "
        "arithmetic-bound one also its share of the FP32 peak.")]
    blocks.append(doc.Table(["Kernel", "Shape", "Bounded by", "Fastest hand-written", "Fastest library",
                             "Hand-written / library"], [
        [r.kernel, r.shape, (r.written or r.library)[2].ceiling or (r.written or r.library)[2].note or "n/a",
         _limit_cell(r, r.written, peak), _limit_cell(r, r.library, peak),
         f"{r.written[1] / r.library[1]:.2f}x" if r.written and r.library else "n/a"] for r in rows], numeric=(5,)))
    figure = roofline(run, peak)
    if figure is not None:
        blocks.append(figure)
    reasons = [text for kernel in run.kernels for text in explain.explanations(run, kernel)]
    if reasons:
        blocks.append(doc.Paragraph("Why some shares are low or high, from the data:"))
        blocks.append(doc.Bullets(reasons))
    suspect = suspect_ceilings(run)
    if suspect:
        blocks.append(doc.Paragraph(f"Results above their ceiling ({len(suspect)} configuration{'s' if len(suspect) > 1 else ''}): "
                                    + "; ".join(suspect) + "."))
    if run.ceilings:
        blocks.append(doc.Details("How the ceilings were measured (" + ", ".join(sorted(run.ceilings)) + ")",
                                  ceiling_blocks(run)))
    return doc.Section("Limits", blocks)


def card_ceiling_rows(run: Run) -> list[list[str]]:
    """One row per card: the run's first card, then gpus/<i>/."""
    first = card_label({"gpu_uuid": run.environment.get("gpu_uuid") or run.environment.get("gpu", {}).get("uuid"),
                        "gpu_index": run.environment.get("gpu_index")}) or "first card"
    rows = []
    for label, rates in [(first, run.ceiling), *((card.label or "unnamed card", card.rates) for card in run.cards)]:
        rows.append([label] + [f"{rates[key]:.1f} {unit}" if key in rates else "n/a" for key, unit in
                               (("copy_gb_s", "GB/s"), ("l2_gb_s", "GB/s"), ("gemm_gflop_s", "GFLOP/s"))]
                    + [f"{rates['floor_us']:.3f} us" if "floor_us" in rates else "n/a"])
    return rows


def suspect_ceilings(run: Run) -> list[str]:
    found = []
    for kernel in run.kernels:
        for shape in run.shapes(kernel):
            for layout in run.layouts(kernel):
                if run.records(kernel, shape, layout):
                    judged = judge(run, kernel, shape, layout)
                    if judged.above:
                        found.append(f"{kernel} {shape} {layout}: {judged.note}")
    return found

