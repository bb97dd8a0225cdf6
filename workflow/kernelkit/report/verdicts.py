"""What the answers say, computed from the run: each hypothesis's verdict per repeat and per shape,
and each operation's declared change and ladder to its best layout. Numbers only; the sentences
that say them (with links to the records) are report.answers'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from kernelkit import spec as specs
from kernelkit import units
from kernelkit.report import claims
from kernelkit.report.bounds import judge
from kernelkit.report.run import Run
from kernelkit.summary import natural_key


# --- Hypotheses ---------------------------------------------------------------------------------------

def hypothesis_verdicts(table: pd.DataFrame, hypothesis: dict[str, Any]) -> list[dict[str, Any]]:
    """Per repeat: does `faster` have the lower median than `slower` on every shape?"""
    fast, slow = hypothesis["faster"], hypothesis["slower"]
    rows = table[table["kernel"] == hypothesis["kernel"]]
    verdicts = []
    for repeat in sorted(rows["repeat"].unique()):
        medians = rows[rows["repeat"] == repeat].pivot(index="shape", columns="layout", values="median_us")
        shapes = sorted(medians.index, key=natural_key)
        both = fast in medians.columns and slow in medians.columns
        counter = [f"{shape} ({fast} {medians.loc[shape, fast]:.3f} us vs {slow} {medians.loc[shape, slow]:.3f} us)"
                   for shape in shapes if both and not medians.loc[shape, fast] < medians.loc[shape, slow]]
        verdicts.append({"repeat": int(repeat), "holds": not counter, "shapes": len(shapes), "counter_examples": counter})
    return verdicts


@dataclass
class HypothesisAnswer:
    hypothesis: dict[str, Any]
    verdicts: list[dict[str, Any]]
    shapes: list[str]
    holds_everywhere: list[str]          # shapes where it holds in every repeat
    ratios: dict[str, list[float]]       # shape -> slower / faster median, per repeat (above 1: it holds)
    pooled: dict[str, float] = field(default_factory=dict)   # shape -> slower / faster pooled median

    @property
    def fails_everywhere(self) -> list[str]:
        return [s for s in self.shapes if all(r < 1 for r in self.ratios[s])]

    @property
    def undecided(self) -> list[str]:
        return [s for s in self.shapes if s not in self.holds_everywhere and s not in self.fails_everywhere]

    @property
    def verdict(self) -> str:
        if not self.shapes:
            return "not measurable here"
        return ("holds" if len(self.holds_everywhere) == len(self.shapes)
                else "fails" if self.fails_everywhere else "undecided")


def hypothesis_answers(run: Run) -> list[HypothesisAnswer]:
    answers = []
    for hypothesis in run.config.get("hypotheses", []):
        kernel, fast, slow = hypothesis["kernel"], hypothesis["faster"], hypothesis["slower"]
        ratios = {s: values for s in run.shapes(kernel) if (values := run.repeat_ratios(kernel, s, slow, fast))}
        shapes = sorted(ratios, key=natural_key)
        pooled = {s: run.pooled_median(kernel, s, slow) / run.pooled_median(kernel, s, fast) for s in shapes}
        answers.append(HypothesisAnswer(hypothesis, hypothesis_verdicts(run.table, hypothesis), shapes,
                                        [s for s in shapes if all(r > 1 for r in ratios[s])], ratios, pooled))
    return answers


# --- Operations: the declared change and the ladder to the best layout ---------------------------------

@dataclass
class OperationAnswer:
    kernel: str
    shape: str
    before: tuple[str, float] | None
    after: tuple[str, float] | None
    best_written: tuple[str, float] | None
    best_library: tuple[str, float] | None
    libraries: dict[str, float]
    # layout -> fraction of the ceiling that bounds it (None: no ceiling applies), for before, after and
    # best_written: the ladder before -> after (the seed's change) -> best (any hand-written layout or sweep point)
    fractions: dict[str, float | None] = field(default_factory=dict)


def operation_answers(run: Run) -> list[OperationAnswer]:
    answers = []
    for kernel in run.kernels:
        change = claims.change_of(kernel) or ()
        for shape in run.shapes(kernel):
            medians = run.medians(kernel, shape)
            before, after = [(layout, medians[layout]) if layout in medians else None for layout in change] or [None] * 2
            best, library = run.fastest(kernel, shape)
            fractions = {step[0]: judge(run, kernel, shape, step[0]).fraction for step in (before, after, best) if step}
            answers.append(OperationAnswer(kernel, shape, before, after, best, library, {
                layout: m for layout, m in medians.items() if layout in run.libraries(kernel)}, fractions))
    return answers


def ladder_text(answer: OperationAnswer) -> str:
    """before -> after -> best, each with its time and fraction of its ceiling; a step the run lacks is left out."""
    steps = [step for step in (answer.before, answer.after) if step]
    if answer.best_written and answer.best_written[0] not in {step[0] for step in steps}:
        steps.append(answer.best_written)
    return " -> ".join(f"{specs.display_name(layout)} {units.duration(us)} "
                       + (f"({fraction:.2f})" if (fraction := answer.fractions.get(layout)) is not None else "(n/a)")
                       for layout, us in steps) or "n/a"
