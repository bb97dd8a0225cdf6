"""The report's answer block: every number in it recomputed from the records it links to, the
claims judged by size against the seeds' cards, and every sentence about how the run was made
following the records (one process for all repeats, another kit commit, a dirty tree).

Nothing here pins a number of a GPU run: each expected number is recomputed in the test from the
samples of the records (synthetic runs written by tests/synthetic.py, and the committed default
run where this checkout has it), with NumPy, not with the kit's code.
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import REPO
from synthetic import copy_run, edit, timing_files, write_run

from kernelkit import KitError
from kernelkit import document as doc
from kernelkit import report
from kernelkit.report import answers, claims, evidence

COMMITTED = REPO / "results" / "ref2-default"  # the reference run of the default config (results/README.md)
SEEDS = next((p for p in (REPO.parent / "shared" / "seeds", Path("/work/shared/seeds")) if p.is_dir()), None)


# --- Recomputing a number from the records it links to ------------------------------------------------

def _repeat_medians(folder: Path) -> dict[int, float]:
    return {int(p.stem[3:]): float(np.median(json.loads(p.read_text())["samples_us"])) for p in folder.glob("rep*.json")}


def _pooled(folder: Path) -> float:
    return float(np.median([s for p in folder.glob("rep*.json") for s in json.loads(p.read_text())["samples_us"]]))


def _per_repeat_ratios(top: Path, bottom: Path) -> list[float]:
    a, b = _repeat_medians(top), _repeat_medians(bottom)
    return [a[n] / b[n] for n in sorted(set(a) & set(b))]


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"(?<![\d.])[-+]?\d+(?:\.\d+)?", text.replace(" to ", " "))]


def _as_us(text: str) -> float:
    value = _numbers(text)[0]
    return value * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[text.split()[-1]]


def _published_values(kernel: str) -> list[float]:
    """Every number a claims file publishes, the ratios and changes of its pairs, and its times
    scaled to any card: what a published number in the answers may be."""
    data = yaml.safe_load((REPO / "kernels" / kernel / "claims.yaml").read_text())
    found = []
    for claim in data.get("claims", []):
        values = claim.get("published_us", {})
        found += list(values.values())
        found += [a / b for a in values.values() for b in values.values()]
        found += [a / b - 1 for a in values.values() for b in values.values()]
    return found


def _scales(card: dict, run_dir: Path) -> list[float]:
    """The seed card's memory bandwidth and FP32 peak over this run's card's, from the claims file and
    environment.json: what a published time is scaled by."""
    env = json.loads((run_dir / "environment.json").read_text())
    bandwidth = 2 * env["gpu"]["memory_clock_max_mhz"] * env["cuda"]["memory_bus_width_bits"] / 8 / 1e3
    peak = env["cuda"]["sm_count"] * env["gpu"]["sm_clock_max_mhz"] * 128 * 2 / 1e3  # compute capability 9.0
    seed_peak = card["sm_count"] * card["boost_clock_mhz"] * card["fp32_lanes_per_sm"] * 2 / 1e3
    return [card["memory_bandwidth_gb_s"] / bandwidth, seed_peak / peak]


def _check(quantity: evidence.Quantity, run_dir: Path) -> None:
    """The quantity's value recomputed from its records, and its printed text agreeing with it."""
    folders = quantity.folders
    if quantity.kind == "median":
        expected = _pooled(folders[0])
        assert quantity.value == pytest.approx(expected, rel=1e-12)
        assert _as_us(quantity.text) == pytest.approx(expected, rel=6e-3)
    elif quantity.kind == "range":
        medians = _repeat_medians(folders[0]).values()
        assert quantity.value == pytest.approx((min(medians), max(medians)), rel=1e-12)
        low, high = _numbers(quantity.text)[:2]
        assert (low, high) == pytest.approx((min(medians), max(medians)), rel=6e-3)
    elif quantity.kind in ("ratio", "change"):
        ratio = _pooled(folders[0]) / _pooled(folders[1])
        expected = ratio - 1 if quantity.kind == "change" else ratio
        assert quantity.value == pytest.approx(expected, rel=1e-12)
        shown = _numbers(quantity.text)[0]
        assert shown == pytest.approx(100 * expected if quantity.kind == "change" else expected, abs=0.051 if
                                      quantity.kind == "change" else 0.0051)
    elif quantity.kind in ("ratio_range", "change_range"):
        ratios = _per_repeat_ratios(*folders)
        shift = 1.0 if quantity.kind == "change_range" else 0.0
        assert quantity.value == pytest.approx((min(ratios) - shift, max(ratios) - shift), rel=1e-12)
        scale = 100.0 if quantity.kind == "change_range" else 1.0
        assert _numbers(quantity.text)[:2] == pytest.approx([scale * (min(ratios) - shift), scale * (max(ratios) - shift)],
                                                            abs=0.051 if scale == 100 else 0.0051)
    elif quantity.kind == "wins":
        faster, slower = quantity.detail
        wins = shapes = 0
        for shape in sorted(p for p in folders[0].iterdir() if (p / faster).is_dir() and (p / slower).is_dir()):
            ratios = _per_repeat_ratios(shape / slower, shape / faster)
            shapes += 1
            wins += all(r > 1 for r in ratios)
        assert quantity.value == (wins, shapes)
        assert quantity.text in (f"{wins} of {shapes} shapes", f"all {shapes} shapes")
    elif quantity.kind == "published":
        kernel = quantity.source.parent.name
        values = _published_values(kernel)
        card = yaml.safe_load(quantity.source.read_text()).get("card", {})
        # A published number, a ratio or change of two, or a published time scaled to this run's card.
        scaled = [v * scale for v in values for scale in _scales(card, run_dir)]
        assert any(math.isclose(quantity.value, v, rel_tol=1e-9) for v in values + scaled), quantity
        if quantity.text.endswith("%"):
            assert _numbers(quantity.text)[0] == pytest.approx(100 * quantity.value, abs=0.051)
        elif quantity.text.endswith("x"):
            assert _numbers(quantity.text)[0] == pytest.approx(quantity.value, abs=0.0051)
        else:
            assert _as_us(quantity.text) == pytest.approx(quantity.value, rel=6e-3)
    else:
        raise AssertionError(f"unknown kind {quantity.kind}")


