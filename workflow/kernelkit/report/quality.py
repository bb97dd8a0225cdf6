"""How far the timings can be trusted: clocks during the samples, noise within and between processes,
buffer placement, warm against cold cache, and the optional tools (sanitizer, counters)."""

from __future__ import annotations

from statistics import median
from typing import Any

from kernelkit import document as doc
from kernelkit import sampler
from kernelkit.report.run import Run, target_name as _target
from kernelkit.summary import natural_key
from kernelkit.sanitizer import sanitizer_errors


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


# The units whose percentage of peak Nsight Compute reads (kernelkit.tools.NCU_METRICS), in the
# order of the Counters table; records of older kits lack all but DRAM.
SPEED_OF_LIGHT = (("dram_throughput_pct_of_peak", "DRAM"), ("l2_throughput_pct_of_peak", "L2"),
                  ("l1_throughput_pct_of_peak", "L1/shared"), ("sm_throughput_pct_of_peak", "SM"),
                  ("fma_pipe_pct_of_peak", "FMA pipe"))
# A unit this close to its peak is what the kernel waits on; below it on every unit, latency is.
LIMITER_PCT = 60.0


def limiter(launches: list[dict[str, Any]]) -> str:
    """The unit closest to its peak in the longest launch of a call, or 'latency' when none is near it."""
    if not (timed := [x for x in launches if isinstance(x.get("duration_ns"), float)]):
        return "n/a"
    longest = max(timed, key=lambda x: x["duration_ns"])
    read = [(longest[name], unit) for name, unit in SPEED_OF_LIGHT if isinstance(longest.get(name), float)]
    if len(read) < 2:
        return "n/a"
    pct, unit = max(read)
    return f"{unit} ({pct:.0f}%)" if pct >= LIMITER_PCT else f"latency (top: {unit} {pct:.0f}%)"


def _counter(launches: list[dict[str, Any]], name: str, weighted: bool = False) -> str:
    """A counter over the kernels one call launched: summed, or weighted by each launch's duration."""
    pairs = [(x[name], x.get("duration_ns", 1.0)) for x in launches if isinstance(x.get(name), float)]
    weight = sum(w for _, w in pairs)
    if not weighted:
        return f"{sum(v for v, _ in pairs):.0f}" if pairs else "n/a"
    return f"{sum(v * w for v, w in pairs) / weight:.1f}" if pairs and weight else "n/a"


def disturbed_targets(records: list[dict[str, Any]]) -> list[str]:
    """Targets with disturbed samples: how many, and what disturbed them (from the sample tags)."""
    found: list[str] = []
    for r in records:
        if r.get("disturbed_samples"):
            text = f"{_target(r)}: {len(r['disturbed_samples'])} of {len(r['samples_us'])} samples"
            why = sampler.causes([r["sample_tags"][i] for i in r["disturbed_samples"] if i < len(r["sample_tags"])])
            found.append(text + (f" ({'; '.join(why)})" if why else ""))
    return found


def run_time_paragraph(run: Run) -> doc.Paragraph:
    """The run's wall time and lock waits, from the job clocks; and when the first timing started
    and the last control ended: timings wait for their controls, which more GPUs cannot shorten."""
    from kernelkit.records import run_time

    timed = run_time(run.timings + run.cold + run.spans + run.correctness + run.controls + list(run.ceilings.values()))
    if not timed["jobs"]:
        return doc.Paragraph("The records of this run carry no job clocks (they predate them): wall time and "
                             "lock waits are unknown.")
    wait = timed["lock_waited_s"]
    text = (f"{timed['jobs']} GPU jobs ran from the first start to the last end in {timed['wall_s']:.1f} s of wall "
            f"time ({timed['job_wall_s_total']:.1f} s of job time added up, so {timed['job_wall_s_total'] / timed['wall_s']:.1f} "
            f"jobs at a time on average). They held the GPU lock {timed['lock_held_s_total']:.1f} s in all and waited "
            f"for it {wait['total']:.1f} s in all (median {wait['median']:.2f} s, longest {wait['max']:.2f} s per job).")
    if timed["without_job_time"]:
        text += f" {timed['without_job_time']} records carry no job clock and are not counted."
    timings, controls = run_time(run.timings + run.cold), run_time(run.controls)
    if timings["jobs"] and controls["jobs"]:
        text += (f" The first timed target started {timings['started_unix_s'] - timed['started_unix_s']:.1f} s and the "
                 f"last negative control ended {controls['ended_unix_s'] - timed['started_unix_s']:.1f} s after the first "
                 "job started (every timing of a kernel waits for all of its kernel's negative controls).")
    return doc.Paragraph(text)


