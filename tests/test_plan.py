"""Targets: what the default config asks for, and the order the timed targets run in."""

from __future__ import annotations

import copy
import re

import pytest
from conftest import REPO, job_counts, snakemake

from kernelkit import config as kit_config


@pytest.fixture(scope="module")
def good():
    return kit_config.load(REPO / "config" / "config.yaml")


def test_plan_times_every_configuration_once_per_repeat(good):
    plan = kit_config.timing_plan(good)
    # rmsnorm 9 shapes x 5 layouts; matmul 2 x 6; layernorm 2 x 7; bias_gelu 1 x 6; triangle and neighbor 1 x 5.
    configurations = 45 + 12 + 14 + 6 + 5 + 5
    assert len(plan) == configurations * 2
    assert len({t.key for t in plan}) == len(plan)
    assert [t.repeat for t in plan] == [1] * configurations + [2] * configurations
    for repeat in (1, 2):
        assert {(t.kernel, t.shape, t.layout) for t in plan if t.repeat == repeat} == set(kit_config.configurations(good))


def test_each_repeat_has_its_own_deterministic_order(good):
    plan = kit_config.timing_plan(good)
    first = [(t.shape, t.layout) for t in plan if t.repeat == 1]
    second = [(t.shape, t.layout) for t in plan if t.repeat == 2]
    assert first != second
    assert kit_config.timing_plan(copy.deepcopy(good)) == plan
    reseeded = copy.deepcopy(good)
    reseeded["timing"]["order_seed"] += 1
    assert [t.key for t in kit_config.timing_plan(reseeded)] != [t.key for t in plan]


def test_adding_a_shape_keeps_the_order_of_the_others(good):
    bigger = copy.deepcopy(good)
    bigger["kernels"]["rmsnorm"]["shapes"].append("8x8")
    old = [t.key for t in kit_config.timing_plan(good)]
    new = [t.key for t in kit_config.timing_plan(bigger) if t.shape != "8x8"]
    assert new == old


def test_dry_run_lists_exactly_the_expected_jobs(good):
    done = snakemake("-n", "--cores", "1", "--config", "run=pytest-dry-run")
    assert done.returncode == 0, done.stderr
    # The default profile (one GPU job at a time, resume after interruption) is picked up.
    assert "Using workflow specific profile profiles/default" in done.stdout + done.stderr
    assert "gpu=1" in done.stdout
    assert job_counts(done.stdout) == {
        "run_config": 1, "environment": 1, "ceiling": 4, "correctness": 34, "negative_control": 31, "span": 7,
        "sanitize": 15, "timing": 174, "clock_figure": 1, "summary": 1, "figure": 6, "report": 1, "all": 1, "total": 277,
    }
    # The scheduler runs ready jobs by priority: the timing priorities must reproduce the plan.
    jobs = re.findall(r"output: results/pytest-dry-run/timing/(\w+)/(\w+)/(\w+)/rep(\d+)\.json\n(?:.*\n)*?\s+priority: (\d+)",
                      done.stdout)
    by_priority = [(k, s, l, int(n), "warm") for k, s, l, n, _ in sorted(jobs, key=lambda j: -int(j[4]))]
    assert by_priority == [t.key for t in kit_config.timing_plan(good)]
    # The environment and the config it hashes are scheduled before everything else.
    first = dict(re.findall(r"^(?:local)?rule (\w+):\n(?:(?!(?:local)?rule ).*\n)*?\s+priority: (\d+)", done.stdout, re.M))
    first = {rule: int(priority) for rule, priority in first.items()}
    assert first["run_config"] > max(int(j[4]) for j in jobs) and first["environment"] > max(int(j[4]) for j in jobs)
    # Every check (correctness, negative control, sanitizer) outranks every timed target, so all checks
    # run first and the timed targets then follow the shuffled plan across kernels.
    checks = [int(p) for rule, p in re.findall(r"^rule (correctness|negative_control|sanitize):\n(?:(?!rule ).*\n)*?\s+priority: (\d+)",
                                                  done.stdout, re.M)]
    assert len(checks) == 34 + 31 + 15 and min(checks) > max(int(j[4]) for j in jobs)
    # Spans of a repeat come after its timed targets and before the next repeat's.
    # (A job block without a priority line has priority 0.)
    blocks = re.split(r"\n(?=(?:local)?rule \w+:)", done.stdout)
    spans = [(int(re.search(r"span/\w+/\w+/rep(\d+)\.json", b).group(1)), int((re.search(r"priority: (\d+)", b) or [0, 0])[1]))
             for b in blocks if b.startswith("rule span:")]
    assert len(spans) == 7 and {repeat for repeat, _ in spans} == {1}
    for repeat, priority in spans:
        same = [int(j[4]) for j in jobs if int(j[3]) == repeat]
        later = [int(j[4]) for j in jobs if int(j[3]) > repeat]
        assert max(later, default=-1) < priority < min(same)


