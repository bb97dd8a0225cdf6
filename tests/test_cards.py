"""Several GPUs on one host: discovery, the card each kernel/shape runs on, and what the report says."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml
from conftest import REPO

from kernelkit import KitError, cards
from kernelkit import config as kit_config
from kernelkit import spec as specs
from kernelkit.plan import Plan
from kernelkit.report import assemble
from kernelkit.report.bounds import judge
from kernelkit.report.run import Run


def default_config() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def default_works() -> list[cards.Work]:
    config = default_config()
    return cards.expected_work(Plan(config, {name: specs.load(name) for name in config["kernels"]}))


def test_discovery_takes_the_config_then_cuda_visible_devices_then_falls_back_to_one_card():
    assert cards.discover([1, 0], {"CUDA_VISIBLE_DEVICES": "3"}) == [0, 1]
    assert cards.discover("allocated", {}) is None
    assert cards.discover(None, {"SLURM_JOB_ID": "85", "CUDA_VISIBLE_DEVICES": "0"}) is None
    assert cards.discover([0, 1], {"SLURM_JOB_ID": "85"}) == [0, 1]
    assert cards.discover(None, {"CUDA_VISIBLE_DEVICES": "2, 5"}) == [2, 5]
    # This machine has no GPU driver: NVML cannot count, and the answer is one card, silently.
    assert cards.discover(None, {}) == [0]
    assert cards.discover(None, {"CUDA_VISIBLE_DEVICES": ""}) == [0]
    with pytest.raises(KitError, match="config key 'gpus'"):
        cards.discover(None, {"CUDA_VISIBLE_DEVICES": "GPU-8ea34de6"})
    assert cards.from_command_line(["0", "1"]) == [0, 1]


def test_assignment_is_deterministic_and_balanced_on_two_cards():
    works = default_works()
    placed = cards.assign(works, [0, 1])
    assert placed == cards.assign(list(reversed(works)), [1, 0])
    config = default_config()
    assert set(placed) == {(k, s) for k, entry in config["kernels"].items() for s in entry["shapes"]}
    assert set(placed.values()) == {0, 1}
    load = {gpu: sum(w.seconds for w in works if placed[(w.kernel, w.shape)] == gpu) for gpu in set(placed.values())}
    total, largest = sum(load.values()), max(w.seconds for w in works)
    # Longest-processing-time-first is within 7/6 of the best split of two cards.
    assert max(load.values()) <= 7 / 6 * max(total / 2, largest)
    # Issue 14 asks for at most 0.6x the one-card wall time: the busier card holds at most that share.
    assert max(load.values()) / total <= 0.6
    # Any number of cards: every card gets work while there is more work than cards.
    assert set(cards.assign(works, [0, 1, 2, 3, 4]).values()) == {0, 1, 2, 3, 4}


def dry_run_jobs(*config: str) -> list[dict]:
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--config", "run=cards-dry", *config],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", done.stdout + done.stderr):
        head = re.match(r"(?:local)?rule (\w+):", block)
        if not head:
            continue
        wildcards = re.search(r"\n\s+wildcards: (.*)", block)
        resources = re.search(r"\n\s+resources: (.*)", block)
        shell = re.search(r"CUDA_VISIBLE_DEVICES=(\d+); python -m kernelkit", block)
        jobs.append({
            "rule": head.group(1),
            "wildcards": dict(p.split("=", 1) for p in wildcards.group(1).split(", ")) if wildcards else {},
            "resources": dict(p.split("=", 1) for p in resources.group(1).split(", ")) if resources else {},
            "pinned": int(shell.group(1)) if shell else None,
        })
    return jobs


def test_dry_run_on_two_cards_pins_every_job_of_a_kernel_shape_to_its_card():
    jobs = dry_run_jobs("gpus=[0,1]")
    placed = cards.assign(default_works(), [0, 1])
    config = default_config()
    # The checks' map reads the config as the workflow does, its schema defaults filled in.
    validated = kit_config.load(REPO / "config" / "config.yaml")
    checks_on = cards.check_cards(Plan(validated, {name: specs.load(name) for name in validated["kernels"]}), [0, 1])
    # Both cards take checks (the default config's six kernels), neither more than about half the jobs.
    check_rules = ("correctness_", "negative_controls_", "sanitize_")
    check_jobs = [job for job in jobs if job["rule"].startswith(check_rules)]
    per_card = [sum(job["pinned"] == card for job in check_jobs) for card in (0, 1)]
    assert min(per_card) > 0 and max(per_card) / sum(per_card) < 0.6, per_card
    seen: dict[tuple[str, str], set[int]] = {}
    report_stages = {"summary", "figure", "clock_figure", "report"}
    assert {job["rule"] for job in jobs} >= report_stages | {"environment", "ceiling", "card_environment", "card_ceiling", "span"}
    for job in jobs:
        kernel = job["wildcards"].get("kernel") or next(
            (job["rule"].split("_", 1)[1] for prefix in (*check_rules, "timing_") if job["rule"].startswith(prefix)), None)
        if kernel and job["rule"].startswith("negative_controls_"):
            kernel = job["rule"].removeprefix("negative_controls_")
        if "gpu" not in job["resources"]:
            # No GPU asked for: the report's stages, the config record.
            assert job["rule"] in report_stages | {"run_config", "all"} and "gpu_0" not in job["resources"], job
            assert job["pinned"] is None, job
            continue
        wildcards = job["wildcards"]
        if "shape" in wildcards:
            expected = placed[(kernel, wildcards["shape"])]
            seen.setdefault((kernel, wildcards["shape"]), set()).add(job["pinned"])
        elif kernel:
            expected = checks_on[kernel]
        else:
            expected = int(wildcards.get("gpu", 0))
        assert job["pinned"] == expected, job
        assert job["resources"]["gpu"] == "1"
        assert job["resources"][f"gpu_{expected}"] == "1" and job["resources"][f"gpu_{1 - expected}"] == "0", job
        assert not any(name.endswith("_pool") for name in job["resources"]), job
    assert all(len(pins) == 1 for pins in seen.values()), seen
    assert {pin for pins in seen.values() for pin in pins} == {0, 1}
    per_card = [job for job in jobs if job["rule"] in ("card_environment", "card_ceiling")]
    assert per_card and {job["wildcards"]["gpu"] for job in per_card} == {"1"}


@pytest.fixture()
def two_card_run(tmp_path):
    """A synthetic run whose rmsnorm 16384x8193 was timed on a second card, which has its own
    environment and measured ceilings under gpus/1/."""
    from synthetic import write_run

    run = write_run(tmp_path, "two-cards", cards={("rmsnorm", "16384x8193"): 1})
    uuids = [json.loads((path / "environment.json").read_text())["gpu"]["uuid"] for path in (run, run / "gpus" / "1")]
    assert uuids[0] != uuids[1]
    return run, uuids


def test_report_names_the_cards_and_divides_by_the_timing_cards_ceilings(two_card_run):
    run_dir, uuids = two_card_run
    run = Run(run_dir)
    on_second = run.records("rmsnorm", "16384x8193", "t32")
    assert run.rates_for(on_second) == run.cards[0].rates != run.ceiling
    assert run.rates_for(run.records("rmsnorm", "512x128", "t32")) == run.ceiling
    judged = judge(run, "rmsnorm", "16384x8193", "t32")
    copy_rate = run.cards[0].rates["copy_gb_s"]
    assert judged.ceiling is None or f"{copy_rate:.0f}" in judged.ceiling
    markdown = assemble.render_markdown(run_dir)
    assert f"GPU 1 ({uuids[1]}) timed 16384x8193" in markdown
    assert f"GPU 0 ({uuids[0]}) timed 512x128" in markdown
    assert "Every card of this run measured its own ceilings" in markdown
    assert "compared across cards" not in markdown


def test_layouts_timed_on_several_cards_are_flagged_in_report_and_hypotheses(two_card_run):
    run_dir, uuids = two_card_run
    path = run_dir / "timing" / "rmsnorm" / "512x128" / "t256" / "rep2.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "gpu_uuid": uuids[1], "gpu_index": 1}))
    run = Run(run_dir)
    assert run.mixed_card_shapes("rmsnorm") == ["512x128"]
    markdown = assemble.render_markdown(run_dir)
    assert "The layouts of 512x128 were timed on several cards, so they are compared across cards" in markdown
    assert "compares cards on 512x128" in markdown


def test_report_of_a_run_whose_records_name_no_card_has_no_cards_line(tmp_path):
    """Records of kits before cards were named (no gpu_uuid or gpu_index)."""
    from synthetic import write_run

    markdown = assemble.render_markdown(write_run(tmp_path, "cardless", legacy=True))
    assert "Cards:" not in markdown and "compares cards" not in markdown


def test_sweep_points_are_layouts_of_their_kernel_shape_and_count_in_its_work():
    """A sweep point runs on its kernel/shape's card (the map is per kernel/shape), so its
    processes must weigh on that card: without them a swept kernel would look as light as its
    configured layouts and two swept kernels could land on one card."""
    swept = yaml.safe_load((REPO / "config" / "sweep.yaml").read_text())
    plain = json.loads(json.dumps(swept))
    for entry in plain["kernels"].values():
        entry.pop("sweeps", None)
    loaded = {name: specs.load(name) for name in swept["kernels"]}
    from kernelkit.config import kernel_layouts

    for with_sweeps, without in zip(cards.expected_work(Plan(swept, loaded)), cards.expected_work(Plan(plain, loaded))):
        points = len(kernel_layouts(swept, with_sweeps.kernel)) - len(kernel_layouts(plain, without.kernel))
        assert points > 0
        per_layout = without.processes // len(kernel_layouts(plain, without.kernel))
        assert with_sweeps.processes - without.processes == points * per_layout
        assert with_sweeps.seconds > without.seconds
