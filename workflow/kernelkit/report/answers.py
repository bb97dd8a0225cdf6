"""The Answers block that opens the report: one sentence per experiment, with its numbers.

For each kernel of the run, one bullet answers its experiments: every hypothesis of the config
on it (does `faster` beat `slower`, where not, by how much), and every claim its claims file
copies from a seed (the published ratio or time beside this run's, with the verdict by size).
A kernel with neither gets its fastest hand-written layout against its fastest library. Each
number is this run's pooled median (or a ratio of two), its range over the repeats' medians, and
links to the records it was computed from (`Quantity`): a test recomputes every one from the
samples. The compact tables these sentences summarise follow the block.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from kernelkit import document as doc
from kernelkit import figures
from kernelkit import spec as specs
from kernelkit import units
from kernelkit.layout import TIMING, path as layout_path
from kernelkit.report import claims
from kernelkit.report.bounds import judge
from kernelkit.report.run import Run
from kernelkit.summary import natural_key


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


# --- Hypotheses ---------------------------------------------------------------------------------------

def hypothesis_verdicts(table: pd.DataFrame, hypothesis: dict[str, Any]) -> list[dict[str, Any]]:
    """Per repeat: does `faster` have the lower median than `slower` on every shape?"""
    rows = table[table["kernel"] == hypothesis["kernel"]]
    verdicts = []
    for repeat in sorted(rows["repeat"].unique()):
        counter = []
        medians = rows[rows["repeat"] == repeat].pivot(index="shape", columns="layout", values="median_us")
        shapes = sorted(medians.index, key=natural_key)
        for shape in shapes:
            if hypothesis["faster"] not in medians.columns or hypothesis["slower"] not in medians.columns:
                continue
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
        if len(self.holds_everywhere) == len(self.shapes):
            return "holds"
        return "fails" if self.fails_everywhere else "undecided"


def hypothesis_answers(run: Run) -> list[HypothesisAnswer]:
    answers = []
    for hypothesis in run.config.get("hypotheses", []):
        kernel, fast, slow = hypothesis["kernel"], hypothesis["faster"], hypothesis["slower"]
        ratios = {shape: claims.repeat_ratios(run, kernel, shape, slow, fast) for shape in run.shapes(kernel)}
        ratios = {shape: values for shape, values in ratios.items() if values}
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


# --- Numbers with their evidence ----------------------------------------------------------------------

@dataclass
class Quantity:
    """One number of the answer block, as printed, and what it was computed from: `folders` are
    configuration folders (timing/<kernel>/<shape>/<layout>/), the numerator's first.

    kind: median (pooled median of folders[0]), range (min-max of its repeats' medians), ratio
    (pooled median of folders[0] over folders[1]), ratio_range (the same per repeat number, min-max),
    change and change_range (ratio - 1), published (a number of the claims file `source`)."""

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
        self.parts.append(text)
        return self

    def _link(self, quantity: Quantity) -> Sentence:
        self.quantities.append(quantity)
        self.parts.append(doc.Link(quantity.text, quantity.href))
        return self

    def _timed(self, kernel: str, shape: str, *layouts: str) -> bool:
        """Whether every layout was timed at the shape; else "not timed" stands in for the number."""
        if all(self.run.records(kernel, shape, layout) for layout in layouts):
            return True
        self.parts.append("not timed")
        return False

    def median(self, kernel: str, shape: str, layout: str) -> Sentence:
        if not self._timed(kernel, shape, layout):
            return self
        folder = self.links.folder(kernel, shape, layout)
        value = self.run.pooled_median(kernel, shape, layout)
        return self._link(Quantity(units.short(value), "median", value, (folder,), self.links(folder)))

    def range(self, kernel: str, shape: str, layout: str) -> Sentence:
        if not self._timed(kernel, shape, layout):
            return self
        folder = self.links.folder(kernel, shape, layout)
        values = list(claims.repeat_medians(self.run, kernel, shape, layout).values())
        return self._link(Quantity(units.spread(values, " us"), "range", (min(values), max(values)), (folder,),
                                   self.links(folder)))

    def ratio(self, kernel: str, shape: str, top: str, bottom: str, change: bool = False) -> Sentence:
        if not self._timed(kernel, shape, top, bottom):
            return self
        folders = (self.links.folder(kernel, shape, top), self.links.folder(kernel, shape, bottom))
        value = self.run.pooled_median(kernel, shape, top) / self.run.pooled_median(kernel, shape, bottom)
        text = units.percent(value - 1, signed=True) if change else units.ratio(value)
        return self._link(Quantity(text, "change" if change else "ratio", value - 1 if change else value, folders,
                                   self.links(self.links.folder(kernel, shape))))

    def ratio_range(self, kernel: str, shape: str, top: str, bottom: str, change: bool = False) -> Sentence:
        values = claims.repeat_ratios(self.run, kernel, shape, top, bottom)
        if not values:
            self.parts.append("no repeat timed both")
            return self
        folders = (self.links.folder(kernel, shape, top), self.links.folder(kernel, shape, bottom))
        if change:
            values = [v - 1 for v in values]
            text = units.spread([100 * v for v in values], "%", digits=1)
        else:
            text = units.spread(values, "x")
        return self._link(Quantity(text, "change_range" if change else "ratio_range", (min(values), max(values)),
                                   folders, self.links(self.links.folder(kernel, shape))))

    def wins(self, answer: HypothesisAnswer, text: str) -> Sentence:
        """How many shapes the faster layout won in every repeat, of how many: the kernel's timing folder."""
        h = answer.hypothesis
        folder = self.links.folder(h["kernel"], "_").parent
        return self._link(Quantity(text, "wins", (len(answer.holds_everywhere), len(answer.shapes)), (folder,),
                                   self.links(folder), detail=(h["faster"], h["slower"])))

    def published(self, kernel: str, text: str, value: float) -> Sentence:
        source = claims.claims_file(kernel)
        return self._link(Quantity(text, "published", value, (), self.links(source), source))


# --- The sentences ------------------------------------------------------------------------------------

def how_made(run: Run, links: Links | None = None) -> list[doc.Inline]:
    """How the run was made, every fact read from its records: card, driver, clocks, kit commit and
    tree (linked to environment.json), repeats, the processes that timed the targets and their order
    (linked to the timing records)."""
    from kernelkit.diff_inputs import process_of

    links = links or Links(run, None)
    env = run.environment
    host, gpu = env.get("host", {}), env.get("gpu", {})
    cards = sorted({r.get("gpu_uuid") or f"index {r.get('gpu_index')}" for r in run.timings
                    if r.get("gpu_uuid") or r.get("gpu_index") is not None})
    uuid = gpu.get("uuid") if isinstance(gpu.get("uuid"), str) else None
    if len(cards) > 1:
        on = f"{len(cards)} {run.device} cards"
    else:
        on = f"one {run.device}" + (f" ({(cards or [uuid])[0]})" if (cards or [uuid])[0] else "")
    driver = gpu.get("driver_version")
    clocks = {True: "clocks locked", False: "clocks not locked"}.get(env.get("clocks_locked"), "clock locking unknown")
    commit = host.get("kit_commit")
    dirty = host.get("kit_tree_dirty")
    kit = (f"kit {str(commit)[:12]}" if isinstance(commit, str) and commit else "kit commit not recorded") + (
        " with uncommitted changes" if dirty is True else " (clean tree)" if dirty is False
        else ", whether its tree was clean not recorded")
    parts: list[doc.Inline] = [f"Run {run.name}, {str(env.get('captured_utc', ''))[:10]}: ", doc.Link(
        f"{on}" + (f", driver {driver}" if isinstance(driver, str) else "") + f", {clocks}; {kit}",
        links(run.dir / "environment.json"))]
    repeats = sorted({r["repeat"] for r in run.timings})
    text = f"; {len(repeats)} repeat{'s' if len(repeats) != 1 else ''}"
    named = [r for r in run.timings if process_of(r, ())[0] == "process"]
    timing = links(run.dir / "timing")
    if not named:
        parts += [text + "; ", doc.Link("the timing records", timing),
                  " do not name the process that took them (an older kit), so whether repeats shared a process is "
                  "unknown"]
    else:
        processes: dict[Any, list[dict[str, Any]]] = {}
        for record in named:
            processes.setdefault(process_of(record, ()), []).append(record)
        per = sorted(len(v) for v in processes.values())
        count = f"{per[0]}" if per[0] == per[-1] else f"{per[0]} to {per[-1]}"
        parts += [text + "; ", doc.Link(f"{len(named)} timing records from {len(processes)} "
                                        f"process{'es' if len(processes) != 1 else ''} ({count} each)", timing)]
        configurations: dict[tuple[str, str, str], list[Any]] = {}
        for key, records in processes.items():
            for record in records:
                configurations.setdefault((record["kernel"], record["shape"], record["layout"]), []).append(key)
        shared = sum(1 for keys in configurations.values() if len(set(keys)) < len(keys))
        text = ""
        if len(repeats) > 1:
            text += (f", every repeat of each of the {len(configurations)} configurations in a process of its own"
                     if not shared else f"; in {shared} of {len(configurations)} configurations repeats shared a process")
        if len(named) < len(run.timings):
            text += f"; {len(run.timings) - len(named)} records name no process"
        parts.append(text)
    ordered = [r for r in run.timings if isinstance(r.get("order"), dict)]
    seeds = sorted({str(r["order"].get("seed")) for r in ordered})
    text = ""
    if ordered and all("layouts" in r["order"] for r in ordered):
        text += f"; each process timed its layouts in a seeded shuffled order (seed {', '.join(seeds)})"
    elif ordered:
        text += f"; targets in a seeded shuffled order (seed {', '.join(seeds)})"
    parts.append(text + ". Ranges are the min-max of the repeats' medians; each number links to its records.")
    return parts


def plain(parts: list[doc.Inline]) -> str:
    """Parts of a sentence as plain text."""
    return "".join(str(part) for part in parts)


def _hypothesis_sentence(run: Run, answer: HypothesisAnswer, s: Sentence, covered: bool) -> None:
    """`covered`: a claim of the kernel states the same pair, so its sentence gives the margin."""
    h = answer.hypothesis
    kernel, fast, slow = h["kernel"], h["faster"], h["slower"]
    s.add(f"Hypothesis \"{h['statement']}\": {answer.verdict}")
    if not answer.shapes:
        s.add(f" ({fast} and {slow} were not both timed).")
        return
    n = len(answer.shapes)
    if answer.verdict == "holds":
        s.add(f", {fast} faster at ").wins(answer, f"all {n} shapes").add(" in every repeat")
        if not covered:
            margin = min(answer.shapes, key=lambda shape: answer.pooled[shape])
            s.add(f"; the smallest margin is {slow}/{fast} ").ratio(kernel, margin, slow, fast).add(" (")
            s.ratio_range(kernel, margin, slow, fast).add(f") at {margin}")
        s.add(".")
        return
    s.add(f": {fast} is faster at ").wins(answer, f"{len(answer.holds_everywhere)} of {n} shapes")
    losses = answer.fails_everywhere
    if losses:
        s.add(" and slower at ")
        for i, shape in enumerate(losses):
            s.add((", " if i < len(losses) - 1 else " and ") if i else "").add(f"{shape} (")
            s.ratio(kernel, shape, fast, slow).add(f"{' ' + slow + chr(39) + 's time' if i == 0 else ''}, ")
            s.ratio_range(kernel, shape, fast, slow).add(")")
    if answer.undecided:
        s.add(f"; its repeats disagree at {', '.join(answer.undecided)}")
    s.add(".")


def _published_list(kernel: str, group: list[claims.ClaimResult], pick: Any, s: Sentence, fmt: Any) -> None:
    """The published value of each claim of a group (a seed's first and second process), joined."""
    for i, member in enumerate(group):
        value = pick(member)
        s.add(" (its second process " if i == 1 else ", " if i else "").published(kernel, fmt(value), value)
    if len(group) > 1:
        s.add(")")


def _claim_sentence(run: Run, kernel: str, group: list[claims.ClaimResult], s: Sentence) -> None:
    """One claim (or several with the same layouts and shape: a seed's repeated measurement)."""
    result = group[0]
    change = claims.change_of(kernel)
    if not result.measured:
        s.add(f"The claim \"{result.statement}\" is {claims.verdict_text(result)} "
              f"({'; '.join(d for d in result.differences if 'measured on' not in d)}). ")
        return
    named = claims_named_shape(result)
    shapes = list(result.measured)
    pairs = [r for r in result.ratios if r.shape == shapes[0]]
    times = [t for t in result.times if t.shape == shapes[0]]
    lead = f"At the seed's {shapes[0]}, " if named else ""
    missing = [d for d in result.differences if d.startswith("layouts not timed")]
    if result.ratios and all(r.measured is None for r in result.ratios):
        s.add(f"The claim \"{result.statement}\" is not measurable here"
              f" ({missing[0] if missing else 'its layouts were not timed together'}). ")
        return
    if pairs and change and len(pairs) == 1 and (pairs[0].first, pairs[0].other) == (change[1], change[0]):
        before, after = change
        s.add(f"{lead}{before} -> {after}: the seed's ")
        _published_list(kernel, group, lambda m: m.published[after] / m.published[before] - 1, s,
                        lambda v: units.percent(v, signed=True))
        s.add("; here ")
        for i, shape in enumerate(shapes):
            verdict = next(r.verdict for r in result.ratios if r.shape == shape)
            s.add("; " if i else "").ratio(kernel, shape, after, before, change=True).add(" (")
            s.ratio_range(kernel, shape, after, before, change=True).add(")")
            s.add(f"{'' if named else ' at ' + shape}, {verdict}")
    elif pairs:
        names = " and ".join(f"{p.other}/{p.first}" for p in pairs)
        s.add(f"{lead}{names}: the seed's ")
        for j, p in enumerate(pairs):
            s.add(" and " if j else "")
            _published_list(kernel, group, lambda m, p=p: next(r.published for r in m.ratios
                                                                if (r.first, r.other) == (p.first, p.other)),
                            s, lambda v: f"{v:.2f}x")
        if len(pairs) == 1 and named:
            p = pairs[0]
            s.add(f" ({p.other} ").published(kernel, units.short(result.published[p.other]), result.published[p.other])
            s.add(f" vs {p.first} ").published(kernel, units.short(result.published[p.first]), result.published[p.first])
            s.add(")")
        s.add("; here ")
        for i, shape in enumerate(shapes):
            s.add("; " if i else "")
            for j, p in enumerate(r for r in result.ratios if r.shape == shape):
                s.add(" and " if j else "")
                if p.measured is None:
                    s.add("not timed")
                    continue
                s.ratio(kernel, shape, p.other, p.first).add(" (").ratio_range(kernel, shape, p.other, p.first).add(")")
            if len(pairs) == 1 and named:
                p = pairs[0]
                s.add(f" ({p.other} ").median(kernel, shape, p.other).add(", ").range(kernel, shape, p.other)
                s.add(f"; {p.first} ").median(kernel, shape, p.first).add(", ").range(kernel, shape, p.first).add(")")
            s.add(f"{'' if named else ' at ' + shape}, {claims.size_verdict(result, shape)}")
    elif times:
        t = times[0]
        s.add(f"{lead}{t.layout}: the seed's ").published(kernel, units.short(t.published_us), t.published_us)
        if t.scaled_us is not None:
            s.add(" (").published(kernel, units.short(t.scaled_us), t.scaled_us).add(f" scaled by the cards' {t.ceiling} ratio)")
        s.add("; here ")
        for i, shape in enumerate(shapes):
            t = next(x for x in result.times if x.shape == shape)
            s.add("; " if i else "").median(kernel, shape, t.layout).add(" (").range(kernel, shape, t.layout)
            s.add(f"){'' if named else ' at ' + shape}, {t.verdict}")
            order = result.reproduced.get(shape)
            if order is not None and len(result.order) > 1:
                s.add(f", and {result.order[0]} {'still' if order else 'no longer'} beats "
                      f"{', '.join(result.order[1:])}")
    s.add(". ")


def claims_named_shape(result: claims.ClaimResult) -> bool:
    """Whether the claim names its shape (then it is judged there only)."""
    return not any("names no shape" in d for d in result.differences)


def _best_sentence(run: Run, kernel: str, s: Sentence) -> None:
    libraries = run.libraries(kernel)
    for i, shape in enumerate(run.shapes(kernel)):
        medians = {layout: m for layout in run.layouts(kernel) if (m := run.pooled_median(kernel, shape, layout))}
        written = [l for l in medians if l not in libraries]
        library = [l for l in medians if l in libraries]
        s.add("; " if i else "")
        if written and library:
            best, lib = min(written, key=medians.get), min(library, key=medians.get)
            s.add(f"at {shape} the fastest hand-written layout, {best}, takes ").median(kernel, shape, best)
            s.add(" (").range(kernel, shape, best).add(f"), {lib} the fastest library ").median(kernel, shape, lib)
            s.add(": ").ratio(kernel, shape, best, lib).add(" (").ratio_range(kernel, shape, best, lib).add(")")
        else:
            best = min(medians, key=medians.get)
            s.add(f"at {shape} the fastest layout, {best}, takes ").median(kernel, shape, best).add(" (")
            s.range(kernel, shape, best).add(")")
    s.add(". ")


def _grouped(results: list[claims.ClaimResult]) -> list[list[claims.ClaimResult]]:
    """Claims with the same layouts, shape and published order, kept together (a seed's second
    measurement of the same thing): one clause says both."""
    groups: dict[Any, list[claims.ClaimResult]] = {}
    for result in results:
        key = (tuple(result.order), tuple(sorted(result.published)), tuple(result.measured), result.gpu)
        groups.setdefault(key, []).append(result)
    return list(groups.values())


@dataclass
class AnswerBlock:
    items: list[list[doc.Inline]]
    quantities: list[Quantity]


def answer_block(run: Run, links: Links) -> AnswerBlock:
    """One item per kernel of the run, in the config's order: its hypotheses, then its claims (or,
    with neither, its fastest layouts)."""
    hypotheses = hypothesis_answers(run)
    results = claims.all_claims(run)
    # The hypotheses' kernels in the config's order of hypotheses (config.json sorts its kernels), then the rest.
    order = list(dict.fromkeys(h["kernel"] for h in run.config.get("hypotheses", []) if h["kernel"] in run.kernels))
    items, quantities = [], []
    for kernel in order + [k for k in run.kernels if k not in order]:
        mine = [r for r in results if r.kernel == kernel]
        sources = sorted({r.source.split("_")[0] for r in mine if r.source})
        cards = sorted({r.gpu for r in mine if r.gpu})
        s = Sentence(run, links)
        s.parts.append(doc.Strong(kernel))
        s.add((f" (seed {', '.join(sources)}, {', '.join(cards)})" if sources and cards else "") + ": ")
        lead = len(s.parts)
        pairs = {(r.first, r.other) for r in (x for m in mine for x in m.ratios)}
        for answer in (a for a in hypotheses if a.hypothesis["kernel"] == kernel):
            covered = (answer.hypothesis["faster"], answer.hypothesis["slower"]) in pairs
            _hypothesis_sentence(run, answer, s, covered)
            s.add(" ")
        for group in _grouped(mine):
            _claim_sentence(run, kernel, group, s)
        if len(s.parts) == lead:
            _best_sentence(run, kernel, s)
        mixed = run.mixed_card_shapes(kernel)
        if mixed:
            s.add(f"Timings of {', '.join(mixed)} come from several cards. ")
        while s.parts and isinstance(s.parts[-1], str) and s.parts[-1].endswith(" "):
            s.parts[-1] = s.parts[-1].rstrip()
            if not s.parts[-1]:
                s.parts.pop()
            else:
                break
        items.append(s.parts)
        quantities += s.quantities
    return AnswerBlock(items, quantities)


# --- The compact tables -------------------------------------------------------------------------------

def hypothesis_rows(run: Run, answers: list[HypothesisAnswer]) -> list[list[str]]:
    rows = []
    for answer in answers:
        h = answer.hypothesis
        repeats = len(answer.verdicts)
        losing = [s for s in answer.shapes if s not in answer.holds_everywhere]
        rows.append([f"\"{h['statement']}\" ({h['kernel']}: {h['faster']} faster than {h['slower']})",
                     ", ".join(f"rep{v['repeat']} {'holds' if v['holds'] else 'fails'}" for v in answer.verdicts),
                     f"holds on {len(answer.holds_everywhere)} of {len(answer.shapes)} shapes in "
                     + ("both repeats" if repeats == 2 else f"all {repeats} repeats" if repeats > 2 else "its repeat"),
                     ("; ".join(f"{s}: {h['faster']} takes {1 / answer.pooled[s]:.2f}x the time of {h['slower']} "
                                f"({units.spread([1 / r for r in answer.ratios[s]], 'x')})" for s in losing) or "none")
                     + _across_cards(run, h["kernel"])])
    return rows


def _across_cards(run: Run, kernel: str) -> str:
    mixed = run.mixed_card_shapes(kernel)
    return f"; compares cards on {', '.join(mixed)} (timings from several cards)" if mixed else ""


def hypothesis_figure(answers: list[HypothesisAnswer]) -> doc.Figure:
    svg = figures.ratio_figure([(f"{a.hypothesis['kernel']}: {a.hypothesis['faster']} vs {a.hypothesis['slower']}",
                                 a.hypothesis["faster"], a.hypothesis["slower"],
                                 [(shape, a.ratios[shape]) for shape in a.shapes]) for a in answers if a.shapes])
    return doc.Figure(svg, None, "Each hypothesis: the slower layout's time over the faster one's per shape, one "
                                 "point per repeat; above the dashed line at 1 the hypothesis holds")


def operation_rows(run: Run) -> list[list[str]]:
    """Per kernel and shape with a declared change: before -> after, the change, its range over
    repeats, and the seed's published change beside it."""
    rows = []
    results = claims.all_claims(run)
    for kernel in run.kernels:
        change = claims.change_of(kernel)
        if not change or not all(layout in run.layouts(kernel) for layout in change):
            continue
        before, after = change
        stated = next((r for r in results if r.kernel == kernel and set(r.published) == {before, after}), None)
        for shape in run.shapes(kernel):
            published = stated if stated is not None and shape in stated.measured else None
            b, a = run.pooled_median(kernel, shape, before), run.pooled_median(kernel, shape, after)
            if b is None or a is None:
                continue
            per = [v - 1 for v in claims.repeat_ratios(run, kernel, shape, after, before)]
            seed = (f"{units.percent(published.published[after] / published.published[before] - 1, signed=True)} "
                    f"({published.gpu})" if published else "-")
            judged = next((r.verdict for r in (published.ratios if published else []) if r.shape == shape), "")
            rows.append([kernel, shape, f"{before} {units.duration(b)} -> {after} {units.duration(a)}",
                         units.percent(a / b - 1, signed=True), units.spread([100 * v for v in per], "%", digits=1),
                         seed, judged or "-"])
    return rows


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


def section_answers(run: Run, links: Links) -> doc.Section:
    block = answer_block(run, links)
    boxed: list[doc.Block] = []
    warning = foreign_work_warning(run)
    if warning:
        boxed.append(doc.Paragraph(warning))
    boxed.append(doc.Text(how_made(run, links)))
    boxed.append(doc.Bullets(block.items))
    tables: list[doc.Block] = []
    answers = hypothesis_answers(run)
    if answers:
        tables.append(doc.Table(["Hypothesis", "Verdict per repeat", "Shapes", "Where it fails (range over repeats)"],
                                hypothesis_rows(run, answers)))
        if any(a.shapes for a in answers):
            tables.append(hypothesis_figure(answers))
    else:
        tables.append(doc.Paragraph("The config states no hypotheses."))
    rows = operation_rows(run)
    if rows:
        tables.append(doc.Details(f"The change each claims file declares (before -> after) at every shape ({len(rows)} "
                                  "rows), beside the seed's where the seed's claim covers the shape", [
            doc.Table(["Kernel", "Shape", "Before -> after", "Change", "Range over repeats", "Published change",
                       "Verdict by size"], rows, numeric=(3, 4))]))
    tables += claims.section_claims(run)
    difference = claims.card_difference(run)
    if difference:
        header, card_rows = claims.card_rows(run)
        tables.append(doc.Paragraph(difference))
        tables.append(doc.Table(header, card_rows))
    return doc.Section("Answers", boxed + tables, box=len(boxed))
