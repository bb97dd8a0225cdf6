"""The diff of two runs, from synthetic runs (tests/synthetic.py) and copies of them with planted changes.

Identical code twice: the session's pair A and B, whose samples differ only by their seeded noise.
Planted changes: a copy of B with one configuration slowed down, a control no longer caught, a
record of another card, another process's work, and so on; every expected number is recomputed
from the records.
"""

from __future__ import annotations

import re
import shutil
from statistics import median

import numpy as np
import pytest
from conftest import REPO, job_counts, snakemake
from synthetic import OTHER_UUID, copy_run, edit, pooled_median, timing_files, write_run

from kernelkit import diff, document
from kernelkit import config as kit_config
from kernelkit.cli import main
from kernelkit.diff_document import build
from kernelkit.records import read_json


@pytest.fixture(scope="module")
def pair(synthetic_pair):
    return synthetic_pair


def configurations(run):
    """The (kernel, shape, layout) a run's recorded config asks for, as the kit plans them."""
    config = read_json(run / "config.json")
    return [(kernel, shape, layout) for kernel, entry in config["kernels"].items()
            for shape in entry["shapes"] for layout in kit_config.kernel_layouts(config, kernel)]


def test_two_runs_of_identical_code_are_never_faster_or_slower(pair):
    run_a, run_b = pair
    result = diff.compare(diff.load_run(run_a), diff.load_run(run_b))
    assert len(result.comparisons) == len(configurations(run_a)) == len(configurations(run_b))
    assert result.count("FASTER") == result.count("SLOWER") == 0
    assert result.count("SAME") >= 0.9 * len(result.comparisons)
    # No difference in GPU UUID, driver, CUDA, CuPy, clocks seen, ...; no source or outcome change.
    assert result.environment == [] and not result.source_changes and not result.outcome_changes
    assert not result.only_in_a and not result.only_in_b


def test_a_planted_slowdown_is_slower_and_its_source_change_is_listed(tmp_path, capsys, pair):
    run_a, run_b = pair
    b = copy_run(run_b, tmp_path)
    for rep in sorted(b.glob("timing/rmsnorm/4096x4096/t256/rep*.json")):
        edit(rep, lambda r: r.update(samples_us=[s * 1.15 for s in r["samples_us"]], source_sha256="0" * 64))
    result = diff.compare(diff.load_run(run_a), diff.load_run(b))
    called = {(c.shape, c.layout): c.verdict for c in result.comparisons}
    assert called[("4096x4096", "t256")] == "SLOWER"
    assert [c for c in result.comparisons if c.verdict in ("FASTER", "SLOWER")] == [
        c for c in result.comparisons if (c.shape, c.layout) == ("4096x4096", "t256")]
    source_a = read_json(run_a / "timing/rmsnorm/4096x4096/t256/rep1.json")["source_sha256"]
    assert result.source_changes == [("rmsnorm 4096x4096 t256", "source " + source_a[:12] + " -> 000000000000")]
    assert main(["diff", str(run_a), str(b), "--fail-on-slower"]) == 1
    assert main(["diff", str(run_a), str(b)]) == 0
    assert "SLOWER" in capsys.readouterr().out


def test_outcome_changes_and_missing_targets_are_listed(tmp_path, pair):
    run_a, run_b = pair
    b = copy_run(run_b, tmp_path)
    (b / "timing/rmsnorm/512x128/t32/rep2.json").unlink()
    edit(b / "controls/rmsnorm/tail.json", lambda r: r.update(caught=False))
    edit(b / "environment.json", lambda r: r["cuda"].update(cupy_version="99.0"))
    result = diff.compare(diff.load_run(run_a), diff.load_run(b))
    assert result.only_in_a == ["rmsnorm 512x128 t32 rep2"] and result.only_in_b == []
    assert ("negative control rmsnorm tail caught", "True", "False") in result.outcome_changes
    cupy_a = read_json(run_a / "environment.json")["cuda"]["cupy_version"]
    assert ("CuPy", cupy_a, "99.0") in result.environment and cupy_a != "99.0"
    compared = {(c.shape, c.layout): (c.repeats_a, c.repeats_b) for c in result.comparisons}
    assert compared[("512x128", "t32")] == (2, 1)