def foreign_targets(records: list[dict[str, Any]]) -> list[str]:
    """Targets during which another process computed on the GPU, named with its pids."""
    from kernelkit.foreign import saw_foreign_work

    def named(process: Any) -> str:
        return (f"{process.get('pid')}{' (seen right after it)' if process.get('right_after') else ''}"
                if isinstance(process, dict) else str(process))

    return [f"{_target(r)}: pids {', '.join(named(p) for p in (r.get('foreign_work') or {}).get('processes', [])) or 'unknown'}"
            for r in records if saw_foreign_work(r)]


def looked_after(records: list[dict[str, Any]]) -> bool:
    """Whether the kit that wrote these records looked at the GPU after each timed stretch
    (kernelkit.quiet_gpu.look_after): records of earlier kits have no `foreign_work.after`."""
    return any(isinstance(r.get("foreign_work"), dict) and "after" in r["foreign_work"] for r in records)


def retimed_targets(records: list[dict[str, Any]]) -> list[str]:
    """Targets taken again once the GPU was idle after foreign work touched them, with the waits."""
    return [f"{_target(r)}: {len(retimed)}x, after waits of "
            f"{sum(entry.get('then_waited', {}).get('waited_s', 0.0) for entry in retimed):.1f} s"
            for r in records if (retimed := r.get("retimed_after_foreign_work") or [])]


def section_clocks(run: Run, figure: doc.Figure | None) -> doc.Section | None:
    """What the background NVML sampler saw while the samples were taken."""
    if not (sampled := [r for r in run.timings + run.cold if r.get("clock_trace")]):
        return None
    settings = sampled[0]["sampler"]
    points = sum(len(r["clock_trace"]) for r in sampled)
    clocks = [p["sm_clock_mhz"] for r in sampled for p in r["clock_trace"] if isinstance(p["sm_clock_mhz"], (int, float))]
    reasons = sorted({x for r in sampled for p in r["clock_trace"] if isinstance(p["reasons"], list) for x in p["reasons"]})
    blocks: list[doc.Block] = [*([figure] if figure else []), doc.Paragraph(
        f"NVML read every {settings['interval_ms']:g} ms on a background thread during the samples of "
        f"{len(sampled)} timed targets ({points} readings; SM clock {min(clocks):g} to {max(clocks):g} MHz; reasons seen: "
        f"{', '.join(reasons) or 'none'}). A sample is disturbed when a reading within one interval of it showed a "
        f"throttle reason ({', '.join(sorted(sampler.THROTTLE_REASONS))}) or an SM clock below "
        f"{settings['min_sm_clock_fraction']:g} of the maximum, or when another process computed on the GPU during it "
        "(per-process utilisation from NVML; kit processes waiting for the lock hold idle contexts and do not count)"
        + (" or right after it (NVML's device utilisation over a period after the timing, while the kit launched "
           "nothing and another process held a context: NVML samples processes too seldom to show work begun in a "
           "short timing)" if looked_after(sampled + run.spans) else "") + ".")]
    affected = disturbed_targets(sampled)
    blocks.append(doc.Bullets(affected) if affected else doc.Paragraph("No sample was disturbed."))
    if foreign := foreign_targets(sampled + run.spans):
        blocks.append(doc.Paragraph(f"Another process computed on the GPU during {len(foreign)} timed targets or spans: "
                                    + "; ".join(foreign) + "."))
    if retimed := retimed_targets(sampled + run.spans):
        blocks.append(doc.Paragraph(
            f"Foreign work touched the samples of {len(retimed)} timed targets or spans, which were taken again once the "
            "GPU was idle (gpu_lock.wait_for_idle; the record keeps the samples set aside): " + "; ".join(retimed) + "."))
    blocks.append(run_time_paragraph(run))
    waits = [r["method_used"]["clock_wait"] for r in sampled if r["method_used"].get("clock_wait", {}).get("enabled")]
    if waits:
        blocks.append(doc.Paragraph(
            f"Waiting for the clock was on: {len(waits)} targets waited {sum(w['waited_s'] for w in waits):.3f} s in all; "
            f"{sum(1 for w in waits if w['ready'] is False)} gave up at the timeout."))
    disturbed = sum(len(r.get("disturbed_samples") or []) for r in sampled)
    return doc.Section("Clocks during timing", blocks, summary=(
        f"Clocks during timing: {points} NVML readings over {len(sampled)} timed targets, SM clock "
        f"{min(clocks):g}-{max(clocks):g} MHz, {disturbed} of {sum(len(r['samples_us']) for r in sampled)} samples "
        "disturbed"))


