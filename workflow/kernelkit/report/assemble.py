"""The order of the report's sections: the answers first, then the limits and the results, the
evidence after them, and the all-pass tables collapsed (each behind a one-line summary computed
here from the records)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kernelkit import KitError
from kernelkit import document as doc
from kernelkit.report.answers import Links, hypothesis_verdicts, section_answers
from kernelkit.report.cautions import caveats
from kernelkit.report.checks import section_controls, section_correctness, symptom_kind
from kernelkit.report.bounds import judge
from kernelkit.report.limits import section_limits
from kernelkit.report.quality import (noise_rows, section_clocks, section_cold, section_noise, section_placements,
                                      section_tools)
from kernelkit.report.run import Run
from kernelkit.report.setup import section_environment, section_method, timing_settings
from kernelkit.report.spans import section_two_views, two_view_rows
from kernelkit.report.sweeps import section_sweeps
from kernelkit.report.targets import (faster_layouts, library_rows, resource_rows, section_samples, section_targets,
                                      target_rows)

__all__ = ["Run", "build", "render_markdown", "caveats", "condensed_caveats", "hypothesis_verdicts", "judge",
           "noise_rows", "faster_layouts", "library_rows", "resource_rows", "target_rows",
           "two_view_rows", "symptom_kind"]

# The Caveats section states at most this many; like caveats are said once, together.
MAX_CAVEATS = 10


def _figure(figure_dir: Path | None, name: str, caption: str) -> doc.Figure | None:
    path = figure_dir / f"{name}.svg" if figure_dir else None
    if path is None or not path.exists():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise KitError(f"figure {doc.clean(path)} cannot be read ({type(error).__name__})") from None
    return doc.Figure(doc.safe_svg(text, str(path)), f"{figure_dir.name}/{name}.svg", caption)


_REPEATS_DIFFER = re.compile(r"^Repeats of (?P<what>.+?) differ by more than the spread inside either: medians "
                             r"(?P<medians>[\d., ]+) us \(gap (?P<gap>[\d.]+), widest spread (?P<spread>[\d.]+)\)$")
_WIDE_SAMPLES = re.compile(r"^Samples of (?P<what>.+?) spread (?P<pct>[\d.]+)% of their median")


def condensed_caveats(items: list[str]) -> list[str]:
    """The caveats with like ones said once: every 'repeats differ by more than the spread inside
    either' in one item (the five largest relative gaps named), every 'samples spread widely with
    none tagged' in another."""
    gaps: list[tuple[float, str]] = []
    wide: list[tuple[float, str]] = []
    out: list[str] = []
    for item in items:
        if (found := _REPEATS_DIFFER.match(item)):
            medians = [float(m) for m in found["medians"].split(",") if m.strip()]
            gaps.append((float(found["gap"]) / min(medians) if medians and min(medians) > 0 else 0.0, found["what"]))
            if len(gaps) == 1:
                out.append("\0gaps")
        elif (found := _WIDE_SAMPLES.match(item)):
            wide.append((float(found["pct"]), item))
            if len(wide) == 1:
                out.append("\0wide")
        else:
            out.append(item)
    result = []
    for item in out:
        if item == "\0gaps":
            top = sorted(gaps, reverse=True)
            named = ", ".join(f"{what} ({100 * gap:.1f}%)" for gap, what in top[:5])
            result.append(f"In {len(gaps)} configurations the repeats' medians differ by more than the spread of samples "
                          f"inside either (the gap over the smaller median: {named}"
                          + (f", and {len(gaps) - 5} more" if len(gaps) > 5 else "") + "): a second process tells more "
                          "than more samples would (the Noise table has every configuration)")
        elif item == "\0wide":
            result.append(wide[0][1] if len(wide) == 1 else
                          f"In {len(wide)} repeats the samples spread widely with none tagged disturbed: "
                          + "; ".join(text for _, text in sorted(wide, reverse=True)))
        else:
            result.append(item)
    return result


