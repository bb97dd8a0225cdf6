"""The Answers block that opens the report: per kernel one bullet on its hypotheses and the claims
its claims file copies from a seed (else its fastest layouts), each number linked to its records
(report.evidence) so that a test recomputes it from the samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kernelkit import document as doc
from kernelkit import figures
from kernelkit import units
from kernelkit.diff_inputs import by_process, shared_processes
from kernelkit.report import claims
from kernelkit.report.evidence import Links, Quantity, Sentence
from kernelkit.report.quality import foreign_targets, looked_after
from kernelkit.report.run import Run
from kernelkit.report.verdicts import HypothesisAnswer, hypothesis_answers


def how_made(run: Run, links: Links | None = None) -> list[doc.Inline]:
    """How the run was made, every fact read from its records and linked to them."""
    links = links or Links(run, None)
    env = run.environment
    host, gpu = env.get("host", {}), env.get("gpu", {})
    cards = sorted({r.get("gpu_uuid") or f"index {r.get('gpu_index')}" for r in run.timings
                    if r.get("gpu_uuid") or r.get("gpu_index") is not None})
    card = (cards or [gpu.get("uuid") if isinstance(gpu.get("uuid"), str) else None])[0]
    on = f"{len(cards)} {run.device} cards" if len(cards) > 1 else f"one {run.device}" + (f" ({card})" if card else "")
    driver = gpu.get("driver_version")
    clocks = {True: "clocks locked", False: "clocks not locked"}.get(env.get("clocks_locked"), "clock locking unknown")
    commit, dirty = host.get("kit_commit"), host.get("kit_tree_dirty")
    kit = (f"kit {str(commit)[:12]}" if isinstance(commit, str) and commit else "kit commit not recorded") + (
        " with uncommitted changes" if dirty is True else " (clean tree)" if dirty is False
        else ", whether its tree was clean not recorded")
    repeats = len({r["repeat"] for r in run.timings})
    parts: list[doc.Inline] = [
        f"Run {run.name}, {str(env.get('captured_utc', ''))[:10]}: ",
        doc.Link(f"{on}" + (f", driver {driver}" if isinstance(driver, str) else "") + f", {clocks}; {kit}",
                 links(run.dir / "environment.json")), f"; {repeats} repeat{'s' if repeats != 1 else ''}; "]
    processes = {key: records for key, records in by_process(enumerate(run.timings)).items() if key[0] == "process"}
    named = sum(map(len, processes.values()))
    timing = links(run.dir / "timing")
    if not processes:
        parts += [doc.Link("the timing records", timing), " do not name the process that took them (an older kit), "
                  "so whether repeats shared a process is unknown"]
    else:
        configurations, shared = shared_processes(processes)
        parts.append(doc.Link(f"{named} timing records from {len(processes)} process{'es' if len(processes) != 1 else ''}"
                              f" ({units.extent([len(v) for v in processes.values()])} each)", timing))
        if repeats > 1:
            parts.append(f"; in {shared} of {configurations} configurations repeats shared a process" if shared else
                         f", every repeat of each of the {configurations} configurations in a process of its own")
        if named < len(run.timings):
            parts.append(f"; {len(run.timings) - named} records name no process")
    ordered = [r for r in run.timings if isinstance(r.get("order"), dict)]
    seeds = ", ".join(sorted({str(r["order"].get("seed")) for r in ordered}))
    if ordered:
        parts.append(f"; {'each process timed its layouts' if all('layouts' in r['order'] for r in ordered) else 'targets'}"
                     f" in a seeded shuffled order (seed {seeds})")
    return parts + [". Ranges are the min-max of the repeats' medians; each number links to its records."]


def plain(parts: list[doc.Inline]) -> str:
    return "".join(str(part) for part in parts)


def _hypothesis_sentence(answer: HypothesisAnswer, s: Sentence, covered: bool) -> None:
    """`covered`: a claim of the kernel states the same pair, so its sentence gives the margin."""
    h = answer.hypothesis
    kernel, fast, slow = h["kernel"], h["faster"], h["slower"]
    s.add(f"Hypothesis \"{h['statement']}\": {answer.verdict}")
    if not (n := len(answer.shapes)):
        s.add(f" ({fast} and {slow} were not both timed)")
    elif answer.verdict == "holds":
        s.add(f", {fast} faster at ").wins(answer, f"all {n} shapes").add(" in every repeat")
        if not covered:
            margin = min(answer.shapes, key=lambda shape: answer.pooled[shape])
            s.add(f"; the smallest margin is {slow}/{fast} ").ratio_and_range(kernel, margin, slow, fast).add(f" at {margin}")
    else:
        s.add(f": {fast} is faster at ").wins(answer, f"{len(answer.holds_everywhere)} of {n} shapes")
        losses = answer.fails_everywhere
        for i, shape in enumerate(losses):
            s.add(" and slower at " if i == 0 else ", " if i < len(losses) - 1 else " and ").add(f"{shape} (")
            s.ratio(kernel, shape, fast, slow).add(f"{' ' + slow + chr(39) + 's time' if i == 0 else ''}, ")
            s.ratio_range(kernel, shape, fast, slow).add(")")
        if answer.undecided:
            s.add(f"; its repeats disagree at {', '.join(answer.undecided)}")
    s.add(".")


def _published_list(kernel: str, group: list[claims.ClaimResult], pick: Callable[[claims.ClaimResult], float],
                    s: Sentence, fmt: Callable[[float], str]) -> None:
    """The published value of each claim of a group (a seed's first and second process), joined."""
    for i, member in enumerate(group):
        value = pick(member)
        s.add(" (its second process " if i == 1 else ", " if i else "").published(kernel, fmt(value), value)
    s.add(")" if len(group) > 1 else "")


def _claim_sentence(kernel: str, group: list[claims.ClaimResult], s: Sentence) -> None:
    """One claim (or several with the same layouts and shape: a seed's repeated measurement)."""
    result = group[0]
    why = None
    if not result.measured:
        why = "; ".join(d for d in result.differences if "measured on" not in d)
    elif result.ratios and all(r.measured is None for r in result.ratios):
        why = next((d for d in result.differences if d.startswith("layouts not timed")),
                   "its layouts were not timed together")
    if why is not None:
        s.add(f"The claim \"{result.statement}\" is not measurable here ({why}). ")
        return
    named, shapes, change = result.names_shape, list(result.measured), claims.change_of(kernel)
    pairs = [r for r in result.ratios if r.shape == shapes[0]]
    lead = f"At the seed's {shapes[0]}, " if named else ""  # a shape the claim names is said once, here
    def at(shape: str) -> str:
        return "" if named else f" at {shape}"
    if change and len(pairs) == 1 and (pairs[0].first, pairs[0].other) == (change[1], change[0]):
        before, after = change
        s.add(f"{lead}{before} -> {after}: the seed's ")
        _published_list(kernel, group, lambda m: m.published[after] / m.published[before] - 1, s,
                        lambda v: units.percent(v, signed=True))
        s.add("; here ")
        for i, shape in enumerate(shapes):
            verdict = next(r.verdict for r in result.ratios if r.shape == shape)
            s.add("; " if i else "").ratio_and_range(kernel, shape, after, before, change=True).add(f"{at(shape)}, {verdict}")
    elif pairs:
        s.add(f"{lead}{' and '.join(f'{p.other}/{p.first}' for p in pairs)}: the seed's ")
        for j, p in enumerate(pairs):
            s.add(" and " if j else "")
            _published_list(kernel, group, lambda m, p=p: next(r.published for r in m.ratios
                                                                if (r.first, r.other) == (p.first, p.other)),
                            s, lambda v: f"{v:.2f}x")
        one = pairs[0] if len(pairs) == 1 and named else None
        if one:
            for i, layout in enumerate((one.other, one.first)):
                value = result.published[layout]
                s.add(f" vs {layout} " if i else f" ({layout} ").published(kernel, units.short(value), value)
            s.add(")")
        s.add("; here ")
        for i, shape in enumerate(shapes):
            s.add("; " if i else "")
            for j, p in enumerate(r for r in result.ratios if r.shape == shape):
                s.add(" and " if j else "")
                if p.measured is None:
                    s.add("not timed")
                else:
                    s.ratio_and_range(kernel, shape, p.other, p.first)
            if one:
                s.add(f" ({one.other} ").median(kernel, shape, one.other).add(", ").range(kernel, shape, one.other)
                s.add(f"; {one.first} ").median(kernel, shape, one.first).add(", ").range(kernel, shape, one.first).add(")")
            s.add(f"{at(shape)}, {claims.size_verdict(result, shape)}")
    elif t := next((t for t in result.times if t.shape == shapes[0]), None):
        s.add(f"{lead}{t.layout}: the seed's ").published(kernel, units.short(t.published_us), t.published_us)
        if t.scaled_us is not None:
            s.add(" (").published(kernel, units.short(t.scaled_us), t.scaled_us).add(f" scaled by the cards' {t.ceiling} ratio)")
        s.add("; here ")
        for i, shape in enumerate(shapes):
            t = next(x for x in result.times if x.shape == shape)
            s.add("; " if i else "").median_range(kernel, shape, t.layout).add(f"{at(shape)}, {t.verdict}")
            order = result.reproduced.get(shape)
            if order is not None and len(result.order) > 1:
                s.add(f", and {result.order[0]} {'still' if order else 'no longer'} beats {', '.join(result.order[1:])}")
    s.add(". ")


def _best_sentence(run: Run, kernel: str, s: Sentence) -> None:
    for i, shape in enumerate(run.shapes(kernel)):
        written, library = run.fastest(kernel, shape)
        best, both = (written or library)[0], written and library
        s.add("; " if i else "").add(f"at {shape} the fastest {'hand-written ' if both else ''}layout, {best}, takes ")
        s.median_range(kernel, shape, best)
        if both:
            s.add(f", {library[0]} the fastest library ").median(kernel, shape, library[0])
            s.add(": ").ratio_and_range(kernel, shape, best, library[0])
    s.add(". ")


@dataclass
class AnswerBlock:
    items: list[list[doc.Inline]]
    quantities: list[Quantity]


def answer_block(run: Run, links: Links, hypotheses: list[HypothesisAnswer] | None = None,
                 results: list[claims.ClaimResult] | None = None) -> AnswerBlock:
    """Per kernel in the config's order: hypotheses, then claims, else its fastest layouts (judged unless passed in)."""
    hypotheses = hypothesis_answers(run) if hypotheses is None else hypotheses
    results = claims.all_claims(run) if results is None else results
    # The hypotheses' kernels in the config's order of hypotheses (config.json sorts its kernels), then the rest.
    order = list(dict.fromkeys(h["kernel"] for h in run.config.get("hypotheses", []) if h["kernel"] in run.kernels))
    block = AnswerBlock([], [])
    for kernel in order + [k for k in run.kernels if k not in order]:
        mine = [r for r in results if r.kernel == kernel]
        sources, cards = sorted({r.source.split("_")[0] for r in mine if r.source}), sorted({r.gpu for r in mine if r.gpu})
        s = Sentence(run, links)
        s.parts.append(doc.Strong(kernel))
        s.add((f" (seed {', '.join(sources)}, {', '.join(cards)})" if sources and cards else "") + ": ")
        lead = len(s.parts)
        pairs = {(r.first, r.other) for m in mine for r in m.ratios}
        for answer in (a for a in hypotheses if a.hypothesis["kernel"] == kernel):
            _hypothesis_sentence(answer, s, (answer.hypothesis["faster"], answer.hypothesis["slower"]) in pairs)
            s.add(" ")
        # Claims with the same layouts, shape and published order (a seed's second measurement of the
        # same thing) are said in one clause.
        groups: dict[Any, list[claims.ClaimResult]] = {}
        for result in mine:
            groups.setdefault((tuple(result.order), tuple(sorted(result.published)), tuple(result.measured), result.gpu),
                              []).append(result)
        for group in groups.values():
            _claim_sentence(kernel, group, s)
        if len(s.parts) == lead:
            _best_sentence(run, kernel, s)
        mixed = run.mixed_card_shapes(kernel)
        s.add(f"Timings of {', '.join(mixed)} come from several cards. " if mixed else "")
        while isinstance(s.parts[-1], str) and not s.parts[-1].strip():
            s.parts.pop()
        if isinstance(s.parts[-1], str):
            s.parts[-1] = s.parts[-1].rstrip()
        block.items.append(s.parts)
        block.quantities += s.quantities
    return block


def hypothesis_rows(run: Run, answers: list[HypothesisAnswer]) -> list[list[str]]:
    rows = []
    for answer in answers:
        h, repeats = answer.hypothesis, len(answer.verdicts)
        losing = [s for s in answer.shapes if s not in answer.holds_everywhere]
        mixed = run.mixed_card_shapes(h["kernel"])
        rows.append([f"\"{h['statement']}\" ({h['kernel']}: {h['faster']} faster than {h['slower']})",
                     ", ".join(f"rep{v['repeat']} {'holds' if v['holds'] else 'fails'}" for v in answer.verdicts),
                     f"holds on {len(answer.holds_everywhere)} of {len(answer.shapes)} shapes in "
                     + ("both repeats" if repeats == 2 else f"all {repeats} repeats" if repeats > 2 else "its repeat"),
                     ("; ".join(f"{s}: {h['faster']} takes {1 / answer.pooled[s]:.2f}x the time of {h['slower']} "
                                f"({units.spread([1 / r for r in answer.ratios[s]], 'x')})" for s in losing) or "none")
                     + (f"; compares cards on {', '.join(mixed)} (timings from several cards)" if mixed else "")])
    return rows


def operation_rows(run: Run, results: list[claims.ClaimResult]) -> list[list[str]]:
    """Per kernel and shape with a declared change: the change here, and the seed's beside it."""
    rows = []
    for kernel in run.kernels:
        if not (change := claims.change_of(kernel)):
            continue
        before, after = change
        stated = next((r for r in results if r.kernel == kernel and set(r.published) == {before, after}), None)
        for shape in run.shapes(kernel):
            published = stated if stated is not None and shape in stated.measured else None
            b, a = run.pooled_median(kernel, shape, before), run.pooled_median(kernel, shape, after)
            if b is None or a is None:
                continue
            per = [100 * (v - 1) for v in run.repeat_ratios(kernel, shape, after, before)]
            seed = (f"{units.percent(published.published[after] / published.published[before] - 1, signed=True)} "
                    f"({published.gpu})" if published else "-")
            judged = next((r.verdict for r in (published.ratios if published else []) if r.shape == shape), "")
            rows.append([kernel, shape, f"{before} {units.duration(b)} -> {after} {units.duration(a)}",
                         units.percent(a / b - 1, signed=True), units.spread(per, "%", digits=1), seed, judged or "-"])
    return rows


def foreign_work_warning(run: Run) -> str | None:
    """The first screen's warning: the answers include samples another process's work touched."""
    timed = run.timings + run.cold
    if not (touched := foreign_targets(timed)):
        return None
    return (f"Another process computed on the GPU {'during or right after' if looked_after(timed) else 'during'} "
            f"{len(touched)} of {len(timed)} timed targets, whose samples are tagged disturbed (Caveats names them): "
            "the answers below include their numbers.")


def section_answers(run: Run, links: Links) -> doc.Section:
    warning, made = foreign_work_warning(run), how_made(run, links)
    answers, results = hypothesis_answers(run), claims.all_claims(run)
    boxed: list[doc.Block] = [*([doc.Paragraph(warning)] if warning else []), doc.Text(made),
                              doc.Bullets(answer_block(run, links, answers, results).items)]
    tables: list[doc.Block] = []
    if answers:
        tables.append(doc.Table(["Hypothesis", "Verdict per repeat", "Shapes", "Where it fails (range over repeats)"],
                                hypothesis_rows(run, answers)))
        if any(a.shapes for a in answers):
            tables.append(doc.Figure(figures.ratio_figure([
                (f"{a.hypothesis['kernel']}: {a.hypothesis['faster']} vs {a.hypothesis['slower']}", a.hypothesis["faster"],
                 a.hypothesis["slower"], [(shape, a.ratios[shape]) for shape in a.shapes]) for a in answers if a.shapes]),
                None, "Each hypothesis: the slower layout's time over the faster one's per shape, one point per repeat; "
                      "above the dashed line at 1 the hypothesis holds"))
    else:
        tables.append(doc.Paragraph("The config states no hypotheses."))
    if rows := operation_rows(run, results):
        tables.append(doc.Details(f"The change each claims file declares (before -> after) at every shape ({len(rows)} "
                                  "rows), beside the seed's where the seed's claim covers the shape", [
            doc.Table(["Kernel", "Shape", "Before -> after", "Change", "Range over repeats", "Published change",
                       "Verdict by size"], rows, numeric=(3, 4))]))
    tables += claims.section_claims(results)
    if difference := claims.card_difference(run):
        tables += [doc.Paragraph(difference), doc.Table(*claims.card_rows(run))]
    return doc.Section("Answers", boxed + tables, box=len(boxed))
