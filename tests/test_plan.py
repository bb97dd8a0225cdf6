"""Targets: what the default config asks for, and the order the timed targets run in."""

from __future__ import annotations

import copy
import re
import subprocess
import sys

import pytest
from conftest import REPO, committed_timings, default_config, job_counts, snakemake

from kernelkit import cards as kit_cards
from kernelkit import config as kit_config
from kernelkit import spec as specs


@pytest.fixture(scope="module")
def good():
    return kit_config.load(REPO / "config" / "config.yaml")


def test_plan_times_every_configuration_once_per_repeat(good):
    plan = kit_config.timing_plan(good)
    # rmsnorm 9 shapes x 5 layouts; matmul 2 x 6; layernorm 2 x 7; bias_gelu 1 x 6; triangle and neighbor 1 x 5.
    configurations = 45 + 12 + 14 + 6 + 5 + 5
    assert len(plan) == configurations * 3
    assert len({t.key for t in plan}) == len(plan)
    assert [t.repeat for t in plan] == [1] * configurations + [2] * configurations + [3] * configurations
    for repeat in (1, 2, 3):
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
        "run_config": 1, "environment": 1, "ceiling": 4, "correctness": 34, "negative_control": 46, "span": 7,
        "sanitize": 6, "timing": 261, "clock_figure": 1, "summary": 1, "figure": 6, "report": 1, "all": 1, "total": 370,
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
    assert len(checks) == 34 + 46 + 6 and min(checks) > max(int(j[4]) for j in jobs)
    # Among them, the gates start before the libraries' correctness: the hand-written layouts'
    # correctness, the negative controls (every timing of the kernel waits for them) and the sanitizer.
    correctness = re.findall(r"output: results/pytest-dry-run/correctness/(\w+)/(\w+)\.json\n(?:.*\n)*?\s+priority: (\d+)",
                             done.stdout)
    library = [int(p) for kernel, layout, p in correctness if specs.load(kernel).is_baseline(layout)]
    gating = [int(p) for kernel, layout, p in correctness if not specs.load(kernel).is_baseline(layout)]
    assert len(library) + len(gating) == 34 and library and gating and min(gating) > max(library)
    assert min(checks) == max(library)
    # The gates of the kernel with the most expected timing work open first, and within a kernel a
    # control that racecheck may have to catch goes before the kernel's other gates.
    gate = {}
    for rule, output, priority in re.findall(r"^rule (correctness|negative_control|sanitize):\n\s+input: .*\n\s+output: "
                                             r"results/pytest-dry-run/\w+/(\w+(?:/\w+)?)\.json\n(?:(?!rule ).*\n)*?\s+priority: (\d+)",
                                             done.stdout, re.M):
        kernel, name = (output.split("/") + [None])[:2]  # the sanitizer's record is the kernel's
        if rule == "correctness" and specs.load(kernel).is_baseline(name):
            continue
        racecheck = rule == "negative_control" and bool(specs.load(kernel).mutations[name].needs_gpu_to_show)
        gate.setdefault((kernel, racecheck), set()).add(int(priority))
    assert len(gate) > len(good["kernels"]) and all(len(values) == 1 for values in gate.values())
    gate = {key: values.pop() for key, values in gate.items()}
    ranks = kit_cards.kernels_by_work(kit_cards.expected_work(good, {name: specs.load(name) for name in good["kernels"]}))
    by_rank = sorted(good["kernels"], key=ranks.get)
    assert [gate[(kernel, False)] for kernel in by_rank] == sorted(gate[(kernel, False)] for kernel in by_rank)
    assert len(set(gate.values())) == len(gate)
    for (kernel, racecheck), priority in gate.items():
        if racecheck:
            assert gate[(kernel, False)] < priority < min((p for (k, _), p in gate.items() if ranks[k] > ranks[kernel]), default=2**64)
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
    # The layout's sanitizer record gates its timing like the checks do. The controls and the
    # sanitizer wait for no correctness record: they run beside the layout's correctness job.
    assert job_counts(done.stdout) == {"correctness": 1, "negative_control": 6, "sanitize": 1, "timing": 1, "total": 9}
    blocks = re.split(r"\n(?=(?:local)?rule \w+:)", done.stdout)
    checks = [b for b in blocks if b.startswith(("rule negative_control:", "rule sanitize:"))]
    assert len(checks) == 7 and not any("/correctness/" in b.split("output:")[0] for b in checks)