def _report(run_dir: Path, out: Path) -> tuple[str, str]:
    title, sections = report.build(run_dir, report_dir=out)
    return doc.render_markdown(title, sections), doc.render_html(title, sections)


@pytest.fixture(scope="module")
def runs(synthetic_run, seed_run) -> list[Path]:
    found = [synthetic_run, seed_run]
    return found + ([COMMITTED] if COMMITTED.is_dir() else [])


@pytest.fixture(scope="module")
def pages(runs, tmp_path_factory) -> dict[Path, tuple[Path, str, str]]:
    """Each run's report folder and report (Markdown, HTML): its links are relative to that folder.
    The committed run's are its committed pages, which tests/test_reference_runs.py shows are what
    this kit renders; the synthetic runs' are rendered here, as if to one folder."""
    out = tmp_path_factory.mktemp("reports")
    found = {run_dir: (out, *_report(run_dir, out)) for run_dir in runs if run_dir != COMMITTED}
    if COMMITTED in runs:
        folder = REPO / "reports" / COMMITTED.name
        found[COMMITTED] = (folder, *((folder / name).read_text(encoding="utf-8") for name in ("report.md", "report.html")))
    return found


def test_every_number_of_the_answer_block_is_recomputed_from_the_records_it_links_to(runs, pages):
    for run_dir in runs:
        out, _, page = pages[run_dir]
        run = report.Run(run_dir)
        block = answers.answer_block(run, evidence.Links(run, out))
        assert block.quantities, run_dir
        for quantity in block.quantities:
            _check(quantity, run_dir)
            target = (out / quantity.href).resolve()
            assert target.exists(), (quantity.text, quantity.href)
        boxed = page.split('id="answers-block"')[1].split("</section>")[0]
        for quantity in block.quantities:
            link = f'<a href="{html.escape(doc.safe_href(quantity.href))}">{html.escape(quantity.text)}</a>'
            assert link in boxed, link
        # The text between the links holds no number of this run: every measured value is a link (the
        # verdicts' sizes compare two linked numbers; shapes, seeds and cards are names).
        text = re.sub(r"<a [^>]*>.*?</a>", "", boxed.split("<ul>")[1])
        text = re.sub(r"\d+x\d+(x\d+)?|seed \d+|RTX \d+|&quot;[^&]*&quot;|[\d.]+x (smaller|larger|faster|slower)|"
                      r"ratios [\d.]+x to [\d.]+x", "", text)
        assert not re.search(r"\d+\.\d+ ?(us|ms|x|%)", text), text


