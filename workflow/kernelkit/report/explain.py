"""Reasons a result differs, generated from the data the kit holds: byte counts against the L2 the
environment records, a layout's declared vector width against the shape, issued against compulsory
bytes. No sentence here is written about a particular run."""

from __future__ import annotations

from kernelkit import units
from kernelkit.report.bounds import judge
from kernelkit.report.run import Run


def explanations(run: Run, kernel: str) -> list[str]:
    found = []
    spec = run.spec(kernel)
    resident: list[tuple[str, int]] = []
    written = [layout for layout in run.layouts(kernel) if layout not in run.libraries(kernel)]
    for shape in run.shapes(kernel):
        records = [r for r in run.timings if r["kernel"] == kernel and r["shape"] == shape]
        compulsory, issued = run.byte_counts(records[0])
        # Only where memory bounds the kernel does the memory that serves it explain its rate.
        if run.fits_in_l2(compulsory) and judge(run, kernel, shape, records[0]["layout"]).bound != "arithmetic":
            resident.append((shape, compulsory))
        if issued > compulsory and written:
            found.append(f"{kernel} {shape}: the hand-written access pattern ({', '.join(written)}) issues "
                         f"{units.size(issued)} for {units.size(compulsory)} of unique data "
                         f"({issued / compulsory:.1f}x); the fraction of the ceiling counts the unique data.")
        if spec is not None:
            width = spec.parse_shape(shape)[-1]
            for layout, vector in spec.vector_width.items():
                if width % vector and any(r["layout"] == layout for r in records):
                    found.append(f"{kernel} {shape} {layout}: the width {width} is not a multiple of {vector}, so "
                                 f"{layout} takes its scalar path instead of {vector}-wide loads.")
    if resident:
        sizes = [size for _, size in resident]
        span = units.size(sizes[0]) if len(set(sizes)) == 1 else f"{units.size(min(sizes))} to {units.size(max(sizes))}"
        found.insert(0, f"{kernel} {', '.join(shape for shape, _ in resident)}: the working set ({span}) fits in the "
                        f"{units.size(run.l2_bytes or 0)} L2, so repeated launches find it in cache and the rate says "
                        "nothing about DRAM.")
    return found
