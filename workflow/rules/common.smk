import atexit
import contextlib
import functools
import gc
import io
import json
import os
import re
import subprocess
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

# Snakemake and its imports made every object so far, and they live as long as this process: a
# full collection walked them all while the workflow was read, just before guards.smk: 0.05-0.07 s
# on an H200's host, 0.14-0.16 s on a slower CPU (2026-12-02), on the path of one timing target
# built from scratch (the sanitizer's children start at the end of guards.smk). Frozen, no later
# collection walks them.
gc.freeze()

# The workflow reads its config with this checkout's kit; jobs run `python -m kernelkit`
# from the environment the README's install command set up (`pip install -e .`).
sys.path.insert(0, os.path.join(workflow.basedir, "workflow"))

from kernelkit import KitError
from kernelkit import cards as kit_cards
from kernelkit import config as kit_config
from kernelkit import layout as paths  # the result layout (not a kernel's layouts)
from kernelkit import spec as kit_spec
from kernelkit import sweeps as kit_sweeps
from kernelkit.ceilings import KINDS as CEILING_KINDS, CeilingSettings
from kernelkit.checks import CheckSettings
from kernelkit.gpulock import LOCK_DIR_VARIABLE
from kernelkit.span import SpanSettings
from kernelkit.timing import TimingSettings
from kernelkit.worker import pool_size as worker_pool_size
from kernelkit.worker_client import FIRST_SERVED_VARIABLE, IDLE_VARIABLE, POOLS_VARIABLE, PROCESSES_VARIABLE, WORKER_VARIABLE
from kernelkit.worker_client import first_served_checks
from kernelkit.worker_client import default_processes as default_worker_processes


# At exit, Python's last collections walk every object Snakemake and the workflow made: 0.3-0.45 s
# after Snakemake's last exit handler, a tenth of one timing target built from scratch (H200,
# 2026-12-01). Freezing them skips that walk; the memory goes back with the process. Whatever must
# end with the process ends explicitly before then (atexit handlers such as logging's, weakref
# finalizers); the kit's records are whole files written before the jobs end.
atexit.register(gc.freeze)


def refuse(sentence):
    """Stop Snakemake with the kit's one sentence and exit status 1, nothing around it."""
    raise SystemExit(f"kernelkit: {sentence}")


def run_cores():
    """The run's --cores; 1 where Snakemake knows none (an executor's main process, such as the
    SLURM profile's, submits jobs and runs none, and Snakemake refuses to be asked)."""
    try:
        return int(workflow.cores or 1)
    except WorkflowError:
        return 1


# `--config gpus=[0,1]` arrives as a list of strings.
config["gpus"] = kit_cards.from_command_line(config.get("gpus"))
if config["gpus"] is None:
    del config["gpus"]

try:
    # Snakemake's YAML loader keeps the last of two equal keys; the kit's reader names the line.
    for configfile_path in workflow.configfiles:
        kit_config.read_yaml(configfile_path)
    # One sentence naming the bad key and what is allowed, before Snakemake's own check.
    kit_config.validate(config, kernels_root=kit_spec.kernels_dir())
except KitError as error:
    refuse(str(error))
# The schema holds every default; from here on each key the schema defaults is set.
validate(config, "../schemas/config.schema.yaml", set_default=True)

# Whether this command may rewrite a committed run: a property of the command, not of the
# run, so it stays out of the config that the run records (and hashes).
OVERWRITE = config.pop("overwrite")
RUN = config["run"]
REPEATS = config["timing"]["repeats"]
CACHES = kit_config.caches(config)
SPAN_KERNELS = kit_config.span_kernels(config)
SPAN_REPEATS = kit_config.span_repeats(config)
KERNELS = config["kernels"]
SPECS = {name: kit_spec.load(name) for name in KERNELS}
# Configured layouts, then each selected sweep's valid points (`tiled@bm=64,bn=128`): every one
# gets its own correctness and timing targets.
LAYOUTS = {name: kit_config.kernel_layouts(config, name) for name in KERNELS}
# One settings param per GPU rule: changing a setting reruns exactly the targets that use it.
TIMING_SETTINGS = TimingSettings.json_from_config(config)
SPAN_SETTINGS = SpanSettings.json_from_config(config)
CEILING_SETTINGS = CeilingSettings.json_from_config(config)
CHECK_SETTINGS = CheckSettings.json_from_config(config)
# The lock directory changes no result, so it is kept out of every param (moving it reruns
# nothing): the jobs get it through the environment, where a variable already set wins.
if config["gpu_lock"]["dir"]:
    os.environ.setdefault(LOCK_DIR_VARIABLE, config["gpu_lock"]["dir"])