def test_the_hypothesis_sentence_counts_the_shapes_each_layout_wins_from_the_samples(synthetic_run, tmp_path):
    run = report.Run(synthetic_run)
    timing = synthetic_run / "timing" / "rmsnorm"
    wins = [shape.name for shape in timing.iterdir()
            if all(r > 1 for r in _per_repeat_ratios(shape / "t32", shape / "t256"))]
    losses = [shape.name for shape in timing.iterdir()
              if all(r < 1 for r in _per_repeat_ratios(shape / "t32", shape / "t256"))]
    assert 0 < len(wins) < 3 and losses, "the synthetic run has a shape where t256 loses"
    item = answers.plain(answers.answer_block(run, evidence.Links(run, tmp_path)).items[0])
    verdict = "fails" if losses else "undecided"
    assert f"Hypothesis \"256 threads are faster on every shape\": {verdict}: t256 is faster at {len(wins)} of 3 shapes" in item
    for shape in losses:
        assert f"slower at {shape} (" in item or f"and {shape} (" in item


@pytest.mark.parametrize("published, measured, per_repeat, verdict", [
    (2.60, 2.50, [2.48, 2.52], "reproduced within 10%"),
    (2.60, 1.20, [1.19, 1.21], "same direction, 2.2x smaller"),  # the effect |log 1.2| vs |log 2.6|: ratio 2.2
    (1.10, 3.30, [3.2, 3.4], "same direction, 3x larger"),
    (1.64, 0.69, [0.68, 0.69], "reversed"),
    (1.64, 1.02, [0.98, 1.05], "undecided (the repeats disagree on the direction)"),
    (1.64, None, [], "not measurable here"),
])
def test_a_published_ratio_is_judged_by_size_within_the_stated_tolerance(published, measured, per_repeat, verdict):
    assert claims.ratio_verdict(published, measured, per_repeat) == verdict


def test_a_published_time_is_compared_only_after_scaling_by_the_bounding_ceiling(tmp_path):
    assert claims.time_verdict(19.3, 18.0) == "reproduced within 10% after scaling"
    assert claims.time_verdict(19.3, 15.0) == f"{19.3 / 15.0:.2g}x faster than the scaled time"
    assert claims.time_verdict(19.3, 60.0) == f"{60.0 / 19.3:.2g}x slower than the scaled time"
    seed = claims.seed_card("rmsnorm")
    here = claims.CardFacts("card", 100, 2000.0, 128, 4000.0, None, None, None, "test")
    assert claims.card_scale(seed, here, "memory bandwidth") == pytest.approx(seed.bandwidth_gb_s / 4000.0)
    assert claims.card_scale(seed, here, "FP32 peak") == pytest.approx(seed.fp32_peak_gflop_s / here.fp32_peak_gflop_s)
    # A claim about one published time: the run's median against the published time scaled to its card.
    run_dir = write_run(tmp_path, "wide", kernels={"rmsnorm": {"layouts": ["t32", "t256"], "shapes": ["512x8193"]}},
                        controls={})
    run = report.Run(run_dir)
    result = next(r for r in claims.all_claims(run) if r.times)
    judged = result.times[0]
    scale = claims.card_scale(claims.seed_card("rmsnorm"), claims.run_card(run), judged.ceiling)
    assert judged.scaled_us == pytest.approx(judged.published_us * scale)
    assert judged.measured_us == pytest.approx(_pooled(run_dir / "timing/rmsnorm/512x8193/t256"))
    assert judged.verdict == claims.time_verdict(judged.published_us * scale, judged.measured_us)


