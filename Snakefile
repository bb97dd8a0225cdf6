# kernelkit: reproducible GPU kernel experiments. README.md explains how to run it;
# config/README.md explains every configuration key.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/guards.smk"
include: "workflow/rules/environment.smk"
include: "workflow/rules/correctness.smk"
include: "workflow/rules/timing.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/diff.smk"


onstart:
    before_first_job()


onsuccess:
    release_scheduler_timers()


onerror:
    after_failure()


rule all:
    default_target: True
    input:
        all_targets(),
