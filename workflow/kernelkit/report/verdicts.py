"""What the answers say of each hypothesis, computed from the run: its verdict per repeat and per
shape. Numbers only; the sentences that say them (with links to the records) are report.answers'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from kernelkit.report.run import Run


def hypothesis_verdicts(table: pd.DataFrame, hypothesis: dict[str, Any]) -> list[dict[str, Any]]:
    """Per repeat: does `faster` have the lower median than `slower` on every shape?"""
    fast, slow = hypothesis["faster"], hypothesis["slower"]
    rows = table[table["kernel"] == hypothesis["kernel"]]
    verdicts = []
    for repeat in sorted(rows["repeat"].unique()):
        medians = rows[rows["repeat"] == repeat].pivot(index="shape", columns="layout", values="median_us")
        # A shape the repeat timed only one of the two at (NaN: no comparison holds) counts against it.
        both = fast in medians.columns and slow in medians.columns
        verdicts.append({"repeat": int(repeat), "holds": not both or bool((medians[fast] < medians[slow]).all())})
    return verdicts


@dataclass
class HypothesisAnswer:
    hypothesis: dict[str, Any]
    verdicts: list[dict[str, Any]]
    shapes: list[str]
    holds_everywhere: list[str]          # shapes where it holds in every repeat
    ratios: dict[str, list[float]]       # shape -> slower / faster median, per repeat (above 1: it holds)
    pooled: dict[str, float]             # shape -> slower / faster pooled median

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
        shapes = list(ratios)  # in run.shapes' order
        pooled = {s: run.pooled_median(kernel, s, slow) / run.pooled_median(kernel, s, fast) for s in shapes}
        answers.append(HypothesisAnswer(hypothesis, hypothesis_verdicts(run.table, hypothesis), shapes,
                                        [s for s in shapes if all(r > 1 for r in ratios[s])], ratios, pooled))
    return answers
