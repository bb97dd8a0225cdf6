"""The judgement of one configuration against the ceiling that bounds it (memory or arithmetic,
L2 or DRAM), shared by the limits, the claims and the explanations of the report."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from kernelkit import stats
from kernelkit.report.run import Run
from kernelkit.stats import DIFF_THRESHOLD


@dataclass
class Judgement:
    bound: str                 # "memory", "arithmetic" or "unknown"
    memory: str                # "L2" or "DRAM" (where the working set lives between calls)
    ceiling: str | None        # the ceiling it is divided by, e.g. "DRAM copy 4291 GB/s"
    fraction: float | None
    above: bool                # beyond the ceiling's tolerance
    consistent: bool           # repeats agree within the diff threshold
    note: str


NO_L2 = "DRAM roofline n/a (fits in the L2; no L2 ceiling measured)"


def judge(run: Run, kernel: str, shape: str, layout: str) -> Judgement:
    """The pooled median of one configuration against the ceiling that bounds it."""
    records = run.records(kernel, shape, layout)
    median_us = run.pooled_median(kernel, shape, layout)
    compulsory, _ = run.byte_counts(records[0])
    flops = int(records[0]["flops"])
    repeat_medians = [median(r["samples_us"]) for r in records]
    consistent = max(repeat_medians) / min(repeat_medians) - 1 <= DIFF_THRESHOLD
    cases = [c for r in run.correctness if r["kernel"] == kernel for c in r["cases"] if c["layout"] == layout]
    correct = bool(cases) and all(c["passed"] for c in cases)
    fits = run.fits_in_l2(compulsory)
    memory = "L2" if fits else "DRAM"
    rates = run.rates_for(records)
    if median_us is None or "copy_gb_s" not in rates or "gemm_gflop_s" not in rates:
        return Judgement("unknown", memory, None, None, False, consistent,
                         NO_L2 if fits else "no ceilings measured in this run")
    seconds = median_us * 1e-6
    intensity = flops / compulsory if compulsory else float("inf")
    if arithmetic := intensity >= rates["gemm_gflop_s"] / rates["copy_gb_s"]:
        rate, achieved = rates["gemm_gflop_s"], flops / seconds / 1e9
        name = f"GEMM {rate / 1e3:.1f} TFLOP/s"
    elif fits and "l2_gb_s" not in rates:
        return Judgement("memory", memory, None, None, False, consistent, NO_L2)
    else:  # the copy rate of the memory that holds the working set: the L2's where it fits, else DRAM's
        rate, achieved = rates["l2_gb_s" if fits else "copy_gb_s"], compulsory / seconds / 1e9
        name = f"{memory} copy {rate:.0f} GB/s"
    fraction = achieved / rate
    above = fraction > 1.0 + stats.CEILING_TOLERANCE
    reached = f"{achieved:.0f} {'GFLOP/s' if arithmetic else 'GB/s'}"
    if above and not correct:
        note = f"above the {name} ({reached}) without a passed correctness record in this run"
    elif above:
        note = (f"ceiling suspect: this correct result reaches {reached}, above the measured {name}" if consistent else
                f"above the {name} ({reached}) while its repeats differ by more than {DIFF_THRESHOLD:.0%}: the "
                "measurement is in doubt")
    else:
        note = f"at its ceiling (within {stats.CEILING_TOLERANCE:.0%})" if fraction > 1.0 else ""
    if stats.near_floor(median_us, rates.get("floor_us")):
        note = "; ".join(filter(None, [note, "within 3x the harness floor"]))
    return Judgement("arithmetic" if arithmetic else "memory", memory, name, fraction, above, consistent, note)
