# Config validation, the target plan (kernelkit.plan) and the input functions of the rules.
# Nothing here starts a process: reading the workflow only reads files.
import json
import os
import re
import sys

from snakemake.exceptions import WorkflowError

# The workflow reads its config with this checkout's kit; jobs run the installed `python -m kernelkit`.
sys.path.insert(0, os.path.join(workflow.basedir, "workflow"))

from kernelkit import KitError
from kernelkit import cards as kit_cards
from kernelkit import config as kit_config
from kernelkit import layout as paths  # the result layout (not a kernel's layouts)
from kernelkit import spec as kit_spec
from kernelkit.ceilings import CeilingSettings
from kernelkit.cases import CheckSettings
from kernelkit.gpulock import LOCK_DIR_VARIABLE
from kernelkit.plan import CEILING_PRIORITY, CHECK_PRIORITY, ENVIRONMENT_PRIORITY, Plan, committed
from kernelkit.span import SpanSettings
from kernelkit.timing import TimingSettings


def refuse(sentence):
    """Stop Snakemake with the kit's one sentence, nothing around it."""
    raise SystemExit(f"kernelkit: {sentence}")


# `--config gpus=[0,1]` arrives as a list of strings.
config["gpus"] = kit_cards.from_command_line(config.get("gpus"))
if config["gpus"] is None:
    del config["gpus"]
try:
    # Snakemake's YAML loader keeps the last of two equal keys; the kit's reader names the line.
    for configfile_path in workflow.configfiles:
        kit_config.read_yaml(configfile_path)
    # One sentence naming the bad key and what is allowed; from here on each key the schema defaults is set.
    config.update(kit_config.validate(config))
except KitError as error:
    refuse(str(error))

# Overwriting is a property of the command, not of the run: it stays out of the recorded config.
OVERWRITE = config.pop("overwrite")
RUN = config["run"]
KERNELS = config["kernels"]
SPECS = {name: kit_spec.load(name) for name in KERNELS}
PLAN = Plan(config, SPECS)
LAYOUTS = PLAN.layouts
# The lock directory changes no result, so it is no param: jobs get it through the environment.
if config["gpu_lock"]["dir"]:
    os.environ.setdefault(LOCK_DIR_VARIABLE, config["gpu_lock"]["dir"])
RUN_DIR = paths.path(paths.RUN_DIR, run=RUN)
if os.path.exists(RUN_DIR) and not os.path.isdir(RUN_DIR):
    refuse(f"config key 'run' names '{RUN}', but results/{RUN} is a file, not a run folder; name another run")


# A committed run is evidence, taken as it is: a checkout gives its files arbitrary times, so its
# inputs are ancient(); a GPU job in it is refused before the first starts unless overwrite is given.
FROZEN = committed(RUN_DIR, workflow.basedir) and not OVERWRITE
if FROZEN:
    print(f"kernelkit: run '{RUN}' is committed evidence: its records are read as they are, and a GPU job in it "
          "is refused before it starts (--config run=NAME for a new run)", file=sys.stderr)

# Several GPUs: each kernel/shape runs on one card fixed before the run; None where the executor picks.
try:
    GPUS = kit_cards.discover(config.get("gpus")) if workflow.local_exec else None
except KitError as error:
    refuse(str(error))
# The targets a command names, checked against the plan before Snakemake looks for rules.
for argument in sys.argv[1:]:
    if re.search(r"^(results/|reports/|\.\./|/).*\.(json|md|html|svg|csv)$", argument):
        problem = PLAN.target_problem(argument, GPUS)
        if problem:
            refuse(problem)
EXPECTED_WORK = kit_cards.expected_work(PLAN)
CARD_OF_SHAPE = kit_cards.assign(EXPECTED_WORK, GPUS) if GPUS else {}
CARD_OF_CHECKS = kit_cards.check_cards(PLAN, GPUS) if GPUS else {}
# The kernel with the most expected timing work opens its gates first.
CHECK_RANK = kit_cards.kernels_by_work(EXPECTED_WORK)


def frozen(inputs):
    """Inputs as they are, or, in a committed run, marked ancient so their times trigger nothing."""
    return [ancient(name) for name in inputs] if FROZEN else inputs


