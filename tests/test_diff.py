"""The diff of two runs, from the committed H200 runs and copies of them with planted changes.

Identical code twice: h200-s5a and h200-s5b (the whole default config, one H200). A planted
slowdown: h200-ref2 and h200-planted2 (config/planted-check.yaml, one H200).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import REPO, job_counts, snakemake

from kernelkit import diff, document
from kernelkit.cli import main
from kernelkit.diff_document import build

RUN_A = REPO / "results" / "h200-s5a"
RUN_B = REPO / "results" / "h200-s5b"
REFERENCE = REPO / "results" / "h200-ref2"
PLANTED = REPO / "results" / "h200-planted2"


def configurations(run):
    """The (kernel, shape, layout) a run's recorded config asks for, as the kit plans them."""
    from kernelkit import config as kit_config

    return kit_config.configurations(json.loads((run / "config.json").read_text()))


def copy_run(tmp_path, source=RUN_B, name="b"):
    target = tmp_path / name
    shutil.copytree(source, target)
    return target


def edit_json(path, change):
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def test_two_runs_of_identical_code_are_never_faster_or_slower():
    result = diff.compare(diff.load_run(RUN_A), diff.load_run(RUN_B))
    assert len(result.comparisons) == len(configurations(RUN_A)) == len(configurations(RUN_B))
    assert result.count("FASTER") == result.count("SLOWER") == 0
    assert result.count("SAME") >= 0.9 * len(result.comparisons)
    assert not result.source_changes and not result.outcome_changes
    assert not result.only_in_a and not result.only_in_b


def test_a_planted_slowdown_is_slower_and_its_source_change_is_listed(tmp_path, capsys):
    b = copy_run(tmp_path)
    for rep in sorted(b.glob("timing/rmsnorm/4096x4096/t256/rep*.json")):
        def slow_down(record):
            record["samples_us"] = [s * 1.15 for s in record["samples_us"]]
            record["source_sha256"] = "0" * 64
        edit_json(rep, slow_down)
    result = diff.compare(diff.load_run(RUN_A), diff.load_run(b))
    called = {(c.shape, c.layout): c.verdict for c in result.comparisons}
    assert called[("4096x4096", "t256")] == "SLOWER"
    assert [c for c in result.comparisons if c.verdict in ("FASTER", "SLOWER")] == [
        c for c in result.comparisons if (c.shape, c.layout) == ("4096x4096", "t256")]
    assert result.source_changes == [("rmsnorm 4096x4096 t256", "source " + RUN_A_HASH()[:12] + " -> 000000000000")]
    assert main(["diff", str(RUN_A), str(b), "--fail-on-slower"]) == 1
    assert main(["diff", str(RUN_A), str(b)]) == 0
    assert "SLOWER" in capsys.readouterr().out


def RUN_A_HASH():
    return json.loads(next(RUN_A.glob("timing/rmsnorm/4096x4096/t256/rep1.json")).read_text())["source_sha256"]


def test_outcome_changes_and_missing_targets_are_listed(tmp_path):
    b = copy_run(tmp_path)
    (b / "timing/rmsnorm/512x128/t32/rep2.json").unlink()
    edit_json(b / "controls/rmsnorm/tail.json", lambda r: r.update(caught=False))
    edit_json(b / "environment.json", lambda r: r["cuda"].update(cupy_version="99.0"))
    result = diff.compare(diff.load_run(RUN_A), diff.load_run(b))
    assert result.only_in_a == ["rmsnorm 512x128 t32 rep2"] and result.only_in_b == []
    assert ("negative control rmsnorm tail caught", "True", "False") in result.outcome_changes
    cupy_a = json.loads((RUN_A / "environment.json").read_text())["cuda"]["cupy_version"]
    assert ("CuPy", cupy_a, "99.0") in result.environment and cupy_a != "99.0"
    compared = {(c.shape, c.layout): (c.repeats_a, c.repeats_b) for c in result.comparisons}
    assert compared[("512x128", "t32")] == (2, 1)


