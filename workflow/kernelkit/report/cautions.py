"""What a reader must know before trusting the numbers, each derived from the files and checked there."""

from __future__ import annotations

import re
from typing import Any, Callable

from kernelkit import document as doc
from kernelkit.report.quality import foreign_targets, looked_after, retimed_targets
from kernelkit.report.run import Run, snapshots as _snapshots, target_name as _target


def caveats(run: Run) -> list[str]:
    """What a reader must know before trusting the numbers, derived from the files only."""
    found = []
    locked = run.environment["clocks_locked"]
    if locked is not True:
        found.append("Clocks were not locked" if locked is False else f"Whether clocks were locked is unknown ({locked})")
    if changed := [f"{_target(r)} ({r['nvml_before']['sm_clock_mhz']} -> {r['nvml_after']['sm_clock_mhz']} MHz)"
                   for r in run.timings if r["nvml_before"].get("sm_clock_mhz") != r["nvml_after"].get("sm_clock_mhz")]:
        found.append(f"SM clock differed before and after {len(changed)} timed targets: " + "; ".join(changed))
    throttled: dict[str, list[str]] = {}
    for record, when, snap in _snapshots(run):
        reasons = snap.get("clock_event_reasons")
        for reason in reasons if isinstance(reasons, list) else []:
            throttled.setdefault(reason, []).append(f"{_target(record)} ({when})")
    for reason, where in sorted(throttled.items()):
        found.append(f"Clock-event reason {reason} seen in {len(where)} snapshots: " + "; ".join(where))
    gaps, outliers = [], []
    for (kernel, shape, layout), group in run.table.groupby(["kernel", "shape", "layout"]):
        if len(group) < 2:
            continue
        spread = float((group["max_us"] - group["min_us"]).max())
        gap = float(group["median_us"].max() - group["median_us"].min())
        if gap > spread:
            gaps.append(f"Repeats of {kernel} {shape} {layout} differ by more than the spread inside either: medians "
                        + ", ".join(f"{m:.3f}" for m in group["median_us"]) + f" us (gap {gap:.3f}, widest spread "
                        f"{spread:.3f})")
        # A repeat whose samples spread far wider than another's, none tagged disturbed: something the
        # records do not name changed them (a CuPy loop NVML had not yet sampled, in h200-fq2-wait).
        rows = list(group.itertuples())
        spreads = {int(row.repeat): (row.max_us - row.min_us) / row.median_us for row in rows}
        for row in rows:
            wide = spreads[int(row.repeat)]
            steady = min((rep for rep in spreads if rep != int(row.repeat)), key=spreads.__getitem__)
            if wide >= OUTLIER_SPREAD and wide >= OUTLIER_FACTOR * spreads[steady] and row.disturbed_samples == 0:
                outliers.append(f"Samples of {kernel} {shape} {layout} rep{int(row.repeat)} spread {100 * wide:.1f}% of "
                                f"their median ({row.min_us:.3f}-{row.max_us:.3f} us) against {100 * spreads[steady]:.2f}% "
                                f"in rep{steady}, and none is tagged disturbed: what changed them is not in the records")
    found += gaps + outliers
    timed = run.timings + run.cold + run.spans
    if foreign := foreign_targets(timed):
        found.append(f"Another process computed on the GPU {'during or right after' if looked_after(timed) else 'during'} "
                     f"{len(foreign)} timed targets or spans (their samples are tagged disturbed): " + "; ".join(foreign))
    if retimed := retimed_targets(timed):
        found.append(f"{len(retimed)} timed targets or spans were taken again after foreign work touched their samples; "
                     "their numbers come from the stretch after the wait")
    def in_order(key: Callable[[dict[str, Any]], Any]) -> list[tuple[str, str, str, int]]:
        return [(r["kernel"], r["shape"], r["layout"], r["repeat"]) for r in sorted(run.timings, key=key)]
    # The planned order is the one every record names (its order key within its repeat).
    plan, executed = in_order(lambda r: (r["repeat"], r["order"].get("key", 0))), in_order(lambda r: r["started_utc"])
    if executed != plan:
        moved = sum(a != b for a, b in zip(executed, plan))
        runs_of_kernels = 1 + sum(a[0] != b[0] for a, b in zip(executed, executed[1:]))
        found.append(f"Timed targets did not run in the planned shuffled order ({moved} of {len(plan)} out of place; "
                     f"{runs_of_kernels} stretches of one kernel): drift over the run can favour the kernels timed at "
                     "the same time")
    if skipped := sorted({f"{r['kernel']} {r['layout']} ({r['skipped']})" for r in run.skipped}):
        found.append("Layouts skipped because their library is missing here: " + "; ".join(skipped))
    short = [(r["method"]["samples"], f"{_target(r)} ({len(r['samples_us'])})") for r in run.timings
             if isinstance(r["method"].get("samples"), int) and len(r["samples_us"]) < r["method"]["samples"]
             and r.get("method_used", {}).get("stopped_by", "fixed_count") == "fixed_count"]
    for asked in sorted({a for a, _ in short}):
        found.append(f"Fewer samples than the timing files asked ({asked}): "
                     + "; ".join(t for a, t in short if a == asked))
    return found


