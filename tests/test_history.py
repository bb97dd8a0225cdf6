"""`kernelkit history`: every configuration's median across the runs of a folder, ordered by date,
with card and kit commit, a figure per kernel/shape, and a CSV; records read through the kit's one
reader (a run it refuses is named, never guessed at) and outputs written through its one writer.

The runs are synthetic (tests/synthetic.py) with planted dates, cards and kit commits; every
expected median is recomputed here from the records' samples.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
from synthetic import OTHER_UUID, UUID, edit, timing_files, write_run

from kernelkit.cli import main

KERNELS = {"rmsnorm": {"layouts": ["t32", "t256"], "shapes": ["512x128", "4096x4096"]}}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Three runs written out of date order (their folders sort c, a, b by date), one on another card
    with another kit commit and a dirty tree, and one the reader refuses (a sample that is text)."""
    root = tmp_path_factory.mktemp("history")
    dates = {"c-first": "2026-11-01T10:00:00+00:00", "a-second": "2026-11-02T10:00:00+00:00",
             "b-third": "2026-11-03T10:00:00+00:00"}
    for index, (name, date) in enumerate(dates.items()):
        run = write_run(root, name, kernels=KERNELS, controls={}, hypotheses=[], seed=index,
                        scale={("rmsnorm", "512x128", "t256"): 1.0 + 0.5 * (name == "b-third")},
                        uuid=OTHER_UUID if name == "b-third" else UUID)
        edit(run / "environment.json", lambda r, date=date: r.update(captured_utc=date))
        if name == "b-third":
            edit(run / "environment.json", lambda r: r["host"].update(kit_commit="f" * 40, kit_tree_dirty=True))
    broken = write_run(root, "broken", kernels=KERNELS, controls={}, hypotheses=[])
    edit(timing_files(broken)[0], lambda r: r["samples_us"].__setitem__(0, "fast"))
    return root / "results"


@pytest.fixture(scope="module")
def outputs(folder, tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("history-out")
    paths = {kind: out / f"history.{kind}" for kind in ("md", "html", "csv")}
    assert main(["history", str(folder), "--markdown", str(paths["md"]), "--html", str(paths["html"]),
                 "--csv", str(paths["csv"])]) == 0
    return {kind: path.read_text() for kind, path in paths.items()}


def _pooled(run: Path, shape: str, layout: str) -> tuple[float, list[float]]:
    records = [json.loads(p.read_text()) for p in sorted(run.glob(f"timing/rmsnorm/{shape}/{layout}/rep*.json"))]
    return (float(np.median([s for r in records for s in r["samples_us"]])),
            [float(np.median(r["samples_us"])) for r in records])


def test_the_csv_lists_every_configuration_of_every_run_by_date_with_its_median(folder, outputs):
    rows = list(csv.DictReader(outputs["csv"].splitlines()))
    assert [r["run"] for r in rows][::4] == ["c-first", "a-second", "b-third"]
    assert len(rows) == 3 * 2 * 2  # runs x shapes x layouts; the refused run has none
    for row in rows:
        median, per = _pooled(folder / row["run"], row["shape"], row["layout"])
        assert float(row["median_us"]) == pytest.approx(median, abs=1e-6)
        assert (float(row["repeat_min_us"]), float(row["repeat_max_us"])) == pytest.approx((min(per), max(per)), abs=1e-6)
        environment = json.loads((folder / row["run"] / "environment.json").read_text())
        assert row["kit_commit"] == environment["host"]["kit_commit"] and row["gpu_uuid"] == environment["gpu"]["uuid"]
        assert row["date_utc"] == environment["captured_utc"] and row["card"] == environment["cuda"]["device_name"]
        assert row["kit_tree_dirty"] == str(environment["host"]["kit_tree_dirty"])


def test_the_page_orders_runs_by_date_names_the_refused_one_and_draws_each_kernel_shape(folder, outputs):
    page, markdown = outputs["html"], outputs["md"]
    runs = re.findall(r"^\| (\S+) \| 2026-11-0\d", markdown, re.MULTILINE)
    assert runs == ["c-first", "a-second", "b-third"]
    assert "ffffffffffff (uncommitted changes)" in markdown and OTHER_UUID[:12] in markdown
    assert re.search(r"Not read \(1\): broken: timing record .*rep1\.json: field 'samples_us' holds sample 0", markdown)
    # One small figure per kernel/shape, each with its axes labelled.
    assert page.count("<svg") == 2 and page.count('<figure class="small">') == 2
    assert page.count("median µs") == 2 and page.count("runs in date order") == 2
    # The latest run's planted change (t256 at 512x128 1.5x slower) against the earlier runs on the same card model.
    latest, _ = _pooled(folder / "b-third", "512x128", "t256")
    earlier = float(np.median([_pooled(folder / name, "512x128", "t256")[0] for name in ("c-first", "a-second")]))
    assert f"| t256 | {latest / earlier - 1:+.1%} |" in markdown


def test_outputs_are_checked_before_the_work_and_one_is_required(folder, tmp_path, capsys):
    assert main(["history", str(folder)]) == 2
    assert "name at least one output" in capsys.readouterr().err
    inside = folder / "a-second" / "history.csv"
    assert main(["history", str(folder), "--csv", str(inside)]) == 2
    assert "lies inside the run folder" in capsys.readouterr().err and not inside.exists()
    assert main(["history", str(tmp_path / "missing"), "--csv", str(tmp_path / "h.csv")]) == 2
    assert "is not a folder of runs" in capsys.readouterr().err