@pytest.mark.parametrize("breakage, fragment", [
    ("missing", "run directory {b} does not exist"),
    ("broken", "result file {b}/timing/rmsnorm/512x128/t32/rep1.json is not valid JSON"),
])
def test_unusable_input_exits_2_naming_the_problem(tmp_path, capsys, breakage, fragment):
    b = tmp_path / "b"
    if breakage == "broken":
        copy_run(tmp_path)
        (b / "timing/rmsnorm/512x128/t32/rep1.json").write_text('{"samples_us": [1.0,')
    assert main(["diff", str(RUN_A), str(b)]) == 2
    err = capsys.readouterr().err
    assert fragment.format(b=b) in err and err.count("\n") == 1


def test_diff_documents_say_which_statistics_were_used(tmp_path):
    md, html = tmp_path / "diff.md", tmp_path / "diff.html"
    assert main(["diff", str(RUN_A), str(RUN_B), "--markdown", str(md), "--html", str(html)]) == 0
    text = md.read_text()
    assert ("percentile bootstrap that resamples processes (repeats; repeats that one worker process ran count as one) "
            "and then samples") in text
    assert "Bonferroni" in text
    timings = text.split("## Timings")[1].split("## ")[0]
    assert timings.count("| rmsnorm |") == sum(kernel == "rmsnorm" for kernel, _, _ in configurations(RUN_A)) > 0
    assert len([line for line in timings.splitlines() if line.startswith("| ") and " | Shape | " not in line]) == len(
        configurations(RUN_A))
    assert html.read_text().startswith("<!DOCTYPE html>")


def test_snakemake_diff_target_needs_only_the_two_runs():
    done = snakemake("reports/diff/h200-s5b__vs__h200-s5a/diff.md", "-n", "--cores", "1")
    assert done.returncode == 0, done.stderr
    assert job_counts(done.stdout) == {"diff": 1, "total": 1}


def pooled_median(run, kernel, shape, layout):
    samples = [s for p in sorted(run.glob(f"timing/{kernel}/{shape}/{layout}/rep*.json"))
               for s in json.loads(p.read_text())["samples_us"]]
    return float(np.median(samples))


def test_rows_run_from_the_largest_change_with_a_signed_percent_and_geometric_means():
    result = diff.compare(diff.load_run(REFERENCE), diff.load_run(PLANTED))
    rows = result.by_change()
    sizes = [abs(np.log(c.interval.ratio)) for c in rows]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1]
    # Recomputed from the raw samples, not from the diff's own numbers.
    ratios = {(c.shape, c.layout): pooled_median(PLANTED, "rmsnorm", c.shape, c.layout)
              / pooled_median(REFERENCE, "rmsnorm", c.shape, c.layout) for c in rows}
    for c in rows:
        assert c.change == pytest.approx(ratios[(c.shape, c.layout)] - 1)
    geomean = float(np.exp(np.mean(np.log(list(ratios.values())))))
    assert result.geometric_means() == {"": pytest.approx(geomean), "rmsnorm": pytest.approx(geomean)}
    title, sections = build(result)
    text = document.render_markdown(title, sections)
    table_rows = [line for line in text.split("## Timings")[1].splitlines() if line.startswith("| rmsnorm |")]
    assert table_rows[0].split(" | ")[5] == f"{rows[0].change:+.2%}"
    assert f"| rmsnorm | {len(rows)} | {geomean:.4f} | {geomean - 1:+.1%} |" in text
    assert len(rows) == len(configurations(REFERENCE)) == len(configurations(PLANTED))


def another_card(tmp_path, run):
    """A copy of `run` as if it had run on another card: its environment names another GPU UUID (its
    timing records predate naming their card, so the environment's is theirs)."""
    copy = copy_run(tmp_path, run, run.name + "-other-card")
    edit_json(copy / "environment.json", lambda r: r["gpu"].update(uuid="GPU-00000000-0000-0000-0000-000000000000"))
    assert not [p for p in copy.glob("timing/*/*/*/rep*.json") if "gpu_uuid" in json.loads(p.read_text())]
    return copy