# Nor does the worker pool (kernelkit.worker): it only saves each GPU job its start-up.
os.environ.setdefault(WORKER_VARIABLE, "1" if config["worker"]["enabled"] else "0")
os.environ.setdefault(PROCESSES_VARIABLE, str(config["worker"]["processes"] or default_worker_processes(run_cores())))
os.environ.setdefault(IDLE_VARIABLE, str(config["worker"]["idle_exit_s"]))
# One pool per repeat (kernelkit.worker_client.REPEATED), sharing the host's memory.
os.environ.setdefault(POOLS_VARIABLE, str(config["timing"]["repeats"]))
# Per kernel, the negative controls whose bug only threads show: racecheck must catch them
# (kernelkit.controls), so each job waits on a compute-sanitizer child.
RACECHECK_CONTROLS = {
    kernel: [control for control, mutation in SPECS[kernel].mutations.items() if mutation.needs_gpu_to_show]
    for kernel in KERNELS
}
# Those controls and the sanitizer's jobs are served first by their pool
# (kernelkit.worker_client.first_served_address): the jobs inherit this process's environment, so
# no rule's command or params change, and nothing reruns for it.
os.environ[FIRST_SERVED_VARIABLE] = first_served_checks(
    (kernel, control) for kernel, controls in RACECHECK_CONTROLS.items() for control in controls
)


def committed_files(run_dir):
    """The files of a run directory that git tracks: committed evidence."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--", run_dir],
            cwd=workflow.basedir,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return listed.stdout.split() if listed.returncode == 0 else []


# A committed run is evidence, taken as it is: a checkout gives its files arbitrary times, so
# file times must not make Snakemake redo it (inputs of its GPU rules are ancient()). What is
# missing still needs the GPU, and guards.smk refuses that unless overwrite is given.
FROZEN = bool(committed_files(paths.path(paths.RUN_DIR, run=RUN))) and not OVERWRITE


# Options after which Snakemake runs no job: they get no GPU check.
NO_JOB_OPTIONS = ("dryrun", "lint", "list_rules", "list_target_rules", "unlock", "report", "dag",
                  "rulegraph", "filegraph", "d3dag", "summary", "detailed_summary", "touch",
                  "cleanup_metadata", "cleanup_shadow", "list_changes", "list_input_changes",
                  "list_params_changes", "list_untracked", "list_conda_envs", "conda_create_envs_only",
                  "conda_cleanup_envs", "containerize", "generate_unit_tests", "print_compilation",
                  "export_cwl", "delete_all_output", "delete_temp_output", "archive")


@functools.lru_cache(maxsize=None)
def command_line():
    """The targets of the `snakemake` command that reads this Snakefile and whether it runs jobs
    on this machine, or (None, None) where there is no command to read (a job's own process,
    Snakemake run as a library). Snakemake hands neither to the Snakefile while it is read, so
    the command line is parsed again by Snakemake's own parser, profiles included (the SLURM
    profile names its executor there), with the parser's messages silenced: Snakemake's own
    parse of the same line has printed them already."""
    if not workflow.is_main_process or os.path.basename(sys.argv[0]) != "snakemake":
        return None, None
    from snakemake.cli import parse_args

    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            _, args = parse_args(sys.argv[1:])
    except (Exception, SystemExit):
        return None, None
    local = getattr(args, "executor", None) in (None, "local")
    runs_jobs = local and not any(getattr(args, name, None) for name in NO_JOB_OPTIONS)
    return tuple(args.targets or []), runs_jobs


def template_pattern(template):
    """A result template (`results/{run}/...`) as a pattern matching its paths, each wildcard one name."""
    body = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template))
    return re.compile(f"^{body}$")


GPU_RECORDS = [paths.ENVIRONMENT, paths.CEILING, paths.CARD_ENVIRONMENT, paths.CARD_CEILING, paths.CORRECTNESS, paths.CONTROL, paths.TIMING,
               paths.SPAN, paths.SANITIZER, paths.PROFILE]


def target_names(targets):
    """The command's targets, each path normalised; `all` (the default target) where it names none."""
    return [os.path.normpath(t) for t in targets] if targets else ["all"]