def test_the_cards_table_computes_fp32_peak_from_its_parts_and_quotes_the_seeds(synthetic_run):
    run = report.Run(synthetic_run)
    here = claims.run_card(run)
    env = json.loads((synthetic_run / "environment.json").read_text())
    assert here.fp32_peak_gflop_s == pytest.approx(env["cuda"]["sm_count"] * env["gpu"]["sm_clock_max_mhz"] * 128 * 2 / 1e3)
    assert here.bandwidth_gb_s == pytest.approx(2 * env["gpu"]["memory_clock_max_mhz"] * env["cuda"]["memory_bus_width_bits"]
                                                / 8 / 1e3)
    header, rows = claims.card_rows(run)
    assert header[-1] == f"{run.device} (this run)" and header[1] == "RTX 5070 (seed)"
    peak = next(row for row in rows if row[0].startswith("FP32 peak"))
    assert peak[-1] == f"{here.fp32_peak_gflop_s / 1e3:.1f} TFLOP/s"
    # The card difference is said once in the whole report.
    markdown = report.render_markdown(synthetic_run)
    assert markdown.count("The published numbers come from other cards") == 1
    assert "the claim was measured on" not in markdown
    for path in sorted((REPO / "kernels").glob("*/claims.yaml")):
        card = yaml.safe_load(path.read_text())["card"]
        facts = claims.seed_card(path.parent.name)
        assert facts.fp32_peak_gflop_s == pytest.approx(card["sm_count"] * card["boost_clock_mhz"]
                                                        * card["fp32_lanes_per_sm"] * 2 / 1e3)
        if SEEDS is not None:
            seed = (SEEDS / card["source"]["file"]).read_text(encoding="utf-8")
            assert card["source"]["quote"] in seed
            assert card["driver"] is None or card["driver"] in seed


def _how(run_dir: Path) -> str:
    return answers.plain(answers.how_made(report.Run(run_dir)))


def test_how_the_run_was_made_follows_records_made_differently(synthetic_run, tmp_path):
    """Planted records: one process for all repeats, another kit commit, a dirty tree, an older kit."""
    own = _how(synthetic_run)
    records = len(timing_files(synthetic_run))
    configurations = len({p.parent for p in timing_files(synthetic_run)})
    assert f"{records} timing records from" in own
    assert f"every repeat of each of the {configurations} configurations in a process of its own" in own
    assert "kit 0123456789ab (clean tree)" in own

    one = write_run(tmp_path, "one", process=lambda key: "the only process")
    text = _how(one)
    assert f"{records} timing records from 1 process ({records} each)" in text
    assert f"in {configurations} of {configurations} configurations repeats shared a process" in text
    assert "in a process of its own" not in text

    planted = copy_run(synthetic_run, tmp_path, "planted")
    edit(planted / "environment.json", lambda r: r["host"].update(kit_commit="fedcba9876543210" * 2 + "01234567",
                                                                   kit_tree_dirty=True))
    text = _how(planted)
    assert "kit fedcba987654 with uncommitted changes" in text and "0123456789ab" not in text
    edit(planted / "environment.json", lambda r: r["host"].pop("kit_tree_dirty"))
    assert "whether its tree was clean not recorded" in _how(planted)

    legacy = write_run(tmp_path, "legacy", legacy=True)
    text = _how(legacy)
    assert "do not name the process that took them" in text and "process of its own" not in text
    # The report says the same: the sentence opens its answer block.
    markdown, _ = _report(one, tmp_path)
    answers_md = markdown.split("## Answers")[1]
    assert f"{records} timing records from 1 process" in answers_md


