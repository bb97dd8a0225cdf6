"""The target plan (kernelkit.plan): which jobs the default config makes, what each writes, and the
order the scheduler runs them in; checked on the Plan itself and on Snakemake's dry run."""

from __future__ import annotations

import subprocess
import copy
import re
from typing import NamedTuple

import pytest
from conftest import REPO, job_counts, snakemake

from kernelkit import cards as kit_cards
from kernelkit import config as kit_config
from kernelkit import spec as specs
from kernelkit.plan import CEILING_PRIORITY, CHECK_PRIORITY, ENVIRONMENT_PRIORITY, Plan, layout_order, order_key

ONE_TIMING = "results/local/timing/rmsnorm/512x128/t32/rep1.json"


@pytest.fixture(scope="module")
def good():
    return kit_config.load(REPO / "config" / "config.yaml")


def plan_of(config) -> Plan:
    return Plan(config, {name: specs.load(name) for name in config["kernels"]})


@pytest.fixture(scope="module")
def plan(good):
    return plan_of(good)


# --- the Plan -------------------------------------------------------------------------------------
def test_each_kernel_has_one_correctness_one_control_and_one_sanitizer_job_a_record_each(good, plan):
    """Per kernel: a correctness record per configured layout, a control record per control of the
    spec, one sanitizer record; each kind made by one job (the rules' outputs are these lists)."""
    assert plan.kernels == list(good["kernels"]) and len(plan.kernels) == 6
    for kernel in plan.kernels:
        spec = specs.load(kernel)
        layouts = kit_config.kernel_layouts(good, kernel)
        assert plan.correctness_files(kernel) == [f"results/local/correctness/{kernel}/{name}.json" for name in layouts]
        assert plan.control_files(kernel) == [f"results/local/controls/{kernel}/{name}.json" for name in spec.mutations]
        assert plan.sanitizer_files(kernel) == [f"results/local/sanitizer/{kernel}.json"]
        assert plan.hand_written(kernel) == [name for name in layouts if not spec.is_baseline(name)]
        assert plan.hand_written(kernel), kernel
    assert sum(len(plan.correctness_files(k)) for k in plan.kernels) == 34
    assert sum(len(plan.control_files(k)) for k in plan.kernels) == 46


def test_sanitize_false_plans_no_sanitizer_record(good):
    off = copy.deepcopy(good)
    off["sanitize"] = False
    assert all(plan_of(off).sanitizer_files(kernel) == [] for kernel in off["kernels"])
    assert not [name for name in plan_of(off).all_targets() if "/sanitizer/" in name]


def test_each_kernel_shape_repeat_is_one_timing_job_that_writes_every_layout(good, plan):
    jobs = plan.timing_jobs()
    shapes = sum(len(entry["shapes"]) for entry in good["kernels"].values())
    assert shapes == 16 and len(jobs) == shapes * 3
    assert len({(job.kernel, job.shape, job.repeat, job.cache) for job in jobs}) == len(jobs)
    for job in jobs:
        files = plan.timing_job_files(job)
        layouts = kit_config.kernel_layouts(good, job.kernel)
        assert files == [f"results/local/timing/{job.kernel}/{job.shape}/{name}/rep{job.repeat}.json" for name in layouts]
    # Every repeat is a job (a process) of its own: repeat 1's jobs, then repeat 2's, then repeat 3's.
    assert [job.repeat for job in jobs] == [1] * shapes + [2] * shapes + [3] * shapes
    for repeat in (1, 2, 3):
        assert sorted((job.kernel, job.shape) for job in jobs if job.repeat == repeat) == sorted(
            (kernel, shape) for kernel, entry in good["kernels"].items() for shape in entry["shapes"])
    # Every timed configuration is one record of one job, in every repeat.
    every = [name for job in jobs for name in plan.timing_job_files(job)]
    configured = sum(len(entry["shapes"]) * len(kit_config.kernel_layouts(good, kernel))
                     for kernel, entry in good["kernels"].items())
    assert len(every) == len(set(every)) == configured * 3
    assert sorted(every) == sorted(plan.timing_files())


