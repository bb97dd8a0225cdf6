"""The Answers block that opens the report: each hypothesis's verdict and each operation's change,
computed here as data (`hypothesis_answers`, `operation_answers`) and rendered by `section_answers`."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from kernelkit import document as doc
from kernelkit import spec as specs
from kernelkit.report import claims, explain, units
from kernelkit.report.limits import judge
from kernelkit.report.run import Run
from kernelkit.summary import natural_key


def hypothesis_verdicts(table: pd.DataFrame, hypothesis: dict[str, Any]) -> list[dict[str, Any]]:
    """Per repeat: does `faster` have the lower median than `slower` on every shape?"""
    rows = table[table["kernel"] == hypothesis["kernel"]]
    verdicts = []
    for repeat in sorted(rows["repeat"].unique()):
        counter = []
        medians = rows[rows["repeat"] == repeat].pivot(index="shape", columns="layout", values="median_us")
        shapes = sorted(medians.index, key=natural_key)
        for shape in shapes:
            fast, slow = medians.loc[shape, hypothesis["faster"]], medians.loc[shape, hypothesis["slower"]]
            if not fast < slow:
                counter.append(f"{shape} ({hypothesis['faster']} {fast:.3f} us vs {hypothesis['slower']} {slow:.3f} us)")
        verdicts.append({"repeat": int(repeat), "holds": not counter, "shapes": len(shapes), "counter_examples": counter})
    return verdicts


@dataclass
class HypothesisAnswer:
    hypothesis: dict[str, Any]
    verdicts: list[dict[str, Any]]
    shapes: list[str]
    holds_everywhere: list[str]          # shapes where it holds in every repeat
    ratios: dict[str, list[float]]       # shape -> slower / faster median, per repeat (above 1: it holds)


def hypothesis_answers(run: Run) -> list[HypothesisAnswer]:
    answers = []
    for hypothesis in run.config.get("hypotheses", []):
        rows = run.table[run.table["kernel"] == hypothesis["kernel"]]
        ratios: dict[str, list[float]] = {}
        for (shape, _repeat), group in rows.groupby(["shape", "repeat"]):
            medians = dict(zip(group["layout"], group["median_us"]))
            if hypothesis["faster"] in medians and hypothesis["slower"] in medians:
                ratios.setdefault(shape, []).append(medians[hypothesis["slower"]] / medians[hypothesis["faster"]])
        shapes = sorted(ratios, key=natural_key)
        answers.append(HypothesisAnswer(hypothesis, hypothesis_verdicts(run.table, hypothesis), shapes,
                                        [s for s in shapes if all(r > 1 for r in ratios[s])], ratios))
    return answers


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
        change = claims.change_of(kernel)
        libraries = run.libraries(kernel)
        for shape in run.shapes(kernel):
            medians = {layout: run.pooled_median(kernel, shape, layout) for layout in run.layouts(kernel)}
            medians = {k: v for k, v in medians.items() if v is not None}
            written = {k: v for k, v in medians.items() if k not in libraries}
            library = {k: v for k, v in medians.items() if k in libraries}
            pick = lambda d: min(d.items(), key=lambda i: i[1]) if d else None  # noqa: E731
            before = (change[0], medians[change[0]]) if change and change[0] in medians else None
            after = (change[1], medians[change[1]]) if change and change[1] in medians else None
            best = pick(written)
            fractions = {step[0]: judge(run, kernel, shape, step[0]).fraction
                         for step in (before, after, best) if step is not None}
            answers.append(OperationAnswer(kernel, shape, before, after, best, pick(library), library, fractions))
    return answers


def ladder_text(answer: OperationAnswer) -> str:
    """before -> after -> best, each with its time and fraction of its ceiling; a step the run lacks is left out."""
    steps = [answer.before, answer.after]
    if answer.best_written and answer.best_written[0] not in {s[0] for s in steps if s}:
        steps.append(answer.best_written)
    parts = []
    for step in steps:
        if step is None:
            continue
        fraction = answer.fractions.get(step[0])
        parts.append(f"{specs.display_name(step[0])} {units.duration(step[1])}"
                     + (f" ({fraction:.2f})" if fraction is not None else " (n/a)"))
    return " -> ".join(parts) or "n/a"


def ratio_chart(answer: HypothesisAnswer) -> str:
    """A small SVG: per shape, slower / faster median of each repeat on a log axis, a line at 1.0."""
    width, height, left, bottom, top, right = 390, 140, 36, 50, 22, 30
    values = [r for rs in answer.ratios.values() for r in rs] + [1.0]
    low, high = math.log10(min(values) / 1.15), math.log10(max(values) * 1.15)
    plot_h = height - bottom - top
    y = lambda v: top + plot_h * (high - math.log10(v)) / (high - low)  # noqa: E731
    step = (width - left - right) / max(1, len(answer.shapes))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           'font-family="sans-serif" font-size="10" role="img">',
           f'<line x1="{left}" x2="{width - right}" y1="{y(1.0):.1f}" y2="{y(1.0):.1f}" stroke="#555" stroke-dasharray="4 3"/>',
           f'<text x="{left - 4}" y="{y(1.0) + 3:.1f}" text-anchor="end">1.0</text>']
    for tick in (0.5, 2.0, 4.0, 0.25):
        if low < math.log10(tick) < high:
            out.append(f'<text x="{left - 4}" y="{y(tick) + 3:.1f}" text-anchor="end" fill="#777">{tick:g}</text>')
    for i, shape in enumerate(answer.shapes):
        x = left + step * (i + 0.5)
        for j, ratio in enumerate(answer.ratios[shape]):
            colour = "#2a7" if ratio > 1 else "#c33"
            out.append(f'<circle cx="{x - 4 + 8 * j:.1f}" cy="{y(ratio):.1f}" r="3.5" fill="{colour}"/>')
        out.append(f'<text transform="translate({x - 6:.1f},{height - bottom + 12}) rotate(40)" font-size="8">'
                   f'{html.escape(shape)}</text>')
    h = answer.hypothesis
    out.append(f'<text x="{left}" y="12" fill="#333">{html.escape(h["slower"])} time / '
               f'{html.escape(h["faster"])} time per repeat (above 1: {html.escape(h["faster"])} faster)</text>')
    out.append("</svg>")
    return "".join(out)


def _counter_examples(answer: HypothesisAnswer) -> str:
    h = answer.hypothesis
    losing = [s for s in answer.shapes if s not in answer.holds_everywhere]
    return "; ".join(f"{s} ({h['faster']} takes " + ", ".join(f"{1 / r:.2f}x" for r in answer.ratios[s])
                     + f" the time of {h['slower']})" for s in losing) or "none"


def operation_rows(run: Run) -> list[list[str]]:
    rows = []
    for a in operation_answers(run):
        change = (f"{a.before[0]} {units.duration(a.before[1])} -> {a.after[0]} {units.duration(a.after[1])}"
                  if a.before and a.after else "no change declared")
        percent = units.percent(a.after[1] / a.before[1] - 1, signed=True) if a.before and a.after else ""
        versus = ("; ".join(f"{a.best_written[1] / value:.2f}x {name}" for name, value in sorted(a.libraries.items()))
                  if a.best_written and a.libraries else "no library timed")
        rows.append([a.kernel, a.shape, change, percent, ladder_text(a),
                     f"{specs.display_name(a.best_written[0])} {units.duration(a.best_written[1])}"
                     if a.best_written else "n/a",
                     f"{a.best_library[0]} {units.duration(a.best_library[1])}" if a.best_library else "n/a",
                     f"{a.best_written[1] / a.best_library[1]:.2f}x" if a.best_written and a.best_library else "n/a",
                     versus])
    return rows


def hypothesis_rows(run: Run, answers: list[HypothesisAnswer]) -> list[list[str]]:
    rows = []
    for answer in answers:
        h = answer.hypothesis
        rows.append([f"\"{h['statement']}\" ({h['kernel']}: {h['faster']} faster than {h['slower']})",
                     ", ".join(f"rep{v['repeat']} {'holds' if v['holds'] else 'fails'}" for v in answer.verdicts),
                     f"holds on {len(answer.holds_everywhere)} of {len(answer.shapes)} shapes in "
                     + ("both repeats" if len(answer.verdicts) == 2 else f"all {len(answer.verdicts)} repeats"),
                     _counter_examples(answer) + _across_cards(run, h["kernel"])])
    return rows


def _across_cards(run: Run, kernel: str) -> str:
    mixed = run.mixed_card_shapes(kernel)
    return f"; compares cards on {', '.join(mixed)} (timings from several cards)" if mixed else ""


def foreign_work_warning(run: Run) -> str | None:
    """The first screen's warning where another process computed on the GPU beside timed targets:
    the answers below are computed from their samples too."""
    from kernelkit.report.quality import foreign_targets, looked_after

    timed = run.timings + run.cold
    touched = foreign_targets(timed)
    if not touched:
        return None
    when = "during or right after" if looked_after(timed) else "during"
    return (f"Another process computed on the GPU {when} {len(touched)} of {len(timed)} timed targets, whose "
            "samples are tagged disturbed (Caveats names them): the answers below include their numbers.")


def section_answers(run: Run) -> doc.Section:
    answers = hypothesis_answers(run)
    blocks: list[doc.Block] = []
    warning = foreign_work_warning(run)
    if warning:
        blocks.append(doc.Paragraph(warning))
    if answers:
        blocks.append(doc.Table(["Hypothesis", "Verdict per repeat", "Shapes", "Counter-examples"],
                                hypothesis_rows(run, answers)))
        blocks += [doc.Figure(ratio_chart(a), None, f"{a.hypothesis['kernel']}: {a.hypothesis['slower']} time over "
                                                     f"{a.hypothesis['faster']} time per shape, one point per repeat; "
                                                     "line at 1.0") for a in answers]
    else:
        blocks.append(doc.Paragraph("The config states no hypotheses."))
    results = claims.all_claims(run)
    if results:
        blocks.append(doc.Paragraph("Published claims (numbers side by side in the Published claims section):"))
        blocks.append(doc.Table(["Kernel", "Claim", "This run", "Differs from the claim"], [
            [r.kernel, r.statement, claims.verdict_text(r), "; ".join(r.differences) or "same GPU and shape"]
            for r in results]))
    blocks.append(doc.Paragraph(
        "Per operation and shape (pooled medians of kernel time): the change its claims file declares, before -> "
        "after; the ladder before -> after -> best (the fastest hand-written layout or sweep point, when it is "
        "neither), each with its fraction of the ceiling that bounds it (the run's DRAM or L2 copy, or GEMM, "
        "as the per-target table judges it); and the best hand-written layout against the best library layout "
        "(below 1: the hand-written one is faster) and against each library."))
    blocks.append(doc.Table(["Kernel", "Shape", "Before -> after", "Change", "Ladder (fraction of ceiling)",
                             "Best hand-written", "Best library", "Hand-written / library", "Against each library"],
                            operation_rows(run), numeric=(3, 7)))
    reasons = [text for kernel in run.kernels for text in explain.explanations(run, kernel)]
    if reasons:
        blocks.append(doc.Paragraph("Why some results differ, from the data:"))
        blocks.append(doc.Bullets(reasons))
    return doc.Section("Answers", blocks)
