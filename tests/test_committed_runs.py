"""Committed runs are evidence: every one of them loads with the current kit and reports.

What a report says about a run is tested where that content is (test_report.py and the run
tests); here only that `kernelkit report` over each committed run succeeds and writes something,
so a change of the kit that can no longer read an older run fails here, by name.
"""

from __future__ import annotations

import pytest
from conftest import REPO

from kernelkit.cli import main

RUNS = sorted(path.name for path in (REPO / "results").iterdir() if (path / "config.json").is_file())


def test_the_runs_the_readme_cites_are_committed():
    assert {"h200-p3", "h200-s3", "h200-tw7-solo", "h200-tw7-a", "h200-tw7-b", "h200-s10", "h200-p14", "h200-s9", "h200-p13", "h200-fq2-nowait", "h200-fq2-wait", "h200-fq4-nowait", "h200-fq4-wait", "h200-w2x1g", "h200-w2x2g", "h200-w2x1i", "h200-w2x2i", "h200-cold1", "h200-w2x1d", "h200-w2x2d", "h200-e2", "h200-limits1", "h200-limits4", "h200-ln-counters", "h200-f1", "h200-ref2", "h200-planted2", "h200-s5a", "h200-s5b",
            "h200-p5a", "h200-p5b", "h200-p19a", "h200-p19b",
            "h200-p20b", "h200-s20", "h200-p22a", "h200-p22b", "h200-s22", "h200-q4a", "h200-q4b", "h200-q8b"} <= set(RUNS)
    assert any(run.startswith("h200-q-") for run in RUNS)


@pytest.mark.parametrize("run", RUNS)
def test_every_committed_run_reports(tmp_path, run):
    markdown, html = tmp_path / "report.md", tmp_path / "report.html"
    figures = REPO / "reports" / run / "figures"
    argv = ["report", str(REPO / "results" / run), "--markdown", str(markdown), "--html", str(html)]
    assert main(argv + (["--figures", str(figures)] if figures.is_dir() else [])) == 0
    assert markdown.stat().st_size > 0 and html.stat().st_size > 0
    assert markdown.read_text().startswith("# ")