def gpu_surely_needed(targets):
    """Whether the command must run a GPU job, read from the targets and the files alone: the
    run's environment record is missing (every target of the run needs it), or a named GPU
    record is. Anything less certain is left to the check before the first job."""
    run_dir = paths.path(paths.RUN_DIR, run=RUN)
    report_dir = paths.path(paths.REPORT_DIR, run=RUN)
    names = target_names(targets)
    if not os.path.exists(paths.path(paths.ENVIRONMENT, run=RUN)) and any(
        name == "all" or name.startswith((f"{run_dir}/", f"{report_dir}/")) for name in names
    ):
        return True
    return any(
        name.startswith(f"{run_dir}/") and template_pattern(template).match(name) and not os.path.exists(name)
        for name in names
        for template in GPU_RECORDS
    )


def start_on_card(card, command):
    """Start `command` (a kit process that starts others and leaves) through the shell the card's
    jobs run in, with its card prefix, so it has their card and environment; nothing waits for it."""
    subprocess.Popen(
        f"{kit_cards.pin(card)}exec {command}",
        shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def start_worker_pools(cards):
    """Start the cards' first worker pools (kernelkit.worker_client.start_pool) through the shell
    their jobs run in, with each card's prefix, so that a pool gets the name its jobs look for;
    a pool imports while Snakemake goes on reading and planning, and waits for jobs while this
    process runs (the report's jobs at the end of a full run find it there). Only for a command
    that surely runs GPU jobs of this run here and may: a dry run, a report of records already
    there or a command refused for a committed run starts none (a pool nobody uses idles for
    worker.idle_exit_s)."""
    targets, runs_jobs = command_line()
    if (targets is None or not runs_jobs or FROZEN or os.environ[WORKER_VARIABLE] != "1"
            or not gpu_surely_needed(targets)):
        return
    for gpu in cards:
        start_on_card(gpu, f"python -c 'from kernelkit.worker_client import start_pool; start_pool(workflow_pid={os.getpid()})'")


# The first card's pool starts here, before NVML counts the cards and the rest of the workflow is
# read (guards.smk starts the other cards' pools): its processes' imports are the first thing
# one timing target built from scratch waits for. Started after the cards were counted, the
# pool began 0.21-0.38 s before the first job and its processes were ready 0.50-0.94 s after it
# (H200, 2026-12-01).
try:
    FIRST_CARD = kit_cards.first_card(config.get("gpus")) if workflow.local_exec else None
except KitError:
    FIRST_CARD = None  # kit_cards.discover below refuses the setting in its own sentence
if FIRST_CARD is not None:
    start_worker_pools([FIRST_CARD])


PLAN = {target.key: target for target in kit_config.timing_plan(config)}

# Several GPUs on one host (README, "Several GPUs"): each kernel/shape runs on one card, fixed
# before the run. Under an executor that allocates GPUs itself (SLURM), or with `gpus: allocated`,
# the allocation's CUDA_VISIBLE_DEVICES stands and GPUS is None.
try:
    GPUS = kit_cards.discover(config.get("gpus"))
except KitError as error:
    raise WorkflowError(str(error)) from None
if not workflow.local_exec:
    GPUS = None
EXPECTED_WORK = kit_cards.expected_work(config, SPECS)
CARD_OF_SHAPE = kit_cards.assign(EXPECTED_WORK, GPUS) if GPUS else {}
CARD_OF_CHECKS = kit_cards.check_cards(config, SPECS, GPUS) if GPUS else {}
GATE_RANK = kit_cards.kernels_by_work(EXPECTED_WORK)
# Each card's pool runs a bounded number of its jobs at once (kernelkit.cards.pool_job_bound
# says why); `--resources gpu_<i>_pool=N` sets another bound.
POOLED = bool(GPUS) and os.environ[WORKER_VARIABLE] == "1"
if POOLED:
    for gpu in GPUS:
        if kit_cards.pool_resource(gpu) not in workflow.global_resources:
            workflow.register_resource(
                kit_cards.pool_resource(gpu),
                kit_cards.pool_job_bound(worker_pool_size()),
            )


def frozen(inputs):
    """Inputs as they are, or, in a committed run, marked ancient so their times trigger nothing."""
    if not FROZEN:
        return inputs
    if isinstance(inputs, dict):
        return {key: frozen(value) for key, value in inputs.items()}
    if isinstance(inputs, list):
        return [ancient(name) for name in inputs]
    return ancient(inputs)


wildcard_constraints:
    run=re.escape(RUN),
    # Loose on purpose: names outside the config reach the input functions below, which
    # answer with one sentence naming what is allowed instead of "No rule to produce".
    kernel=r"[A-Za-z0-9_]+",
    # A sweep point's file-safe name: base@param=value,... (no glob characters in paths).
    layout=r"[A-Za-z0-9_]+(@[A-Za-z0-9_]+=[A-Za-z0-9_.+-]+(,[A-Za-z0-9_]+=[A-Za-z0-9_.+-]+)*)?",
    control=r"[A-Za-z0-9_]+",
    shape=r"[^/]+",
    n=r"[1-9][0-9]*",
    gpu=r"[0-9]+",
    view=r"timing|cold",
    ceiling="|".join(CEILING_KINDS),
    a=r"(?:(?!__vs__)[A-Za-z0-9._-])+",
    b=r"(?:(?!__vs__)[A-Za-z0-9._-])+",


# Priorities only order jobs that are ready together, and a job's priority is not passed to
# the jobs it needs: the environment and the config it records both go first, so that a
# machine without a GPU fails there, with its own message, before anything else runs.
ENVIRONMENT_PRIORITY = 2**40
# Ceilings run right after the environment, before any kernel: same GPU, clocks as cold as the run's start.
CEILING_PRIORITY = 2**39
# Every correctness target and negative control runs before any timing. Were they below the timing
# priorities, the greedy scheduler would time one kernel's targets, both repeats, as soon as that
# kernel's checks passed, before checking the next kernel: the runs would be grouped by kernel
# instead of following the shuffled plan (the full run h200-full, retired and kept in git history,
# ran that way).
CHECK_PRIORITY = 2**38
# Among the checks, the gates start first: the negative controls, which every timing of their
# kernel waits for, and the hand-written layouts' correctness and sanitizer records; a library
# layout's correctness (Torch alone takes seconds to import) gates only that layout. On two H200s
# the rmsnorm controls started 27.9 s into the run, behind library correctness jobs queued for the
# same workers.
GATE_PRIORITY = CHECK_PRIORITY + 1


def gate_priority(kernel, racecheck=False):
    """A gate's priority: the kernel with the most expected timing work opens its gates first, and
    within a kernel a control that racecheck may have to catch (seconds of compute-sanitizer) goes
    before its other gates. With equal priorities, rmsnorm's `barrier` control, the slowest gate of
    the kernel with most timing work, started 12.7 s into a two-H200 run, ran 16.9 s beside other
    kernels' timings, and held all of rmsnorm's timings back until 29.5 s (h200-w2x2b, retired)."""
    return GATE_PRIORITY + 2 * GATE_RANK[kernel] + int(racecheck)


def control_priority(wildcards):
    kernel = checked_kernel(wildcards)  # an unknown kernel or control: one sentence
    return gate_priority(kernel, racecheck=checked_control(wildcards) in RACECHECK_CONTROLS[kernel])


def sanitizer_priority(wildcards):
    sanitized_layouts(wildcards)  # refuses a kernel without hand-written layouts with one sentence
    return gate_priority(wildcards.kernel)


def checked_kernel(wildcards):
    if wildcards.kernel not in KERNELS:
        raise WorkflowError(
            f"kernel '{wildcards.kernel}' is not configured; allowed: {', '.join(KERNELS)}"
        )
    return wildcards.kernel


def kernel_sources(wildcards):
    """A kernel's whole folder: editing any of its files reruns exactly its targets. The CPU
    emulation is the test suite's, never run on the GPU, so editing it reruns nothing."""
    folder = SPECS[checked_kernel(wildcards)].folder
    return frozen(
        sorted(
            os.path.relpath(path)
            for path in folder.iterdir()
            if path.is_file() and path.name != kit_spec.EMULATION_FILE
        )
    )


def checked_layout(wildcards):
    layouts = LAYOUTS[checked_kernel(wildcards)]
    if wildcards.layout not in layouts:
        raise WorkflowError(
            f"layout '{wildcards.layout}' is not configured for kernel '{wildcards.kernel}'; "
            f"allowed: {', '.join(layouts)}"
        )
    return wildcards.layout


def correctness_files(kernel):
    return frozen(
        [
            paths.path(paths.CORRECTNESS, run=RUN, kernel=kernel, layout=name)
            for name in LAYOUTS[kernel]
        ]
    )


def correctness_priority(wildcards):
    layout = checked_layout(wildcards)  # refuses an unknown kernel or layout with one sentence
    if SPECS[wildcards.kernel].is_baseline(layout):
        return CHECK_PRIORITY
    return gate_priority(wildcards.kernel)


def hand_written_layouts(kernel):
    """Negative controls mutate the CUDA source, so they run every hand-written layout of the
    spec (a control aimed at one layout must be caught even when only another is configured),
    and one point per selected sweep (kernelkit.sweeps.control_layouts says why only one).
    """
    return kit_sweeps.control_layouts(SPECS[kernel], KERNELS[kernel])


def control_files(kernel):
    """The control records a kernel's targets need: one per control of its spec; in a committed
    run, the ones it ran (a control added to the kernel folder later is not asked of old evidence,
    which would otherwise need the GPU again just to be reported)."""
    files = [
        paths.path(paths.CONTROL, run=RUN, kernel=kernel, control=control)
        for control in SPECS[kernel].mutations
    ]
    if FROZEN:
        files = [name for name in files if os.path.exists(name)]
    return frozen(files)


def checked_control(wildcards):
    controls = list(SPECS[wildcards.kernel].mutations)
    if wildcards.control not in controls:
        raise WorkflowError(
            f"negative control '{wildcards.control}' is not defined for kernel '{wildcards.kernel}'; "
            f"allowed: {', '.join(controls)}"
        )
    return wildcards.control


def timed_target(wildcards):
    """The plan entry of a timing target, or one sentence saying what is allowed."""
    checked_shape(wildcards)
    checked_layout(wildcards)
    repeat = int(wildcards.n)
    if repeat > REPEATS:
        raise WorkflowError(f"repeat {repeat} is beyond config key 'timing.repeats' ({REPEATS})")
    cache = "cold" if wildcards.view == "cold" else "warm"
    if cache not in CACHES:
        raise WorkflowError(
            f"{cache}-cache targets are not configured; config key 'timing.cache' allows: {', '.join(CACHES)}"
        )
    return PLAN[(wildcards.kernel, wildcards.shape, wildcards.layout, repeat, cache)]


def timing_inputs(wildcards):
    timed_target(wildcards)
    return {
        "sources": kernel_sources(wildcards),
        "correctness": frozen(
            paths.path(paths.CORRECTNESS, run=RUN, kernel=wildcards.kernel, layout=wildcards.layout)
        ),
        "controls": control_files(wildcards.kernel),
        "sanitizer": layout_sanitizer_files(wildcards.kernel, [wildcards.layout]),
    }


def layout_sanitizer_files(kernel, layouts):
    """The sanitizer record that gates these layouts' timing: the kernel's, when any of them is
    hand-written and `sanitize` is on."""
    hand_written = [name for name in layouts if not SPECS[kernel].is_baseline(name)]
    if not config["sanitize"] or not hand_written:
        return []
    # A run made by an earlier kit holds one record per layout: its report and timings read those,
    # and asking for the kernel's record instead would send its report to the GPU.
    per_layout = [paths.path(paths.SANITIZER_PER_LAYOUT, run=RUN, kernel=kernel, layout=name) for name in hand_written]
    if all(os.path.exists(name) for name in per_layout):
        return per_layout
    return [paths.path(paths.SANITIZER, run=RUN, kernel=kernel)]


def sanitized_layouts(wildcards):
    """The configured hand-written layouts of a kernel, which its one sanitizer job checks together
    (kernelkit.tools.sanitize says why)."""
    kernel = checked_kernel(wildcards)
    layouts = [name for name in LAYOUTS[kernel] if not SPECS[kernel].is_baseline(name)]
    if not layouts:
        raise WorkflowError(
            f"kernel '{kernel}' has no hand-written layout configured, so it has no sanitizer record; "
            f"configured: {', '.join(LAYOUTS[kernel])}"
        )
    return layouts


def checked_shape(wildcards):
    try:
        SPECS[checked_kernel(wildcards)].parse_shape(wildcards.shape)
    except KitError as error:
        raise WorkflowError(str(error)) from None
    shapes = KERNELS[wildcards.kernel]["shapes"]
    if wildcards.shape not in shapes:
        raise WorkflowError(
            f"shape '{wildcards.shape}' is not configured for kernel '{wildcards.kernel}'; allowed: {', '.join(shapes)}"
        )
    return wildcards.shape


def profile_inputs(wildcards):
    """Counters only for a configuration whose checks passed and whose timing is done, so the
    profiler never runs beside a timed target."""
    checked_shape(wildcards)
    checked_layout(wildcards)
    return frozen({
        "correctness": paths.path(
            paths.CORRECTNESS, run=RUN, kernel=wildcards.kernel, layout=wildcards.layout
        ),
        "timing": [
            paths.path(
                paths.TIMING,
                run=RUN,
                view=paths.timing_view("warm"),
                kernel=wildcards.kernel,
                shape=wildcards.shape,
                layout=wildcards.layout,
                n=repeat,
            )
            for repeat in range(1, REPEATS + 1)
            if "warm" in CACHES
        ],
    })


def checked_span(wildcards):
    if checked_kernel(wildcards) not in SPAN_KERNELS:
        raise WorkflowError(
            f"kernel '{wildcards.kernel}' has no span targets; config key 'span.kernels' allows: "
            f"{', '.join(SPAN_KERNELS) or '(none: the config has no span key)'}"
        )
    checked_shape(wildcards)
    repeat = int(wildcards.n)
    if repeat > SPAN_REPEATS:
        raise WorkflowError(
            f"span repeat {repeat} is beyond config key 'span.repeats' ({SPAN_REPEATS})"
        )
    return repeat


def span_inputs(wildcards):
    checked_span(wildcards)
    return {
        "sources": kernel_sources(wildcards),
        "correctness": correctness_files(wildcards.kernel),
        "controls": control_files(wildcards.kernel),
        "sanitizer": layout_sanitizer_files(wildcards.kernel, LAYOUTS[wildcards.kernel]),
    }


def span_arguments(wildcards, input):
    """--layout L --correctness F pairs, in the configured layout order."""
    layouts = LAYOUTS[wildcards.kernel]
    return " ".join(
        f"--layout {name} --correctness {path}" for name, path in zip(layouts, input.correctness)
    )


def span_priority(wildcards):
    """After every timed target of the same repeat, before any of the next."""
    return (REPEATS - checked_span(wildcards)) * 2**32


def span_files(kernel=None):
    return [
        paths.path(paths.SPAN, run=RUN, kernel=name, shape=shape, n=repeat)
        for name in SPAN_KERNELS
        if kernel in (None, name)
        for shape in KERNELS[name]["shapes"]
        for repeat in range(1, SPAN_REPEATS + 1)
    ]


def figure_inputs(wildcards):
    """The kernel's warm timings, or its cold ones when only cold ones are configured."""
    return timing_files(checked_kernel(wildcards), CACHES[0])


def timing_files(kernel=None, cache="warm"):
    return [
        paths.path(
            paths.TIMING,
            run=RUN,
            view=paths.timing_view(cache),
            kernel=t.kernel,
            shape=t.shape,
            layout=t.layout,
            n=t.repeat,
        )
        for t in PLAN.values()
        if kernel in (None, t.kernel) and t.cache == cache
    ]


def sanitizer_files():
    return [name for kernel in KERNELS for name in layout_sanitizer_files(kernel, LAYOUTS[kernel])]


def profile_files():
    if not config["profile"]:
        return []
    return [
        paths.path(paths.PROFILE, run=RUN, kernel=kernel, shape=shape, layout=name)
        for kernel, entry in KERNELS.items()
        for shape in entry["shapes"]
        for name in LAYOUTS[kernel]
    ]


def report_kernel_files():
    """What the report reads from the kernel folders: the specs' byte counts and the published claims."""
    return [
        path
        for kernel in KERNELS
        for path in (f"kernels/{kernel}/spec.py", f"kernels/{kernel}/claims.yaml")
        if os.path.exists(path)
    ]


def ceiling_kinds():
    """The L2 copy only where the config keeps it (ceilings.l2)."""
    return [kind for kind in CEILING_KINDS if kind != "l2" or config["ceilings"]["l2"]]


def ceiling_files():
    """The run's own limits, measured on its first card."""
    return [paths.path(paths.CEILING, run=RUN, ceiling=kind) for kind in ceiling_kinds()]


def all_targets():
    targets = [paths.path(paths.ENVIRONMENT, run=RUN), *ceiling_files(), *card_record_files()]
    for kernel in KERNELS:
        targets += correctness_files(kernel) + control_files(kernel)
    return (
        targets
        + timing_files()
        + timing_files(cache="cold")
        + span_files()
        + sanitizer_files()
        + profile_files()
        + [
            paths.path(paths.SUMMARY, run=RUN),
            paths.path(paths.REPORT_MARKDOWN, run=RUN),
            paths.path(paths.REPORT_HTML, run=RUN),
        ]
    )


def card_of(wildcards):
    """The physical GPU a job runs on: its kernel/shape's card; a kernel's checks go to the card
    cards.check_cards gives them; a per-GPU job (environment, ceilings) names its card. None: allocated."""
    if not GPUS:
        return None
    if "gpu" in wildcards.keys():
        return checked_card(wildcards)
    if "kernel" not in wildcards.keys():
        return GPUS[0]
    if "shape" in wildcards.keys():
        return CARD_OF_SHAPE[(checked_kernel(wildcards), checked_shape(wildcards))]
    return CARD_OF_CHECKS[checked_kernel(wildcards)]


def pin(wildcards):
    """Shell prefix giving the job its one card (empty where the allocation does)."""
    return kit_cards.pin(card_of(wildcards))


def pool_pin(wildcards):
    """The report's stages use no GPU; given the first card's prefix, their jobs join that card's
    worker pool (kernelkit.worker), whose imports are warm by the time they run."""
    return kit_cards.pin(GPUS[0] if GPUS else None)


def card_resources(pooled=False):
    """gpu_<i>=1 on the job's card i and 0 on the others, for every GPU rule's resources:, so that
    `--resources gpu_<i>=N` can bound each card's jobs. None where the allocation picks the card.
    `pooled`: a rule whose jobs run in the card's worker pool also takes one of its gpu_<i>_pool."""
    on_card = {
        kit_cards.resource(gpu): (lambda wildcards, gpu=gpu: int(card_of(wildcards) == gpu))
        for gpu in GPUS or []
    }
    if pooled and POOLED:
        on_card.update(
            {
                kit_cards.pool_resource(gpu): on_card[kit_cards.resource(gpu)]
                for gpu in GPUS
            }
        )
    return on_card


def checked_card(wildcards):
    """A further card of the run (`results/{run}/gpus/{i}/...`); the first card's records are the run's own."""
    further = (GPUS or [])[1:]
    if int(wildcards.gpu) not in further:
        raise WorkflowError(
            f"card {int(wildcards.gpu)} is not a further card of this run (config key 'gpus'; the first card's "
            f"records are results/{RUN}/environment.json and ceilings/); allowed: {', '.join(map(str, further)) or '(none)'}"
        )
    if hasattr(wildcards, "ceiling") and wildcards.ceiling not in ceiling_kinds():
        raise WorkflowError(
            f"ceiling '{wildcards.ceiling}' is not configured; allowed: {', '.join(ceiling_kinds())}"
        )
    return int(wildcards.gpu)


def card_record_files():
    """Environment and ceilings of every card after the first (the first's are the run's own)."""
    return [
        paths.path(template, run=RUN, gpu=gpu, ceiling=kind)
        for gpu in (GPUS or [])[1:]
        for template, kind in [(paths.CARD_ENVIRONMENT, None)]
        + [(paths.CARD_CEILING, kind) for kind in ceiling_kinds()]
    ]