@pytest.mark.parametrize("breakage, fragment", [
    ("missing", "run directory {b} does not exist"),
    ("broken", "{b}/timing/rmsnorm/512x128/t32/rep1.json"),
])
def test_unusable_input_exits_2_naming_the_problem(tmp_path, capsys, pair, breakage, fragment):
    run_a, run_b = pair
    b = tmp_path / "results" / "b"
    if breakage == "broken":
        copy_run(run_b, tmp_path)
        (b / "timing/rmsnorm/512x128/t32/rep1.json").write_text('{"samples_us": [1.0,')
    assert main(["diff", str(run_a), str(b)]) == 2
    err = capsys.readouterr().err
    assert fragment.format(b=b) in err and err.count("\n") == 1
    assert breakage == "missing" or "is not valid JSON" in err


def test_diff_documents_say_which_statistics_were_used_and_count_the_verdicts(tmp_path, pair):
    run_a, run_b = pair
    md, html = tmp_path / "diff.md", tmp_path / "diff.html"
    assert main(["diff", str(run_a), str(run_b), "--markdown", str(md), "--html", str(html)]) == 0
    text = md.read_text()
    # Processes first (a run's repeats; those one process ran count as one), then samples.
    assert re.search(r"percentile bootstrap that resamples processes \(repeats; repeats that one (worker )?process ran "
                     r"count as one\) and then samples", text)
    assert "Bonferroni" in text
    timings = text.split("## Timings")[1].split("## ")[0]
    assert timings.count("| rmsnorm |") == sum(kernel == "rmsnorm" for kernel, _, _ in configurations(run_a)) > 0
    assert len([line for line in timings.splitlines() if line.startswith("| ") and " | Shape | " not in line]) == len(
        configurations(run_a))
    assert html.read_text().startswith("<!DOCTYPE html>")
    # The summary states the verdict counts the kit computes from the two runs.
    result = diff.compare(diff.load_run(run_a), diff.load_run(run_b))
    counts = ", ".join(f"{result.count(v)} {v}" for v in ("SAME", "FASTER", "SLOWER", "AMBIGUOUS"))
    assert f"{len(result.comparisons)} configurations timed in both: {counts}." in text