def test_the_diff_opens_with_what_differs_then_the_verdicts_then_the_rows(synthetic_pair, tmp_path):
    from kernelkit import diff
    from kernelkit.diff_document import build

    a, b = synthetic_pair
    b = copy_run(b, tmp_path, "b")
    edit(b / "environment.json", lambda r: r["host"].update(kit_commit="f" * 40, kit_tree_dirty=True))
    edit(b / "config.json", lambda c: c["timing"].update(order_seed=7))
    markdown = doc.render_markdown(*build(diff.compare(diff.load_run(a), diff.load_run(b))))
    sections = re.findall(r"^## (.+)$", markdown, re.MULTILINE)
    assert sections[:3] == ["What differs", "Summary", "Timings"]
    differs = markdown.split("## What differs")[1].split("## ")[0]
    assert "| Kit commit | 0123456789ab (clean tree) | ffffffffffff with uncommitted changes |" in differs
    assert "| Config (1 key differs) | timing.order_seed = 2026 | timing.order_seed = 7 |" in differs
    assert "Card (model and UUID)" in differs.split("The same in A and B:")[1]  # one card: said the same
    assert "Processes that timed the targets" in differs.split("The same in A and B:")[1]
    summary = markdown.split("## Summary")[1].split("## ")[0]
    assert "configurations timed in both:" in summary and "Geometric mean of B/A" in summary


def test_caveats_are_at_most_ten_and_like_ones_are_said_once():
    from kernelkit.report.assemble import MAX_CAVEATS, condensed_caveats

    items = ["Clocks were not locked"] + [
        f"Repeats of rmsnorm {n}x128 t32 differ by more than the spread inside either: medians {n}.000, {n}.100 us "
        f"(gap 0.{n:03d}, widest spread 0.010)" for n in range(1, 30)]
    condensed = condensed_caveats(items)
    assert len(condensed) == 2 and condensed[0] == "Clocks were not locked"
    assert condensed[1].startswith("In 29 configurations the repeats' medians differ") and "and 24 more" in condensed[1]
    assert MAX_CAVEATS == 10


def test_links_refuse_a_scheme_or_host():
    for href in ("javascript:alert(1)", "https://example.com/x", "//host/x", "data:text/html,x"):
        with pytest.raises(KitError):
            doc.safe_href(href)
    assert doc.safe_href("../../results/run x/timing") == "../../results/run%20x/timing"
    assert "[1.86 us](a/b)" in doc.render_markdown("t", [doc.Section("S", [doc.Text(["x ", doc.Link("1.86 us", "a/b")])])])


def test_the_answer_block_keeps_to_forty_lines_of_markdown(runs, pages):
    for run_dir in runs:
        head = pages[run_dir][1].splitlines()[:40]
        assert head[0] == f"# kernelkit report: run {run_dir.name}" and "## Answers" in head
        for kernel in report.Run(run_dir).kernels:
            assert any(line.startswith(f"- **{kernel}**") for line in head), (run_dir, kernel)


def test_a_kernel_without_hypothesis_or_claims_is_answered_by_its_fastest_layouts(seed_run, tmp_path, monkeypatch):
    monkeypatch.setattr(claims, "read_claims", lambda kernel: {})
    run = report.Run(seed_run)
    run.config["hypotheses"] = []
    block = answers.answer_block(run, evidence.Links(run, tmp_path))
    for item, kernel in zip(block.items, run.kernels):
        text = answers.plain(item)
        assert text.startswith(f"{kernel}: at ") and "the fastest hand-written layout" in text, text
    for quantity in block.quantities:
        _check(quantity, seed_run)