def timed_targets(plan: Plan) -> list[tuple[str, str, str, int]]:
    """(kernel, shape, layout, repeat) of every warm timed layout, in the order the timing jobs time them."""
    return [(job.kernel, job.shape, name, job.repeat) for job in plan.timing_jobs() if job.cache == "warm"
            for name in layout_order(plan.seed, job.kernel, job.shape, job.repeat, job.cache, plan.layouts[job.kernel])]


def test_the_seeded_order_is_deterministic_and_changes_with_the_seed(good, plan):
    keys = lambda p: [(job.kernel, job.shape, job.repeat, job.cache) for job in p.timing_jobs()]  # noqa: E731
    assert plan_of(copy.deepcopy(good)).timing_jobs() == plan.timing_jobs()
    assert timed_targets(plan_of(copy.deepcopy(good))) == timed_targets(plan)
    reseeded = copy.deepcopy(good)
    reseeded["timing"]["order_seed"] += 1
    assert keys(plan_of(reseeded)) != keys(plan)
    assert timed_targets(plan_of(reseeded)) != timed_targets(plan)
    # Each repeat has an order of its own.
    first = [(job.kernel, job.shape) for job in plan.timing_jobs() if job.repeat == 1]
    second = [(job.kernel, job.shape) for job in plan.timing_jobs() if job.repeat == 2]
    assert first != second
    # Within a repeat, jobs run in ascending order key, each key seeded by the job alone.
    for job in plan.timing_jobs():
        assert job.order_key == order_key(good["timing"]["order_seed"], job.repeat, job.kernel, job.shape, job.cache)
    for repeat in (1, 2, 3):
        ordered = [job.order_key for job in plan.timing_jobs() if job.repeat == repeat]
        assert ordered == sorted(ordered)


def test_adding_a_shape_keeps_the_order_of_the_others(good, plan):
    bigger = copy.deepcopy(good)
    bigger["kernels"]["rmsnorm"]["shapes"].append("8x8")
    new = [job for job in plan_of(bigger).timing_jobs() if job.shape != "8x8"]
    assert new == plan.timing_jobs()


def test_layout_order_is_a_seeded_permutation_that_differs_across_repeats(good, plan):
    seed = good["timing"]["order_seed"]
    differs_across_repeats, differs_with_seed = [], []
    for kernel in plan.kernels:
        layouts = plan.layouts[kernel]
        for shape in plan.shapes(kernel):
            orders = [layout_order(seed, kernel, shape, repeat, "warm", layouts) for repeat in (1, 2, 3)]
            for repeat, order in zip((1, 2, 3), orders):
                assert sorted(order) == sorted(layouts) and len(order) == len(layouts)
                assert order == layout_order(seed, kernel, shape, repeat, "warm", list(layouts))
            assert layouts == plan.layouts[kernel], "layout_order changed its argument"
            differs_across_repeats.append(len({tuple(order) for order in orders}) > 1)
            differs_with_seed.append(layout_order(seed + 1, kernel, shape, 1, "warm", layouts) != orders[0])
    assert any(differs_across_repeats) and any(differs_with_seed)


@pytest.mark.parametrize("repeats", [3, 60])
def test_priorities_put_checks_first_then_repeat_after_repeat_with_its_spans_between(good, repeats):
    """Up to the schema's largest `timing.repeats` (60): the environment and the ceilings before the
    checks (common.smk gives them CHECK_PRIORITY plus at most the number of kernels), every check before
    every timing job, repeat r's timing jobs (in plan order) before repeat r+1's, and r's spans between."""
    config = copy.deepcopy(good)
    config["timing"]["repeats"] = repeats
    config["span"]["repeats"] = repeats
    plan = plan_of(config)
    jobs = plan.timing_jobs()
    priorities = [job.priority(plan.repeats) for job in jobs]
    assert ENVIRONMENT_PRIORITY > CEILING_PRIORITY > CHECK_PRIORITY + len(plan.kernels)
    assert min(priorities) > 0 and max(priorities) < CHECK_PRIORITY
    assert priorities == sorted(priorities, reverse=True) and len(set(priorities)) == len(priorities)
    for repeat in range(1, repeats + 1):
        same = [p for job, p in zip(jobs, priorities) if job.repeat == repeat]
        later = [p for job, p in zip(jobs, priorities) if job.repeat > repeat]
        assert max(later, default=-1) < plan.span_priority(repeat) < min(same)


