"""The order of the report's sections: the answers first, then the limits and the results, the
evidence after them, and the all-pass tables collapsed (each behind a one-line summary its
section computes from the records)."""

from __future__ import annotations

from pathlib import Path

from kernelkit import KitError
from kernelkit import document as doc
from kernelkit.report.answers import Links, section_answers
from kernelkit.report.bounds import judge
from kernelkit.report.cautions import MAX_CAVEATS, caveats, condensed_caveats, section_caveats
from kernelkit.report.checks import section_controls, section_correctness
from kernelkit.report.limits import section_limits
from kernelkit.report.quality import (noise_rows, section_clocks, section_cold, section_noise, section_placements,
                                      section_tools)
from kernelkit.report.run import Run
from kernelkit.report.setup import section_environment, section_method
from kernelkit.report.spans import section_two_views
from kernelkit.report.sweeps import section_sweeps
from kernelkit.report.targets import library_rows, resource_rows, section_samples, section_targets, target_rows
from kernelkit.report.verdicts import hypothesis_verdicts

__all__ = ["Run", "build", "render_markdown", "caveats", "condensed_caveats", "MAX_CAVEATS", "hypothesis_verdicts",
           "judge", "noise_rows", "library_rows", "resource_rows", "target_rows"]


def _figure(figure_dir: Path | None, name: str, caption: str) -> doc.Figure | None:
    if figure_dir is None or not (path := figure_dir / f"{name}.svg").exists():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise KitError(f"figure {doc.clean(path)} cannot be read ({type(error).__name__})") from None
    return doc.Figure(doc.safe_svg(text, str(path)), f"{figure_dir.name}/{name}.svg", caption)


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
    sections = [
        section_answers(run, links), section_limits(run), section_sweeps(run), section_targets(run, figures),
        section_two_views(run), section_cold(run), section_placements(run), section_clocks(run, clock_figure),
        *section_tools(run), section_caveats(run),
        section_method(run), section_environment(run), section_correctness(run), section_controls(run),
        section_noise(run), section_samples(run)]
    return f"kernelkit report: run {run.name}", [s for s in sections if s is not None]


def render_markdown(run_dir: Path) -> str:
    return doc.render_markdown(*build(run_dir))