def section_caveats(run: Run) -> doc.Section:
    items = condensed_caveats(caveats(run))
    if not items:
        return doc.Section("Caveats", [doc.Paragraph("None found in the recorded files.")])
    blocks: list[doc.Block] = [doc.Bullets(items[:MAX_CAVEATS])]
    if len(items) > MAX_CAVEATS:
        blocks.append(doc.Details(f"{len(items) - MAX_CAVEATS} further caveats", [doc.Bullets(items[MAX_CAVEATS:])]))
    return doc.Section("Caveats", blocks)


def _clock_summary(run: Run) -> str:
    sampled = [r for r in run.timings + run.cold if r.get("clock_trace")]
    clocks = [p["sm_clock_mhz"] for r in sampled for p in r["clock_trace"] if isinstance(p.get("sm_clock_mhz"), (int, float))]
    disturbed = sum(len(r.get("disturbed_samples") or []) for r in sampled)
    samples = sum(len(r["samples_us"]) for r in sampled)
    return (f"Clocks during timing: {sum(len(r['clock_trace']) for r in sampled)} NVML readings over {len(sampled)} timed "
            f"targets, SM clock {min(clocks):g}-{max(clocks):g} MHz, {disturbed} of {samples} samples disturbed"
            if clocks else f"Clocks during timing: {len(sampled)} timed targets sampled")


def _sanitizer_clean(run: Run) -> str | None:
    """The one-line summary of a sanitizer run that found nothing (None when it found something or did not run)."""
    from kernelkit.tools import sanitizer_errors

    checked = [r for r in run.sanitizer if "skipped" not in r]
    if not checked:
        return None
    for record in checked:
        for tool in ("memcheck", "racecheck"):
            entry = record["tools"][tool]
            if entry.get("exit_code") != 0 or sanitizer_errors(entry.get("tail", "")) != 0:
                return None
    layouts = len({(r["kernel"], layout) for r in checked for layout in (r.get("layouts") or [r.get("layout")])})
    return f"Sanitizer: memcheck and racecheck found nothing in {layouts} hand-written layouts"


def _collapse(section: doc.Section | None, summary: str | None) -> doc.Section | None:
    if section is not None and summary and not section.summary:
        section.summary = summary
    return section


def build(run_dir: Path, figure_dir: Path | None = None,
          report_dir: Path | None = None) -> tuple[str, list[doc.Section]]:
    """The report's title and sections; figures are read from `figure_dir/<kernel>.svg` when present.
    Links to records are relative to `report_dir`, the folder the report is written to (default:
    the figures' parent folder, as the workflow lays them out, else the current directory)."""
    run = Run(run_dir)
    links = Links(run, report_dir if report_dir is not None else figure_dir.parent if figure_dir else None)
    figures = {k: f for k in run.kernels
               if (f := _figure(figure_dir, k, f"{k}: every sample per shape, layout and repeat")) is not None}
    clock_figure = _figure(figure_dir, "clocks", "SM clock of every NVML reading during the timed samples")
    settings = timing_settings(run)
    tools = section_tools(run)
    clean = _sanitizer_clean(run)
    tools = [_collapse(s, clean) if s.title == "Sanitizer" else s for s in tools]
    cold = section_cold(run)
    placements = section_placements(run)
    results: list[Any] = [
        section_answers(run, links), section_limits(run), section_sweeps(run), section_targets(run, figures),
        section_two_views(run),
        _collapse(cold, f"Cold and warm cache: {len(run.cold)} cold-cache targets beside the warm ones" if cold else None),
        _collapse(placements, "Buffer placement: every placement's median per timed target" if placements else None),
        _collapse(section_clocks(run, clock_figure), _clock_summary(run)), *tools, section_caveats(run)]
    method = section_method(run)
    method.summary = (f"Method: {settings['samples']} samples of a CUDA graph replay of {settings['launches_per_graph']} "
                      f"launches after {settings['warmup_launches']} warm-up launches, {settings['repeats']} repeat(s), "
                      f"order seed {settings['order_seed']}")
    supporting = [method, section_environment(run), section_correctness(run), section_controls(run),
                  section_noise(run), section_samples(run)]
    sections = [s for s in results + supporting if s is not None]
    return f"kernelkit report: run {run.name}", sections


def render_markdown(run_dir: Path, figure_dir: Path | None = None, report_dir: Path | None = None) -> str:
    return doc.render_markdown(*build(run_dir, figure_dir, report_dir))
