# Checks that stop a Snakemake run with one sentence before the DAG is built (targets) or before
# the first job starts (no GPU, a committed run), and the cleanup of interrupted writes.
# Snakemake builds the DAG only after the Snakefile is read, and wraps any exception of an input
# function in an InputFunctionException block, so what can be checked up front is checked here.
import functools
import threading

from kernelkit import device as kit_device
from kernelkit import records as kit_records


class TargetParts:
    """A target's wildcards, as the input functions of common.smk read them."""

    def __init__(self, parts):
        self.__dict__.update(parts)


# The result templates of one run that a target may name, with what checks their wildcards.
TARGET_CHECKS = [
    (paths.TIMING, timed_target),
    (paths.SPAN, checked_span),
    (paths.CORRECTNESS, checked_layout),
    (paths.CONTROL, checked_control),
    (paths.SANITIZER, sanitized_layouts),
    (paths.PROFILE, profile_inputs),
    (paths.CLOCK_FIGURE, None),
    (paths.FIGURE, figure_inputs),
    (paths.CARD_ENVIRONMENT, checked_card),
    (paths.CARD_CEILING, checked_card),
]


def target_problem(target):
    """One sentence on what is wrong with a target path, or None for one the kit can build."""
    if os.path.isabs(target):
        target = os.path.relpath(target)
    clean = os.path.normpath(target)
    if clean == ".." or clean.startswith("../"):
        return f"target '{target}' is outside this checkout; name it from the repository root, as results/{RUN}/..."
    parts = clean.split("/")
    if parts[0] not in ("results", "reports") or len(parts) < 2 or parts[1] == "diff":
        return None  # a name of a rule, a diff or another file: left to Snakemake
    if parts[1] != RUN:
        return (
            f"target '{target}' belongs to run '{parts[1]}', not to this run '{RUN}'; "
            f"add --config run={parts[1]} to build it"
        )
    for template, check in TARGET_CHECKS:
        match = template_pattern(template).match(clean)
        if not match:
            continue
        if check is None:
            return None
        wildcards = TargetParts(match.groupdict())
        repeat = getattr(wildcards, "n", "1")
        if not re.fullmatch(r"[1-9][0-9]*", repeat):
            return f"target '{target}' names repeat 'rep{repeat}'; repeats count from rep1 (config keys 'timing.repeats', 'span.repeats')"
        if getattr(wildcards, "view", "timing") not in ("timing", "cold"):
            return None
        try:
            if hasattr(wildcards, "kernel"):
                checked_kernel(wildcards)
            check(wildcards)
        except WorkflowError as error:
            return f"target '{target}': {error.args[0]}"
        return None
    return None


def check_targets():
    targets, _ = command_line()
    for target in targets or []:
        problem = target_problem(target)
        if problem:
            refuse(problem)


def jobs_use_this_python():
    """Whether the jobs run in this process's Python, not in a conda environment of their own."""
    from snakemake.settings.types import DeploymentMethod

    return DeploymentMethod.CONDA not in workflow.deployment_settings.deployment_method


@functools.lru_cache(maxsize=None)
def gpu_problem():
    """The kit's sentence on why this machine cannot run GPU jobs, or None. Jobs in a conda
    environment or on other machines are not asked about: this process's Python is not theirs.
    Asked once: the check before the first job reuses the answer of the check while the workflow
    is read, which it repeated for 0.11-0.18 s before the first job of one target built from
    scratch (H200, 2026-12-01; the driver's start and the CuPy wheel's metadata)."""
    if not jobs_use_this_python():
        return None
    if workflow.executor_plugin is not None and not workflow.local_exec:
        return None  # jobs run elsewhere (SLURM): this machine needs no GPU
    return kit_device.gpu_problem()


def check_gpu_up_front():
    """No GPU and a command that surely needs one: the sentence, before Snakemake prints more.
    The other cards' pools and the sanitizer's children that the targets surely need start
    first, and the check overlaps their start; without a GPU, they leave on their own."""
    targets, runs_jobs = command_line()
    if targets is None or not runs_jobs:
        return
    if gpu_surely_needed(targets):
        if POOLED:  # the first card's pool started in common.smk
            start_worker_pools([gpu for gpu in GPUS if gpu != FIRST_CARD])
        if not FROZEN:
            start_sanitizer_children_ahead(targets)
        problem = gpu_problem()
        if problem:
            refuse(problem)


def gpu_jobs(jobs):
    return [job for job in jobs if dict(job.resources).get("gpu", 0)]