def test_a_measured_change_inside_the_threshold_is_named_not_plain_same(tmp_path):
    """The planted slowdown barely touches one configuration, rmsnorm 16384x128 t32: its interval
    lies above 1 and below 1.02. h200-ref2 and h200-planted2 ran on one card; the same pair across cards (a copy of
    h200-planted2 naming another card) says so on every row, and as neither run measured
    ceilings no card spread is added to the threshold."""
    result = diff.compare(diff.load_run(REFERENCE), diff.load_run(PLANTED))
    measured = [c for c in result.comparisons if c.below_threshold]
    assert len(measured) == 1
    row = measured[0]
    assert (row.kernel, row.shape, row.layout) == ("rmsnorm", "16384x128", "t32")
    assert row.verdict == "SAME" and 1 < row.interval.low and row.interval.high < 1.02
    assert not row.cards and row.card_spread is None and row.threshold == 0.02
    assert row.label == f"SAME ({row.change:+.1%}, below the 2% threshold)"
    text = document.render_html(*build(result))
    assert f'<span class="verdict-measured">{row.label}</span>' in text
    slower = result.count("SLOWER")
    assert slower == len(result.comparisons) - 1
    assert text.count('<span class="verdict-slower">SLOWER</span>') == slower

    across = diff.compare(diff.load_run(REFERENCE), diff.load_run(another_card(tmp_path, PLANTED)))
    row = next(c for c in across.comparisons if (c.shape, c.layout) == (row.shape, row.layout))
    assert [c for c in across.comparisons if c.below_threshold] == [row]
    assert row.cards and row.card_spread is None and row.threshold == 0.02
    assert row.label == f"SAME ({row.change:+.1%}, below the 2% threshold); compares different cards"
    text = document.render_html(*build(across))
    assert f'<span class="verdict-measured">{row.label}</span>' in text
    assert text.count('<span class="verdict-slower">SLOWER; compares different cards</span>') == across.count("SLOWER") == slower


def test_a_different_gpu_is_a_banner_above_the_verdicts_and_absent_on_one_gpu():
    """h200-ref2 and h200-s5a ran on different H200s (their common configurations are rmsnorm's
    four planted-check shapes); h200-s5a and h200-s5b on one."""
    other = document.render_markdown(*build(diff.compare(diff.load_run(REFERENCE), diff.load_run(RUN_A))))
    uuid_a, uuid_b = (json.loads((run / "environment.json").read_text())["gpu"]["uuid"] for run in (REFERENCE, RUN_A))
    assert uuid_a != uuid_b
    banner = f"> Different GPUs: A ran on {uuid_a} and B on {uuid_b}."
    summary, timings = other.split("## Summary")[1].split("## Timings")
    assert summary.lstrip().startswith(banner) and timings.lstrip().startswith(banner)
    same_gpu = document.render_markdown(*build(diff.compare(diff.load_run(RUN_A), diff.load_run(RUN_B))))
    assert "Different GPUs" not in same_gpu


def test_summary_names_every_row_that_is_not_same():
    result = diff.compare(diff.load_run(RUN_A), diff.load_run(RUN_B))
    text = document.render_markdown(*build(result))
    odd = [c for c in result.comparisons if c.verdict != "SAME"]
    assert odd, "h200-s5a vs h200-s5b has AMBIGUOUS rows"
    line = next(line for line in text.splitlines() if line.startswith("Not SAME: "))
    for c in odd:
        assert f"{c.kernel} {c.shape} {c.layout} {c.label}" in line


@pytest.mark.parametrize("mark", ["record", "sample_tag"])
def test_a_row_whose_process_saw_foreign_work_says_so(tmp_path, mark):
    b = copy_run(tmp_path)
    def foreign(record):
        if mark == "record":
            record["foreign_work"] = {"processes": [{"pid": 4242, "utilisation": 95}]}
        else:
            record["sample_tags"] = [{"foreign": i == 3} for i in range(len(record["samples_us"]))]
    edit_json(b / "timing/rmsnorm/512x128/t32/rep2.json", foreign)
    result = diff.compare(diff.load_run(RUN_A), diff.load_run(b))
    flagged = [c for c in result.comparisons if c.foreign_work]
    assert [(c.shape, c.layout, c.foreign_work) for c in flagged] == [("512x128", "t32", ["B rep2"])]
    assert "B rep2 saw foreign GPU work" in flagged[0].label
    assert "Foreign GPU work was seen while timing rmsnorm 512x128 t32 (B rep2)" in document.render_markdown(
        *build(result))


