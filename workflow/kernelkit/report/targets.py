"""Every timed configuration in one compact table per kernel, in the manner of nvbench: scaled
numbers right-aligned, noise per row, the fraction of the ceiling that serves it, bytes in MiB/GiB."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import pandas as pd

from kernelkit import document as doc
from kernelkit import units
from kernelkit.report.bounds import Judgement, judge
from kernelkit.report.run import Run, method_used
from kernelkit.summary import natural_key


@dataclass
class TargetRow:
    kernel: str
    shape: str
    layout: str
    median_us: float
    noise: float            # largest relative standard deviation of one process's samples
    compulsory_bytes: int
    issued_bytes: int
    flops: int
    judgement: Judgement
    library: bool           # a library baseline: its own access pattern, so the spec's issued count is not its


def target_rows(run: Run, kernel: str) -> list[TargetRow]:
    rows = []
    for shape in run.shapes(kernel):
        for layout in run.layouts(kernel):
            if records := run.records(kernel, shape, layout):
                noise = max(statistics.stdev(r["samples_us"]) / statistics.mean(r["samples_us"])
                            if len(r["samples_us"]) > 1 else 0.0 for r in records)
                rows.append(TargetRow(kernel, shape, layout, run.pooled_median(kernel, shape, layout) or 0.0, noise,
                                      *run.byte_counts(records[0]), int(records[0]["flops"]),
                                      judge(run, kernel, shape, layout), layout in run.libraries(kernel)))
    return rows


TARGET_HEADER = ["Shape", "Layout", "Median", "Noise", "Bytes (compulsory)", "Rate", "Of ceiling", "Ceiling",
                 "Served by", "Note"]


def _render_row(row: TargetRow) -> list[str]:
    j = row.judgement
    rate = (units.arithmetic(row.flops, row.median_us) if j.bound == "arithmetic"
            else units.bandwidth(row.compulsory_bytes, row.median_us))
    issued = row.issued_bytes != row.compulsory_bytes and not row.library
    return [row.shape, row.layout, units.duration(row.median_us), f"{100 * row.noise:.2f}%",
            units.size(row.compulsory_bytes) + (f" ({units.size(row.issued_bytes)} issued)" if issued else ""), rate,
            f"{j.fraction:.2f}" if j.fraction is not None else "n/a", j.ceiling or "-",
            "L2-resident" if j.memory == "L2" else "DRAM", j.note]


def faster_layouts(table: pd.DataFrame, kernel: str) -> list[list[str]]:
    """Per shape: the fastest layout in each repeat, its margin over the runner-up, and agreement."""
    rows_k = table[table["kernel"] == kernel]
    result = []
    for shape in sorted(rows_k["shape"].unique(), key=natural_key):
        winners = []
        for repeat in sorted(rows_k["repeat"].unique()):
            hit = rows_k[(rows_k["shape"] == shape) & (rows_k["repeat"] == repeat)].sort_values("median_us")
            if len(hit) >= 2:
                winners.append((int(repeat), hit.iloc[0]["layout"], hit.iloc[1]["median_us"] / hit.iloc[0]["median_us"]))
        if winners:
            result.append([shape, ", ".join(f"rep{r}: {w} ({m:.2f}x)" for r, w, m in winners),
                           "yes" if len({w[1] for w in winners}) == 1 else "no"])
    return result


def resource_rows(run: Run, kernel: str) -> list[list[Any]]:
    """One row per hand-written layout; a layout whose targets disagree (they should not) shows every variant."""
    seen: dict[str, set[tuple]] = {}
    for record in run.timings:
        if record["kernel"] == kernel and "launch" in record:
            attributes, launch = record["kernel_attributes"], record["launch"]
            seen.setdefault(record["layout"], set()).add((
                attributes.get("num_regs", "n/a"), attributes.get("shared_size_bytes", "n/a"),
                launch["shared_mem_bytes"], attributes.get("local_size_bytes", "n/a"),
                attributes.get("max_threads_per_block", "n/a"), "x".join(map(str, launch["block"]))))
    return [[layout, *variant] for layout in sorted(seen, key=natural_key) for variant in sorted(seen[layout])]


def library_rows(run: Run, kernel: str) -> list[list[str]]:
    """One row per library layout: package, version, the call, and how its kernel time was taken."""
    seen: dict[str, tuple[str, str, str, set[str]]] = {}
    for record in run.timings:
        if record["kernel"] == kernel and "library" in record:
            library = record["library"]
            entry = seen.setdefault(record["layout"], (library["package"], library["version"], library["call"], set()))
            entry[3].add(method_used(record))
    for record in run.skipped:
        if record["kernel"] == kernel:
            seen.setdefault(record["layout"], ("skipped", "", record["skipped"], set()))
    return [[layout, package, version, call, "; ".join(sorted(methods)) or "not timed"]
            for layout, (package, version, call, methods) in sorted(seen.items())]


def cards_line(run: Run, kernel: str) -> str | None:
    """Which card timed each shape, from the records; None where they name no card (older runs)."""
    by_card: dict[str, list[str]] = {}
    for shape in run.shapes(kernel):
        for label in run.cards_of(kernel, shape):
            by_card.setdefault(label, []).append(shape)
    mixed = run.mixed_card_shapes(kernel)
    return ("Cards: " + "; ".join(f"{label} timed {', '.join(shapes)}" for label, shapes in sorted(by_card.items()))
            + (f". The layouts of {', '.join(mixed)} were timed on several cards, so they are compared across cards"
               if mixed else "") + ".") if by_card else None


def section_targets(run: Run, figures: dict[str, doc.Figure]) -> doc.Section:
    """One collapsed group per kernel: its figure of every sample, its table of every configuration,
    the faster layout per repeat, the compiled kernels' resources and the library calls."""
    blocks: list[doc.Block] = [doc.Paragraph(
        "Per kernel, one row per configuration: the median of every sample of every repeat; noise is the largest "
        "relative standard deviation of one process's samples; bytes are the spec's compulsory traffic (each datum "
        "once), with what the access pattern issues where that is more; the rate is bytes or FLOPs over the median, "
        "and its share of the ceiling of the memory that serves the working set (see Limits).")]
    for kernel in run.kernels:
        rows = target_rows(run, kernel)
        inner: list[doc.Block] = [figures[kernel]] if kernel in figures else []
        inner.append(doc.Table(TARGET_HEADER, [_render_row(r) for r in rows], numeric=(2, 3, 4, 5, 6)))
        if cards := cards_line(run, kernel):
            inner.append(doc.Paragraph(cards))
        inner += [
            doc.Paragraph("Faster layout per shape; the margin is the runner-up's median over the winner's:"),
            doc.Table(["Shape", "Faster layout per repeat (margin)", "Same in every repeat"],
                      faster_layouts(run.table, kernel)),
            doc.Paragraph("Resources of the compiled kernel, read from the function and the launch:"),
            doc.Table(["Layout", "Registers per thread", "Static shared (bytes)", "Dynamic shared (bytes)",
                       "Local memory (bytes)", "Max threads per block", "Block"], resource_rows(run, kernel),
                      numeric=(1, 2, 3, 4, 5))]
        if libraries := library_rows(run, kernel):
            inner += [doc.Paragraph("Library baselines, each with the method it calls (their kernels are the library's: "
                                    "no resources are read):"),
                      doc.Table(["Layout", "Package", "Version", "Call", "Kernel time taken by"], libraries)]
        shapes = run.shapes(kernel)
        blocks.append(doc.Details(f"{kernel}: {len(rows)} configurations ({len(shapes)} shape{'s' if len(shapes) != 1 else ''}"
                                  f" x {len(run.layouts(kernel))} layouts), every sample in a figure", inner))
    return doc.Section("Results per target", blocks)


def section_samples(run: Run) -> doc.Section:
    """Per repeat: median [min, max] of each process's samples, the numbers every other table pools."""
    rows = []
    for (kernel, shape, layout), group in run.table.groupby(["kernel", "shape", "layout"], sort=False):
        cells = [f"rep{int(r['repeat'])}: {r['median_us']:.3f} [{r['min_us']:.3f}, {r['max_us']:.3f}]"
                 for _, r in group.sort_values("repeat").iterrows()]
        rows.append([kernel, shape, layout, "; ".join(cells)])
    repeats = run.table["repeat"].nunique()
    return doc.Section("Samples per repeat", [
        doc.Paragraph("Median per-launch time in microseconds with the minimum and maximum sample, per repeat."),
        doc.Table(["Kernel", "Shape", "Layout", "Median [min, max] per repeat (us)"], rows)],
        summary=f"Samples per repeat: {len(run.table)} timing records, {repeats} repeat(s) of {len(rows)} configurations")