# A process's samples spread at least this much of its median, and this many times as wide as
# another repeat's of the same target, with none tagged: a caveat.
OUTLIER_SPREAD = 0.10
OUTLIER_FACTOR = 10.0


# The Caveats section states at most this many; like caveats are said once, together.
MAX_CAVEATS = 10
_REPEATS_DIFFER = re.compile(r"^Repeats of (?P<what>.+?) differ by more than the spread inside either: medians "
                             r"(?P<medians>[\d., ]+) us \(gap (?P<gap>[\d.]+), widest spread (?P<spread>[\d.]+)\)$")
_WIDE_SAMPLES = re.compile(r"^Samples of (?P<what>.+?) spread (?P<pct>[\d.]+)% of their median")


def condensed_caveats(items: list[str]) -> list[str]:
    """The caveats with like ones said once, where the first of them stood: every 'repeats differ'
    in one item (the five largest relative gaps named), every 'samples spread widely' in another."""
    gaps: list[tuple[float, str]] = []
    wide: list[tuple[float, str]] = []
    out: list[Any] = []
    for item in items:
        if found := _REPEATS_DIFFER.match(item):
            medians = [float(m) for m in found["medians"].split(",") if m.strip()]
            gaps.append((float(found["gap"]) / min(medians) if medians and min(medians) > 0 else 0.0, found["what"]))
            out += [("gaps",)] if len(gaps) == 1 else []
        elif found := _WIDE_SAMPLES.match(item):
            wide.append((float(found["pct"]), item))
            out += [("wide",)] if len(wide) == 1 else []
        else:
            out.append(item)
    named = ", ".join(f"{what} ({100 * gap:.1f}%)" for gap, what in sorted(gaps, reverse=True)[:5])
    said = {"gaps": f"In {len(gaps)} configurations the repeats' medians differ by more than the spread of samples "
                      f"inside either (the gap over the smaller median: {named}"
                      + (f", and {len(gaps) - 5} more" if len(gaps) > 5 else "") + "): a second process tells more "
                      "than more samples would (the Noise table has every configuration)",
            "wide": wide[0][1] if len(wide) == 1 else f"In {len(wide)} repeats the samples spread widely with none "
                      "tagged disturbed: " + "; ".join(text for _, text in sorted(wide, reverse=True))}
    return [item if isinstance(item, str) else said[item[0]] for item in out]


def section_caveats(run: Run) -> doc.Section:
    if not (items := condensed_caveats(caveats(run))):
        return doc.Section("Caveats", [doc.Paragraph("None found in the recorded files.")])
    blocks: list[doc.Block] = [doc.Bullets(items[:MAX_CAVEATS])]
    if len(items) > MAX_CAVEATS:
        blocks.append(doc.Details(f"{len(items) - MAX_CAVEATS} further caveats", [doc.Bullets(items[MAX_CAVEATS:])]))
    return doc.Section("Caveats", blocks)
