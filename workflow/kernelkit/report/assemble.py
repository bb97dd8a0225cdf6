"""The order of the report's sections: answers first, the results, then the all-pass tables."""

from __future__ import annotations

from pathlib import Path

from kernelkit import KitError
from kernelkit import document as doc
from kernelkit.report.answers import hypothesis_verdicts, section_answers
from kernelkit.report.cautions import caveats, section_caveats
from kernelkit.report.checks import section_controls, section_correctness, symptom_kind
from kernelkit.report.claims import section_claims
from kernelkit.report.limits import judge, section_ceilings, target_roofline
from kernelkit.report.quality import (noise_rows, section_clocks, section_cold, section_noise, section_placements,
                                      section_tools)
from kernelkit.report.run import Run
from kernelkit.report.setup import section_environment, section_method
from kernelkit.report.spans import section_two_views, two_view_rows
from kernelkit.report.sweeps import section_sweeps
from kernelkit.report.targets import (faster_layouts, library_rows, resource_rows, section_samples, section_targets,
                                      target_rows)

__all__ = ["Run", "build", "render_markdown", "caveats", "hypothesis_verdicts", "judge",
           "target_roofline", "noise_rows", "faster_layouts", "library_rows", "resource_rows", "target_rows",
           "two_view_rows", "symptom_kind"]


def _figure(figure_dir: Path | None, name: str, caption: str) -> doc.Figure | None:
    path = figure_dir / f"{name}.svg" if figure_dir else None
    if path is None or not path.exists():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise KitError(f"figure {doc.clean(path)} cannot be read ({type(error).__name__})") from None
    return doc.Figure(doc.safe_svg(text, str(path)), f"{figure_dir.name}/{name}.svg", caption)


def build(run_dir: Path, figure_dir: Path | None = None) -> tuple[str, list[doc.Section]]:
    """The report's title and sections; figures are read from `figure_dir/<kernel>.svg` when present."""
    run = Run(run_dir)
    figures = {k: f for k in run.kernels
               if (f := _figure(figure_dir, k, f"{k}: every sample per shape, layout and repeat")) is not None}
    clock_figure = _figure(figure_dir, "clocks", "SM clock of every NVML reading during the timed samples")
    claims = section_claims(run)
    results = [section_answers(run), section_sweeps(run), *section_targets(run, figures), *([claims] if claims else []),
               section_two_views(run), section_ceilings(run), section_cold(run), section_placements(run),
               section_clocks(run, clock_figure), *section_tools(run), section_caveats(run)]
    supporting = [doc.Section("About this report", [doc.Paragraph(
        f"Generated from results/{run.name}/ only. Every timing is recomputed from the raw samples in "
        "timing/<kernel>/<shape>/<layout>/rep<n>.json.")]),
        section_method(run), section_environment(run), section_correctness(run), section_controls(run),
        section_noise(run), section_samples(run)]
    sections = [s for s in results + supporting if s is not None]
    return f"kernelkit report: run {run.name}", sections


def render_markdown(run_dir: Path, figure_dir: Path | None = None) -> str:
    return doc.render_markdown(*build(run_dir, figure_dir))
