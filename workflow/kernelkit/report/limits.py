"""Each target judged against the ceiling of the memory that serves it, and the ceilings checked.

A working set that fits in the L2 is judged against the L2 copy ceiling (the DRAM copy rate says
nothing about it). A correct, consistent result above its ceiling is evidence against the ceiling,
never against the kernel: the report names both numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from kernelkit import stats
from kernelkit import document as doc
from kernelkit import units
from kernelkit.report.bounds import Judgement, judge
from kernelkit.report.claims import run_card
from kernelkit.report.run import Card, Run, method_used, rated_bandwidth_gb_s


def cross_checks(run: Run) -> list[str]:
    """The copy ceiling against the device's rated bandwidth and against ncu's DRAM throughput, where known."""
    copy, rated = run.ceiling.get("copy_gb_s"), rated_bandwidth_gb_s(run)
    found = [] if copy is None else [
        f"The DRAM copy ceiling ({copy:.0f} GB/s) is {copy / rated:.0%} of the rated bandwidth ({rated:.0f} GB/s from "
        "the recorded bus width and memory clock)." if rated else "The environment record holds no memory bus width, "
        "so the copy ceiling cannot be checked against the rated bandwidth here."]
    for record in run.profiles:
        key = (record["kernel"], record["shape"], record["layout"])
        pcts = [x["dram_throughput_pct_of_peak"] for x in record.get("launches", [])
                if isinstance(x.get("dram_throughput_pct_of_peak"), float)]
        if pcts and copy and run.records(*key) and judge(run, *key).above:
            found.append(f"{' '.join(key)} is above its ceiling while Nsight Compute read {max(pcts):.1f}% of peak DRAM "
                         "throughput for it" + (": DRAM was not saturated, so the copy ceiling understates what it "
                                                "delivers." if max(pcts) < 100 else "."))
    return found


def ceiling_blocks(run: Run) -> list[doc.Block]:
    """How the ceilings were measured, which the Limits section folds away."""
    rates = {"copy": ("copy_gb_s", "GB/s"), "l2": ("l2_gb_s", "GB/s"), "gemm": ("gemm_gflop_s", "GFLOP/s")}
    rows = [[kind, record.get("what", ""), units.duration(median(record["samples_us"])),
             f"{run.ceiling.get(rates[kind][0], 0):.1f} {rates[kind][1]}" if kind in rates
             else f"{median(record['samples_us']):.3f} us per launch" if kind == "floor" else "n/a", method_used(record)]
            for kind, record in sorted(run.ceilings.items())]
    blocks: list[doc.Block] = [
        doc.Paragraph("Measured in this run, on this GPU, with the method every target uses, each the fastest of the "
                      "ways listed. A target is divided by the ceiling that bounds it: arithmetic when the spec's FLOPs "
                      "per compulsory byte reach the ridge point (GEMM rate / copy rate), else memory; for memory, the "
                      "L2 copy ceiling when the working set fits in the L2 the environment records, else the DRAM copy "
                      "ceiling. Without an L2 ceiling an L2-resident target is marked DRAM roofline n/a. A correct "
                      "result consistently above its ceiling (more than "
                      f"{stats.CEILING_TOLERANCE:.0%}) says the ceiling was measured too low; both numbers are "
                      "named. The floor is the cost of launching nothing: timings within 3x of it measure the harness "
                      "as much as the kernel."),
        doc.Table(["Ceiling", "What", "Median", "Rate", "Taken by"], rows, numeric=(2, 3)),
    ]
    for kind, label, work in (("copy", "Copy", "bytes"), ("l2", "L2 copy", "bytes"), ("gemm", "GEMM", "flops")):
        record = run.ceilings.get(kind, {})
        if "variants" in record:
            blocks.append(doc.Paragraph(f"{label} variants: " + "; ".join(
                f"{name} {record[work] / (median(v['samples_us']) * 1e-6) / 1e9:.1f} {rates[kind][1]}"
                for name, v in sorted(record["variants"].items())) + f" (the ceiling is the fastest, {record['best']})."))
    if run.cards:
        first = Card(run.dir).label or "first card"  # the run's own card, read as gpus/<i>/ are
        per_card = [[label, *(f"{r[key]:.1f} {unit}" if key in r else "n/a" for key, unit in rates.values()),
                     f"{r['floor_us']:.3f} us" if "floor_us" in r else "n/a"]
                    for label, r in [(first, run.ceiling),
                                     *((card.label or "unnamed card", card.rates) for card in run.cards)]]
        blocks += [doc.Paragraph("Every card of this run measured its own ceilings; a target is divided by those of the "
                                 "card that timed it:"),
                   doc.Table(["Card", "Copy", "L2 copy", "GEMM", "Floor"], per_card, numeric=(1, 2, 3, 4))]
    if "copy_gb_s" in run.ceiling and "gemm_gflop_s" in run.ceiling:
        blocks.append(doc.Paragraph(f"Ridge point: {run.ceiling['gemm_gflop_s'] / run.ceiling['copy_gb_s']:.2f} "
                                    "FLOPs per byte."))
    blocks += [doc.Paragraph(text) for text in cross_checks(run)]
    return blocks


@dataclass
class LimitRow:
    """One kernel and shape: its fastest hand-written and library layout, each judged."""

    kernel: str
    shape: str
    written: tuple[str, float, Judgement] | None
    library: tuple[str, float, Judgement] | None
    flops: int
    compulsory: int


def limit_rows(run: Run) -> list[LimitRow]:
    rows = []
    for kernel in run.kernels:
        for shape in run.shapes(kernel):
            if medians := run.medians(kernel, shape):
                record = run.records(kernel, shape, next(iter(medians)))[0]
                rows.append(LimitRow(kernel, shape, *((*best, judge(run, kernel, shape, best[0])) if best else None
                                                      for best in run.fastest(kernel, shape)),
                                     int(record["flops"]), run.byte_counts(record)[0]))
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


def measured_ceilings(run: Run) -> list[tuple[str, str, str, float]]:
    """The ceilings this run measured, as the roofline draws them: label, rate as text, kind of line, rate."""
    return [(label, f"{rate / 1e3:.1f} TFLOP/s" if kind == "compute" else f"{rate:,.0f} GB/s", kind, rate)
            for key, label, kind in (("copy_gb_s", "DRAM copy", "bandwidth"), ("l2_gb_s", "L2 copy", "bandwidth"),
                                     ("gemm_gflop_s", "SGEMM", "compute")) if (rate := run.ceiling.get(key))]


def roofline(run: Run, peak: float | None) -> doc.Figure | None:
    """Each kernel's largest shape on a roofline; None without a copy ceiling or FLOPs."""
    from kernelkit import figures

    if "copy_gb_s" not in run.ceiling:
        return None
    points = []
    for kernel in run.kernels:
        first = {r["shape"]: r for r in reversed(run.timings) if r["kernel"] == kernel}  # a record of each shape
        largest = max(run.shapes(kernel), key=lambda shape: run.byte_counts(first[shape])[0])
        for layout, us in run.medians(kernel, largest).items():
            record = run.records(kernel, largest, layout)[0]
            if record["flops"]:
                flops = int(record["flops"])
                points.append((f"{kernel} {largest}", layout, flops / run.byte_counts(record)[0],
                               flops / (us * 1e-6) / 1e9, layout in run.libraries(kernel)))
    if not points:
        return None
    lines = [(f"{label}, measured ({text})", kind, rate, True) for label, text, kind, rate in measured_ceilings(run)]
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

    if not (rows := limit_rows(run)):
        return None
    peak = run_card(run).fp32_peak_gflop_s
    measured = ", ".join(f"{label} {text}" for label, text, _, _ in measured_ceilings(run)) or "none"
    blocks: list[doc.Block] = [doc.Paragraph(
        f"Ceilings measured in this run: {measured}; the card's FP32 peak "
        + (f"is {peak / 1e3:.1f} TFLOP/s (SMs x max SM clock x FP32 lanes x 2)" if peak else "is unknown")
        + ". Per kernel and shape, the fastest hand-written and the fastest library layout: its pooled median, the rate "
        "its spec's compulsory bytes or FLOPs give, and its share of the ceiling that bounds it (Bounded by); an "
        "arithmetic-bound one also its share of the FP32 peak."), doc.Table(
        ["Kernel", "Shape", "Bounded by", "Fastest hand-written", "Fastest library", "Hand-written / library"], [
            [r.kernel, r.shape, (r.written or r.library)[2].ceiling or (r.written or r.library)[2].note or "n/a",
             _limit_cell(r, r.written, peak), _limit_cell(r, r.library, peak),
             f"{r.written[1] / r.library[1]:.2f}x" if r.written and r.library else "n/a"] for r in rows], numeric=(5,))]
    blocks += filter(None, [roofline(run, peak)])
    if reasons := [text for kernel in run.kernels for text in explain.explanations(run, kernel)]:
        blocks += [doc.Paragraph("Why some shares are low or high, from the data:"), doc.Bullets(reasons)]
    if suspect := [f"{k} {s} {l}: {judged.note}" for k in run.kernels for s in run.shapes(k)
                   for l in run.layouts(k) if run.records(k, s, l) and (judged := judge(run, k, s, l)).above]:
        blocks.append(doc.Paragraph(f"Results above their ceiling ({len(suspect)} configuration"
                                    f"{'s' if len(suspect) > 1 else ''}): " + "; ".join(suspect) + "."))
    if run.ceilings:
        blocks.append(doc.Details("How the ceilings were measured (" + ", ".join(sorted(run.ceilings)) + ")",
                                  ceiling_blocks(run)))
    return doc.Section("Limits", blocks)