def test_snakemake_diff_target_needs_only_the_two_runs(tmp_path, pair):
    """Two finished runs (records and summary) in a working directory of their own: the diff target
    is one job, nothing of either run is made again."""
    for run in pair:
        copy = copy_run(run, tmp_path)
        assert main(["summary", "--output", str(copy / "summary.csv"), *map(str, timing_files(copy))]) == 0
    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config" / "config.yaml", tmp_path / "config" / "config.yaml")
    done = snakemake("--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
                     "reports/diff/b__vs__a/diff.md", "-n", "--cores", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert job_counts(done.stdout) == {"diff": 1, "total": 1}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A reference run and the same run with a planted slowdown: 15% on every configuration but
    one, which moves by 1% with little noise (a measured change inside the threshold)."""
    root = tmp_path_factory.mktemp("planted")
    kernels = {"rmsnorm": {"layouts": ["t32", "t256"], "shapes": ["512x128", "16384x128", "4096x4096", "16384x8193"]}}
    slow = lambda key: 1.01 if key[:3] == ("rmsnorm", "16384x128", "t32") else 1.15 + 0.01 * len(key[1])  # noqa: E731
    return (write_run(root, "reference", kernels=kernels, noise=0.0005),
            write_run(root, "planted", kernels=kernels, noise=0.0005, seed=1, scale=slow))


def test_rows_run_from_the_largest_change_with_a_signed_percent_and_geometric_means(planted):
    reference, slowed = planted
    result = diff.compare(diff.load_run(reference), diff.load_run(slowed))
    rows = result.by_change()
    sizes = [abs(np.log(c.interval.ratio)) for c in rows]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1]
    # Recomputed from the raw samples, not from the diff's own numbers.
    ratios = {(c.shape, c.layout): pooled_median(slowed, "rmsnorm", c.shape, c.layout)
              / pooled_median(reference, "rmsnorm", c.shape, c.layout) for c in rows}
    for c in rows:
        assert c.change == pytest.approx(ratios[(c.shape, c.layout)] - 1)
    geomean = float(np.exp(np.mean(np.log(list(ratios.values())))))
    assert result.geometric_means() == {"": pytest.approx(geomean), "rmsnorm": pytest.approx(geomean)}
    title, sections = build(result)
    text = document.render_markdown(title, sections)
    table_rows = [line for line in text.split("## Timings")[1].splitlines() if line.startswith("| rmsnorm |")]
    assert table_rows[0].split(" | ")[5] == f"{rows[0].change:+.2%}"
    assert f"| rmsnorm | {len(rows)} | {geomean:.4f} | {geomean - 1:+.1%} |" in text
    assert len(rows) == len(configurations(reference)) == len(configurations(slowed))


def another_card(tmp_path, run):
    """A copy of `run` as if it had run on another card: its environment and every record name another GPU."""
    copy = copy_run(run, tmp_path, run.name + "-other-card")
    edit(copy / "environment.json", lambda r: r["gpu"].update(uuid=OTHER_UUID))
    for path in [*timing_files(copy), *copy.glob("ceilings/*.json")]:
        edit(path, lambda r: r.update(gpu_uuid=OTHER_UUID))
    return copy


def test_a_measured_change_inside_the_threshold_is_named_not_plain_same(tmp_path, planted):
    """The planted slowdown barely touches one configuration, rmsnorm 16384x128 t32: its interval
    lies above 1 and below 1.02. The same pair across cards says so on every row."""
    reference, slowed = planted
    result = diff.compare(diff.load_run(reference), diff.load_run(slowed))
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

    # Across cards whose ceilings were not measured the same way (the copy's ceilings named no sizes),
    # no card spread is added to the threshold.
    other = another_card(tmp_path, slowed)
    for path in other.glob("ceilings/*.json"):
        edit(path, lambda r: r.pop("sizes"))
    across = diff.compare(diff.load_run(reference), diff.load_run(other))
    row = next(c for c in across.comparisons if (c.shape, c.layout) == (row.shape, row.layout))
    assert [c for c in across.comparisons if c.below_threshold] == [row]
    assert row.cards and row.card_spread is None and row.threshold == 0.02
    assert row.label == f"SAME ({row.change:+.1%}, below the 2% threshold); compares different cards"
    text = document.render_html(*build(across))
    assert f'<span class="verdict-measured">{row.label}</span>' in text
    assert text.count('<span class="verdict-slower">SLOWER; compares different cards</span>') == across.count("SLOWER") == slower


def test_a_different_gpu_is_a_banner_above_the_verdicts_and_absent_on_one_gpu(tmp_path, pair):
    run_a, run_b = pair
    other = another_card(tmp_path, run_b)
    text = document.render_markdown(*build(diff.compare(diff.load_run(run_a), diff.load_run(other))))
    uuid_a, uuid_b = (read_json(run / "environment.json")["gpu"]["uuid"] for run in (run_a, other))
    assert uuid_a != uuid_b
    banner = f"> Different GPUs: A ran on {uuid_a} and B on {uuid_b}."
    summary, timings = text.split("## Summary")[1].split("## Timings")
    assert summary.lstrip().startswith(banner) and timings.lstrip().startswith(banner)
    same_gpu = document.render_markdown(*build(diff.compare(diff.load_run(run_a), diff.load_run(run_b))))
    assert "Different GPUs" not in same_gpu


def test_summary_names_every_row_that_is_not_same(tmp_path, pair):
    """A configuration whose processes interleave (B's two repeats on either side of A's, 3% apart):
    neither SAME nor a change, AMBIGUOUS, and the summary names it with its label."""
    run_a, _ = pair
    b = write_run(tmp_path, "b", seed=1, scale={("rmsnorm", "4096x4096", "t256", 1): 0.97,
                                                  ("rmsnorm", "4096x4096", "t256", 2): 1.03})
    result = diff.compare(diff.load_run(run_a), diff.load_run(b))
    text = document.render_markdown(*build(result))
    odd = [c for c in result.comparisons if c.verdict != "SAME"]
    assert [(c.shape, c.layout, c.verdict) for c in odd] == [("4096x4096", "t256", "AMBIGUOUS")]
    line = next(line for line in text.splitlines() if line.startswith("Not SAME: "))
    for c in odd:
        assert f"{c.kernel} {c.shape} {c.layout} {c.label}" in line


def test_a_change_all_processes_show_but_within_reach_of_the_threshold_is_ambiguous(tmp_path, pair):
    """Both processes of B faster than both of A by about 2%: the interval excludes 1 but not the
    2% that SAME tolerates, so no change is claimed; twice that is FASTER."""
    run_a, _ = pair
    b = write_run(tmp_path, "b", seed=1, noise=0.004, scale={("rmsnorm", "4096x4096", "t32"): 0.98,
                                                             ("rmsnorm", "16384x8193", "t32"): 0.95})
    result = diff.compare(diff.load_run(run_a), diff.load_run(b))
    row = next(c for c in result.comparisons if (c.shape, c.layout) == ("4096x4096", "t32"))
    assert row.interval.high < 1.0 and row.interval.low < 0.98 and row.verdict == "AMBIGUOUS"
    a_medians, b_medians = ([median(read_json(p)["samples_us"]) for p in run.glob("timing/rmsnorm/4096x4096/t32/rep*.json")]
                            for run in (run_a, b))
    assert max(b_medians) < min(a_medians)  # every process of B beats every process of A
    assert next(c for c in result.comparisons if (c.shape, c.layout) == ("16384x8193", "t32")).verdict == "FASTER"


@pytest.mark.parametrize("mark", ["record", "sample_tag"])
def test_a_row_whose_process_saw_foreign_work_says_so(tmp_path, pair, mark):
    run_a, run_b = pair
    b = copy_run(run_b, tmp_path)

    def foreign(record):
        if mark == "record":
            record["foreign_work"] = {"processes": [{"pid": 4242, "utilisation": 95}]}
        else:
            record["sample_tags"] = [{"foreign": i == 3} for i in range(len(record["samples_us"]))]
    edit(b / "timing/rmsnorm/512x128/t32/rep2.json", foreign)
    result = diff.compare(diff.load_run(run_a), diff.load_run(b))
    flagged = [c for c in result.comparisons if c.foreign_work]
    assert [(c.shape, c.layout, c.foreign_work) for c in flagged] == [("512x128", "t32", ["B rep2"])]
    assert "B rep2 saw foreign GPU work" in flagged[0].label
    assert "Foreign GPU work was seen while timing rmsnorm 512x128 t32 (B rep2)" in document.render_markdown(
        *build(result))


def test_a_row_timed_on_different_cards_says_so(tmp_path, pair):
    a, b = (copy_run(run, tmp_path) for run in pair)
    for run, uuid in ((a, "GPU-aaaa"), (b, "GPU-bbbb")):
        for path in run.glob("timing/rmsnorm/512x128/t256/rep*.json"):
            edit(path, lambda r: r.update(gpu_uuid=uuid))
    result = diff.compare(diff.load_run(a), diff.load_run(b))
    mixed = [c for c in result.comparisons if c.cards]
    assert [(c.shape, c.layout, c.cards) for c in mixed] == [("512x128", "t256", (["GPU-aaaa"], ["GPU-bbbb"]))]
    assert mixed[0].label.endswith("compares different cards")
    assert (f"1 of {len(result.comparisons)} configurations were timed on different cards"
            in document.render_markdown(*build(result)))


def test_exit_codes_slower_bad_arguments_no_common_configuration_and_internal_error(tmp_path, capsys, monkeypatch, pair):
    run_a, run_b = pair
    b = copy_run(run_b, tmp_path)
    for path in b.glob("timing/*/*/*/rep*.json"):
        edit(path, lambda r: r.update(layout=r["layout"] + "x"))
        path.parent.with_name(path.parent.name + "x").mkdir(exist_ok=True)
        path.rename(path.parent.with_name(path.parent.name + "x") / path.name)
    assert main(["diff", str(run_a), str(b)]) == 2
    assert "have no timed configuration (kernel, shape, layout) in common" in capsys.readouterr().err
    for option, value in (("--threshold", "0"), ("--threshold", "-1"), ("--confidence", "1.5"), ("--confidence", "x"),
                          ("--threshold", "nan")):
        with pytest.raises(SystemExit) as exited:
            main(["diff", str(run_a), str(run_b), option, value])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err == f"kernelkit diff: argument {option}: must be a number strictly between 0 and 1, not {value!r}\n"

    def broken(*args, **kwargs):
        raise ZeroDivisionError("float division by zero")
    from kernelkit import diff_document

    monkeypatch.setattr(diff_document, "compare", broken)  # the command's own reference to the computation
    assert main(["diff", str(run_a), str(run_b)]) == 3
    assert capsys.readouterr().err.startswith("kernelkit diff: internal error: ZeroDivisionError: float division by zero")
    monkeypatch.setenv("KERNELKIT_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["diff", str(run_a), str(run_b)])


def test_a_file_given_as_a_run_directory_is_called_a_file(capsys, pair):
    run_a, run_b = pair
    env = run_a / "environment.json"
    assert main(["diff", str(env), str(run_b)]) == 2
    assert capsys.readouterr().err == f"kernelkit diff: {env} is a file, not a run directory (results/<run>)\n"


def test_repeats_one_process_ran_are_one_process_and_claim_no_change(tmp_path, pair):
    """B's two repeats of every configuration ran in one process (a run made with one worker per
    kernel/shape): rmsnorm 512x8193... here 16384x8193 t256, 3% faster in B, would be FASTER as two
    processes a side; as the one process B's side is, no change is claimed, and the diff says why."""
    run_a, _ = pair
    b = write_run(tmp_path, "serial", seed=1, process=lambda key: key[:2],
                  scale={("rmsnorm", "16384x8193", "t256"): 0.95})
    result = diff.compare(diff.load_run(run_a), diff.load_run(b))
    row = next(c for c in result.comparisons if (c.kernel, c.shape, c.layout) == ("rmsnorm", "16384x8193", "t256"))
    assert row.interval.high < 0.98 and row.unclaimed == "FASTER" and row.verdict == "AMBIGUOUS"
    assert row.one_process == ["B"] and (row.repeats_a, row.repeats_b) == (2, 2)
    assert row.label == "AMBIGUOUS (would be FASTER, but B's 2 repeats ran in one process)"
    text = document.render_markdown(*build(result))
    assert "Not claimed, because a run's repeats of the configuration all ran in one" in text
    assert "rmsnorm 16384x8193 t256" in text.split("Not claimed, because")[1].split("\n")[0]
    # Every configuration of the serial run ran in its one process; only the planted one would be a change.
    assert all(c.one_process == ["B"] for c in result.comparisons)
    assert [c.unclaimed for c in result.comparisons if c.unclaimed] == ["FASTER"]
    # With its repeats in processes of their own, the same change is claimed.
    own = write_run(tmp_path, "own", seed=1, scale={("rmsnorm", "16384x8193", "t256"): 0.95})
    result = diff.compare(diff.load_run(run_a), diff.load_run(own))
    assert not [c for c in result.comparisons if c.unclaimed or c.one_process]
    assert [(c.shape, c.layout) for c in result.comparisons if c.verdict == "FASTER"] == [("16384x8193", "t256")]