def recorded(files):
    """What a reader of the run needs of these records: all, or, in a committed run, those it holds
    (today's config may name records it never made)."""
    return [ancient(name) for name in files if os.path.exists(name)] if FROZEN else files


wildcard_constraints:
    run=re.escape(RUN),
    shape=r"[^/]+",
    n=r"[1-9][0-9]*",
    gpu=r"[0-9]+",
    view=r"timing|cold",
    ceiling="|".join(paths.CEILING_KINDS),
    a=r"(?:(?!__vs__)[A-Za-z0-9._-])+",
    b=r"(?:(?!__vs__)[A-Za-z0-9._-])+",


def kernel_sources(kernel):
    """A kernel's folder but its CPU emulation (never run on the GPU): editing a file reruns its targets."""
    folder = SPECS[kernel].folder
    return frozen(sorted(os.path.relpath(path) for path in folder.iterdir()
                         if path.is_file() and path.name != kit_spec.EMULATION_FILE))


def checks_of(kernel):
    """Every record that gates a kernel's timing (kernelkit.cases.require_checked reads them all)."""
    return {"sources": kernel_sources(kernel), "correctness": frozen(PLAN.correctness_files(kernel)),
            "controls": frozen(PLAN.control_files(kernel)), "sanitizer": frozen(PLAN.sanitizer_files(kernel))}


def checked(template, **part):
    """The wildcards of a job, judged by the plan as it judges a named target (one sentence)."""
    try:
        PLAN.check_parts({key: str(value) for key, value in part.items()}, template, GPUS)
    except KitError as error:
        raise WorkflowError(str(error)) from None


def timing_job(kernel, wildcards):
    """The plan's timing job of a target, or one sentence saying what is allowed."""
    checked(paths.TIMING, kernel=kernel, shape=wildcards.shape, n=wildcards.n, view=wildcards.view)
    cache = "cold" if wildcards.view == "cold" else "warm"
    return next(job for job in PLAN.timing_jobs()
                if (job.kernel, job.shape, job.repeat, job.cache) == (kernel, wildcards.shape, int(wildcards.n), cache))


def checked_span(wildcards):
    checked(paths.SPAN, kernel=wildcards.kernel, shape=wildcards.shape, n=wildcards.n)
    return int(wildcards.n)


def checked_kernel(wildcards):
    checked(paths.CORRECTNESS, kernel=wildcards.kernel)
    return wildcards.kernel


def profile_inputs(wildcards):
    """Counters only after the configuration's timing, so the profiler never runs beside it."""
    kernel = wildcards.kernel
    checked(paths.PROFILE, kernel=kernel, shape=wildcards.shape)
    return frozen([name for name in PLAN.timing_files(kernel) if f"/{wildcards.shape}/{wildcards.layout}/" in name])


def card_of(kernel, wildcards):
    """The physical GPU a job runs on (kernel/shape, a kernel's checks, or a named card); None where
    the allocation picks it."""
    if not GPUS:
        return None
    kernel = kernel or getattr(wildcards, "kernel", None)
    shape, gpu = getattr(wildcards, "shape", None), getattr(wildcards, "gpu", None)
    if gpu is not None:
        checked(paths.CARD_DIR, gpu=gpu)
        return int(gpu)
    if kernel is None:
        return GPUS[0]
    if shape is not None:
        return CARD_OF_SHAPE[(kernel, shape)]
    return CARD_OF_CHECKS[kernel]


def pin(kernel=None):
    """A params function: the shell prefix giving a job its one card (empty where the allocation does)."""
    return lambda wildcards: kit_cards.pin(card_of(kernel, wildcards))


def card_resources(kernel=None):
    """gpu_<i>=1 on the job's card i and 0 on the others, so `--resources gpu_<i>=N` bounds each card."""
    return {f"gpu_{gpu}": lambda wildcards, gpu=gpu: int(card_of(kernel, wildcards) == gpu)
            for gpu in GPUS or []}


def diff_side(run):
    """What a diff needs of one run: this run's summary (built first), else nothing."""
    return [paths.path(paths.SUMMARY, run=run)] if run == RUN else []


def report_kernel_files():
    """What the report reads from the kernel folders: the specs' byte counts and the published claims."""
    return [path for kernel in KERNELS for path in (f"kernels/{kernel}/spec.py", f"kernels/{kernel}/claims.yaml")
            if os.path.exists(path)]
