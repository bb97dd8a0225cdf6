"""The workflow on a real SLURM cluster through profiles/slurm (issue 14).

.ci/slurm-up.sh starts a single-node cluster whose two GPUs are stand-in device files. On it the CPU
stages must complete through sbatch (the report of a committed run and the diff of two committed
runs, identical to the committed files), and GPU jobs must be submitted asking SLURM for one GPU per
allocation (read back from slurmctld with scontrol, since there is no accounting database) and fail
there with the kit's one sentence. Everything runs in a copy of the repository under tmp_path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import yaml

from conftest import REPO, job_counts, snakemake

# Two committed synthetic runs (tests/synthetic.py, written with the kit's writers): the workflow's
# config is the runs' own, so every record exists and only the CPU rules run; B is diffed against A.
RUN, OTHER = "synthetic-b", "synthetic-a"
DIFF_TARGET = f"reports/diff/{OTHER}__vs__{RUN}/diff.md"
KERNEL = "bias_gelu"  # the GPU jobs are its checks
# Every hand-written layout of bias_gelu, so that every one of its negative controls has a record
# (the kernels' CPU emulations show them all); a library baseline beside them.
KERNELS = {"bias_gelu": {"layouts": ["elementwise", "vec4", "flat", "cupy"], "shapes": ["1024x256"]}}
# The kit's sentence for a machine without a usable GPU (kernelkit/device.py), after "kernelkit <cmd>: ".
NO_GPU_SENTENCE = re.compile(
    r"^kernelkit (environment|correctness|control): (CuPy is not installed|no usable NVIDIA GPU or driver|no NVIDIA GPU is visible)"
)


def slurm_unavailable_reason() -> str | None:
    """Why no SLURM cluster can take jobs here, or None when one node is idle."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "SLURM is not installed (no sinfo/sbatch on PATH); .ci/run starts a single-node cluster"
    try:
        done = subprocess.run(["sinfo", "--noheader", "--format=%T"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 20 s"
    states = done.stdout.split()
    if done.returncode != 0 or "idle" not in states:
        answer = (done.stderr.strip() or " ".join(states) or "no nodes").splitlines()[0]
        return f"no idle SLURM node ({answer}); .ci/run starts a single-node cluster"
    return None


SLURM_UNAVAILABLE = slurm_unavailable_reason()
needs_slurm = pytest.mark.skipif(SLURM_UNAVAILABLE is not None, reason=f"SLURM test skipped: {SLURM_UNAVAILABLE}")


@dataclass
class ClusterRun:
    """One snakemake invocation through the SLURM executor and what SLURM recorded about its jobs."""

    returncode: int
    seconds: float
    output: str
    sbatch_lines: list[str]
    records: dict[str, dict[str, str]]  # SLURM job id -> scontrol's fields


def copy_repository(target: Path) -> None:
    """The workflow, kernels, profiles and two synthetic runs committed in a new git repository,
    with results newer than sources, and the runs' own config as config/config.yaml (Snakemake 9.27
    does not pass --replace-workflow-config on to the jobs it submits, so the config must be that file)."""
    import synthetic

    ignore = shutil.ignore_patterns("__pycache__", ".snakemake")
    for name in ("Snakefile", "pyproject.toml"):
        shutil.copy2(REPO / name, target / name)
    for name in ("workflow", "config", "kernels", "envs", "profiles"):
        shutil.copytree(REPO / name, target / name, symlinks=True, ignore=ignore)
    from kernelkit import spec as specs

    controls = {kernel: list(specs.load(kernel).mutations) for kernel in KERNELS}
    synthetic.write_run(target, OTHER, kernels=KERNELS, controls=controls, sanitizer=True)
    synthetic.write_run(target, RUN, kernels=KERNELS, controls=controls, seed=1, sanitizer=True)
    config = json.loads((target / "results" / RUN / "config.json").read_text())
    (target / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    # A fresh clone gives every file its checkout time in no particular order; the committed
    # results must not look older than the kernel sources they were made from.
    sources_time = os.stat(target / "Snakefile").st_mtime - 3600
    for folder in ("workflow", "config", "kernels"):
        for path in (target / folder).rglob("*"):
            if path.is_file() and not path.is_symlink():
                os.utime(path, (sources_time, sources_time))
    results_time = sources_time + 1800
    for path in (target / "results").rglob("*"):
        if path.is_file():
            os.utime(path, (results_time, results_time))
    # Committed, as in a clone: a committed run is reported from the records it has and never
    # measured again by accident.
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=target, check=True)
    subprocess.run([*git, "add", "results"], cwd=target, check=True)
    subprocess.run([*git, "commit", "-qm", "the committed runs"], cwd=target, check=True)


def scontrol_record(job_id: str) -> dict[str, str]:
    """slurmctld's record of a job (kept MinJobAge seconds after it ends), as field -> value."""
    done = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, f"scontrol show job {job_id}: {done.stderr}"
    return dict(re.findall(r"(\w[\w/:]*)=(\S*)", done.stdout))


def run_on_cluster(copy: Path, *args: str, config: tuple[str, ...] = ()) -> ClusterRun:
    env = {
        **os.environ,
        "PYTHONPATH": str(copy / "workflow"),
        "KERNELKIT_KERNELS": str(copy / "kernels"),
    }
    exe = shutil.which("snakemake") or str(Path(sys.executable).with_name("snakemake"))
    command = [
        exe,
        "--workflow-profile", "profiles/slurm",
        # A small cluster answers at once; the plugin's default first check comes after 40 s.
        "--slurm-init-seconds-before-status-checks", "1", "--seconds-between-status-checks", "1",
        "--config", f"run={RUN}", *config,
        "--verbose",
        *args,
    ]
    started = time.monotonic()
    done = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=400)
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    sbatch_lines = re.findall(r"^sbatch call: (.*)$", output, re.MULTILINE)
    job_ids = re.findall(r"has been submitted with SLURM jobid (\d+)", output)
    return ClusterRun(done.returncode, seconds, output, sbatch_lines, {job: scontrol_record(job) for job in job_ids})


def shown_sbatch(line: str) -> str:
    """An sbatch line up to the command it wraps (which is Snakemake's own, very long)."""
    return line.split(" --wrap=")[0]


@dataclass
class ClusterRuns:
    copy: Path
    cpu: ClusterRun
    gpu: ClusterRun


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> ClusterRuns:
    copy = tmp_path_factory.mktemp("slurm") / "repo"
    copy.mkdir()
    copy_repository(copy)
    cpu = run_on_cluster(copy, f"reports/{RUN}/report.md", DIFF_TARGET)
    # GPU jobs: the environment and the kernel's three check rules (which share one rule body).
    kernel = KERNEL
    control = sorted((copy / "results" / RUN / "controls" / kernel).glob("*.json"))[0].name
    gpu_targets = [f"results/{RUN}/environment.json", f"results/{RUN}/correctness/{kernel}/elementwise.json",
                   f"results/{RUN}/controls/{kernel}/{control}", f"results/{RUN}/sanitizer/{kernel}.json"]
    # Measuring again inside a committed run takes overwrite (the kit refuses it otherwise, before any job).
    gpu = run_on_cluster(copy, "--keep-going", "--forcerun", *gpu_targets, "--", *gpu_targets,
                         config=("overwrite=True",))
    for name, run in (("CPU", cpu), ("GPU", gpu)):
        print(f"{name} run: {run.seconds:.0f} s of Snakemake, sbatch lines:")
        for line in run.sbatch_lines:
            print("  " + shown_sbatch(line))
    return ClusterRuns(copy, cpu, gpu)


@needs_slurm
def test_cpu_stages_complete_through_sbatch_and_rebuild_the_committed_report_and_diff(cluster):
    cpu = cluster.cpu
    assert cpu.returncode == 0, cpu.output[-3000:]
    # Only the CPU rules: the committed runs' checks and timings are read, not redone.
    counts = job_counts(cpu.output)
    kernels = len(json.loads((cluster.copy / "results" / RUN / "config.json").read_text())["kernels"])
    summaries = counts.get("summary", 0)
    assert summaries in (0, 1) and counts == {"clock_figure": 1, "diff": 1, "figure": kernels, "report": 1,
                                              **({"summary": 1} if summaries else {}),
                                              "total": kernels + 3 + summaries}, counts
    assert len(cpu.sbatch_lines) == counts["total"] and len(cpu.records) == counts["total"]
    for record in cpu.records.values():
        assert record["JobState"] == "COMPLETED"
        assert "gpu" not in record.get("TresPerJob", "")
    copy = cluster.copy
    assert (copy / f"reports/{RUN}/report.md").read_text().startswith(f"# kernelkit report: run {RUN}")
    assert "configurations" in (copy / DIFF_TARGET).read_text()


@needs_slurm
def test_gpu_jobs_ask_slurm_for_one_gpu_per_allocation_and_one_allocation_per_job(cluster):
    gpu = cluster.gpu
    assert gpu.returncode != 0  # no GPU on this node
    assert all("--gpus=1" in line.split(" --wrap=")[0] for line in gpu.sbatch_lines), gpu.sbatch_lines
    # The environment, and the kernel's correctness, negative-control and sanitizer jobs.
    assert len(gpu.sbatch_lines) == 4 and len(gpu.records) == 4, gpu.sbatch_lines
    stages = {}
    for record in gpu.records.values():
        assert record["TresPerJob"] == "gres:gpu:1"
        stages[record["Comment"].split("_")[1]] = record["JobState"]
    # The sanitizer finds no compute-sanitizer on the node, says so in its record and completes.
    assert stages == {"environment": "FAILED", "correctness": "FAILED", "negative": "FAILED",
                      "sanitize": stages.get("sanitize")}, stages


@needs_slurm
def test_gpu_jobs_fail_on_the_gpu_less_node_with_the_kits_one_sentence(cluster):
    """Each job runs its own stage: the three check rules are one rule body in a loop, and
    Snakemake evaluates a rule's shell text again when the job runs, so a loop variable in it
    would give every job the loop's last stage."""
    logs = cluster.copy / "results" / RUN / "logs"
    kernel = KERNEL
    environment = (logs / "environment.log").read_text().strip()
    assert NO_GPU_SENTENCE.match(environment) and len(environment.splitlines()) == 1, environment
    for log in (logs / "correctness" / kernel / "all.log", logs / "controls" / kernel / "all.log"):
        # The last line is the sentence (a library layout may say first that it is skipped).
        last = log.read_text().strip().splitlines()[-1]
        assert NO_GPU_SENTENCE.match(last), (log, last)
    sanitizer = (logs / "sanitizer" / f"{kernel}.log").read_text()
    assert "sanitiz" in sanitizer and "unrecognized arguments" not in sanitizer, sanitizer


def test_profile_submits_the_default_run_one_job_per_allocation():
    """The default config's whole run as the SLURM profile would submit it (a dry run, no cluster):
    every job alone (a timing job already holds every layout of its kernel/shape/repeat), each GPU
    rule asking for one GPU."""
    done = snakemake("--workflow-profile", "profiles/slurm", "-n", "--config", "run=slurm-dry-run")
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert "Group job" not in output
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", output, re.MULTILINE))
    assert int(counts["total"]) == 89, counts
    for block in re.split(r"^\[[^\]\n]+\]", output, flags=re.MULTILINE)[1:]:
        rule = re.search(r"^\s*(?:local)?rule (\w+):", block, re.MULTILINE)
        if rule and rule.group(1).startswith(("timing_", "correctness_", "negative_controls_", "sanitize_", "span")):
            assert re.search(r"resources: .*gpu=1", block), block[:600]