def refuse_to_overwrite_committed(jobs):
    """A committed run is evidence: a GPU job in it (a new measurement) is refused unless the
    command says overwrite. Its summary and reports, computed from its records, still build."""
    measuring = gpu_jobs(jobs)
    if not measuring or not FROZEN:
        return
    run_dir = paths.path(paths.RUN_DIR, run=RUN)
    refuse(
        f"run '{RUN}' is committed (git tracks files in {run_dir}/) and this command would run "
        f"{len(measuring)} GPU job{'s' if len(measuring) != 1 else ''} in it (first: {measuring[0].output[0]}); name a new run with "
        f"--config run=NAME, or add --config overwrite=True to replace its evidence"
    )


def refuse_without_gpu(jobs):
    """No GPU or no CuPy and GPU jobs planned: the kit's own sentence, before a job starts."""
    problem = gpu_jobs(jobs) and gpu_problem()
    if problem:
        refuse(f"{problem} ({len(gpu_jobs(jobs))} planned jobs need the GPU)")


def count_children(wanted, card, tools):
    counts = wanted.setdefault(card, {})
    for tool in tools:
        counts[tool] = counts.get(tool, 0) + 1


def sanitizer_children_wanted(jobs):
    """Per card, how many children of each compute-sanitizer tool the jobs will start: memcheck
    and racecheck for each sanitizer job, racecheck for each negative control whose bug only
    threads show (kernelkit.controls)."""
    wanted = {}
    for job in jobs:
        if job.rule.name == "sanitize":
            count_children(wanted, card_of(job.wildcards), ("memcheck", "racecheck"))
        elif job.rule.name == "negative_control" and job.wildcards.control in RACECHECK_CONTROLS[job.wildcards.kernel]:
            count_children(wanted, card_of(job.wildcards), ("racecheck",))
    return wanted


def sanitizer_children_surely_needed(targets):
    """Per card, the children of each compute-sanitizer tool that the targets surely need, read
    from the targets and the files alone (as gpu_surely_needed): the missing sanitizer records
    and racecheck controls that the named timing and span targets wait for, every kernel's for
    the run's default target and its report. Other targets count none here."""
    report_dir = paths.path(paths.REPORT_DIR, run=RUN)
    gated = {}  # kernel: the layouts whose timing the targets wait for
    for name in target_names(targets):
        if name == "all" or name.startswith(f"{report_dir}/"):
            for kernel in KERNELS:
                gated.setdefault(kernel, set()).update(LAYOUTS[kernel])
            continue
        timing = template_pattern(paths.TIMING).match(name)
        span = template_pattern(paths.SPAN).match(name)
        if timing and timing["view"] in ("timing", "cold") and timing["kernel"] in KERNELS:
            gated.setdefault(timing["kernel"], set()).add(timing["layout"])
        elif span and span["kernel"] in KERNELS:
            gated.setdefault(span["kernel"], set()).update(LAYOUTS[span["kernel"]])
    wanted = {}
    for kernel, layouts in gated.items():
        card = CARD_OF_CHECKS.get(kernel)
        if card is None:
            continue  # an allocation picks the card: nothing can start on it ahead of the jobs
        if not all(os.path.exists(name) for name in layout_sanitizer_files(kernel, sorted(layouts))):
            count_children(wanted, card, ("memcheck", "racecheck"))
        for control in RACECHECK_CONTROLS[kernel]:
            if not os.path.exists(paths.path(paths.CONTROL, run=RUN, kernel=kernel, control=control)):
                count_children(wanted, card, ("racecheck",))
    return wanted


# Per card, the children started while the workflow was read (start_sanitizer_children_ahead).
SANITIZER_CHILDREN_AHEAD = {}


def start_sanitizer_children(wanted):
    """Start children until `wanted` wait on each card (kernelkit.standby.start), through the jobs'
    shell and card prefix, so they are on the jobs' card and in their environment. Not where the
    jobs' Python is not this process's (conda) or an allocation picks the card (GPUS is None):
    their children would never be claimed."""
    if not GPUS or not jobs_use_this_python():
        return {}
    for card, counts in wanted.items():
        tools = " ".join(f"{tool}={count}" for tool, count in sorted(counts.items()))
        start_on_card(card, f"python -m kernelkit.standby {tools}")
    return wanted


