"""The judgement of one configuration against the ceiling that bounds it (memory or arithmetic,
L2 or DRAM), shared by the limits, the claims and the explanations of the report."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from kernelkit.report.run import Run
from kernelkit.stats import CEILING_TOLERANCE, DIFF_THRESHOLD, near_floor


@dataclass
class Judgement:
    bound: str                 # "memory", "arithmetic" or "unknown"
    memory: str                # "L2" or "DRAM" (where the working set lives between calls)
    ceiling: str | None        # the ceiling it is divided by, e.g. "DRAM copy 4291 GB/s"
    fraction: float | None
    above: bool                # beyond the ceiling's tolerance
    consistent: bool           # repeats agree within the diff threshold
    note: str


def _ceiling_name(kind: str, rate: float) -> str:
    return {"copy": f"DRAM copy {rate:.0f} GB/s", "l2": f"L2 copy {rate:.0f} GB/s",
            "gemm": f"GEMM {rate / 1e3:.1f} TFLOP/s"}[kind]


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
        note = "DRAM roofline n/a (fits in the L2; no L2 ceiling measured)" if fits else "no ceilings measured in this run"
        return Judgement("unknown", memory, None, None, False, consistent, note)
    seconds = median_us * 1e-6
    intensity = flops / compulsory if compulsory else float("inf")
    if intensity >= rates["gemm_gflop_s"] / rates["copy_gb_s"]:
        kind, achieved = "gemm", flops / seconds / 1e9
    elif fits and "l2_gb_s" in rates:
        kind, achieved = "l2", compulsory / seconds / 1e9
    elif fits:
        return Judgement("memory", memory, None, None, False, consistent,
                         "DRAM roofline n/a (fits in the L2; no L2 ceiling measured)")
    else:
        kind, achieved = "copy", compulsory / seconds / 1e9
    rate = rates[{"copy": "copy_gb_s", "l2": "l2_gb_s", "gemm": "gemm_gflop_s"}[kind]]
    fraction = achieved / rate
    above = fraction > 1.0 + CEILING_TOLERANCE
    unit = "GFLOP/s" if kind == "gemm" else "GB/s"
    note = ""
    if above and not correct:
        note = (f"above the {_ceiling_name(kind, rate)} ({achieved:.0f} {unit}) without a passed correctness record "
                "in this run")
    elif above and consistent:
        note = (f"ceiling suspect: this correct result reaches {achieved:.0f} {unit}, above the measured "
                f"{_ceiling_name(kind, rate)}")
    elif above:
        note = (f"above the {_ceiling_name(kind, rate)} ({achieved:.0f} {unit}) while its repeats differ by more "
                f"than {DIFF_THRESHOLD:.0%}: the measurement is in doubt")
    elif fraction > 1.0:
        note = f"at its ceiling (within {CEILING_TOLERANCE:.0%})"
    if near_floor(median_us, rates.get("floor_us")):
        note = "; ".join(filter(None, [note, "within 3x the harness floor"]))
    return Judgement("arithmetic" if kind == "gemm" else "memory", memory, _ceiling_name(kind, rate), fraction,
                     above, consistent, note)