def test_a_row_timed_on_different_cards_says_so(tmp_path):
    a, b = copy_run(tmp_path, RUN_A, "a"), copy_run(tmp_path)
    for run, uuid in ((a, "GPU-aaaa"), (b, "GPU-bbbb")):
        for path in run.glob("timing/rmsnorm/512x128/t256/rep*.json"):
            edit_json(path, lambda r: r.update(gpu_uuid=uuid))
    result = diff.compare(diff.load_run(a), diff.load_run(b))
    mixed = [c for c in result.comparisons if c.cards]
    assert [(c.shape, c.layout, c.cards) for c in mixed] == [("512x128", "t256", (["GPU-aaaa"], ["GPU-bbbb"]))]
    assert mixed[0].label.endswith("compares different cards")
    assert (f"1 of {len(result.comparisons)} configurations were timed on different cards"
            in document.render_markdown(*build(result)))


def test_exit_codes_slower_bad_arguments_no_common_configuration_and_internal_error(tmp_path, capsys, monkeypatch):
    b = copy_run(tmp_path)
    for path in b.glob("timing/*/*/*/rep*.json"):
        edit_json(path, lambda r: r.update(layout=r["layout"] + "x"))
        path.parent.with_name(path.parent.name + "x").mkdir(exist_ok=True)
        path.rename(path.parent.with_name(path.parent.name + "x") / path.name)
    assert main(["diff", str(RUN_A), str(b)]) == 2
    assert "have no timed configuration (kernel, shape, layout) in common" in capsys.readouterr().err
    for option, value in (("--threshold", "0"), ("--threshold", "-1"), ("--confidence", "1.5"), ("--confidence", "x"),
                          ("--threshold", "nan")):
        with pytest.raises(SystemExit) as exited:
            main(["diff", str(RUN_A), str(RUN_B), option, value])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err == f"kernelkit diff: argument {option}: must be a number strictly between 0 and 1, not {value!r}\n"

    def broken(*args, **kwargs):
        raise ZeroDivisionError("float division by zero")
    monkeypatch.setattr(diff, "compare", broken)
    assert main(["diff", str(RUN_A), str(RUN_B)]) == 3
    assert capsys.readouterr().err.startswith("kernelkit diff: internal error: ZeroDivisionError: float division by zero")
    monkeypatch.setenv("KERNELKIT_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["diff", str(RUN_A), str(RUN_B)])


def test_a_file_given_as_a_run_directory_is_called_a_file(capsys):
    env = RUN_A / "environment.json"
    assert main(["diff", str(env), str(RUN_B)]) == 2
    assert capsys.readouterr().err == f"kernelkit diff: {env} is a file, not a run directory (results/<run>)\n"


@pytest.mark.parametrize("pair", sorted(p.name for p in (REPO / "reports" / "diff").iterdir()))
def test_committed_diffs_load_and_their_verdicts_are_what_the_runs_give(pair):
    """Committed diffs are evidence, not fixtures: the runs still load and compare, and the verdict
    counts the committed diff states are the ones this kit computes from the committed results."""
    a, b = pair.split("__vs__")
    result = diff.compare(diff.load_run(REPO / "results" / a), diff.load_run(REPO / "results" / b))
    committed = (REPO / "reports" / "diff" / pair / "diff.md").read_text()
    counts = ", ".join(f"{result.count(v)} {v}" for v in ("SAME", "FASTER", "SLOWER", "AMBIGUOUS"))
    assert f"{len(result.comparisons)} configurations timed in both: {counts}." in committed


def test_repeats_one_worker_ran_are_one_process_and_claim_no_change():
    """h200-s9 (`--cores 1`: one worker timed both repeats of every target) against h200-p13, one
    kit: rmsnorm 512x8193 t256 took 16.02 us in both repeats of A's worker and 15.27/14.95 us in
    B's one worker. Its interval lies below 0.98, and as two processes a side it was FASTER; as the
    one process a side it is, no change is claimed, and the diff says why."""
    a, b = (diff.load_run(REPO / "results" / run) for run in ("h200-s9", "h200-p13"))
    result = diff.compare(a, b)
    row = next(c for c in result.comparisons if (c.kernel, c.shape, c.layout) == ("rmsnorm", "512x8193", "t256"))
    assert row.interval.high < 0.98 and row.unclaimed == "FASTER" and row.verdict == "AMBIGUOUS"
    assert row.one_process == ["A", "B"] and (row.repeats_a, row.repeats_b) == (2, 2)
    assert row.label == "AMBIGUOUS (would be FASTER, but A's 2 repeats ran in one process and B's 2 repeats ran in one process)"
    text = document.render_markdown(*build(result))
    assert "Not claimed, because a run's repeats of the configuration all ran in one worker process: rmsnorm 512x8193 t256" in text
    # Every configuration of the serial run ran in its one worker.
    assert all("A" in c.one_process for c in result.comparisons)
    assert [c.unclaimed for c in result.comparisons if c.unclaimed] == ["FASTER"]


def test_a_process_that_looked_and_saw_no_foreign_work_is_not_flagged(tmp_path):
    """A record whose sampler looked and saw nobody else ("processes": []) is clean: on the H200 the
    first diff of a run with the lock marked every row because the summary dict itself was truthy."""
    b = copy_run(tmp_path)
    for path in (b / "timing").rglob("rep*.json"):
        edit_json(path, lambda record: record.update(foreign_work={"processes": [], "rule": "by_pid",
                                                                   "busy_before_pct": 0, "samples_disturbed": 0}))
    result = diff.compare(diff.load_run(RUN_A), diff.load_run(b))
    assert result.comparisons and not [c for c in result.comparisons if c.foreign_work]
    assert "Foreign GPU work was seen" not in document.render_markdown(*build(result))


def test_across_cards_the_threshold_grows_by_how_far_apart_the_cards_are_on_the_kit_ceilings():
    """h200-w2x1d and h200-p3 ran on different H200s (two hosts), and each measured copy, L2,
    GEMM and the harness floor on its card in the same way: a row across cards is judged at the
    threshold plus the largest |B/A - 1| of those ceilings for its two cards, recomputed here from
    the ceiling files. h200-s5a recorded no sizes with its ceilings: beside h200-e2 no spread is added."""
    from statistics import median

    from kernelkit.stats import process_order, verdict

    a_dir, b_dir = REPO / "results" / "h200-w2x1d", REPO / "results" / "h200-p3"
    ceilings = {}
    for run_dir in (a_dir, b_dir):
        for path in [*run_dir.glob("ceilings/*.json"), *run_dir.glob("gpus/*/ceilings/*.json")]:
            record = json.loads(path.read_text())
            # h200-s5a's ceiling records predate the card field: their card is the run's.
            card_of_dir = json.loads((path.parent.parent / "environment.json").read_text())["gpu"]["uuid"]
            how = [record.get("method", {}).get("name"), record.get("method", {}).get("host_lead_us", 0.0), record.get("sizes")]
            ceilings.setdefault(record.get("gpu_uuid", card_of_dir), {})[path.stem] = (median(record["samples_us"]), how)
    a, b = diff.load_run(a_dir), diff.load_run(b_dir)
    result = diff.compare(a, b)
    mixed = [c for c in result.comparisons if c.cards]
    assert len(mixed) == len(result.comparisons) > 0
    for c in mixed:
        (card_a,), cards_b = c.cards
        same_way = lambda card_b: [k for k in set(ceilings[card_a]) & set(ceilings[card_b])  # noqa: E731
                                   if ceilings[card_a][k][1] == ceilings[card_b][k][1]]
        if not all(same_way(card_b) for card_b in cards_b):
            assert c.card_spread is None and c.threshold == 0.02
            continue
        expected = max(max(abs(ceilings[card_b][k][0] / ceilings[card_a][k][0] - 1) for k in same_way(card_b))
                       for card_b in cards_b)
        assert c.card_spread == pytest.approx(expected) and c.threshold == pytest.approx(0.02 + expected)
        keys = lambda run: [k for k in sorted(run.timings) if k[:3] == (c.kernel, c.shape, c.layout)]  # noqa: E731
        order = process_order([a.timings[k]["samples_us"] for k in keys(a)], [b.timings[k]["samples_us"] for k in keys(b)])
        assert c.verdict == verdict(c.interval, c.threshold, order)
        assert f"{expected:.1%} apart on the kit's ceilings" in c.label
    assert None not in {c.card_spread for c in mixed}
    older = diff.compare(diff.load_run(REPO / "results" / "h200-s5a"), b)
    assert all(c.cards and c.card_spread is None and c.threshold == 0.02 for c in older.comparisons)