def start_sanitizer_children_ahead(targets):
    """Start the children the targets surely need while Snakemake still reads the workflow.

    Why: a child's context under racecheck takes about a second to make, and the sanitizer's job
    and the `barrier` control, the last checks of one timing target built from scratch, waited
    for their children's contexts for up to 0.71 s when the children started with the first jobs.
    Started here, 0.18 s after the first card's pool instead of 0.47 s (medians), with those two
    checks served first (kernelkit.worker_client.first_served_address), such a build took 2.62 s
    from Snakemake's first read of the Snakefile to its last job's end, against 2.90 s (medians
    of six builds each, interleaved, H200, 2026-12-02)."""
    SANITIZER_CHILDREN_AHEAD.update(start_sanitizer_children(sanitizer_children_surely_needed(targets)))


def start_waiting_sanitizer_children(jobs):
    """Start the sanitizer's children before the jobs that will claim them (kernelkit.standby),
    unless those started while the workflow was read were as many on each card."""
    wanted = {
        card: counts
        for card, counts in sanitizer_children_wanted(jobs).items()
        if any(count > SANITIZER_CHILDREN_AHEAD.get(card, {}).get(tool, 0) for tool, count in counts.items())
    }
    start_sanitizer_children(wanted)


check_targets()
check_gpu_up_front()


def repeats_beyond_the_first(jobs):
    """Per card, the repeats beyond the first whose timing or span jobs will run: each has a
    worker pool of its own (kernelkit.worker_client.REPEATED)."""
    wanted = {}
    for job in jobs:
        if job.rule.name in ("timing", "span") and int(job.wildcards.n) > 1:
            wanted.setdefault(card_of(job.wildcards), set()).add(int(job.wildcards.n))
    return wanted


def start_repeat_pools_ahead(jobs):
    """Start the pools of the repeats beyond the first now, through the jobs' shell and card
    prefix, so that their processes make their CUDA contexts while the run's first jobs check
    kernels (kernelkit.worker_client.ContextsAhead), and wait for their jobs while this workflow
    runs (kernelkit.worker_client.keep_for_workflow).
    Not where jobs run in their own processes, in conda, or where an allocation picks the card."""
    if not POOLED or not jobs_use_this_python():
        return
    other_context = bool(config["timing"]["context_switch"])
    for card, repeats in repeats_beyond_the_first(jobs).items():
        start_on_card(card, "python -c 'from kernelkit.worker_client import start_repeat_pools; "
                            f"start_repeat_pools({os.getpid()}, {sorted(repeats)}, {other_context})'")


def before_first_job():
    """Snakemake's onstart: the DAG is built, no job has started, and dry runs never get here."""
    jobs = list(workflow.dag.needrun_jobs())
    refuse_to_overwrite_committed(jobs)
    refuse_without_gpu(jobs)
    start_waiting_sanitizer_children(jobs)
    start_repeat_pools_ahead(jobs)
    for removed in kit_records.remove_abandoned_temps(paths.path(paths.RUN_DIR, run=RUN)):
        print(f"kernelkit: removed {removed}, left by an interrupted write", file=sys.stderr)


def release_scheduler_timers():
    """Snakemake's onsuccess and onerror: the run is over, so the scheduler's pending timers are
    cancelled. Why: after every scheduling pass the scheduler arms a threading.Timer of 1 s
    (--max-jobs-per-timespan's timespan), and Python waits for the last one before it exits:
    0.68 s after the last job of one timing target built from scratch (H200, 2026-12-01)."""
    for thread in threading.enumerate():
        if isinstance(thread, threading.Timer):
            thread.cancel()


def after_failure():
    """Snakemake's onerror: each failed job's own sentence, the last line of its log, so that the
    reason is on screen and not only in results/{run}/logs/ (a job's kernelkit command ends its
    log with one sentence)."""
    release_scheduler_timers()
    # A failed group job (an allocation under SLURM) stands for the jobs in it: those that
    # left an output missing failed or never ran (a never-run job's log is empty).
    failed = [inner for job in workflow.scheduler.failed for inner in getattr(job, "jobs", [job])
              if inner is job or not all(os.path.exists(name) for name in inner.output)]
    for job in sorted(failed, key=lambda job: str(job.log)):
        for name in job.log:
            try:
                with open(name, encoding="utf-8", errors="replace") as handle:
                    lines = [line.strip() for line in handle if line.strip()]
            except OSError:
                continue
            if lines:
                print(f"kernelkit: {job.rule.name} failed ({name}): {lines[-1]}", file=sys.stderr)