def test_the_workflow_names_in_its_jobs_environment_the_checks_their_pool_serves_first():
    """The sanitizer's jobs and each control whose bug only racecheck shows wait on a compute-sanitizer
    child (kernelkit.worker_client.first_served_address). Read from a real workflow process: its
    jobs inherit its environment."""
    from kernelkit import worker_client

    program = ("import os, sys, snakemake.cli\n"
               "sys.argv = ['snakemake', '-n', '--config', 'run=pytest-dry-run']\n"
               "try:\n    snakemake.cli.main()\nexcept SystemExit:\n    pass\n"
               f"print('FIRST=' + os.environ.get('{worker_client.FIRST_SERVED_VARIABLE}', ''))\n")
    done = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=300)
    named = done.stdout.rsplit("FIRST=", 1)[1].strip()
    config = default_config()
    racecheck = [(kernel, name) for kernel in config["kernels"]
                 for name, mutation in specs.load(kernel).mutations.items() if mutation.needs_gpu_to_show]
    assert ("rmsnorm", "barrier") in racecheck
    marks = {worker_client.FIRST_SERVED_VARIABLE: named}
    assert worker_client.served_first(["sanitize", "--kernel", "rmsnorm"], marks)
    for kernel in config["kernels"]:
        for name in specs.load(kernel).mutations:
            argv = ["control", "--kernel", kernel, "--control", name]
            assert worker_client.served_first(argv, marks) == ((kernel, name) in racecheck), argv
    assert not worker_client.served_first(["correctness", "--kernel", "rmsnorm", "--layout", "t32"], marks)


def test_sanitize_false_leaves_the_sanitizer_out_of_timing_inputs(tmp_path):
    (tmp_path / "off.yaml").write_text("sanitize: false\n")
    done = snakemake("results/pytest-dry-run/timing/rmsnorm/512x128/t32/rep1.json", "-n", "--cores", "1",
                     "--configfile", str(tmp_path / "off.yaml"), "--config", "run=pytest-dry-run")
    assert done.returncode == 0, done.stderr
    assert job_counts(done.stdout) == {"correctness": 1, "negative_control": 6, "timing": 1, "total": 8}


@pytest.mark.parametrize(
    "target, message",
    [
        ("results/pytest-dry-run/timing/rmsnorm/999x128/t32/rep1.json", "shape '999x128' is not configured"),
        ("results/pytest-dry-run/timing/rmsnorm/512x128/t64/rep1.json", "layout 't64' is not configured"),
        ("results/pytest-dry-run/timing/rmsnorm/512x128/t32/rep4.json", "beyond config key 'timing.repeats'"),
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


@pytest.mark.parametrize("run", ["h200-ref2", "h200-planted2"])
def test_committed_runs_timed_their_targets_in_the_planned_order(run):
    """The RMSNorm-only pair of one machine (config/planted-check.yaml): each run's timed targets
    ran in its plan's order. (The whole default config, h200-s5a/h200-s5b, is checked in
    test_repeatability_runs.py.)"""
    import json

    records = committed_timings(run)
    config = json.loads((REPO / "results" / run / "config.json").read_text())
    executed = [(r["kernel"], r["shape"], r["layout"], r["repeat"]) for r in sorted(records, key=lambda r: r["started_utc"])]
    assert executed == [t.key[:4] for t in kit_config.timing_plan(config)]


def test_a_run_timed_one_kernel_after_another_keeps_the_plan_within_each_kernel_and_its_report_says_so(tmp_path):
    """Before checks outranked timing, the scheduler timed each kernel's targets (both repeats) as
    soon as that kernel's checks passed: the order held within a kernel, not across kernels (the
    committed full run h200-full ran that way; it is retired, and git history keeps it). No
    committed run left ran that way, so the case is built here from h200-s5a (the same default
    config, timed after the fix, in its plan's order across kernels): its timing records get start
    times that put each kernel's targets, in plan order, one kernel after another, and the
    report's caveat, read from those start times, must name the order and its stretches."""
    import json
    import shutil

    from kernelkit import report

    source = REPO / "results" / "h200-s5a"
    config = json.loads((source / "config.json").read_text())
    plan = [t.key[:4] for t in kit_config.timing_plan(config)]
    executed = lambda run: [(r["kernel"], r["shape"], r["layout"], r["repeat"])  # noqa: E731
                            for r in sorted(report.Run(run).timings, key=lambda r: r["started_utc"])]
    stretches = lambda order: 1 + sum(a[0] != b[0] for a, b in zip(order, order[1:]))  # noqa: E731
    # The committed run followed its plan across kernels: no caveat about the order.
    assert executed(source) == plan and stretches(plan) > len(config["kernels"])
    assert not [c for c in report.caveats(report.Run(source)) if c.startswith("Timed targets did not run")]

    copy = tmp_path / "h200-s5a"
    shutil.copytree(source, copy)
    grouped = [key for kernel in config["kernels"] for key in plan if key[0] == kernel]
    for position, (kernel, shape, layout, repeat) in enumerate(grouped):
        path = copy / "timing" / kernel / shape / layout / f"rep{repeat}.json"
        record = json.loads(path.read_text())
        record["started_utc"] = f"2000-01-01T00:{position // 60:02d}:{position % 60:02d}+00:00"
        path.write_text(json.dumps(record))
    order = executed(copy)
    assert order == grouped != plan
    for kernel in config["kernels"]:
        assert [k for k in order if k[0] == kernel] == [k for k in plan if k[0] == kernel]
    assert stretches(order) == len(config["kernels"])
    moved = sum(a != b for a, b in zip(order, plan))
    assert (f"Timed targets did not run in the planned shuffled order ({moved} of {len(plan)} out of place; "
            f"{len(config['kernels'])} stretches of one kernel)") in " ".join(report.caveats(report.Run(copy)))


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