def test_naming_one_timing_target_builds_only_what_it_needs():
    done = snakemake("results/pytest-dry-run/timing/rmsnorm/512x128/t32/rep1.json",
                     "-n", "--cores", "1", "--config", "run=pytest-dry-run")
    assert done.returncode == 0, done.stderr
    # The layout's sanitizer record gates its timing like the checks do.
    assert job_counts(done.stdout) == {"correctness": 5, "negative_control": 6, "sanitize": 1, "timing": 1, "total": 13}


def test_sanitize_false_leaves_the_sanitizer_out_of_timing_inputs(tmp_path):
    (tmp_path / "off.yaml").write_text("sanitize: false\n")
    done = snakemake("results/pytest-dry-run/timing/rmsnorm/512x128/t32/rep1.json", "-n", "--cores", "1",
                     "--configfile", str(tmp_path / "off.yaml"), "--config", "run=pytest-dry-run")
    assert done.returncode == 0, done.stderr
    assert job_counts(done.stdout) == {"correctness": 5, "negative_control": 6, "timing": 1, "total": 12}


@pytest.mark.parametrize(
    "target, message",
    [
        ("results/pytest-dry-run/timing/rmsnorm/999x128/t32/rep1.json", "shape '999x128' is not configured"),
        ("results/pytest-dry-run/timing/rmsnorm/512x128/t64/rep1.json", "layout 't64' is not configured"),
        ("results/pytest-dry-run/timing/rmsnorm/512x128/t32/rep3.json", "beyond config key 'timing.repeats'"),
        ("results/pytest-dry-run/controls/rmsnorm/sign.json", "allowed: epsilon, tail, barrier"),
        ("results/pytest-dry-run/timing/rmsnorm/512by128/t32/rep1.json", "shape '512by128' of kernel 'rmsnorm' is malformed"),
        ("results/pytest-dry-run/timing/rmsnorm/0x128/t32/rep1.json", "shape '0x128' of kernel 'rmsnorm' is malformed"),
        ("results/pytest-dry-run/timing/rmsnorm/4x8x2/t32/rep1.json", "it needs 2 (ROWSxCOLS)"),
        ("results/pytest-dry-run/correctness/softmax/t32.json", "kernel 'softmax' is not configured; allowed: rmsnorm"),
        ("reports/pytest-dry-run/figures/softmax.svg", "kernel 'softmax' is not configured; allowed: rmsnorm"),
    ],
)
def test_naming_a_target_outside_the_config_says_what_is_allowed(target, message):
    done = snakemake(target, "-n", "--cores", "1", "--config", "run=pytest-dry-run")
    assert done.returncode != 0
    assert message in done.stdout + done.stderr


@pytest.mark.parametrize("run", ["h200-a", "h200-b"])
def test_committed_runs_timed_their_targets_in_the_planned_order(run):
    import json

    records = [json.loads(p.read_text()) for p in (REPO / "results" / run).glob("timing/*/*/*/rep*.json")]
    config = json.loads((REPO / "results" / run / "config.json").read_text())
    executed = [(r["kernel"], r["shape"], r["layout"], r["repeat"]) for r in sorted(records, key=lambda r: r["started_utc"])]
    assert executed == [t.key[:4] for t in kit_config.timing_plan(config)]


def test_h200_full_followed_the_plan_within_each_kernel_but_ran_kernels_one_after_another():
    """The committed full run predates the check priority: the scheduler timed each kernel's
    targets (both repeats) as soon as its checks passed. Within a kernel the plan held."""
    import json

    run = REPO / "results" / "h200-full"
    records = [json.loads(p.read_text()) for p in run.glob("timing/*/*/*/rep*.json")]
    config = json.loads((run / "config.json").read_text())
    executed = [(r["kernel"], r["shape"], r["layout"], r["repeat"]) for r in sorted(records, key=lambda r: r["started_utc"])]
    plan = [t.key[:4] for t in kit_config.timing_plan(config)]
    assert executed != plan
    for kernel in config["kernels"]:
        assert [k for k in executed if k[0] == kernel] == [k for k in plan if k[0] == kernel]
    kernels_in_order = [k[0] for k in executed]
    assert sum(a != b for a, b in zip(kernels_in_order, kernels_in_order[1:])) == len(config["kernels"]) - 1


def test_default_profile_runs_jobs_in_parallel_and_leaves_gpu_turns_to_the_lock():
    """No global gpu limit serialises GPU jobs any more (the per-GPU lock does, only while the GPU
    works); every GPU rule still asks for gpu=1, which the SLURM profile turns into --gpus=1."""
    import yaml

    profile = yaml.safe_load((REPO / "workflow" / "profiles" / "default" / "config.yaml").read_text())
    assert profile["cores"] == "all" and "gpu" not in profile.get("resources", {})
    assert profile["scheduler"] == "greedy"
    gpu_rules = {"environment", "ceiling", "correctness", "negative_control", "sanitize", "timing", "span", "profile"}
    declared = set()
    for path in (REPO / "workflow" / "rules").glob("*.smk"):
        for rule, body in re.findall(r"^rule (\w+):\n((?:    .*\n|\n)+)", path.read_text(), re.MULTILINE):
            if re.search(r"^    resources:\n        gpu=1,", body, re.MULTILINE):
                declared.add(rule)
    assert declared == gpu_rules