def test_all_targets_name_each_file_once(good, plan):
    targets = plan.all_targets()
    assert len(targets) == len(set(targets))
    assert set(plan.timing_files()) <= set(targets) and set(plan.span_files()) <= set(targets)
    both = copy.deepcopy(good)
    both["timing"]["cache"] = "both"
    both["profile"] = True
    targets = plan_of(both).all_targets(gpus=[0, 1])
    assert len(targets) == len(set(targets))
    assert any("/cold/" in name for name in targets) and any("/gpus/1/" in name for name in targets)
    assert any("/profile/" in name for name in targets)


# --- Snakemake's dry run --------------------------------------------------------------------------
class Job(NamedTuple):
    rule: str
    outputs: list[str]
    priority: int
    resources: str


def planned_jobs(stdout: str) -> list[Job]:
    """Every job block of a dry run (a block without a priority line has priority 0)."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \S+:)", stdout):
        head = re.match(r"(?:local)?rule (\S+):", block)
        if not head:
            continue
        outputs = re.search(r"^\s+output: (.*)$", block, re.M)
        priority = re.search(r"^\s+priority: (\d+)$", block, re.M)
        resources = re.search(r"^\s+resources: (.*)$", block, re.M)
        jobs.append(Job(head.group(1), outputs.group(1).split(", ") if outputs else [],
                        int(priority.group(1)) if priority else 0, resources.group(1) if resources else ""))
    return jobs


@pytest.fixture(scope="module")
def dry():
    done = snakemake("-n", "--cores", "1", "--config", "run=pytest-dry-run")
    assert done.returncode == 0, done.stderr
    return done


def test_dry_run_plans_89_jobs(dry, good):
    # The default profile (parallel jobs, greedy scheduling, resume after interruption) is picked up.
    assert "Using workflow specific profile profiles/default" in dry.stdout + dry.stderr
    expected = {"run_config": 1, "environment": 1, "ceiling": 4, "span": 7, "clock_figure": 1, "summary": 1,
                "figure": 6, "report": 1, "all": 1, "total": 89}
    for kernel, entry in good["kernels"].items():
        expected.update({f"correctness_{kernel}": 1, f"negative_controls_{kernel}": 1, f"sanitize_{kernel}": 1,
                         f"timing_{kernel}": 3 * len(entry["shapes"])})
    assert job_counts(dry.stdout) == expected


def test_dry_run_timing_jobs_write_every_layout_and_run_in_the_planned_order(dry, good):
    plan = Plan({**good, "run": "pytest-dry-run"}, {name: specs.load(name) for name in good["kernels"]})
    jobs = planned_jobs(dry.stdout)
    timing = [job for job in jobs if job.rule.startswith("timing_")]
    assert len(timing) == len(plan.timing_jobs())
    by_outputs = {tuple(job.outputs): job for job in timing}
    # The scheduler runs ready jobs by priority: the timing priorities reproduce the plan, each job
    # writing every layout of its kernel/shape/repeat.
    by_priority = sorted(timing, key=lambda job: -job.priority)
    assert [tuple(job.outputs) for job in by_priority] == [tuple(plan.timing_job_files(job)) for job in plan.timing_jobs()]
    for planned in plan.timing_jobs():
        assert by_outputs[tuple(plan.timing_job_files(planned))].rule == f"timing_{planned.kernel}"
    # The environment and the config it hashes go before everything else, the ceilings next.
    priority = {job.rule: job.priority for job in jobs if not job.rule.startswith(("timing_", "correctness_",
                                                                                    "negative_controls_", "sanitize_"))}
    checks = [job for job in jobs if job.rule.startswith(("correctness_", "negative_controls_", "sanitize_"))]
    assert len(checks) == 18
    assert priority["run_config"] == priority["environment"] == ENVIRONMENT_PRIORITY > priority["ceiling"] == CEILING_PRIORITY
    assert priority["ceiling"] > max(job.priority for job in checks)
    # Every check (correctness, negative controls, sanitizer) outranks every timing job, so all checks run
    # first and the timing jobs then follow the shuffled plan across kernels.
    assert min(job.priority for job in checks) > max(job.priority for job in timing)
    # Spans of a repeat come after its timing jobs and before the next repeat's.
    spans = [(int(re.search(r"/rep(\d+)\.json$", job.outputs[0]).group(1)), job.priority)
             for job in jobs if job.rule == "span"]
    assert len(spans) == 7 and {repeat for repeat, _ in spans} == {1}
    for repeat, span_priority in spans:
        same = [job.priority for job in timing if job.outputs[0].endswith(f"/rep{repeat}.json")]
        later = [job.priority for job in timing if int(re.search(r"/rep(\d+)\.json$", job.outputs[0]).group(1)) > repeat]
        assert max(later, default=-1) < span_priority < min(same)


def test_dry_run_the_kernel_with_the_most_timing_work_opens_its_gates_first(dry, good):
    """A kernel's three check jobs share one priority, above every timing job's; among kernels, the
    one with the most expected timing work goes first: every timing of a kernel waits for all of
    its checks (kernelkit.cards.kernels_by_work)."""
    gate = {}
    for job in planned_jobs(dry.stdout):
        if job.rule.startswith(("correctness_", "negative_controls_", "sanitize_")):
            kernel = re.sub(r"^(correctness|negative_controls|sanitize)_", "", job.rule)
            gate.setdefault(kernel, set()).add(job.priority)
    assert set(gate) == set(good["kernels"]) and all(len(values) == 1 for values in gate.values())
    ranks = kit_cards.kernels_by_work(kit_cards.expected_work(plan_of(good)))
    by_rank = sorted(good["kernels"], key=ranks.get)  # least expected work first
    priorities = [next(iter(gate[kernel])) for kernel in by_rank]
    assert priorities == sorted(set(priorities)), {kernel: gate[kernel] for kernel in by_rank}
    assert min(priorities) > CHECK_PRIORITY


def test_dry_run_gpu_jobs_and_only_they_ask_for_the_gpu(dry):
    """No global gpu limit serialises GPU jobs (the per-GPU lock does, only while the GPU works);
    every GPU rule still asks for gpu=1, which the SLURM profile turns into --gpus=1."""
    gpu_rules = re.compile(r"environment|ceiling|span|(correctness|negative_controls|sanitize|timing)_\w+")
    jobs = planned_jobs(dry.stdout)
    assert {job.rule for job in jobs if not gpu_rules.fullmatch(job.rule)} == {
        "run_config", "summary", "figure", "clock_figure", "report", "all"}
    for job in jobs:
        assert bool(re.search(r"\bgpu=1\b", job.resources)) == bool(gpu_rules.fullmatch(job.rule)), job


def test_naming_one_timing_target_plans_its_kernels_checks_and_one_timing_job():
    done = snakemake(ONE_TIMING, "-n", "--cores", "1")
    assert done.returncode == 0, done.stderr
    assert job_counts(done.stdout) == {"correctness_rmsnorm": 1, "negative_controls_rmsnorm": 1, "sanitize_rmsnorm": 1,
                                       "timing_rmsnorm": 1, "total": 4}
    (timing,) = [job for job in planned_jobs(done.stdout) if job.rule == "timing_rmsnorm"]
    layouts = kit_config.kernel_layouts(kit_config.load(REPO / "config" / "config.yaml"), "rmsnorm")
    assert timing.outputs == [ONE_TIMING.replace("/t32/", f"/{name}/") for name in layouts]
    # The checks wait for nothing: they run beside each other.
    checks = [job for job in planned_jobs(done.stdout) if job.rule != "timing_rmsnorm"]
    assert len(checks) == 3 and all(job.priority > timing.priority for job in checks)
    shell = re.search(r"python -m kernelkit time .*", done.stdout).group(0)
    assert all(f"--layout {name} " in shell for name in layouts) and "--output-dir results/local/timing/rmsnorm/512x128 " in shell


def test_sanitize_false_leaves_the_sanitizer_out_of_timing_inputs(tmp_path):
    (tmp_path / "off.yaml").write_text("sanitize: false\n")
    done = snakemake(ONE_TIMING, "-n", "--cores", "1", "--configfile", str(tmp_path / "off.yaml"))
    assert done.returncode == 0, done.stderr
    assert job_counts(done.stdout) == {"correctness_rmsnorm": 1, "negative_controls_rmsnorm": 1, "timing_rmsnorm": 1,
                                       "total": 3}


def test_the_workflow_lints_clean():
    done = snakemake("--lint")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Congratulations, your workflow is in a good condition!" in done.stdout + done.stderr


TIMING = "results/local/timing/rmsnorm/512x128/t32/rep1.json"


@pytest.mark.parametrize(
    "target, message",
    [
        (TIMING.replace("512x128", "999x128"), "shape '999x128' is not configured for kernel 'rmsnorm'; allowed: 512x128"),
        (TIMING.replace("t32", "t64"), "layout 't64' is not configured for kernel 'rmsnorm'; allowed: t32, t256"),
        (TIMING.replace("rep1", "rep4"), "repeat 4 is beyond config key 'timing.repeats' (3)"),
        (TIMING.replace("rep1", "rep0"), "names repeat 'rep0'; repeats count from rep1"),
        (TIMING.replace("rep1", "rep01"), "names repeat 'rep01'; repeats count from rep1"),
        (TIMING.replace("512x128", "512by128"), "shape '512by128' of kernel 'rmsnorm' is malformed"),
        (TIMING.replace("512x128", "0x128"), "shape '0x128' of kernel 'rmsnorm' is malformed"),
        (TIMING.replace("512x128", "4x8x2"), "it needs 2 (ROWSxCOLS)"),
        (TIMING.replace("rmsnorm", "softmax"), "kernel 'softmax' is not configured; allowed: rmsnorm"),
        (TIMING.replace("local", "otherrun"), "belongs to run 'otherrun', not to this run 'local'; add --config run=otherrun"),
        ("reports/otherrun/report.md", "belongs to run 'otherrun'"),
        (f"../{TIMING}", "is outside this checkout"),
        (f"results/../../{TIMING}", "is outside this checkout"),
        ("results/local/correctness/softmax/t32.json", "kernel 'softmax' is not configured; allowed: rmsnorm"),
        ("results/local/correctness/rmsnorm/t99.json", "layout 't99' is not configured"),
        ("results/local/controls/rmsnorm/sign.json", "negative control 'sign' is not defined for kernel 'rmsnorm'"),
        ("results/local/controls/rmsnorm/sign.json", "allowed: epsilon, tail, barrier"),
        ("results/local/span/rmsnorm/512x128/rep1.json", "kernel 'rmsnorm' has no span targets; config key 'span.kernels' allows: matmul"),
        ("results/local/span/matmul/1024x1024x1024/rep5.json", "span repeat 5 is beyond config key 'span.repeats' (1)"),
        ("reports/local/figures/softmax.svg", "kernel 'softmax' is not configured; allowed: rmsnorm"),
    ],
)
def test_naming_a_target_outside_the_config_says_what_is_allowed(plan, target, message):
    """The sentence the workflow prints for a named target (common.smk asks the plan before Snakemake
    looks for rules; tests/test_workflow_errors.py shows one reaching the command line)."""
    problem = plan.target_problem(target)
    assert problem is not None and message in problem, problem


@pytest.mark.parametrize("target", [TIMING, "results/local/span/matmul/1024x1024x1024/rep1.json",
                                    "results/local/controls/rmsnorm/tail.json", "reports/local/report.md"])
def test_a_target_the_plan_builds_has_no_problem(plan, target):
    assert plan.target_problem(target) is None


# --- committed runs -------------------------------------------------------------------------------
def recorded_plan(records) -> list[tuple]:
    """The order a run's records say was planned: by repeat, then order key (a per-target key in runs
    of the kit before one process timed every layout of a kernel/shape; the job's key times 64 plus
    the layout's place after)."""
    return [(r["kernel"], r["shape"], r["layout"], r["repeat"])
            for r in sorted(records, key=lambda r: (r["repeat"], r["order"]["key"]))]


