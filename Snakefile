# kernelkit: reproducible GPU kernel experiments. README.md explains how to run it;
# config/README.md explains every configuration key.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/environment.smk"
include: "workflow/rules/checks.smk"
include: "workflow/rules/timing.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/diff.smk"


onstart:
    from kernelkit import guards

    problem = guards.before_first_job(list(workflow.dag.needrun_jobs()), RUN, RUN_DIR, FROZEN, workflow.local_exec)
    if problem:
        refuse(problem)
    guards.stop_jobs_on_signals()


onerror:
    from kernelkit import guards

    for line in guards.failure_lines(workflow.scheduler.failed):
        print(line, file=sys.stderr)


rule all:
    default_target: True
    input:
        PLAN.all_targets(GPUS),
