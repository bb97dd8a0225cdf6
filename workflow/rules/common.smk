import json
import os
import re
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

# The workflow reads its config with this checkout's kit; jobs run `python -m kernelkit`
# from the environment the README's install command set up (`pip install -e .`).
sys.path.insert(0, os.path.join(workflow.basedir, "workflow"))

from kernelkit import KitError
from kernelkit import cards as kit_cards
from kernelkit import config as kit_config
from kernelkit import layout as paths  # the result layout (not a kernel's layouts)
from kernelkit import spec as kit_spec
from kernelkit.ceilings import KINDS as CEILING_KINDS, CeilingSettings
from kernelkit.span import SpanSettings
from kernelkit.timing import TimingSettings

# `--config gpus=[0,1]` arrives as a list of strings.
config["gpus"] = kit_cards.from_command_line(config.get("gpus"))
if config["gpus"] is None:
    del config["gpus"]

try:
    # One sentence naming the bad key and what is allowed, before Snakemake's own check.
    kit_config.validate(config, kernels_root=kit_spec.kernels_dir())
except KitError as error:
    raise WorkflowError(str(error)) from None
# The schema holds every default; from here on each key the schema defaults is set.
validate(config, "../schemas/config.schema.yaml", set_default=True)

RUN = config["run"]
REPEATS = config["timing"]["repeats"]
CACHES = kit_config.caches(config)
SPAN_KERNELS = kit_config.span_kernels(config)
SPAN_REPEATS = kit_config.span_repeats(config)
KERNELS = config["kernels"]
SPECS = {name: kit_spec.load(name) for name in KERNELS}
# One settings param per GPU rule: changing a setting reruns exactly the targets that use it.
TIMING_SETTINGS = TimingSettings.json_from_config(config)
SPAN_SETTINGS = SpanSettings.json_from_config(config)
CEILING_SETTINGS = CeilingSettings.json_from_config(config)
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
CARD_OF_SHAPE = kit_cards.assign(kit_cards.expected_work(config, SPECS), GPUS) if GPUS else {}


wildcard_constraints:
    run=re.escape(RUN),
    # Loose on purpose: names outside the config reach the input functions below, which
    # answer with one sentence naming what is allowed instead of "No rule to produce".
    kernel=r"[A-Za-z0-9_]+",
    layout=r"[A-Za-z0-9_]+",
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
# instead of following the shuffled plan (the committed run h200-full ran that way).
CHECK_PRIORITY = 2**38


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
    return sorted(
        os.path.relpath(path)
        for path in folder.iterdir()
        if path.is_file() and path.name != kit_spec.EMULATION_FILE
    )


def checked_layout(wildcards):
    layouts = KERNELS[wildcards.kernel]["layouts"]
    if wildcards.layout not in layouts:
        raise WorkflowError(
            f"layout '{wildcards.layout}' is not configured for kernel '{wildcards.kernel}'; "
            f"allowed: {', '.join(layouts)}"
        )
    return wildcards.layout


def correctness_files(kernel):
    return [
        paths.path(paths.CORRECTNESS, run=RUN, kernel=kernel, layout=name)
        for name in KERNELS[kernel]["layouts"]
    ]


def hand_written_layouts(kernel):
    """Negative controls mutate the CUDA source, so they run every hand-written layout of the
    spec (a control aimed at one layout must be caught even when only another is configured).
    """
    return list(SPECS[kernel].layouts)


def control_files(kernel):
    return [
        paths.path(paths.CONTROL, run=RUN, kernel=kernel, control=control)
        for control in SPECS[kernel].mutations
    ]


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
        "correctness": paths.path(
            paths.CORRECTNESS, run=RUN, kernel=wildcards.kernel, layout=wildcards.layout
        ),
        "controls": control_files(wildcards.kernel),
    }


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
    return {
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
    }


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
    }


def span_arguments(wildcards, input):
    """--layout L --correctness F pairs, in the configured layout order."""
    layouts = KERNELS[wildcards.kernel]["layouts"]
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
    if not config["sanitize"]:
        return []
    return [
        paths.path(paths.SANITIZER, run=RUN, kernel=kernel, layout=name)
        for kernel, entry in KERNELS.items()
        for name in entry["layouts"]
        if not SPECS[kernel].is_baseline(name)
    ]


def profile_files():
    if not config["profile"]:
        return []
    return [
        paths.path(paths.PROFILE, run=RUN, kernel=kernel, shape=shape, layout=name)
        for kernel, entry in KERNELS.items()
        for shape in entry["shapes"]
        for name in entry["layouts"]
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
    of its first shape; a per-GPU job (environment, ceilings) names its card. None: allocated."""
    if not GPUS:
        return None
    if "gpu" in wildcards.keys():
        return int(wildcards.gpu)
    if "kernel" not in wildcards.keys():
        return GPUS[0]
    if "shape" in wildcards.keys():
        return CARD_OF_SHAPE[(checked_kernel(wildcards), checked_shape(wildcards))]
    return kit_cards.kernel_card(config, CARD_OF_SHAPE, checked_kernel(wildcards))


def pin(wildcards):
    """Shell prefix giving the job its one card (empty where the allocation does)."""
    return kit_cards.pin(card_of(wildcards))


def card_resources():
    """gpu_<i>=1 on the job's card i and 0 on the others, for every GPU rule's resources:, so that
    `--resources gpu_<i>=N` can bound each card's jobs. None where the allocation picks the card."""
    return {
        kit_cards.resource(gpu): (lambda wildcards, gpu=gpu: int(card_of(wildcards) == gpu))
        for gpu in GPUS or []
    }


def card_record_files():
    """Environment and ceilings of every card after the first (the first's are the run's own)."""
    return [
        paths.path(template, run=RUN, gpu=gpu, ceiling=kind)
        for gpu in (GPUS or [])[1:]
        for template, kind in [(paths.CARD_ENVIRONMENT, None)]
        + [(paths.CARD_CEILING, kind) for kind in ceiling_kinds()]
    ]
