"""The diff of two runs, from the committed H200 runs and copies of them with planted changes."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import REPO, job_counts, snakemake

from kernelkit import diff
from kernelkit.cli import main

RUN_A = REPO / "results" / "h200-a"
RUN_B = REPO / "results" / "h200-b"


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
    assert len(result.comparisons) == 18
    assert result.count("FASTER") == result.count("SLOWER") == 0
    assert result.count("SAME") >= 15
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
    assert ("CuPy", "14.2.0", "99.0") in result.environment
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
    assert "percentile bootstrap that resamples processes (repeats) and then samples" in text
    assert "Bonferroni" in text
    assert text.count("| rmsnorm |") == 18
    assert html.read_text().startswith("<!DOCTYPE html>")


def test_snakemake_diff_target_needs_only_the_two_runs():
    done = snakemake("reports/diff/h200-b__vs__h200-a/diff.md", "-n", "--cores", "1")
    assert done.returncode == 0, done.stderr
    assert job_counts(done.stdout) == {"diff": 1, "total": 1}