def noise_rows(run: Run) -> list[list[str]]:
    """Per configuration: relative spread inside each process, and between processes' medians."""
    from kernelkit.diff_inputs import samples_by_process

    rows = []
    for (kernel, shape, layout), group in run.table.groupby(["kernel", "shape", "layout"], sort=False):
        within = float(((group["max_us"] - group["min_us"]) / group["median_us"]).median())
        # One median per process, the repeats one worker process ran pooled as one: they show no
        # spread between processes.
        medians = [median(samples) for samples in samples_by_process(
            ((r["kernel"], r["shape"], r["layout"], r.get("repeat"), r.get("cache")), r)
            for r in run.records(kernel, shape, layout))]
        between = (max(medians) - min(medians)) / (sum(medians) / len(medians)) if len(medians) > 1 else None
        one_process = between is None and len(group) > 1
        rows.append([kernel, shape, layout, f"{100 * within:.2f}%",
                     ("n/a: one process" if one_process else "n/a") if between is None else f"{100 * between:.2f}%",
                     "n/a" if between is None else "between" if between > within else "within"])
    return rows


def section_noise(run: Run) -> doc.Section | None:
    if not (rows := noise_rows(run)):
        return None
    larger = sum(1 for r in rows if r[-1] == "between")
    compared = sum(1 for r in rows if r[-1] != "n/a")
    one_process = sum(1 for r in rows if r[4] == "n/a: one process")
    shared = (f" In {one_process} configurations all the repeats ran in one worker process, which shows no spread "
              "between processes (n/a: one process)." if one_process else "")
    return doc.Section("Noise: within and between processes", summary=(
        f"Noise split: between-process spread exceeds within-process spread in {larger} of {compared} "
        "configurations"), blocks=[
        doc.Paragraph("Within: (max - min) / median of one process's samples, the median over repeats. Between: the "
                      "range of the processes' medians over their mean, the repeats one worker process ran counted "
                      "as one process. Where between exceeds within, a second process tells more than more samples "
                      f"would: {larger} of {compared} configurations.{shared}"),
        doc.Table(["Kernel", "Shape", "Layout", "Within a process", "Between processes", "Larger"], rows)])


