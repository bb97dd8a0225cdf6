"""Numbers with their evidence: each number the answers say (a median, a range, a ratio, a
published value) with a link to the records or the claims file it came from, so that a reader
follows it and a test recomputes it from the samples. report.answers builds its sentences of them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelkit import document as doc
from kernelkit import units
from kernelkit.layout import TIMING, path as layout_path
from kernelkit.report import claims
from kernelkit.report.run import Run
from kernelkit.report.verdicts import HypothesisAnswer


class Links:
    """Relative links from the folder the report is written to, to the run's records and claims files."""

    def __init__(self, run: Run, report_dir: Path | None) -> None:
        self.run = run
        self.base = Path(report_dir) if report_dir is not None else Path.cwd()

    def __call__(self, target: Path) -> str:
        return os.path.relpath(os.path.abspath(target), os.path.abspath(self.base))

    def folder(self, kernel: str, shape: str, layout: str | None = None) -> Path:
        """timing/<kernel>/<shape>[/<layout>] of the run: where a configuration's repeats lie."""
        record = Path(layout_path(TIMING, run="r", view="timing", kernel=kernel, shape=shape,
                                  layout=layout or "_", n=1)).relative_to("results/r")
        return self.run.dir / (record.parent if layout else record.parent.parent)


@dataclass
class Quantity:
    """One number of the answer block, as printed, and what it was computed from: `folders` are
    configuration folders (timing/<kernel>/<shape>/<layout>/), the numerator's first.

    kind: median (pooled median of folders[0]), range (min-max of its repeats' medians), ratio
    (pooled median of folders[0] over folders[1]), ratio_range (the same per repeat number, min-max),
    change and change_range (ratio - 1), wins, published (a number of the claims file `source`)."""

    text: str
    kind: str
    value: Any
    folders: tuple[Path, ...]
    href: str
    source: Path | None = None
    detail: Any = None


class Sentence:
    """Parts of one answer (text and links), and the quantities its links carry."""

    def __init__(self, run: Run, links: Links) -> None:
        self.run, self.links = run, links
        self.parts: list[doc.Inline] = []
        self.quantities: list[Quantity] = []

    def add(self, text: str) -> Sentence:
        if text:
            self.parts.append(text)
        return self

    def _link(self, quantity: Quantity) -> Sentence:
        self.quantities.append(quantity)
        self.parts.append(doc.Link(quantity.text, quantity.href))
        return self

    def _number(self, text: str, kind: str, value: Any, kernel: str, shape: str, *layouts: str) -> Sentence:
        """A number of configuration folders: linked to the layout's folder, or to the shape's for a ratio."""
        folders = tuple(self.links.folder(kernel, shape, layout) for layout in layouts)
        return self._link(Quantity(text, kind, value, folders,
                                   self.links(folders[0] if len(layouts) == 1 else self.links.folder(kernel, shape))))

    def _timed(self, kernel: str, shape: str, *layouts: str) -> bool:
        """Whether every layout was timed at the shape; else "not timed" stands in for the number."""
        if all(self.run.records(kernel, shape, layout) for layout in layouts):
            return True
        self.parts.append("not timed")
        return False

    def median(self, kernel: str, shape: str, layout: str) -> Sentence:
        if self._timed(kernel, shape, layout):
            value = self.run.pooled_median(kernel, shape, layout)
            self._number(units.short(value), "median", value, kernel, shape, layout)
        return self

    def range(self, kernel: str, shape: str, layout: str) -> Sentence:
        if self._timed(kernel, shape, layout):
            values = list(self.run.repeat_medians(kernel, shape, layout).values())
            self._number(units.spread(values, " us"), "range", (min(values), max(values)), kernel, shape, layout)
        return self

    def ratio(self, kernel: str, shape: str, top: str, bottom: str, change: bool = False) -> Sentence:
        if self._timed(kernel, shape, top, bottom):
            value = self.run.pooled_median(kernel, shape, top) / self.run.pooled_median(kernel, shape, bottom)
            shown = (units.percent(value - 1, signed=True), "change", value - 1) if change else (
                units.ratio(value), "ratio", value)
            self._number(*shown, kernel, shape, top, bottom)
        return self

    def ratio_range(self, kernel: str, shape: str, top: str, bottom: str, change: bool = False) -> Sentence:
        if not (values := self.run.repeat_ratios(kernel, shape, top, bottom)):
            return self.add("no repeat timed both")
        if change:
            values = [v - 1 for v in values]
        text = units.spread([100 * v for v in values], "%", digits=1) if change else units.spread(values, "x")
        return self._number(text, "change_range" if change else "ratio_range", (min(values), max(values)),
                            kernel, shape, top, bottom)

    def median_range(self, kernel: str, shape: str, layout: str) -> Sentence:
        """The pooled median, then its range over the repeats in parentheses."""
        return self.median(kernel, shape, layout).add(" (").range(kernel, shape, layout).add(")")

    def ratio_and_range(self, kernel: str, shape: str, top: str, bottom: str, change: bool = False) -> Sentence:
        self.ratio(kernel, shape, top, bottom, change).add(" (")
        return self.ratio_range(kernel, shape, top, bottom, change).add(")")

    def wins(self, answer: HypothesisAnswer, text: str) -> Sentence:
        """How many shapes the faster layout won in every repeat, of how many: the kernel's timing folder."""
        h = answer.hypothesis
        folder = self.links.folder(h["kernel"], "_").parent
        return self._link(Quantity(text, "wins", (len(answer.holds_everywhere), len(answer.shapes)), (folder,),
                                   self.links(folder), detail=(h["faster"], h["slower"])))

    def published(self, kernel: str, text: str, value: float) -> Sentence:
        source = claims.claims_file(kernel)
        return self._link(Quantity(text, "published", value, (), self.links(source), source))