def executed_order(records) -> list[tuple]:
    return [(r["kernel"], r["shape"], r["layout"], r["repeat"]) for r in sorted(records, key=lambda r: r["started_utc"])]


def test_a_run_timed_one_kernel_after_another_is_named_by_the_reports_caveat(tmp_path, seed_run):
    """A run whose records' start times put each kernel's targets one kernel after another, each
    kernel in plan order, gets the report's caveat naming how many were out of place and the
    stretches; a run in its plan's order gets none (the synthetic seed run, several kernels)."""
    import json
    import shutil

    from kernelkit import report

    config = json.loads((seed_run / "config.json").read_text())
    executed = lambda run: executed_order(report.Run(run).timings)  # noqa: E731
    stretches = lambda order: 1 + sum(a[0] != b[0] for a, b in zip(order, order[1:]))  # noqa: E731
    plan = recorded_plan(report.Run(seed_run).timings)
    assert executed(seed_run) == plan and stretches(plan) > len(config["kernels"])
    assert not [c for c in report.caveats(report.Run(seed_run)) if c.startswith("Timed targets did not run")]

    copied = tmp_path / "grouped"
    shutil.copytree(seed_run, copied)
    grouped = [key for kernel in config["kernels"] for key in plan if key[0] == kernel]
    for position, (kernel, shape, layout, repeat) in enumerate(grouped):
        path = copied / "timing" / kernel / shape / layout / f"rep{repeat}.json"
        record = json.loads(path.read_text())
        record["started_utc"] = f"2000-01-01T{position // 3600:02d}:{position // 60 % 60:02d}:{position % 60:02d}+00:00"
        path.write_text(json.dumps(record))
    order = executed(copied)
    assert order == grouped != plan
    assert stretches(order) == len(config["kernels"])
    moved = sum(a != b for a, b in zip(order, plan))
    assert (f"Timed targets did not run in the planned shuffled order ({moved} of {len(plan)} out of place; "
            f"{len(config['kernels'])} stretches of one kernel)") in " ".join(report.caveats(report.Run(copied)))


def test_default_profile_runs_jobs_in_parallel_and_leaves_gpu_turns_to_the_lock():
    import yaml

    profile = yaml.safe_load((REPO / "profiles" / "default" / "config.yaml").read_text())
    assert profile["cores"] == "all" and "gpu" not in profile.get("resources", {})
    assert profile["scheduler"] == "greedy"


def test_a_run_is_committed_when_git_tracks_it_or_without_git_when_it_completed(tmp_path):
    from kernelkit.plan import committed

    run = tmp_path / "results" / "r"
    run.mkdir(parents=True)
    assert not committed(str(run), str(tmp_path))  # not a git checkout, no summary.csv
    (run / "summary.csv").write_text("kernel\n")
    assert committed(str(run), str(tmp_path))
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert not committed(str(run), str(tmp_path))  # git answers: nothing tracked there
    subprocess.run(["git", "-C", str(tmp_path), "add", "results/r/summary.csv"], check=True)
    assert committed("results/r", str(tmp_path))