def section_placements(run: Run) -> doc.Section | None:
    """Per timed target with more than one placement: each placement's median and their range."""
    from kernelkit.stats import DIFF_THRESHOLD, placement_medians, relative_range

    if not (placed := [r for r in run.timings + run.cold if len(r.get("placements", [])) > 1]):
        return None
    rows = []
    for record in sorted(placed, key=lambda r: (r["kernel"], natural_key(r["shape"]), natural_key(r["layout"]),
                                                r["method_used"].get("cache", "warm"), r["repeat"])):
        medians = placement_medians(record["samples_us"], record["sample_placement"])
        spread = relative_range(medians)
        rows.append([record["kernel"], record["shape"], record["layout"], record["method_used"].get("cache", "warm"),
                     str(record["repeat"]), ", ".join(f"{m:.3f}" for m in medians), f"{100 * spread:.2f}%",
                     "depends on placement" if spread > DIFF_THRESHOLD else ""])
    sensitive = sorted({" ".join(r[:3]) for r in rows if r[-1]})
    count = len(placed[0]["placements"])
    return doc.Section("Buffer placement", summary="Buffer placement: every placement's median per timed target", blocks=[
        doc.Paragraph(
            f"Every timed target sampled {count} placements in its process: fresh copies of its buffers, placement i "
            "taken after i MiB more of the memory pool, so that they land at other addresses (each file records them). "
            "A fresh process puts its first buffers in the same kind of place every time, so repeats alone cannot show "
            "how much the time depends on where the data lies. Range: slowest placement median over fastest, minus "
            f"one; above the diff threshold ({DIFF_THRESHOLD:.0%}) the target is marked. The target's median pools "
            f"every placement's samples. Marked: {len(sensitive)} of {len({' '.join(r[:3]) for r in rows})} "
            "configurations" + (f" ({'; '.join(sensitive)})." if sensitive else ".")),
        doc.Table(["Kernel", "Shape", "Layout", "Cache", "Repeat", "Median per placement (us)", "Range", ""], rows)])


def section_cold(run: Run) -> doc.Section | None:
    """Warm and cold cache side by side: the same configuration with L2 evicted before every sample."""
    if not run.cold:
        return None
    pooled: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for cache, records in (("warm", run.timings), ("cold", run.cold)):
        for r in records:
            pooled.setdefault((r["kernel"], r["shape"], r["layout"]), {"warm": [], "cold": []})[cache] += r["samples_us"]
    rows = []
    for key, entry in sorted(pooled.items(), key=lambda i: (i[0][0], natural_key(i[0][1]), i[0][2])):
        warm, cold = (median(entry[cache]) if entry[cache] else None for cache in ("warm", "cold"))
        rows.append([*key, _us(warm), _us(cold), f"{cold / warm:.2f}" if warm and cold else "n/a"])
    flush = next((r["method_used"].get("flush") for r in run.cold if r["method_used"].get("flush")), {})
    return doc.Section("Cold and warm cache", summary=f"Cold and warm cache: {len(run.cold)} cold-cache targets beside "
                       "the warm ones", blocks=[
        doc.Paragraph("Cold: before every sample the kit writes a buffer of "
                      f"{flush.get('flush_bytes', 'n/a')} bytes (twice the L2 size the device reports, "
                      f"{flush.get('l2_bytes', 'n/a')} bytes) outside the timed interval, and reset persisting L2 lines "
                      f"({flush.get('persisting_l2_reset', 'n/a')}); each cold sample is a single call, so launch "
                      "overhead is not amortised as in the warm view. Medians in microseconds, pooled over repeats."),
        doc.Table(["Kernel", "Shape", "Layout", "Warm", "Cold", "Cold / warm"], rows)])