def test_a_process_that_looked_and_saw_no_foreign_work_is_not_flagged(tmp_path, pair):
    """A record whose sampler looked and saw nobody else ("processes": []) is clean: on the H200 the
    first diff of a run with the lock marked every row because the summary dict itself was truthy."""
    run_a, run_b = pair
    b = copy_run(run_b, tmp_path)
    for path in timing_files(b):
        edit(path, lambda record: record.update(foreign_work={"processes": [], "rule": "by_pid",
                                                              "busy_before_pct": 0, "samples_disturbed": 0}))
    result = diff.compare(diff.load_run(run_a), diff.load_run(b))
    assert result.comparisons and not [c for c in result.comparisons if c.foreign_work]
    assert "Foreign GPU work was seen" not in document.render_markdown(*build(result))


def test_across_cards_the_threshold_grows_by_how_far_apart_the_cards_are_on_the_kit_ceilings(tmp_path):
    """A on one card; B timed rmsnorm 16384x8193 on its second card (gpus/1, ceilings 1% slower) and
    the rest on a third card's first (another UUID): each measured copy, GEMM and the floor the same
    way. A row across cards is judged at the threshold plus the largest |B/A - 1| of those ceilings
    for its two cards, recomputed here from the ceiling files. Ceilings that recorded no sizes (how
    they were measured) add no spread."""
    from kernelkit.stats import process_order, verdict

    a_dir = write_run(tmp_path, "a")
    b_dir = write_run(tmp_path, "b", seed=1, cards={("rmsnorm", "16384x8193"): 1},
                      card_uuids=("GPU-5a5a5a5a-0000-4000-8000-000000000003", OTHER_UUID))
    ceilings = {}
    for run_dir in (a_dir, b_dir):
        for path in [*run_dir.glob("ceilings/*.json"), *run_dir.glob("gpus/*/ceilings/*.json")]:
            record = read_json(path)
            how = [record["method"].get("name"), record["method"].get("host_lead_us", 0.0), record.get("sizes")]
            ceilings.setdefault(record["gpu_uuid"], {})[path.stem] = (median(record["samples_us"]), how)
    a, b = diff.load_run(a_dir), diff.load_run(b_dir)
    result = diff.compare(a, b)
    mixed = [c for c in result.comparisons if c.cards]
    assert len(mixed) == len(result.comparisons) > 0
    assert len({tuple(c.cards[1]) for c in mixed}) == 2  # two cards of B
    for c in mixed:
        (card_a,), cards_b = c.cards
        same_way = lambda card_b: [k for k in set(ceilings[card_a]) & set(ceilings[card_b])  # noqa: E731
                                   if ceilings[card_a][k][1] == ceilings[card_b][k][1]]
        expected = max(max(abs(ceilings[card_b][k][0] / ceilings[card_a][k][0] - 1) for k in same_way(card_b))
                       for card_b in cards_b)
        assert c.card_spread == pytest.approx(expected) and c.threshold == pytest.approx(0.02 + expected)
        keys = lambda run: [k for k in sorted(run.timings) if k[:3] == (c.kernel, c.shape, c.layout)]  # noqa: E731
        order = process_order([a.timings[k]["samples_us"] for k in keys(a)], [b.timings[k]["samples_us"] for k in keys(b)])
        assert c.verdict == verdict(c.interval, c.threshold, order)
        assert f"{expected:.1%} apart on the kit's ceilings" in c.label
    assert None not in {c.card_spread for c in mixed} and max(c.card_spread for c in mixed) > 0.005
    older = diff.compare(diff.load_run(write_run(tmp_path, "older", ceiling_sizes=False)), b)
    assert all(c.cards and c.card_spread is None and c.threshold == 0.02 for c in older.comparisons)