def section_tools(run: Run) -> list[doc.Section]:
    """compute-sanitizer and Nsight Compute results, where the config asked for them."""
    sections = []
    if run.sanitizer:
        rows, clean = [], True
        for record in run.sanitizer:
            if "skipped" in record:
                rows.append([record["kernel"], record["layout"], "skipped", "skipped", record["skipped"]])
                continue
            # Counted from the tool's own output kept in the file, so a later reading of the
            # summary line (racecheck words it differently from memcheck) applies to old runs too.
            tools = record["tools"]
            counts = {t: sanitizer_errors(tools[t]["tail"]) for t in ("memcheck", "racecheck")}
            clean = clean and all(counts[t] == 0 and tools[t]["exit_code"] == 0 for t in counts)
            rows.append([record["kernel"], record["layout"],
                         *(str(counts[t]) if counts[t] is not None else "no summary line" for t in counts),
                         "; ".join(f"{t} exit {tools[t]['exit_code']}" for t in counts if tools[t]["exit_code"] != 0)])
        checked = [r for r in run.sanitizer if "skipped" not in r]
        over = ("the cases each record lists (KernelSpec.sanitizer_shapes_used: a few correctness shapes, pattern normal)"
                " of each hand-written layout, gating its timing" if all("cases" in r for r in checked) else
                "every correctness case of each hand-written layout")
        together = sorted({record["kernel"] for record in run.sanitizer if len(record.get("checked_together", [])) > 1})
        joint = (f" The hand-written layouts of {', '.join(together)} ran together, one process per tool and kernel, "
                 "so each of their rows gives that joint run's counts." if together else "")
        layouts = len({(r["kernel"], layout) for r in checked for layout in (r.get("layouts") or [r.get("layout")])})
        sections.append(doc.Section("Sanitizer", [
            doc.Paragraph(f"compute-sanitizer over {over} (the kit's own "
                          "correctness command run under the tool): memcheck's ERROR SUMMARY count, and racecheck's "
                          f"errors plus warnings from its RACECHECK SUMMARY line, read from the output kept in the file.{joint}"),
            doc.Table(["Kernel", "Layout", "memcheck errors", "racecheck hazards", "Note"], rows)],
            summary=f"Sanitizer: memcheck and racecheck found nothing in {layouts} hand-written layouts"
            if clean and checked else None))
    else:
        runs = sorted({r.get("determinism_runs", 1) for r in run.correctness})
        repeated = (f"; each correctness case was launched {', '.join(map(str, runs))} times and had to repeat its bits"
                    if runs != [1] else "")
        sections.append(doc.Section("Sanitizer", [doc.Paragraph(
            "compute-sanitizer did not run in this run (config `sanitize` false or older kit): races and out-of-bounds "
            f"accesses were not checked by a tool, only through the correctness cases{repeated}.")]))
    if run.profiles:
        rows = []
        for record in sorted(run.profiles, key=lambda r: (r["kernel"], natural_key(r["shape"]), r["layout"])):
            key = (record["kernel"], record["shape"], record["layout"])
            head, launches = [*key, _us(run.pooled_median(*key))], record.get("launches", [])
            if "skipped" in record:
                rows.append([*head, *[""] * (len(SPEED_OF_LIGHT) + 4), f"skipped: {record['skipped']}"])
                continue
            weighted = [_counter(launches, name, weighted=True) for name, _ in SPEED_OF_LIGHT]
            rows.append([*head, *weighted, _counter(launches, "achieved_occupancy_pct", weighted=True),
                         _counter(launches, "instructions_executed"), _counter(launches, "shared_bank_conflicts"),
                         limiter(launches), f"{len(launches)} kernel launch(es)"])
        sections.append(doc.Section("Counters (Nsight Compute)", [
            doc.Paragraph("One warmed call per configuration under ncu --clock-control none (the clocks as the timing "
                          "saw them); percentages are duration-weighted over the kernels the call launched, counts "
                          "are summed. The median is the kernel time of the timing targets, not ncu's replayed duration. "
                          f"The limiter is the unit working closest to its peak, when one reaches {LIMITER_PCT:.0f}%; "
                          "with none there, the kernel waits on latency (too little work in flight)."),
            doc.Table(["Kernel", "Shape", "Layout", "Median (us)", *(f"{unit} %" for _, unit in SPEED_OF_LIGHT),
                       "Achieved occupancy %", "Instructions", "Shared bank conflicts", "Limiter", "Note"], rows)]))
    return sections


